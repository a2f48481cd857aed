//go:build system

package machine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/fit"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The paging probe's two swap files, for real: the usual one stays under
// half full through the window, though every page swapped in keeps its
// slot; the half-full run's is more than half full at its end. Both are
// removed afterwards.
func TestSystemPagingProbeSwapFiles(t *testing.T) {
	testenv.RequireNoSwap(t)
	workers := pagingHalfFullWorkersPerCore[0] * 2
	for _, halfFull := range []bool{false, true} {
		s, err := MeasurePaging(context.Background(), testenv.HeadroomBinary(t), memload.ScanRandom, workers, 2*time.Second, halfFull)
		if err != nil {
			t.Fatalf("half full %v: %v", halfFull, err)
		}
		t.Logf("half full %v: %.2f of the swap in use at the end, %.0f reads and %.0f writes a second, %.2f pages a write, %.1f µs a page", halfFull, s.SwapUsedShare, s.ReadsPerSec, s.WritesPerSec, s.PagesPerWrite, s.SecondsPerPage*1e6)
		if full := s.SwapUsedShare >= 0.5; full != halfFull {
			t.Errorf("half full %v: %.2f of the swap in use at the window's end", halfFull, s.SwapUsedShare)
		}
		if swaps, err := host.ReadSwaps(); err != nil || len(swaps) != 0 {
			t.Fatalf("swap areas left active: %v (%v)", swaps, err)
		}
	}
}

// The beside probe, for real: a worker in RAM beside paging workers
// touches, with the cores it got, and sees the paging; the figures are
// within reason; its cgroups, processes and swap file are gone after.
func TestSystemPagingBesideProbe(t *testing.T) {
	testenv.RequireNoSwap(t)
	b, err := MeasurePagingBeside(context.Background(), testenv.HeadroomBinary(t), memload.ScanRandom, besideWorkersPerCore*2, 1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f pages in a second; the resident worker over %d MiB: %.2fM pages a core-second on %.2f cores; steal %.1f µs a page",
		b.PagesInPerSec, b.ResidentBlockBytes>>20, b.ResidentPagesPerCoreSecond/1e6, b.ResidentCores, b.StealSecondsPerPage*1e6)
	switch {
	case b.ResidentBlockBytes != residentMaxWorkerBytes:
		t.Errorf("resident block %d bytes, want %d", b.ResidentBlockBytes, residentMaxWorkerBytes)
	case !(b.PagesInPerSec >= pagingMinPages/2.0):
		t.Errorf("%.0f pages in a second: the workers beside it did not page", b.PagesInPerSec)
	case !(b.ResidentCores > 0.1 && b.ResidentCores <= 1.05):
		t.Errorf("the resident worker got %.2f cores, want some of one", b.ResidentCores)
	case !(b.ResidentPagesPerCoreSecond > 1e6 && b.ResidentPagesPerCoreSecond < 1e9):
		t.Errorf("the resident worker touched %.0f pages a core-second", b.ResidentPagesPerCoreSecond)
	case !(b.StealSecondsPerPage >= 0 && b.StealSecondsPerPage < 1e-3):
		t.Errorf("steal %.1f µs a page", b.StealSecondsPerPage*1e6)
	}
	testenv.RequireProbeCleanedUp(t, "headroom-sim-*")
}

// The release probe, for real: workers fill past their cgroup's limit
// together, all have pages in RAM once full, the mean out is what the
// overfill puts out, and the batch read is between reclaim's smallest
// (SWAP_CLUSTER_MAX) and a whole worker. Its swap file and cgroups are
// gone afterwards.
func TestSystemReleaseProbe(t *testing.T) {
	testenv.RequireNoSwap(t)
	workers := releaseWorkersPerCore * 2
	s, err := MeasureRelease(context.Background(), testenv.HeadroomBinary(t), memload.ScanRandom, workers)
	if err != nil {
		t.Fatal(err)
	}
	var out, inRAM float64
	for i := range s.PagesOut {
		out += s.PagesOut[i]
		inRAM += s.PagesInRAM[i]
	}
	fit := fit.PooledRelease([]fit.ReleaseSample{s})
	t.Logf("pages out %v; in RAM %v; order slope %.2f, batch %.0f pages, %.3f of a worker; out at %.0f pages a second", s.PagesOut, s.PagesInRAM, fit.OrderSlope, fit.BatchPages, fit.BatchShare, s.FillOutPagesPerSec)
	// What is out is the overfill's share of the blocks, and a little
	// more: reclaim keeps the cgroup a little under its limit.
	wantOut := (out + inRAM) * (1 - 1/releaseOverfill)
	switch {
	case len(s.PagesOut) != workers || len(s.PagesInRAM) != workers:
		t.Errorf("%d and %d readings, want %d each", len(s.PagesOut), len(s.PagesInRAM), workers)
	case !(out > 0.8*wantOut && out < 2*wantOut):
		t.Errorf("%.0f pages out in all, want about %.0f", out, wantOut)
	case slices.Min(s.PagesInRAM) <= 0:
		t.Errorf("a worker had nothing in RAM: %v", s.PagesInRAM)
	case !(fit.BatchPages >= sim.ReclaimBatchPages && fit.BatchShare < 1):
		t.Errorf("batch %.0f pages, %.3f of a worker", fit.BatchPages, fit.BatchShare)
	case !(s.FillOutPagesPerSec > 100):
		t.Errorf("the fill went out at %.0f pages a second: want its pace read", s.FillOutPagesPerSec)
	}
	testenv.RequireProbeCleanedUp(t, "headroom-sim-*")
}
