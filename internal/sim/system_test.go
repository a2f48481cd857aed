//go:build system

package sim

import (
	"context"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The paging probe's two swap files, for real: the usual one stays under
// half full through the window, though every page swapped in keeps its
// slot; the half-full run's is more than half full at its end. Both are
// removed afterwards.
func TestSystemPagingProbeSwapFiles(t *testing.T) {
	testenv.RequireRoot(t)
	swaps, err := host.ReadSwaps()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, len(swaps) == 0, "no swap area active (the probe makes its own swap file)")
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
