package sim

import (
	"math"
	"math/rand/v2"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
)

// Model constants. Each is a property of Linux or of the workload, not a
// fit to a measured curve.
const (
	// populateCost is how many touches' time a first touch takes (the
	// page is allocated and zeroed) when the populate rate is not given.
	populateCost = 4.0
	// defaultWritePages is how many dirty pages one write to the swap
	// device carries when Node.WritePages does not say: reclaim writes a
	// batch of LRU-tail pages to consecutive swap slots and the block layer
	// merges them (measured here: 7-8 pages with two tasks paging, fewer
	// with more).
	defaultWritePages = 8.0
	// maxWaitSeconds bounds a read's modelled wait (a device that cannot
	// keep up at all).
	maxWaitSeconds = 10.0
	// minPages is the least page count that counts as some (the model's
	// pages are fractional).
	minPages = 1e-6
	// vmCreateGapSeconds is how long after the one before a VM is
	// created, and vmBootSeconds how long it takes, give or take a fifth,
	// until its workload starts.
	vmCreateGapSeconds, vmBootSeconds = 0.05, 2.0
	// processCreateGapSeconds is how long after the one before a worker
	// process is created (its cgroup made, the process started), and
	// processStartSeconds how long it takes until it populates: measured
	// here in density's cgroup backend (4, 8 and 16 workers), 0.6-19 ms
	// apart (median 3.2) and populating 31-213 ms after (50 ms with four,
	// later the more workers already fill the cores).
	processCreateGapSeconds, processStartSeconds = 0.003, 0.05
)

type phase int

const (
	phaseBooting phase = iota
	phasePopulating
	phaseReady // populated, waiting for the step's start
	phaseRunning
	phaseGone
)

// vmState is one VM's pages, in pages (fractional: a group of pages,
// never a page).
type vmState struct {
	name      string
	createdAt float64 // when it was created, from the step's start
	startAt   float64 // when its workload starts populating
	phase     phase
	pages     float64 // the workload's pages
	overhead  float64 // pages always resident (guest and host overhead)
	// guestOverhead is the guest's part of overhead.
	guestOverhead float64
	// cache is the guest's idle page cache in RAM; cacheTier and cacheDisk
	// are what host reclaim moved of it to the tier and the device.
	// cacheGoal is what the guest fills at boot, cacheFilled what it has.
	cache, cacheTier, cacheDisk, cacheGoal, cacheFilled float64
	// memPages is the guest's memory after its balloon, maxPages its RAM.
	memPages, maxPages float64
	// dupShare is the share of its workload's pages KSM can merge;
	// merged the resident ones it has.
	dupShare, merged float64
	// populated pages have been touched once; each is resident, in the
	// tier or on the device.
	populated, resident, tier, disk float64
	// clean resident pages still have a valid copy in swap: evicting one
	// writes nothing.
	clean float64
	// slotted resident pages were swapped in while less than half the
	// swap was in use: the kernel keeps their slot (SwapCached) until it
	// evicts them again, into the same slot. The clean ones are among them.
	slotted float64
	// rate is its touches/s in the last tick (pages/s), for reclaim.
	rate float64
	// stall is the share of the last tick it waited on swap-ins.
	stall float64
	// evictedPerSec is the workload pages reclaim took from it a second
	// in the last tick; evicted what it has taken in this one.
	evictedPerSec, evicted float64
	// allowance is the most pages it may have swapped (+Inf: no limit):
	// its memory.swap.max. Kept slots count there too, but the kernel
	// frees them once the cgroup's swap is half its max
	// (mem_cgroup_swap_full), so they do not hold evictions back.
	allowance float64
	// measured phase counters.
	touches, faults float64
	readyAt         float64
	gone            string
}

func (v *vmState) live() bool { return v.phase != phaseGone }

// swapped is all the VM's pages in swap: its workload's and its cache's.
func (v *vmState) swapped() float64 { return v.tier + v.disk + v.cacheTier + v.cacheDisk }

// workloadSwapped is its workload's pages in swap (the only ones read back).
func (v *vmState) workloadSwapped() float64 { return v.tier + v.disk }

// keptSlots is the swap slots its resident pages keep (SwapCached).
func (v *vmState) keptSlots() float64 { return min(v.slotted, v.resident) }

// swapSlots is the swap it holds as the kernel counts it (free(1), the
// cgroup's memory.swap.current): its swapped pages and the slots its
// resident pages keep.
func (v *vmState) swapSlots() float64 { return v.swapped() + v.keptSlots() }

// node is the shared state of one simulated step.
type node struct {
	n         Node
	w         Workload
	vms       []*vmState
	rng       *rand.Rand
	dtSeconds float64
	// process: the workloads run as host processes, not in guests.
	process bool
	// capacityPages is RAM the VMs' pages may use: RAM minus the reserve.
	capacityPages float64
	tierCapPages  float64
	diskCapPages  float64
	// readWait is the last tick's time a swap-in read takes.
	readWait float64
	// pagingCPU is this tick's CPU per page paged from the device, at
	// the number of VMs faulting on it; touchRate its pages/s a core
	// touches in RAM, at the memory the running VMs touch per core.
	pagingCPU, touchRate float64
	// runQueueWait is this tick's wait for a core per page paged in from
	// the device, at the number of VMs faulting on it.
	runQueueWait float64
	// readaheadPages and writePages are this tick's pages a sequential
	// fault reads and a write carries, and mixedCapacity the device's
	// mixed capacity (1: none), at the number of VMs faulting.
	readaheadPages, writePages, mixedCapacity float64
	// windowPages is the most pages a readahead reads (2^PageCluster).
	windowPages float64
	// swapHalfFull is the kernel's vm_swap_full() this tick: from it a
	// page swapped in frees its slot.
	swapHalfFull bool
	// writebackLeft is what a full zswap pool still has to write back to
	// the device before it takes pages again; writebackPerSec the pages
	// it writes back a second this tick.
	writebackLeft, writebackPerSec float64
	// ksm is ksmd, stopped until the agent sets it.
	ksm *ksmd
	// devicePagesInPerSec is the last tick's pages in from the swap
	// device a second: the paging that slows the other cores and, on a
	// VM, has its host take some of them.
	devicePagesInPerSec float64
	// cumulative counters, like /proc/vmstat and PSI.
	swapIns, swapOuts, majorFaults float64
	psiSome, psiFull               float64 // seconds
	// vmCPUSeconds is the cores' busy time the VMs' touching, populating
	// and paging took (ksmd keeps its own).
	vmCPUSeconds float64
	// now is the tick's simulated time.
	now float64
}

func pagesOf(b uint64) float64 { return float64(b) / PageBytes }

func newNode(nd Node, spec VMSpec, count int, dt float64, seed uint64) *node {
	s := &node{n: nd, w: spec.Workload, process: spec.Process, rng: rand.New(rand.NewPCG(seed, 0x5eed)), dtSeconds: dt,
		capacityPages: pagesOf(nd.RAMBytes - nd.SystemReserveBytes), diskCapPages: pagesOf(nd.Swap.SizeBytes),
		readWait: nd.Swap.LatencySeconds, touchRate: TouchRateAt(nd.TouchRate, 0), ksm: newKSMD(nd.KSMDCPUSeconds),
		windowPages: math.Pow(2, float64(nd.PageCluster))}
	s.setIOFigures(0)
	if nd.Tier != nil {
		s.tierCapPages = pagesOf(nd.Tier.SizeBytes)
	}
	for i := range count {
		// VMs are created one after another and boot in 2 s give or take
		// a fifth: their workloads start populating at different times.
		// Processes (density's cgroup workers) start at once, one after
		// another: they populate together.
		created := vmCreateGapSeconds * float64(i)
		start := created + vmBootSeconds*(0.8+0.4*s.rng.Float64())
		if spec.Process {
			created = processCreateGapSeconds * float64(i)
			start = created + processStartSeconds
		}
		s.vms = append(s.vms, &vmState{name: workerName(i), createdAt: created, startAt: start, pages: pagesOf(spec.Workload.SizeBytes),
			overhead: pagesOf(spec.GuestOverheadBytes + spec.HostOverheadBytes), guestOverhead: pagesOf(spec.GuestOverheadBytes),
			cacheGoal: pagesOf(spec.GuestCacheBytes), memPages: pagesOf(spec.MemoryBytes), maxPages: pagesOf(spec.MemoryBytes),
			dupShare: spec.Workload.DupFraction, allowance: math.Inf(1)})
	}
	return s
}

// readahead is the pages one swap-in fault of this scan brings: the
// window (by the VMs faulting) for a sequential scan, one for a random.
func (s *node) readahead() float64 {
	if s.w.Scan != loadspec.ScanSeq {
		return 1
	}
	return s.readaheadPages
}

// setIOFigures sets this tick's I/O sizes and the device's mixed
// capacity at the VMs faulting now.
func (s *node) setIOFigures(faulting float64) {
	s.readaheadPages = ioPagesAt(s.n.ReadaheadPages, faulting, s.windowPages)
	s.writePages = ioPagesAt(s.n.WritePages, faulting, defaultWritePages)
	s.mixedCapacity = capacityAt(s.n.Swap.MixedCapacity, faulting)
}

// halfFull is the kernel's vm_swap_full(): the swap slots in use, the
// swapped pages' and those swapped-in pages keep, are at least half the
// swap (the device's and the tier's).
func (s *node) halfFull() bool {
	total := s.swapCapPages()
	if total <= 0 {
		return false
	}
	var used float64
	for _, v := range s.vms {
		if v.live() {
			used += v.swapSlots()
		}
	}
	return used >= total/2
}

// swapCapPages is the swap the kernel counts: the device's and a zram
// tier's (zswap is no swap area: its pages hold the device's slots).
func (s *node) swapCapPages() float64 {
	if s.n.Tier.isZswap() {
		return s.diskCapPages
	}
	return s.diskCapPages + s.tierCapPages
}

// writeBack moves this tick's share of a full zswap pool's writeback to
// the device: its oldest pages, a write each, at up to half the device's
// write rate (the shrink worker writes back one page after another).
func (s *node) writeBack(dt float64) {
	s.writebackPerSec = 0
	if s.writebackLeft <= 0 {
		return
	}
	var held float64
	for _, v := range s.vms {
		if v.live() {
			held += v.tier + v.cacheTier
		}
	}
	w := min(s.writebackLeft, held, 0.5*s.n.Swap.WriteIOPSAt()*dt)
	if w <= 0 {
		s.writebackLeft = 0
		return
	}
	for _, v := range s.vms {
		if !v.live() || v.tier+v.cacheTier <= 0 {
			continue
		}
		share := w / held
		v.disk += v.tier * share
		v.cacheDisk += v.cacheTier * share
		v.tier -= v.tier * share
		v.cacheTier -= v.cacheTier * share
	}
	s.writebackLeft -= w
	s.writebackPerSec = w / dt
	s.swapOuts += w
}

// pagesPerRead is the pages one device read carries. A process's
// sequential window is one read: reclaim took its pages from the LRU tail
// in order, 32 at a time, into consecutive swap slots, and they are
// adjacent in its address space (measured here: 6 pages and 25 KiB per
// read at 6 seq workers). A guest's pages are scattered over the host's
// address space by the guest's allocator: the host reads a sequential
// window's pages in parallel, each its own I/O.
func (s *node) pagesPerRead() float64 {
	if s.process && s.w.Scan == loadspec.ScanSeq {
		return s.readaheadPages
	}
	return 1
}

// hit is the chance a touch finds its page resident.
func (s *node) hit(v *vmState) float64 {
	if v.pages <= 0 {
		return 1
	}
	f := v.resident / v.pages
	if s.w.Scan == loadspec.ScanSeq && f < 0.999 {
		return 0 // LRU evicts exactly the pages the scan needs next
	}
	return min(f, 1)
}

// tierShare is the share of a VM's swapped workload pages in the
// compressed tier.
func tierShare(v *vmState) float64 {
	if sw := v.workloadSwapped(); sw > 0 {
		return v.tier / sw
	}
	return 0
}

// touchTime is the seconds one touch takes on average, the part of it
// spent waiting for the device, and the core-seconds it uses, at a given
// CPU share and read wait.
func (s *node) touchTime(v *vmState, cpuShare, readWait float64) (total, waiting, cpu float64) {
	_, total, waiting, cpu = s.touch(v, cpuShare, readWait)
	return total, waiting, cpu
}

// touch is touchTime with the chance a touch misses over the next tick.
// A page brought back stays in for the rest of the tick (reclaim taking
// what the VM faults in from others), so a VM that touches its pages many
// times a tick misses each page it has out once, not on every touch while
// the page is out:
//   - a sequential scan misses every page while pages it needs are out
//     (see hit); one that would bring all of them back within the tick
//     misses only those and touches the rest of the tick in RAM;
//   - a random scan's T touches in a tick find out × (1 − e^(−T/pages))
//     of the pages it has out, each once, and the pages reclaim takes
//     from it meanwhile (randomMisses).
//
// The miss chance m is the fixed point of m = misses(T)/T at T = tick ÷
// touch time(m).
func (s *node) touch(v *vmState, cpuShare, readWait float64) (miss, total, waiting, cpu float64) {
	miss = 1 - s.hit(v)
	total, waiting, cpu = s.touchTimeMissing(v, cpuShare, readWait, miss)
	out := v.workloadSwapped()
	if miss <= 0 || out <= 0 || v.pages <= 0 {
		return miss, total, waiting, cpu
	}
	touchSeconds := func(m float64) float64 {
		t, _, _ := s.touchTimeMissing(v, cpuShare, readWait, m)
		return s.cappedSeconds(t)
	}
	// most is the most pages it can miss in the tick.
	missesIn, most := func(touches float64) float64 { return min(touches, out) }, out
	if s.w.Scan != loadspec.ScanSeq {
		if touches := s.dtSeconds / s.cappedSeconds(total); touches < randomRevisitTouches*v.pages {
			return miss, total, waiting, cpu // it seldom comes back to a page within the tick
		}
		missesIn = func(touches float64) float64 { return s.randomMisses(v, out, touches) }
		most = out + v.evictedPerSec*s.dtSeconds
	}
	// The touch time is a maximum of lines in m, so the chord from 0 to
	// 1 lies on or above it: the fixed point of m = most × touch time(m) ÷
	// tick on the chord is at or above the scan's, as is the miss chance
	// before while reclaim does not add to what it has out (misses(T)/T
	// falls as T grows), and the iteration falls to the fixed point from
	// above.
	missSeconds := s.cappedSeconds(total)
	if miss < 1 {
		missSeconds = touchSeconds(1)
	}
	if most*missSeconds >= s.dtSeconds {
		if s.w.Scan == loadspec.ScanSeq {
			return miss, total, waiting, cpu // it cannot bring them all back
		}
	} else {
		hitSeconds := touchSeconds(0)
		miss = min(miss, most*hitSeconds/(s.dtSeconds-most*(missSeconds-hitSeconds)))
	}
	for range 4 {
		touches := s.dtSeconds / touchSeconds(miss)
		miss = min(missesIn(touches)/touches, 1)
	}
	total, waiting, cpu = s.touchTimeMissing(v, cpuShare, readWait, miss)
	return miss, total, waiting, cpu
}

// randomMisses is the pages a random scan of touches touches in a tick
// misses with out pages out at its start, while reclaim takes its pages
// at the last tick's rate e: with r its touch rate, its pages out relax
// to e × pages/r in pages/r seconds, and it misses r/pages of them a
// second, so over the tick it misses e × tick + (out − e × tick ×
// pages/touches) × (1 − e^(−touches/pages)). Without reclaim it brings
// each page it has out back once; with reclaim taking at its fault rate,
// as on a plateau, the share out stays, and so does its miss chance.
func (s *node) randomMisses(v *vmState, out, touches float64) float64 {
	takenInTick := v.evictedPerSec * s.dtSeconds
	return max(takenInTick+(out-takenInTick*v.pages/touches)*-math.Expm1(-touches/v.pages), 0)
}

// randomRevisitTouches is the touches a page of its block a random scan
// must make in a tick for its misses to be counted page by page: below,
// (1 − e^(−x))/x is within 2.5% of 1 and the miss chance is the share
// out.
const randomRevisitTouches = 0.05

// cappedSeconds is a touch's time t, at least the rate limit's.
func (s *node) cappedSeconds(t float64) float64 {
	if s.w.RatePagesPerSec > 0 {
		return max(t, 1/s.w.RatePagesPerSec)
	}
	return t
}

// touchTimeMissing is touchTime for a touch that misses with chance miss.
func (s *node) touchTimeMissing(v *vmState, cpuShare, readWait, miss float64) (total, waiting, cpu float64) {
	cpu = 1 / s.touchRate // seconds of a whole core
	if miss <= 0 {
		return cpu / cpuShare, 0, cpu
	}
	z := tierShare(v)
	var tierCPU float64
	if s.n.Tier != nil {
		tierCPU = s.n.Tier.CPUSecondsPerPage
	}
	// A sequential scan waits once per readahead window (the rest of the
	// window comes in the same read); a random one on every miss. Every
	// page paged costs the kernel's paging CPU (its way in and, in steady
	// state, another page's way out): the fault and reclaim are the same
	// from the tier as from the device (measured here: zram pages cost
	// 158 µs each, disk pages 150-180 µs), and a tier's page adds its
	// decompression and another's compression. All of it runs on the VM's
	// share of the cores. A read's completion wakes the VM, which waits
	// for a core: the measured run-queue wait, or the fair share's
	// stretch where the cores are oversubscribed (the two are one wait,
	// seen from the machine and from the fluid share). A page read ahead
	ownPages := s.readahead()
	deviceIn := miss * (1 - z)
	waiting = deviceIn / ownPages * readWait
	cpu += deviceIn*s.pagingCPU + miss*z*(s.pagingCPU+2*tierCPU)
	onCore := max(cpu/cpuShare, cpu+deviceIn*s.runQueueWait)
	return onCore + waiting, waiting, cpu
}

// rateAt is a running VM's touches/s at a given CPU share and read wait,
// capped by its rate limit.
func (s *node) rateAt(v *vmState, cpuShare, readWait float64) float64 {
	t, _, _ := s.touchTime(v, cpuShare, readWait)
	return 1 / s.cappedSeconds(t)
}

// dirtyShare is the share of a VM's evicted pages that must be written.
func (s *node) dirtyShare(v *vmState) float64 {
	if s.w.WriteFraction > 0 || v.resident <= 0 {
		return 1
	}
	return 1 - min(v.clean/v.resident, 1)
}

// deviceLoad is the share of the swap device's capacity the running VMs
// use at a given read wait: their reads plus the writes of the pages
// evicted to make room for what they read (in steady state, as many).
// Reads are served at the rate of the depth they keep outstanding (by
// Little's law, their rate times the wait), writes at the deepest; each
// I/O's pages beyond its first add their transfer time.
func (s *node) deviceLoad(cpuShare, readWait float64) float64 {
	if s.n.Swap.ReadIOPS <= 0 {
		return 0
	}
	var reads, writes float64
	toDevice := 1 - s.tierRoomShare() // evictions the tier does not take
	for _, v := range s.vms {
		if v.phase != phaseRunning {
			continue
		}
		miss, t, _, _ := s.touch(v, cpuShare, readWait)
		if miss <= 0 {
			continue
		}
		r := 1 / s.cappedSeconds(t)
		z := tierShare(v)
		reads += r * miss * (1 - z) / s.pagesPerRead()
		writes += r * miss * s.dirtyShare(v) * toDevice / s.writePages
	}
	d := s.n.Swap
	busy := reads*d.ReadSeconds(d.ReadIOPSAt(reads*readWait), s.pagesPerRead()) + writes*d.WriteSeconds(d.WriteIOPSAt(), s.writePages) +
		s.writebackPerSec*d.WriteSeconds(d.WriteIOPSAt(), 1)
	return busy / s.mixedCapacity
}

// tierRoomShare is 1 while the compressed tier has room (evictions go
// there, not to the device), else 0. A zswap pool refuses pages while it
// writes back, and takes none the device has no slot for.
func (s *node) tierRoomShare() float64 {
	if s.tierRoomPages() <= minPages {
		return 0
	}
	if s.n.Tier.isZswap() && (s.writebackLeft > 0 || s.diskRoomPages() <= minPages) {
		return 0
	}
	return 1
}

// diskRoomPages is the slots left on the device: its pages' and a zswap
// pool's take one each.
func (s *node) diskRoomPages() float64 {
	var used float64
	for _, v := range s.vms {
		if v.live() {
			used += v.disk + v.cacheDisk
			if s.n.Tier.isZswap() {
				used += v.tier + v.cacheTier
			}
		}
	}
	return s.diskCapPages - used
}

// tierRoomPages is what the compressed tier can still take.
func (s *node) tierRoomPages() float64 {
	if s.tierCapPages <= 0 {
		return 0
	}
	var used float64
	for _, v := range s.vms {
		used += v.tier + v.cacheTier
	}
	return s.tierCapPages - used
}

// solveReadWait finds how long a swap-in read waits: its latency while
// the demand fits the device, else the wait at which the closed loop of
// faulting VMs slows down to exactly the device's rate.
func (s *node) solveReadWait(cpuShare float64) float64 {
	base := s.n.Swap.LatencySeconds
	if base <= 0 || s.deviceLoad(cpuShare, base) <= 1 {
		return base
	}
	lo, hi := base, maxWaitSeconds
	if s.deviceLoad(cpuShare, hi) > 1 {
		return hi
	}
	for range 40 {
		mid := math.Sqrt(lo * hi) // the wait spans orders of magnitude
		if s.deviceLoad(cpuShare, mid) > 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// cpuShare is the share of a core each busy VM gets: all of one while the
// VMs' CPU demand fits the node's cores, else the share at which the cores
// they use (a running VM only while it is not waiting for the device) add
// up to the node's.
func (s *node) cpuShare() float64 {
	// ksmd's share of a core, last tick
	cpus := s.n.CPUs - s.ksm.coresUsed
	if s.coresUsed(1) <= cpus {
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 30 {
		mid := (lo + hi) / 2
		if s.coresUsed(mid) > cpus {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo
}

// faulting counts the running VMs that fault, on the device or the tier.
func (s *node) faulting() float64 {
	var n float64
	for _, v := range s.vms {
		if v.phase == phaseRunning && s.hit(v) < 1 {
			n++
		}
	}
	return n
}

// touchedBytesPerCore is the memory that sets a core's touch rate: the
// running VMs' mean resident workload memory (each walks its own page
// tables), more where they take turns on a core and the correction
// Node.TouchTurnBlocks is given (TouchBytes).
func (s *node) touchedBytesPerCore() float64 {
	if s.w.Scan == loadspec.ScanNone {
		return 0
	}
	var pages, busy float64
	for _, v := range s.vms {
		if v.phase == phaseRunning {
			pages += v.resident
			busy++
		}
	}
	if busy == 0 {
		return 0
	}
	return TouchBytes(pages*PageBytes/busy, busy/min(busy, s.n.CPUs), s.n.TouchTurnBlocks)
}

// coresUsed is the cores the busy VMs use at a share of a core each.
func (s *node) coresUsed(share float64) float64 {
	var cores float64
	for _, v := range s.vms {
		switch v.phase {
		case phasePopulating:
			cores += share
		case phaseRunning:
			_, _, cpu := s.touchTime(v, 1, s.readWait)
			cores += s.rateAt(v, share, s.readWait) * cpu
		}
	}
	return cores
}

// tick advances the node by one time step at simulated time now; measuring
// says whether the running VMs' touches count.
func (s *node) tick(now float64, measuring bool) {
	dt := s.dtSeconds
	s.now = now
	faulting := s.faulting()
	s.pagingCPU = pagingCPUAt(s.n.PagingCPU, faulting)
	s.runQueueWait = runQueueWaitAt(s.n.RunQueueWait, s.n.PagingCPU, s.n.CPUs, faulting)
	s.swapHalfFull = s.halfFull()
	s.setIOFigures(faulting)
	s.writeBack(dt)
	touched := s.touchedBytesPerCore()
	s.touchRate = TouchRateAt(s.n.TouchRate, touched)
	share := s.cpuShare()
	s.readWait = s.solveReadWait(share)
	s.vmCPUSeconds += min(s.coresUsed(share), s.n.CPUs) * dt
	fill := s.fillShare(share, dt)
	var stalledAll, anyStalled = 1.0, 0.0
	var devicePagesIn float64
	running := 0
	for _, v := range s.vms {
		v.evictedPerSec, v.evicted = v.evicted/dt, 0
	}
	for _, v := range s.vms {
		switch v.phase {
		case phaseBooting:
			if now >= v.startAt {
				v.phase = phasePopulating
			}
		case phasePopulating:
			rate := s.populateRate(share)
			budget := rate * dt * fill
			// The guest fills its cache at boot, before its workload,
			// as far as its balloon leaves it room.
			if c := min(v.cacheGoal-v.cacheFilled, budget, max(v.memPages-v.guestUsed()-v.cacheHeld(), 0)); c > 0 {
				v.cache += c
				v.cacheFilled += c
				budget -= c
			}
			n := min(v.pages-v.populated, budget)
			v.populated += n
			v.resident += n
			v.setBalloon(v.memPages) // a growing guest takes back its balloon
			v.rate = rate * fill
			if v.populated >= v.pages {
				v.phase, v.readyAt, v.rate = phaseReady, now, 0
			}
		case phaseReady: // waiting for the others
		case phaseRunning:
			running++
			missChance, t, wait, _ := s.touch(v, share, s.readWait)
			r := 1 / s.cappedSeconds(t)
			v.rate, v.stall = r, wait/t
			touches := r * dt
			miss := touches * missChance
			z := tierShare(v)
			in := min(miss, v.workloadSwapped())
			fromTier := in * z
			v.tier -= fromTier
			v.disk -= in - fromTier
			v.resident += in
			// A write to a merged page breaks its sharing (copy on write).
			if cow := min(touches*s.w.WriteFraction*v.merged/max(v.pages, 1), v.merged); cow > 0 {
				v.merged -= cow
				s.ksm.cowBreaks += cow
			}
			// Below half full a page swapped in from the device keeps
			// its slot, and a page only read keeps a valid copy there;
			// from half full the kernel frees the slot (vm_swap_full).
			// zram is a synchronous device: its swap-ins bypass the swap
			// cache and free their slot at once (measured: SwapCached
			// stayed 0 at 83k pages a second in from zram). A zswap page
			// keeps its slot on the device but no copy.
			// (pswpin counts block reads only: a zswap load is zswpin.)
			slotKeepers, blockReads := in-fromTier, in
			if s.n.Tier.isZswap() {
				slotKeepers, blockReads = in, in-fromTier
			}
			if !s.swapHalfFull {
				v.slotted += slotKeepers
				if s.w.WriteFraction == 0 {
					v.clean += in - fromTier
				}
			}
			faults := miss * (z + (1-z)/s.readahead())
			devicePagesIn += in - fromTier
			s.swapIns += blockReads
			s.majorFaults += faults
			if measuring {
				v.touches += touches
				v.faults += faults
			}
			stalledAll *= v.stall
			anyStalled = 1 - (1-anyStalled)*(1-v.stall)
		}
	}
	s.devicePagesInPerSec = devicePagesIn / dt
	if running > 0 {
		s.psiSome += anyStalled * dt
		s.psiFull += stalledAll * dt
	}
	s.ksmTick(now, dt)
	s.reclaim(dt)
	// A zswap pool that reached its limit writes its oldest pages back
	// until it is down to the accept threshold.
	if s.n.Tier.isZswap() && s.writebackLeft <= 0 && s.tierRoomPages() <= minPages {
		s.writebackLeft = (1 - zswapAcceptShare) * zswapWritebackMultiple * s.tierCapPages
	}
}

// fillShare is the share of their populate rate the filling VMs get this
// tick at a CPU share. Past the node's RAM a new page waits for reclaim,
// which frees dirty pages only as fast as the device writes them: the
// fill slows to the room left plus the device's writes (measured here:
// ten 256 MiB workers filled a 1 GiB node in 1.7-8.6 s each, most in
// 6-8.6 s, about the deficit at the device's write rate, where four
// filled it in 0.6-0.8 s). A compressed tier with room takes the pages
// at the CPU's pace.
func (s *node) fillShare(cpuShare, dt float64) float64 {
	// Most ticks fill nothing: those return before the node's sums.
	perVM := s.populateRate(cpuShare) * dt
	var want float64
	for _, v := range s.vms {
		if v.phase == phasePopulating {
			want += min(perVM, v.pages-v.populated+max(v.cacheGoal-v.cacheFilled, 0))
		}
	}
	if want <= 0 {
		return 1
	}
	writes := s.writePagesPerSec()
	if s.tierRoomShare() > 0 || !(writes > 0) {
		return 1
	}
	room := max(s.capacityPages-s.usedPages(), 0) + writes*dt
	if want <= room {
		return 1
	}
	return room / want
}

// populateRate is the pages a second a VM fills at a CPU share.
func (s *node) populateRate(cpuShare float64) float64 {
	if s.n.PopulateRatePerCore > 0 {
		return s.n.PopulateRatePerCore * cpuShare
	}
	return s.n.TouchRate[0].PagesPerSec * cpuShare / populateCost
}

// usedPages is what the VMs hold in RAM: resident pages, overheads, and
// the compressed tier's pool.
func (s *node) usedPages() float64 {
	var used, tier float64
	for _, v := range s.vms {
		if v.live() {
			used += v.resident + v.cache + v.overhead
			tier += v.tier + v.cacheTier
		}
	}
	if s.n.Tier != nil && !s.n.Tier.PoolOnHost {
		used += tier / s.n.Tier.Ratio
	}
	return used - s.ksmSavedPages()
}
