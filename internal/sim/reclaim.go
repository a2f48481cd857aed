package sim

import (
	"math"
	"math/rand/v2"
)

// Reclaim: which VMs lose the pages that do not fit, and how many a visit.

const (
	// ReclaimBatchPages is how many pages reclaim takes from one cgroup at
	// a time (SWAP_CLUSTER_MAX).
	ReclaimBatchPages = 32.0
)

// reclaim evicts what does not fit, by second-chance LRU across VMs, to
// the compressed tier while it has room and then to the device; with no
// room left anywhere it OOM-kills the largest VM, as the kernel would.
func (s *node) reclaim(dt float64) {
	for range 4 {
		over := s.usedPages() - s.capacityPages
		if over <= minPages {
			return
		}
		toTier := s.tierRoomShare() > 0 && s.n.Tier != nil && (s.n.Tier.Ratio > 1.05 || s.n.Tier.PoolOnHost)
		if toTier && !s.n.Tier.PoolOnHost {
			// Every page put in the pool takes 1/ratio of a page back.
			over /= 1 - 1/s.n.Tier.Ratio
		}
		var resident float64
		for _, v := range s.vms {
			if v.live() {
				resident += v.resident + v.cache
			}
		}
		// Kept slots leave room: allocation that finds no free slot
		// takes them back from the swap cache.
		room := s.diskRoomPages()
		if toTier {
			room = s.tierRoomPages() // more than minPages: toTier says so
		}
		if room <= minPages || resident <= 0 {
			s.oomKill()
			continue
		}
		evict := min(over, room)
		// scanSeconds: how long reclaim takes to cross the inactive list
		// at this eviction rate; a page touched in that time is spared.
		// The kernel keeps 1/(1+sqrt(10 × GiB of RAM)) of anonymous
		// memory inactive (inactive_ratio).
		inactive := resident / (1 + math.Sqrt(10*s.capacityPages*PageBytes/(1<<30)))
		scanSeconds := inactive / (evict / dt)
		weights := make([]float64, len(s.vms))
		var sum float64
		for i, v := range s.vms {
			if !v.live() || v.resident+v.cache <= 0 || v.swapped() >= v.allowance {
				continue
			}
			// The guest's idle cache is never touched: reclaim always
			// finds it unreferenced.
			perPage := v.rate / v.pages
			weights[i] = v.cache + v.resident*math.Exp(-min(scanSeconds*perPage, 50))
			sum += weights[i]
		}
		if sum <= 0 {
			s.oomKill()
			continue
		}
		// Reclaim takes pages from one cgroup at a time, a batch a visit
		// (reclaimBatch): which VM a batch comes from is a draw, so the
		// shares vary around their expectation. Each VM's visits are a
		// Poisson count around its expected pages over its batch (a
		// multinomial's variance: a VM's is its batch times its expected
		// pages, however many ticks the eviction takes). This randomness
		// is what lets identical VMs drift apart.
		shares := make([]float64, len(s.vms))
		var drawn, largest float64 // largest: the largest batch visited
		batch := ReclaimBatchPages
		for i := range s.vms {
			if weights[i] == 0 {
				continue
			}
			shares[i] = batch * poissonCount(s.rng, evict*weights[i]/sum/batch)
			drawn += shares[i]
			if shares[i] > 0 {
				largest = max(largest, batch)
			}
		}
		if drawn <= 0 {
			// Less than a batch to take, and no visit drawn: reclaim
			// still visits once, a VM picked by weight.
			i := pickByWeight(s.rng, weights, sum)
			shares[i], drawn, largest = batch, batch, batch
		}
		// Reclaim visits until it has taken enough, and a visit takes its
		// whole batch: visits short of the eviction are scaled up to it,
		// and past it reclaim takes at most the last visit's batch more,
		// which stays free until the VMs fill it.
		take := max(evict, min(drawn, largest, room))
		for i, v := range s.vms {
			if shares[i] == 0 {
				continue
			}
			e := min(take*shares[i]/drawn, v.resident+v.cache, v.allowance-v.swapped())
			if e <= 0 {
				continue
			}
			// The idle cache goes first (written: the host has no copy).
			fromCache := min(e, v.cache)
			v.cache -= fromCache
			if toTier {
				v.cacheTier += fromCache
			} else {
				v.cacheDisk += fromCache
			}
			// pswpout counts block writes: a zswap store is zswpout.
			countsOut := !toTier || !s.n.Tier.isZswap()
			if countsOut {
				s.swapOuts += fromCache
			}
			if e -= fromCache; e <= 0 {
				continue
			}
			cleanShare, slottedShare := 0.0, 0.0
			if v.resident > 0 {
				cleanShare, slottedShare = min(v.clean/v.resident, 1), min(v.slotted/v.resident, 1)
				v.merged *= 1 - min(e/v.resident, 1) // evicted mappings are unmerged
			}
			v.resident -= e
			v.evicted += e
			v.clean -= e * cleanShare
			v.slotted -= e * slottedShare
			// A clean page's copy is on the device already: it is
			// dropped, not written (nor put in the tier).
			clean := e * cleanShare
			v.disk += clean
			if toTier {
				v.tier += e - clean
			} else {
				v.disk += e - clean
			}
			if countsOut {
				s.swapOuts += e - clean
			}
		}
	}
}

// writePagesPerSec is the pages a second the device writes with reclaim's
// writes alone (0: no device).
func (s *node) writePagesPerSec() float64 {
	d := s.n.Swap
	if !(d.WriteIOPSAt() > 0) {
		return 0
	}
	return s.writePages / d.WriteSeconds(d.WriteIOPSAt(), s.writePages)
}

// pickByWeight draws an index with probability weights[i]/sum (sum > 0:
// some weight is positive); rounding never picks a zero weight.
func pickByWeight(rng *rand.Rand, weights []float64, sum float64) int {
	pick, last := rng.Float64()*sum, -1
	for i, w := range weights {
		if w <= 0 {
			continue
		}
		if pick -= w; pick < 0 {
			return i
		}
		last = i
	}
	return last
}

// poissonCount draws a Poisson count of the given mean: exact (Knuth's
// product of uniforms) below poissonNormalMean, above it the normal
// approximation, continuous and at least 0.
func poissonCount(rng *rand.Rand, mean float64) float64 {
	if !(mean > 0) {
		return 0
	}
	if mean >= poissonNormalMean {
		return max(mean+math.Sqrt(mean)*rng.NormFloat64(), 0)
	}
	limit, product, count := math.Exp(-mean), rng.Float64(), 0.0
	for product > limit {
		product *= rng.Float64()
		count++
	}
	return count
}

// poissonNormalMean is the mean from which a Poisson count is drawn as
// its normal approximation: beyond it the two differ by a few percent in
// the tails, and the exact draw costs a uniform per unit of the mean.
const poissonNormalMean = 30

// oomKill ends the live VM holding the most memory.
func (s *node) oomKill() {
	var victim *vmState
	for _, v := range s.vms {
		if v.live() && (victim == nil || v.resident+v.cacheHeld()+v.workloadSwapped() > victim.resident+victim.cacheHeld()+victim.workloadSwapped()) {
			victim = v
		}
	}
	if victim != nil {
		victim.phase, victim.gone = phaseGone, "OOM-killed"
	}
}
