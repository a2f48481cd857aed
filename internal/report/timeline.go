package report

import (
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/headroom-dev/headroom/internal/results"
)

// runTimelines is one run's per-step timelines for the page (one per run,
// in the runs' order; none for a run without samples): opened from
// the summary charts (a click on a worker count) and the steps table.
type runTimelines struct {
	Label string         `json:"label"`
	Steps []stepTimeline `json:"steps"`
}

type stepTimeline struct {
	Index   int    `json:"index"`
	Workers int    `json:"workers"`
	Repeat  int    `json:"repeat"`
	Charts  []spec `json:"charts"`
}

// timelines builds every step's charts over its seconds, from the step's
// release (workers.jsonl and timeline.jsonl; a run without them, such as
// a simulated one, has none): each worker's pages/s, the node's swap
// traffic, its memory pressure, and each VM's balloon where one moved.
func timelines(runs []Run) []runTimelines {
	var out []runTimelines
	for _, r := range runs {
		rt := runTimelines{Label: r.Label}
		byStep := map[int][]results.WorkerInterval{}
		for _, w := range r.Intervals {
			byStep[w.Step] = append(byStep[w.Step], w)
		}
		samples := map[int][]results.Sample{}
		for _, s := range r.Timeline {
			samples[s.Step] = append(samples[s.Step], s)
		}
		for _, st := range r.Steps {
			var charts []spec
			sec := func(t time.Time) float64 { return t.Sub(st.Started).Seconds() }
			if c, ok := workerRates(st, byStep[st.Index], sec); ok {
				charts = append(charts, c)
			}
			charts = append(charts, nodeTimelines(samples[st.Index], sec)...)
			if len(charts) > 0 {
				rt.Steps = append(rt.Steps, stepTimeline{Index: st.Index, Workers: st.Workers, Repeat: st.Repeat, Charts: charts})
			}
		}
		out = append(out, rt)
	}
	return out
}

// timelineSpec is a timeline chart: interactive only (no PNG).
func timelineSpec(name, title, y string, logY bool) *spec {
	return &spec{Name: name, Title: title, X: "seconds after the step's workers were released", Y: y, LogY: logY}
}

// workerRates: each worker's pages/s per interval (only its repeat's).
func workerRates(st results.Step, ivs []results.WorkerInterval, sec func(time.Time) float64) (spec, bool) {
	f := timelineSpec("pages", "Pages/s per worker", "pages/s (log)", true)
	per := map[string]plotter.XYs{}
	for _, w := range ivs {
		if w.Repeat == st.Repeat {
			per[w.Worker] = append(per[w.Worker], plotter.XY{X: sec(w.Time), Y: floor(w.PagesPerSec)})
		}
	}
	for i, name := range sortedKeys(per) {
		f.add(name, runColor(i), nil, true, false, specPoints(per[name]))
	}
	f.align()
	return *f, len(per) > 0
}

// nodeTimelines: the node's swap-in and swap-out pages/s and its PSI
// stall shares, each second (differences of the cumulative counters), and
// each VM's balloon (the memory it leaves the guest) where one moved.
func nodeTimelines(samples []results.Sample, sec func(time.Time) float64) []spec {
	if len(samples) < 2 {
		return nil
	}
	swap := timelineSpec("swap", "Node swap traffic", "pages/s (log)", true)
	psi := timelineSpec("psi", "Node memory pressure (PSI)", "stall share (%)", false)
	var in, out, some, full plotter.XYs
	for k := 1; k < len(samples); k++ {
		a, b := samples[k-1], samples[k]
		dt := b.Time.Sub(a.Time).Seconds()
		if dt <= 0 || b.PswpIn < a.PswpIn || b.PSISomeMicros < a.PSISomeMicros {
			continue
		}
		x := sec(b.Time)
		in = append(in, plotter.XY{X: x, Y: floor(float64(b.PswpIn-a.PswpIn) / dt)})
		out = append(out, plotter.XY{X: x, Y: floor(float64(b.PswpOut-a.PswpOut) / dt)})
		some = append(some, plotter.XY{X: x, Y: float64(b.PSISomeMicros-a.PSISomeMicros) / dt / 1e4})
		full = append(full, plotter.XY{X: x, Y: float64(b.PSIFullMicros-a.PSIFullMicros) / dt / 1e4})
	}
	swap.add("swap-in pages/s", runColor(0), nil, true, false, specPoints(in))
	swap.add("swap-out pages/s", runColor(1), nil, true, false, specPoints(out))
	psi.add("some", runColor(0), nil, true, false, specPoints(some))
	psi.add("full", runColor(1), nil, true, false, specPoints(full))
	charts := []spec{*swap, *psi}

	balloon := timelineSpec("balloon", "Memory each VM's balloon leaves its guest", "MiB", false)
	per := map[string]plotter.XYs{}
	moved := false
	for _, s := range samples {
		for _, w := range s.Workers {
			if w.Guest == nil || w.Guest.BalloonActualBytes == 0 {
				continue
			}
			pts := per[w.Name]
			mib := float64(w.Guest.BalloonActualBytes) / (1 << 20)
			moved = moved || len(pts) > 0 && math.Abs(pts[0].Y-mib) >= 1
			per[w.Name] = append(pts, plotter.XY{X: sec(s.Time), Y: mib})
		}
	}
	if moved {
		for i, name := range sortedKeys(per) {
			balloon.add(name, runColor(i), nil, true, false, specPoints(per[name]))
		}
		charts = append(charts, *balloon)
	}
	for i := range charts {
		charts[i].align()
	}
	return charts
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
