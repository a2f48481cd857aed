package results

import (
	"fmt"
	"math"
	"sort"
)

// Point is one step of a ramp: workers, their aggregate rate, and the
// evidence of paging (zero where unknown).
type Point struct {
	Workers     int
	PagesPerSec float64
	// PageInsPerSec is the node's swap-ins or major faults per second,
	// whichever is larger.
	PageInsPerSec float64
	// MinWorkerPagesPerSec and MaxWorkerPagesPerSec are the slowest and
	// the fastest worker's rates.
	MinWorkerPagesPerSec, MaxWorkerPagesPerSec float64
}

// Regimes are the three regimes of a density ramp: everything in RAM, a
// sharp fall as swap takes over, and a level plateau.
type Regimes struct {
	PeakPagesPerSec float64 `json:"peak_pages_per_sec"`
	PeakWorkers     int     `json:"peak_workers"`
	// KneeWorkers is the last step still in RAM (0 if none was).
	KneeWorkers int `json:"knee_workers"`
	// KneeEvidence says why the step after the knee is not in RAM.
	KneeEvidence string `json:"knee_evidence,omitempty"`
	// PlateauStartWorkers is the first step of the plateau (0: no plateau).
	PlateauStartWorkers int     `json:"plateau_start_workers"`
	PlateauPagesPerSec  float64 `json:"plateau_pages_per_sec"`
}

// Regime detection thresholds. A step has left RAM when it pages: its
// page-ins reach pagingDeviceFraction of the swap device's random-read
// rate (pagingFloorPerSec where that rate is unknown), or its slowest
// worker runs spreadFactor times slower than its fastest (the unlucky
// workers of the transition); the aggregate falling below fallFactor of
// the peak is the second witness, and the only one for curves without
// paging figures. A plateau is a run of steps within a factor of
// plateauBand of its median.
const (
	pagingDeviceFraction = 0.05
	pagingFloorPerSec    = 1000
	spreadFactor         = 10
	fallFactor           = 0.5
	plateauBand          = 2.0
)

// DetectRegimes finds the regimes of a ramp from its points and the swap
// device's 4 KiB random-read rate (0: unknown). Points with the same
// worker count (repeats) are averaged; order does not matter.
func DetectRegimes(points []Point, deviceReadIOPS float64) Regimes {
	curve := Curve(points)
	var r Regimes
	if len(curve) == 0 {
		return r
	}
	peak := 0
	for i, p := range curve {
		if p.PagesPerSec > curve[peak].PagesPerSec {
			peak = i
		}
	}
	r.PeakPagesPerSec, r.PeakWorkers = curve[peak].PagesPerSec, curve[peak].Workers
	// The knee: the last step before the first that pages or has fallen.
	out := -1
	for i, p := range curve {
		if why := outOfRAM(p, i >= peak, r.PeakPagesPerSec, deviceReadIOPS); why != "" {
			out, r.KneeEvidence = i, fmt.Sprintf("at %d workers %s", p.Workers, why)
			break
		}
	}
	if out < 0 {
		r.KneeWorkers = curve[len(curve)-1].Workers
		return r
	}
	if out > 0 {
		r.KneeWorkers = curve[out-1].Workers
	}
	// The plateau: the longest tail of the curve after the knee whose
	// values all lie within plateauBand of the tail's median, below half
	// the peak (a level stretch still in the fall is no plateau).
	start := len(curve)
	for i := len(curve) - 1; i >= out; i-- {
		if !withinBand(curve[i:]) || curve[i].PagesPerSec >= fallFactor*r.PeakPagesPerSec {
			break
		}
		start = i
	}
	// A plateau needs at least two steps to be level.
	if len(curve)-start >= 2 {
		r.PlateauStartWorkers = curve[start].Workers
		r.PlateauPagesPerSec = median(rates(curve[start:]))
	}
	return r
}

// outOfRAM says why a step is not in RAM ("": it is).
func outOfRAM(p Point, afterPeak bool, peak, deviceReadIOPS float64) string {
	switch {
	case deviceReadIOPS > 0 && p.PageInsPerSec >= pagingDeviceFraction*deviceReadIOPS:
		return fmt.Sprintf("pages in %.0f pages/s, %.0f%% of the swap device's random-read rate", p.PageInsPerSec, 100*p.PageInsPerSec/deviceReadIOPS)
	case deviceReadIOPS <= 0 && p.PageInsPerSec >= pagingFloorPerSec:
		return fmt.Sprintf("pages in %.0f pages/s", p.PageInsPerSec)
	case p.MinWorkerPagesPerSec > 0 && p.MaxWorkerPagesPerSec >= spreadFactor*p.MinWorkerPagesPerSec:
		return fmt.Sprintf("its slowest worker runs %.0fx slower than its fastest", p.MaxWorkerPagesPerSec/p.MinWorkerPagesPerSec)
	case p.MinWorkerPagesPerSec == 0 && p.MaxWorkerPagesPerSec > 0:
		return "a worker made no progress"
	case afterPeak && p.PagesPerSec < fallFactor*peak:
		return fmt.Sprintf("the aggregate fell to %.0f%% of the peak", 100*p.PagesPerSec/peak)
	}
	return ""
}

func withinBand(tail []Point) bool {
	m := median(rates(tail))
	for _, p := range tail {
		if p.PagesPerSec > m*plateauBand || p.PagesPerSec < m/plateauBand {
			return false
		}
	}
	return true
}

// Curve averages points with the same worker count (repeats: rates and
// page-ins averaged, the slowest and fastest workers over all repeats)
// and sorts them by workers; negative and NaN rates are dropped.
func Curve(points []Point) []Point {
	byWorkers := map[int]*Point{}
	n := map[int]int{}
	for _, p := range points {
		if math.IsNaN(p.PagesPerSec) || p.PagesPerSec < 0 {
			continue
		}
		c := byWorkers[p.Workers]
		if c == nil {
			c = &Point{Workers: p.Workers, MinWorkerPagesPerSec: p.MinWorkerPagesPerSec}
			byWorkers[p.Workers] = c
		}
		c.PagesPerSec += p.PagesPerSec
		if !math.IsNaN(p.PageInsPerSec) && p.PageInsPerSec > 0 {
			c.PageInsPerSec += p.PageInsPerSec
		}
		c.MinWorkerPagesPerSec = math.Min(c.MinWorkerPagesPerSec, p.MinWorkerPagesPerSec)
		c.MaxWorkerPagesPerSec = math.Max(c.MaxWorkerPagesPerSec, p.MaxWorkerPagesPerSec)
		n[p.Workers]++
	}
	out := make([]Point, 0, len(byWorkers))
	for w, c := range byWorkers {
		c.PagesPerSec /= float64(n[w])
		c.PageInsPerSec /= float64(n[w])
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workers < out[j].Workers })
	return out
}

func rates(ps []Point) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = p.PagesPerSec
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Quantile returns the exact q-quantile (nearest rank) of xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Points returns a run's successful steps as curve points.
func (r *Run) Points() []Point {
	var out []Point
	for _, s := range r.Steps {
		if s.Failed {
			continue
		}
		p := Point{Workers: s.Workers, PagesPerSec: s.AggregatePagesPerSec, PageInsPerSec: math.Max(s.SwapInPagesPerSec, s.MajorFaultsPerSec)}
		for i, w := range s.PerWorker {
			if i == 0 || w.PagesPerSec < p.MinWorkerPagesPerSec {
				p.MinWorkerPagesPerSec = w.PagesPerSec
			}
			p.MaxWorkerPagesPerSec = math.Max(p.MaxWorkerPagesPerSec, w.PagesPerSec)
		}
		out = append(out, p)
	}
	return out
}

// Regimes detects the run's regimes with its swap device's read rate.
func (r *Run) Regimes() Regimes {
	return DetectRegimes(r.Points(), r.Node.SwapReadIOPS)
}

// ramSpeedShare is the least share of its even part of the peak (the
// peak over the step's workers) a worker's rate must reach to count as
// running at RAM speed. A worker paging most of its touches runs at the
// swap device's pace, hundreds of times below: measured in the
// transition, 3-36k pages/s paging, 0.2-0.7M for workers half way back,
// 1.6-17M for the lucky ones.
const ramSpeedShare = 0.1

// AtRAMSpeed is how many of a step's workers ran at RAM speed: in the
// transition, the lucky ones.
type AtRAMSpeed struct {
	Workers int `json:"workers"`
	Count   int `json:"at_ram_speed"`
}

// WorkersAtRAMSpeed counts, for each successful step after the knee (the
// transition and the plateau), the workers whose rate is at least
// ramSpeedShare of the peak over that step's workers.
func (r *Run) WorkersAtRAMSpeed(g Regimes) []AtRAMSpeed {
	var out []AtRAMSpeed
	for _, s := range r.Steps {
		if s.Failed || s.Workers <= g.KneeWorkers || len(s.PerWorker) == 0 {
			continue
		}
		least := ramSpeedShare * g.PeakPagesPerSec / float64(s.Workers)
		n := 0
		for _, w := range s.PerWorker {
			if w.PagesPerSec >= least {
				n++
			}
		}
		out = append(out, AtRAMSpeed{Workers: s.Workers, Count: n})
	}
	return out
}
