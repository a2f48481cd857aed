package machine

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
	"github.com/headroom-dev/headroom/internal/sim"
)

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
	if want := []sim.PagingCost{{Tasks: 2, SecondsPerPage: 35e-6}, {Tasks: 8, SecondsPerPage: 50e-6}}; !reflect.DeepEqual(p.cpu, want) {
		t.Errorf("costs %+v, want %+v", p.cpu, want)
	}
	if want := []Spread{{30e-6, 40e-6}, {45e-6, 70e-6}}; !reflect.DeepEqual(p.cpuSpread, want) {
		t.Errorf("spreads %+v, want %+v", p.cpuSpread, want)
	}
	// A run that waited for no core is a figure, not a missing one.
	if want := []sim.PagingCost{{Tasks: 2, SecondsPerPage: 2e-6}, {Tasks: 8, SecondsPerPage: 40e-6}}; !reflect.DeepEqual(p.runQueueWait, want) {
		t.Errorf("run-queue waits %+v, want %+v", p.runQueueWait, want)
	}
	if want := []sim.IOPages{{Tasks: 2, Pages: 6}, {Tasks: 8, Pages: 4}}; !reflect.DeepEqual(p.readahead, want) {
		t.Errorf("readahead %+v, want %+v", p.readahead, want)
	}
	if want := []sim.IOPages{{Tasks: 2, Pages: 7}, {Tasks: 8, Pages: 2.5}}; !reflect.DeepEqual(p.writes, want) {
		t.Errorf("writes %+v, want %+v", p.writes, want)
	}
	if p := summarizePaging(runs, 2, memload.ScanRandom); p.readahead != nil || p.writes == nil {
		t.Errorf("random scan: readahead %+v, writes %+v; want no readahead, the writes", p.readahead, p.writes)
	}
	runs[1][2].PagesPerWrite = 0 // one run could not tell
	if p := summarizePaging(runs, 2, memload.ScanSeq); p.writes != nil {
		t.Errorf("a run without write sizes: %+v, want none", p.writes)
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

// The device's mixed capacity from the paging runs: each run's reads and
// writes a second as shares of the device's rates, summed; the median run
// by worker count (2, 8 and 16 workers on two cores), at least 1; a run
// that could not see the device's I/O is left out, a count without one
// gives nothing.
func TestMixedCapacityFromPagingRuns(t *testing.T) {
	d := sim.Device{ReadIOPS: 10000, WriteIOPS: 10000}
	io := func(reads, writes float64) PagingSample {
		return PagingSample{ReadsPerSec: reads, WritesPerSec: writes, PagesPerRead: 1, PagesPerWrite: 1}
	}
	runs := [][]PagingSample{
		{io(6000, 6000), io(4000, 4000), io(5000, 4000)},
		{io(8000, 7000), io(9000, 9000), io(7000, 7000)},
		{io(10000, 10000), io(12000, 0)},
	}
	want := []sim.TaskCapacity{{Tasks: 2, Capacity: 1}, {Tasks: 8, Capacity: 1.5}, {Tasks: 16, Capacity: 2}}
	if got := mixedCapacity(runs, 2, d); !reflect.DeepEqual(got, want) {
		t.Errorf("%+v, want %+v", got, want)
	}
	runs[2] = []PagingSample{io(0, 0)}
	if got := mixedCapacity(runs, 2, d); len(got) != 2 {
		t.Errorf("a count whose runs saw no I/O: %+v, want the other two counts only", got)
	}
}
