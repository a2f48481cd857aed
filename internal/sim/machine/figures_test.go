package machine

import (
	"math"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/swaptier"
)

// The model's tier ratio is the measured one, an incompressible page
// stored whole and a fill pattern at the model's own figure.
func TestTierRatioFromMeasuredCompression(t *testing.T) {
	for _, tc := range []struct {
		c    *swaptier.Compression
		want float64
	}{
		{nil, 0},
		{&swaptier.Compression{StoredBytes: 64 << 20, RAMBytes: 37 << 20}, 64.0 / 37},
		{&swaptier.Compression{StoredBytes: 64 << 20, RAMBytes: 65 << 20}, 1},
		{&swaptier.Compression{StoredBytes: 64 << 20, RAMBytes: 0, SamePages: 16384}, sim.SameFilledRatio},
		{&swaptier.Compression{StoredBytes: 64 << 20, RAMBytes: 1 << 20}, sim.SameFilledRatio},
	} {
		if got := (Figures{TierCompression: tc.c}).TierRatio(); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%+v: %g, want %g", tc.c, got, tc.want)
		}
	}
}

// The figures line says how often each figure was measured: the median of
// the rounds with the paging CPU's spread, or one run and no spread.
func TestMachineFiguresRounds(t *testing.T) {
	f := Figures{RAMBytes: 24 << 30, CPUs: 2, SwapDevice: "/dev/vdb", ReadIOPS: 30e3, WriteIOPS: 30e3,
		PagingCPU: []sim.PagingCost{{Tasks: 2, SecondsPerPage: 55e-6}}, PagingCPUSpread: []Spread{{53e-6, 56e-6}},
		TouchRate: []sim.TouchRate{{BytesPerCore: 256 << 20, PagesPerSec: 24e6}}}
	for rounds, want := range map[int][]string{
		3: {"a worker a core, median of 3 runs", "/dev/vdb, median of 3 probes:", "2: 55.0 µs (53-56, median of 3 runs)"},
		1: {"a worker a core, one run", "/dev/vdb, one probe:", "2: 55.0 µs"},
	} {
		f.Rounds = rounds
		got := f.String() + ";"
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("rounds %d: %q lacks %q", rounds, got, w)
			}
		}
		if rounds == 1 && strings.Contains(got, "median") {
			t.Errorf("rounds 1: %q: want no median of one run", got)
		}
	}
	if (Options{}).rounds() != DefaultRounds || (Options{Rounds: 1}).rounds() != 1 {
		t.Errorf("rounds: want %d unless given", DefaultRounds)
	}
}
