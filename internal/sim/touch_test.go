package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
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

// A core's touch rate follows the memory each running VM keeps resident
// (its own page tables), however many share a core; with the turns
// correction, as over that many blocks from two VMs a core on.
func TestEngineTouchRateByResidentMemory(t *testing.T) {
	nd := smallNode()
	nd.CPUs, nd.TouchRate = 2, []TouchRate{{64 << 20, 76e6}, {256 << 20, 50e6}, {1 << 30, 30e6}}
	spec := oneVM(loadspec.ScanRandom)
	spec.Workload.SizeBytes = 256 << 20
	for _, c := range []struct {
		vms                  int
		resident, turnBlocks float64
		want                 float64 // pages/s a core
	}{{1, 1, 0, 50e6}, {2, 1, 0, 50e6}, {4, 1, 0, 50e6}, {16, 1, 0, 50e6}, {8, 0.5, 0, 63e6}, {8, 0.25, 0, 76e6},
		{2, 1, 2, 50e6}, {4, 1, 2, 40e6}, {16, 1, 2, 40e6}, {3, 1, 2, 45e6}, {4, 1, 4, 30e6}, {4, 1, 1, 50e6}} {
		nd.TouchTurnBlocks = c.turnBlocks
		n := newNode(nd, spec, c.vms, 0.001, 1)
		running(n, c.resident)
		n.capacityPages = 1e12
		n.tick(0, true)
		if math.Abs(n.touchRate-c.want) > 0.01*c.want {
			t.Errorf("%d VMs of 256 MiB, %g resident, turns as over %g blocks: %.1fM pages/s a core, want %.1fM", c.vms, c.resident, c.turnBlocks, n.touchRate/1e6, c.want/1e6)
		}
	}
	// In RAM, the four VMs' aggregate is the two cores at that rate.
	nd.TouchTurnBlocks = 0
	n := newNode(nd, spec, 4, 1, 1)
	running(n, 1)
	n.capacityPages = 1e12
	n.tick(0, true)
	var touches float64
	for _, v := range n.vms {
		touches += v.touches
	}
	if math.Abs(touches-100e6) > 0.01*100e6 {
		t.Errorf("4 VMs in RAM on 2 cores: %.1fM pages/s, want 100M", touches/1e6)
	}
}

// Workers taking turns on a core touch as over turnBlocks of their
// blocks from two a core on, whatever their number; one a core, or
// without the correction (0 or 1), as over their own block.
func TestTouchBytes(t *testing.T) {
	for _, c := range []struct{ block, perCore, turnBlocks, want float64 }{
		{256, 4, 2, 512}, {256, 2, 2, 512}, {256, 16, 2, 512}, {256, 4, 4, 1024}, {256, 4, 1, 256}, {256, 4, 0, 256},
		{256, 1.5, 4, 512}, {256, 1, 4, 256}, {256, 0.5, 4, 256}, {256, 4, 0.5, 256},
	} {
		if got := TouchBytes(c.block, c.perCore, c.turnBlocks); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("block %g, %g a core, turns as over %g blocks: %g, want %g", c.block, c.perCore, c.turnBlocks, got, c.want)
		}
	}
}
