package machine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/units"
)

// The paging measurement: `headroom load` workers, each of
// pagingWorkerBytes in its own cgroup, under a memory cgroup holding half
// of them, so half their pages are always out (a sequential scan misses
// on every page); one worker a core, four, and eight as on a density
// plateau, give how the cost, and what the device serves, grow with the
// tasks faulting at once (random workers here: 37-39k pages in a second
// with two, 50-52k with eight, 57-60k with sixteen). Half out, as
// on a plateau: with 96 MiB workers and a third out, eight random workers
// here read 26-43 µs a page, rising run by run, and wrote 1.5 pages an
// I/O, where a density plateau (2 GiB node, 13-16 workers of 256 MiB)
// spent 24 µs a page; 256 MiB workers half out read 22-27 µs and wrote a
// page an I/O, as the plateau does.
var pagingWorkersPerCore = []int{1, 4, 8}

const (
	pagingMaxWorkerBytes = 256 << 20
	// pagingSwapBytes is the swap file made where none is active: with
	// sixteen workers half out (2 GiB) it stays under half full through
	// the window, though every page swapped in keeps its slot there
	// (about 1 GiB more in 4 s). At half full the kernel frees slots as
	// pages come in and a random scan's writes no longer merge (the
	// model's setIOFigures); a 4 GiB file was half full from the start
	// with sixteen, and read 1.0 pages a write there against 1.9-2.0
	// with eight.
	pagingSwapBytes = 8 << 30
	// pagingMinPages is the least paging that gives a figure.
	pagingMinPages = 2000
	// pagingMaxWindows is how many windows a probe pages for at most
	// while fewer than pagingMinPages have moved: a device another
	// program keeps busy (a build writing its output here, in a cold CI
	// run) paged 331 pages in 2 s. The windows end before the workers do
	// (pagingWorkerSlack).
	pagingMaxWindows = 8
	// pagingWorkerSlack is how long a probe's workers run past one
	// window: their blocks' fill and the windows a probe may add.
	pagingWorkerSlack = 2 * time.Minute
)

// errTooFewPages is a window's paging too small to give a figure.
var errTooFewPages = errors.New("too few to measure")

// pagingWorkerBytes is each of workers' block: pagingMaxWorkerBytes, or
// less where the half of all blocks that is out would not fit in half of
// the free swap, or the half held in a quarter of ramBytes (whole MiB; 0
// where not even one fits).
func pagingWorkerBytes(workers int, ramBytes, swapFreeBytes uint64) uint64 {
	const mib = 1 << 20
	n := uint64(max(workers, 1))
	return min(pagingMaxWorkerBytes, swapFreeBytes/n, ramBytes/2/n) / mib * mib
}

// ErrPagingNeedsRoot: the paging measurement makes a memory cgroup and,
// with no swap active, a swap file.
var ErrPagingNeedsRoot = errors.New("needs root (a memory cgroup and swap)")

// CanMeasurePaging is ErrPagingNeedsRoot for a user without root, else nil:
// asked before a paging run is announced.
func CanMeasurePaging() error {
	if os.Geteuid() != 0 {
		return ErrPagingNeedsRoot
	}
	return nil
}

// ErrSwapActive: a half-full paging run needs a swap file of its own size,
// and a swap area is already active.
var ErrSwapActive = errors.New("a swap area is active")

// PagingSample is one paging measurement: the CPU per page paged in (and
// another out), the faulting tasks' wait for a core per page paged in,
// and the pages one read and one write to the swap device carried (0:
// the device's I/O could not be told apart).
type PagingSample struct {
	SecondsPerPage         float64 `json:"cpu_seconds_per_page"`
	RunQueueSecondsPerPage float64 `json:"run_queue_seconds_per_page_in"`
	PagesPerRead           float64 `json:"pages_per_read"`
	PagesPerWrite          float64 `json:"pages_per_write"`
	// ReadsPerSec and WritesPerSec are the I/Os the swap device completed
	// a second (0: its I/O could not be seen).
	ReadsPerSec  float64 `json:"reads_per_sec"`
	WritesPerSec float64 `json:"writes_per_sec"`
	// SwapUsedShare is the share of the swap in use at the window's end.
	SwapUsedShare float64 `json:"swap_used_share"`
	// PagesInPerSec is the pages swapped in a second.
	PagesInPerSec float64 `json:"pages_in_per_sec"`
	// WorkerBytes is each worker's block, half of it out.
	WorkerBytes uint64 `json:"worker_bytes"`
	// WorkerPagesPerSec is each worker's pages touched a second, in the
	// order they were made: a plateau in small (how evenly paging
	// workers share the device, and whether the first made fare better).
	WorkerPagesPerSec []float64 `json:"worker_pages_per_sec"`
	// WorkerMajorFaultsPerSec is each worker's major faults a second, in
	// the same order: its pages a fault brought in are its rate over these.
	WorkerMajorFaultsPerSec []float64 `json:"worker_major_faults_per_sec"`
}

// CreationSlope is how the workers' rates ran with the order they were
// made, as results.RateCreationSlope reads a density step (ok false
// with fewer than two workers).
func (s PagingSample) CreationSlope() (slope float64, ok bool) {
	workers := make([]results.WorkerResult, len(s.WorkerPagesPerSec))
	for i, r := range s.WorkerPagesPerSec {
		workers[i] = results.WorkerResult{CreateOffsetSeconds: float64(i), PagesPerSec: r}
	}
	return results.RateCreationSlope(workers)
}

// ReadaheadOrderSlope is how the pages each worker touched a major fault
// ran with the order the workers were made: the least-squares k of
// pages a fault over their mean against 1 + k × place (1 for the first
// made, −1 for the last). ok false with fewer than two workers or one
// without a fault.
func (s PagingSample) ReadaheadOrderSlope() (k float64, ok bool) {
	return s.workerOrderSlope(func(touched, faults float64) (float64, bool) {
		return touched / faults, faults > 0
	})
}

// ReclaimOrderSlope is, for a random scan, how much more readily reclaim
// took from the workers made first (Node.SteadyReclaimOrderSlope): the
// slope (by the first made) of the inverse of each worker's share in RAM, the
// share of its touches that did not fault. Each worker paging steadily
// loses as many pages as it faults back, and with the cores shared
// fairly they fault alike, so reclaim's weight on a worker's pages in
// RAM runs as the inverse of its share in RAM. ok false with fewer than
// two workers or one that faulted on every touch.
func (s PagingSample) ReclaimOrderSlope() (k float64, ok bool) {
	return s.workerOrderSlope(func(touched, faults float64) (float64, bool) {
		return touched / (touched - faults), touched-faults > 0
	})
}

// workerOrderSlope is the creation-order slope (+ where the first made has more) of value over each
// worker's pages touched and major faults a second (ok false with fewer
// than two workers or a value not ok).
func (s PagingSample) workerOrderSlope(value func(touched, faults float64) (float64, bool)) (float64, bool) {
	n := len(s.WorkerPagesPerSec)
	if n < 2 || len(s.WorkerMajorFaultsPerSec) != n {
		return 0, false
	}
	values := make([]float64, n)
	for i, touched := range s.WorkerPagesPerSec {
		v, ok := value(touched, s.WorkerMajorFaultsPerSec[i])
		if !ok {
			return 0, false
		}
		values[i] = v
	}
	// The slope from the first made: results' from the last, negated.
	return -results.OrderSlope(values), true
}

// String is the account `headroom sim paging` prints.
func (s PagingSample) String() string {
	rates := make([]string, len(s.WorkerPagesPerSec))
	for i, r := range s.WorkerPagesPerSec {
		rates[i] = units.FormatRate(r)
	}
	line := fmt.Sprintf("%d workers of %s, half of each out: CPU %.1f µs a page paged in and out, wait for a core %.1f µs a page in; %s pages in a second, %.2f pages a read, %.2f a write; swap %.0f%% used",
		len(s.WorkerPagesPerSec), units.FormatBytes(s.WorkerBytes), s.SecondsPerPage*1e6, s.RunQueueSecondsPerPage*1e6, units.FormatRate(s.PagesInPerSec),
		s.PagesPerRead, s.PagesPerWrite, s.SwapUsedShare*100)
	line += "; pages/s each worker touched, in the order made: " + strings.Join(rates, " ")
	if slope, ok := s.CreationSlope(); ok {
		line += fmt.Sprintf(" (creation slope %+.2f)", slope)
	}
	if len(s.WorkerMajorFaultsPerSec) == len(s.WorkerPagesPerSec) && len(rates) > 0 {
		perFault := make([]string, len(rates))
		for i, f := range s.WorkerMajorFaultsPerSec {
			perFault[i] = "-"
			if f > 0 {
				perFault[i] = fmt.Sprintf("%.1f", s.WorkerPagesPerSec[i]/f)
			}
		}
		line += "; pages touched a major fault, in the same order: " + strings.Join(perFault, " ")
		var orders []string
		if k, ok := s.ReadaheadOrderSlope(); ok {
			orders = append(orders, fmt.Sprintf("readahead order %+.2f", k))
		}
		if k, ok := s.ReclaimOrderSlope(); ok {
			orders = append(orders, fmt.Sprintf("reclaim order %+.2f", k))
		}
		if len(orders) > 0 {
			line += " (" + strings.Join(orders, ", ") + ")"
		}
	}
	return line
}

// MeasurePaging measures the CPU per page paged on this machine by
// workers `headroom load` workers scanning as scan in a memory cgroup
// smaller than their blocks, over the active swap or, with none, a swap
// file where density puts one. It is the node's busy CPU time
// (all but idle, iowait and steal) over the window divided by the pages
// that went in and out, halved (a page in and another out). That holds the
// kernel's fault, reclaim and I/O paths, the faulting tasks' contention
// for them (here a seq page costs 30 µs with one worker and 80 µs with
// six), and, where this machine is itself a VM, the time its own host
// takes on the faults paging causes, which the guest sees as the workers'
// user time (here a third of it). The workers' own touches are a rounding
// error beside them (tens of nanoseconds a page against tens of
// microseconds). The run-queue wait is the workers' threads' time
// runnable but not running (schedstat) over the pages paged in: a task
// woken by its swap-in read's completion waits for a core before it runs
// on (here 40 µs a seq page with eight workers on two cores, while the
// cores were a third idle). The I/O sizes are the pages swapped in and out over the
// reads and writes the swap areas' block devices completed. The machine
// should be otherwise idle.
func MeasurePaging(ctx context.Context, headroom string, scan memload.Scan, workers int, window time.Duration) (PagingSample, error) {
	return measurePaging(ctx, pagingRun{headroom: headroom, scan: scan, workers: workers, window: window})
}

// probeSwap is what a probe pages to: the active swap, or where none is
// active a swap file of its own where density puts one.
type probeSwap struct {
	active bool
	// freeBytes is the active swap's free space, or pagingSwapBytes.
	freeBytes uint64
	mem       host.Memory
}

// readProbeSwap reads this machine's swap and memory; a probe needs root.
func readProbeSwap() (probeSwap, error) {
	if err := CanMeasurePaging(); err != nil {
		return probeSwap{}, err
	}
	swaps, err := host.ReadSwaps()
	if err != nil {
		return probeSwap{}, err
	}
	mem, err := host.ReadMemory()
	if err != nil {
		return probeSwap{}, err
	}
	sw := probeSwap{active: len(swaps) > 0, freeBytes: mem.SwapFreeBytes, mem: mem}
	if !sw.active {
		sw.freeBytes = pagingSwapBytes
	}
	return sw, nil
}

// workerBytes is each of workers' block (pagingWorkerBytes), or an
// error where not even one fits.
func (sw probeSwap) workerBytes(workers int) (uint64, error) {
	b := pagingWorkerBytes(workers, sw.mem.TotalBytes, sw.freeBytes)
	if b == 0 {
		return 0, fmt.Errorf("%d workers: too many for %s of free swap and %s of RAM", workers, units.FormatBytes(sw.freeBytes), units.FormatBytes(sw.mem.TotalBytes))
	}
	return b, nil
}

// up makes the swap file of fileBytes where no swap is active; down
// removes it (nothing where swap was active).
func (sw probeSwap) up(fileBytes uint64) (down func() error, err error) {
	if sw.active {
		return func() error { return nil }, nil
	}
	setup, err := swaptier.Up(tierspec.Spec{File: &tierspec.FileSpec{SizeBytes: fileBytes}}, "")
	if err != nil {
		return nil, fmt.Errorf("swap file: %w", err)
	}
	return setup.Down, nil
}

// pagingRun is one paging measurement: workers paging in a memory cgroup
// holding half their blocks.
type pagingRun struct {
	headroom string
	scan     memload.Scan
	workers  int
	window   time.Duration
}

func measurePaging(ctx context.Context, r pagingRun) (sample PagingSample, err error) {
	sw, err := readProbeSwap()
	if err != nil {
		return sample, err
	}
	workers := max(r.workers, 1)
	workerBytes, err := sw.workerBytes(workers)
	if err != nil {
		return sample, err
	}
	down, err := sw.up(pagingSwapBytes)
	if err != nil {
		return sample, err
	}
	defer func() {
		if derr := down(); derr != nil && err == nil {
			err = derr
		}
	}()
	root, err := cgroup.Open("/")
	if err != nil {
		return sample, err
	}
	g, err := cgroup.Create(root, fmt.Sprintf("headroom-sim-paging-%d", os.Getpid()))
	if err != nil {
		return sample, err
	}
	defer cgroup.Remove(g, 10*time.Second)
	if err := g.SetMemoryLimit(uint64(workers) * workerBytes / 2); err != nil {
		return sample, err
	}
	// Each in its own cgroup under the limited one, as density's workers
	// and libvirt's and KubeVirt's VMs are.
	pagers, err := startLoadWorkers(ctx, g, "w", r.headroom, r.scan, workers, workerBytes, r.window)
	defer pagers.stop() // also those started before an error
	if err != nil {
		return sample, err
	}
	before, err := readPagingCounters(pagers)
	if err != nil {
		return sample, err
	}
	// Window after window until enough has paged: the figures are over
	// all of them.
	var after pagingCounters
	var elapsed time.Duration
	for windows := 1; ; windows++ {
		select { // a measuring window: the counters' growth over it
		case <-time.After(r.window):
		case <-ctx.Done():
			return sample, ctx.Err()
		}
		elapsed += r.window
		if after, err = readPagingCounters(pagers); err != nil {
			return sample, err
		}
		sample, err = after.sub(before, elapsed)
		if !errors.Is(err, errTooFewPages) || windows == pagingMaxWindows || elapsed+r.window > pagingWorkerSlack {
			break
		}
	}
	if err != nil {
		return sample, err
	}
	sample.WorkerBytes = workerBytes
	mem, err := host.ReadMemory()
	if err != nil {
		return sample, err
	}
	if mem.SwapTotalBytes > 0 {
		sample.SwapUsedShare = 1 - float64(mem.SwapFreeBytes)/float64(mem.SwapTotalBytes)
	}
	return sample, nil
}

// loadWorkers are `headroom load` workers, each in a cgroup of its own,
// scanning: pids their processes, touched each one's pages its interval
// records have reported so far.
type loadWorkers struct {
	pids    []int
	groups  []cgroup.Group
	cmds    []*exec.Cmd
	touched []atomic.Uint64
	// majorFaults is each one's major faults so far: with touched, how
	// many of its pages each fault brought in (readahead).
	majorFaults []atomic.Uint64
	// pagesOut is each worker's pages reclaim has taken from it by its
	// last interval record: its swap entries plus the pages it faulted
	// back (a swapped-in page leaves its entry; it comes back by a major
	// fault, or a minor one from the swap cache).
	pagesOut []atomic.Uint64
}

// loadEach reads each of counters.
func loadEach(counters []atomic.Uint64) []uint64 {
	out := make([]uint64, len(counters))
	for i := range counters {
		out[i] = counters[i].Load()
	}
	return out
}

// startLoadWorkers starts n workers of blockBytes each in cgroups
// prefix1..prefixN under parent and returns once each has populated its
// block and begun its measured scan (its first interval record), or
// within two minutes an error. Stop them with stop, also on error.
func startLoadWorkers(ctx context.Context, parent cgroup.Group, prefix, headroom string, scan memload.Scan, n int, blockBytes uint64, window time.Duration) (*loadWorkers, error) {
	ws, scanning, err := launchLoadWorkers(parent, prefix, headroom, n, func(int) []string { return loadArgs(scan, blockBytes, window) })
	if err != nil {
		return ws, err
	}
	timeout := time.After(2 * time.Minute)
	for range n {
		select {
		case <-scanning:
		case <-ctx.Done():
			return ws, ctx.Err()
		case <-timeout:
			return ws, fmt.Errorf("%d headroom load workers did not all start scanning within two minutes", n)
		}
	}
	return ws, nil
}

// loadArgs are the arguments of a `headroom load` worker of a probe.
func loadArgs(scan memload.Scan, blockBytes uint64, window time.Duration) []string {
	return []string{"load", "--size", fmt.Sprint(blockBytes), "--scan", string(scan),
		"--duration", (window + pagingWorkerSlack).String(), "--interval", "100ms", "--json"}
}

// launchLoadWorkers starts n `headroom load` workers, worker i (from 0)
// with args(i), in cgroups prefix1..prefixN under parent, without
// waiting for them: scanning gets a value as each reports its first
// interval. Stop them with stop, also on error.
func launchLoadWorkers(parent cgroup.Group, prefix, headroom string, n int, args func(i int) []string) (ws *loadWorkers, scanning <-chan struct{}, err error) {
	ws = &loadWorkers{pagesOut: make([]atomic.Uint64, n), touched: make([]atomic.Uint64, n), majorFaults: make([]atomic.Uint64, n)}
	began := make(chan struct{}, n)
	for i := range n {
		w, err := cgroup.Create(parent, fmt.Sprintf("%s%d", prefix, i+1))
		if err != nil {
			return ws, began, err
		}
		ws.groups = append(ws.groups, w)
		cmd := cgroup.Command(w.Path(), headroom, args(i)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return ws, began, err
		}
		if err := cmd.Start(); err != nil {
			return ws, began, fmt.Errorf("start headroom load: %w", err)
		}
		ws.pids, ws.cmds = append(ws.pids, cmd.Process.Pid), append(ws.cmds, cmd)
		go func() {
			lines, started := bufio.NewScanner(out), false
			var faults uint64
			for lines.Scan() {
				var rec memload.Record
				if json.Unmarshal(lines.Bytes(), &rec) != nil || rec.Type != "interval" {
					continue
				}
				ws.touched[i].Add(rec.Pages)
				faults += rec.MajorFaults + rec.MinorFaults
				ws.majorFaults[i].Add(rec.MajorFaults)
				ws.pagesOut[i].Store(rec.SwapBytes/sim.PageBytes + faults)
				if !started {
					began <- struct{}{}
					started = true
				}
			}
		}()
	}
	return ws, began, nil
}

// stop ends the workers and removes their cgroups.
func (ws *loadWorkers) stop() {
	for _, cmd := range ws.cmds {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	for _, g := range ws.groups {
		cgroup.Remove(g, 10*time.Second)
	}
}

type pagingCounters struct {
	vm             host.VMStat
	busyCPUSeconds float64 // over all CPUs
	// stealCPUSeconds is the time this machine's host took from it.
	stealCPUSeconds float64
	// workerThreads is each paging worker's threads' scheduler counters:
	// its touching thread's wait for a core.
	workerThreads [][]host.ThreadSchedstat
	io            host.BlockIO
	// workerTouched and workerMajorFaults are each paging worker's
	// touches and major faults.
	workerTouched, workerMajorFaults []uint64
}

// readPagingCounters reads the node's counters and the paging workers'.
func readPagingCounters(pagers *loadWorkers) (pagingCounters, error) {
	var c pagingCounters
	var err error
	if c.busyCPUSeconds, c.stealCPUSeconds, err = host.BusyAndStealCPUSeconds(); err != nil {
		return c, err
	}
	c.workerTouched, c.workerMajorFaults = loadEach(pagers.touched), loadEach(pagers.majorFaults)
	for _, pid := range pagers.pids {
		threads, err := host.ThreadSchedstats(pid)
		if err != nil {
			return c, err
		}
		c.workerThreads = append(c.workerThreads, threads)
	}
	if c.io, err = host.SwapBlockIO(); err != nil {
		return c, err
	}
	c.vm, err = host.ReadVMStat()
	return c, err
}

// perSecond is each counter's growth from before to after over window
// (nil where the two readings differ in length; a counter that went back
// grew 0).
func perSecond(after, before []uint64, window time.Duration) []float64 {
	if len(after) != len(before) {
		return nil
	}
	var rates []float64
	for i, n := range after {
		rates = append(rates, float64(n-min(n, before[i]))/window.Seconds())
	}
	return rates
}

// sub is the paging measured between two readings window apart.
func (c pagingCounters) sub(before pagingCounters, window time.Duration) (PagingSample, error) {
	in, out := float64(c.vm.PswpIn-before.vm.PswpIn), float64(c.vm.PswpOut-before.vm.PswpOut)
	pages := (in + out) / 2
	if pages < pagingMinPages {
		return PagingSample{}, fmt.Errorf("only %.0f pages paged in %s: %w", pages, window, errTooFewPages)
	}
	s := PagingSample{SecondsPerPage: (c.busyCPUSeconds - before.busyCPUSeconds) / pages, PagesInPerSec: in / window.Seconds()}
	s.WorkerPagesPerSec = perSecond(c.workerTouched, before.workerTouched, window)
	s.WorkerMajorFaultsPerSec = perSecond(c.workerMajorFaults, before.workerMajorFaults, window)
	if in > 0 && len(c.workerThreads) == len(before.workerThreads) {
		var wait float64
		for i, threads := range c.workerThreads {
			wait += host.BusiestThreadWaitSeconds(before.workerThreads[i], threads)
		}
		s.RunQueueSecondsPerPage = wait / in
	}
	// A device with other work (a swap file's file system) shows more
	// I/Os than swap's: the sizes then read small, never large.
	if reads := float64(c.io.Reads - before.io.Reads); reads > 0 {
		s.PagesPerRead = max(in/reads, 1)
		s.ReadsPerSec = reads / window.Seconds()
	}
	if writes := float64(c.io.Writes - before.io.Writes); writes > 0 {
		s.PagesPerWrite = max(out/writes, 1)
		s.WritesPerSec = writes / window.Seconds()
	}
	return s, nil
}
