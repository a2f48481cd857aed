//go:build system

package machine

import (
	"context"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The paging probe's swap file, for real: it stays under half full
// through the window, though every page swapped in keeps its slot, and is
// removed afterwards.
func TestSystemPagingProbeSwapFile(t *testing.T) {
	testenv.RequireNoSwap(t)
	s, err := MeasurePaging(context.Background(), testenv.HeadroomBinary(t), memload.ScanRandom, 8, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.2f of the swap in use at the end, %.0f reads and %.0f writes a second, %.2f pages a write, %.1f µs a page", s.SwapUsedShare, s.ReadsPerSec, s.WritesPerSec, s.PagesPerWrite, s.SecondsPerPage*1e6)
	if !(s.SwapUsedShare > 0 && s.SwapUsedShare < 0.5) {
		t.Errorf("%.2f of the swap in use at the window's end, want some and under half", s.SwapUsedShare)
	}
	if swaps, err := host.ReadSwaps(); err != nil || len(swaps) != 0 {
		t.Fatalf("swap areas left active: %v (%v)", swaps, err)
	}
	testenv.RequireProbeCleanedUp(t, "headroom-sim-*")
}
