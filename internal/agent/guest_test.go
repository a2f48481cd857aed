//go:build guest

// These tests run inside a micro-VM guest (TestSystemCgroupV2InGuest boots
// one with this test binary as its command): the guest kernel mounts
// cgroup2 with the memory controller, which this host (cgroup v1) cannot,
// so the agent's v2 code paths run for real here.
package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

const guestHeadroom = "/init" // headroom itself is the guest's /init

func requireGuest(t *testing.T) {
	if os.Getenv("HEADROOM_GUEST") != "1" {
		t.Skip("runs inside a micro-VM guest (see TestSystemCgroupV2InGuest)")
	}
}

// v2Group creates a cgroup under the guest's cgroup2 root with memory.max
// and memory.swap.max, removed when the test ends.
func v2Group(t *testing.T, parent cgroup.Group, name string, maxBytes, swapMaxBytes uint64) cgroup.Group {
	t.Helper()
	g, err := cgroup.Create(parent, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgroup.Remove(g, 10*time.Second) })
	if err := g.SetMemoryLimit(maxBytes); err != nil {
		t.Fatal(err)
	}
	if err := g.SetSwapLimit(swapMaxBytes); err != nil {
		t.Fatal(err)
	}
	return g
}

func guestRoot(t *testing.T) cgroup.Group {
	t.Helper()
	root, err := cgroup.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	if root.PressureFile() == "" {
		t.Fatal("the guest's cgroup hierarchy is not v2")
	}
	return root
}

// A group over its memory.max with no swap is OOM-killed, and the kernel's
// count in memory.events reaches the agent's reader.
func TestGuestV2OOMKillCounted(t *testing.T) {
	requireGuest(t)
	g := v2Group(t, guestRoot(t), "oom", 48<<20, 0)
	cmd := cgroup.Command(g.Path(), guestHeadroom, "load", "--size", "96Mi", "--scan", "none", "--duration", "10s")
	cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("a 96 MiB workload in a 48 MiB group without swap ended with %v", cmd.ProcessState)
	}
	m, err := g.Memory()
	if err != nil || m.OOMKills != 1 || m.LimitBytes != 48<<20 || m.SwapLimitBytes != 0 {
		t.Fatalf("memory %+v, %v", m, err)
	}
}

// cgroup.kill ends every process of a tree, including ones that ignore
// SIGTERM, in nested groups (the libvirt layout).
func TestGuestV2KillTree(t *testing.T) {
	requireGuest(t)
	g := v2Group(t, guestRoot(t), "vm", 64<<20, 0)
	inner := v2Group(t, v2Group(t, g, "libvirt", 64<<20, 0), "emulator", 64<<20, 0)
	cmd := cgroup.Command(inner.Path(), "/bin/sh", "-c", `trap "" TERM; while :; do sleep 1; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitProcesses(t, g, 1)
	if n, _ := g.Procs(); len(n) != 0 {
		t.Fatalf("the process sits in the nested group, not in %s", g.Path())
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("cgroup.kill left the process running")
	}
}

// waitProcesses waits until the tree holds at least n processes.
func waitProcesses(t *testing.T, g cgroup.Group, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, _ := cgroup.CountProcesses(g); c >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %d processes", g.Path(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The agent on a v2 node: swap allowances land in memory.swap.max, the
// node's own memory.pressure is sampled, and when the node crosses its
// threshold the lowest-priority workload — processes only in a nested
// group, ignoring SIGTERM — is killed with cgroup.kill after the grace
// period, then the next one leaves on SIGTERM.
func TestGuestV2AgentAllowancesPressureAndEviction(t *testing.T) {
	requireGuest(t)
	swaps, err := host.ReadSwaps()
	if err != nil || len(swaps) == 0 {
		t.Fatalf("the guest has no swap device (%v): boot it with a guest swap disk", err)
	}
	// Node: 256 MiB of RAM, 512 MiB of swap. Threshold 256 + 0.5 × 512 =
	// 512 MiB: two 200 MiB workloads fit under it, three do not, and all
	// fit in RAM + swap, so the kernel never has to kill.
	node := v2Group(t, guestRoot(t), "node", 256<<20, 512<<20)
	metaDir := t.TempDir()
	names := []string{"stubborn", "w-mid", "w-high"}
	groups := map[string]cgroup.Group{}
	requests := map[string]string{"stubborn": "0", "w-mid": "64Mi", "w-high": "64Mi"}
	for i, name := range names {
		md, _ := json.Marshal(map[string]any{"name": name, "priority": i, "memoryRequest": requests[name]})
		if err := os.WriteFile(filepath.Join(metaDir, name+".json"), md, 0o644); err != nil {
			t.Fatal(err)
		}
		groups[name] = v2Group(t, node, name, 240<<20, cgroup.Unlimited)
	}

	cfg := DefaultConfig()
	cfg.Scope, cfg.WorkloadsDir, cfg.Listen, cfg.Mlock = "node", metaDir, "", false
	cfg.SwapUtilizationThresholdFactor, cfg.CooldownSeconds = 0.5, 1
	// The default grace (10 s), not a shorter one: a workload half in swap
	// needs its pages back to act on SIGTERM, which in this TCG guest at
	// its node's limit took 1.0-1.5 s on an idle host, up to 3.2 s beside
	// two busy cores, and past a 2 s grace in CI. The stubborn one pays
	// the grace in full.
	cfg.EvictionDeadlineSeconds = 30
	var log testenv.Buffer
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), &log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- a.Run(ctx) }()
	defer func() { cancel(); <-stopped }()

	// Allowances: 64 MiB of 256 MiB RAM × 512 MiB swap = 128 MiB; none
	// without a request.
	waitFile(t, filepath.Join(groups["stubborn"].Path(), "memory.swap.max"), "0")
	for _, name := range []string{"w-mid", "w-high"} {
		waitFile(t, filepath.Join(groups[name].Path(), "memory.swap.max"), strconv.Itoa(128<<20))
	}

	// The lowest priority workload (no request: it is over it at once)
	// ignores SIGTERM; its process lives in a nested group, as libvirt's
	// QEMU does.
	inner := v2Group(t, v2Group(t, groups["stubborn"], "libvirt", 240<<20, cgroup.Unlimited), "emulator", 240<<20, cgroup.Unlimited)
	stubborn := cgroup.Command(inner.Path(), "/bin/sh", "-c", `trap "" TERM; while :; do sleep 1; done`)
	if err := stubborn.Start(); err != nil {
		t.Fatal(err)
	}
	go stubborn.Wait()
	loads := map[string]*exec.Cmd{}
	for _, name := range []string{"w-mid", "w-high"} {
		loads[name] = cgroup.Command(groups[name].Path(), guestHeadroom, "load", "--size", "200Mi", "--scan", "none", "--duration", "120s")
		if err := loads[name].Start(); err != nil {
			t.Fatal(err)
		}
	}
	// A third 200 MiB: the node crosses its threshold.
	extra := v2Group(t, node, "w-extra", 240<<20, cgroup.Unlimited)
	md, _ := json.Marshal(map[string]any{"name": "w-extra", "priority": 9, "memoryRequest": "64Mi"})
	os.WriteFile(filepath.Join(metaDir, "w-extra.json"), md, 0o644)
	third := cgroup.Command(extra.Path(), guestHeadroom, "load", "--size", "200Mi", "--scan", "none", "--duration", "120s")
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range []*exec.Cmd{loads["w-mid"], loads["w-high"], third} {
			c.Process.Kill()
			c.Wait()
		}
	}()

	// The stubborn one is chosen first and forced after its grace; w-mid
	// second, gracefully. At the OOM point w-mid goes beside the slow
	// stubborn one, so it may leave first.
	first := awaitDecision(t, &log, 120*time.Second, func(r Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == "stubborn"
	})
	if first.Outcome.Result != policy.EvictedForcibly {
		t.Fatalf("the stubborn one's outcome: %+v\nlog:\n%s", first, log.String())
	}
	second := awaitDecision(t, &log, 120*time.Second, func(r Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload != "stubborn"
	})
	if second.Workload != "w-mid" || second.Outcome.Result != policy.EvictedGracefully {
		t.Fatalf("second eviction outcome: %+v\nlog:\n%s", second, log.String())
	}
	const chose = `"action":"evict","workload":`
	if l := log.String(); strings.Count(l, chose+`"stubborn"`) != 1 || strings.Index(l, chose+`"stubborn"`) > strings.Index(l, chose+`"w-mid"`) {
		t.Fatalf("want the stubborn one chosen once, before w-mid; log:\n%s", log.String())
	}
	v := a.Snapshot()
	if v.Sample.PSIErr != "" || v.Sample.ScopeErr != "" || v.Sample.PSISomeMicros == 0 {
		t.Fatalf("the node's own pressure was not sampled: %+v", v.Sample)
	}
	if p, err := host.ReadPSIFile(node.PressureFile()); err != nil || p.SomeMicros == 0 {
		t.Fatalf("node memory.pressure: %+v, %v", p, err)
	}
	if m, err := node.Memory(); err != nil || m.OOMKills != 0 {
		t.Fatalf("node %+v, %v: the kernel killed", m, err)
	}
	t.Logf("stubborn: %s; w-mid: %s", first.Reason, second.Reason)
}

// waitFile waits until a control file holds want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.TrimSpace(string(b)) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %q, want %q", path, strings.TrimSpace(string(b)), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitDecision waits for a decision line matching match in the agent's log.
func awaitDecision(t *testing.T, log *testenv.Buffer, d time.Duration, match func(Record) bool) Record {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, line := range strings.Split(log.String(), "\n") {
			var r Record
			if json.Unmarshal([]byte(line), &r) == nil && match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching decision within %s; log:\n%s", d, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
