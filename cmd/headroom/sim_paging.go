package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/sim/machine"
)

const simPagingLong = `Measure what paging costs on this machine now, as sim --machine this
does at one worker count, in seconds rather than minutes: --workers
headroom load workers, each in a cgroup of its own under a memory cgroup
that holds half their blocks, scan over the active swap (or, with none
active, a swap file where density puts one). Prints the CPU per page paged
in and out, the workers' wait for a core per page paged in, the pages in
a second, the swap I/O sizes, and each worker's pages/s and pages touched
a major fault in the order they were made (a density plateau in small:
with seq, readahead serves the workers made first best).

Run it before and after a measured ramp to tell whether the figures the
model was given still held (bench/sim-fidelity.sh does). Needs root.`

type simPagingFlags struct {
	workers int
	scan    flagvalue.Scan
	window  time.Duration
	json    bool
}

func newSimPagingCommand() *cobra.Command {
	f := &simPagingFlags{workers: 4 * runtime.NumCPU(), scan: flagvalue.Scan(memload.ScanSeq), window: 6 * time.Second}
	cmd := &cobra.Command{
		Use:     "paging",
		Short:   "Measure the CPU and the wait for a core a page paged costs on this machine now",
		Long:    simPagingLong,
		Example: `  sudo headroom sim paging --workers 8 --memory-scan seq --window 6s --json`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runSimPaging(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.workers, "workers", f.workers, "headroom load workers paging at once; unless given, four a core, as on a density plateau")
	fl.Var(&f.scan, "memory-scan", "how the workers touch their blocks: seq or random")
	fl.DurationVar(&f.window, "window", f.window, "how long the paging is measured, once every worker scans")
	fl.BoolVar(&f.json, "json", false, "print the measurement as JSON")
	return cmd
}

func runSimPaging(cmd *cobra.Command, f *simPagingFlags) error {
	if f.workers < 1 {
		return usagef("--workers %d: want a count of at least 1", f.workers)
	}
	if memload.Scan(f.scan) == memload.ScanNone {
		return usagef("--memory-scan none: want seq or random (a worker that touches nothing pages nothing)")
	}
	if f.window < time.Second {
		return usagef("--window %s: want at least 1s", f.window)
	}
	if err := machine.CanMeasurePaging(); err != nil {
		return usagef("sim paging %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if !f.json {
		fmt.Fprintf(cmd.ErrOrStderr(), "paging %d %s workers, half of each out, for %s once all scan (some 20 s)...\n", f.workers, f.scan.String(), f.window)
	}
	sample, err := machine.MeasurePaging(cmd.Context(), exe, memload.Scan(f.scan), f.workers, f.window)
	if errors.Is(err, machine.ErrPagingNeedsRoot) {
		return usagef("sim paging %v", err)
	}
	if err != nil {
		return err
	}
	if f.json {
		out := struct {
			machine.PagingSample
			// CreationSlope and ReadaheadOrder are absent with one
			// worker, the second also where one had no major fault.
			CreationSlope  *float64 `json:"creation_slope,omitempty"`
			ReadaheadOrder *float64 `json:"readahead_order,omitempty"`
			// ReclaimOrder is absent where a worker faulted on every
			// touch.
			ReclaimOrder *float64 `json:"reclaim_order,omitempty"`
		}{PagingSample: sample}
		if slope, ok := sample.CreationSlope(); ok {
			out.CreationSlope = &slope
		}
		if k, ok := sample.ReadaheadOrderSlope(); ok {
			out.ReadaheadOrder = &k
		}
		if k, ok := sample.ReclaimOrderSlope(); ok {
			out.ReclaimOrder = &k
		}
		return printJSON(cmd, out)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "paging, %s scan, %s: %s\n", f.scan.String(), f.window, sample)
	return nil
}
