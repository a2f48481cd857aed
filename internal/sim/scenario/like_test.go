package scenario

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

// densityRun is run.json as density writes it (its own AsMap, through
// JSON as a reader gets it).
func densityRun(t *testing.T, p density.Params) *results.Run {
	t.Helper()
	run := results.Run{Kind: "density", Params: p.AsMap(), Machine: results.Machine{CPUs: 2},
		Node: results.Node{MemoryBytes: p.NodeMemoryBytes, SwapBytes: 3 << 30}}
	b, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	var back results.Run
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// --like takes a density run's ramp, workload, node and backend: the
// model of a cgroup run is processes with no guest.
func TestLikeADensityRun(t *testing.T) {
	p := density.Params{Backend: "cgroup", Deployments: []int{1, 2, 3, 4}, VMMemoryBytes: 512 << 20, MemorySizeBytes: 256 << 20,
		Scan: memload.ScanRandom, WriteFraction: 1, Content: memload.Content{Kind: memload.ContentRandom}, WorkloadRuntime: 20 * time.Second,
		OvercommitPercent: 100, OverheadBytes: 16 << 20, NodeMemoryBytes: 1 << 30, Seed: 7, Agent: true}
	m, unsaid, err := Like(densityRun(t, p))
	if err != nil || len(unsaid) != 0 {
		t.Fatal(err, unsaid)
	}
	v := Default()
	fl := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	v.Register(fl)
	for name, value := range m {
		if err := fl.Set(name, value); err != nil {
			t.Fatalf("--%s %s: %v", name, value, err)
		}
	}
	sp, err := v.Params(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{1, 2, 3, 4}
	if len(sp.Deployments) != 4 || sp.Deployments[3] != want[3] || sp.Node.RAMBytes != 1<<30 || sp.Node.SystemReserveBytes != 0 ||
		sp.Node.Swap.SizeBytes != 3<<30 || sp.Node.CPUs != 2 || !sp.VM.Process || sp.VM.GuestOverheadBytes != 0 ||
		sp.VM.HostOverheadBytes != processOverheadBytes || sp.VM.Workload.Scan != memload.ScanRandom || sp.RuntimeSeconds != 20 ||
		sp.Seed != 7 || sp.Agent == nil || sp.Agent.Policy.MaxAverageSwapInPagesPerSecond != 0 {
		t.Errorf("the model of the run: %+v", sp)
	}
	// It admits what the run admitted: the run's request, not its
	// workers' 3 MiB beside their memory.
	if sp.VM.RequestBytes != p.RequestBytes() {
		t.Errorf("the model requests %d B a worker, the run %d B", sp.VM.RequestBytes, p.RequestBytes())
	}
	// A libvirt run of headroom's image is a VM with that image's guest.
	lv := p
	lv.Backend, lv.OverheadBytes = "libvirt", 64<<20
	m, unsaid, err = Like(densityRun(t, lv))
	if err != nil || len(unsaid) != 0 {
		t.Fatal(err, unsaid)
	}
	if m["worker-kind"] != "vm" || m["guest-overhead"] != fmt.Sprint(headroomGuestOverheadBytes) || m["overhead"] != fmt.Sprint(64<<20) ||
		m["request-overhead"] != fmt.Sprint(64<<20) {
		t.Errorf("a libvirt run: %v", m)
	}
	// What a run does not say is the user's to give: named, and left out
	// of the values.
	for _, c := range []struct {
		p     func(*density.Params)
		flags []string
		why   string
	}{
		{func(p *density.Params) { p.Backend, p.LibvirtTemplate = "libvirt", "/etc/mine.xml" }, []string{"guest-overhead", "overhead"}, "template /etc/mine.xml"},
		{func(p *density.Params) { p.Backend = "kubevirt" }, []string{"guest-overhead", "overhead"}, "a kubevirt run"},
		{func(p *density.Params) { p.Backend = "other" }, []string{"worker-kind", "guest-overhead", "overhead"}, `backend "other"`},
		{func(p *density.Params) { p.Zram = &tierspec.ZramSpec{SizeBytes: 1 << 30} }, []string{"swap-tier"}, "compressed tier"},
	} {
		q := p
		c.p(&q)
		m, unsaid, err := Like(densityRun(t, q))
		if err != nil || len(unsaid) != 1 || fmt.Sprint(unsaid[0].Flags) != fmt.Sprint(c.flags) || !strings.Contains(unsaid[0].Why, c.why) {
			t.Errorf("want %v unsaid because of %s, got %+v (%v)", c.flags, c.why, unsaid, err)
			continue
		}
		for _, name := range c.flags {
			if v, ok := m[name]; ok {
				t.Errorf("%s: --%s %s in the values, the user's to give", c.why, name, v)
			}
		}
	}
	run := densityRun(t, p)
	run.Kind = "sim"
	if _, _, err := Like(run); err == nil {
		t.Error("a simulated run: no error")
	}
}
