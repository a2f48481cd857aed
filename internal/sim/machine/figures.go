package machine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/fit"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/probe"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/units"
)

// Figures are this machine's figures for the model, measured
// (`headroom sim --machine this`).
type Figures struct {
	RAMBytes uint64 `json:"ram_bytes"`
	CPUs     int    `json:"cpus"`
	// TouchRate is a `headroom load` worker's pages/s in RAM with one
	// worker a core, by the size of each worker's block.
	TouchRate []sim.TouchRate `json:"touch_rate"`
	// TouchAloneSpeedup is a worker's touch rate alone on the machine
	// over the rate a core with a worker on every core, by the size of its
	// block (nil: one core).
	TouchAloneSpeedup []sim.AloneSpeedup `json:"touch_alone_speedup"`
	// TouchTurns are a core's pages/s with workers of TouchTurnBytes each
	// taking turns on it, by the workers a core (none: not measured, where
	// only the smallest block fits), and TouchTurnBlocks the blocks' worth
	// of memory they touched as (Node.TouchTurnBlocks; 0: the curve could
	// not tell).
	TouchTurnBytes  float64     `json:"touch_turn_bytes"`
	TouchTurns      []TouchTurn `json:"touch_turns"`
	TouchTurnBlocks float64     `json:"touch_turn_blocks"`
	// PopulateRatePerCore is a worker's pages/s filling its block.
	PopulateRatePerCore float64 `json:"populate_rate_per_core"`
	// SwapDevice is the active swap area probed, or the directory where
	// `density --swap SIZE` puts its swap file when none is active;
	// SwapSizeBytes is the active area's size (0: none active).
	SwapDevice    string `json:"swap_device"`
	SwapSizeBytes uint64 `json:"swap_size_bytes"`
	// ReadaheadByOffset: the kernel reads that swap ahead by swap offset
	// (Node.ReadaheadByOffset), as it does over a rotational device.
	ReadaheadByOffset bool `json:"swap_readahead_by_offset"`
	// ReadaheadOrderSlope is how many more of their own pages a
	// sequential fault brought the paging workers made first
	// (Node.ReadaheadOrderSlope; the median over the paging runs).
	ReadaheadOrderSlope float64 `json:"readahead_order_slope,omitempty"`
	// SteadyReclaimOrderSlope is how much more readily reclaim took from
	// the random paging workers made first (Node.SteadyReclaimOrderSlope;
	// the median over the paging runs).
	SteadyReclaimOrderSlope float64 `json:"steady_reclaim_order_slope,omitempty"`
	ReadIOPS                float64 `json:"swap_read_iops"`
	WriteIOPS               float64 `json:"swap_write_iops"`
	LatencySeconds          float64 `json:"swap_latency_seconds"`
	// ReadBytesPerSec and WriteBytesPerSec are the rates an I/O's bytes
	// beyond its first page move at: probeLargeBlockBytes I/Os' time less
	// 4 KiB ones', at probeJobs (writes only where a scratch file could
	// be written).
	ReadBytesPerSec  float64 `json:"swap_read_bytes_per_sec,omitempty"`
	WriteBytesPerSec float64 `json:"swap_write_bytes_per_sec,omitempty"`
	// MixedCapacity is how many times the sum of its reads' and writes'
	// shares of those rates the device served swap's I/O in the paging
	// runs, by their worker counts (each at least 1; none: not measured).
	MixedCapacity []sim.TaskCapacity `json:"swap_mixed_capacity,omitempty"`
	// Depths are the device's rates at queue depths 1 to 16 (writes only
	// where a scratch file could be written).
	Depths []sim.DepthRate `json:"swap_depths,omitempty"`
	// PagingCPU is the CPU per page paged in and out with one, four and
	// eight workers a core (MeasurePaging), the median of
	// Rounds runs; PagingCPUSpread the least and most of those
	// runs, per entry. None with PagingNote saying why it was not measured.
	PagingCPU       []sim.PagingCost `json:"paging_cpu,omitempty"`
	PagingCPUSpread []Spread         `json:"paging_cpu_spread,omitempty"`
	PagingNote      string           `json:"paging_note,omitempty"`
	// ReadaheadPages and WritePages are the pages one read and one write
	// to the swap device carried in the same runs (medians), by the
	// workers faulting: readahead only for a sequential scan (a random
	// one reads a page a fault, and the model knows it).
	ReadaheadPages []sim.IOPages `json:"swap_read_pages,omitempty"`
	WritePages     []sim.IOPages `json:"swap_write_pages,omitempty"`
	// ReadaheadUsed is the share of the pages swapped in that the same
	// runs' workers touched (medians), by the workers faulting: only for a
	// sequential scan, whose every touch over a block half out needs a
	// page from swap.
	ReadaheadUsed []sim.ReadaheadUse `json:"readahead_used,omitempty"`
	// HalfFullWritePages and HalfFullMixedCapacity are the pages one write
	// carried and the device's mixed capacity with
	// pagingHalfFullWorkersPerCore workers a core over a swap file two
	// thirds full (none: not measured, where a swap area is active).
	HalfFullWritePages    []sim.IOPages      `json:"swap_write_pages_half_full,omitempty"`
	HalfFullMixedCapacity []sim.TaskCapacity `json:"swap_mixed_capacity_half_full,omitempty"`
	// RunQueueWait is the workers' wait for a core per page paged in, in
	// the same runs (medians).
	RunQueueWait []sim.PagingCost `json:"run_queue_wait,omitempty"`
	// PagingStealSeconds is the CPU time this machine's host took from it
	// per page paged in with its cores busy, and
	// TouchBesidePagingPagesPerSec a worker in RAM's touches a
	// core-second over a block of TouchBesidePagingBytes, while the
	// device paged BesidePagesInPerSec in (MeasurePagingBeside, medians).
	PagingStealSeconds           float64 `json:"paging_steal_seconds"`
	TouchBesidePagingPagesPerSec float64 `json:"touch_beside_paging_pages_per_sec,omitempty"`
	TouchBesidePagingBytes       float64 `json:"touch_beside_paging_bytes,omitempty"`
	BesidePagesInPerSec          float64 `json:"beside_pages_in_per_sec,omitempty"`
	// ReclaimBatchPages is reclaim's batch a visit to a cgroup where it
	// falls behind a fill, ReclaimBatchShare that as a share of a
	// worker's pages in RAM, and ReclaimOrderSlope how much more readily
	// it takes from the cgroups made first (MeasureRelease, ReleaseRuns
	// runs of ReleaseWorkers workers, fitted together: fit.PooledRelease).
	ReclaimBatchPages float64 `json:"reclaim_batch_pages,omitempty"`
	ReclaimBatchShare float64 `json:"reclaim_batch_share,omitempty"`
	ReclaimOrderSlope float64 `json:"reclaim_order_slope,omitempty"`
	ReleaseWorkers    int     `json:"release_workers,omitempty"`
	// FillOutPagesPerSec is the pace reclaim swapped the release runs'
	// fill out at, past their limit (the median of the runs that told
	// it): a fill past RAM waits for it (Node.FillOutPagesPerSec).
	FillOutPagesPerSec float64 `json:"fill_out_pages_per_sec,omitempty"`
	ReleaseRuns        int     `json:"release_runs,omitempty"`
	// ReclaimBurstPages is the pages reclaim took from one cgroup a visit
	// while it kept up, in the paging runs (fit.PooledReclaimBurst).
	ReclaimBurstPages float64 `json:"reclaim_burst_pages,omitempty"`
	// KSMDCPUSeconds is the CPU time ksmd has used since boot (the
	// kernel's advisor counts it into its first scan).
	KSMDCPUSeconds float64 `json:"ksmd_cpu_seconds"`
	// Rounds is how often each figure was measured (the device probe, each
	// block's touch rate, the paging runs), each kept as the median.
	Rounds int `json:"rounds"`
	// TierCompression is what the tier's compressor made of the
	// workload's content (nil: no tier asked for).
	TierCompression *swaptier.Compression `json:"tier_compression,omitempty"`
	TierNote        string                `json:"tier_note,omitempty"`
}

// Spread is the least and the most of repeated measurements.
type Spread struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// DefaultRounds is how often each figure is measured, its median
// kept. One round is not enough on a shared VM:
//   - the device: one depth's rate moved 10-30% between tests seconds
//     apart here (writes at depth 8 60-79k/s in four rounds), and the
//     model's plateau follows the write rate;
//   - the touch rate: the same run read 37-48M random pages/s a core over
//     256 MiB minutes apart, and one worker alone 0.96-1.42× the rate a
//     core of a worker on every core (24 pairs, a median 1.10);
//   - the paging CPU (fresh workers each round, the worker counts taking
//     turns): a page's cost rises the longer the same workers page (eight
//     random workers here: 176-199 µs a page in the first 2 s and 350-420
//     µs after 16-20 s in one run, 1.2× in another; fresh workers start
//     low again), so a 4 s window reads wherever that rise stood, and runs
//     minutes apart read 151-234 µs.
const DefaultRounds = 3

// Options say how to measure.
type Options struct {
	// Headroom is the headroom binary whose `load` measures the touch rate.
	Headroom string
	Scan     memload.Scan
	// SwapFileDir is probed when no swap area is active.
	SwapFileDir string
	// Seconds of each measurement.
	Duration time.Duration
	// Tier, when set, has the tier's compressor measured on Content.
	Tier    sim.TierKind
	Content memload.Content
	// Rounds is how often each figure is measured (0:
	// DefaultRounds); the figures are the medians.
	Rounds int
}

// rounds is o.Rounds, or DefaultRounds when unset.
func (o Options) rounds() int {
	if o.Rounds > 0 {
		return o.Rounds
	}
	return DefaultRounds
}

// probeJobs is the queue depth of the device probe's main figures.
const probeJobs = 4

// probeLargeBlockBytes is the block the device's transfer rate is
// measured with: larger than any swap I/O here (readahead reads up to
// 32 KiB), small enough to stay a random I/O.
const probeLargeBlockBytes = 128 << 10

// probeDepths are the queue depths the device is measured at for the
// model: one faulting VM up to many.
var probeDepths = []int{1, 2, 4, 8, 16}

// SwapReadahead is how the kernel reads the swap ahead, as the sim's
// --swap-readahead names it: offset or address.
func (f Figures) SwapReadahead() string {
	if f.ReadaheadByOffset {
		return "offset"
	}
	return "address"
}

// Measure measures RAM, cores, the swap device as the agent's
// calibration does, the paging CPU, and last the touch rate of
// `headroom load`.
func Measure(ctx context.Context, o Options) (Figures, error) {
	var f Figures
	mem, err := host.ReadMemory()
	if err != nil {
		return f, err
	}
	f.RAMBytes, f.CPUs, f.Rounds = mem.TotalBytes, runtime.NumCPU(), o.rounds()
	var ksmd host.KsmdCPU
	if cpu, err := ksmd.Seconds(); err == nil { // no ksmd: no KSM in this kernel, nothing used
		f.KSMDCPUSeconds = cpu
	}
	var res probe.Result
	if dev, err := probe.PickSwapDevice(""); err == nil {
		c, err := probe.Calibrate(ctx, dev, probe.CalibrateOptions{Duration: o.Duration, Jobs: probeJobs, Fraction: 1, Depths: probeDepths,
			LargeBlockBytes: probeLargeBlockBytes, Rounds: o.rounds()})
		if err != nil {
			return f, fmt.Errorf("probe swap %s: %w", dev.Path, err)
		}
		res, f.SwapDevice, f.SwapSizeBytes = c.Probe, dev.Path, dev.SizeBytes
	} else {
		res, err = probe.Run(ctx, probe.Options{Dir: o.SwapFileDir, ScratchBytes: 256 << 20, Duration: o.Duration, Jobs: probeJobs, Depths: probeDepths,
			LargeBlockBytes: probeLargeBlockBytes, Rounds: o.rounds()})
		if err != nil {
			return f, fmt.Errorf("probe %s: %w", o.SwapFileDir, err)
		}
		f.SwapDevice = o.SwapFileDir + " (no swap active: where density puts its swap file)"
	}
	var swapFileDir []string
	if f.SwapSizeBytes == 0 {
		swapFileDir = []string{o.SwapFileDir}
	}
	if f.ReadaheadByOffset, err = host.SwapReadaheadByOffset(swapFileDir...); err != nil {
		return f, err
	}
	f.ReadIOPS, f.WriteIOPS, f.LatencySeconds = res.ReadIOPS, res.WriteIOPS, res.ReadLatencyUs/1e6
	f.ReadBytesPerSec = transferRate(res.ReadIOPS, res.LargeReadIOPS, res.LargeBlockBytes)
	f.WriteBytesPerSec = transferRate(res.WriteIOPS, res.LargeWriteIOPS, res.LargeBlockBytes)
	if o.Tier != "" {
		// Without it the model takes the ratio the content names.
		if err := f.measureTierCompression(o); err != nil {
			f.TierNote = "not measured: " + err.Error()
		}
	}
	if err = f.measurePaging(ctx, o); errors.Is(err, ErrPagingNeedsRoot) {
		f.PagingNote = "not measured: " + err.Error()
	} else if err != nil {
		return f, err
	}
	for _, d := range res.Depths {
		if d.QueueDepth == 1 && d.ReadIOPS > 0 {
			f.LatencySeconds = 1 / d.ReadIOPS // a read's time alone
		}
		if d.WriteIOPS > 0 { // a partition is only read: no depths then
			f.Depths = append(f.Depths, sim.DepthRate{QueueDepth: float64(d.QueueDepth), ReadIOPS: math.Round(d.ReadIOPS), WriteIOPS: math.Round(d.WriteIOPS)})
		}
	}
	// The touch rate last, nearest the run it predicts: this VM's rates
	// drift over minutes, and the in-RAM steps follow the touch rate alone.
	if err := measureTouchRate(ctx, o, &f); err != nil {
		return f, err
	}
	return f, nil
}

// transferRate is the bytes/s an I/O's bytes beyond its first page move
// at, from the rates of 4 KiB I/Os and of largeBytes ones at the same
// depth (0: not measured, or the large block no slower).
func transferRate(smallIOPS, largeIOPS float64, largeBytes int) float64 {
	if !(smallIOPS > 0) || !(largeIOPS > 0) || largeBytes <= probe.BlockBytes {
		return 0
	}
	extraSeconds := 1/largeIOPS - 1/smallIOPS
	if extraSeconds <= 0 {
		return 0
	}
	return float64(largeBytes-probe.BlockBytes) / extraSeconds
}

// measurePaging measures the paging CPU and the swap I/O sizes
// o.rounds() times at each count of pagingWorkersPerCore and keeps
// each count's medians (and the CPU's spread).
func (f *Figures) measurePaging(ctx context.Context, o Options) error {
	runs := make([][]PagingSample, len(pagingWorkersPerCore))
	for range o.rounds() {
		for i, perCore := range pagingWorkersPerCore {
			workers := perCore * f.CPUs
			sample, err := MeasurePaging(ctx, o.Headroom, o.Scan, workers, 2*o.Duration, false)
			if errors.Is(err, ErrPagingNeedsRoot) {
				return err
			}
			if err != nil {
				return fmt.Errorf("measure paging CPU with %d workers: %w", workers, err)
			}
			runs[i] = append(runs[i], sample)
		}
	}
	p := summarizePaging(runs, f.CPUs, o.Scan)
	f.PagingCPU, f.PagingCPUSpread, f.RunQueueWait, f.ReadaheadPages, f.WritePages = p.cpu, p.cpuSpread, p.runQueueWait, p.readahead, p.writes
	f.ReadaheadUsed = p.readaheadUsed
	f.ReclaimBurstPages = math.Round(p.reclaimBurstPages)
	f.ReadaheadOrderSlope = math.Round(p.readaheadOrder*100) / 100
	f.SteadyReclaimOrderSlope = math.Round(p.steadyReclaimOrder*100) / 100
	f.MixedCapacity = mixedCapacity(runs, taskCounts(pagingWorkersPerCore, f.CPUs), f.device())
	if err := f.measureBeside(ctx, o); err != nil {
		return err
	}
	if err := f.measureRelease(ctx, o); err != nil {
		return err
	}
	return f.measureHalfFull(ctx, o)
}

// measureBeside pages o.rounds() times beside workers in RAM on every
// core but one and keeps the medians of what it cost them.
func (f *Figures) measureBeside(ctx context.Context, o Options) error {
	workers, resident := besideWorkersPerCore*f.CPUs, max(f.CPUs-1, 1)
	var steal, touch, pagesIn []float64
	for range o.rounds() {
		b, err := MeasurePagingBeside(ctx, o.Headroom, o.Scan, workers, resident, 2*o.Duration)
		if err != nil {
			return fmt.Errorf("measure paging with %d workers beside %d in RAM: %w", workers, resident, err)
		}
		steal, touch, pagesIn = append(steal, b.StealSecondsPerPage), append(touch, b.ResidentPagesPerCoreSecond), append(pagesIn, b.PagesInPerSec)
		f.TouchBesidePagingBytes = float64(b.ResidentBlockBytes)
	}
	f.PagingStealSeconds = results.Quantile(steal, 0.5)
	f.TouchBesidePagingPagesPerSec, f.BesidePagesInPerSec = results.Quantile(touch, 0.5), results.Quantile(pagesIn, 0.5)
	return nil
}

// measureRelease fills workers past their cgroup's limit
// releaseRunsPerRound times a round and pools the runs' batch.
func (f *Figures) measureRelease(ctx context.Context, o Options) error {
	f.ReleaseWorkers = releaseWorkersPerCore * f.CPUs
	var samples []fit.ReleaseSample
	var paces []float64
	for range o.rounds() * releaseRunsPerRound {
		s, err := MeasureRelease(ctx, o.Headroom, o.Scan, f.ReleaseWorkers)
		if err != nil {
			return fmt.Errorf("measure reclaim's batch with %d workers filling past their limit: %w", f.ReleaseWorkers, err)
		}
		samples = append(samples, s)
		if s.FillOutPagesPerSec > 0 {
			paces = append(paces, s.FillOutPagesPerSec)
		}
	}
	if len(paces) > 0 {
		f.FillOutPagesPerSec = math.Round(results.Quantile(paces, 0.5))
	}
	fit := fit.PooledRelease(samples)
	f.ReleaseRuns = len(samples)
	f.ReclaimBatchPages, f.ReclaimBatchShare = math.Round(fit.BatchPages), math.Round(fit.BatchShare*1000)/1000
	f.ReclaimOrderSlope = math.Round(fit.OrderSlope*100) / 100
	return nil
}

// TouchBesidePaging is the touch rate a core beside paging as a share of
// the touch rate in RAM over the same block (none: not measured).
func (f Figures) TouchBesidePaging() sim.TouchBesidePaging {
	inRAM := sim.TouchRateAt(f.TouchRate, f.TouchBesidePagingBytes)
	if !(f.TouchBesidePagingPagesPerSec > 0) || !(f.BesidePagesInPerSec > 0) || !(inRAM > 0) {
		return sim.TouchBesidePaging{}
	}
	share := min(math.Round(f.TouchBesidePagingPagesPerSec/inRAM*100)/100, 2)
	return sim.TouchBesidePaging{Share: share, PagesInPerSec: math.Round(f.BesidePagesInPerSec)}
}

// measureHalfFull pages once at each count of pagingHalfFullWorkersPerCore
// over a swap more than half full, where the kernel frees slots as pages
// come in and takes new ones from among them (a random scan's writes
// then carry a page each here): the pages a write carried and the
// device's mixed capacity there. Nothing where a swap area is active.
func (f *Figures) measureHalfFull(ctx context.Context, o Options) error {
	tasks := taskCounts(pagingHalfFullWorkersPerCore, f.CPUs)
	runs := make([][]PagingSample, len(tasks))
	var writes []sim.IOPages
	for i, t := range tasks {
		sample, err := MeasurePaging(ctx, o.Headroom, o.Scan, int(t), 2*o.Duration, true)
		if errors.Is(err, ErrSwapActive) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("measure paging with %.0f workers over a swap more than half full: %w", t, err)
		}
		runs[i] = []PagingSample{sample}
		if sample.PagesPerWrite > 0 {
			writes = append(writes, sim.IOPages{Tasks: t, Pages: math.Round(sample.PagesPerWrite*100) / 100})
		}
	}
	if len(writes) == len(tasks) {
		f.HalfFullWritePages = writes
	}
	f.HalfFullMixedCapacity = mixedCapacity(runs, tasks, f.device())
	return nil
}

// taskCounts is the workers of each count a core on cpus cores.
func taskCounts(perCore []int, cpus int) []float64 {
	out := make([]float64, len(perCore))
	for i, n := range perCore {
		out[i] = float64(n * cpus)
	}
	return out
}

// device is the swap device as the figures measured it.
func (f Figures) device() sim.Device {
	return sim.Device{ReadIOPS: f.ReadIOPS, WriteIOPS: f.WriteIOPS, Depths: f.Depths, ReadBytesPerSec: f.ReadBytesPerSec, WriteBytesPerSec: f.WriteBytesPerSec}
}

// mixedCapacity is how many times its capacity, as the model adds reads'
// and writes' shares of it, the device served swap's own I/O in the
// paging runs, by worker count: the median run's share, at least 1. The
// shares are at the rates the model gives that many faulting VMs (reads
// at as deep a queue as there are workers, writes at the deepest), so
// that the model pages as the runs did. Under swap this virtio disk served
// 50k one-page reads and 48k writes a second, 1.5 times what its direct
// I/O rates add up to, and more the more workers faulted. runs[i] were
// made with tasks[i] workers.
func mixedCapacity(runs [][]PagingSample, tasks []float64, d sim.Device) []sim.TaskCapacity {
	var out []sim.TaskCapacity
	for i, r := range runs {
		tasks := tasks[i]
		var shares []float64
		for _, s := range r {
			var share float64
			if readIOPS := d.ReadIOPSAt(tasks); readIOPS > 0 {
				share += s.ReadsPerSec * d.ReadSeconds(readIOPS, s.PagesPerRead)
			}
			if writeIOPS := d.WriteIOPSAt(); writeIOPS > 0 {
				share += s.WritesPerSec * d.WriteSeconds(writeIOPS, s.PagesPerWrite)
			}
			shares = append(shares, share)
		}
		if len(shares) > 0 {
			out = append(out, sim.TaskCapacity{Tasks: tasks, Capacity: math.Round(max(results.Quantile(shares, 0.5), 1)*100) / 100})
		}
	}
	return out
}

// pagingFigures are the paging runs' figures by worker count.
type pagingFigures struct {
	cpu               []sim.PagingCost
	cpuSpread         []Spread
	runQueueWait      []sim.PagingCost
	readahead, writes []sim.IOPages
	// readaheadUsed is a sequential scan's used share of what it swapped
	// in (none: not sequential, or some count could not tell it).
	readaheadUsed []sim.ReadaheadUse
	// reclaimBurstPages is reclaim's burst, all runs pooled (0: none
	// could tell it).
	reclaimBurstPages float64
	// readaheadOrder is the median of a sequential scan's runs'
	// ReadaheadOrderSlope (0: not sequential, or none could tell it).
	readaheadOrder float64
	// steadyReclaimOrder is the median of a random scan's runs'
	// ReclaimOrderSlope (0: not random, or none could tell it).
	steadyReclaimOrder float64
}

// summarizePaging takes the medians of each worker count's runs: the
// CPU a page with its spread, the wait for a core a page paged in, and
// the I/O sizes where every run could tell them (readahead only for a
// sequential scan), and reclaim's burst over all runs.
func summarizePaging(runs [][]PagingSample, cpus int, scan memload.Scan) (p pagingFigures) {
	// each is one figure of every run; ok when all runs have it.
	each := func(r []PagingSample, of func(PagingSample) float64) (vs []float64, ok bool) {
		for _, s := range r {
			vs = append(vs, of(s))
		}
		return vs, len(vs) > 0 && slices.Min(vs) > 0
	}
	for i, r := range runs {
		tasks := float64(pagingWorkersPerCore[i] * cpus)
		cpu, _ := each(r, func(s PagingSample) float64 { return s.SecondsPerPage })
		p.cpu = append(p.cpu, sim.PagingCost{Tasks: tasks, SecondsPerPage: results.Quantile(cpu, 0.5)})
		p.cpuSpread = append(p.cpuSpread, Spread{Min: slices.Min(cpu), Max: slices.Max(cpu)})
		wait, _ := each(r, func(s PagingSample) float64 { return s.RunQueueSecondsPerPage })
		p.runQueueWait = append(p.runQueueWait, sim.PagingCost{Tasks: tasks, SecondsPerPage: results.Quantile(wait, 0.5)})
		if vs, ok := each(r, func(s PagingSample) float64 { return s.PagesPerRead }); ok && scan == memload.ScanSeq {
			p.readahead = append(p.readahead, sim.IOPages{Tasks: tasks, Pages: results.Quantile(vs, 0.5)})
		}
		if vs, ok := each(r, func(s PagingSample) float64 { u, _ := s.UsedShare(); return u }); ok && scan == memload.ScanSeq {
			p.readaheadUsed = append(p.readaheadUsed, sim.ReadaheadUse{Tasks: tasks, UsedShare: math.Round(results.Quantile(vs, 0.5)*100) / 100})
		}
		if vs, ok := each(r, func(s PagingSample) float64 { return s.PagesPerWrite }); ok {
			p.writes = append(p.writes, sim.IOPages{Tasks: tasks, Pages: results.Quantile(vs, 0.5)})
		}
	}
	var bursts []fit.BurstSample
	for _, r := range runs {
		for _, s := range r {
			bursts = append(bursts, s.Burst)
		}
	}
	p.reclaimBurstPages, _ = fit.PooledReclaimBurst(bursts)
	// A seq scan's order is readahead's, a random one's reclaim's.
	var orders []float64
	for _, r := range runs {
		for _, s := range r {
			k, ok := s.ReadaheadOrderSlope()
			if scan == memload.ScanRandom {
				k, ok = s.ReclaimOrderSlope()
			}
			if ok {
				orders = append(orders, k)
			}
		}
	}
	if len(orders) > 0 {
		switch k := results.Quantile(orders, 0.5); scan {
		case memload.ScanSeq:
			p.readaheadOrder = max(min(k, sim.MaxCreationOrderSlope), -sim.MaxCreationOrderSlope)
		case memload.ScanRandom:
			p.steadyReclaimOrder = max(min(k, sim.MaxCreationOrderSlope), -sim.MaxCreationOrderSlope)
		}
	}
	// A size by some counts and not others would be read as one count's
	// for all: keep sizes only where every count has one.
	if len(p.readahead) < len(runs) {
		p.readahead = nil
	}
	if len(p.readaheadUsed) < len(runs) {
		p.readaheadUsed = nil
	}
	if len(p.writes) < len(runs) {
		p.writes = nil
	}
	return p
}

// String is the one-line account `sim --machine this` prints.
func (f Figures) String() string {
	touch := make([]string, len(f.TouchRate))
	for i, r := range f.TouchRate {
		touch[i] = fmt.Sprintf("%s over %s", units.FormatRate(r.PagesPerSec), units.FormatBytes(uint64(r.BytesPerCore)))
	}
	alone := ""
	if len(f.TouchAloneSpeedup) > 0 {
		factors := make([]string, len(f.TouchAloneSpeedup))
		for i, a := range f.TouchAloneSpeedup {
			factors[i] = fmt.Sprintf("%.2f", a.Factor)
		}
		alone = fmt.Sprintf(", one worker alone %s× that", strings.Join(factors, "/"))
	}
	if len(f.TouchTurns) > 0 {
		counts, rates := make([]string, len(f.TouchTurns)), make([]string, len(f.TouchTurns))
		for i, t := range f.TouchTurns {
			counts[i], rates[i] = strconv.Itoa(t.WorkersPerCore), units.FormatRate(t.PagesPerSec)
		}
		alone += fmt.Sprintf("; %s workers a core taking turns over %s each %s, as one over %.2f× its block (each rate on its own round's curve)",
			strings.Join(counts, " and "), units.FormatBytes(uint64(f.TouchTurnBytes)), strings.Join(rates, " and "), f.TouchTurnBlocks)
	}
	s := fmt.Sprintf("this machine: %s RAM, %d cores, pages/s a core touches %s and fills %s (headroom load, a worker a core, %s%s); swap %s, %s: 4 KiB random read %s IOPS, write %s IOPS at queue depth %d, %.0f µs a read alone",
		units.FormatBytes(f.RAMBytes), f.CPUs, strings.Join(touch, ", "), units.FormatRate(f.PopulateRatePerCore), medianOf(f.Rounds, "run"), alone, f.SwapDevice, medianOf(f.Rounds, "probe"),
		units.FormatRate(f.ReadIOPS), units.FormatRate(f.WriteIOPS), probeJobs, f.LatencySeconds*1e6)
	s += "; the kernel reads it ahead by " + f.SwapReadahead()
	if f.ReadaheadByOffset {
		s += " (a rotational swap device, or vma_ra_enabled off)"
	}
	if f.ReadaheadOrderSlope != 0 {
		s += fmt.Sprintf(", and a sequential fault brought the paging workers made first %.2f× the mean of their own pages, the last %.2f× (the paging runs' median)",
			1+f.ReadaheadOrderSlope, 1-f.ReadaheadOrderSlope)
	}
	if f.ReadBytesPerSec > 0 {
		s += fmt.Sprintf("; an I/O's bytes beyond its first page move at %s/s read", units.FormatBytes(uint64(f.ReadBytesPerSec)))
		if f.WriteBytesPerSec > 0 {
			s += fmt.Sprintf(", %s/s written", units.FormatBytes(uint64(f.WriteBytesPerSec)))
		}
		s += fmt.Sprintf(" (%s I/Os against 4 KiB ones)", units.FormatBytes(probeLargeBlockBytes))
	}
	if len(f.Depths) > 0 {
		s += "; by queue depth (read/write IOPS) " + sim.FormatDepths(f.Depths)
	}
	s += f.tierCompressionString()
	s += fmt.Sprintf("; ksmd has used %.1f s of CPU since boot", f.KSMDCPUSeconds)
	if f.PagingNote != "" {
		return s + "; paging CPU " + f.PagingNote
	}
	s += "; CPU per page paged in and out by workers faulting at once (headroom load workers over swap under a memory cgroup)"
	for i, c := range f.PagingCPU {
		s += fmt.Sprintf(" %g: %.1f µs", c.Tasks, c.SecondsPerPage*1e6)
		if i < len(f.PagingCPUSpread) && f.Rounds > 1 {
			s += fmt.Sprintf(" (%.0f-%.0f, %s)", f.PagingCPUSpread[i].Min*1e6, f.PagingCPUSpread[i].Max*1e6, medianOf(f.Rounds, "run"))
		}
	}
	if len(f.RunQueueWait) > 0 {
		s += "; their touching threads' wait for a core per page paged in"
		for _, w := range f.RunQueueWait {
			s += fmt.Sprintf(" %g: %.1f µs", w.Tasks, w.SecondsPerPage*1e6)
		}
	}
	if len(f.ReadaheadUsed) > 0 {
		s += "; of the pages swapped in they touched (the rest read ahead and reclaimed unused)"
		for _, u := range f.ReadaheadUsed {
			s += fmt.Sprintf(" %g: %.2f", u.Tasks, u.UsedShare)
		}
	}
	if f.SteadyReclaimOrderSlope != 0 {
		s += fmt.Sprintf("; reclaim took from them by the order they were made, the first %.2f× as readily as the mean, the last %.2f× (the inverse of each one's share in RAM; the paging runs' median)",
			1+f.SteadyReclaimOrderSlope, 1-f.SteadyReclaimOrderSlope)
	}
	if f.ReclaimBurstPages > 0 {
		s += fmt.Sprintf("; reclaim took their pages in bursts of %.0f pages a visit to one's cgroup (the variance over the mean of what each lost in %s, beside its own share and the span's pace)", f.ReclaimBurstPages, reclaimBurstBin)
	}
	if f.TouchBesidePagingPagesPerSec > 0 {
		s += fmt.Sprintf("; beside %d such workers paging %s pages in a second, a worker in RAM over %s touched %s pages a second of its CPU (%.2f× the rate in RAM) and this machine's host took %.1f µs of its cores a page in (steal; %s)",
			besideWorkersPerCore*f.CPUs, units.FormatRate(f.BesidePagesInPerSec), units.FormatBytes(uint64(f.TouchBesidePagingBytes)),
			units.FormatRate(f.TouchBesidePagingPagesPerSec), f.TouchBesidePaging().Share, f.PagingStealSeconds*1e6, medianOf(f.Rounds, "run"))
	}
	if f.ReleaseWorkers > 0 {
		s += fmt.Sprintf("; %d workers filling together %.0f%% past their cgroup's limit had pages out by the order their cgroups were made (the first %.2f× the mean, the last %.2f×) and beside that by batches of %.0f pages a visit of reclaim to one (the variance over the mean of what the order leaves), %.3f of a worker's pages in RAM (%d runs pooled; the order is applied, the batch is not)",
			f.ReleaseWorkers, (releaseOverfill-1)*100, 1+f.ReclaimOrderSlope, 1-f.ReclaimOrderSlope, f.ReclaimBatchPages, f.ReclaimBatchShare, f.ReleaseRuns)
		if f.FillOutPagesPerSec > 0 {
			s += fmt.Sprintf("; reclaim swapped their fill out at %s pages a second (from the first page out to the last, the runs' median; a fill past RAM waits for it)", units.FormatRate(f.FillOutPagesPerSec))
		}
	}
	if len(f.MixedCapacity) > 0 {
		s += "; swap's reads and writes together used, of the device's capacity as its separate rates add up,"
		for _, c := range f.MixedCapacity {
			s += fmt.Sprintf(" %g: %.2f×", c.Tasks, c.Capacity)
		}
	}
	if len(f.ReadaheadPages) > 0 {
		s += "; pages a swap read carried (readahead) " + sim.FormatIOPages(f.ReadaheadPages)
	}
	if len(f.WritePages) > 0 {
		s += "; pages a swap write carried " + sim.FormatIOPages(f.WritePages)
	}
	if len(f.HalfFullWritePages) > 0 {
		s += "; over a swap more than half full, pages a swap write carried " + sim.FormatIOPages(f.HalfFullWritePages)
	}
	if len(f.HalfFullMixedCapacity) > 0 {
		s += " and of the device's capacity used"
		for _, c := range f.HalfFullMixedCapacity {
			s += fmt.Sprintf(" %g: %.2f×", c.Tasks, c.Capacity)
		}
	}
	return s
}

// medianOf names what a figure measured rounds times is: "median of 3
// probes", or "one probe".
func medianOf(rounds int, what string) string {
	if rounds <= 1 {
		return "one " + what
	}
	return fmt.Sprintf("median of %d %ss", rounds, what)
}
