package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// chart is one figure: drawn by gonum/plot into a PNG, and handed to the
// page's interactive charts as a spec, both from the same points (the
// helpers below add every line to both).
type chart struct {
	name, title string
	f           *fig
}

// fig is a chart being built: the gonum plot, its legend entries (drawn
// below the plot, never over the data) and the interactive chart's spec.
type fig struct {
	p      *plot.Plot
	legend []legendEntry
	s      spec
}

type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

func (f *fig) legendAdd(label string, thumbs ...plot.Thumbnailer) {
	f.legend = append(f.legend, legendEntry{label, thumbs})
}

// workersX makes the x axis one of worker counts.
func (f *fig) workersX() {
	f.p.X.Tick.Marker = workerTicks{}
	f.s.WorkersX = true
}

const chartWidth, chartHeight = 10 * vg.Inch, 5.5 * vg.Inch

// legendColumns: a legend longer than this many entries is set in two
// columns.
const legendColumns = 8

func (c chart) render(format string) ([]byte, error) {
	p := c.f.p
	if _, ok := p.Y.Scale.(plot.LogScale); ok {
		// A log axis needs a positive range of some width: no data, or
		// every value equal (all at the floor), leaves none.
		// (An empty plot's range is +Inf..-Inf.)
		if !(p.Y.Min >= logFloor) || math.IsInf(p.Y.Min, 1) {
			p.Y.Min = logFloor
		}
		if !(p.Y.Max > p.Y.Min) || math.IsInf(p.Y.Max, 0) {
			p.Y.Max = 10 * p.Y.Min
		}
	}
	// The legend goes below the plot, in one or two columns; the image
	// grows by its height.
	var cols []*plot.Legend
	per := len(c.f.legend)
	if per > legendColumns {
		per = (per + 1) / 2
	}
	var legendHeight vg.Length
	for i := 0; i < len(c.f.legend); i += per {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		for _, e := range c.f.legend[i:min(i+per, len(c.f.legend))] {
			l.Add(e.label, e.thumbs...)
		}
		cols = append(cols, &l)
		legendHeight = max(legendHeight, l.Rectangle(draw.Canvas{}).Size().Y)
	}
	if legendHeight > 0 {
		legendHeight += 2 * legendMargin
	}
	cv, err := draw.NewFormattedCanvas(chartWidth, chartHeight+legendHeight, format)
	if err != nil {
		return nil, fmt.Errorf("render %s chart: %w", c.name, err)
	}
	dc := draw.New(cv)
	p.Draw(draw.Crop(dc, 0, 0, legendHeight, 0))
	strip := dc
	strip.Max.Y = strip.Min.Y + legendHeight - legendMargin
	colWidth := (chartWidth - 2*legendMargin) / vg.Length(max(len(cols), 1))
	for i, l := range cols {
		col := strip
		col.Min.X = legendMargin + vg.Length(i)*colWidth
		col.Max.X = col.Min.X + colWidth
		l.Draw(col)
	}
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render %s chart: %w", c.name, err)
	}
	return buf.Bytes(), nil
}

const legendMargin = 8 * vg.Millimeter / 2

// logFloor keeps zero rates plottable on a log axis.
const logFloor = 1

func floor(v float64) float64 { return math.Max(v, logFloor) }

// newPlot makes a chart being built, its y axis labelled in SI (100M, not
// 1e+08).
func newPlot(title, x, y string, logY bool) *fig {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Y.Tick.Marker = siTicks{plot.DefaultTicks{}}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = siTicks{plot.LogTicks{Prec: -1}}
	}
	return &fig{p: p, s: spec{Title: title, X: x, Y: y, LogY: logY}}
}

// siTicks relabels another ticker's labelled ticks in SI.
type siTicks struct{ plot.Ticker }

func (t siTicks) Ticks(min, max float64) []plot.Tick {
	ticks := t.Ticker.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = siNumber(ticks[i].Value)
		}
	}
	return ticks
}

// siNumber writes a number with an SI suffix and at most three
// significant digits: 100M, 2.5k, 0.25 (assets/report.js's si() is the
// same for the interactive charts).
func siNumber(v float64) string {
	v = roundSignificant(v, 3) // first: 999.6 is 1k, not 1000
	a := math.Abs(v)
	for _, u := range []struct {
		scale  float64
		suffix string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.scale {
			return strconv.FormatFloat(roundSignificant(v/u.scale, 3), 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatFloat(roundSignificant(v, 3), 'f', -1, 64)
}

func roundSignificant(v float64, digits int) float64 {
	if v == 0 {
		return 0
	}
	mag := math.Pow(10, float64(digits-1)-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}

// workerTicks puts a labelled tick at every worker count on an axis of at
// most 20 of them, and the default ticks on a longer one.
type workerTicks struct{}

// maxEveryWorkerTicks is the longest worker axis ticked at every count.
const maxEveryWorkerTicks = 20

func (workerTicks) Ticks(min, max float64) []plot.Tick {
	lo, hi := math.Ceil(min), math.Floor(max)
	if hi-lo+1 > maxEveryWorkerTicks || hi < lo {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	var ticks []plot.Tick
	for v := lo; v <= hi; v++ {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

func runColor(i int) color.Color { return plotutil.Color(i) }

// cssDashes are a line's dashes in the page's pixels.
func cssDashes(d []vg.Length) []float64 {
	var out []float64
	for _, l := range d {
		out = append(out, float64(l/vg.Points(1)))
	}
	return out
}

func specPoints(pts plotter.XYs) [][2]float64 {
	out := make([][2]float64, len(pts))
	for i, p := range pts {
		out[i] = [2]float64{p.X, p.Y}
	}
	return out
}

func addLine(f *fig, label string, pts plotter.XYs, c color.Color, dashes []vg.Length, shape int) {
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
	f.p.Add(l, s)
	f.legendAdd(label, l, s)
	f.s.add(label, c, cssDashes(dashes), true, true, specPoints(pts))
}

// vline marks x on a log or linear y axis spanning [lo, hi].
func vline(f *fig, x, lo, hi float64, c color.Color, label string) {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
	if err != nil {
		return
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	f.p.Add(l)
	if label != "" {
		f.legendAdd(label, l)
	}
	f.s.Marks = append(f.s.Marks, specMark{X: x, Label: label, Color: cssColor(c)})
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
	p := newPlot("Creation rate", "objects created at once", "Running per minute", false)
	stepChart(p, runs, false, series{"Running/min", func(s results.Step) float64 { return s.CreationRatePerMinute }})
	return chart{name: "creation-rate", title: "VMIs reaching Running per minute, per step", f: p}
}

// hasVMs reports whether any run's workers were VMs (qemu backend).
func hasVMs(runs []Run) bool {
	return anyStep(runs, func(s results.Step) bool { return len(s.CreatePhases) > 0 })
}

// aggregateChart: aggregate pages/s vs workers, log scale, with regime
// boundaries and the swap device's random-read rate.
func aggregateChart(runs []Run) chart {
	p := newPlot("Aggregate pages/s", "workers", "pages/s (log)", true)
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
			pts := plotter.XYs{{X: 1, Y: iops}, {X: math.Max(maxX, 2), Y: iops}}
			l, err := plotter.NewLine(pts)
			if err == nil {
				l.Color = c
				l.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
				l.Width = vg.Points(2)
				p.p.Add(l)
				label := fmt.Sprintf("%s: swap device 4 KiB random read (%s IOPS)", r.Label, units.FormatRate(iops))
				p.legendAdd(label, l)
				p.s.add(label, c, cssDashes(l.Dashes), true, false, specPoints(pts)).Width = 2
			}
		}
	}
	p.workersX()
	return chart{name: "aggregate", title: "Aggregate pages/s vs workers", f: p}
}

// perWorkerChart: every worker's pages/s per step, showing the spread
// (lucky and unlucky workers in the transition).
func perWorkerChart(runs []Run) chart {
	p := newPlot("Per-worker pages/s", "workers", "pages/s per worker (log)", true)
	for i, r := range runs {
		// raw at each worker count (the interactive chart's), pts beside
		// it by run (the PNG's, so runs' dots do not cover each other).
		var pts, raw plotter.XYs
		offset := (float64(i) - float64(len(runs)-1)/2) * 0.15
		for _, s := range r.Steps {
			for _, w := range s.PerWorker {
				if w.Error == "" {
					raw = append(raw, plotter.XY{X: float64(s.Workers), Y: floor(w.PagesPerSec)})
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
		p.p.Add(sc)
		p.legendAdd(r.Label, sc)
		// A pointer reads the spread: the slowest, median and fastest
		// worker of each step.
		lo, mid, hi := spread(specPoints(raw))
		dashes := cssDashes(runDashes(r))
		p.s.add(r.Label+": slowest", sc.Color, []float64{2, 3}, true, true, lo)
		p.s.add(r.Label+": median", sc.Color, dashes, true, true, mid)
		p.s.add(r.Label+": fastest", sc.Color, []float64{2, 3}, true, true, hi)
	}
	p.workersX()
	return chart{name: "per-worker", title: "Per-worker pages/s spread per step", f: p}
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
func stepChart(p *fig, runs []Run, logY bool, ss ...series) {
	p.workersX()
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
	p := newPlot("Swap traffic and major faults", "workers", "per second (log)", true)
	stepChart(p, runs, true,
		series{"swap-in pages/s", func(s results.Step) float64 { return s.SwapInPagesPerSec }},
		series{"swap-out pages/s", func(s results.Step) float64 { return s.SwapOutPagesPerSec }},
		series{"major faults/s", func(s results.Step) float64 { return s.MajorFaultsPerSec }})
	return chart{name: "swap", title: "Swap-in/out and major faults per step", f: p}
}

// psiChart: memory pressure (PSI) per step.
func psiChart(runs []Run) chart {
	p := newPlot("Memory pressure (PSI)", "workers", "stall share of the step (%)", false)
	stepChart(p, runs, false,
		series{"some", func(s results.Step) float64 { return s.PSISomePercent }},
		series{"full", func(s results.Step) float64 { return s.PSIFullPercent }})
	return chart{name: "psi", title: "Memory pressure per step", f: p}
}

// hasCPU reports whether any step recorded the node's busy CPU (runs
// before it was recorded did not).
func hasCPU(runs []Run) bool {
	return anyStep(runs, func(s results.Step) bool { return s.CPUBusyCores > 0 })
}

// cpuChart: the node's busy cores per step: what the workload, paging,
// the VMs and the levers cost in CPU.
func cpuChart(runs []Run) chart {
	p := newPlot("Node CPU", "workers", "cores busy (mean over the step)", false)
	stepChart(p, runs, false, series{"busy", func(s results.Step) float64 { return s.CPUBusyCores }})
	return chart{name: "cpu", title: "The node's busy CPU cores per step", f: p}
}

// latencyChart: creation-to-ready latency p50/p95/p99 per step (exact).
func latencyChart(runs []Run) chart {
	p := newPlot("Creation-to-ready latency", "workers (VMIs: creation to Running)", "seconds", false)
	stepChart(p, runs, false,
		series{"p50", func(s results.Step) float64 { return s.CreateP50Seconds }},
		series{"p95", func(s results.Step) float64 { return s.CreateP95Seconds }},
		series{"p99", func(s results.Step) float64 { return s.CreateP99Seconds }})
	return chart{name: "latency", title: "Creation-to-ready latency p50/p95/p99 per step", f: p}
}

// vmPhasesChart: latency by phase: the p95 of each VM start-up phase per
// step, seconds after creation: for micro-VMs QMP ready, guest booted,
// command started, ready; for KubeVirt VMIs Pending, Scheduling,
// Scheduled, Running, ready.
func vmPhasesChart(runs []Run) chart {
	p := newPlot("VM start-up phases (p95)", "VMs started at once", "seconds after creation", false)
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
	return chart{name: "vm-phases", title: "VM start-up phases, p95 per step", f: p}
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
	p := newPlot("VM memory on the host (mean per VM)", "VMs", "MiB", false)
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
	return chart{name: "vm-memory", title: "VM memory on the host per step: QEMU RSS, guest RAM, overhead", f: p}
}
