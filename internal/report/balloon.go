package report

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/headroom-dev/headroom/internal/policy"
)

// memStateColors shade the node's memory states, from plenty (green) to
// critical (red), light enough for the lines drawn over them.
var memStateColors = map[string]color.Color{
	policy.MemHigh:  color.NRGBA{R: 0x2e, G: 0xa0, B: 0x43, A: 0x30},
	policy.MemClear: color.NRGBA{R: 0x9a, G: 0xc8, B: 0x3c, A: 0x30},
	policy.MemSoft:  color.NRGBA{R: 0xf2, G: 0xc2, B: 0x1b, A: 0x40},
	policy.MemHard:  color.NRGBA{R: 0xf0, G: 0x7f, B: 0x1a, A: 0x40},
	policy.MemLow:   color.NRGBA{R: 0xd6, G: 0x28, B: 0x28, A: 0x40},
}

var memStateOrder = []string{policy.MemHigh, policy.MemClear, policy.MemSoft, policy.MemHard, policy.MemLow}

// hasBalloon reports whether the agent of a run drove balloons.
func hasBalloon(r Run) bool {
	for _, d := range r.Decisions {
		if d.Action == policy.ActionSetBalloon || d.Action == policy.ActionMemoryState {
			return true
		}
	}
	return false
}

// runStart is the time axis's zero: the first timeline sample.
func runStart(r Run) time.Time {
	if len(r.Timeline) > 0 {
		return r.Timeline[0].Time
	}
	return r.StartedAt
}

// balloonChart is the seed's Figure 7 for one run: per VM, the memory its
// balloon grants (solid, from the guest's balloon as QEMU reports it) and
// the agent's target (dashed), over the node's memory state.
func balloonChart(i int, r Run) chart {
	p := newPlot("Balloon: granted memory and target per VM — "+r.Label, "seconds into the run", "MiB", false)
	t0 := runStart(r)
	sec := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	// granted holds each VM name's line segments: a new segment per step
	// (a step's VMs are new guests that reuse the names).
	granted := map[string][]plotter.XYs{}
	lastStep := map[string]int{}
	end, top := 0.0, 0.0
	for _, s := range r.Timeline {
		end = math.Max(end, sec(s.Time))
		for _, w := range s.Workers {
			if w.Guest == nil || w.Guest.BalloonActualBytes == 0 {
				continue
			}
			mib := float64(w.Guest.BalloonActualBytes) / (1 << 20)
			segs := granted[w.Name]
			if step, ok := lastStep[w.Name]; !ok || step != s.Step {
				segs = append(segs, nil)
			}
			segs[len(segs)-1] = append(segs[len(segs)-1], plotter.XY{X: sec(s.Time), Y: mib})
			granted[w.Name], lastStep[w.Name] = segs, s.Step
			top = math.Max(top, mib)
		}
	}
	targets := map[string]plotter.XYs{}
	var changes []policy.Decision
	for _, d := range r.Decisions {
		switch {
		case d.Action == policy.ActionSetBalloon && d.Balloon != nil:
			mib := float64(d.Balloon.TargetBytes) / (1 << 20)
			pts := targets[d.Workload]
			if n := len(pts); n > 0 { // a step: the old target until now
				pts = append(pts, plotter.XY{X: sec(d.Time), Y: pts[n-1].Y})
			} else if g := granted[d.Workload]; len(g) > 0 { // no balloon before the first target
				max := float64(d.Balloon.MaxBytes) / (1 << 20)
				pts = plotter.XYs{{X: g[0][0].X, Y: max}, {X: sec(d.Time), Y: max}}
			}
			targets[d.Workload] = append(pts, plotter.XY{X: sec(d.Time), Y: mib})
			top = math.Max(top, float64(d.Balloon.MaxBytes)/(1<<20))
		case d.Action == policy.ActionMemoryState && d.MemoryState != nil:
			changes = append(changes, d)
		}
	}
	top *= 1.1
	shadeMemoryStates(p, changes, sec, end, top)
	names := make([]string, 0, len(granted))
	for name := range granted {
		names = append(names, name)
	}
	for name := range targets {
		if _, ok := granted[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for j, name := range names {
		c := runColor(j)
		// One legend entry and one interactive series per name, its
		// steps' segments apart.
		var joined [][2]float64
		for k, seg := range granted[name] {
			label := name + " granted"
			if k > 0 {
				label = ""
				prev := granted[name][k-1]
				joined = append(joined, [2]float64{(prev[len(prev)-1].X + seg[0].X) / 2, math.NaN()})
			}
			addPlotLine(p, label, seg, c, nil)
			joined = append(joined, specPoints(seg)...)
		}
		if len(joined) > 0 {
			p.s.add(name+" granted", c, nil, true, false, joined)
		}
		if pts := targets[name]; len(pts) > 0 {
			pts = append(pts, plotter.XY{X: end, Y: pts[len(pts)-1].Y})
			addTimeLine(p, name+" target", pts, c, []vg.Length{vg.Points(5), vg.Points(3)})
		}
	}
	p.p.Y.Min, p.p.Y.Max = 0, top
	return chart{name: fmt.Sprintf("balloon-%d", i+1), title: "Balloon targets and granted memory per VM over the node's memory state: " + r.Label, f: p}
}

// shadeMemoryStates draws each memory state's time span as a band, with a
// legend entry per state that occurs.
func shadeMemoryStates(p *fig, changes []policy.Decision, sec func(time.Time) float64, end, top float64) {
	seen := map[string]*plotter.Polygon{}
	for k, d := range changes {
		from, to := sec(d.Time), end
		if k+1 < len(changes) {
			to = sec(changes[k+1].Time)
		}
		if to <= from {
			continue
		}
		band, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: top}, {X: from, Y: top}})
		if err != nil {
			continue
		}
		band.Color = memStateColors[d.MemoryState.To]
		band.LineStyle.Width = 0
		p.p.Add(band)
		seen[d.MemoryState.To] = band
		p.s.Bands = append(p.s.Bands, specBand{From: from, To: to, Label: "node " + d.MemoryState.To, Color: cssColor(band.Color)})
	}
	for _, st := range memStateOrder {
		if band := seen[st]; band != nil {
			p.legendAdd("node "+st, band)
		}
	}
}

// guestPageInsChart: per run, the guests' major faults per second (their
// page-ins: swap-ins and file reads) summed over the run's VMs, over time.
func guestPageInsChart(runs []Run) chart {
	p := newPlot("Guest page-ins (major faults/s, all VMs)", "seconds into the run", "faults/s (log)", true)
	for i, r := range runs {
		t0 := runStart(r)
		var pts plotter.XYs
		prev := map[string]int64{}
		var prevT time.Time
		for _, s := range r.Timeline {
			var faults float64
			seen := false
			for _, w := range s.Workers {
				if w.Guest == nil || w.Guest.MajorFaults < 0 {
					continue
				}
				if last, ok := prev[w.Name]; ok && w.Guest.MajorFaults >= last && !prevT.IsZero() {
					faults += float64(w.Guest.MajorFaults - last)
					seen = true
				}
				prev[w.Name] = w.Guest.MajorFaults
			}
			if dt := s.Time.Sub(prevT).Seconds(); seen && dt > 0 {
				pts = append(pts, plotter.XY{X: s.Time.Sub(t0).Seconds(), Y: floor(faults / dt)})
			}
			prevT = s.Time
		}
		addTimeLine(p, r.Label, pts, runColor(i), nil)
	}
	return chart{name: "guest-page-ins", title: "Guest page-ins over time (major faults/s inside the guests, all VMs)", f: p}
}

// hasGuestStats reports whether a run's timeline holds guests' own stats.
func hasGuestStats(r Run) bool {
	for _, s := range r.Timeline {
		for _, w := range s.Workers {
			if w.Guest != nil {
				return true
			}
		}
	}
	return false
}

// addTimeLine draws a line without point marks (a sample a second is too
// dense for marks).
func addTimeLine(f *fig, label string, pts plotter.XYs, c color.Color, dashes []vg.Length) {
	if len(pts) == 0 {
		return
	}
	addPlotLine(f, label, pts, c, dashes)
	f.s.add(label, c, cssDashes(dashes), true, false, specPoints(pts))
}

// addPlotLine draws the line in the PNG only.
func addPlotLine(f *fig, label string, pts plotter.XYs, c color.Color, dashes []vg.Length) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return
	}
	l.Color, l.Dashes = c, dashes
	f.p.Add(l)
	if label != "" {
		f.legendAdd(label, l)
	}
}
