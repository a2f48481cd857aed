package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// overloadedFixture is the fixture tree with two workloads (vm-a, the
// lower priority, and vm-b) on a node over its swap threshold.
func overloadedFixture(t *testing.T) string {
	t.Helper()
	_, root := fixtureScope(t, "inactive_file 0\n")
	os.WriteFile(filepath.Join(root, "node/memory.swap.max"), []byte("1000000000\n"), 0o644)
	for name, content := range map[string]string{
		"memory.current": "1000000000\n", "memory.swap.current": "0\n", "memory.stat": "inactive_file 0\n",
		"memory.max": "max\n", "memory.swap.max": "max\n", "memory.events": "oom_kill 0\n",
		"cgroup.procs": "999999998\n", "cgroup.kill": "",
	} {
		p := filepath.Join(root, "node/vm-b", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	return root
}

func lifecycleAgent(t *testing.T, root, stateDir string, evictor Evictor) (*Agent, *testenv.Buffer) {
	t.Helper()
	return lifecycleAgentOn(t, root, stateDir, evictor, loop.RealClock{})
}

func lifecycleAgentOn(t *testing.T, root, stateDir string, evictor Evictor, clock loop.Clock) (*Agent, *testenv.Buffer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Scope, cfg.WorkloadsDir, cfg.Listen, cfg.CgroupMount, cfg.StateDir = "node", filepath.Join(root, "meta"), "", root, stateDir
	cfg.EvictionGraceSeconds, cfg.EvictionDeadlineSeconds = 0.3, 30
	os.MkdirAll(cfg.WorkloadsDir, 0o755)
	os.WriteFile(filepath.Join(cfg.WorkloadsDir, "vm-b.json"), []byte(`{"priority": 10}`), 0o644)
	out := &testenv.Buffer{}
	a, err := NewWithClock(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), out, clock)
	if err != nil {
		t.Fatal(err)
	}
	if evictor != nil {
		a.SetEvictor(evictor)
	}
	return a, out
}

// records parses the decision log.
func records(t *testing.T, log string) []Record {
	t.Helper()
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("decision line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func actions(rs []Record, action string) []Record {
	var out []Record
	for _, r := range rs {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// A stop never forces a victim: the eviction's grace runs out while the
// agent waits for it, and nothing is killed (the fixture's cgroup.kill
// stays unwritten); the eviction is recorded as interrupted and stays in
// the journal. A new agent on the same journal resumes it: it waits for
// that victim and chooses no second one for the same pressure.
func TestStopNeverForcesAndARestartResumes(t *testing.T) {
	root := overloadedFixture(t)
	state := t.TempDir()
	a, out := lifecycleAgent(t, root, state, nil)
	a.Tick(time.Now(), true)
	testenv.Eventually(t, 5*time.Second, func() bool { return len(actions(records(t, out.String()), policy.ActionEvict)) == 1 })
	if ev := actions(records(t, out.String()), policy.ActionEvict); ev[0].Workload != "vm-a" || ev[0].SignaledAt == nil {
		t.Fatalf("eviction %+v", ev)
	}
	a.cfg.ShutdownGraceSeconds = 1 // past the eviction's 0.3 s grace
	a.stop(nil)
	if b, _ := os.ReadFile(filepath.Join(root, "node/vm-a/cgroup.kill")); len(b) != 0 {
		t.Fatalf("the stop forced the victim (cgroup.kill %q)", b)
	}
	ended := actions(records(t, out.String()), policy.ActionEvicted)
	if len(ended) != 1 || ended[0].Outcome.Result != policy.EvictionInterrupted || !strings.Contains(ended[0].Reason, "not forced") {
		t.Fatalf("the interrupted eviction's line: %+v", ended)
	}
	journal, err := os.ReadFile(filepath.Join(state, journalFile))
	if err != nil || !strings.Contains(string(journal), `"workload":"vm-a"`) || !strings.Contains(string(journal), "signaled_at") {
		t.Fatalf("journal after the stop: %s, %v", journal, err)
	}

	// The victim takes longer to leave than the two rounds: one that left
	// at once would stay in the fixture, past its OOM point, and be chosen
	// again as a workload that came back.
	ev := &slowEvictor{release: make(chan struct{})}
	b, out2 := lifecycleAgent(t, root, state, ev)
	b.Tick(time.Now(), true)
	b.Tick(time.Now().Add(250*time.Millisecond), false)
	rs := records(t, out2.String())
	if resumed := actions(rs, policy.ActionResumeEviction); len(resumed) != 1 || resumed[0].Workload != "vm-a" {
		t.Fatalf("the restarted agent did not resume vm-a's eviction: %s", out2)
	}
	if ev := actions(rs, policy.ActionEvict); len(ev) != 0 {
		t.Fatalf("the restarted agent chose a second victim: %+v", ev)
	}
	close(ev.release)
	b.act.evictions.wg.Wait()
	if got := ev.names(); len(got) != 0 {
		t.Fatalf("the resumed eviction was requested again (%v): its request had gone out", got)
	}
}

// slowEvictor is a recordingEvictor whose victims leave once released.
type slowEvictor struct {
	recordingEvictor
	release chan struct{}
}

func (e *slowEvictor) Finish(ctx context.Context, t Target) policy.EvictionOutcome {
	select {
	case <-e.release:
	case <-ctx.Done():
	}
	return e.recordingEvictor.Finish(ctx, t)
}

// refusingEvictor refuses the first workload it is asked for.
type refusingEvictor struct {
	recordingEvictor
	refuse string
}

func (e *refusingEvictor) Begin(ctx context.Context, t Target) (string, error) {
	e.recordingEvictor.Begin(ctx, t)
	if t.Name == e.refuse {
		return "", errors.New("refused by a PodDisruptionBudget")
	}
	return "", nil
}

// A refused eviction comes back as an outcome in the next round, and that
// round begins the next candidate's eviction.
func TestRefusalBeginsTheNextCandidateWithinOneRound(t *testing.T) {
	root := overloadedFixture(t)
	ev := &refusingEvictor{refuse: "vm-a"}
	a, out := lifecycleAgent(t, root, "", ev)
	t.Cleanup(func() { a.act.evictions.stop(0) })
	now := time.Now()
	a.Tick(now, true)
	a.act.evictions.wg.Wait() // the refusal is in
	a.Tick(now.Add(250*time.Millisecond), false)
	a.act.evictions.wg.Wait()
	if got := ev.names(); len(got) != 2 || got[0] != "vm-a" || got[1] != "vm-b" {
		t.Fatalf("evictions begun %v, want vm-a then vm-b in the next round", got)
	}
	rs := records(t, out.String())
	if refused := actions(rs, policy.ActionEvicted); len(refused) == 0 || refused[0].Outcome.Result != policy.EvictionRefused {
		t.Fatalf("no refused outcome: %s", out)
	}
}

// blockingEvictor's Begin waits until it is released: an apiserver that
// does not answer.
type blockingEvictor struct {
	recordingEvictor
	release chan struct{}
}

func (e *blockingEvictor) Begin(ctx context.Context, t Target) (string, error) {
	select {
	case <-e.release:
	case <-ctx.Done():
	}
	return e.recordingEvictor.Begin(ctx, t)
}

// An eviction's request runs beside the loop: rounds go on while it hangs.
func TestABlockedRequestNeverHoldsTheLoop(t *testing.T) {
	root := overloadedFixture(t)
	ev := &blockingEvictor{release: make(chan struct{})}
	a, out := lifecycleAgent(t, root, "", ev)
	now := time.Now()
	for i := range 8 {
		a.Tick(now.Add(time.Duration(i)*250*time.Millisecond), i == 0)
	}
	if n := strings.Count(out.String(), "waiting for the previous victim"); n != 1 || len(ev.names()) != 0 {
		t.Fatalf("rounds while the request hangs: %s", out)
	}
	close(ev.release)
	a.act.evictions.wg.Wait()
	if got := ev.names(); len(got) != 1 {
		t.Fatalf("evictions %v after the release", got)
	}
}

// Run keeps to the clock it is given: its rounds come on that clock's
// ticks and every decision carries that clock's time, not the wall
// clock's (a fake clock set in 2030 here).
func TestRunKeepsToItsClock(t *testing.T) {
	root := overloadedFixture(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := loop.NewFakeClock(start)
	a, out := lifecycleAgentOn(t, root, "", &recordingEvictor{}, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testenv.Eventually(t, 5*time.Second, func() bool { return a.Snapshot().Time.Equal(start) })
	const rounds = 4
	for i := 1; i <= rounds; i++ {
		clock.Advance(250 * time.Millisecond)
		want := start.Add(time.Duration(i) * 250 * time.Millisecond)
		testenv.Eventually(t, 5*time.Second, func() bool { return a.Snapshot().Time.Equal(want) })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rs := records(t, out.String())
	// The victim "leaves" at once but stays in the fixture, which is past
	// its OOM point: it may be chosen again inside the cool-down, each time
	// at a clock tick.
	ev := actions(rs, policy.ActionEvict)
	if len(ev) == 0 || !ev[0].Time.Equal(start) || !ev[0].SignaledAt.Equal(start) {
		t.Fatalf("evictions %+v, want the first decided and signalled at the clock's start", ev)
	}
	for _, e := range ev {
		if !e.SignaledAt.Equal(e.Time) {
			t.Fatalf("eviction decided at %s signalled at %s: not the clock's time", e.Time, e.SignaledAt)
		}
	}
	last := start.Add(rounds * 250 * time.Millisecond)
	for _, r := range rs {
		if r.Time.Before(start) || r.Time.After(last) {
			t.Fatalf("a decision at %s, outside the clock's %s..%s: %+v", r.Time, start, last, r)
		}
	}
}

// One journal, one agent: a second agent on the same state directory is
// refused, naming the first's PID (it would overwrite the first's
// evictions in progress and resume them as its own), and takes the
// directory once the first has stopped.
func TestStateDirBelongsToOneAgent(t *testing.T) {
	root := overloadedFixture(t)
	state := t.TempDir()
	a, _ := lifecycleAgent(t, root, state, nil)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := New(a.cfg, quiet, io.Discard)
	if !errors.Is(err, ErrStateDirHeld) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
		t.Fatalf("a second agent on the first's state directory: %v", err)
	}
	a.stop(nil)
	b, err := New(a.cfg, quiet, io.Discard)
	if err != nil {
		t.Fatalf("an agent on the state directory of one that stopped: %v", err)
	}
	b.stop(nil)
}

// A workloads directory that does not exist is said at the start: with it
// mistyped, every workload would silently get no swap allowance.
func TestMissingWorkloadsDirIsSaid(t *testing.T) {
	root := overloadedFixture(t)
	for _, tt := range []struct {
		dir  string
		warn bool
	}{{filepath.Join(root, "no-such-dir"), true}, {t.TempDir(), false}} {
		cfg := DefaultConfig()
		cfg.Scope, cfg.WorkloadsDir, cfg.Listen, cfg.CgroupMount, cfg.StateDir = "node", tt.dir, "", root, ""
		logs := &testenv.Buffer{}
		if _, err := New(cfg, slog.New(slog.NewTextHandler(logs, nil)), io.Discard); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "no workload metadata directory"); got != tt.warn {
			t.Errorf("workloads dir %s: warned %v, want %v; log:\n%s", tt.dir, got, tt.warn, logs)
		}
	}
}

// An agent started where no swap is active says so once: its swap
// allowances do nothing until swap is on.
func TestNoSwapIsSaid(t *testing.T) {
	root := overloadedFixture(t)
	for _, tt := range []struct {
		swaps string
		warn  bool
	}{
		{"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n", true},
		{"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/var/tmp/swapfile file\t\t1048572\t\t0\t\t-2\n", false},
	} {
		proc := t.TempDir()
		os.WriteFile(filepath.Join(proc, "swaps"), []byte(tt.swaps), 0o644)
		cfg := DefaultConfig()
		cfg.Scope, cfg.WorkloadsDir, cfg.Listen, cfg.CgroupMount, cfg.StateDir, cfg.ProcRoot = "node", t.TempDir(), "", root, "", proc
		logs := &testenv.Buffer{}
		if _, err := New(cfg, slog.New(slog.NewTextHandler(logs, nil)), io.Discard); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "no swap is active"); got != tt.warn {
			t.Errorf("swaps %q: warned %v, want %v; log:\n%s", tt.swaps, got, tt.warn, logs)
		}
	}
}
