package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
)

func TestParseTouchBesidePaging(t *testing.T) {
	for in, want := range map[string]*TouchBesidePaging{
		"0.72@17.7k":   {0.72, 17700},
		" 0.8 @ 15000": {0.8, 15000},
		"1.1@2M":       {1.1, 2e6}, // faster beside paging: a probe may read it
		"0":            {},
		"":             {},
		"0.72":         nil, // no rate
		"@17k":         nil,
		"0@17k":        nil, // a core that does not touch
		"-0.5@17k":     nil,
		"2.5@17k":      nil,
		"0.72@0":       nil,
		"0.72@-5k":     nil,
		"0.72@fast":    nil,
		"NaN@17k":      nil,
		"0.72@Inf":     nil,
	} {
		got, err := ParseTouchBesidePaging(in)
		switch {
		case want == nil:
			if err == nil || !strings.Contains(err.Error(), TouchBesidePagingForm) {
				t.Errorf("%q: %+v, %v; want an error naming %s", in, got, err, TouchBesidePagingForm)
			}
		case err != nil || got != *want:
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, *want)
		}
	}
}

func FuzzParseTouchBesidePaging(f *testing.F) {
	for _, s := range []string{"0.72@17.7k", "0", "", "1.1@2M", "0.5@1", "0.72"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseTouchBesidePaging(s)
		if err != nil {
			return
		}
		if !b.valid() {
			t.Fatalf("%q parsed to %+v, which the model refuses", s, b)
		}
		again, err := ParseTouchBesidePaging(b.String())
		if err != nil || again != b {
			t.Fatalf("%q: %+v, then %q: %+v, %v", s, b, b.String(), again, err)
		}
		if f := b.factor(b.PagesInPerSec / 2); !(f >= min(b.Share, 1)) || !(f <= max(b.Share, 1)) {
			t.Fatalf("%+v: factor %g at half its rate, outside [share, 1]", b, f)
		}
	})
}

// The slowdown grows with the paging: none without it, the measured share
// from the measured rate on, linear in between.
func TestTouchBesidePagingFactor(t *testing.T) {
	b := TouchBesidePaging{Share: 0.72, PagesInPerSec: 17700}
	for _, c := range []struct {
		b             TouchBesidePaging
		pagesInPerSec float64
		want          float64
	}{
		{b, 0, 1}, {b, 17700, 0.72}, {b, 8850, 0.86}, {b, 1e6, 0.72}, {TouchBesidePaging{}, 17700, 1},
		{TouchBesidePaging{Share: 1.1, PagesInPerSec: 1000}, 500, 1.05},
	} {
		if got := c.b.factor(c.pagesInPerSec); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v at %g pages in a second: %g, want %g", c.b, c.pagesInPerSec, got, c.want)
		}
	}
}

// Paging beside VMs in RAM costs them: the host's steal takes cores from
// the node (at most half of them), and a core touches slower. Four VMs in
// RAM on two cores, each a half core without either.
func TestPagingSlowsTheVMsInRAM(t *testing.T) {
	const tick = 0.25
	beside := TouchBesidePaging{Share: 0.72, PagesInPerSec: 17700}
	for _, c := range []struct {
		name                   string
		stealSeconds           float64
		beside                 TouchBesidePaging
		pagesInPerSec, wantPer float64 // a VM's pages/s a core's rate
	}{
		{"no paging", 20e-6, beside, 0, 0.5},
		{"steal", 20e-6, TouchBesidePaging{}, 10000, 0.45},
		{"steal capped at half the cores", 1e-3, TouchBesidePaging{}, 10000, 0.25},
		{"a core beside paging", 0, beside, 17700, 0.5 * 0.72},
		{"a core beside half that paging", 0, beside, 8850, 0.5 * 0.86},
		{"both", 20e-6, beside, 10000, 0.5 * (2 - 20e-6*10000) / 2 * (1 - 0.28*10000/17700)},
	} {
		nd := smallNode()
		nd.CPUs, nd.PagingStealSeconds, nd.TouchBesidePaging = 2, c.stealSeconds, c.beside
		n := newNode(nd, oneVM(memload.ScanRandom), 4, tick, 1)
		running(n, 1)
		n.capacityPages = 1e12
		n.devicePagesInPerSec = c.pagesInPerSec // the last tick's
		n.tick(0, true)
		want := c.wantPer * nd.TouchRate[0].PagesPerSec * tick
		for _, v := range n.vms {
			if math.Abs(v.touches-want) > 1e-6*want {
				t.Errorf("%s: %.0f touches in the tick, want %.0f", c.name, v.touches, want)
				break
			}
		}
	}
}

// A random scan that comes back to its pages many times a tick misses each
// page it has out once, where reclaim takes nothing from it; where reclaim
// takes its pages as fast as it brings them back, as on a plateau, its
// miss chance stays its share out.
func TestRandomScanBringsBackWhatItHasOut(t *testing.T) {
	const tick, hitSeconds, missSeconds, out = 0.25, 1e-7, 1e-7 + 100e-6, 1000.0
	pages := float64(1<<30) / PageBytes
	// Without reclaim: touches × hit time + misses × read time fill the
	// tick, misses = out × (1 − e^(−touches/pages)).
	drained := (tick - out*(missSeconds-hitSeconds)) / hitSeconds
	for range 50 {
		drained = (tick - out*-math.Expm1(-drained/pages)*(missSeconds-hitSeconds)) / hitSeconds
	}
	steadyRate := 1 / (hitSeconds + out/pages*(missSeconds-hitSeconds))
	for _, c := range []struct {
		name        string
		evictPerSec float64
		want        float64
	}{
		{"nothing taken", 0, drained},
		{"taken as fast as it faults", steadyRate * out / pages, steadyRate * tick},
	} {
		n := newNode(smallNode(), oneVM(memload.ScanRandom), 1, tick, 1)
		running(n, 1)
		v := n.vms[0]
		v.resident, v.disk = v.pages-out, out
		v.evicted = c.evictPerSec * tick // the last tick's, as tick reads it
		n.capacityPages = 1e12           // nothing evicted during the tick
		n.tick(0, true)
		if math.Abs(v.touches-c.want) > 1e-3*c.want {
			t.Errorf("%s: %.0f touches in the tick, want %.0f", c.name, v.touches, c.want)
		}
	}
}
