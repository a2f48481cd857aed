package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/units"
)

const loadLong = `Allocate anonymous memory, fill it with a chosen content, then touch it
sequentially or at random, optionally at a fixed rate, and report pages/s,
page faults, RSS and swap once per interval.

The block is fully populated before the measured phase; populate time is
reported separately. One "page" in the counts is one touch: one byte read or
written every --stride bytes (by default the page size, so one touch per page).

Writes keep the page's content class: with --content random the touched byte
changes (the page stays unique); with zero, dup and compress the byte is
stored back unchanged, so the page is dirtied but stays zero, identical to
its twins, or as compressible as before.

Content classes:
  random       every page unique (nothing for KSM to merge or zram to compress)
  zero         every page zero
  dup=F        a fraction F of pages are identical to other pages (copies of up
               to 256 templates shared by all workers), the rest unique
  compress=R   every page compresses about R:1 with lz4/lzo/zstd

Modes:
  standalone (default), as a worker of a controller (--controller), or as a
  local fleet of N worker processes under one controller (--workers N) that
  prints per-worker and aggregate results and the measured start skew.

Exit status: 0 on success, 1 if the run failed, 2 on bad input.`

const loadExample = `  headroom load --size 1Gi --scan random --duration 30s
  headroom load --size 512Mi --rate 50k --writes 0.3 --content dup=0.8 --mergeable
  headroom load --size 256Mi --workers 8 --duration 10s --json`

type loadFlags struct {
	size       flagvalue.Bytes
	scan       flagvalue.Scan
	stride     flagvalue.Bytes
	writes     flagvalue.Fraction
	rate       flagvalue.Rate
	duration   time.Duration
	iterations uint64
	content    flagvalue.Content
	seed       uint64
	mergeable  bool
	checksum   bool
	hugePages  flagvalue.HugePages
	interval   time.Duration
	pace       time.Duration
	json       bool
	controller string
	workerID   string
	workers    int
	stopDelay  time.Duration
}

// newLoadFlags returns the flags with their defaults.
func newLoadFlags(pageBytes uint64) *loadFlags {
	return &loadFlags{
		size:      256 << 20,
		scan:      flagvalue.Scan(memload.ScanSeq),
		stride:    flagvalue.Bytes(pageBytes),
		writes:    1,
		content:   flagvalue.Content(memload.Content{Kind: memload.ContentRandom}),
		seed:      1,
		hugePages: flagvalue.HugePages(memload.HugePagesNever),
		interval:  time.Second,
	}
}

// register defines the flags on fl, with the help text users see.
func (f *loadFlags) register(fl *pflag.FlagSet) {
	fl.Var(&f.size, "size", "anonymous memory to allocate and populate (e.g. 512Mi, 14Gi, 1G)")
	fl.Var(&f.scan, "scan", "access pattern: seq (page by page, wrapping), random (uniform), none (populate, then hold)")
	fl.Var(&f.stride, "stride", "bytes between touches (the page size: every page once a pass)")
	fl.Var(&f.writes, "writes", "fraction of touches that write one byte, in [0,1]; the rest read one byte")
	fl.Var(&f.rate, "rate", "cap on touches per second, e.g. 50k or 1M (0: as fast as possible)")
	fl.DurationVar(&f.duration, "duration", 0, "length of the measured phase, e.g. 180s (0: until --iterations or Ctrl-C)")
	fl.Uint64Var(&f.iterations, "iterations", 0, "stop after this many full passes over the block (0: no limit)")
	fl.Var(&f.content, "content", "page content: random, zero, dup=F (fraction F deduplicable), compress=R (about R:1)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for random scans and unique page content (with --workers, worker i uses seed+i)")
	fl.BoolVar(&f.mergeable, "mergeable", false, "mark the block MADV_MERGEABLE so KSM may merge its pages")
	fl.BoolVar(&f.checksum, "checksum", false, "print the block's CRC-64 after populate and in the summary: equal when nothing wrote to it (a save and restore lost nothing)")
	fl.Var(&f.hugePages, "hugepages", "transparent huge pages for the block: never (MADV_NOHUGEPAGE) or madvise (MADV_HUGEPAGE)")
	fl.DurationVar(&f.interval, "interval", time.Second, "reporting interval")
	fl.DurationVar(&f.stopDelay, "stop-delay", 0, "on SIGTERM/SIGINT, go on (memory held, touching) this long before exiting, as a guest powering down does")
	fl.DurationVar(&f.pace, "pace", 0, "with --rate: how often the run wakes to touch its next batch (default 10ms; coarser costs less CPU in a TCG guest)")
	fl.BoolVar(&f.json, "json", false, "print JSON lines (interval records, then a final {\"type\":\"summary\"} line)")
	fl.StringVar(&f.controller, "controller", "", "join a controller at unix:/path or tcp:host:port: report ready, wait for start, stream records")
	fl.StringVar(&f.workerID, "worker-id", "", "this worker's name at the controller (default: host-pid)")
	fl.IntVar(&f.workers, "workers", 0, "run N worker processes under a local controller and aggregate their results")
}

func newLoadCommand() *cobra.Command {
	pageBytes := uint64(os.Getpagesize())
	f := newLoadFlags(pageBytes)
	cmd := &cobra.Command{
		Use:     "load",
		Short:   "Run the memory workload: allocate, fill, touch at a rate, report",
		Long:    loadLong,
		Example: loadExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoad(cmd, f, pageBytes)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (f *loadFlags) params() memload.Params {
	p := memload.Params{
		SizeBytes:       uint64(f.size),
		Scan:            memload.Scan(f.scan),
		StrideBytes:     uint64(f.stride),
		WriteFraction:   float64(f.writes),
		RatePagesPerSec: float64(f.rate),
		Duration:        f.duration,
		Iterations:      f.iterations,
		Content:         memload.Content(f.content),
		Seed:            f.seed,
		Mergeable:       f.mergeable,
		Checksum:        f.checksum,
		HugePages:       memload.HugePages(f.hugePages),
		Interval:        f.interval,
		Pace:            f.pace,
	}
	p.Normalize()
	return p
}

func runLoad(cmd *cobra.Command, f *loadFlags, pageBytes uint64) error {
	p := f.params()
	if err := p.Validate(pageBytes); err != nil {
		return usageError{err}
	}
	switch {
	case f.workers < 0 || f.workers > 4096:
		return usagef("--workers must be between 1 and 4096, got %d", f.workers)
	case f.workers > 0 && f.controller != "":
		return usagef("--workers and --controller cannot be combined: --workers runs its own controller")
	case f.stopDelay < 0:
		return usagef("--stop-delay must not be negative, got %s", f.stopDelay)
	}
	if f.controller != "" {
		if _, _, err := loadctl.ParseAddr(f.controller); err != nil {
			return usagef("--controller: %v; want %s", err, loadctl.AddrForm)
		}
	}
	if err := checkFits(p.SizeBytes, max(f.workers, 1)); err != nil {
		return usageError{err}
	}

	o := loadrun.Options{Params: p, Controller: f.controller, Worker: f.workerID, JSON: f.json, Out: cmd.OutOrStdout()}
	ctx := delayedStop(cmd.Context(), f.stopDelay)
	var err error
	switch {
	case f.workers > 0:
		exe, exeErr := os.Executable()
		if exeErr != nil {
			return fmt.Errorf("find own executable for worker processes: %w", exeErr)
		}
		err = loadrun.Fleet(ctx, o, f.workers, exe, cmd.ErrOrStderr())
	case f.controller != "":
		if o.Worker == "" {
			host, _ := os.Hostname()
			o.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		err = loadrun.Worker(ctx, o)
		if err != nil && !errors.Is(err, loadrun.ErrRunFailed) {
			// Only connecting can fail before the run: the address is unusable.
			return usagef("--controller %s: %v", f.controller, err)
		}
	default:
		err = loadrun.Standalone(ctx, o)
	}
	return err
}

// delayedStop is a context that ends delay after ctx does, with its cause
// (the signal, which the summary's stop reason names).
func delayedStop(ctx context.Context, delay time.Duration) context.Context {
	if delay <= 0 {
		return ctx
	}
	delayed, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() { time.AfterFunc(delay, func() { cancel(context.Cause(ctx)) }) })
	return delayed
}

// checkFits refuses a workload larger than the machine's RAM + swap: it could
// only end in the OOM killer.
func checkFits(sizeBytes uint64, workers int) error {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil || mi.SwapTotalBytes == nil {
		return nil
	}
	ram, swap := *mi.MemTotalBytes, *mi.SwapTotalBytes
	total := sizeBytes * uint64(workers)
	if total/uint64(workers) != sizeBytes || total > ram+swap {
		what := "--size " + units.FormatBytes(sizeBytes)
		if workers > 1 {
			what = fmt.Sprintf("--workers %d × --size %s", workers, units.FormatBytes(sizeBytes))
		}
		return fmt.Errorf("%s is larger than this machine's RAM + swap (%s + %s)", what, units.FormatBytes(ram), units.FormatBytes(swap))
	}
	return nil
}
