package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
)

func TestReleaseSampleBatch(t *testing.T) {
	for _, c := range []struct {
		name             string
		out, inRAM       []float64
		wantPages        float64
		wantShare        float64
		pagesTol, shareT float64
	}{
		{name: "one worker tells nothing", out: []float64{100}, inRAM: []float64{1000}},
		{name: "nothing out", out: []float64{0, 0, 0}, inRAM: []float64{1000, 1000, 1000}},
		{name: "even: no batch", out: []float64{500, 500, 500, 500}, inRAM: []float64{1000, 1000, 1000, 1000}},
		// Two of four with one batch of 600 each: mean 300, variance
		// 120000 (over n − 1), over the mean 400.
		{name: "two batches", out: []float64{600, 0, 600, 0}, inRAM: []float64{900, 1000, 900, 1000}, wantPages: 400, wantShare: 400.0 / 950, pagesTol: 1e-9, shareT: 1e-9},
		{name: "a share above one is one", out: []float64{9000, 0}, inRAM: []float64{100, 100}, wantPages: 9000, wantShare: 1, pagesTol: 1e-9, shareT: 1e-9},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ReleaseSample{PagesOut: c.out, PagesInRAM: c.inRAM}
			if got := s.BatchPages(); math.Abs(got-c.wantPages) > c.pagesTol*max(c.wantPages, 1) {
				t.Errorf("BatchPages %g, want %g", got, c.wantPages)
			}
			if got := s.BatchShare(); math.Abs(got-c.wantShare) > c.shareT*max(c.wantShare, 1) {
				t.Errorf("BatchShare %g, want %g", got, c.wantShare)
			}
		})
	}
}

// Pooled, each run's deviations are from its own mean, and every worker
// weighs alike: a run whose workers all had 500 out adds no variance but
// its mean.
func TestPooledBatch(t *testing.T) {
	runs := []ReleaseSample{
		{PagesOut: []float64{600, 0, 600, 0}, PagesInRAM: []float64{900, 1000, 900, 1000}},
		{PagesOut: []float64{500, 500, 500, 500}, PagesInRAM: []float64{800, 800, 800, 800}},
		{PagesOut: []float64{7}, PagesInRAM: []float64{5}}, // one worker: nothing to pool
	}
	// Squares 360000 over (300 + 500) × 3 is 150 pages; in RAM 875 a worker.
	pages, share := PooledBatch(runs)
	if math.Abs(pages-150) > 1e-9 || math.Abs(share-150.0/875) > 1e-12 {
		t.Errorf("pooled %g pages, %g of a worker; want 150 and %g", pages, share, 150.0/875)
	}
	if pages, share := PooledBatch(nil); pages != 0 || share != 0 {
		t.Errorf("no runs: %g pages, %g", pages, share)
	}
}

// Batches of a fixed size dealt to workers at random, as reclaim's visits
// are: the estimate gives the batch back, whatever the batch and the
// workers (within the sampling error of that many batches).
func TestReleaseSampleBatchFromVisits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		workers, visits int
		batch           float64
	}{{9, 40, 6000}, {8, 200, 32}, {4, 1000, 512}} {
		var estimates float64
		const trials = 400
		for range trials {
			out := make([]float64, c.workers)
			for range c.visits {
				out[rng.IntN(c.workers)] += c.batch
			}
			estimates += ReleaseSample{PagesOut: out}.BatchPages() / trials
		}
		if math.Abs(estimates/c.batch-1) > 0.05 {
			t.Errorf("%d workers, %d visits of %g: mean estimate %.0f", c.workers, c.visits, c.batch, estimates)
		}
	}
}

// The release probe's estimate, read off the model's own fill, gives the
// model's batch back, however many ticks the deficit comes in: a visit
// takes its whole batch. (Drawing each VM's share as a normal around its
// expectation, cut at 0 and scaled to the tick's eviction, gave 0.090 in
// one tick and 0.003 in 80.)
func TestReleaseProbeReadsTheModelsBatch(t *testing.T) {
	for _, c := range []struct {
		share              float64
		minPages, maxPages float64
		minShare, maxShare float64
	}{
		{share: 0.1, minShare: 0.07, maxShare: 0.15},
		{share: 0, minPages: reclaimBatchPages / 2, maxPages: reclaimBatchPages * 2},
	} {
		for _, ticks := range []int{1, 5, 20, 80} {
			const seeds = 100
			var pages, share float64
			for seed := range seeds {
				nd := smallNode()
				// 800 pages a second written: reclaim falls behind.
				nd.ReclaimBatchShare, nd.Swap.WriteIOPS = c.share, 100
				n := newNode(nd, oneVM(memload.ScanRandom), 9, 0.25, uint64(seed+1))
				for _, v := range n.vms {
					v.pages /= 4 // 256 MiB
					v.phase, v.populated, v.resident = phaseRunning, v.pages, v.pages
				}
				const deficit = 77000.0 // about the density step the batch was read from
				full := n.usedPages()
				for i := range ticks {
					n.capacityPages = full - deficit*float64(i+1)/float64(ticks)
					n.reclaim(0.25)
				}
				var s ReleaseSample
				for _, v := range n.vms {
					s.PagesOut, s.PagesInRAM = append(s.PagesOut, v.disk), append(s.PagesInRAM, v.resident)
				}
				pages, share = pages+s.BatchPages()/seeds, share+s.BatchShare()/seeds
			}
			if c.share > 0 && !(share >= c.minShare && share <= c.maxShare) {
				t.Errorf("batch %g of a VM, the deficit in %d ticks: read %.3f", c.share, ticks, share)
			}
			if c.share == 0 && !(pages >= c.minPages && pages <= c.maxPages) {
				t.Errorf("batch of %g pages, the deficit in %d ticks: read %.0f pages", reclaimBatchPages, ticks, pages)
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
