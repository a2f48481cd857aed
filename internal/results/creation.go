package results

import (
	"math"
	"sort"
)

// Who runs fastest by the order the workers were made. Reclaim walks a
// parent's cgroups in the order they were made, and on a plateau the
// workers' rates can run with that order: measured here (256 MiB
// workers, cgroup backend), the last made paged fastest on random
// plateaus and slowest on sequential ones. A model that treats the
// workers alike reads 0.

// CreationSlope is one step's slope of rate against creation order.
type CreationSlope struct {
	Workers int `json:"workers"`
	// Slope is the least-squares slope of each worker's rate over the
	// step's mean against its place, −1 for the first made and +1 for
	// the last: positive where the last made ran fastest. Half the
	// difference between the last's and the first's share of the mean,
	// for rates on a line.
	Slope float64 `json:"slope"`
}

// CreationSlopes gives the slope of each successful plateau step (from
// g.PlateauStartWorkers) that has one.
func (r *Run) CreationSlopes(g Regimes) []CreationSlope {
	if g.PlateauStartWorkers == 0 {
		return nil
	}
	var out []CreationSlope
	for _, s := range r.Steps {
		if s.Failed || s.Workers < g.PlateauStartWorkers {
			continue
		}
		if slope, ok := RateCreationSlope(s.PerWorker); ok {
			out = append(out, CreationSlope{Workers: s.Workers, Slope: slope})
		}
	}
	return out
}

// MeanCreationSlope is the mean of the steps' slopes (0: none).
func MeanCreationSlope(slopes []CreationSlope) float64 {
	if len(slopes) == 0 {
		return 0
	}
	var sum float64
	for _, s := range slopes {
		sum += s.Slope
	}
	return sum / float64(len(slopes))
}

// RateCreationSlope is the slope (CreationSlope.Slope) of one step's
// workers, ordered by when they were made: CreateOffsetSeconds, and
// where that ties (results written before it existed) the order they
// are listed in, which is the order the harness made them. Workers that
// failed, were OOM-killed or evicted are left out. ok is false with
// fewer than two workers left or no rate among them.
func RateCreationSlope(workers []WorkerResult) (slope float64, ok bool) {
	var kept []WorkerResult
	var sum float64
	for _, w := range workers {
		if w.Error != "" || w.OOMKilled || w.Evicted || !(w.PagesPerSec >= 0) || math.IsInf(w.PagesPerSec, 0) {
			continue
		}
		kept = append(kept, w)
		sum += w.PagesPerSec
	}
	if len(kept) < 2 || !(sum > 0) || math.IsInf(sum, 0) {
		return 0, false
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].CreateOffsetSeconds < kept[j].CreateOffsetSeconds })
	rates := make([]float64, len(kept))
	for i, w := range kept {
		rates[i] = w.PagesPerSec
	}
	return OrderSlope(rates), true
}

// OrderSlope is the least-squares slope of values (in the order made, at
// least two, their sum positive) over their mean against each one's
// place, −1 for the first made and +1 for the last.
func OrderSlope(values []float64) float64 {
	var sum float64
	for _, v := range values {
		sum += v
	}
	n := len(values)
	mean := sum / float64(n)
	var across, along float64
	for i, v := range values {
		place := 2*float64(i)/float64(n-1) - 1
		across += place * v / mean
		along += place * place
	}
	return across / along
}
