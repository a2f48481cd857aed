package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
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
						if rng.Float64()*(1+c.slope) < 1+c.slope*releasePlace(i, c.workers) {
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

// The release probe's estimate, read off the model's own fill, gives the
// model's batch and order back, however many ticks the deficit comes in:
// a visit takes its whole batch. (Drawing each VM's share as a normal
// around its expectation, cut at 0 and scaled to the tick's eviction,
// gave 0.090 in one tick and 0.003 in 80.) Where reclaim keeps up, the
// order is even.
func TestReleaseProbeReadsTheModelsBatch(t *testing.T) {
	for _, c := range []struct {
		share, slope       float64
		writeIOPS          float64 // 100: 800 pages a second written, behind
		minPages, maxPages float64
		minShare, maxShare float64
		minSlope, maxSlope float64
	}{
		{share: 0.1, writeIOPS: 100, minShare: 0.07, maxShare: 0.15, maxSlope: 0.1},
		{share: 0, writeIOPS: 100, minPages: reclaimBatchPages / 2, maxPages: reclaimBatchPages * 2, maxSlope: 0.02},
		{share: 0.05, slope: 0.5, writeIOPS: 100, minShare: 0.03, maxShare: 0.08, minSlope: 0.4, maxSlope: 0.6},
		{share: 0, slope: 0.5, writeIOPS: 100, minPages: reclaimBatchPages / 2, maxPages: reclaimBatchPages * 2, minSlope: 0.45, maxSlope: 0.55},
		{share: 0.1, slope: 0.5, writeIOPS: 1e9, minPages: reclaimBatchPages / 2, maxPages: reclaimBatchPages * 2, maxSlope: 0.02},
	} {
		for _, ticks := range []int{1, 5, 20, 80} {
			const seeds = 100
			var samples []ReleaseSample
			for seed := range seeds {
				nd := smallNode()
				nd.ReclaimBatchShare, nd.ReclaimOrderSlope, nd.Swap.WriteIOPS = c.share, c.slope, c.writeIOPS
				n := newNode(nd, oneVM(memload.ScanRandom), 9, 0.25, uint64(seed+1))
				for _, v := range n.vms {
					v.pages /= 4 // 256 MiB
					v.phase, v.populated, v.resident = phaseRunning, v.pages, v.pages
				}
				const deficit = 77000.0 // about the density step the batch was read from
				full := n.usedPages()
				for i := range ticks {
					n.capacityPages = full - deficit*float64(i+1)/float64(ticks)
					n.reclaim(0.25, false)
				}
				var s ReleaseSample
				for _, v := range n.vms {
					s.PagesOut, s.PagesInRAM = append(s.PagesOut, v.disk), append(s.PagesInRAM, v.resident)
				}
				samples = append(samples, s)
			}
			// Pooled, as --machine this pools its runs: a single run's
			// slope, held at 0, reads above 0 on average where it is 0.
			fit := PooledRelease(samples)
			pages, share, slope := fit.BatchPages, fit.BatchShare, fit.OrderSlope
			if c.share > 0 && c.writeIOPS < 1e9 && !(share >= c.minShare && share <= c.maxShare) ||
				(c.share == 0 || c.writeIOPS >= 1e9) && !(pages >= c.minPages && pages <= c.maxPages) ||
				!(slope >= c.minSlope && slope <= c.maxSlope) {
				t.Errorf("batch %g of a VM, slope %g, %g writes a second, the deficit in %d ticks: read %.0f pages, %.3f of a VM, slope %.3f", c.share, c.slope, c.writeIOPS, ticks, pages, share, slope)
			}
		}
	}
}

// Reclaim's one visit where none was drawn goes to a VM by weight, never
// to one reclaim may not take from, even where rounding leaves the draw
// past the last weight.
func TestPickByWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	weights := []float64{0, 1, 0, 3, 0}
	counts := make([]float64, len(weights))
	const draws = 40000
	for range draws {
		counts[pickByWeight(rng, weights, 4)]++
	}
	if counts[0]+counts[2]+counts[4] > 0 || math.Abs(counts[3]/draws-0.75) > 0.01 {
		t.Errorf("picks %v of %d, want none at a zero weight and 3/4 at index 3", counts, draws)
	}
	// A sum a little above the weights' (rounding): the last positive.
	for range 1000 {
		if i := pickByWeight(rng, weights, 4.5); i != 1 && i != 3 {
			t.Fatalf("picked %d, a zero weight", i)
		}
	}
}

func TestFillOutPace(t *testing.T) {
	r := func(pairs ...float64) []swapOutReading {
		var out []swapOutReading
		for i := 0; i+1 < len(pairs); i += 2 {
			out = append(out, swapOutReading{Seconds: pairs[i], Pages: pairs[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name     string
		readings []swapOutReading
		want     float64
	}{
		{"none", nil, 0},
		{"one", r(0, 5), 0},
		{"nothing out", r(0, 5, 1, 5, 2, 5), 0},
		// From the reading before the first rise (at 1 s, 100) to the
		// last rise (at 3 s, 900): 800 pages in 2 s.
		{"out between the still readings", r(0, 100, 1, 100, 2, 700, 3, 900, 4, 900), 400},
		{"out to the last reading", r(0, 0, 0.5, 1500, 1, 2000), 2000},
		{"too short to tell", r(0, 0, 0.1, 1000, 0.15, 1000), 0},
	} {
		if got := fillOutPace(c.readings); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: fillOutPace = %v, want %v", c.name, got, c.want)
		}
	}
}
