// Package sim is the node simulator behind `headroom sim`: a time-stepped
// model of a host's RAM, CPUs and swap devices shared by VMs that run the
// workload of `headroom load`, ramped like `headroom density`, optionally
// with the agent's real policy (internal/policy) deciding on simulated
// snapshots. State is kept per VM as page counts (resident, in the
// compressed tier, on the device), never per page or per touch, so a run
// of 100 VMs of 16 GiB costs the same as one of 1 MiB.
//
// The approximations (see docs/sim.md):
//   - Random access hits with the probability of its resident fraction;
//     a sequential scan larger than its resident set misses every page
//     (LRU evicts exactly what the scan needs next) but each fault's
//     readahead brings up to vm.page-cluster's 8 pages
//     (Node.ReadaheadPages), which the scan then uses.
//   - Every page paged costs CPU (Node.PagingCPU, more the more VMs fault
//     at once), which on few cores bounds the paging rate before the
//     device does.
//   - Reclaim is a second-chance LRU over all VMs: a resident page is
//     evicted when reclaim's scan finds it untouched, so a VM loses pages
//     in proportion to resident × exp(−T × its per-page touch rate), T
//     being the time reclaim takes to cross the inactive list. Slow VMs'
//     pages age and go first, which slows them further: the lucky and
//     unlucky VMs of the transition come from this feedback and from
//     staggered starts, not from painted-on noise. Reclaim visits one
//     cgroup at a time and takes a batch a visit (SWAP_CLUSTER_MAX):
//     which VMs the batches hit is a draw. A fill past RAM waits for
//     reclaim, which frees dirty pages as fast as the device writes them.
//   - The swap device is a closed queue: each faulting VM waits for one
//     read at a time; while the demand stays under the device's rate a
//     read takes its latency, beyond it the latency grows until the
//     demand (reads plus the writes of dirty evictions, Node.WritePages
//     a write) fits the rate.
//   - CPUs are shared fairly; a VM waiting on the device uses none. A
//     VM woken by a swap-in read waits for a core (Node.RunQueueWait a
//     page, by the VMs faulting), or its fair share's wait when the cores
//     are oversubscribed, whichever is longer. A core touches fewer
//     pages/s the more memory its VM keeps resident (Node.TouchRate by
//     the resident workload bytes: its page walks miss the caches).
//   - A guest's idle page cache (VMSpec.GuestCacheBytes) is host memory
//     like any other, the first a VM loses to host reclaim (it is never
//     touched). A balloon (the agent's set_balloon) shrinks the guest:
//     the guest drops that cache, wherever the host keeps its pages, and
//     never goes below its overhead and its workload. Balloon moves take
//     effect within a tick.
//   - ksmd (the agent's set_ksm) scans the workloads' pages at its pace,
//     each page costing a core's time, and merges a resident duplicate
//     the second time a scan finds it; a merged page takes no RAM but
//     its KSM page's, and a write (copy on write) or an eviction
//     unmerges it. With the kernel's advisor on, its formula sets the
//     pace after every full scan.
//   - Ignored: THP, NUMA, the guest's reclaim of anything but its idle
//     cache, ksmd's higher cost a page in small batches, readahead of
//     random faults. Swap slot fragmentation is there only as the I/O
//     sizes it leaves (Node.ReadaheadPages, Node.WritePages), each I/O
//     costing the device its 4 KiB time and its further bytes' transfer
//     (Device.ReadBytesPerSec, Device.WriteBytesPerSec).
package sim

import (
	"fmt"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
	"github.com/headroom-dev/headroom/internal/units"
)

// PageBytes is the page size the model counts in.
const PageBytes = 4096

// Node is the simulated host.
type Node struct {
	RAMBytes uint64
	// SystemReserveBytes is RAM the VMs never get (the host's kernel,
	// daemons, the kubelet's reservations).
	SystemReserveBytes uint64
	CPUs               float64
	// TouchRate is the pages/s one core touches in RAM (headroom load's
	// rate, or a VM's: a guest's touches pay for the EPT or, under TCG,
	// QEMU's software MMU), by the memory the workloads on a core touch.
	TouchRate []TouchRate
	// TouchTurnBlocks, a correction (docs/sim.md, off at 0 or 1), is how
	// many blocks' worth of memory a worker touches as while it takes
	// turns on a core with others (TouchBytes), up to MaxTouchTurnBlocks:
	// with two or more workers a core the rate is TouchRate's at the
	// block × this, whatever their number. Measured here 1.1-3.7 (the
	// touch probe's two and four workers a core).
	TouchTurnBlocks float64
	// PopulateRatePerCore is the pages/s one core fills a new block at
	// (allocating, zeroing and writing each page's content; 0: a quarter
	// of the touch rate).
	PopulateRatePerCore float64
	Swap                Device
	// Tier is a compressed tier in front of the device (nil: none).
	Tier *Tier
	// PageCluster is log2 of the pages a sequential swap-in reads at once
	// (vm.page-cluster, 3: 8 pages).
	PageCluster int
	// PagingCPU is the CPU to bring one page in, from the device or the
	// compressed tier, and put another out (the fault, reclaim, the I/O's
	// submission and completion), by the number of VMs faulting at once:
	// on few cores it, not the device, bounds the paging rate.
	PagingCPU []PagingCost
	// RunQueueWait is how long a VM waits for a core per page it pages in
	// from the device, by the number of VMs faulting at once: each read's
	// completion wakes its task, which then queues for a core (none: it
	// waits only when the cores are oversubscribed). Measured here with
	// eight seq workers on two cores: 40 µs a page, three times the CPU a
	// page costs, while the cores were a third idle. A count's wait is
	// the fair share's stretch there plus an excess (runQueueWaitAt).
	RunQueueWait []PagingCost
	// ReadaheadPages is the pages a sequential fault's readahead brings
	// in, by the number of VMs faulting at once (none: 2^PageCluster);
	// WritePages the pages one write to the swap device carries (none:
	// defaultWritePages). The kernel narrows the window when readahead
	// goes unused, and reclaimers in many cgroups at once interleave in
	// the swap slots, so both shrink as more VMs page.
	ReadaheadPages, WritePages []IOPages
	// KSMDCPUSeconds is the CPU time ksmd has used before the run. The
	// kernel's advisor counts it into its first adjustment.
	KSMDCPUSeconds float64
}

// Device is a block device holding swap.
type Device struct {
	SizeBytes uint64
	// ReadIOPS and WriteIOPS are 4 KiB random rates at the device's best
	// queue depth; LatencySeconds is one read's time at queue depth 1.
	ReadIOPS, WriteIOPS float64
	LatencySeconds      float64
	// ReadBytesPerSec and WriteBytesPerSec are the rates a read's and a
	// write's bytes beyond its first page move at (0: an I/O costs the
	// same whatever its size). A swap read carries a readahead window and
	// a write merged pages: measured here, a 16 KiB read takes 1.5 times
	// a 4 KiB one's time and a 128 KiB read 6 times.
	ReadBytesPerSec, WriteBytesPerSec float64
	// Depths, when given (ascending), replace ReadIOPS and WriteIOPS as
	// the device's capacity: reads at the depth the faulting VMs keep,
	// writes (reclaim's, queued deep) at the deepest.
	Depths []DepthRate
	// MixedCapacity, a correction (docs/sim.md; none: off), is how many
	// times the sum of its reads' and writes' shares of its rates the
	// device serves while that many tasks fault at once (TaskCapacity).
	MixedCapacity []TaskCapacity
}

// DepthRate is a device's 4 KiB random rates at one queue depth.
type DepthRate struct {
	QueueDepth          float64
	ReadIOPS, WriteIOPS float64
}

// TierKind is the kind of compressed tier.
type TierKind string

const (
	// TierZram is a compressed swap device of its own, at a higher
	// priority than the device: its pages hold its slots, not the
	// device's; a page swapped in from it frees its slot at once (a
	// synchronous device bypasses the swap cache).
	TierZram TierKind = "zram"
	// TierZswap is a compressed cache in front of the device: every page
	// it holds also holds a slot on the device, a page swapped in from it
	// keeps that slot below half full (as a device page does) but not a
	// valid copy (zswap drops its entry as it loads), and a full pool
	// refuses pages (they go to the device) while it writes its oldest
	// back to the device until it is down to 90% (the kernel's
	// accept_threshold_percent).
	TierZswap TierKind = "zswap"
)

// Tier is a compressed RAM tier (zram, zswap) in front of the device.
type Tier struct {
	Kind      TierKind
	SizeBytes uint64 // uncompressed capacity
	// PoolBytes is a zswap pool's limit (compressed; SizeBytes is then
	// the pages it holds at Ratio).
	PoolBytes uint64
	// Ratio is uncompressed : compressed (random content: 1).
	Ratio float64
	// CPUSecondsPerPage is the cost of compressing or decompressing a page.
	CPUSecondsPerPage float64
	// PoolOnHost: the compressed pool's RAM is the host's, not the node's
	// (a node that is a memory cgroup on a larger host, as density's
	// cgroup backend builds it: zram's pool is charged to no cgroup).
	PoolOnHost bool
}

// VMSpec is one VM and its workload.
type VMSpec struct {
	MemoryBytes uint64
	// GuestOverheadBytes is guest memory besides the workload that stays
	// resident (the guest's kernel, its caches); HostOverheadBytes is the
	// host memory its hypervisor process holds beyond the guest RAM.
	GuestOverheadBytes uint64
	HostOverheadBytes  uint64
	// GuestCacheBytes is clean page cache the guest fills at boot and
	// never touches again (density's --guest-cache): a balloon takes it
	// back without I/O, while the host, blind to what it is, swaps it out
	// as the idlest of the VM's pages.
	GuestCacheBytes uint64
	// RequestBytes is what the scheduler reserves for it.
	RequestBytes uint64
	Workload     Workload
	// Process: the workload runs as a host process, not in a guest (as
	// density's cgroup backend runs it), so its pages are adjacent in the
	// host's address space and a sequential readahead window is one read,
	// and it starts at once, with no boot: a step's workers fill together.
	Process bool
}

// Workload is `headroom load`'s parameters as the model needs them.
type Workload struct {
	SizeBytes       uint64
	Scan            loadspec.Scan
	WriteFraction   float64
	RatePagesPerSec float64 // 0: as fast as possible
	// DupFraction is the share of its pages identical to pages of other
	// workloads (DupFraction of its content): what KSM can merge.
	DupFraction float64
}

// Validate checks a node and a VM, naming the field (Node.X, VM.X; a
// front end names its own flag for it).
func Validate(n Node, v VMSpec) error {
	if err := validateNode(n); err != nil {
		return err
	}
	return ValidateVM(v)
}

func validateNode(n Node) error {
	switch {
	case n.RAMBytes == 0:
		return fmt.Errorf("Node.RAMBytes must be positive")
	case n.SystemReserveBytes >= n.RAMBytes:
		return fmt.Errorf("Node.SystemReserveBytes %s leaves nothing of Node.RAMBytes %s", units.FormatBytes(n.SystemReserveBytes), units.FormatBytes(n.RAMBytes))
	case !(n.CPUs > 0):
		return fmt.Errorf("Node.CPUs must be positive")
	case !TouchRatesValid(n.TouchRate):
		return fmt.Errorf("Node.TouchRate: want %s, sizes ascending, rates positive", TouchRateForm)
	case !(n.TouchTurnBlocks >= 0 && n.TouchTurnBlocks <= MaxTouchTurnBlocks):
		return fmt.Errorf("Node.TouchTurnBlocks %g: want 0 or 1 (none) to %d blocks", n.TouchTurnBlocks, MaxTouchTurnBlocks)
	case n.Swap.SizeBytes > 0 && !(n.Swap.ReadIOPS > 0):
		return fmt.Errorf("Node.Swap.ReadIOPS must be positive with Node.Swap.SizeBytes")
	case n.Swap.SizeBytes > 0 && !(n.Swap.WriteIOPS > 0):
		return fmt.Errorf("Node.Swap.WriteIOPS must be positive with Node.Swap.SizeBytes")
	case n.Swap.SizeBytes > 0 && !(n.Swap.LatencySeconds > 0):
		return fmt.Errorf("Node.Swap.LatencySeconds must be positive with Node.Swap.SizeBytes (e.g. 100us)")
	case !depthsAscending(n.Swap.Depths):
		return fmt.Errorf("Node.Swap.Depths: want %s, depths ascending, rates positive", DepthsForm)
	case !mixedCapacityValid(n.Swap.MixedCapacity):
		return fmt.Errorf("Node.Swap.MixedCapacity: want %s, task counts ascending from 1, each 1 to %g", MixedCapacityForm, float64(maxMixedCapacity))
	case n.Tier != nil && !(n.Tier.Ratio >= 1):
		return fmt.Errorf("Node.Tier ratio must be at least 1")
	case n.Tier.isZswap() && n.Swap.SizeBytes == 0:
		return fmt.Errorf("Node.Tier zswap needs a swap device (Node.Swap.SizeBytes): its pages hold the device's slots")
	case n.PageCluster < 0 || n.PageCluster > 10:
		return fmt.Errorf("page cluster %d: want 0..10", n.PageCluster)
	}
	return nil
}

// ValidateVM checks a VM's parts against each other: what no node's
// figures change.
func ValidateVM(v VMSpec) error {
	switch {
	case v.Workload.SizeBytes == 0:
		return fmt.Errorf("VM.Workload.SizeBytes must be positive")
	case v.Workload.SizeBytes+v.GuestOverheadBytes > v.MemoryBytes:
		return fmt.Errorf("VM.Workload.SizeBytes %s plus VM.GuestOverheadBytes %s is larger than VM.MemoryBytes %s",
			units.FormatBytes(v.Workload.SizeBytes), units.FormatBytes(v.GuestOverheadBytes), units.FormatBytes(v.MemoryBytes))
	case v.Workload.SizeBytes+v.GuestOverheadBytes+v.GuestCacheBytes > v.MemoryBytes:
		return fmt.Errorf("VM.GuestCacheBytes %s with VM.Workload.SizeBytes %s and VM.GuestOverheadBytes %s is larger than VM.MemoryBytes %s",
			units.FormatBytes(v.GuestCacheBytes), units.FormatBytes(v.Workload.SizeBytes), units.FormatBytes(v.GuestOverheadBytes), units.FormatBytes(v.MemoryBytes))
	case v.GuestCacheBytes > 0 && v.Process:
		return fmt.Errorf("VM.GuestCacheBytes needs a guest, not VM.Process (a process has none)")
	case v.Workload.WriteFraction < 0 || v.Workload.WriteFraction > 1:
		return fmt.Errorf("VM.Workload.WriteFraction must be in [0,1]")
	case v.Workload.Scan != loadspec.ScanSeq && v.Workload.Scan != loadspec.ScanRandom && v.Workload.Scan != loadspec.ScanNone:
		return fmt.Errorf("VM.Workload.Scan %q: want seq, random or none", v.Workload.Scan)
	}
	return nil
}
