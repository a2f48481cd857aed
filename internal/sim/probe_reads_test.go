package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/sim/fit"
)

// The model's reclaim, with VMs paging steadily (each faulting back the
// same pages a tick and reclaim taking as many again), loses each VM's
// pages second by second as the probe reads them: in bursts of
// Node.ReclaimBurstPages, or SWAP_CLUSTER_MAX without one.
func TestBurstProbeReadsTheModelsBurst(t *testing.T) {
	const vms, seconds, ticksASecond = 8, 5, 4
	const faultsATick = 500.0 // 2000 pages a second a VM
	for _, c := range []struct{ burst, want float64 }{{0, ReclaimBatchPages}, {500, 500}, {2000, 2000}} {
		var samples []fit.BurstSample
		for seed := range 20 {
			nd := smallNode()
			nd.ReclaimBurstPages = c.burst
			n := newNode(nd, oneVM(memload.ScanRandom), vms, 1.0/ticksASecond, uint64(seed+1))
			running(n, 0.5)
			n.capacityPages = n.usedPages()
			out := make([][]float64, vms)
			for range seconds {
				lost := make([]float64, vms)
				for range ticksASecond {
					for i, v := range n.vms {
						v.disk -= faultsATick
						v.resident += faultsATick
						lost[i] -= v.disk
					}
					n.reclaim(1.0/ticksASecond, false)
					for i, v := range n.vms {
						lost[i] += v.disk
					}
				}
				for i := range out {
					out[i] = append(out[i], lost[i])
				}
			}
			samples = append(samples, fit.BurstSample{OutPages: out})
		}
		got, dof := fit.PooledReclaimBurst(samples)
		if tol := 4 * math.Sqrt(2/dof); math.Abs(got/c.want-1) > tol {
			t.Errorf("burst %g: read %.0f pages a visit, want %g ± %.0f%%", c.burst, got, c.want, tol*100)
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
		{share: 0, writeIOPS: 100, minPages: ReclaimBatchPages / 2, maxPages: ReclaimBatchPages * 2, maxSlope: 0.02},
		{share: 0.05, slope: 0.5, writeIOPS: 100, minShare: 0.03, maxShare: 0.08, minSlope: 0.4, maxSlope: 0.6},
		{share: 0, slope: 0.5, writeIOPS: 100, minPages: ReclaimBatchPages / 2, maxPages: ReclaimBatchPages * 2, minSlope: 0.45, maxSlope: 0.55},
		{share: 0.1, slope: 0.5, writeIOPS: 1e9, minPages: ReclaimBatchPages / 2, maxPages: ReclaimBatchPages * 2, maxSlope: 0.02},
	} {
		for _, ticks := range []int{1, 5, 20, 80} {
			const seeds = 100
			var samples []fit.ReleaseSample
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
				var s fit.ReleaseSample
				for _, v := range n.vms {
					s.PagesOut, s.PagesInRAM = append(s.PagesOut, v.disk), append(s.PagesInRAM, v.resident)
				}
				samples = append(samples, s)
			}
			// Pooled, as --machine this pools its runs: a single run's
			// slope, held at 0, reads above 0 on average where it is 0.
			fit := fit.PooledRelease(samples)
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
