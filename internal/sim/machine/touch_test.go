package machine

import (
	"math"
	"reflect"
	"testing"

	"github.com/headroom-dev/headroom/internal/sim"
)

// The probe's rounds: per block the median rate with every core busy, and
// the smallest block's median populate rate.
func TestSummarizeTouchRuns(t *testing.T) {
	runs := []touchRun{
		{64 << 20, 80e6, 200e3}, {256 << 20, 50e6, 0},
		{64 << 20, 70e6, 180e3}, {256 << 20, 40e6, 0},
		{64 << 20, 90e6, 220e3}, {256 << 20, 45e6, 0},
	}
	rates, populate := summarizeTouchRuns(runs)
	want := []sim.TouchRate{{BytesPerCore: 64 << 20, PagesPerSec: 80e6}, {BytesPerCore: 256 << 20, PagesPerSec: 45e6}}
	if !reflect.DeepEqual(rates, want) || populate != 200e3 {
		t.Errorf("got %v, populate %g; want %v, 200000", rates, populate, want)
	}
	if rates, _ := summarizeTouchRuns([]touchRun{{64 << 20, 0, 0}}); rates != nil {
		t.Errorf("no rate measured: %v, want none", rates)
	}
}

// Each round's turns are put on that round's curve and the blocks' worth
// is the median over rounds and counts; the rates are each count's
// median. Round two's curve sits lower: its 40M is one block there, where
// on round one's it would be two.
func TestSummarizeTurns(t *testing.T) {
	high := []sim.TouchRate{{BytesPerCore: 256 << 20, PagesPerSec: 50e6}, {BytesPerCore: 1 << 30, PagesPerSec: 30e6}}
	low := []sim.TouchRate{{BytesPerCore: 256 << 20, PagesPerSec: 40e6}, {BytesPerCore: 1 << 30, PagesPerSec: 24e6}}
	rounds := []turnRound{
		{Curve: high, PagesPerSec: map[int]float64{2: 40e6, 4: 40e6}},
		{Curve: low, PagesPerSec: map[int]float64{2: 40e6, 4: 40e6}},
		{Curve: high, PagesPerSec: map[int]float64{2: 45e6}},
	}
	turns, blocks := summarizeTurns(rounds, 256<<20)
	want := []TouchTurn{{2, 40e6}, {4, 40e6}}
	// Blocks by round: 2, 2; 1, 1; 1.41: the median 1.41 (2 on round
	// one's curve alone).
	if !reflect.DeepEqual(turns, want) || blocks != 1.41 {
		t.Errorf("got %v, %g blocks; want %v, 1.41", turns, blocks, want)
	}
	if _, blocks := summarizeTurns([]turnRound{{Curve: []sim.TouchRate{{BytesPerCore: 0, PagesPerSec: 50e6}}, PagesPerSec: map[int]float64{4: 40e6}}}, 256<<20); blocks != 0 {
		t.Errorf("one rate for a curve: %g blocks, want 0 (cannot tell)", blocks)
	}
}

// The probe's turns put on the one-worker-a-core curve: 40M pages/s a
// core from workers of 256 MiB taking turns is the curve's rate at
// 512 MiB, two blocks; the curve tells up to its largest size.
func TestTurnBlocksFrom(t *testing.T) {
	curve := []sim.TouchRate{{BytesPerCore: 64 << 20, PagesPerSec: 76e6}, {BytesPerCore: 256 << 20, PagesPerSec: 50e6}, {BytesPerCore: 1 << 30, PagesPerSec: 30e6}}
	for _, c := range []struct {
		rates    []sim.TouchRate
		turnRate float64
		want     float64
		ok       bool
	}{
		{curve, 40e6, 2, true},
		{curve, 50e6, 1, true},
		{curve, 55e6, 1, true}, // faster than one block: noise, the block
		{curve, 30e6, 4, true},
		{curve, 20e6, 4, true},    // slower than the largest size: the curve cannot tell more
		{curve, 45e6, 1.41, true}, // 362 MiB: half the way to 512 MiB in log2
		{[]sim.TouchRate{{BytesPerCore: 256 << 20, PagesPerSec: 50e6}, {BytesPerCore: 512 << 20, PagesPerSec: 40e6}}, 30e6, 2, true}, // a shorter curve tells less
		{curve, 0, 0, false},
		{[]sim.TouchRate{{BytesPerCore: 0, PagesPerSec: 50e6}}, 40e6, 0, false},                                                      // one rate: cannot tell
		{[]sim.TouchRate{{BytesPerCore: 64 << 20, PagesPerSec: 76e6}, {BytesPerCore: 256 << 20, PagesPerSec: 50e6}}, 40e6, 0, false}, // the curve ends at the block
		{[]sim.TouchRate{{BytesPerCore: 256 << 20, PagesPerSec: 30e6}, {BytesPerCore: 1 << 30, PagesPerSec: 50e6}}, 40e6, 0, false},  // not falling
		{nil, 40e6, 0, false},
	} {
		got, ok := turnBlocksFrom(c.rates, 256<<20, c.turnRate)
		if ok != c.ok || math.Abs(got-c.want) > 0.005 {
			t.Errorf("%v at %.0fM: %g, %v; want %g, %v", c.rates, c.turnRate/1e6, got, ok, c.want, c.ok)
		}
	}
}

// Whatever the curve and the turns' rate, the blocks are 1..4 (the
// curve's largest size over the block), and where
// the rate lies between one block's and the total's, the curve gives it
// back at the blocks' bytes (two or more workers a core).
func FuzzTurnBlocksFrom(f *testing.F) {
	f.Add(76e6, 50e6, 30e6, 40e6)
	f.Add(50e6, 50e6, 50e6, 40e6)
	f.Add(1e6, 2e6, 3e6, 2.5e6)
	f.Fuzz(func(t *testing.T, r64, r256, r1g, turn float64) {
		rates := []sim.TouchRate{{BytesPerCore: 64 << 20, PagesPerSec: r64}, {BytesPerCore: 256 << 20, PagesPerSec: r256}, {BytesPerCore: 1 << 30, PagesPerSec: r1g}}
		if !sim.TouchRatesValid(rates) || !(turn > 0) || math.IsInf(turn, 0) {
			return
		}
		blocks, ok := turnBlocksFrom(rates, 256<<20, turn)
		if !ok {
			return
		}
		if !(blocks >= 1 && blocks <= 4) {
			t.Fatalf("%v at %g: %g blocks", rates, turn, blocks)
		}
		if one, all := r256, r1g; turn < one && turn > all {
			got := sim.TouchRateAt(rates, sim.TouchBytes(256<<20, 2, blocks))
			if math.Abs(got-turn) > 0.02*(one-all) {
				t.Fatalf("%v at %g: %g blocks give %g", rates, turn, blocks, got)
			}
		}
	})
}
