//go:build system

package density

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/libvirt/libvirttest"
	"github.com/headroom-dev/headroom/internal/results"
)

// libvirtNode is the node: domains of 448 MiB, each touching
// 320 MiB, on a 1.5 GiB partition with 2 GiB of swap, so that the fourth
// domain pushes the node into swap.
func libvirtNode(t *testing.T) (Params, *golibvirt.Libvirt) {
	libvirttest.Start(t)
	l := libvirttest.Connect(t)
	p := qemuNode(t)
	p.Backend, p.LibvirtURI, p.LibvirtTBCacheBytes = "libvirt", libvirttest.URI, DefaultLibvirtTBCacheBytes
	p.Deployments, p.VMMemoryBytes, p.MemorySizeBytes = []int{1, 2, 3, 4}, 448<<20, 320<<20
	return p, l
}

// assertNoDomainsLeft checks that the run left no domain, partition or
// file of its own behind, and that a domain it did not create (keep) is
// still defined.
func assertNoDomainsLeft(t *testing.T, l *golibvirt.Libvirt, keep string) {
	t.Helper()
	prefix := NodeCgroupName(os.Getpid())
	domains, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, d := range domains {
		switch {
		case d.Name == keep:
			kept = true
		case strings.HasPrefix(d.Name, prefix+"-"):
			t.Errorf("domain %s left", d.Name)
		}
	}
	if keep != "" && !kept {
		t.Errorf("the run removed domain %s, which was not its own", keep)
	}
	mounts, err := libvirt.CgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "machine", prefix+".partition")); err == nil {
			t.Errorf("partition %s left in %s", prefix, m)
		}
	}
	for _, dir := range []string{"/var/lib/libvirt/boot", "/var/lib/libvirt/qemu"} {
		if _, err := os.Stat(filepath.Join(dir, prefix)); err == nil {
			t.Errorf("%s/%s left", dir, prefix)
		}
	}
}

// The ramp of libvirt domains, with the agent following them through
// libvirt, shows the regimes; every step records the domains' phases
// from define to ready, and the end leaves nothing behind.
func TestSystemLibvirtRampShowsRegimes(t *testing.T) {
	p, l := libvirtNode(t)
	p.Agent = true
	dir, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	assertNoDomainsLeft(t, l, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Steps) != 4 || run.StopReason != "completed" {
		t.Fatalf("%d steps, stop reason %q", len(run.Steps), run.StopReason)
	}
	for _, s := range run.Steps {
		if s.Failed || s.OOMKills > 0 || s.Evictions > 0 {
			t.Errorf("step %d: failed %v %s, %d OOM kills, %d evictions", s.Index, s.Failed, s.FailReason, s.OOMKills, s.Evictions)
		}
		var phases []string
		for _, q := range s.CreatePhases {
			if q.P50Seconds <= 0 || q.P99Seconds < q.P50Seconds {
				t.Errorf("step %d: phase %+v", s.Index, q)
			}
			phases = append(phases, q.Phase)
		}
		if got := strings.Join(phases, " "); got != "defined qemu_started booted command_started ready" {
			t.Errorf("step %d: phases %s", s.Index, got)
		}
		for _, w := range s.PerWorker {
			if w.VM == nil || w.VM.BootCPUSeconds <= 0 || w.VM.Host == nil || w.VM.Host.OverheadBytes == 0 || w.VM.Host.Guest == nil {
				t.Errorf("step %d %s: VM result %+v", s.Index, w.Name, w.VM)
			}
		}
	}
	reg := run.Regimes()
	last := run.Steps[len(run.Steps)-1]
	if reg.KneeWorkers < 1 || reg.KneeWorkers >= 4 || last.SwapInPagesPerSec <= 0 || last.AggregatePagesPerSec >= reg.PeakPagesPerSec {
		t.Errorf("regimes %+v; last step %.0f pages/s, %.0f swap-ins/s", reg, last.AggregatePagesPerSec, last.SwapInPagesPerSec)
	}
	// The agent found every domain through libvirt and gave it an allowance.
	agent, _ := os.ReadFile(filepath.Join(dir, results.AgentFile))
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("%s-w%d", NodeCgroupName(os.Getpid()), i)
		if !strings.Contains(string(agent), `"action":"set_swap","workload":"`+name+`"`) {
			t.Errorf("the agent gave domain %s no allowance", name)
		}
	}
	t.Logf("regimes: peak %.0f pages/s at %d domains, last in RAM %d; last step %.0f pages/s, %.0f swap-ins/s",
		reg.PeakPagesPerSec, reg.PeakWorkers, reg.KneeWorkers, last.AggregatePagesPerSec, last.SwapInPagesPerSec)
}

// A domain named as the run's would be, but not the run's, stops the run
// and is left as it was.
func TestSystemLibvirtRefusesAForeignDomain(t *testing.T) {
	p, l := libvirtNode(t)
	p.Deployments = []int{1}
	img := libvirttest.GuestImage(t)
	foreign := libvirttest.Define(t, l, libvirt.GuestSpec{Name: NodeCgroupName(os.Getpid()) + "-w1", MemoryBytes: 256 << 20,
		Kernel: img.Kernel, Initramfs: img.Initramfs, Command: []string{"load"}})
	_, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	assertNoDomainsLeft(t, l, foreign.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Steps) != 1 || !run.Steps[0].Failed || !strings.Contains(run.Steps[0].FailReason, "not this run's") {
		t.Fatalf("steps %+v", run.Steps)
	}
}

// Ctrl-C mid-step destroys and undefines the step's domains and keeps
// what was measured.
func TestSystemLibvirtInterruptLeavesNothing(t *testing.T) {
	p, l := libvirtNode(t)
	p.Deployments, p.WorkloadRuntime = []int{2, 3}, 30*time.Second
	ctx, cancel := context.WithCancelCause(context.Background())
	_, run, err := Run(ctx, p, interruptOnceMeasured(t, cancel))
	assertRestored(t)
	assertNoDomainsLeft(t, l, "")
	if err != nil {
		t.Fatal(err)
	}
	if !run.Interrupted || len(run.Steps) != 1 {
		t.Fatalf("interrupted %v, %d steps", run.Interrupted, len(run.Steps))
	}
	for _, w := range run.Steps[0].PerWorker {
		if w.PagesPerSec <= 0 {
			t.Errorf("the interrupted step's measurements were lost: %+v", w)
		}
	}
}

// A template of the user's own (here a pc machine, not headroom's q35,
// with headroom's guest kernel) runs the same workload.
func TestSystemLibvirtTemplate(t *testing.T) {
	p, l := libvirtNode(t)
	img := libvirttest.GuestImage(t)
	p.Deployments, p.WorkloadRuntime, p.Image = []int{1}, 3*time.Second, nil
	p.LibvirtTemplate = fmt.Sprintf(`<domain type='qemu'><name>golden</name><memory unit='GiB'>1</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>%s</kernel><initrd>%s</initrd></os>
  <on_poweroff>destroy</on_poweroff></domain>`, img.Kernel, img.Initramfs)
	if err := libvirt.CheckTemplate(p.LibvirtTemplate); err != nil {
		t.Fatal(err)
	}
	seen := ""
	rep := testReporter{t: t, onStatus: func(_, workers, ready int, _ time.Duration) {
		if ready == workers && seen == "" {
			d, err := l.DomainLookupByName(NodeCgroupName(os.Getpid()) + "-w1")
			if err == nil {
				seen, _ = l.DomainGetXMLDesc(d, 0)
			}
		}
	}}
	_, run, err := Run(context.Background(), p, rep)
	assertRestored(t)
	assertNoDomainsLeft(t, l, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Steps) != 1 || run.Steps[0].Failed || run.Steps[0].AggregatePagesPerSec <= 0 {
		t.Fatalf("steps %+v", run.Steps)
	}
	if !strings.Contains(seen, "machine='pc") || !strings.Contains(seen, "<partition>/machine/"+NodeCgroupName(os.Getpid())) {
		t.Errorf("the running domain was not the template's in the run's partition:\n%s", seen)
	}
}
