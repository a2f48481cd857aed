package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
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
		got, err := ParseIOPages(in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), IOPagesForm) || strings.Contains(err.Error(), "--") {
				t.Errorf("%q: %+v, %v; want an error with %s and no flag", in, got, err, IOPagesForm)
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
	f.Fuzz(func(t *testing.T, s string) { checkRoundTrip(t, s, ParseIOPages, FormatIOPages) })
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
		{"one-page writes: no transfer", func(nd *Node) {
			writeBound([]IOPages{{1, 1}})(nd)
			nd.Swap.WriteBytesPerSec = PageBytes / 100e-6
		}, 8, 10000},
	} {
		nd := smallNode()
		c.set(&nd)
		spec := oneVM(loadspec.ScanSeq)
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
		n := newNode(nd, oneVM(loadspec.ScanRandom), c.count, 0.001, 1)
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
	n := newNode(nd, oneVM(loadspec.ScanRandom), 2, 0.001, 1)
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
