package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
)

func TestParseTouchRate(t *testing.T) {
	for in, want := range map[string][]TouchRate{
		"20M":                         {{0, 20e6}},
		"1.69e+07":                    {{0, 16.9e6}}, // a scenario's YAML number, printed
		"16900000":                    {{0, 16.9e6}},
		"64Mi:75M, 256Mi:50M,1Gi:33M": {{64 << 20, 75e6}, {256 << 20, 50e6}, {1 << 30, 33e6}},
		"268435456:5e+07":             {{256 << 20, 50e6}},
		"":                            nil,
		"0":                           nil, // no rate is no node
		"-5M":                         nil,
		"256Mi:50M,64Mi:75M":          nil, // not ascending
		"256Mi:50M,256Mi:40M":         nil,
		"0:50M":                       nil, // no memory touched in a list
		"256Mi:0":                     nil,
		"256Mi":                       nil,
		"256Mi:":                      nil,
		"big:50M":                     nil,
		"256Mi:Inf":                   nil,
		"256Mi:NaN":                   nil,
	} {
		got, err := ParseTouchRate(in)
		if want == nil {
			if err == nil || !strings.Contains(err.Error(), TouchRateForm) {
				t.Errorf("%q: %+v, %v; want an error naming %s", in, got, err, TouchRateForm)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// What ParseTouchRate accepts, FormatTouchRate writes back in a form it
// accepts again, unchanged, and the model takes it.
func FuzzParseTouchRate(f *testing.F) {
	for _, s := range []string{"20M", "1.69e+07", "64Mi:75M,256Mi:50M,1Gi:33M", "256Mi:50M,64Mi:75M", "1:1e300"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseTouchRate(s)
		if err != nil {
			return
		}
		if !touchRatesValid(rs) {
			t.Fatalf("%q parsed to %+v, which the model refuses", s, rs)
		}
		roundTripExact(t, s, rs, ParseTouchRate, FormatTouchRate)
	})
}

func TestParseTouchAloneSpeedup(t *testing.T) {
	for in, want := range map[string][]AloneSpeedup{
		"1.1":                     {{0, 1.1}},
		"0.96":                    {{0, 0.96}}, // alone slower: measured here over 256 MiB
		"0":                       {},          // none
		" 0 ":                     {},
		"64Mi:1.1, 256Mi:1,1Gi:1": {{64 << 20, 1.1}, {256 << 20, 1}, {1 << 30, 1}},
		"268435456:0.98":          {{256 << 20, 0.98}},
		"":                        nil,
		"0.2":                     nil, // beyond a quarter
		"4.5":                     nil,
		"-1":                      nil,
		"256Mi:1,64Mi:1.1":        nil, // not ascending
		"256Mi:1,256Mi:1.1":       nil,
		"0:1.1":                   nil, // no memory touched in a list
		"256Mi:0":                 nil,
		"256Mi":                   nil,
		"256Mi:1M":                nil,
		"big:1.1":                 nil,
		"256Mi:NaN":               nil,
		"Inf":                     nil,
	} {
		got, err := ParseTouchAloneSpeedup(in)
		switch {
		case want == nil:
			if err == nil || !strings.Contains(err.Error(), TouchAloneSpeedupForm) {
				t.Errorf("%q: %+v, %v; want an error naming %s", in, got, err, TouchAloneSpeedupForm)
			}
		case len(want) == 0:
			if err != nil || got != nil {
				t.Errorf("%q: %+v, %v; want none", in, got, err)
			}
		case err != nil || !reflect.DeepEqual(got, want):
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// What ParseTouchAloneSpeedup accepts, FormatTouchAloneSpeedup writes
// back in a form it accepts again, unchanged, and the model takes it.
func FuzzParseTouchAloneSpeedup(f *testing.F) {
	for _, s := range []string{"1.1", "0", "0.96", "64Mi:1.1,256Mi:1,1Gi:1", "256Mi:1,64Mi:1.1", "1:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ss, err := ParseTouchAloneSpeedup(s)
		if err != nil {
			return
		}
		if !aloneSpeedupsValid(ss) {
			t.Fatalf("%q parsed to %+v, which the model refuses", s, ss)
		}
		roundTripExact(t, s, ss, ParseTouchAloneSpeedup, FormatTouchAloneSpeedup)
	})
}

// A core alone gains by the memory it cycles through: the measured sizes'
// factors, linear in log2 between them, the nearest beyond; none given, 1.
func TestAloneSpeedupAt(t *testing.T) {
	bySize := []AloneSpeedup{{64 << 20, 1.1}, {256 << 20, 0.98}, {1 << 30, 1.02}}
	for _, c := range []struct {
		ss          []AloneSpeedup
		bytes, want float64
	}{
		{bySize, 64 << 20, 1.1}, {bySize, 256 << 20, 0.98}, {bySize, 128 << 20, 1.04}, {bySize, 512 << 20, 1},
		{bySize, 16 << 20, 1.1}, {bySize, 4 << 30, 1.02}, {[]AloneSpeedup{{0, 1.2}}, 1 << 30, 1.2}, {nil, 256 << 20, 1},
	} {
		if got := aloneSpeedupAt(c.ss, c.bytes); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%+v at %.0f B: %g, want %g", c.ss, c.bytes, got, c.want)
		}
	}
}

// A core's rate follows the memory it cycles through: linear in log2 of
// the bytes between measured sizes, the nearest size's rate beyond them;
// one rate holds for any.
func TestTouchRateFollowsTheMemoryTouched(t *testing.T) {
	measured := []TouchRate{{64 << 20, 76e6}, {256 << 20, 50e6}, {1 << 30, 30e6}}
	for bytes, want := range map[float64]float64{0: 76e6, 32 << 20: 76e6, 64 << 20: 76e6, 128 << 20: 63e6, 256 << 20: 50e6,
		512 << 20: 40e6, 1 << 30: 30e6, 16 << 30: 30e6} {
		if got := touchRateAt(measured, bytes); math.Abs(got-want) > 1 {
			t.Errorf("%.0f MiB a core: %.1fM pages/s, want %.1fM", bytes/(1<<20), got/1e6, want/1e6)
		}
	}
	if got := touchRateAt([]TouchRate{{0, 20e6}}, 1<<40); got != 20e6 {
		t.Errorf("one rate at 1 TiB: %g, want it", got)
	}
}

// In the engine the memory is the running VMs' resident workload pages
// per core they run on: one VM of 256 MiB on a core, or eight of which
// half is on the device (256 MiB a core resident, four a core). VMs
// taking turns on a core touch as over TouchTurnBlocks of their blocks:
// four on two cores at 2 as over 512 MiB a core, and eight, or sixteen,
// the same; three on two, half the way in log2 (362 MiB). Populating VMs
// do not count.
func TestEngineTouchRateByResidentMemoryPerCore(t *testing.T) {
	nd := smallNode()
	nd.CPUs, nd.TouchRate = 2, []TouchRate{{64 << 20, 76e6}, {256 << 20, 50e6}, {1 << 30, 30e6}}
	spec := oneVM(memload.ScanRandom)
	spec.Workload.SizeBytes = 256 << 20
	for _, c := range []struct {
		vms                  int
		resident, turnBlocks float64
		want                 float64 // pages/s a core
	}{{1, 1, 2, 50e6}, {2, 1, 2, 50e6}, {4, 1, 2, 40e6}, {8, 1, 2, 40e6}, {16, 1, 2, 40e6}, {8, 0.5, 2, 50e6},
		{3, 1, 2, 45e6}, {4, 1, 4, 30e6}, {8, 1, 4, 30e6}, {4, 1, 1, 50e6}, {8, 1, 1, 50e6}, {4, 1, 0, 40e6}, {1, 1, 4, 50e6}} {
		nd.TouchTurnBlocks = c.turnBlocks
		n := newNode(nd, spec, c.vms, 0.001, 1)
		running(n, c.resident)
		n.capacityPages = 1e12
		n.tick(0, true)
		if math.Abs(n.touchRate-c.want) > 1 {
			t.Errorf("%d VMs of 256 MiB, %g resident, turns as over %g blocks: %.1fM pages/s a core, want %.1fM", c.vms, c.resident, c.turnBlocks, n.touchRate/1e6, c.want/1e6)
		}
	}
	nd.TouchTurnBlocks = 2
	n := newNode(nd, spec, 4, 0.001, 1)
	running(n, 1)
	n.vms[0].phase, n.vms[1].phase = phasePopulating, phasePopulating
	n.capacityPages = 1e12
	n.tick(0, true)
	if math.Abs(n.touchRate-50e6) > 1 {
		t.Errorf("2 running and 2 populating VMs of 256 MiB: %.1fM pages/s a core, want 50M (256 MiB a core)", n.touchRate/1e6)
	}
	// In RAM, the four VMs' aggregate is the two cores at that rate.
	n = newNode(nd, spec, 4, 1, 1)
	running(n, 1)
	n.capacityPages = 1e12
	n.tick(0, true)
	var touches float64
	for _, v := range n.vms {
		touches += v.touches
	}
	if math.Abs(touches-80e6) > 0.01*80e6 {
		t.Errorf("4 VMs in RAM on 2 cores: %.1fM pages/s, want 80M", touches/1e6)
	}
}

// A core alone touches faster by the speedup; with every core busy, at
// the rate measured so; in between, in proportion to the idle cores.
func TestAloneSpeedup(t *testing.T) {
	for _, c := range []struct{ speedup, busy, cpus, want float64 }{
		{1.2, 1, 2, 1.2}, {1.2, 2, 2, 1}, {1.2, 5, 2, 1}, {1.2, 0, 2, 1.2},
		{1.3, 1, 4, 1.3}, {1.3, 2, 4, 1.2}, {1.3, 3, 4, 1.1}, {1.3, 4, 4, 1}, {1.3, 2.5, 4, 1.15},
		{1.2, 1, 1, 1}, {0, 1, 2, 1}, {1, 1, 2, 1}, {0.8, 1, 2, 0.8}, {0.8, 2, 2, 1}, {0.9, 2, 4, 0.9 + 0.1/3},
	} {
		if got := aloneSpeedup(c.speedup, c.busy, c.cpus); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("speedup %g, %g of %g cores busy: %g, want %g", c.speedup, c.busy, c.cpus, got, c.want)
		}
	}
}

// One VM running on two cores touches at the speedup of its block; two
// at the rate measured with both busy; a populating VM keeps its core busy.
func TestEngineTouchRateAlone(t *testing.T) {
	nd := smallNode()
	// oneVM's block is 1 GiB: the factor of 256 MiB is not its.
	nd.CPUs, nd.TouchRate, nd.TouchAloneSpeedup = 2, []TouchRate{{0, 50e6}}, []AloneSpeedup{{256 << 20, 0.9}, {1 << 30, 1.2}}
	spec := oneVM(memload.ScanRandom)
	for _, c := range []struct {
		vms, populating int
		want            float64
	}{{1, 0, 60e6}, {2, 0, 50e6}, {2, 1, 50e6}} {
		n := newNode(nd, spec, c.vms, 0.001, 1)
		running(n, 1)
		for _, v := range n.vms[:c.populating] {
			v.phase = phasePopulating
		}
		n.capacityPages = 1e12
		n.tick(0, true)
		if math.Abs(n.touchRate-c.want) > 1 {
			t.Errorf("%d VMs, %d populating: %.1fM pages/s a core, want %.1fM", c.vms, c.populating, n.touchRate/1e6, c.want/1e6)
		}
	}
}

// The probe's rounds: per block the median rate with every core busy and
// the median alone ÷ all ratio (below 1 where alone was slower), and the
// smallest block's median populate rate.
func TestSummarizeTouchRuns(t *testing.T) {
	runs := []touchRun{
		{64 << 20, 80e6, 96e6, 200e3}, {256 << 20, 50e6, 48e6, 0},
		{64 << 20, 70e6, 70e6, 180e3}, {256 << 20, 40e6, 40e6, 0},
		{64 << 20, 90e6, 99e6, 220e3}, {256 << 20, 45e6, 45e6 * 0.97, 0},
	}
	rates, speedups, populate := summarizeTouchRuns(runs)
	want := []TouchRate{{64 << 20, 80e6}, {256 << 20, 45e6}}
	wantSpeedups := []AloneSpeedup{{64 << 20, 1.1}, {256 << 20, 0.97}}
	if !reflect.DeepEqual(rates, want) || !reflect.DeepEqual(speedups, wantSpeedups) || populate != 200e3 {
		t.Errorf("got %v, speedups %v, populate %g; want %v, %v, 200000", rates, speedups, populate, want, wantSpeedups)
	}
	// A wild ratio is held to the model's bounds; one core: none measured.
	if _, speedups, _ := summarizeTouchRuns([]touchRun{{64 << 20, 80e6, 800e6, 0}}); !reflect.DeepEqual(speedups, []AloneSpeedup{{64 << 20, 4}}) {
		t.Errorf("alone 10× faster: speedups %v, want 4 (the bound)", speedups)
	}
	if _, speedups, _ := summarizeTouchRuns([]touchRun{{64 << 20, 80e6, 0, 0}}); speedups != nil {
		t.Errorf("nothing alone: speedups %v, want none", speedups)
	}
}

// Workers taking turns on a core touch as over their block × turnBlocks
// from two a core on, the block alone at one, and between in proportion
// in log2.
func TestTouchBytes(t *testing.T) {
	for _, c := range []struct{ block, perCore, turnBlocks, want float64 }{
		{256, 4, 2, 512}, {256, 2, 2, 512}, {256, 16, 2, 512}, {256, 4, 4, 1024}, {256, 4, 1, 256},
		{256, 1.5, 4, 512}, {256, 1, 4, 256}, {256, 0.5, 4, 256}, {256, 4, 0.5, 256},
	} {
		if got := touchBytes(c.block, c.perCore, c.turnBlocks); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("block %g, %g a core, turns as over %g blocks: %g, want %g", c.block, c.perCore, c.turnBlocks, got, c.want)
		}
	}
}

// The probe's turns put on the one-worker-a-core curve: 40M pages/s a
// core from workers of 256 MiB taking turns is the curve's rate at
// 512 MiB, two blocks; the curve tells up to its largest size.
func TestTurnBlocksFrom(t *testing.T) {
	curve := []TouchRate{{64 << 20, 76e6}, {256 << 20, 50e6}, {1 << 30, 30e6}}
	for _, c := range []struct {
		rates    []TouchRate
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
		{[]TouchRate{{256 << 20, 50e6}, {512 << 20, 40e6}}, 30e6, 2, true}, // a shorter curve tells less
		{curve, 0, 0, false},
		{[]TouchRate{{0, 50e6}}, 40e6, 0, false},                           // one rate: cannot tell
		{[]TouchRate{{64 << 20, 76e6}, {256 << 20, 50e6}}, 40e6, 0, false}, // the curve ends at the block
		{[]TouchRate{{256 << 20, 30e6}, {1 << 30, 50e6}}, 40e6, 0, false},  // not falling
		{nil, 40e6, 0, false},
	} {
		got, ok := turnBlocksFrom(c.rates, 256<<20, c.turnRate)
		if ok != c.ok || math.Abs(got-c.want) > 0.005 {
			t.Errorf("%v at %.0fM: %g, %v; want %g, %v", c.rates, c.turnRate/1e6, got, ok, c.want, c.ok)
		}
	}
}

// Each round's turns are put on that round's curve and the blocks' worth
// is the median over rounds and counts; the rates are each count's
// median. Round two's curve sits lower: its 40M is one block there, where
// on round one's it would be two.
func TestSummarizeTurns(t *testing.T) {
	high := []TouchRate{{256 << 20, 50e6}, {1 << 30, 30e6}}
	low := []TouchRate{{256 << 20, 40e6}, {1 << 30, 24e6}}
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
	if _, blocks := summarizeTurns([]turnRound{{Curve: []TouchRate{{0, 50e6}}, PagesPerSec: map[int]float64{4: 40e6}}}, 256<<20); blocks != 0 {
		t.Errorf("one rate for a curve: %g blocks, want 0 (cannot tell)", blocks)
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
		rates := []TouchRate{{64 << 20, r64}, {256 << 20, r256}, {1 << 30, r1g}}
		if !touchRatesValid(rates) || !(turn > 0) || math.IsInf(turn, 0) {
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
			got := touchRateAt(rates, touchBytes(256<<20, 2, blocks))
			if math.Abs(got-turn) > 0.02*(one-all) {
				t.Fatalf("%v at %g: %g blocks give %g", rates, turn, blocks, got)
			}
		}
	})
}
