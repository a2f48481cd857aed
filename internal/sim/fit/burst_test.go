package fit

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestReclaimBurstChi2(t *testing.T) {
	for _, c := range []struct {
		name      string
		out       [][]float64
		chi2, dof float64
	}{
		{name: "none"},
		{name: "one worker tells nothing", out: [][]float64{{10, 20, 30}}},
		{name: "one bin tells nothing", out: [][]float64{{10}, {20}}},
		{name: "even", out: [][]float64{{100, 100, 100}, {100, 100, 100}}, dof: 2},
		// A worker's steady share and a second's pace are expected.
		{name: "order and pace", out: [][]float64{{300, 150, 600}, {100, 50, 200}}, dof: 2},
		// Expectations 100 each; deviations ±100 in four cells.
		{name: "a burst each", out: [][]float64{{200, 0}, {0, 200}}, chi2: 4 * 100 * 100 / 100, dof: 1},
		// The worker in RAM is left out; the ragged row is cut to two bins.
		{name: "in RAM and ragged", out: [][]float64{{200, 0, 7}, {0, 0, 0}, {0, 200}}, chi2: 400, dof: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			chi2, dof := reclaimBurstChi2(c.out)
			if math.Abs(chi2-c.chi2) > 1e-9 || dof != c.dof {
				t.Errorf("chi2 %g over %g, want %g over %g", chi2, dof, c.chi2, c.dof)
			}
		})
	}
}

// Visits of a fixed size dealt at random to workers, as readily as their
// place in creation order makes them, at a pace that changes from second
// to second: the pooled estimate gives the visit back, with the order
// and the pace left out.
func TestReclaimBurstFromVisits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		workers, bins int
		burst, slope  float64
	}{{8, 4, 32, 0}, {8, 4, 500, 0.5}, {16, 4, 500, 0}, {13, 19, 600, 0.3}, {4, 3, 2000, 0.6}} {
		var samples []BurstSample
		for range 6 {
			out := make([][]float64, c.workers)
			for w := range out {
				out[w] = make([]float64, c.bins)
			}
			for b := range c.bins {
				pages := 20000 * (0.5 + rng.Float64()) // the second's pace
				for range int(pages / c.burst) {
					// Pick a worker by its place: weight 1 + slope × place.
					var w int
					for {
						w = rng.IntN(c.workers)
						if rng.Float64()*(1+c.slope) < 1+c.slope*creationPlace(w, c.workers) {
							break
						}
					}
					out[w][b] += c.burst
				}
			}
			samples = append(samples, BurstSample{OutPages: out})
		}
		got, dof := PooledReclaimBurst(samples)
		if want := float64(6 * (c.workers - 1) * (c.bins - 1)); dof != want {
			t.Errorf("%+v: %g degrees of freedom, want %g", c, dof, want)
		}
		// Its standard error is about sqrt(2/dof).
		if tol := 4 * math.Sqrt(2/dof); math.Abs(got/c.burst-1) > tol {
			t.Errorf("%+v: burst %.0f pages, want %.0f ± %.0f%%", c, got, c.burst, tol*100)
		}
	}
}
