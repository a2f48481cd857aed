package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/memload/loadspec"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

func smallNode() Node {
	return Node{RAMBytes: 8 << 30, CPUs: 64, TouchRate: []TouchRate{{PagesPerSec: 1e7}}, PageCluster: 3,
		Swap: Device{SizeBytes: 64 << 30, ReadIOPS: 10000, WriteIOPS: 1e9, LatencySeconds: 100e-6}}
}

func oneVM(scan loadspec.Scan) VMSpec {
	return VMSpec{MemoryBytes: 2 << 30, RequestBytes: 1 << 30, Workload: Workload{SizeBytes: 1 << 30, Scan: scan, WriteFraction: 1}}
}

// running puts a node's VMs in the measured phase with a resident
// fraction of their workload (the rest on the device).
func running(n *node, resident float64) {
	for _, v := range n.vms {
		v.phase, v.populated = phaseRunning, v.pages
		v.resident, v.disk = resident*v.pages, (1-resident)*v.pages
	}
}

// Random access with resident fraction f hits with probability f: the
// faults per touch over a tick are 1-f.
func TestRandomHitsWithItsResidentFraction(t *testing.T) {
	for _, f := range []float64{0, 0.25, 0.5, 0.9, 1} {
		n := newNode(smallNode(), oneVM(loadspec.ScanRandom), 1, 0.001, 1)
		running(n, f)
		n.capacityPages = 1e12 // nothing evicted during the tick
		n.tick(0, true)
		v := n.vms[0]
		if got := v.faults / v.touches; math.Abs(got-(1-f)) > 1e-3 {
			t.Errorf("resident %g: %.4f faults per touch, want %.4f", f, got, 1-f)
		}
	}
}

// A sequential scan larger than its share misses on every page under LRU:
// every touched page comes from the device, one fault per readahead
// window of 8 pages.
func TestSequentialScanLargerThanItsShareMissesEveryPage(t *testing.T) {
	n := newNode(smallNode(), oneVM(loadspec.ScanSeq), 1, 0.001, 1)
	running(n, 0.9)
	n.capacityPages = 1e12
	n.tick(0, true)
	v := n.vms[0]
	if in := n.swapIns; math.Abs(in-v.touches) > 1e-6*v.touches {
		t.Errorf("%.0f pages in for %.0f touches at 90%% resident; want every page", in, v.touches)
	}
	if got := v.faults / v.touches; math.Abs(got-1.0/8) > 1e-9 {
		t.Errorf("%.4f faults per touch, want 1/8 (readahead)", got)
	}
	running(n, 1)
	if n.hit(v) != 1 {
		t.Error("a fully resident scan misses")
	}
}

// A sequential scan that brings back all it has out within a tick (reclaim
// taking nothing from it) misses those pages only and touches the rest of
// the tick in RAM; one with more out than it can bring back in a tick
// misses every page. Here a miss takes a touch's CPU and an eighth of the
// device's 100 µs (readahead), a hit a touch's 0.1 µs; a guest's window is
// a read a page, and the device serves 10k reads a second.
func TestSequentialScanBringsBackWhatItHasOut(t *testing.T) {
	const tick, hitSeconds = 0.25, 1e-7
	missSeconds := hitSeconds + 100e-6/8
	for _, c := range []struct {
		outPages     float64
		wantTouches  float64
		wantResident bool
	}{
		{1000, 1000 + (tick-1000*missSeconds)/hitSeconds, true},
		{100000, 10000 * tick, false}, // 1.26 s of misses at the latency: the device's rate all the tick
	} {
		n := newNode(smallNode(), oneVM(loadspec.ScanSeq), 1, tick, 1)
		running(n, 1)
		v := n.vms[0]
		v.resident, v.disk = v.pages-c.outPages, c.outPages
		n.capacityPages = 1e12 // nothing evicted during the tick
		n.tick(0, true)
		if math.Abs(v.touches-c.wantTouches) > 1e-3*c.wantTouches {
			t.Errorf("%.0f pages out: %.0f touches in the tick, want %.0f", c.outPages, v.touches, c.wantTouches)
		}
		if resident := v.disk < minPages; resident != c.wantResident || math.Abs(n.swapIns-min(c.outPages, v.touches)) > 1e-6*c.outPages {
			t.Errorf("%.0f pages out: %.0f in, %.0f still out; want all back: %v", c.outPages, n.swapIns, v.disk, c.wantResident)
		}
	}
}

// allFaulting runs count VMs of random access, all on the device, for a
// one-second tick; it returns the node and the reads it served.
func allFaulting(nd Node, count int) (*node, float64) {
	n := newNode(nd, oneVM(loadspec.ScanRandom), count, 1, 1)
	running(n, 0)
	n.capacityPages = 1e12 // nothing evicted during the tick
	n.tick(0, true)
	var reads float64
	for _, v := range n.vms {
		reads += v.faults
	}
	return n, reads
}

// A device at its IOPS limit queues: the reads it serves stay at its
// rate however many VMs fault, and each waits longer; under the limit a
// read takes the device's latency.
func TestDeviceAtItsLimitQueues(t *testing.T) {
	for _, count := range []int{1, 50, 200} {
		n, reads := allFaulting(smallNode(), count)
		load := n.deviceLoad(n.cpuShare(), n.readWait)
		switch {
		case count == 1 && (n.readWait != 100e-6 || reads > 10000):
			t.Errorf("1 VM: wait %g s, %.0f reads/s; want the latency, under the device's rate", n.readWait, reads)
		case count > 1 && (math.Abs(reads-10000) > 10 || math.Abs(load-1) > 1e-3 || n.readWait <= 100e-6):
			t.Errorf("%d VMs: %.0f reads/s at load %.3f, wait %g s; want 10000/s, load 1, a longer wait", count, reads, load, n.readWait)
		}
		if count == 200 && n.readWait < 0.015 {
			t.Errorf("200 VMs on a 10k IOPS device wait %g s per read; want about 200/10000 s", n.readWait)
		}
	}
}

// Below half full a swapped-in page keeps its slot (and, only read, a
// valid copy there); from half full the kernel frees the slot, so the
// page must be written again when evicted.
func TestSwappedInPagesKeepTheirSlotBelowHalfFullSwap(t *testing.T) {
	for _, c := range []struct {
		swapBytes uint64
		from      TierKind // "": the device
		keeps     bool
	}{{64 << 30, "", true}, {1 << 30, "", false}, {64 << 30, TierZram, false}, {64 << 30, TierZswap, true}} { // 1 GiB: 512 MiB out
		nd := smallNode()
		nd.Swap.SizeBytes = c.swapBytes
		if c.from != "" {
			nd.Tier = &Tier{Kind: c.from, SizeBytes: 64 << 30, Ratio: 1}
		}
		spec := oneVM(loadspec.ScanRandom)
		spec.Workload.WriteFraction = 0
		n := newNode(nd, spec, 1, 1, 1)
		running(n, 0.5)
		v := n.vms[0]
		if c.from != "" {
			v.tier, v.disk = v.disk, 0
		}
		n.capacityPages = 1e12 // nothing evicted
		out := v.workloadSwapped()
		n.tick(0, true)
		in := out - v.workloadSwapped()
		want, wantClean := 0.0, 0.0
		if c.keeps {
			want = in
		}
		if c.from == "" {
			wantClean = want // zswap keeps no copy of what it loads
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(a, b, 1) }
		if in <= 0 || !near(v.slotted, want) || !near(v.clean, wantClean) {
			t.Errorf("%s swap, from %q: %.0f pages in, %.0f kept their slot, %.0f clean; want %.0f and %.0f", units.FormatBytes(c.swapBytes), c.from, in, v.slotted, v.clean, want, wantClean)
		}
		// pswpin counts block reads only: a zswap load is not one.
		if wantIn := map[TierKind]float64{"": in, TierZram: in, TierZswap: 0}[c.from]; !near(n.swapIns, wantIn) {
			t.Errorf("from %q: %.0f pages in, %.0f counted as swap-ins (pswpin); want %.0f", c.from, in, n.swapIns, wantIn)
		}
	}
}

// A step's swap in use counts the slots swapped-in pages keep, as free(1)
// and memory.swap.current do: the same ramp step (about 24 GiB out) over a
// swap device so large it stays below half full holds gigabytes more swap
// than over one half full from the start, where the kernel frees every
// slot on swap-in.
func TestStepSwapUseCountsKeptSlots(t *testing.T) {
	used := map[uint64]uint64{}
	for _, swapBytes := range []uint64{1400 << 30, 40 << 30} {
		p := paper(loadspec.ScanRandom, []int{13})
		p.VM.Workload.WriteFraction = 0
		p.RuntimeSeconds = 20
		p.Node.Swap.SizeBytes = swapBytes
		run, _, err := Run(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		used[swapBytes] = run.Steps[0].SwapUsedBytes
	}
	if big, half := used[1400<<30], used[40<<30]; half == 0 || big < half+1<<30 {
		t.Errorf("13 VMs hold %s of swap over 1400 GiB and %s over 40 GiB; want the first at least 1 GiB more (the kept slots)",
			units.FormatBytes(big), units.FormatBytes(half))
	}
}

// A process's sequential readahead window is one device read (its pages
// sit in adjacent swap slots and addresses), a guest's window eight: at
// the device's read limit the process swaps eight times the pages in.
func TestProcessSequentialWindowIsOneRead(t *testing.T) {
	for _, process := range []bool{false, true} {
		spec := oneVM(loadspec.ScanSeq)
		spec.Process = process
		n := newNode(smallNode(), spec, 50, 1, 1)
		running(n, 0.5)
		n.capacityPages = 1e12
		n.tick(0, true)
		want := 10000.0 // the device's reads
		if process {
			want *= 8
		}
		if math.Abs(n.swapIns-want) > 0.01*want {
			t.Errorf("process %v: %.0f pages in per second from a 10k IOPS device, want %.0f", process, n.swapIns, want)
		}
	}
}

// On few cores the kernel's paging CPU, not the device, bounds the
// paging rate: each page in costs the touch and the paging CPU, and the
// cores are shared, so ten faulting VMs on two cores touch
// 2 / (1/touch rate + paging CPU) pages a second together.
func TestPagingCPUBoundsPagingOnFewCores(t *testing.T) {
	nd := smallNode()
	nd.CPUs, nd.Swap.ReadIOPS, nd.PagingCPU = 2, 1e9, []PagingCost{{Tasks: 1, SecondsPerPage: 30e-6}}
	n := processSeqTick(nd, 10)
	var touches float64
	for _, v := range n.vms {
		touches += v.touches
	}
	want := 2 / (1/nd.TouchRate[0].PagesPerSec + 30e-6)
	if math.Abs(touches-want) > 0.02*want {
		t.Errorf("%.0f pages/s on 2 cores at 30 µs per page paged, want %.0f", touches, want)
	}
	if math.Abs(n.vmCPUSeconds-2) > 0.01 { // both cores busy for the 1 s tick
		t.Errorf("%.3f CPU seconds busy in 1 s on 2 cores bound by paging", n.vmCPUSeconds)
	}
}

// With rates by queue depth, the reads a device serves follow the depth
// the faulting VMs keep: one VM waiting on one read at a time gets the
// depth-1 rate, sixteen get the depth-16 rate; between measured depths
// the rate is interpolated in log2 of the depth.
func TestDeviceRateFollowsQueueDepth(t *testing.T) {
	nd := smallNode()
	nd.Swap.Depths = []DepthRate{{QueueDepth: 1, ReadIOPS: 1000, WriteIOPS: 1e9}, {QueueDepth: 16, ReadIOPS: 16000, WriteIOPS: 1e9}}
	for count, want := range map[int]float64{1: 1000, 16: 16000, 64: 16000} {
		if _, reads := allFaulting(nd, count); math.Abs(reads-want) > 0.02*want {
			t.Errorf("%d VMs: %.0f reads/s, want %.0f (the rate at their depth)", count, reads, want)
		}
	}
	if got := nd.Swap.ReadIOPSAt(4); math.Abs(got-8500) > 1e-9 {
		t.Errorf("depth 4 between 1:1000 and 16:16000: %g IOPS, want 8500 (halfway in log2)", got)
	}
	if got := nd.Swap.ReadIOPSAt(0.2); got != 1000 {
		t.Errorf("below the first depth: %g, want its rate", got)
	}
}

func TestParseDepths(t *testing.T) {
	for in, want := range map[string][]DepthRate{
		"1:6500/3700":                {{1, 6500, 3700}},
		"1:6500/3700, 16:45e3/29000": {{1, 6500, 3700}, {16, 45000, 29000}},
		"":                           nil,
		"4:1/1,2:1/1":                nil, // not ascending
		"1:6500":                     nil,
		"0:1/1":                      nil,
		"1:0/1":                      nil,
		"1:1/-1":                     nil,
		"a:1/1":                      nil,
		"1:1/1,1:2/2":                nil,
		"1:NaN/1":                    nil,
		"1:Inf/1":                    nil,
	} {
		got, err := ParseDepths(in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), DepthsForm) {
				t.Errorf("%q: %+v, %v; want an error naming %s", in, got, err, DepthsForm)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// What ParseDepths accepts, FormatDepths writes back in a form it
// accepts again, unchanged.
func FuzzParseDepths(f *testing.F) {
	for _, s := range []string{"1:6500/3700", "1:6517.2/3720,2:13065/12313,4:28298/22077,8:37661/29155,16:44762/28759", "4:1/1,2:1/1", "1:1e300/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ds, err := ParseDepths(s); err == nil {
			roundTripExact(t, s, ds, ParseDepths, FormatDepths)
		}
	})
}

// roundTripExact fails unless what parse made of s, formatted, parses
// again to the same figures.
func roundTripExact[T any](t *testing.T, s string, xs []T, parse func(string) ([]T, error), format func([]T) string) {
	t.Helper()
	again, err := parse(format(xs))
	if err != nil {
		t.Fatalf("%q parsed to %+v, formatted to %q, refused: %v", s, xs, format(xs), err)
	}
	if !reflect.DeepEqual(again, xs) {
		t.Fatalf("%q: %+v, %+v after a round trip", s, xs, again)
	}
}

// Reclaim spares pages touched since it last passed: a VM touching its
// pages often loses fewer of them than an idle one of the same size.
func TestReclaimTakesColdPagesFirst(t *testing.T) {
	n := newNode(smallNode(), oneVM(loadspec.ScanRandom), 2, 0.25, 1)
	running(n, 1)
	hot, cold := n.vms[0], n.vms[1]
	hot.rate, cold.rate = 1e7, 0
	n.capacityPages = 1.5 * hot.pages
	n.reclaim(0.25)
	if hot.resident <= cold.resident || math.Abs(hot.resident+cold.resident-n.capacityPages) > 1 {
		t.Fatalf("hot %.0f, cold %.0f resident of %.0f; want the cold VM to lose more and the total to fit", hot.resident, cold.resident, n.capacityPages)
	}
}

// A compressed tier that is full (to within a fraction of a page) sends
// evictions to the device: the VMs never hold more than RAM.
func TestFullTierSendsEvictionsToTheDevice(t *testing.T) {
	nd := smallNode()
	nd.Tier = &Tier{SizeBytes: 1 << 30, Ratio: 2, CPUSecondsPerPage: tierCPUSecondsPerPage}
	for _, left := range []float64{0, 1e-7, 0.5} {
		n := newNode(nd, oneVM(loadspec.ScanRandom), 2, 0.25, 1)
		running(n, 1)
		n.vms[0].resident -= n.tierCapPages - left
		n.vms[0].tier = n.tierCapPages - left
		n.capacityPages = n.usedPages() - 1000 // 1000 pages too many
		disk := n.vms[0].disk + n.vms[1].disk
		n.reclaim(0.25)
		if over := n.usedPages() - n.capacityPages; over > 1e-3 {
			t.Errorf("tier %g pages short of full: %.3f pages over RAM after reclaim", left, over)
		}
		if left < 1 && n.vms[0].disk+n.vms[1].disk <= disk {
			t.Errorf("tier %g pages short of full: nothing went to the device", left)
		}
	}
}

// A pool on the host takes none of the node's RAM; on the node, 1/ratio
// of a page per page it holds.
func TestTierPoolOnHostTakesNoNodeRAM(t *testing.T) {
	used := map[bool]float64{}
	for _, onHost := range []bool{false, true} {
		nd := smallNode()
		nd.Tier = &Tier{SizeBytes: 1 << 30, Ratio: 4, PoolOnHost: onHost}
		n := newNode(nd, oneVM(loadspec.ScanRandom), 1, 0.25, 1)
		running(n, 0.5)
		n.vms[0].tier, n.vms[0].disk = 4000, n.vms[0].disk-4000
		used[onHost] = n.usedPages()
	}
	if d := used[false] - used[true]; math.Abs(d-1000) > 1e-9 {
		t.Errorf("the pool of 4000 pages at 4:1 takes %g pages of the node's RAM more on the node than on the host, want 1000", d)
	}
}

// zswap is no swap area: its pages hold slots on the device, so they
// take the device's room and count against the device's half; a zram
// tier's pages hold slots of its own.
func TestZswapPagesHoldDeviceSlots(t *testing.T) {
	for _, kind := range []TierKind{TierZram, TierZswap} {
		nd := smallNode()
		nd.Swap.SizeBytes = 1 << 30
		nd.Tier = &Tier{Kind: kind, SizeBytes: 1 << 30, Ratio: 2}
		n := newNode(nd, oneVM(loadspec.ScanRandom), 1, 0.25, 1)
		running(n, 0.4)
		v := n.vms[0]
		v.tier, v.disk = v.disk, 0 // 0.6 GiB of pages in the tier
		wantRoom, wantHalfFull := n.diskCapPages, false
		if kind == TierZswap {
			wantRoom, wantHalfFull = n.diskCapPages-v.tier, true
		}
		if room, full := n.diskRoomPages(), n.halfFull(); math.Abs(room-wantRoom) > 1 || full != wantHalfFull {
			t.Errorf("%s: %.0f pages of room on the device, half full %v; want %.0f and %v", kind, room, full, wantRoom, wantHalfFull)
		}
	}
}

// A zswap pool at its limit refuses pages (they go to the device) and
// writes its oldest back to the device, a page a write, until its size is
// down to 90% of its limit: zswapWritebackMultiple times the last 10% of
// its pages, the fragmentation of its zsmalloc pages; then it takes pages
// again.
func TestFullZswapPoolWritesBackToTheAcceptThreshold(t *testing.T) {
	nd := smallNode()
	nd.Swap.WriteIOPS = 10000
	nd.Tier = &Tier{Kind: TierZswap, SizeBytes: 512 << 20, Ratio: 2, PoolOnHost: true}
	n := newNode(nd, oneVM(loadspec.ScanRandom), 1, 0.25, 1)
	running(n, 0.5)
	v := n.vms[0]
	v.phase = phaseReady               // populated, not touching
	v.tier, v.disk = n.tierCapPages, 0 // the pool is full
	n.capacityPages = 1e12
	n.tick(0, true)
	want := 0.1 * zswapWritebackMultiple * n.tierCapPages
	if n.writebackLeft != want || n.tierRoomShare() != 0 {
		t.Fatalf("a full pool: %.0f pages to write back, room share %g; want %.0f and 0", n.writebackLeft, n.tierRoomShare(), want)
	}
	out := n.swapOuts
	ticks := 0
	for ; n.writebackLeft > 0 && ticks < 1000; ticks++ {
		n.tick(float64(ticks+1)*0.25, true)
	}
	// Half the device's 10k writes a second, 0.25 s a tick.
	if wantTicks := int(math.Ceil(want / (0.5 * 10000 * 0.25))); ticks != wantTicks {
		t.Errorf("wrote %.0f pages back in %d ticks, want %d", want, ticks, wantTicks)
	}
	if got := n.swapOuts - out; math.Abs(got-want) > 1 || math.Abs(v.tier-(n.tierCapPages-want)) > 1 {
		t.Errorf("wrote back %.0f pages, the pool holds %.0f; want %.0f and %.0f", got, v.tier, want, n.tierCapPages-want)
	}
	if n.tierRoomShare() != 1 {
		t.Errorf("the pool takes no pages after its writeback")
	}
}

// Evicting a clean page (its copy still on the device) writes nothing and
// puts nothing in the tier: only dirty pages are swap-outs, and of those
// only the ones written to a block device (zram is one; a zswap store is
// counted as zswpout, not pswpout).
func TestCleanPagesAreDroppedNotWritten(t *testing.T) {
	for kind, wantOut := range map[TierKind]float64{TierZram: 500, TierZswap: 0} {
		nd := smallNode()
		nd.Tier = &Tier{Kind: kind, SizeBytes: 64 << 30, Ratio: 2, PoolOnHost: true}
		n := newNode(nd, oneVM(loadspec.ScanRandom), 1, 0.25, 1)
		running(n, 1)
		v := n.vms[0]
		v.clean, v.slotted = v.resident/2, v.resident/2
		n.capacityPages = n.usedPages() - 1000
		n.reclaim(0.25)
		if math.Abs(n.swapOuts-wantOut) > 1 || math.Abs(v.tier-500) > 1 || math.Abs(v.disk-500) > 1 {
			t.Errorf("%s: 1000 pages evicted, half clean: %.0f swap-outs, %.0f to the tier, %.0f on the device; want %.0f, 500 and 500", kind, n.swapOuts, v.tier, v.disk, wantOut)
		}
	}
}

func paper(scan loadspec.Scan, deployments []int) Params {
	return Params{Node: Node{RAMBytes: 192 << 30, SystemReserveBytes: 10 << 30, CPUs: 64, TouchRate: []TouchRate{{PagesPerSec: 2e7}}, PageCluster: 3, PagingCPU: []PagingCost{{Tasks: 1, SecondsPerPage: 5e-6}},
		Swap: Device{SizeBytes: 1400 << 30, ReadIOPS: 1.3e6, WriteIOPS: 215e3, LatencySeconds: 80e-6}},
		VM: VMSpec{MemoryBytes: 16 << 30, GuestOverheadBytes: 1 << 30, HostOverheadBytes: 256 << 20, RequestBytes: 1700 << 20,
			Workload: Workload{SizeBytes: 14 << 30, Scan: scan, WriteFraction: 1}},
		Deployments: deployments, RuntimeSeconds: 60, Seed: 1}
}

// The same seed gives the same ramp; another seed other start times.
// (Only the run's start differs: the wall-clock time it was simulated at,
// from which its steps' simulated clock runs.)
func TestDeterministicWithASeed(t *testing.T) {
	p := paper(loadspec.ScanRandom, []int{11, 13})
	steps := func() []results.Step {
		run, _, err := Run(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range run.Steps {
			run.Steps[i].Started = time.Time{}.Add(run.Steps[i].Started.Sub(run.StartedAt))
		}
		return run.Steps
	}
	a, b := steps(), steps()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with one seed differ")
	}
	p.Seed = 2
	if reflect.DeepEqual(a, steps()) {
		t.Fatal("another seed gives the same ramp")
	}
}

// A run's steps follow each other on one simulated clock from the run's
// start, and the agent's decisions lie within their step: a report draws
// them on one axis.
func TestStepsAndDecisionsOnOneClock(t *testing.T) {
	p := balloonBench(5)
	p.Deployments = []int{3, 5}
	cfg := policy.DefaultConfig()
	cfg.Balloon = true
	p.Agent = withAgent(cfg)
	run, decisions, err := Run(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, second := run.Steps[0], run.Steps[1]
	if !first.Started.Equal(run.StartedAt) || second.Started.Sub(first.Started).Seconds() != first.Seconds {
		t.Fatalf("steps start at %v and %v (%.2f s long), the run at %v; want the run's start, then the first's end",
			first.Started, second.Started, first.Seconds, run.StartedAt)
	}
	end := second.Started.Add(time.Duration(second.Seconds * float64(time.Second)))
	for _, d := range decisions {
		if d.Time.Before(first.Started) || d.Time.After(end) {
			t.Fatalf("decision at %v outside the run's simulated %v..%v", d.Time, first.Started, end)
		}
	}
	if len(decisions) == 0 || !decisions[len(decisions)-1].Time.After(second.Started) {
		t.Fatal("no decision in the second step")
	}
}

// paperFigures are the figures docs/sim.md and the README publish for the
// paper's scenario: the knee, where the fall ends, the plateau's spread
// (highest over lowest aggregate from 16 VMs to 100) and how many of the
// 12 VMs past the knee still touch at RAM speed (above half its rate).
var paperFigures = map[loadspec.Scan]struct {
	knee, plateauFrom int
	maxSpread         float64
	luckyAt12         int
}{
	loadspec.ScanSeq:    {knee: 11, plateauFrom: 13, maxSpread: 1.01, luckyAt12: 2},
	loadspec.ScanRandom: {knee: 11, plateauFrom: 14, maxSpread: 1.5, luckyAt12: 11},
}

// Fidelity to the published test (seed 000): everything in RAM to 11 VMs,
// a fall to 13-14, a level plateau to 100, random above seq in the
// transition, lucky and unlucky VMs at 12, and the ramp never needing more
// than the paper's RAM + swap: exactly the figures published.
func TestPaperScenario(t *testing.T) {
	deployments := []int{1, 6, 10, 11, 12, 13, 14, 15, 16, 20, 30, 50, 75, 100}
	runs := map[loadspec.Scan]*results.Run{}
	for _, scan := range []loadspec.Scan{loadspec.ScanSeq, loadspec.ScanRandom} {
		want := paperFigures[scan]
		run, _, err := Run(context.Background(), paper(scan, deployments), nil)
		if err != nil {
			t.Fatal(err)
		}
		runs[scan] = run
		r := run.Regimes()
		if r.KneeWorkers != want.knee {
			t.Errorf("%s: knee at %d VMs (%s), want %d", scan, r.KneeWorkers, r.KneeEvidence, want.knee)
		}
		if r.PlateauStartWorkers != want.plateauFrom {
			t.Errorf("%s: plateau from %d VMs, want %d", scan, r.PlateauStartWorkers, want.plateauFrom)
		}
		lo, hi := math.Inf(1), 0.0
		for _, s := range run.Steps {
			if s.Failed {
				t.Errorf("%s: step of %d VMs failed: %s", scan, s.Workers, s.FailReason)
			}
			if s.Workers >= 16 {
				lo, hi = math.Min(lo, s.AggregatePagesPerSec), math.Max(hi, s.AggregatePagesPerSec)
			}
			if s.Workers == 12 {
				lucky := 0
				for _, w := range s.PerWorker {
					if w.PagesPerSec > 0.5*2e7 {
						lucky++
					}
				}
				if lucky != want.luckyAt12 {
					t.Errorf("%s: %d of 12 VMs at RAM speed past the knee, want %d", scan, lucky, want.luckyAt12)
				}
			}
			// In RAM each VM keeps a core busy touching; paging never
			// takes more than the node's 64.
			inRAM := s.Workers <= 10
			if inRAM && math.Abs(s.CPUBusyCores-float64(s.Workers)) > 0.02*float64(s.Workers) || s.CPUBusyCores > 64+1e-9 || s.CPUBusyCores <= 0 {
				t.Errorf("%s: %d VMs keep %.2f cores busy", scan, s.Workers, s.CPUBusyCores)
			}
		}
		if hi > want.maxSpread*lo {
			t.Errorf("%s: plateau from %.0f to %.0f pages/s (%.2fx), want within %gx", scan, lo, hi, hi/lo, want.maxSpread)
		}
	}
	for i, s := range runs[loadspec.ScanRandom].Steps {
		seq := runs[loadspec.ScanSeq].Steps[i]
		if s.Workers >= 12 && s.Workers <= 15 && s.AggregatePagesPerSec <= seq.AggregatePagesPerSec {
			t.Errorf("%d VMs: random %.0f pages/s not above seq %.0f in the transition", s.Workers, s.AggregatePagesPerSec, seq.AggregatePagesPerSec)
		}
	}
}

// The simulated agent decides as often as the real one samples by
// default, and at the default tick that is every tick.
func TestSimulatedAgentDecidesAtTheAgentsInterval(t *testing.T) {
	want := agent.DefaultConfig().IntervalSeconds
	if DefaultAgentIntervalSeconds != want {
		t.Errorf("simulated agent every %g s; the agent samples every %g s", DefaultAgentIntervalSeconds, want)
	}
	if DefaultTickSeconds != want {
		t.Errorf("a tick of %g s; the agent samples every %g s", DefaultTickSeconds, want)
	}
}

// The policy in the loop: an overcommitted node without the agent ends in
// an OOM kill; with it, the agent evicts first and no VM is OOM-killed.
// The requests are small (400% overcommit): the swap allowances, each VM's
// request's share of the swap, add up to less than the swap, so the VMs
// reach their allowances, and the node its OOM point, before the scope's
// swap use reaches RAM + 0.8 × swap. The policy measures utilization
// against the allowed swap for that reason; this simulation found it.
func TestAgentEvictsBeforeTheOOMPoint(t *testing.T) {
	// Slow touches: the VMs populate at 20 MB/s each, so the node fills
	// over seconds, as VMs starting up do, not at once.
	p := Params{Node: Node{RAMBytes: 4 << 30, CPUs: 8, TouchRate: []TouchRate{{PagesPerSec: 2e4}}, PageCluster: 3,
		Swap: Device{SizeBytes: 2 << 30, ReadIOPS: 40000, WriteIOPS: 30000, LatencySeconds: 100e-6}},
		VM:          VMSpec{MemoryBytes: 1 << 30, RequestBytes: 256 << 20, Workload: Workload{SizeBytes: 900 << 20, Scan: loadspec.ScanRandom, WriteFraction: 1}},
		Deployments: []int{7}, RuntimeSeconds: 30, Seed: 1}
	without, _, err := Run(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := without.Steps[0]; s.OOMKills == 0 {
		t.Fatalf("without the agent: %+v; want an OOM kill (7 × 900 MiB on 4 GiB + 2 GiB)", s)
	}
	cfg := policy.DefaultConfig()
	cfg.MaxAverageSwapInPagesPerSecond, cfg.MaxAverageSwapOutPagesPerSecond = 20000, 15000
	p.Agent = withAgent(cfg)
	with, decisions, err := Run(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := with.Steps[0]
	if s.OOMKills != 0 || s.Evictions == 0 {
		t.Fatalf("with the agent: %d OOM kills, %d evictions; want evictions and no OOM kill", s.OOMKills, s.Evictions)
	}
	evicted := 0
	for _, d := range decisions {
		if d.Action == policy.ActionEvict {
			evicted++
		}
	}
	if evicted != s.Evictions {
		t.Fatalf("%d evict decisions for %d evictions", evicted, s.Evictions)
	}
}

// A guest's idle cache is the first of a VM's pages host reclaim takes:
// a VM hot on its workload loses only cache while the cache covers the
// shortfall.
func TestReclaimTakesTheGuestCacheFirst(t *testing.T) {
	vm := oneVM(loadspec.ScanRandom)
	vm.GuestCacheBytes = 512 << 20
	n := newNode(smallNode(), vm, 1, 0.25, 1)
	running(n, 1)
	v := n.vms[0]
	v.rate, v.cache, v.cacheFilled = 0, v.cacheGoal, v.cacheGoal // idle workload: no touch spares it
	n.capacityPages = v.pages + v.cache/2
	n.reclaim(0.25)
	if v.resident != v.pages || math.Abs(v.cacheDisk-v.cacheGoal/2) > 1 || v.disk != 0 {
		t.Fatalf("workload %.0f of %.0f resident, %.0f on the device; cache %.0f in RAM, %.0f on the device; want only half the cache (%.0f) out",
			v.resident, v.pages, v.disk, v.cache, v.cacheDisk, v.cacheGoal/2)
	}
}

// A balloon shrinks the guest: the guest drops its idle cache wherever
// the host keeps it, in proportion, and never gives up what its kernel
// and workload use; deflating gives memory back but no cache.
func TestBalloonDropsTheGuestCache(t *testing.T) {
	vm := oneVM(loadspec.ScanRandom) // 2 GiB guest, 1 GiB workload
	vm.GuestOverheadBytes, vm.GuestCacheBytes = 128<<20, 512<<20
	n := newNode(smallNode(), vm, 1, 0.25, 1)
	running(n, 1)
	v := n.vms[0]
	v.cache, v.cacheDisk, v.cacheFilled = v.cacheGoal/2, v.cacheGoal/2, v.cacheGoal
	used := v.guestUsed()
	v.setBalloon(used + v.cacheGoal/4) // room for a quarter of the cache
	if math.Abs(v.cacheHeld()-v.cacheGoal/4) > 1 || math.Abs(v.cache-v.cacheDisk) > 1 || v.memPages != used+v.cacheGoal/4 {
		t.Fatalf("cache %.0f in RAM + %.0f on the device at %.0f pages; want %.0f in all, half each", v.cache, v.cacheDisk, v.memPages, v.cacheGoal/4)
	}
	v.setBalloon(0)
	if v.memPages != used || v.cacheHeld() != 0 || v.resident != v.pages {
		t.Fatalf("ballooned to nothing: %.0f pages, cache %.0f, workload %.0f resident; want %.0f pages (what the guest uses), no cache, the workload whole",
			v.memPages, v.cacheHeld(), v.resident, used)
	}
	v.setBalloon(v.maxPages * 2)
	if v.memPages != v.maxPages || v.cacheHeld() != 0 {
		t.Fatalf("deflated: %.0f pages, cache %.0f; want its %.0f pages and no cache back", v.memPages, v.cacheHeld(), v.maxPages)
	}
}

// balloonBench is bench/density-balloon.sh's node in the model: 512 MiB
// guests, each with a 32 MiB workload at 1M pages/s beside 288 MiB of
// idle cache, on 1.5 GiB with 2 GiB of swap; the guests fill their cache
// at 40 MiB/s, as a booting guest reads a disk, not at once.
func balloonBench(count int) Params {
	return Params{Node: Node{RAMBytes: 1536 << 20, CPUs: 2, TouchRate: []TouchRate{{PagesPerSec: 1e7}}, PopulateRatePerCore: 1e4, PageCluster: 3,
		PagingCPU: []PagingCost{{Tasks: 1, SecondsPerPage: 150e-6}},
		Swap:      Device{SizeBytes: 2 << 30, ReadIOPS: 20000, WriteIOPS: 20000, LatencySeconds: 200e-6}},
		VM: VMSpec{MemoryBytes: 512 << 20, GuestOverheadBytes: 100 << 20, HostOverheadBytes: 40 << 20, GuestCacheBytes: 288 << 20,
			RequestBytes: 168 << 20, Workload: Workload{SizeBytes: 32 << 20, Scan: loadspec.ScanRandom, WriteFraction: 1, RatePagesPerSec: 1e6}},
		Deployments: []int{count}, RuntimeSeconds: 20, Seed: 1}
}

// The balloon policy in the loop, the agent configured as density runs it
// (swap utilization only): seven guests' idle caches overflow the node.
// Swap alone, and MOM's 5% steps, leave the caches to host swap until
// its utilization evicts a VM; the balloon controller has the guests drop
// them, and every VM runs at its rate without an eviction. (Measured with
// bench/density-balloon.sh: swap alone and MOM hold 5 VMs, headroom 7.)
func TestBalloonHoldsWhatSwapAloneEvicts(t *testing.T) {
	step := func(balloon string) (results.Step, []policy.Decision) {
		t.Helper()
		p := balloonBench(7)
		cfg := policy.DefaultConfig()
		cfg.Balloon, cfg.BalloonPolicy = balloon != "", balloon
		p.Agent = withAgent(cfg)
		run, decisions, err := Run(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		return run.Steps[0], decisions
	}
	for _, setup := range []string{"", policy.BalloonMOM} {
		if s, _ := step(setup); s.Evictions == 0 {
			t.Errorf("balloon policy %q: no eviction (swap used %d MiB); want one", setup, s.SwapUsedBytes>>20)
		}
	}
	s, decisions := step(policy.BalloonHeadroom)
	if s.Evictions != 0 || s.OOMKills != 0 {
		t.Fatalf("with balloons: %d evictions, %d OOM kills; want none", s.Evictions, s.OOMKills)
	}
	for _, w := range s.PerWorker {
		if w.PagesPerSec < 0.99e6 {
			t.Errorf("with balloons: %s at %.0f pages/s; want its 1M", w.Name, w.PagesPerSec)
		}
	}
	balloons := 0
	for _, d := range decisions {
		if d.Action == policy.ActionSetBalloon {
			balloons++
		}
	}
	if balloons == 0 {
		t.Fatal("with balloons: no set_balloon decision")
	}
}

// Bad input names the field.
func TestValidate(t *testing.T) {
	good := paper(loadspec.ScanSeq, []int{1})
	if err := Validate(good.Node, good.VM); err != nil {
		t.Fatal(err)
	}
	for want, f := range map[string]func(*Node, *VMSpec){
		"Node.RAMBytes":            func(n *Node, _ *VMSpec) { n.RAMBytes = 0 },
		"Node.SystemReserveBytes":  func(n *Node, _ *VMSpec) { n.SystemReserveBytes = n.RAMBytes },
		"Node.CPUs":                func(n *Node, _ *VMSpec) { n.CPUs = 0 },
		"Node.TouchRate":           func(n *Node, _ *VMSpec) { n.TouchRate = nil },
		"Node.TouchTurnBlocks":     func(n *Node, _ *VMSpec) { n.TouchTurnBlocks = 100 },
		"Node.Swap.ReadIOPS":       func(n *Node, _ *VMSpec) { n.Swap.ReadIOPS = 0 },
		"Node.Swap.WriteIOPS":      func(n *Node, _ *VMSpec) { n.Swap.WriteIOPS = 0 },
		"Node.Swap.LatencySeconds": func(n *Node, _ *VMSpec) { n.Swap.LatencySeconds = 0 },
		"ratio":                    func(n *Node, _ *VMSpec) { n.Tier = &Tier{SizeBytes: 1 << 30, Ratio: 0.5} },
		"zswap needs a swap device": func(n *Node, _ *VMSpec) {
			n.Tier, n.Swap.SizeBytes = &Tier{Kind: TierZswap, PoolBytes: 1 << 30, SizeBytes: 2 << 30, Ratio: 2}, 0
		},
		"Node.Swap.Depths": func(n *Node, _ *VMSpec) {
			n.Swap.Depths = []DepthRate{{QueueDepth: 4, ReadIOPS: 1, WriteIOPS: 1}, {QueueDepth: 2, ReadIOPS: 1, WriteIOPS: 1}}
		},
		"VM.Workload.SizeBytes":     func(_ *Node, v *VMSpec) { v.Workload.SizeBytes = 0 },
		"VM.GuestOverheadBytes":     func(_ *Node, v *VMSpec) { v.GuestOverheadBytes = v.MemoryBytes },
		"VM.Workload.WriteFraction": func(_ *Node, v *VMSpec) { v.Workload.WriteFraction = 2 },
		"VM.Workload.Scan":          func(_ *Node, v *VMSpec) { v.Workload.Scan = "zigzag" },
		"VM.GuestCacheBytes":        func(_ *Node, v *VMSpec) { v.GuestCacheBytes = v.MemoryBytes },
		"VM.Process":                func(_ *Node, v *VMSpec) { v.GuestCacheBytes, v.Process = 1<<20, true },
	} {
		n, v := good.Node, good.VM
		f(&n, &v)
		if err := Validate(n, v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}

// The full published sweep's cost: 1..100 VMs of 16 GiB, seq and random,
// 180 s each (the target: under 30 s of wall time).
func BenchmarkPaperSweep(b *testing.B) {
	var deployments []int
	for n := 1; n <= 100; n++ {
		deployments = append(deployments, n)
	}
	for range b.N {
		for _, scan := range []loadspec.Scan{loadspec.ScanSeq, loadspec.ScanRandom} {
			p := paper(scan, deployments)
			p.RuntimeSeconds = 180
			if _, _, err := Run(context.Background(), p, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestParseTier(t *testing.T) {
	const ram = 10 << 30
	cpu := tierCPUSecondsPerPage
	for in, want := range map[string]*Tier{
		"zram:1Gi":                     {Kind: TierZram, SizeBytes: 1 << 30, Ratio: 2, CPUSecondsPerPage: cpu},
		"zram:512Mi,ratio=3":           {Kind: TierZram, SizeBytes: 512 << 20, Ratio: 3, CPUSecondsPerPage: cpu},
		"zram:512Mi,pool=host,ratio=3": {Kind: TierZram, SizeBytes: 512 << 20, Ratio: 3, CPUSecondsPerPage: cpu, PoolOnHost: true},
		"zram:512Mi,pool=node":         {Kind: TierZram, SizeBytes: 512 << 20, Ratio: 2, CPUSecondsPerPage: cpu},
		// The grammar density takes: a real tier's keys are accepted.
		"zram:512Mi,algorithm=lz4,priority=50": {Kind: TierZram, SizeBytes: 512 << 20, Ratio: 2, CPUSecondsPerPage: cpu},
		"zswap:compressor=zstd":                {Kind: TierZswap, PoolBytes: 2 << 30, SizeBytes: 4 << 30, Ratio: 2, CPUSecondsPerPage: cpu},
		// zswap's pool: 20% of RAM by default, or a percentage, or a size;
		// it holds ratio times its size of pages.
		"zswap":                          {Kind: TierZswap, PoolBytes: 2 << 30, SizeBytes: 4 << 30, Ratio: 2, CPUSecondsPerPage: cpu},
		"zswap:max_pool_percent=5":       {Kind: TierZswap, PoolBytes: 512 << 20, SizeBytes: 1 << 30, Ratio: 2, CPUSecondsPerPage: cpu},
		"zswap:240Mi,pool=host":          {Kind: TierZswap, PoolBytes: 240 << 20, SizeBytes: 480 << 20, Ratio: 2, CPUSecondsPerPage: cpu, PoolOnHost: true},
		"zswap:ratio=3,pool=host":        {Kind: TierZswap, PoolBytes: 2 << 30, SizeBytes: 6 << 30, Ratio: 3, CPUSecondsPerPage: cpu, PoolOnHost: true},
		"zram:512Mi,pool=guest":          nil,
		"zram:512Mi,max_pool_percent=20": nil,
		"zswap:max_pool_percent=0":       nil,
		"zswap:max_pool_percent=101":     nil,
		"zswap:0":                        nil,
		"zswap:1Gi,speed=3":              nil,
		"zcache:1Gi":                     nil,
		"zram:":                          nil,
		"zram":                           nil,
		"zram:1Gi,ratio=0.5":             nil,
		"zram:1Gi,speed=3":               nil,
	} {
		got, err := ParseTier(in, 2, ram)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), tierspec.Form) {
				t.Errorf("%s: %+v, %v; want an error naming %s", in, got, err, tierspec.Form)
			}
			continue
		}
		if err != nil || *got != *want {
			t.Errorf("%s: %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := ParseTier("zswap", 2, 0); err == nil || !strings.Contains(err.Error(), "Node.RAMBytes") {
		t.Errorf("zswap without the node's RAM: %v; want an error naming Node.RAMBytes", err)
	}
	if r := ContentRatio(loadspec.Content{Kind: loadspec.ContentCompress, CompressRatio: 4}); r != 4 {
		t.Errorf("compress=4 compresses %g:1", r)
	}
}

func TestTierKindOf(t *testing.T) {
	for in, want := range map[string]TierKind{
		"": "", "zram:1Gi": TierZram, "zram": TierZram, "zswap": TierZswap, "zswap:max_pool_percent=1": TierZswap,
		"zcache:1Gi": "", "zswapx": "",
	} {
		if got := TierKindOf(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestParsePagingCPU(t *testing.T) {
	for in, want := range map[string][]PagingCost{
		"5us":            {{1, 5e-6}},
		"0":              {{1, 0}},
		"2:57us, 8:97µs": {{2, 57e-6}, {8, 97e-6}},
		"1:1ms":          {{1, 1e-3}},
		"":               nil,
		"-5us":           nil,
		"8:97us,2:57us":  nil, // not ascending
		"2:57us,2:60us":  nil,
		"0:5us":          nil, // fewer than one task
		"2:-1us":         nil,
		"2:57":           nil, // no unit
		"a:5us":          nil,
		"Inf:5us":        nil,
		"NaN:5us":        nil,
	} {
		got, err := ParsePagingCPU(in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), PagingCPUForm) {
				t.Errorf("%q: %+v, %v; want an error naming %s", in, got, err, PagingCPUForm)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	// The run-queue wait shares the form; its errors give its own form and
	// name no flag (the front end does).
	if got, err := ParseRunQueueWait("2:5us,8:40us"); err != nil || !reflect.DeepEqual(got, []PagingCost{{2, 5e-6}, {8, 40e-6}}) {
		t.Errorf("run-queue wait 2:5us,8:40us: %+v, %v", got, err)
	}
	if _, err := ParseRunQueueWait("8:40us,2:5us"); err == nil || strings.Contains(err.Error(), "--") || !strings.Contains(err.Error(), RunQueueWaitForm) {
		t.Errorf("run-queue wait not ascending: %v, want an error with its form and no flag", err)
	}
}

// What ParsePagingCPU accepts, FormatPagingSeconds writes back in a form it
// accepts again, unchanged.
func FuzzParsePagingCPU(f *testing.F) {
	for _, s := range []string{"5us", "2:57us,8:97us", "1:1.5ms,4:2ms,16:3ms", "8:97us,2:57us", "1e300:1ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if cs, err := ParsePagingCPU(s); err == nil {
			roundTripExact(t, s, cs, ParsePagingCPU, FormatPagingSeconds)
		}
	})
}

// The CPU per page paged follows the tasks faulting at once: linear in
// log2 of their count between measured counts and along the nearest
// segment beyond (here measured 57 µs with two seq workers and 97 µs with
// eight: 37 µs for one, 118 µs for sixteen, against 31 and 118 µs
// measured), never below zero; one figure holds for any count.
func TestPagingCPUFollowsTheFaultingTasks(t *testing.T) {
	measured := []PagingCost{{2, 57e-6}, {8, 97e-6}}
	for tasks, want := range map[float64]float64{1: 37e-6, 2: 57e-6, 4: 77e-6, 8: 97e-6, 16: 117e-6, 0: 37e-6} {
		if got := pagingCPUAt(measured, tasks); math.Abs(got-want) > 1e-9 {
			t.Errorf("%g tasks: %.1f µs, want %.1f", tasks, got*1e6, want*1e6)
		}
	}
	if got := pagingCPUAt([]PagingCost{{2, 10e-6}, {4, 100e-6}}, 1); got != 0 {
		t.Errorf("a steep slope extended below its counts: %g, want 0", got)
	}
	if got := pagingCPUAt([]PagingCost{{1, 5e-6}}, 100); got != 5e-6 {
		t.Errorf("one figure at 100 tasks: %g, want it", got)
	}
	// In the engine, the count is the VMs faulting on the device: four
	// paging VMs on a node pay the cost at four.
	nd := smallNode()
	nd.PagingCPU = measured
	n := newNode(nd, oneVM(loadspec.ScanRandom), 4, 0.001, 1)
	running(n, 0.5)
	n.capacityPages = 1e12
	n.tick(0, true)
	if math.Abs(n.pagingCPU-77e-6) > 1e-9 {
		t.Errorf("4 VMs faulting: %.1f µs a page, want 77", n.pagingCPU*1e6)
	}
}

// A page from the compressed tier costs the paging CPU, as one from the
// device does (the fault and reclaim are the same), plus its
// decompression and another page's compression: ten VMs half in a tier
// on two cores at 50 µs a page touch 2 / (1/touch rate + 0.5 × 56 µs)
// pages a second together, and the paging CPU is taken at ten faulting.
func TestTierPagesCostThePagingCPU(t *testing.T) {
	nd := smallNode()
	nd.CPUs, nd.PagingCPU = 2, []PagingCost{{Tasks: 1, SecondsPerPage: 10e-6}, {Tasks: 10, SecondsPerPage: 50e-6}}
	nd.Tier = &Tier{SizeBytes: 64 << 30, Ratio: 2, CPUSecondsPerPage: 3e-6}
	// A short tick: no VM comes back to its pages within it, so its miss
	// chance stays its share out (see randomMisses).
	const tick = 0.01
	n := newNode(nd, oneVM(loadspec.ScanRandom), 10, tick, 1)
	running(n, 0.5)
	for _, v := range n.vms {
		v.tier, v.disk = v.disk, 0
	}
	n.capacityPages = 1e12
	n.tick(0, true)
	var touches float64
	for _, v := range n.vms {
		touches += v.touches / tick
	}
	want := 2 / (1/nd.TouchRate[0].PagesPerSec + 0.5*56e-6)
	if math.Abs(touches-want) > 0.02*want {
		t.Errorf("%.0f pages/s from the tier on 2 cores at 50 µs a page paged, want %.0f", touches, want)
	}
}

// Density's cgroup workers are processes started one after another: they
// populate together, sharing the cores, where VMs boot for about 2 s
// first, each its own time.
func TestProcessWorkersPopulateTogether(t *testing.T) {
	for _, process := range []bool{false, true} {
		nd := smallNode()
		nd.CPUs, nd.PopulateRatePerCore = 2, 1e5
		vm := oneVM(loadspec.ScanRandom)
		vm.Workload.SizeBytes, vm.Process = 64<<20, process
		run, _, err := Run(context.Background(), Params{Node: nd, VM: vm, Deployments: []int{4}, RuntimeSeconds: 1, Seed: 1, TickSeconds: 0.01}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range run.Steps[0].PerWorker {
			startSeconds := w.CreateToReadySeconds - w.PopulateSeconds
			switch {
			case process && (math.Abs(w.CreateOffsetSeconds-float64(i)*processCreateGapSeconds) > 1e-9 ||
				math.Abs(startSeconds-processStartSeconds) > 0.011 || math.Abs(w.PopulateSeconds-4*16384/2e5) > 0.03):
				t.Errorf("process %s: created at %.3f s, populating %.3f s later for %.3f s; want %.3f s, %.3f s and 4 × 64 MiB at 2 × 100k pages/s",
					w.Name, w.CreateOffsetSeconds, startSeconds, w.PopulateSeconds, float64(i)*processCreateGapSeconds, processStartSeconds)
			case !process && (startSeconds < 0.8*vmBootSeconds-0.011 || startSeconds > 1.2*vmBootSeconds+0.011):
				t.Errorf("VM %s: populating %.3f s after its creation, want its boot, %g s give or take a fifth", w.Name, startSeconds, vmBootSeconds)
			}
		}
	}
}

// Past the node's RAM a fill waits for reclaim, which frees dirty pages
// as fast as the device writes them: four 256 MiB workers on two cores
// fill a 512 MiB node in 0.5 s and then wait for the other 512 MiB to be
// written at 16k pages a second, 8 s more; with room in a compressed tier the whole fill keeps the
// CPU's pace, 1 s.
func TestFillPastRAMWaitsForTheDevicesWrites(t *testing.T) {
	for _, c := range []struct {
		tier        *Tier
		wantSeconds float64
	}{
		{nil, 8.5},
		{&Tier{SizeBytes: 4 << 30, Ratio: 2}, 1},
	} {
		nd := smallNode()
		nd.RAMBytes, nd.CPUs, nd.PopulateRatePerCore, nd.Tier = 512<<20, 2, 131072, c.tier
		nd.Swap.WriteIOPS, nd.WritePages = 16384, []IOPages{{Tasks: 1, Pages: 1}}
		vm := oneVM(loadspec.ScanRandom)
		vm.Workload.SizeBytes, vm.Process, vm.MemoryBytes, vm.RequestBytes = 256<<20, true, 320<<20, 64<<20
		run, _, err := Run(context.Background(), Params{Node: nd, VM: vm, Deployments: []int{4}, RuntimeSeconds: 1, Seed: 1, TickSeconds: 0.01}, nil)
		if err != nil || len(run.Steps) != 1 {
			t.Fatalf("%v, %+v", err, run)
		}
		for _, w := range run.Steps[0].PerWorker {
			if math.Abs(w.PopulateSeconds-c.wantSeconds) > 0.03*c.wantSeconds {
				t.Errorf("tier %v: %s filled in %.2f s, want %.2f s", c.tier, w.Name, w.PopulateSeconds, c.wantSeconds)
			}
		}
	}
}

// processSeqTick is one measured tick of workers process workers on nd,
// scanning sequentially with half their pages out and room for all.
func processSeqTick(nd Node, workers int) *node {
	spec := oneVM(loadspec.ScanSeq)
	spec.Process = true
	n := newNode(nd, spec, workers, 1, 1)
	running(n, 0.5)
	n.capacityPages = 1e12
	n.tick(0, true)
	return n
}

// withAgent is the default agent with policy cfg.
func withAgent(cfg policy.Config) *AgentParams {
	a := DefaultAgent()
	a.Policy = cfg
	return &a
}

// A random scan that comes back to its pages many times a tick misses each
// page it has out once, where reclaim takes nothing from it; where reclaim
// takes its pages as fast as it brings them back, as on a plateau, its
// miss chance stays its share out.
func TestRandomScanBringsBackWhatItHasOut(t *testing.T) {
	const tick, hitSeconds, missSeconds, out = 0.25, 1e-7, 1e-7 + 100e-6, 1000.0
	pages := float64(1<<30) / PageBytes
	// Without reclaim: touches × hit time + misses × read time fill the
	// tick, misses = out × (1 − e^(−touches/pages)).
	drained := (tick - out*(missSeconds-hitSeconds)) / hitSeconds
	for range 50 {
		drained = (tick - out*-math.Expm1(-drained/pages)*(missSeconds-hitSeconds)) / hitSeconds
	}
	steadyRate := 1 / (hitSeconds + out/pages*(missSeconds-hitSeconds))
	for _, c := range []struct {
		name        string
		evictPerSec float64
		want        float64
	}{
		{"nothing taken", 0, drained},
		{"taken as fast as it faults", steadyRate * out / pages, steadyRate * tick},
	} {
		n := newNode(smallNode(), oneVM(loadspec.ScanRandom), 1, tick, 1)
		running(n, 1)
		v := n.vms[0]
		v.resident, v.disk = v.pages-out, out
		v.evicted = c.evictPerSec * tick // the last tick's, as tick reads it
		n.capacityPages = 1e12           // nothing evicted during the tick
		n.tick(0, true)
		if math.Abs(v.touches-c.want) > 1e-3*c.want {
			t.Errorf("%s: %.0f touches in the tick, want %.0f", c.name, v.touches, c.want)
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

// The correction Device.MixedCapacity: a device that serves its reads and
// writes mixed at more than their shares of its rates add up to serves
// that many times the reads when it is the bound; by task count, along
// log2 between the counts given and the nearest beyond them; none is 1.
func TestMixedCapacityRaisesTheDevicesBound(t *testing.T) {
	for _, c := range []struct {
		capacity []TaskCapacity
		want     float64 // reads a second with 200 VMs faulting
	}{
		{nil, 10000},
		{[]TaskCapacity{{1, 1.5}}, 15000},
		{[]TaskCapacity{{2, 1}, {8, 2}}, 20000},
	} {
		nd := smallNode()
		nd.Swap.MixedCapacity = c.capacity
		if err := Validate(nd, oneVM(loadspec.ScanRandom)); err != nil {
			t.Fatal(err)
		}
		if _, reads := allFaulting(nd, 200); math.Abs(reads-c.want) > c.want*1e-3 {
			t.Errorf("%v: %.0f reads/s, want %.0f", c.capacity, reads, c.want)
		}
	}
	if got := capacityAt([]TaskCapacity{{2, 1}, {8, 2}}, 4); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("halfway in log2 between 2 and 8 tasks: %g, want 1.5", got)
	}
	nd := smallNode()
	nd.Swap.MixedCapacity = []TaskCapacity{{8, 2}, {2, 1}}
	if err := Validate(nd, oneVM(loadspec.ScanRandom)); err == nil || !strings.Contains(err.Error(), "Node.Swap.MixedCapacity") {
		t.Errorf("descending task counts: %v", err)
	}
}

func TestParseMixedCapacity(t *testing.T) {
	for in, want := range map[string][]TaskCapacity{
		"1.4":            {{1, 1.4}},
		"2:1,8:1.4,16:2": {{2, 1}, {8, 1.4}, {16, 2}},
		"0":              nil,
		"0.5":            nil, // below 1: an error
		"8:2,2:1":        nil,
		"2:101":          nil,
		"":               nil,
		"x":              nil,
	} {
		got, err := ParseMixedCapacity(in)
		bad := want == nil && in != "0"
		if bad != (err != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
		if err != nil && (!strings.Contains(err.Error(), MixedCapacityForm) || strings.Contains(err.Error(), "--")) {
			t.Errorf("%q: error %q, want its form and no flag", in, err)
		}
	}
}

// What ParseMixedCapacity accepts, FormatMixedCapacity writes in a form it
// accepts again, stable from then on (to a hundredth).
func FuzzParseMixedCapacity(f *testing.F) {
	for _, s := range []string{"1.4", "2:1,8:1.4,16:1.6", "0", "1:1.005,4:99.999", "8:4,2:6"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkRoundTrip(t, s, ParseMixedCapacity, FormatMixedCapacity) })
}

// checkRoundTrip: what parse accepts (and is not none), format writes in a
// form parse accepts again, and formatting that gives the same text.
func checkRoundTrip[T any](t *testing.T, s string, parse func(string) ([]T, error), format func([]T) string) {
	t.Helper()
	xs, err := parse(s)
	if err != nil || len(xs) == 0 {
		return
	}
	once := format(xs)
	again, err := parse(once)
	if err != nil {
		t.Fatalf("%q parsed to %+v, formatted to %q, refused: %v", s, xs, once, err)
	}
	if twice := format(again); twice != once {
		t.Fatalf("%q: formatted %q, then %q", s, once, twice)
	}
}
