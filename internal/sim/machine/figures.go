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
	// TouchTurns are a core's pages/s with workers of TouchTurnBytes each
	// taking turns on it, by the workers a core (none: not measured, where
	// only the smallest block fits), and TouchTurnBlocks the blocks' worth
	// of memory they touched as (the correction Node.TouchTurnBlocks; 0:
	// the curve could not tell).
	TouchTurnBytes  float64     `json:"touch_turn_bytes"`
	TouchTurns      []TouchTurn `json:"touch_turns"`
	TouchTurnBlocks float64     `json:"touch_turn_blocks"`
	// PopulateRatePerCore is a worker's pages/s filling its block.
	PopulateRatePerCore float64 `json:"populate_rate_per_core"`
	// SwapDevice is the active swap area probed, or the directory where
	// `density --swap SIZE` puts its swap file when none is active;
	// SwapSizeBytes is the active area's size (0: none active).
	SwapDevice     string  `json:"swap_device"`
	SwapSizeBytes  uint64  `json:"swap_size_bytes"`
	ReadIOPS       float64 `json:"swap_read_iops"`
	WriteIOPS      float64 `json:"swap_write_iops"`
	LatencySeconds float64 `json:"swap_latency_seconds"`
	// ReadBytesPerSec and WriteBytesPerSec are the rates an I/O's bytes
	// beyond its first page move at: probeLargeBlockBytes I/Os' time less
	// 4 KiB ones', at probeJobs (writes only where a scratch file could
	// be written).
	ReadBytesPerSec  float64 `json:"swap_read_bytes_per_sec,omitempty"`
	WriteBytesPerSec float64 `json:"swap_write_bytes_per_sec,omitempty"`
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
	// RunQueueWait is the workers' wait for a core per page paged in, in
	// the same runs (medians).
	RunQueueWait []sim.PagingCost `json:"run_queue_wait,omitempty"`
	// MixedCapacity is how many times the sum of its reads' and writes'
	// shares of its rates the device served in the same runs (medians;
	// the correction Node.Swap.MixedCapacity).
	MixedCapacity []sim.TaskCapacity `json:"swap_mixed_capacity,omitempty"`
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
	// Progress, if set, is told of each measurement as it starts.
	Progress func(line string)
}

// progress tells o.Progress, if set.
func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
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
			LargeBlockBytes: probeLargeBlockBytes, Rounds: o.rounds(), Progress: o.Progress})
		if err != nil {
			return f, fmt.Errorf("probe swap %s: %w", dev.Path, err)
		}
		res, f.SwapDevice, f.SwapSizeBytes = c.Probe, dev.Path, dev.SizeBytes
	} else {
		res, err = probe.Run(ctx, probe.Options{Dir: o.SwapFileDir, ScratchBytes: 256 << 20, Duration: o.Duration, Jobs: probeJobs, Depths: probeDepths,
			LargeBlockBytes: probeLargeBlockBytes, Rounds: o.rounds(), Progress: o.Progress})
		if err != nil {
			return f, fmt.Errorf("probe %s: %w", o.SwapFileDir, err)
		}
		f.SwapDevice = o.SwapFileDir + " (no swap active: where density puts its swap file)"
	}
	f.ReadIOPS, f.WriteIOPS, f.LatencySeconds = res.ReadIOPS, res.WriteIOPS, res.ReadLatencyUs/1e6
	f.ReadBytesPerSec = transferRate(res.ReadIOPS, res.LargeReadIOPS, res.LargeBlockBytes)
	f.WriteBytesPerSec = transferRate(res.WriteIOPS, res.LargeWriteIOPS, res.LargeBlockBytes)
	if o.Tier != "" {
		o.progress("measuring %s's compression of --content %s", o.Tier, o.Content)
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
	if err := CanMeasurePaging(); err != nil {
		o.progress("paging: skipped, it %s", err)
		return err
	}
	runs := make([][]PagingSample, len(pagingWorkersPerCore))
	for round := range o.rounds() {
		for i, perCore := range pagingWorkersPerCore {
			workers := perCore * f.CPUs
			o.progress("paging: %d workers over swap under a memory cgroup, %s of paging (round %d of %d)", workers, 2*o.Duration, round+1, o.rounds())
			sample, err := MeasurePaging(ctx, o.Headroom, o.Scan, workers, 2*o.Duration)
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
	f.MixedCapacity = mixedCapacity(runs, f.CPUs, f.device())
	return nil
}

// device is the swap device as the figures measured it.
func (f Figures) device() sim.Device {
	return sim.Device{ReadIOPS: f.ReadIOPS, WriteIOPS: f.WriteIOPS, Depths: f.Depths, ReadBytesPerSec: f.ReadBytesPerSec, WriteBytesPerSec: f.WriteBytesPerSec}
}

// mixedCapacity is how many times its capacity, as the model adds its
// reads' and writes' shares, the device served swap's own I/O in the
// paging runs, by worker count: the median run's share, at least 1. The
// shares are at the rates the model gives that many faulting tasks (reads
// at as deep a queue as there are tasks, writes at the deepest), so that
// the model pages as the runs did. runs[i] were made with
// pagingWorkersPerCore[i] workers a core; a count whose runs could not
// see the device's I/O gives nothing.
func mixedCapacity(runs [][]PagingSample, cpus int, d sim.Device) []sim.TaskCapacity {
	var out []sim.TaskCapacity
	for i, r := range runs {
		tasks := float64(pagingWorkersPerCore[i] * cpus)
		var shares []float64
		for _, s := range r {
			if s.ReadsPerSec <= 0 || s.WritesPerSec <= 0 {
				continue
			}
			shares = append(shares, s.ReadsPerSec*d.ReadSeconds(d.ReadIOPSAt(tasks), max(s.PagesPerRead, 1))+
				s.WritesPerSec*d.WriteSeconds(d.WriteIOPSAt(), max(s.PagesPerWrite, 1)))
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
}

// summarizePaging takes the medians of each worker count's runs: the
// CPU a page with its spread, the wait for a core a page paged in, and
// the I/O sizes where every run could tell them (readahead only for a
// sequential scan).
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
		if vs, ok := each(r, func(s PagingSample) float64 { return s.PagesPerWrite }); ok {
			p.writes = append(p.writes, sim.IOPages{Tasks: tasks, Pages: results.Quantile(vs, 0.5)})
		}
	}
	// A size by some counts and not others would be read as one count's
	// for all: keep sizes only where every count has one.
	if len(p.readahead) < len(runs) {
		p.readahead = nil
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
	turns := ""
	if len(f.TouchTurns) > 0 {
		counts, rates := make([]string, len(f.TouchTurns)), make([]string, len(f.TouchTurns))
		for i, t := range f.TouchTurns {
			counts[i], rates[i] = strconv.Itoa(t.WorkersPerCore), units.FormatRate(t.PagesPerSec)
		}
		turns = fmt.Sprintf("; %s workers a core taking turns over %s each %s, ", strings.Join(counts, " and "), units.FormatBytes(uint64(f.TouchTurnBytes)), strings.Join(rates, " and "))
		if f.TouchTurnBlocks > 0 {
			turns += fmt.Sprintf("as one over %.2f× its block (each rate on its own round's curve)", f.TouchTurnBlocks)
		} else {
			turns += "which the curve cannot place (it does not fall from that block on): no turns correction"
		}
	}
	s := fmt.Sprintf("this machine: %s RAM, %d cores, pages/s a core touches %s and fills %s (headroom load, a worker a core, %s%s); swap %s, %s: 4 KiB random read %s IOPS, write %s IOPS at queue depth %d, %.0f µs a read alone",
		units.FormatBytes(f.RAMBytes), f.CPUs, strings.Join(touch, ", "), units.FormatRate(f.PopulateRatePerCore), medianOf(f.Rounds, "run"), turns, f.SwapDevice, medianOf(f.Rounds, "probe"),
		units.FormatRate(f.ReadIOPS), units.FormatRate(f.WriteIOPS), probeJobs, f.LatencySeconds*1e6)
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
	if len(f.ReadaheadPages) > 0 {
		s += "; pages a swap read carried (readahead) " + sim.FormatIOPages(f.ReadaheadPages)
	}
	if len(f.WritePages) > 0 {
		s += "; pages a swap write carried " + sim.FormatIOPages(f.WritePages)
	}
	if len(f.MixedCapacity) > 0 {
		s += "; swap's reads and writes together used, of the device's capacity as its separate rates add up,"
		for _, c := range f.MixedCapacity {
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
