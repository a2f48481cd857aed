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
		if !TouchRatesValid(rs) {
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
		if got := TouchRateAt(measured, bytes); math.Abs(got-want) > 1 {
			t.Errorf("%.0f MiB a core: %.1fM pages/s, want %.1fM", bytes/(1<<20), got/1e6, want/1e6)
		}
	}
	if got := TouchRateAt([]TouchRate{{0, 20e6}}, 1<<40); got != 20e6 {
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

// Workers taking turns on a core touch as over their block × turnBlocks
// from two a core on, the block alone at one, and between in proportion
// in log2.
func TestTouchBytes(t *testing.T) {
	for _, c := range []struct{ block, perCore, turnBlocks, want float64 }{
		{256, 4, 2, 512}, {256, 2, 2, 512}, {256, 16, 2, 512}, {256, 4, 4, 1024}, {256, 4, 1, 256},
		{256, 1.5, 4, 512}, {256, 1, 4, 256}, {256, 0.5, 4, 256}, {256, 4, 0.5, 256},
	} {
		if got := TouchBytes(c.block, c.perCore, c.turnBlocks); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("block %g, %g a core, turns as over %g blocks: %g, want %g", c.block, c.perCore, c.turnBlocks, got, c.want)
		}
	}
}
