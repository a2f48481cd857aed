package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// chart is a plot ready to render in several formats.
type chart struct {
	name, title string
	p           *plot.Plot
}

const chartWidth, chartHeight = 10 * vg.Inch, 5.5 * vg.Inch

func (c chart) render(format string) ([]byte, error) {
	if _, ok := c.p.Y.Scale.(plot.LogScale); ok {
		// A log axis needs a positive range of some width: no data, or
		// every value equal (all at the floor), leaves none.
		// (An empty plot's range is +Inf..-Inf.)
		if !(c.p.Y.Min >= logFloor) || math.IsInf(c.p.Y.Min, 1) {
			c.p.Y.Min = logFloor
		}
		if !(c.p.Y.Max > c.p.Y.Min) || math.IsInf(c.p.Y.Max, 0) {
			c.p.Y.Max = 10 * c.p.Y.Min
		}
	}
	w, err := c.p.WriterTo(chartWidth, chartHeight, format)
	if err != nil {
		return nil, fmt.Errorf("render %s chart: %w", c.name, err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render %s chart: %w", c.name, err)
	}
	return buf.Bytes(), nil
}

// logFloor keeps zero rates plottable on a log axis.
const logFloor = 1

func floor(v float64) float64 { return math.Max(v, logFloor) }

// newPlot makes a plot; the legend goes in the corner the data usually
// leaves empty: top right for falling curves, top left for rising ones.
func newPlot(title, x, y string, logY, legendLeft bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = legendLeft
	p.Add(plotter.NewGrid())
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	return p
}

func runColor(i int) color.Color { return plotutil.Color(i) }

func addLine(p *plot.Plot, label string, pts plotter.XYs, c color.Color, dashes []vg.Length, shape int) {
	if len(pts) == 0 {
		return
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return
	}
	l.Color, s.Color = c, c
	l.Dashes = dashes
	s.Shape = plotutil.Shape(shape)
	p.Add(l, s)
	p.Legend.Add(label, l, s)
}

// vline marks x on a log or linear y axis spanning [lo, hi].
func vline(p *plot.Plot, x, lo, hi float64, c color.Color, label string) {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
	if err != nil {
		return
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
}

func drawCharts(runs []Run) ([]chart, error) {
	if controlPlaneOnly(runs) {
		// KubeVirt density measures the control plane: no pages/s, no swap.
		return []chart{latencyChart(runs), vmPhasesChart(runs), creationRateChart(runs)}, nil
	}
	charts := []chart{aggregateChart(runs), perWorkerChart(runs), swapChart(runs), psiChart(runs)}
	if hasCPU(runs) {
		charts = append(charts, cpuChart(runs))
	}
	charts = append(charts, latencyChart(runs))
	if hasVMs(runs) {
		charts = append(charts, vmPhasesChart(runs), vmMemoryChart(runs))
	}
	guests := false
	for i, r := range runs {
		if hasBalloon(r) {
			charts = append(charts, balloonChart(i, r))
		}
		guests = guests || hasGuestStats(r)
	}
	if guests {
		charts = append(charts, guestPageInsChart(runs))
	}
	return charts, nil
}

// controlPlaneOnly reports whether every run is a KubeVirt density run
// without a workload (creation to Running on a cluster, no pages/s).
func controlPlaneOnly(runs []Run) bool {
	for _, r := range runs {
		if r.Params["backend"] != "kubevirt" {
			return false
		}
	}
	return !anyStep(runs, func(s results.Step) bool { return s.AggregatePagesPerSec > 0 })
}

// anyStep reports whether a step of any run is so.
func anyStep(runs []Run, is func(results.Step) bool) bool {
	for _, r := range runs {
		for _, s := range r.Steps {
			if is(s) {
				return true
			}
		}
	}
	return false
}

// creationRateChart: objects reaching Running per minute per step, from
// the first create request to the last Running.
func creationRateChart(runs []Run) chart {
	p := newPlot("Creation rate", "objects created at once", "Running per minute", false, true)
	stepChart(p, runs, false, series{"Running/min", func(s results.Step) float64 { return s.CreationRatePerMinute }})
	return chart{name: "creation-rate", title: "VMIs reaching Running per minute, per step", p: p}
}

// hasVMs reports whether any run's workers were VMs (qemu backend).
func hasVMs(runs []Run) bool {
	return anyStep(runs, func(s results.Step) bool { return len(s.CreatePhases) > 0 })
}

// aggregateChart: aggregate pages/s vs workers, log scale, with regime
// boundaries and the swap device's random-read rate.
func aggregateChart(runs []Run) chart {
	p := newPlot("Aggregate pages/s", "workers", "pages/s (log)", true, false)
	lo, hi, maxX := math.Inf(1), 0.0, 0.0
	for _, r := range runs {
		for _, pt := range r.Points() {
			lo, hi = math.Min(lo, floor(pt.PagesPerSec)), math.Max(hi, pt.PagesPerSec)
			maxX = math.Max(maxX, float64(pt.Workers))
		}
		lo = math.Min(lo, floor(r.Node.SwapReadIOPS))
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	for i, r := range runs {
		var pts plotter.XYs
		curve := results.Curve(r.Points())
		for _, pt := range curve {
			pts = append(pts, plotter.XY{X: float64(pt.Workers), Y: floor(pt.PagesPerSec)})
		}
		c := runColor(i)
		addLine(p, r.Label, pts, c, runDashes(r), i)
		// The knee is only a boundary if the curve went on past it.
		if k := r.Regimes.KneeWorkers; k > 0 && len(curve) > 0 && k < curve[len(curve)-1].Workers {
			vline(p, float64(k)+0.5, lo, hi, c, fmt.Sprintf("%s: RAM | transition", r.Label))
		}
		if s := r.Regimes.PlateauStartWorkers; s > 0 {
			vline(p, float64(s)-0.5, lo, hi, c, fmt.Sprintf("%s: transition | plateau", r.Label))
		}
		if iops := r.Node.SwapReadIOPS; iops > 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: 1, Y: iops}, {X: math.Max(maxX, 2), Y: iops}})
			if err == nil {
				l.Color = c
				l.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
				l.Width = vg.Points(2)
				p.Add(l)
				p.Legend.Add(fmt.Sprintf("%s: swap device 4 KiB random read (%s IOPS)", r.Label, units.FormatRate(iops)), l)
			}
		}
	}
	return chart{name: "aggregate", title: "Aggregate pages/s vs workers", p: p}
}

// perWorkerChart: every worker's pages/s per step, showing the spread
// (lucky and unlucky workers in the transition).
func perWorkerChart(runs []Run) chart {
	p := newPlot("Per-worker pages/s", "workers", "pages/s per worker (log)", true, false)
	for i, r := range runs {
		var pts plotter.XYs
		offset := (float64(i) - float64(len(runs)-1)/2) * 0.15
		for _, s := range r.Steps {
			for _, w := range s.PerWorker {
				if w.Error == "" {
					pts = append(pts, plotter.XY{X: float64(s.Workers) + offset, Y: floor(w.PagesPerSec)})
				}
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			continue
		}
		sc.Color = runColor(i)
		sc.Shape = draw.CircleGlyph{}
		if r.Kind == "sim" {
			sc.Shape = draw.RingGlyph{} // simulated: hollow, measured: filled
		}
		sc.Radius = vg.Points(2.5)
		p.Add(sc)
		p.Legend.Add(r.Label, sc)
	}
	return chart{name: "per-worker", title: "Per-worker pages/s spread per step", p: p}
}

// runDashes draws a simulated run dashed and a measured one solid, so the
// two overlay on one chart.
func runDashes(r Run) []vg.Length {
	if r.Kind == "sim" {
		return []vg.Length{vg.Points(6), vg.Points(4)}
	}
	return nil
}

// series is one per-step value drawn for every run.
type series struct {
	label string
	value func(results.Step) float64
}

// dashes per series position: solid, dashed, dotted.
var seriesDashes = [][]vg.Length{nil, {vg.Points(5), vg.Points(3)}, {vg.Points(1), vg.Points(2)}}

// stepChart draws each series per step for every run, one colour per run.
func stepChart(p *plot.Plot, runs []Run, logY bool, ss ...series) {
	for i, r := range runs {
		for j, s := range ss {
			var pts plotter.XYs
			for _, st := range r.Steps {
				y := s.value(st)
				if logY {
					y = floor(y)
				}
				pts = append(pts, plotter.XY{X: float64(st.Workers), Y: y})
			}
			addLine(p, r.Label+": "+s.label, pts, runColor(i), seriesDashes[j%len(seriesDashes)], j)
		}
	}
}

// swapChart: node swap-in, swap-out and major faults per step.
func swapChart(runs []Run) chart {
	p := newPlot("Swap traffic and major faults", "workers", "per second (log)", true, true)
	stepChart(p, runs, true,
		series{"swap-in pages/s", func(s results.Step) float64 { return s.SwapInPagesPerSec }},
		series{"swap-out pages/s", func(s results.Step) float64 { return s.SwapOutPagesPerSec }},
		series{"major faults/s", func(s results.Step) float64 { return s.MajorFaultsPerSec }})
	return chart{name: "swap", title: "Swap-in/out and major faults per step", p: p}
}

// psiChart: memory pressure (PSI) per step.
func psiChart(runs []Run) chart {
	p := newPlot("Memory pressure (PSI)", "workers", "stall share of the step (%)", false, true)
	stepChart(p, runs, false,
		series{"some", func(s results.Step) float64 { return s.PSISomePercent }},
		series{"full", func(s results.Step) float64 { return s.PSIFullPercent }})
	return chart{name: "psi", title: "Memory pressure per step", p: p}
}

// hasCPU reports whether any step recorded the node's busy CPU (runs
// before it was recorded did not).
func hasCPU(runs []Run) bool {
	return anyStep(runs, func(s results.Step) bool { return s.CPUBusyCores > 0 })
}

// cpuChart: the node's busy cores per step: what the workload, paging,
// the VMs and the levers cost in CPU.
func cpuChart(runs []Run) chart {
	p := newPlot("Node CPU", "workers", "cores busy (mean over the step)", false, true)
	stepChart(p, runs, false, series{"busy", func(s results.Step) float64 { return s.CPUBusyCores }})
	return chart{name: "cpu", title: "The node's busy CPU cores per step", p: p}
}

// latencyChart: creation-to-ready latency p50/p95/p99 per step (exact).
func latencyChart(runs []Run) chart {
	p := newPlot("Creation-to-ready latency", "workers (VMIs: creation to Running)", "seconds", false, true)
	stepChart(p, runs, false,
		series{"p50", func(s results.Step) float64 { return s.CreateP50Seconds }},
		series{"p95", func(s results.Step) float64 { return s.CreateP95Seconds }},
		series{"p99", func(s results.Step) float64 { return s.CreateP99Seconds }})
	return chart{name: "latency", title: "Creation-to-ready latency p50/p95/p99 per step", p: p}
}

// vmPhasesChart: latency by phase: the p95 of each VM start-up phase per
// step, seconds after creation: for micro-VMs QMP ready, guest booted,
// command started, ready; for KubeVirt VMIs Pending, Scheduling,
// Scheduled, Running, ready.
func vmPhasesChart(runs []Run) chart {
	p := newPlot("VM start-up phases (p95)", "VMs started at once", "seconds after creation", false, true)
	phases := phaseNames(runs)
	var ss []series
	for _, ph := range phases {
		ss = append(ss, series{ph, func(s results.Step) float64 {
			for _, q := range s.CreatePhases {
				if q.Phase == ph {
					return q.P95Seconds
				}
			}
			return 0
		}})
	}
	stepChart(p, runs, false, ss...)
	return chart{name: "vm-phases", title: "VM start-up phases, p95 per step", p: p}
}

// phaseNames are the start-up phases the runs recorded, in their order.
func phaseNames(runs []Run) []string {
	var phases []string
	seen := map[string]bool{results.PhaseQEMUStarted: true} // QEMU's own start is too quick to show
	for _, r := range runs {
		for _, s := range r.Steps {
			for _, q := range s.CreatePhases {
				if !seen[q.Phase] {
					seen[q.Phase] = true
					phases = append(phases, q.Phase)
				}
			}
		}
	}
	return phases
}

// vmMemoryChart: per VM, the mean of QEMU's resident memory, the guest RAM
// it backs, and the overhead beyond it, in the last sample of each step's
// measured phase.
func vmMemoryChart(runs []Run) chart {
	p := newPlot("VM memory on the host (mean per VM)", "VMs", "MiB", false, true)
	mean := func(f func(results.WorkerSample) uint64) func(results.Step) float64 {
		return func(s results.Step) float64 {
			var sum float64
			n := 0
			for _, w := range s.PerWorker {
				if w.VM != nil && w.VM.Host != nil {
					sum += float64(f(*w.VM.Host))
					n++
				}
			}
			if n == 0 {
				return 0
			}
			return sum / float64(n) / (1 << 20)
		}
	}
	stepChart(p, runs, false,
		series{"QEMU RSS", mean(func(h results.WorkerSample) uint64 { return h.QEMURSSBytes })},
		series{"guest RAM resident", mean(func(h results.WorkerSample) uint64 { return h.GuestRAMBytes })},
		series{"overhead", mean(func(h results.WorkerSample) uint64 { return h.OverheadBytes })})
	return chart{name: "vm-memory", title: "VM memory on the host per step: QEMU RSS, guest RAM, overhead", p: p}
}
