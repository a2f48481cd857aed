package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
)

func TestParseReadaheadUsed(t *testing.T) {
	for in, want := range map[string][]ReadaheadUse{
		"1":             {{1, 1}},
		"0.87":          {{1, 0.87}},
		"8:1, 16:0.87":  {{8, 1}, {16, 0.87}},
		"2:0.99,16:0.5": {{2, 0.99}, {16, 0.5}},
	} {
		got, err := ParseReadaheadUsed(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseReadaheadUsed(FormatReadaheadUsed(got)); err != nil || !reflect.DeepEqual(again, want) {
			t.Errorf("%q formatted as %q: %+v, %v", in, FormatReadaheadUsed(got), again, err)
		}
	}
	for _, in := range []string{"", "0", "1.2", "-0.5", "0.001", "half", "8:1,4:0.9", "0:0.9", "8:", "8:1,16", "NaN", "Inf:0.9"} {
		if got, err := ParseReadaheadUsed(in); err == nil || !strings.Contains(err.Error(), ReadaheadUsedForm) || !strings.Contains(err.Error(), "--readahead-used") {
			t.Errorf("%q: %+v, %v; want an error naming the flag and its form", in, got, err)
		}
	}
}

// The used share follows the tasks faulting, in log2 of their count,
// the nearest count's beyond; all used where none is given.
func TestReadaheadUsedFollowsTheFaultingTasks(t *testing.T) {
	measured := []ReadaheadUse{{2, 1}, {8, 1}, {16, 0.8}}
	for tasks, want := range map[float64]float64{0: 1, 2: 1, 8: 1, 11.3137: 0.9, 16: 0.8, 64: 0.8} {
		if got := readaheadUsedAt(measured, tasks); math.Abs(got-want) > 1e-4 {
			t.Errorf("%g tasks: %g used, want %g", tasks, got, want)
		}
	}
	if got := readaheadUsedAt(nil, 16); got != 1 {
		t.Errorf("none given: %g, want 1", got)
	}
}

// A device at its read limit reads as many pages as before when part of
// them go unused, and the scans touch only the used share of them (eight
// pages a read at 10k reads a second: 80k pages in, 64k of them touched
// at 0.8 used). Bound by the CPU instead, each touch that misses costs
// its pages' CPU: at half used a missing touch brings two pages in.
func TestUnusedReadahead(t *testing.T) {
	deviceBound := func(used []ReadaheadUse) *node {
		nd := smallNode()
		nd.ReadaheadUsed = used
		spec := oneVM(memload.ScanSeq)
		spec.Process = true
		n := newNode(nd, spec, 50, 1, 1)
		running(n, 0.5)
		n.capacityPages = 1e12
		return n
	}
	touchedMisses := func(n *node) (in, missed float64) {
		n.tick(0, true)
		for _, v := range n.vms {
			missed += v.rate * (1 - n.hit(v))
		}
		return n.swapIns, missed
	}
	for _, c := range []struct {
		used             []ReadaheadUse
		wantIn, wantMiss float64
	}{
		{nil, 80000, 80000},
		{[]ReadaheadUse{{1, 0.8}}, 80000, 64000},
		{[]ReadaheadUse{{2, 1}, {200, 0.5}}, 80000, 80000 * (1 - 0.5*math.Log2(50.0/2)/math.Log2(100))},
	} {
		in, missed := touchedMisses(deviceBound(c.used))
		if math.Abs(in-c.wantIn) > 0.01*c.wantIn || math.Abs(missed-c.wantMiss) > 0.01*c.wantMiss {
			t.Errorf("used %+v: %.0f pages in, %.0f touches that missed a second; want %.0f and %.0f", c.used, in, missed, c.wantIn, c.wantMiss)
		}
	}

	// One VM on a fast device: its touches are bound by its CPU.
	cpuBound := func(used float64) (touchSeconds, cpuSeconds float64) {
		nd := smallNode()
		nd.PagingCPU = []PagingCost{{1, 100e-6}}
		nd.Swap.ReadIOPS, nd.Swap.WriteIOPS, nd.Swap.LatencySeconds = 1e9, 1e9, 1e-9
		nd.ReadaheadUsed = []ReadaheadUse{{1, used}}
		spec := oneVM(memload.ScanSeq)
		spec.Process = true
		n := newNode(nd, spec, 1, 1, 1)
		running(n, 0.5)
		n.setIOFigures(1)
		n.pagingCPU = 100e-6
		total, _, cpu := n.touchTimeMissing(n.vms[0], 1, 1e-9, 1)
		return total, cpu
	}
	_, all := cpuBound(1)
	_, half := cpuBound(0.5)
	touch := 1 / smallNode().TouchRate[0].PagesPerSec
	if want := touch + 200e-6; math.Abs(half-want) > 1e-9 || math.Abs(all-(touch+100e-6)) > 1e-9 {
		t.Errorf("CPU of a missing touch: %g s all used, %g s half used; want %g and %g", all, half, touch+100e-6, want)
	}
}
