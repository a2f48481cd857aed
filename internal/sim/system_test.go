//go:build system

package sim

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// requireProbeSwap: root, and no swap area active (the paging probe makes
// its own swap file).
func requireProbeSwap(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	swaps, err := host.ReadSwaps()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, len(swaps) == 0, "no swap area active (the probe makes its own swap file)")
}

// The paging probe's two swap files, for real: the usual one stays under
// half full through the window, though every page swapped in keeps its
// slot; the half-full run's is more than half full at its end. Both are
// removed afterwards.
func TestSystemPagingProbeSwapFiles(t *testing.T) {
	requireProbeSwap(t)
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
	requireProbeSwap(t)
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
	if swaps, err := host.ReadSwaps(); err != nil || len(swaps) != 0 {
		t.Fatalf("swap areas left active: %v (%v)", swaps, err)
	}
	root, err := cgroup.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	if left, err := filepath.Glob(filepath.Join(root.Path(), "headroom-sim-*")); err != nil || len(left) > 0 {
		t.Fatalf("cgroups left: %v (%v)", left, err)
	}
}
