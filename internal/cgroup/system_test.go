//go:build system

package cgroup_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The v1 memory controller of this machine, for real: a scope with a
// child that holds memory, swap limits applied through memsw.
func TestSystemV1MemoryGroup(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	scopeCg := testenv.NewMemoryCgroup(t, 512<<20)
	scope, err := cgroup.OpenAt(cgroup.V1, testenv.CgroupV1MemoryRoot, strings.TrimPrefix(scopeCg.Path, testenv.CgroupV1MemoryRoot))
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(scopeCg.Path, "vm-1")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(child)
	if err := os.WriteFile(filepath.Join(child, "memory.limit_in_bytes"), []byte("67108864"), 0o644); err != nil {
		t.Fatal(err)
	}
	kids, err := scope.Children()
	if err != nil || len(kids) != 1 {
		t.Fatalf("Children = %v, %v", kids, err)
	}
	g := kids[0]
	if err := g.SetSwapLimit(32 << 20); err != nil {
		t.Fatal(err)
	}
	m, err := g.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if m.LimitBytes != 64<<20 || m.SwapLimitBytes != 32<<20 {
		t.Fatalf("limits %+v, want 64 MiB memory, 32 MiB swap", m)
	}
	// A workload that outgrows the memory limit swaps up to its allowance:
	// 80 MiB fits 64 MiB + 32 MiB of swap ...
	bin := testenv.HeadroomBinary(t)
	if out, err := testenv.CommandIn(child, bin, "load", "--size", "80Mi", "--iterations", "1").CombinedOutput(); err != nil {
		t.Fatalf("80 MiB workload in a 64+32 MiB group: %v: %s", err, out)
	}
	m, err = g.Memory()
	if err != nil || m.OOMKills != 0 {
		t.Fatalf("after the 80 MiB workload: %+v, %v", m, err)
	}
	b, err := os.ReadFile(filepath.Join(child, "memory.memsw.max_usage_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if peak, err := cgroup.ParseLimit(b); err != nil || peak <= 64<<20 {
		t.Fatalf("memsw peak %d: the workload did not swap (%v)", peak, err)
	}
	// ... and 120 MiB does not: the kernel OOM-kills it, and Memory sees it.
	if err := testenv.CommandIn(child, bin, "load", "--size", "120Mi", "--iterations", "1").Run(); err == nil {
		t.Fatal("120 MiB workload survived a 64 MiB + 32 MiB swap group")
	}
	if m, err = g.Memory(); err != nil || m.OOMKills != 1 {
		t.Fatalf("after the 120 MiB workload: OOM kills %d, %v", m.OOMKills, err)
	}
}

// A group removed and made again under the same path (a density step's
// next VM) has a new ID: the agent tells the two workloads apart by it.
func TestSystemGroupMadeAgainHasANewID(t *testing.T) {
	scopeCg := testenv.NewMemoryCgroup(t, 512<<20)
	scope, err := cgroup.OpenAt(cgroup.V1, testenv.CgroupV1MemoryRoot, strings.TrimPrefix(scopeCg.Path, testenv.CgroupV1MemoryRoot))
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(scopeCg.Path, "w1")
	id := func() uint64 {
		t.Helper()
		if err := os.Mkdir(child, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(child)
		kids, err := scope.Children()
		if err != nil || len(kids) != 1 {
			t.Fatalf("Children = %v, %v", kids, err)
		}
		a, err := cgroup.ID(kids[0])
		if err != nil {
			t.Fatal(err)
		}
		if b, err := cgroup.ID(kids[0]); err != nil || b != a {
			t.Fatalf("the same group read twice: ID %d then %d (%v)", a, b, err)
		}
		return a
	}
	if first, again := id(), id(); first == again {
		t.Fatalf("a group made again under the same path kept its ID %d", first)
	}
}

// A group made in a watched one on this machine's cgroupfs is reported,
// and so is one removed and made again under its old path.
func TestSystemWatchChildrenOnCgroupfs(t *testing.T) {
	scopeCg := testenv.NewMemoryCgroup(t, 512<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	made := make(chan struct{}, 8)
	w, err := cgroup.WatchChildren(ctx, func() { made <- struct{}{} }, func(err error) { t.Errorf("watch failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(scopeCg.Path); err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(scopeCg.Path, "w1")
	for _, what := range []string{"a group made", "the group made again"} {
		os.Remove(child)
		if err := os.Mkdir(child, 0o755); err != nil {
			t.Fatal(err)
		}
		select {
		case <-made:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not reported within 5 s", what)
		}
	}
	os.Remove(child)
}

// The kernel wakes a usage watcher as a workload's memory crosses a
// threshold, and not for a threshold it never reaches.
func TestSystemUsageThresholdWakes(t *testing.T) {
	scopeCg := testenv.NewMemoryCgroup(t, 512<<20)
	scope, err := cgroup.OpenAt(cgroup.V1, testenv.CgroupV1MemoryRoot, strings.TrimPrefix(scopeCg.Path, testenv.CgroupV1MemoryRoot))
	if err != nil {
		t.Fatal(err)
	}
	before, err := scope.Usage()
	if err != nil {
		t.Fatal(err)
	}
	crossed, beyond := make(chan time.Time, 1), make(chan time.Time, 1)
	near, err := scope.WatchUsage([]uint64{before.UsageBytes + before.SwapBytes + 32<<20}, crossed)
	if err != nil {
		t.Fatal(err)
	}
	defer near.Close()
	far, err := scope.WatchUsage([]uint64{400 << 20}, beyond)
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()

	if out, err := scopeCg.Command(testenv.HeadroomBinary(t), "load", "--size", "64Mi", "--iterations", "1").CombinedOutput(); err != nil {
		t.Fatalf("64 MiB workload: %v: %s", err, out)
	}
	select {
	case <-crossed:
	case <-time.After(10 * time.Second):
		t.Fatal("a 64 MiB workload crossed a threshold 32 MiB above the group's usage and nothing woke the watcher")
	}
	select {
	case <-beyond:
		t.Fatal("the watcher of a 400 MiB threshold woke for a 64 MiB workload")
	default:
	}
	if err := near.Close(); err != nil {
		t.Fatalf("disarming: %v", err)
	}
}
