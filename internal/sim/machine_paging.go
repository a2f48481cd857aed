package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
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

// pagingHalfFullWorkersPerCore are the workers a core of the paging runs
// over a swap more than half full, one run each: as on a density plateau.
var pagingHalfFullWorkersPerCore = []int{4, 8}

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
)

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

// ErrSwapActive: a half-full paging run needs a swap file of its own size,
// and a swap area is already active.
var ErrSwapActive = errors.New("a swap area is active")

// PagingSample is one paging measurement: the CPU per page paged in (and
// another out), the faulting tasks' wait for a core per page paged in,
// and the pages one read and one write to the swap device carried (0:
// the device's I/O could not be told apart).
type PagingSample struct {
	SecondsPerPage              float64
	RunQueueSecondsPerPage      float64
	PagesPerRead, PagesPerWrite float64
	// ReadsPerSec and WritesPerSec are the I/Os the swap device completed
	// a second (0: its I/O could not be seen).
	ReadsPerSec, WritesPerSec float64
	// SwapUsedShare is the share of the swap in use at the window's end.
	SwapUsedShare float64
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
// should be otherwise idle. halfFull pages over a swap file two thirds
// full instead (ErrSwapActive where a swap area is active).
func MeasurePaging(ctx context.Context, headroom string, scan memload.Scan, workers int, window time.Duration, halfFull bool) (sample PagingSample, err error) {
	if os.Geteuid() != 0 {
		return sample, ErrPagingNeedsRoot
	}
	swaps, err := host.ReadSwaps()
	if err != nil {
		return sample, err
	}
	if halfFull && len(swaps) > 0 {
		return sample, ErrSwapActive
	}
	workers = max(workers, 1)
	mem, err := host.ReadMemory()
	if err != nil {
		return sample, err
	}
	swapFree := mem.SwapFreeBytes
	if len(swaps) == 0 {
		swapFree = pagingSwapBytes
	}
	workerBytes := pagingWorkerBytes(workers, mem.TotalBytes, swapFree)
	if workerBytes == 0 {
		return sample, fmt.Errorf("%d paging workers: too many for %s of free swap and %s of RAM", workers, units.FormatBytes(swapFree), units.FormatBytes(mem.TotalBytes))
	}
	if len(swaps) == 0 {
		fileBytes := uint64(pagingSwapBytes)
		if halfFull { // the half of the blocks that is out fills two thirds
			fileBytes = uint64(workers) * workerBytes / 2 * 3 / 2
		}
		setup, err := swaptier.Up(swaptier.Spec{File: &swaptier.FileSpec{SizeBytes: fileBytes}}, "")
		if err != nil {
			return sample, fmt.Errorf("swap file: %w", err)
		}
		defer func() {
			if derr := setup.Down(); derr != nil && err == nil {
				err = derr
			}
		}()
	}
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
	// Each worker's first interval record says its block is populated and
	// its measured scan (the paging) has begun.
	scanning := make(chan struct{}, workers)
	pids := make([]int, 0, workers)
	for i := range workers {
		// Each in its own cgroup under the limited one, as density's
		// workers and libvirt's and KubeVirt's VMs are.
		w, err := cgroup.Create(g, fmt.Sprintf("w%d", i+1))
		if err != nil {
			return sample, err
		}
		cmd := cgroup.Command(w.Path(), headroom, "load", "--size", fmt.Sprint(workerBytes), "--scan", string(scan),
			"--duration", (window + 2*time.Minute).String(), "--interval", "250ms", "--json")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return sample, err
		}
		if err := cmd.Start(); err != nil {
			return sample, fmt.Errorf("start headroom load: %w", err)
		}
		pids = append(pids, cmd.Process.Pid)
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}()
		go func() {
			lines, started := bufio.NewScanner(out), false
			for lines.Scan() {
				if !started && strings.Contains(lines.Text(), `"type":"interval"`) {
					scanning <- struct{}{}
					started = true
				}
			}
		}()
	}
	timeout := time.After(2 * time.Minute)
	for range workers {
		select {
		case <-scanning:
		case <-ctx.Done():
			return sample, ctx.Err()
		case <-timeout:
			return sample, fmt.Errorf("%d headroom load workers did not all start scanning within two minutes", workers)
		}
	}
	before, err := readPagingCounters(pids)
	if err != nil {
		return sample, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return sample, ctx.Err()
	}
	after, err := readPagingCounters(pids)
	if err != nil {
		return sample, err
	}
	if sample, err = after.sub(before, window); err != nil {
		return sample, err
	}
	if mem, err = host.ReadMemory(); err != nil {
		return sample, err
	}
	if mem.SwapTotalBytes > 0 {
		sample.SwapUsedShare = 1 - float64(mem.SwapFreeBytes)/float64(mem.SwapTotalBytes)
	}
	return sample, nil
}

type pagingCounters struct {
	vm             host.VMStat
	busyCPUSeconds float64 // over all CPUs
	// runQueueSeconds is the workers' wait for a core.
	runQueueSeconds float64
	io              host.BlockIO
}

func readPagingCounters(workerPIDs []int) (pagingCounters, error) {
	var c pagingCounters
	var err error
	if c.busyCPUSeconds, err = host.BusyCPUSeconds(); err != nil {
		return c, err
	}
	for _, pid := range workerPIDs {
		wait, err := host.RunQueueWaitSeconds(pid)
		if err != nil {
			return c, err
		}
		c.runQueueSeconds += wait
	}
	if c.io, err = host.SwapBlockIO(); err != nil {
		return c, err
	}
	c.vm, err = host.ReadVMStat()
	return c, err
}

// sub is the paging measured between two readings window apart.
func (c pagingCounters) sub(before pagingCounters, window time.Duration) (PagingSample, error) {
	in, out := float64(c.vm.PswpIn-before.vm.PswpIn), float64(c.vm.PswpOut-before.vm.PswpOut)
	pages := (in + out) / 2
	if pages < pagingMinPages {
		return PagingSample{}, fmt.Errorf("only %.0f pages paged in %s: too few to measure", pages, window)
	}
	s := PagingSample{SecondsPerPage: (c.busyCPUSeconds - before.busyCPUSeconds) / pages}
	if in > 0 {
		s.RunQueueSecondsPerPage = max(c.runQueueSeconds-before.runQueueSeconds, 0) / in
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
