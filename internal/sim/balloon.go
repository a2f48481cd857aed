package sim

import (
	"github.com/headroom-dev/headroom/internal/policy"
)

// A guest's idle page cache and its balloon: the cache is host memory
// like any other until a balloon shrinks the guest, which then drops it.

// cacheHeld is the guest's idle cache wherever the host keeps it.
func (v *vmState) cacheHeld() float64 { return v.cache + v.cacheTier + v.cacheDisk }

// guestUsed is what the guest's kernel and workload use, cache aside: a
// balloon never takes it (the driver deflates on OOM).
func (v *vmState) guestUsed() float64 { return v.guestOverhead + v.populated }

// setBalloon sets the guest's memory after its balloon; the guest drops
// the idle cache that no longer fits, and keeps what it uses.
func (v *vmState) setBalloon(pages float64) {
	v.memPages = min(max(pages, v.guestUsed()), v.maxPages)
	if excess := v.guestUsed() + v.cacheHeld() - v.memPages; excess > minPages {
		keep := 1 - excess/v.cacheHeld()
		v.cache *= keep
		v.cacheTier *= keep
		v.cacheDisk *= keep
	}
}

// guestStats is what the balloon's statistics would say of the guest:
// its memory after the balloon, its idle cache as available (it is clean),
// no faults (the guest has no swap; its workload is always resident in
// it). The driver deflates on OOM, so MemTotal keeps the balloon.
func guestStats(v *vmState) *policy.GuestMemory {
	free := max(v.memPages-v.guestUsed()-v.cacheHeld(), 0)
	b := func(pages float64) int64 { return int64(pages * PageBytes) }
	return &policy.GuestMemory{MemoryBytes: uint64(b(v.memPages)), MaxBytes: uint64(b(v.maxPages)), TotalBytes: b(v.maxPages),
		FreeBytes: b(free), DiskCachesBytes: b(v.cacheHeld()), AvailableBytes: b(free + v.cacheHeld())}
}
