package results

import (
	"math"
	"sort"
)

// Point is one step of a ramp: workers and their aggregate rate.
type Point struct {
	Workers     int
	PagesPerSec float64
}

// Regimes are the three regimes of a density ramp: everything in RAM, a
// sharp fall as swap takes over, and a level plateau.
type Regimes struct {
	PeakPagesPerSec float64 `json:"peak_pages_per_sec"`
	PeakWorkers     int     `json:"peak_workers"`
	// KneeWorkers is the last step still in RAM (0 if none was).
	KneeWorkers int `json:"knee_workers"`
	// PlateauStartWorkers is the first step of the plateau (0: no plateau).
	PlateauStartWorkers int     `json:"plateau_start_workers"`
	PlateauPagesPerSec  float64 `json:"plateau_pages_per_sec"`
}

// Regime detection thresholds: leaving RAM is a fall below half the peak;
// a plateau is a run of steps within a factor of plateauBand of its median.
const (
	fallFactor  = 0.5
	plateauBand = 2.0
)

// DetectRegimes finds the regimes of an aggregate-rate curve. Points with
// the same worker count (repeats) are averaged; order does not matter.
func DetectRegimes(points []Point) Regimes {
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
	// The knee: the last step before the curve first falls below half the
	// peak (after the peak).
	fall := -1
	for i := peak; i < len(curve); i++ {
		if curve[i].PagesPerSec < fallFactor*r.PeakPagesPerSec {
			fall = i
			break
		}
	}
	if fall < 0 {
		r.KneeWorkers = curve[len(curve)-1].Workers
		return r
	}
	r.KneeWorkers = curve[fall-1].Workers
	// The plateau: the longest tail of the curve after the fall whose
	// values all lie within plateauBand of the tail's median.
	start := len(curve)
	for i := len(curve) - 1; i >= fall; i-- {
		if !withinBand(curve[i:]) {
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

func withinBand(tail []Point) bool {
	m := median(rates(tail))
	for _, p := range tail {
		if p.PagesPerSec > m*plateauBand || p.PagesPerSec < m/plateauBand {
			return false
		}
	}
	return true
}

// Curve averages points with the same worker count (repeats) and sorts
// them by workers; negative and NaN rates are dropped.
func Curve(points []Point) []Point {
	sum := map[int]float64{}
	n := map[int]int{}
	for _, p := range points {
		if math.IsNaN(p.PagesPerSec) || p.PagesPerSec < 0 {
			continue
		}
		sum[p.Workers] += p.PagesPerSec
		n[p.Workers]++
	}
	out := make([]Point, 0, len(sum))
	for w, s := range sum {
		out = append(out, Point{w, s / float64(n[w])})
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
		if !s.Failed {
			out = append(out, Point{s.Workers, s.AggregatePagesPerSec})
		}
	}
	return out
}
