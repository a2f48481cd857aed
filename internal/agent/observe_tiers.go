package agent

import (
	"github.com/headroom-dev/headroom/internal/host"
)

// compressedRAM is the RAM compressed swap tiers hold for a scope's
// swapped pages that the scope's own usage misses.
//
// The host scope counts it already (zram's and zswap's pools are taken
// from MemAvailable). A cgroup is never charged for zram's pool, and for
// zswap's only on v2; which of the host's swapped pages are the scope's
// is not known per tier, so the scope gets the pool in proportion to its
// share of the swap in use.
func compressedRAM(tiers []host.SwapTier, scopeSwapUsedBytes uint64, hostScope, chargesZswap bool) uint64 {
	if hostScope {
		return 0
	}
	var hostSwapUsed, pool uint64
	for _, t := range tiers {
		switch t.Kind {
		case host.TierZswap:
			if !chargesZswap {
				pool += t.RAMBytes
			}
		case host.TierZram:
			pool += t.RAMBytes
			hostSwapUsed += t.UsedBytes
		default:
			hostSwapUsed += t.UsedBytes
		}
	}
	if pool == 0 || hostSwapUsed == 0 {
		return 0
	}
	share := min(float64(scopeSwapUsedBytes)/float64(hostSwapUsed), 1)
	return uint64(share * float64(pool))
}
