//go:build system

package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// A scope that swaps into zram is charged for zram's RAM: its pages sit
// compressed in RAM outside its own cgroup.
func TestSystemZramRAMCountsAgainstTheScope(t *testing.T) {
	testenv.RequireRoot(t)
	state := filepath.Join(t.TempDir(), "swap.json")
	t.Cleanup(func() {
		if s, err := swaptier.LoadState(state); err == nil && s != nil {
			if err := s.Down(); err != nil {
				t.Errorf("restore: %v", err)
			}
		}
	})
	if _, err := swaptier.Up(tierspec.Spec{Zram: &tierspec.ZramSpec{SizeBytes: 256 << 20, Priority: 100}}, state); err != nil {
		t.Fatal(err)
	}
	node := testenv.NewMemoryCgroup(t, 64<<20)
	stop := node.StartLoad(t, "--size", "192Mi", "--content", "compress=4", "--scan", "none", "--duration", "600s")

	scope, err := cgroup.OpenAt(cgroup.V1, testenv.CgroupV1MemoryRoot, filepath.Base(node.Path))
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{roots: host.DefaultRoots, scope: scope, readErrors: func(src string) { t.Errorf("read error: %s", src) }}
	o.refreshLimits()
	s := o.sample(time.Now())
	var zramRAM uint64
	for _, tr := range o.tiers {
		if tr.Kind == host.TierZram {
			zramRAM += tr.RAMBytes
		}
	}
	sc2 := s.Scope
	t.Logf("scope: working set %d MiB, swap %d MiB, zram's RAM for it %d MiB (zram takes %d MiB)",
		sc2.WorkingSetBytes>>20, sc2.SwapUsedBytes>>20, sc2.CompressedRAMBytes>>20, zramRAM>>20)
	// The scope is the only one swapping: nearly all of zram's RAM is its.
	if s.ScopeErr != "" || sc2.SwapUsedBytes < 100<<20 || sc2.CompressedRAMBytes < zramRAM*8/10 || sc2.CompressedRAMBytes > zramRAM {
		t.Errorf("sample %+v (err %q): want ≥ 100 MiB swapped and 80–100%% of zram's %d B of RAM counted", sc2, s.ScopeErr, zramRAM)
	}
	if sc2.UsedBytes() != sc2.WorkingSetBytes+sc2.SwapUsedBytes+sc2.CompressedRAMBytes {
		t.Errorf("UsedBytes leaves out compressed RAM")
	}
	stop()
}
