package sim

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
)

func TestParseIOPages(t *testing.T) {
	for in, want := range map[string][]IOPages{
		"8":          {{1, 8}},
		"1":          {{1, 1}},
		"2:6, 8:4.2": {{2, 6}, {8, 4.2}},
		"1:1024":     {{1, 1024}},
		"":           nil,
		"0.5":        nil, // less than a page
		"1025":       nil,
		"8:4,2:6":    nil, // not ascending
		"2:6,2:5":    nil,
		"0:4":        nil, // fewer than one task
		"2:0":        nil,
		"2:x":        nil,
		"Inf:4":      nil,
		"NaN:4":      nil,
		"2:NaN":      nil,
	} {
		got, err := ParseIOPages("swap-write-pages", in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), IOPagesForm) || !strings.Contains(err.Error(), "--swap-write-pages") {
				t.Errorf("%q: %+v, %v; want an error naming the flag and %s", in, got, err, IOPagesForm)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// What ParseIOPages accepts, FormatIOPages writes in a form it accepts
// again, and that form is stable (sizes are kept to a hundredth of a page).
func FuzzParseIOPages(f *testing.F) {
	for _, s := range []string{"8", "2:6,8:4.2", "1:1.005,4:2,16:1024", "8:4,2:6", "1e300:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseIOPages("swap-read-pages", s)
		if err != nil {
			return
		}
		once := FormatIOPages(ps)
		again, err := ParseIOPages("swap-read-pages", once)
		if err != nil {
			t.Fatalf("%q parsed to %+v, formatted to %q, refused: %v", s, ps, once, err)
		}
		if twice := FormatIOPages(again); twice != once {
			t.Fatalf("%q: formatted %q, then %q", s, once, twice)
		}
	})
}

// The pages an I/O carries follow the tasks faulting: linear in log2 of
// their count between measured counts, the nearest count's beyond (a
// window does not grow past what was measured or shrink below a page).
func TestIOPagesFollowTheFaultingTasks(t *testing.T) {
	measured := []IOPages{{2, 6}, {8, 4}}
	for tasks, want := range map[float64]float64{0: 6, 1: 6, 2: 6, 4: 5, 8: 4, 64: 4} {
		if got := ioPagesAt(measured, tasks, 8); math.Abs(got-want) > 1e-9 {
			t.Errorf("%g tasks: %g pages, want %g", tasks, got, want)
		}
	}
	if got := ioPagesAt(nil, 4, 8); got != 8 {
		t.Errorf("none given: %g pages, want the fallback 8", got)
	}
}

// A device at its limit swaps in as many pages as its I/Os carry. Bound
// by reclaim's writes (10k a second): 80k pages with the default eight a
// write, 20k with two, and with sizes by tasks the size at the VMs
// faulting (eight VMs between 1:8 and 64:2: 5 pages, 50k). Bound by its
// reads (10k a second, a process's sequential window one read): eight
// pages a read by default (vm.page-cluster 3), four where the kernel
// reads four.
func TestIOPagesAtTheDevicesLimit(t *testing.T) {
	writeBound := func(pages []IOPages) func(*Node) {
		return func(nd *Node) { nd.Swap.ReadIOPS, nd.Swap.WriteIOPS, nd.WritePages = 1e9, 10000, pages }
	}
	readBound := func(pages []IOPages) func(*Node) { return func(nd *Node) { nd.ReadaheadPages = pages } }
	for _, c := range []struct {
		name  string
		set   func(*Node)
		count int
		want  float64
	}{
		{"writes of 8 (default)", writeBound(nil), 8, 80000},
		{"writes of 2", writeBound([]IOPages{{1, 2}}), 8, 20000},
		{"writes by tasks", writeBound([]IOPages{{1, 8}, {64, 2}}), 8, 50000},
		{"reads of 8 (default)", readBound(nil), 50, 80000},
		{"reads of 4", readBound([]IOPages{{1, 4}}), 50, 40000},
		// A 4 KiB I/O's 100 µs again for the bytes beyond its first page:
		// each I/O takes twice as long.
		{"reads of 4, 3 pages' transfer in 100 µs", func(nd *Node) {
			nd.ReadaheadPages, nd.Swap.ReadBytesPerSec = []IOPages{{1, 4}}, 3*PageBytes/100e-6
		}, 50, 20000},
		{"writes of 2, a page's transfer in 100 µs", func(nd *Node) {
			writeBound([]IOPages{{1, 2}})(nd)
			nd.Swap.WriteBytesPerSec = PageBytes / 100e-6
		}, 8, 10000},
		{"writes of 2, the device serving twice its rates mixed", func(nd *Node) {
			writeBound([]IOPages{{1, 2}})(nd)
			nd.Swap.MixedCapacity = []TaskCapacity{{1, 2}}
		}, 8, 40000},
		// Eight tasks, halfway in log2 between 1 (1×) and 64 (4×): 2.5×.
		{"writes of 2, the device serving more the more tasks fault", func(nd *Node) {
			writeBound([]IOPages{{1, 2}})(nd)
			nd.Swap.MixedCapacity = []TaskCapacity{{1, 1}, {64, 4}}
		}, 8, 50000},
		{"one-page writes: no transfer", func(nd *Node) {
			writeBound([]IOPages{{1, 1}})(nd)
			nd.Swap.WriteBytesPerSec = PageBytes / 100e-6
		}, 8, 10000},
	} {
		nd := smallNode()
		c.set(&nd)
		spec := oneVM(memload.ScanSeq)
		spec.Process = true
		n := newNode(nd, spec, c.count, 1, 1)
		running(n, 0.5)
		n.capacityPages = 1e12
		n.tick(0, true)
		if math.Abs(n.swapIns-c.want) > 0.01*c.want {
			t.Errorf("%s: %.0f pages in per second from a device at its limit, want %.0f", c.name, n.swapIns, c.want)
		}
	}
}

// The mixed capacity is, by worker count, the median run's share of the
// device that swap's I/O used, at the rates the model gives that many
// faulting VMs (reads at as deep a queue as there are workers, writes at
// the deepest), at least 1.
func TestMixedCapacity(t *testing.T) {
	// Reads 27.5k at depth 2 and 42.5k at 8 (log2 between 20k at 1 and
	// 50k at 16), writes 40k (the deepest).
	d := Device{ReadIOPS: 40000, WriteIOPS: 50000, Depths: []DepthRate{{1, 20000, 30000}, {16, 50000, 40000}}}
	busy := PagingSample{PagesPerRead: 1, PagesPerWrite: 1, ReadsPerSec: 50000, WritesPerSec: 48000}
	quiet := PagingSample{PagesPerRead: 1, PagesPerWrite: 1, ReadsPerSec: 10000, WritesPerSec: 10000}
	const cpus = 2 // 2, 8 and 16 workers
	for _, c := range []struct {
		name string
		runs [][]PagingSample
		d    Device
		want []TaskCapacity
	}{
		// 10k/27.5k + 10k/40k = 0.61: 1.
		{"under the rates: 1", [][]PagingSample{{quiet, quiet, quiet}}, d, []TaskCapacity{{2, 1}}},
		// 50k/42.5k + 48k/40k = 2.38 with eight workers.
		{"each count's median", [][]PagingSample{{quiet, quiet, quiet}, {busy, quiet, busy}}, d, []TaskCapacity{{2, 1}, {8, 2.38}}},
		// 50k/50k + 48k/40k = 2.2 with sixteen.
		{"at the depth of each count", [][]PagingSample{{quiet}, {quiet}, {busy}}, d, []TaskCapacity{{2, 1}, {8, 1}, {16, 2.2}}},
		{"I/O not seen: 1", [][]PagingSample{{{}, {}, {}}}, d, []TaskCapacity{{2, 1}}},
		{"no runs", nil, d, nil},
		// 4-page reads at 1 GB/s add 3 × 4096 B / 1e9 s each: 1.29.
		{"with transfer", [][]PagingSample{{{PagesPerRead: 4, ReadsPerSec: 40000}}}, Device{ReadIOPS: 50000, ReadBytesPerSec: 1e9}, []TaskCapacity{{2, 1.29}}},
	} {
		if got := mixedCapacity(c.runs, taskCounts(pagingWorkersPerCore, cpus), c.d); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestParseMixedCapacity(t *testing.T) {
	for in, want := range map[string][]TaskCapacity{
		"1.4":               {{1, 1.4}},
		"2:1, 8:1.4,16:1.6": {{2, 1}, {8, 1.4}, {16, 1.6}},
		"1:100":             {{1, 100}},
		"0":                 {},
		"":                  nil,
		"0.5":               nil, // less than the sum
		"101":               nil,
		"8:1.4,2:1":         nil, // not ascending
		"2:1,2:1.2":         nil,
		"0:1.2":             nil, // fewer than one task
		"2:x":               nil,
		"Inf:1.2":           nil,
		"2:NaN":             nil,
	} {
		got, err := ParseMixedCapacity("swap-mixed-capacity", in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), MixedCapacityForm) || !strings.Contains(err.Error(), "--swap-mixed-capacity") {
				t.Errorf("%q: %+v, %v; want an error naming the flag and %s", in, got, err, MixedCapacityForm)
			}
			continue
		}
		if err != nil || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// What ParseMixedCapacity accepts, FormatMixedCapacity writes in a form it
// accepts again, and that form is stable (to a hundredth).
func FuzzParseMixedCapacity(f *testing.F) {
	for _, s := range []string{"1.4", "2:1,8:1.4,16:1.6", "1:1.005,4:99.999", "8:1.4,2:1", "1e300:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := ParseMixedCapacity("swap-mixed-capacity", s)
		if err != nil || len(cs) == 0 {
			return
		}
		if !mixedCapacityValid(cs) {
			t.Fatalf("%q parsed to %+v, which the model refuses", s, cs)
		}
		once := FormatMixedCapacity(cs)
		again, err := ParseMixedCapacity("swap-mixed-capacity", once)
		if err != nil {
			t.Fatalf("%q parsed to %+v, formatted to %q, refused: %v", s, cs, once, err)
		}
		if twice := FormatMixedCapacity(again); twice != once {
			t.Fatalf("%q: formatted %q, then %q", s, once, twice)
		}
	})
}

// The transfer rate is the large block's extra bytes over its extra time.
func TestTransferRate(t *testing.T) {
	for _, c := range []struct {
		small, large float64
		bytes        int
		want         float64
	}{
		{50000, 10000, 128 << 10, (128<<10 - 4096) / (1/10000.0 - 1/50000.0)},
		{50000, 50000, 128 << 10, 0}, // no slower: no cost
		{50000, 60000, 128 << 10, 0},
		{0, 10000, 128 << 10, 0}, // not measured
		{50000, 0, 128 << 10, 0},
		{50000, 10000, 4096, 0},
	} {
		if got := transferRate(c.small, c.large, c.bytes); math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("4 KiB at %g/s, %d bytes at %g/s: %g B/s, want %g", c.small, c.bytes, c.large, got, c.want)
		}
	}
}

// One paging measurement: the CPU per page is the busy time over the
// pages in and out halved, and the I/O sizes the pages over the device's
// reads and writes, never below a page (a device with other work done).
func TestPagingSampleFromCounters(t *testing.T) {
	// Each worker's touching thread (the one that ran most in the window)
	// waited 0.8 s; its runtime's other thread waited a second more,
	// which is not the worker's wait.
	threads := func(touchingRun, touchingWait, otherWait float64) []host.ThreadSchedstat {
		return []host.ThreadSchedstat{{TID: 1, RunSeconds: 0.5, WaitSeconds: 0.2 + otherWait}, {TID: 2, RunSeconds: touchingRun, WaitSeconds: touchingWait}}
	}
	before := pagingCounters{vm: host.VMStat{PswpIn: 1000, PswpOut: 2000}, busyCPUSeconds: 10, io: host.BlockIO{Reads: 50, Writes: 70},
		workerTouched: []uint64{100, 200}, workerMajorFaults: []uint64{10, 20}, workerThreads: [][]host.ThreadSchedstat{threads(0.1, 1, 0), threads(0.2, 2, 0)}}
	after := pagingCounters{vm: host.VMStat{PswpIn: 41000, PswpOut: 42000}, busyCPUSeconds: 12, io: host.BlockIO{Reads: 10050, Writes: 16070},
		workerTouched: []uint64{8100, 4200}, workerMajorFaults: []uint64{2010, 2020}, workerThreads: [][]host.ThreadSchedstat{threads(1.1, 1.8, 1), threads(1.2, 2.8, 1)}}
	got, err := after.sub(before, 4*time.Second)
	want := PagingSample{SecondsPerPage: 2.0 / 40000, RunQueueSecondsPerPage: 1.6 / 40000, PagesPerRead: 4, PagesPerWrite: 2.5}
	if err != nil || math.Abs(got.SecondsPerPage-want.SecondsPerPage) > 1e-12 || math.Abs(got.RunQueueSecondsPerPage-want.RunQueueSecondsPerPage) > 1e-12 ||
		got.PagesPerRead != 4 || got.PagesPerWrite != 2.5 || got.ReadsPerSec != 2500 || got.WritesPerSec != 4000 ||
		got.PagesInPerSec != 10000 || !slices.Equal(got.WorkerPagesPerSec, []float64{2000, 1000}) || !slices.Equal(got.WorkerMajorFaultsPerSec, []float64{500, 500}) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	// The first made touched twice the second's pages: the slope across
	// two workers (ends at −1 and +1) is (1000−2000)/1500 ÷ 2.
	if slope, ok := got.CreationSlope(); !ok || math.Abs(slope-(-1.0/3)) > 1e-9 {
		t.Errorf("creation slope %g, %v; want -1/3", slope, ok)
	}
	if line := got.String(); !strings.Contains(line, "(creation slope -0.33)") || !strings.Contains(line, "pages touched a major fault, in the same order: 4.0 2.0 (readahead order +0.33, reclaim order -0.20)") {
		t.Errorf("account %q: want the slope, each worker's pages a fault and their order", line)
	}
	busy := after
	busy.io.Reads = 100050 // ten times the swap-ins: other reads too
	if got, _ := busy.sub(before, 4*time.Second); got.PagesPerRead != 1 {
		t.Errorf("more reads than pages in: %g pages a read, want 1", got.PagesPerRead)
	}
	idle := after
	idle.io = before.io // the device's I/O not seen (not a block device)
	if got, _ := idle.sub(before, 4*time.Second); got.PagesPerRead != 0 || got.PagesPerWrite != 0 {
		t.Errorf("no I/O seen: %+v, want no sizes", got)
	}
	few := before
	few.vm.PswpIn += pagingMinPages / 2
	if _, err := few.sub(before, 4*time.Second); !errors.Is(err, errTooFewPages) {
		t.Errorf("%d pages paged: %v, want too few to measure", pagingMinPages/4, err)
	}
}

// Each worker count's figures are the medians of its runs; the readahead
// window only for a sequential scan, and a size only where every run of
// every count could tell it.
func TestSummarizePaging(t *testing.T) {
	runs := [][]PagingSample{
		{{SecondsPerPage: 30e-6, RunQueueSecondsPerPage: 4e-6, PagesPerRead: 6, PagesPerWrite: 7}, {SecondsPerPage: 40e-6, RunQueueSecondsPerPage: 2e-6, PagesPerRead: 5, PagesPerWrite: 8}, {SecondsPerPage: 35e-6, RunQueueSecondsPerPage: 0, PagesPerRead: 7, PagesPerWrite: 6}},
		{{SecondsPerPage: 50e-6, RunQueueSecondsPerPage: 40e-6, PagesPerRead: 4, PagesPerWrite: 2}, {SecondsPerPage: 70e-6, RunQueueSecondsPerPage: 30e-6, PagesPerRead: 4.5, PagesPerWrite: 3}, {SecondsPerPage: 45e-6, RunQueueSecondsPerPage: 45e-6, PagesPerRead: 3.5, PagesPerWrite: 2.5}},
	}
	p := summarizePaging(runs, 2, memload.ScanSeq)
	if want := []PagingCost{{2, 35e-6}, {8, 50e-6}}; !reflect.DeepEqual(p.cpu, want) {
		t.Errorf("costs %+v, want %+v", p.cpu, want)
	}
	if want := []Spread{{30e-6, 40e-6}, {45e-6, 70e-6}}; !reflect.DeepEqual(p.cpuSpread, want) {
		t.Errorf("spreads %+v, want %+v", p.cpuSpread, want)
	}
	// A run that waited for no core is a figure, not a missing one.
	if want := []PagingCost{{2, 2e-6}, {8, 40e-6}}; !reflect.DeepEqual(p.runQueueWait, want) {
		t.Errorf("run-queue waits %+v, want %+v", p.runQueueWait, want)
	}
	if want := []IOPages{{2, 6}, {8, 4}}; !reflect.DeepEqual(p.readahead, want) {
		t.Errorf("readahead %+v, want %+v", p.readahead, want)
	}
	if want := []IOPages{{2, 7}, {8, 2.5}}; !reflect.DeepEqual(p.writes, want) {
		t.Errorf("writes %+v, want %+v", p.writes, want)
	}
	if p := summarizePaging(runs, 2, memload.ScanRandom); p.readahead != nil || p.writes == nil {
		t.Errorf("random scan: readahead %+v, writes %+v; want no readahead, the writes", p.readahead, p.writes)
	}
	if p.readaheadUsed != nil {
		t.Errorf("runs without workers: used share %+v, want none", p.readaheadUsed)
	}
	runs[1][2].PagesPerWrite = 0 // one run could not tell
	if p := summarizePaging(runs, 2, memload.ScanSeq); p.writes != nil {
		t.Errorf("a run without write sizes: %+v, want none", p.writes)
	}
}

// A VM woken by its swap-in read waits its run-queue wait a page on top
// of the read. Where the cores are oversubscribed a wait given is read as
// the fair share's stretch plus what it exceeds it by, so the VM waits
// the stretch and that excess; the fair share's own wait counts where it
// is longer, not both.
func TestRunQueueWaitSlowsFaultingVMs(t *testing.T) {
	for _, c := range []struct {
		name               string
		cpus               float64
		count              int
		pagingCPU, latency float64
		runQueueWait       []PagingCost
		want               float64 // touches/s a VM
	}{
		// A touch: 0.1 µs, half of them a 100 µs read.
		{"no wait", 64, 1, 0, 100e-6, nil, 1 / (0.1e-6 + 50e-6)},
		{"40 µs a page", 64, 1, 0, 100e-6, []PagingCost{{1, 40e-6}}, 1 / (0.1e-6 + 20e-6 + 50e-6)},
		{"by tasks, held beyond the last", 64, 16, 0, 100e-6, []PagingCost{{2, 10e-6}, {8, 40e-6}}, 1 / (0.1e-6 + 20e-6 + 50e-6)},
		// Four VMs of 25.1 µs of CPU a touch on one core: a quarter
		// each, the stretch 3 × 50 µs a page (75 µs a touch).
		{"oversubscribed, no excess", 1, 4, 50e-6, 1e-9, []PagingCost{{1, 0}}, 1 / (4 * 25.1e-6)},
		{"oversubscribed, the stretch and the excess", 1, 4, 50e-6, 1e-9, []PagingCost{{1, 10e-6}}, 1 / (25.1e-6 + 75e-6 + 5e-6)},
		{"oversubscribed, a wait given at four is the stretch's there", 1, 4, 50e-6, 1e-9, []PagingCost{{4, 150e-6}}, 1 / (4 * 25.1e-6)},
		{"oversubscribed, a wait given at four above the stretch", 1, 4, 50e-6, 1e-9, []PagingCost{{4, 550e-6}}, 1 / (25.1e-6 + 275e-6)},
	} {
		nd := smallNode()
		nd.CPUs, nd.PagingCPU, nd.RunQueueWait = c.cpus, []PagingCost{{1, c.pagingCPU}}, c.runQueueWait
		nd.Swap.ReadIOPS, nd.Swap.LatencySeconds = 1e9, c.latency
		n := newNode(nd, oneVM(memload.ScanRandom), c.count, 0.001, 1)
		running(n, 0.5)
		n.capacityPages = 1e12
		n.tick(0, true)
		if got := n.vms[0].rate; math.Abs(got-c.want) > 0.005*c.want {
			t.Errorf("%s: %.0f touches/s a VM, want %.0f", c.name, got, c.want)
		}
	}
	// One core, one VM in RAM beside one faulting: each gets half the
	// core, and the faulting one's 5 µs a touch of run-queue wait is
	// inside its share's wait (25.1 µs of CPU a touch stretched to 50.2).
	nd := smallNode()
	nd.CPUs, nd.PagingCPU, nd.RunQueueWait = 1, []PagingCost{{1, 50e-6}}, []PagingCost{{1, 10e-6}}
	nd.Swap.ReadIOPS, nd.Swap.LatencySeconds = 1e9, 1e-9
	n := newNode(nd, oneVM(memload.ScanRandom), 2, 0.001, 1)
	running(n, 0.5)
	n.vms[1].resident, n.vms[1].disk = n.vms[1].pages, 0
	n.capacityPages = 1e12
	n.tick(0, true)
	if got, want := n.vms[0].rate, 1/50.2e-6; math.Abs(got-want) > 0.005*want {
		t.Errorf("beside a VM in RAM on one core: %.0f touches/s, want %.0f", got, want)
	}
}

// A run-queue wait measured at two counts is the fair share's stretch at
// each plus a little; between them it follows the stretch, which grows
// with the count, not the log of it (the figures of a random probe here).
func TestRunQueueWaitBetweenCountsFollowsTheFairShare(t *testing.T) {
	cpu := []PagingCost{{2, 144e-6}, {8, 199e-6}, {16, 276e-6}}
	waits := []PagingCost{{2, 23e-6}, {8, 574e-6}, {16, 1991e-6}}
	const cores = 2
	for _, c := range waits {
		if got := runQueueWaitAt(waits, cpu, cores, c.Tasks); math.Abs(got-c.SecondsPerPage) > 1e-9 {
			t.Errorf("at a measured count %g: %.1f µs, want the measured %.1f", c.Tasks, got*1e6, c.SecondsPerPage*1e6)
		}
	}
	for _, tasks := range []float64{10, 12, 13, 14} {
		stretch := (tasks/cores - 1) * pagingCPUAt(cpu, tasks)
		if got := runQueueWaitAt(waits, cpu, cores, tasks); math.Abs(got/stretch-1) > 0.05 {
			t.Errorf("at %g tasks: %.0f µs, want within 5%% of the fair share's stretch %.0f", tasks, got*1e6, stretch*1e6)
		}
	}
	// Beyond the last count the stretch grows on, the excess held.
	if got, want := runQueueWaitAt(waits, cpu, cores, 32), 15*pagingCPUAt(cpu, 32)+(1991e-6-7*276e-6); math.Abs(got-want) > 1e-9 {
		t.Errorf("at 32 tasks: %.0f µs, want %.0f", got*1e6, want*1e6)
	}
	// Below one core a task, only the excess: never below zero.
	if got := runQueueWaitAt([]PagingCost{{1, 5e-6}}, cpu, 64, 16); math.Abs(got-5e-6) > 1e-12 {
		t.Errorf("16 tasks on 64 cores: %.1f µs, want 5", got*1e6)
	}
	if got := runQueueWaitAt([]PagingCost{{4, 0}}, cpu, 1, 2); got != 0 {
		t.Errorf("a wait below the stretch it was measured beside: %g, want 0", got)
	}
	if got := runQueueWaitAt(nil, cpu, 2, 16); got != 0 {
		t.Errorf("no waits: %g, want 0", got)
	}
}

func TestPagingWorkerBytes(t *testing.T) {
	const ram, swap = 24 << 30, 4 << 30
	for _, c := range []struct {
		workers             int
		ramBytes, swapBytes uint64
		want                uint64
	}{
		{1, ram, swap, 256 << 20},
		{16, ram, swap, 256 << 20},    // 2 GiB out of a 4 GiB swap: fits
		{17, ram, swap, 240 << 20},    // 4 GiB / 17 = 240.9 MiB, whole MiB
		{512, ram, swap, 8 << 20},     // 64 cores, eight a core
		{8192, ram, swap, 0},          // 0.5 MiB each: none
		{0, ram, swap, 256 << 20},     // as one
		{8, ram, 512 << 20, 64 << 20}, // 256 MiB out of 512 MiB of free swap
		{8, 2 << 30, swap, 128 << 20}, // 512 MiB held in a quarter of 2 GiB
		{2, 2 << 30, swap, 256 << 20},
		{8, 0, swap, 0},
		{8, ram, 0, 0},
	} {
		if got := pagingWorkerBytes(c.workers, c.ramBytes, c.swapBytes); got != c.want {
			t.Errorf("pagingWorkerBytes(%d, %d MiB RAM, %d MiB swap) = %d MiB, want %d MiB", c.workers, c.ramBytes>>20, c.swapBytes>>20, got>>20, c.want>>20)
		}
	}
}

// The readahead order is the least-squares slope of each worker's pages a
// major fault, over their mean, against its place in creation order.
func TestPagingSampleReadaheadOrderSlope(t *testing.T) {
	for _, c := range []struct {
		pages, faults []float64
		want          float64
		ok            bool
	}{
		{[]float64{600, 400, 200}, []float64{100, 100, 100}, 0.5, true},  // 6, 4, 2 a fault
		{[]float64{400, 400, 400}, []float64{50, 100, 100}, 0.375, true}, // 8, 4, 4: (0.5 + 0.25) / 2
		{[]float64{200, 400, 600}, []float64{100, 100, 100}, -0.5, true},
		{[]float64{600, 400}, []float64{100, 0}, 0, false},
		{[]float64{600}, []float64{100}, 0, false},
	} {
		k, ok := PagingSample{WorkerPagesPerSec: c.pages, WorkerMajorFaultsPerSec: c.faults}.ReadaheadOrderSlope()
		if ok != c.ok || math.Abs(k-c.want) > 1e-9 {
			t.Errorf("pages %v over faults %v: slope %.4f (ok %v), want %.4f (ok %v)", c.pages, c.faults, k, ok, c.want, c.ok)
		}
	}
}

// A random worker's share in RAM is its touches that did not fault; the
// reclaim order is how the inverse of that share runs by creation order,
// whatever each worker's rate.
func TestPagingSampleReclaimOrderSlope(t *testing.T) {
	for _, c := range []struct {
		pages, faults []float64
		want          float64
		ok            bool
	}{
		// In RAM 1/4, 2/4, 3/4: inverses 4, 2, 4/3 over their mean 22/9.
		{[]float64{400, 400, 400}, []float64{300, 200, 100}, 6.0 / 11, true},
		{[]float64{300, 100}, []float64{150, 50}, 0, true}, // half in RAM each, at any rate
		{[]float64{400, 400}, []float64{100, 300}, -0.5, true},
		{[]float64{400, 400}, []float64{100, 400}, 0, false}, // the last faulted on every touch
		{[]float64{400}, []float64{100}, 0, false},
	} {
		k, ok := PagingSample{WorkerPagesPerSec: c.pages, WorkerMajorFaultsPerSec: c.faults}.ReclaimOrderSlope()
		if ok != c.ok || math.Abs(k-c.want) > 1e-9 {
			t.Errorf("pages %v, faults %v: reclaim order %.4f (ok %v), want %.4f (ok %v)", c.pages, c.faults, k, ok, c.want, c.ok)
		}
	}
}

// A seq scan's runs tell readahead's order, a random scan's reclaim's:
// the same workers (first made 6 pages a fault and a sixth out, last 2
// and half) give each summary only its own.
func TestSummarizePagingTakesEachScansOrder(t *testing.T) {
	sample := PagingSample{WorkerPagesPerSec: []float64{600, 200}, WorkerMajorFaultsPerSec: []float64{100, 100}}
	runs := [][]PagingSample{{sample, sample, sample}}
	readahead, _ := sample.ReadaheadOrderSlope()
	reclaim, _ := sample.ReclaimOrderSlope()
	if p := summarizePaging(runs, 2, memload.ScanSeq); p.readaheadOrder != readahead || p.steadyReclaimOrder != 0 {
		t.Errorf("seq: readahead order %g, reclaim order %g; want %g and 0", p.readaheadOrder, p.steadyReclaimOrder, readahead)
	}
	if p := summarizePaging(runs, 2, memload.ScanRandom); p.readaheadOrder != 0 || p.steadyReclaimOrder != reclaim || reclaim >= 0 {
		t.Errorf("random: readahead order %g, reclaim order %g; want 0 and %g (below 0: the first made had more in RAM)", p.readaheadOrder, p.steadyReclaimOrder, reclaim)
	}
}
