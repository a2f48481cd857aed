package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

func TestConfigLayering(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	os.WriteFile(file, []byte("swapUtilizationThresholdFactor: 0.9\naverageWindowSizeSeconds: 20\nscope: machine.slice\n"), 0o644)
	cfg := DefaultConfig()
	if err := cfg.LoadFile(file); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AVERAGE_WINDOW_SIZE_SECONDS": "30", "MAX_AVERAGE_SWAP_IN_PAGES_PER_SECOND": "5000"}
	if err := cfg.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if cfg.SwapUtilizationThresholdFactor != 0.9 || cfg.AverageWindowSizeSeconds != 30 || cfg.MaxAverageSwapInPagesPerSecond != 5000 || cfg.Scope != "machine.slice" {
		t.Fatalf("layered config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, []byte("swapUtilisationFactor: 0.9\n"), 0o644)
	strict := DefaultConfig()
	if err := strict.LoadFile(file); err == nil {
		t.Fatal("unknown key accepted")
	}
	bad := DefaultConfig()
	if err := bad.LoadEnv(func(k string) (string, bool) { return "lots", k == "SWAP_UTILIZATION_THRESHOLD_FACTOR" }); err == nil || !strings.Contains(err.Error(), "SWAP_UTILIZATION_THRESHOLD_FACTOR") {
		t.Fatalf("bad env value: %v", err)
	}
}

// fixtureScope builds a v2 tree with one workload; stat is the content of
// the scope's memory.stat.
func fixtureScope(t *testing.T, scopeStat string) (cgroup.Group, string) {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"cgroup.controllers":  "cpu memory\n",
		"node/memory.current": "3000000000\n", "node/memory.swap.current": "2000000000\n", "node/memory.stat": scopeStat,
		// The scope's swap is the least of its limit and the host's active
		// swap: a limit of 1 GB keeps it under the 2 GB in use whatever swap
		// the machine running the test has on.
		"node/memory.max": "2147483648\n", "node/memory.swap.max": "1000000000\n", "node/memory.events": "oom_kill 0\n",
		"node/memory.pressure":     "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"node/vm-a/memory.current": "1000000000\n", "node/vm-a/memory.swap.current": "0\n", "node/vm-a/memory.stat": "inactive_file 0\n",
		"node/vm-a/memory.max": "max\n", "node/vm-a/memory.swap.max": "max\n", "node/vm-a/memory.events": "oom_kill 0\n",
		"node/vm-a/cgroup.procs": "999999999\n", "node/vm-a/cgroup.kill": "",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	g, err := cgroup.OpenAt(cgroup.V2, root, "node")
	if err != nil {
		t.Fatal(err)
	}
	return g, root
}

// recordingEvictor records whom it was asked to evict; each eviction ends
// gracefully at once.
type recordingEvictor struct {
	mu    sync.Mutex
	begun []string
}

func (e *recordingEvictor) Begin(_ context.Context, t Target) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.begun = append(e.begun, filepath.Base(t.Group.Path()))
	return "", nil
}
func (e *recordingEvictor) Finish(_ context.Context, t Target) policy.EvictionOutcome {
	return policy.EvictionOutcome{Workload: t.Name, Result: policy.EvictedGracefully}
}

func (e *recordingEvictor) names() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.begun)
}

// newFixtureAgent runs an agent on the fixture tree at root (its scope
// "node"), with the evictor recording.
func newFixtureAgent(t *testing.T, root string) (*Agent, *recordingEvictor, *testenv.Buffer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Scope, cfg.WorkloadsDir, cfg.Listen, cfg.CgroupMount, cfg.StateDir = "node", t.TempDir(), "", root, ""
	out := &testenv.Buffer{}
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), out)
	if err != nil {
		t.Fatal(err)
	}
	ev := &recordingEvictor{}
	a.SetEvictor(ev)
	t.Cleanup(func() { a.act.evictions.stop(0) })
	return a, ev, out
}

// A node far over RAM + swap: the agent evicts when it can read the scope,
// and does nothing but say why when it cannot.
func TestAgentActsOnlyOnReadableData(t *testing.T) {
	_, root := fixtureScope(t, "inactive_file 0\n")
	a, ev, out := newFixtureAgent(t, root)
	a.Tick(time.Now(), true)
	a.act.evictions.wg.Wait()
	if got := ev.names(); len(got) != 1 || got[0] != "vm-a" || !strings.Contains(out.String(), `"action":"evict"`) {
		t.Fatalf("readable overloaded node: evicted %v, log %s", got, out)
	}

	_, broken := fixtureScope(t, "garbage\n")
	a, ev, out = newFixtureAgent(t, broken)
	a.Tick(time.Now(), true)
	a.Tick(time.Now().Add(time.Second), false)
	a.act.evictions.wg.Wait()
	if got := ev.names(); len(got) != 0 || !strings.Contains(out.String(), "unreadable") {
		t.Fatalf("unreadable scope: evicted %v, log %s", got, out)
	}
}

func TestHTTPEndpoints(t *testing.T) {
	_, root := fixtureScope(t, "inactive_file 0\n")
	a, _, _ := newFixtureAgent(t, root)
	a.Tick(time.Now(), true)
	a.act.evictions.wg.Wait()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	code, body := get("/v1/decisions")
	var recs []Record
	if code != 200 || json.Unmarshal([]byte(body), &recs) != nil || len(recs) == 0 {
		t.Fatalf("/v1/decisions %d %s", code, body)
	}
	code, body = get("/v1/snapshot")
	var v View
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil || len(v.Workloads) != 1 || v.Workloads[0].Name != "vm-a" {
		t.Fatalf("/v1/snapshot %d %s", code, body)
	}
	_, body = get("/metrics")
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
	for _, want := range []string{"headroom_scope_ram_bytes 2.147483648e+09", `headroom_workload_working_set_bytes{workload="vm-a"} 1e+09`,
		`headroom_signal_firing{signal="swap_utilization"} 1`, `headroom_agent_decisions_total{action="evict"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Host infrastructure (the ignore list) and the cgroup holding the agent
// are not workloads: never listed, so never ranked or given swap.
func TestDiscoverSkipsIgnoredAndOwnCgroups(t *testing.T) {
	_, root := fixtureScope(t, "inactive_file 0\n")
	for _, dir := range []string{"node/system.slice", "node/agent-home/inner", "node/agent-homely"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, _, _ := newFixtureAgent(t, root)
	inner, err := cgroup.OpenAt(cgroup.V2, root, "node/agent-home/inner")
	if err != nil {
		t.Fatal(err)
	}
	a.obs.source.(*cgroupSource).own = []cgroup.Group{inner}
	a.node.Discover(time.Now(), true)
	var names []string
	for name := range a.node.groups {
		names = append(names, name)
	}
	sort.Strings(names)
	if want := []string{"agent-homely", "vm-a"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("workloads %v, want %v", names, want)
	}
}

// announcingSource is the default source with a change notifier, as the
// Kubernetes and libvirt sources have.
type announcingSource struct {
	Source
	changed chan struct{}
}

func (s announcingSource) Changed() <-chan struct{} { return s.changed }

// A group removed and made again under its old path is a new workload. A
// source without a notifier is checked at every listing; one with a
// notifier at the listings it asks for, the periodic listing trusting it.
func TestDiscoverFindsAGroupMadeAgain(t *testing.T) {
	for _, announces := range []bool{false, true} {
		_, root := fixtureScope(t, "inactive_file 0\n")
		a, _, _ := newFixtureAgent(t, root)
		if announces {
			a.obs.source = announcingSource{Source: a.obs.source, changed: make(chan struct{})}
		}
		now := time.Now()
		a.node.Discover(now, true)
		before := a.node.workloads["vm-a"].Instance
		// The new group is an existing directory renamed into place: its
		// inode differs from the removed one's on any file system.
		vm := filepath.Join(root, "node", "vm-a")
		made := filepath.Join(root, "vm-a-new")
		if err := os.CopyFS(made, os.DirFS(vm)); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(vm); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(made, vm); err != nil {
			t.Fatal(err)
		}
		a.node.Discover(now.Add(5*time.Second), false)
		periodic := a.node.workloads["vm-a"].Instance
		a.node.Discover(now.Add(6*time.Second), true)
		asked := a.node.workloads["vm-a"].Instance
		switch {
		case before == 0 || asked == before:
			t.Errorf("announces %v: instance %d before, %d after the source's change: the group made again was not found", announces, before, asked)
		case !announces && periodic == before:
			t.Errorf("a source without a notifier: the periodic listing missed the group made again")
		case announces && periodic != before:
			t.Errorf("a source with a notifier: the periodic listing stat'ed every group")
		}
	}
}

// The default source, watching its scope, announces a group made there:
// the agent lists at once rather than at its discovery interval.
func TestCgroupSourceAnnouncesAGroupMade(t *testing.T) {
	_, root := fixtureScope(t, "inactive_file 0\n")
	a, _, _ := newFixtureAgent(t, root)
	files := a.obs.source.(*cgroupSource)
	if files.Changed() != nil {
		t.Fatal("the source announces before it watches")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	files.watch(ctx)
	if files.Changed() == nil {
		t.Fatal("the source does not watch its scope")
	}
	if err := os.Mkdir(filepath.Join(root, "node", "vm-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case <-files.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("a group made in the scope was not announced within 5 s")
	}
}

func TestUsageThresholds(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                     string
		thresholdBytes, oomBytes uint64
		want                     []uint64
	}{
		{"steps from the eviction threshold to the OOM point", 1536*mib + 1024*mib*8/10, 2560 * mib,
			[]uint64{2355 * mib, 2406 * mib, 2457 * mib, 2508 * mib}},
		{"threshold at the OOM point: one", 1536 * mib, 1536 * mib,
			[]uint64{1536 * mib}},
		{"no swap: RAM", 1024 * mib, 1024 * mib, []uint64{1024 * mib}},
	} {
		got := usageThresholds(c.thresholdBytes, c.oomBytes)
		// 0.8 × 1 GiB is not a whole MiB: compare to a MiB.
		for i := range got {
			got[i] = got[i] / mib * mib
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v MiB-rounded, want %v", c.name, got, c.want)
		}
	}
}
