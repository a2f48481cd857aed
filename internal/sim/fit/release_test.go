package fit

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPooledRelease(t *testing.T) {
	ram := []float64{1000, 1000, 1000, 1000}
	for _, c := range []struct {
		name                string
		runs                []ReleaseSample
		slope, pages, share float64
	}{
		{name: "no runs"},
		{name: "one worker tells nothing", runs: []ReleaseSample{{PagesOut: []float64{100}, PagesInRAM: []float64{1000}}}},
		{name: "nothing out", runs: []ReleaseSample{{PagesOut: []float64{0, 0, 0}, PagesInRAM: ram[:3]}}},
		{name: "even: no batch, no slope", runs: []ReleaseSample{{PagesOut: []float64{500, 500, 500, 500}, PagesInRAM: ram}}},
		// Places 1, 1/3, −1/3, −1 around a mean of 500.
		{name: "the order alone", runs: []ReleaseSample{{PagesOut: []float64{800, 600, 400, 200}, PagesInRAM: ram}}, slope: 0.6},
		// Squares 360000; the mean and the fitted slope take two of four:
		// 600 pages a batch.
		{name: "batches out of order", runs: []ReleaseSample{{PagesOut: []float64{600, 0, 0, 600}, PagesInRAM: []float64{900, 1000, 1000, 900}}}, pages: 600, share: 600.0 / 950},
		// A slope against the order is none (not fitted: the mean alone
		// takes a degree of freedom): squares 200000 over 500 × 3.
		{name: "the last made first", runs: []ReleaseSample{{PagesOut: []float64{200, 400, 600, 800}, PagesInRAM: ram}}, pages: 200000.0 / 1500, share: 200000.0 / 1500 / 1000},
		// Runs weigh by their means: slope 0.6 and 0 over the same mean.
		{name: "pooled", runs: []ReleaseSample{
			{PagesOut: []float64{800, 600, 400, 200}, PagesInRAM: ram},
			{PagesOut: []float64{500, 500, 500, 500}, PagesInRAM: ram},
			{PagesOut: []float64{7}, PagesInRAM: []float64{5}}, // one worker: nothing to pool
		}, slope: 0.3,
			// Squares 2 × 500² × 0.3² × 20/9; Σ mean × (3 − 0.3² × 20/9 / 4)
			// less one mean.
			pages: 2 * 500 * 500 * 0.09 * 20 / 9 / (2*500*(3-0.09*20/9/4) - 500), share: 2 * 500 * 500 * 0.09 * 20 / 9 / (2*500*(3-0.09*20/9/4) - 500) / 1000},
		{name: "a share above one is one", runs: []ReleaseSample{{PagesOut: []float64{9000, 0, 9000}, PagesInRAM: []float64{100, 100, 100}}}, share: 1, pages: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			fit := PooledRelease(c.runs)
			if math.Abs(fit.OrderSlope-c.slope) > 1e-9 || (c.pages >= 0 && math.Abs(fit.BatchPages-c.pages) > 1e-9*max(c.pages, 1)) || math.Abs(fit.BatchShare-c.share) > 1e-9 {
				t.Errorf("%+v, want slope %g, %g pages, share %g", fit, c.slope, c.pages, c.share)
			}
		})
	}
}

// Batches of a fixed size dealt to workers at random, as reclaim's visits
// are, each worker as readily as its place in creation order makes it:
// six runs pooled (as --machine this pools them) give the slope and the
// batch back, whatever the batch and the workers (on average over many
// such estimates).
func TestReleaseFitFromVisits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		workers, visits int
		batch, slope    float64
	}{{9, 40, 6000, 0}, {8, 200, 32, 0}, {4, 1000, 512, 0}, {8, 200, 32, 0.5}, {8, 60, 2000, 0.5}, {9, 400, 300, 0.3}} {
		var slopes, batches float64
		const trials, runs = 300, 6
		for range trials {
			samples := make([]ReleaseSample, runs)
			for r := range samples {
				out := make([]float64, c.workers)
				for range c.visits {
					// Rejection: a worker kept by its weight over the largest.
					for {
						i := rng.IntN(c.workers)
						if rng.Float64()*(1+c.slope) < 1+c.slope*creationPlace(i, c.workers) {
							out[i] += c.batch
							break
						}
					}
				}
				samples[r] = ReleaseSample{PagesOut: out}
			}
			fit := PooledRelease(samples)
			slopes += fit.OrderSlope / trials
			batches += fit.BatchPages / trials
		}
		// A true slope of 0 reads a little above it: negative fits are 0.
		if math.Abs(slopes-c.slope) > 0.05 || math.Abs(batches/c.batch-1) > 0.06 {
			t.Errorf("%d workers, %d visits of %g, slope %g: mean estimates slope %.3f, batch %.0f", c.workers, c.visits, c.batch, c.slope, slopes, batches)
		}
	}
}
