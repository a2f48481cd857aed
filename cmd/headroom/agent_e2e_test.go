package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/testenv"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/agent-e2e.golden from this run")

const (
	gib = 1 << 30
	mib = 1 << 20
)

// e2eTree is a fixture machine: proc/ (meminfo, swaps, vmstat), sys/ and a
// cgroup v2 hierarchy with the scope "node", as the agent reads them with
// --proc-root, --sys-root and --cgroup-mount.
type e2eTree struct {
	t    *testing.T
	root string
}

func (f e2eTree) write(path, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	// Replace, never truncate in place: the agent must never read half a
	// file the test is writing.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f e2eTree) swaps(sizeBytes, usedBytes uint64) {
	f.write("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"+
		fmt.Sprintf("/dev/fixture-swap                       partition\t%d\t\t%d\t\t-2\n", sizeBytes/1024, usedBytes/1024))
	f.write("proc/meminfo", fmt.Sprintf("MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\nSwapTotal: %d kB\nSwapFree: %d kB\n",
		4*gib/1024, 2*gib/1024, 2*gib/1024, sizeBytes/1024, (sizeBytes-usedBytes)/1024))
}

// scopeUse sets the scope's memory and swap use.
func (f e2eTree) scopeUse(memoryBytes, swapBytes uint64) {
	f.write("cgroup/node/memory.current", fmt.Sprintln(memoryBytes))
	f.write("cgroup/node/memory.swap.current", fmt.Sprintln(swapBytes))
}

func (f e2eTree) psi(fullMicros uint64) {
	f.write("cgroup/node/memory.pressure", fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%d\n",
		fullMicros, fullMicros))
}

func (f e2eTree) workload(name string, memoryBytes uint64) {
	for file, content := range map[string]string{
		"memory.current": fmt.Sprintln(memoryBytes), "memory.swap.current": "0\n", "memory.stat": "inactive_file 0\n",
		"memory.max": "max\n", "memory.swap.max": "max\n", "memory.events": "oom_kill 0\n",
		// A PID no process has: signals to it find nothing (ESRCH), and the
		// workload leaves when the test empties or removes its cgroup.
		"cgroup.procs": "999999999\n", "cgroup.kill": "",
	} {
		f.write(filepath.Join("cgroup/node", name, file), content)
	}
}

func newE2ETree(t *testing.T) e2eTree {
	f := e2eTree{t, t.TempDir()}
	f.write("proc/vmstat", "pswpin 0\npswpout 0\npgmajfault 0\n")
	f.write("sys/module/zswap/parameters/enabled", "N\n")
	f.write("cgroup/cgroup.controllers", "cpu memory\n")
	for file, content := range map[string]string{
		"memory.max": fmt.Sprintln(2 * gib), "memory.swap.max": "max\n", "memory.stat": "inactive_file 0\n", "memory.events": "oom_kill 0\n",
	} {
		f.write(filepath.Join("cgroup/node", file), content)
	}
	f.swaps(2*gib, 0)
	f.scopeUse(1*gib, 0)
	f.psi(0)
	f.workload("vm-a", 300*mib)
	f.workload("vm-b", 600*mib)
	f.write("meta/vm-a.json", `{"priority": 0, "memoryRequest": "512Mi"}`)
	f.write("meta/vm-b.json", `{"priority": 10, "memoryRequest": "1Gi"}`)
	f.workload("vm-c", 200*mib)
	f.write("meta/vm-c.json", `{"priority": 5, "memoryRequest": "256Mi"}`)
	f.write("outside/vm-b.json", `{"priority": 1000, "memoryRequest": "2Gi", "protected": true}`)
	f.write("agent.yaml", "discoverySeconds: 0.1\nworkloadStatsSeconds: 0.1\npsiTriggerStallMillis: 0\n")
	return f
}

// e2eAgent is the agent binary running on the tree.
type e2eAgent struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *testenv.Buffer
	log    *testenv.Lines[agent.Record]
}

func startE2EAgent(t *testing.T, f e2eTree) *e2eAgent {
	t.Helper()
	cmd := headroom("agent", "--config", filepath.Join(f.root, "agent.yaml"), "--scope", "node",
		"--proc-root", filepath.Join(f.root, "proc"), "--sys-root", filepath.Join(f.root, "sys"),
		"--cgroup-mount", filepath.Join(f.root, "cgroup"), "--workloads-dir", filepath.Join(f.root, "meta"),
		"--state-dir", filepath.Join(f.root, "state"), "--listen", "127.0.0.1:0", "--mlock=false", "--oom-score-adj", "0",
		"--interval", "50ms", "--window", "1s", "--cooldown", "500ms", "--psi-full-percent", "10",
		"--eviction-grace", "60s", "--eviction-deadline", "120s", "--shutdown-grace", "300ms")
	a := &e2eAgent{t: t, cmd: cmd, stderr: &testenv.Buffer{}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := testenv.CopyLines(stderr, a.stderr, "msg=serving addr=")
	a.log = testenv.FollowLines[agent.Record](stdout)
	select {
	case a.addr = <-addr:
	case <-time.After(5 * time.Second):
		t.Fatalf("agent not serving; stderr:\n%s", a.stderr.String())
	}
	return a
}

// waitAll waits for a line of each workload with action, past the first
// `from` lines, and returns the count of lines then.
func (a *e2eAgent) waitAll(action string, from int, workloads ...string) int {
	a.t.Helper()
	n := from
	for _, w := range workloads {
		n = max(n, a.waitFor(action+" "+w, from, a.line(action, w)))
	}
	return n
}

// waitFor waits until the decision log holds a line for which match holds,
// past the first `from` lines, and returns the count of lines then.
func (a *e2eAgent) waitFor(what string, from int, match func(agent.Record) bool) int {
	a.t.Helper()
	return a.log.WaitFor(a.t, what, from, 5*time.Second, match, func() string {
		return fmt.Sprintf("decisions so far:\n%s\nstderr:\n%s", a.masked(), a.stderr.String())
	})
}

func (a *e2eAgent) line(action, workload string) func(agent.Record) bool {
	return func(r agent.Record) bool { return r.Action == action && r.Workload == workload }
}

// snapshot reads /v1/snapshot.
func (a *e2eAgent) snapshot() agent.View {
	a.t.Helper()
	resp, err := http.Get("http://" + a.addr + "/v1/snapshot")
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v agent.View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		a.t.Fatal(err)
	}
	return v
}

// seen waits until the agent's published view satisfies cond (no event
// announces that a round has read a file the test wrote).
func (a *e2eAgent) seen(cond func(agent.View) bool) {
	a.t.Helper()
	var last agent.View
	a.t.Cleanup(func() {
		if a.t.Failed() {
			a.t.Logf("the agent's last view: signals %+v", last.Signals)
		}
	})
	testenv.Eventually(a.t, 5*time.Second, func() bool { last = a.snapshot(); return cond(last) })
}

// stop sends SIGTERM and waits for exit status 0.
func (a *e2eAgent) stop() {
	a.t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.log.Done() // the output ends with the process
	if err := a.cmd.Wait(); err != nil {
		a.t.Fatalf("agent after SIGTERM: %v; stderr:\n%s", err, a.stderr.String())
	}
}

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// masked is the decision log without what depends on timing: one line a
// decision with its action, workload, signal, result and allowance, and
// its reason with every number replaced by N.
func (a *e2eAgent) masked() string {
	var b strings.Builder
	for _, r := range a.log.All() {
		fmt.Fprintf(&b, "%s %s", r.Action, r.Workload)
		if r.Trigger != nil {
			fmt.Fprintf(&b, " signal=%s", r.Trigger.Signal)
		}
		if r.Outcome != nil {
			fmt.Fprintf(&b, " result=%s", r.Outcome.Result)
		}
		if r.Swap != nil {
			fmt.Fprintf(&b, " swap=%dMi", r.Swap.SwapBytes/mib)
		}
		fmt.Fprintf(&b, " | %s\n", digits.ReplaceAllString(r.Reason, "N"))
	}
	return b.String()
}

// evaluated: the window is long enough for the signal to have a value.
func evaluated(v agent.View, signal string) bool {
	for _, s := range v.Signals {
		if s.Name == signal {
			return true
		}
	}
	return false
}

// heldInRAM: the signal is past its threshold and does not fire, the
// scope's memory fitting in its RAM.
func heldInRAM(v agent.View, signal string) bool {
	for _, s := range v.Signals {
		if s.Name == signal && s.FitsInRAM && !s.Firing {
			return true
		}
	}
	return false
}

func firing(v agent.View) bool {
	for _, s := range v.Signals {
		if s.Firing {
			return true
		}
	}
	return false
}

// The agent binary on a fixture tree the test changes step by step: swap
// shrinks, a workload grows, swap fills, the victim's cgroup vanishes, a
// metadata file turns corrupt and then a symlink out of its directory, a
// PSI stall, a stop mid-eviction and a restart that resumes it. The
// decision log, masked of timing, must match testdata/agent-e2e.golden.
// Nothing here needs privileges or touches the machine.
func TestAgentEndToEndOnFixtureTree(t *testing.T) {
	start := time.Now()
	f := newE2ETree(t)
	a := startE2EAgent(t, f)
	n := a.waitAll("set_swap", 0, "vm-a", "vm-b", "vm-c")

	// swapoff of the 2 GiB area, swapon of a 1 GiB one: both allowances
	// follow within a round.
	f.swaps(1*gib, 0)
	n = a.waitAll("set_swap", n, "vm-a", "vm-b", "vm-c")

	// vm-a grows past its request; nothing fires yet.
	f.workload("vm-a", 1200*mib)
	f.scopeUse(1800*mib, 0)
	a.seen(func(v agent.View) bool {
		for _, w := range v.Workloads {
			if w.Name == "vm-a" && w.WorkingSetBytes == 1200*mib {
				return v.Sample.Scope.WorkingSetBytes == 1800*mib
			}
		}
		return false
	})

	// Swap fills: working set + swap (2 + 0.95 GiB) passes RAM + 0.8 × swap
	// (2.8 GiB). vm-a, over its request at the lowest priority, goes
	// (vm-c is within its request, vm-b has the highest priority).
	f.scopeUse(2*gib, 950*mib)
	f.swaps(1*gib, 950*mib)
	n = a.waitFor("vm-a's eviction", n, a.line("evict", "vm-a"))

	// The victim's cgroup vanishes, and the memory with it.
	f.scopeUse(900*mib, 0)
	f.swaps(1*gib, 0)
	if err := os.RemoveAll(filepath.Join(f.root, "cgroup/node/vm-a")); err != nil {
		t.Fatal(err)
	}
	n = a.waitFor("vm-a's outcome", n, a.line("evicted", "vm-a"))
	a.seen(func(v agent.View) bool { return !firing(v) && len(v.Workloads) == 2 })

	// vm-b's metadata turns corrupt: defaults (no request, no swap), one
	// log line.
	f.write("meta/vm-b.json", `{"priority": 10, "memoryReq`)
	n = a.waitFor("vm-b's allowance on the defaults", n, a.line("set_swap", "vm-b"))
	// Then a symlink out of its directory, to a file that would protect it:
	// never followed.
	os.Remove(filepath.Join(f.root, "meta/vm-b.json"))
	if err := os.Symlink("../outside/vm-b.json", filepath.Join(f.root, "meta/vm-b.json")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Count(a.stderr.String(), "workload metadata unusable") == 2 })

	// A PSI stall, 2 s of full stall within the 1 s window, while the
	// scope fits in RAM (0.9 of 2 GiB): pages coming back, nothing fires.
	f.psi(2_000_000)
	a.seen(func(v agent.View) bool { return heldInRAM(v, "psi_memory_full") })
	// Over RAM (1900 + 200 MiB of swap: 2100 MiB, short of the 2150 MiB
	// where swap_utilization fires) the stall goes on: vm-b, with the
	// defaults (the symlink's "protected" was not read), goes.
	f.scopeUse(1900*mib, 200*mib)
	f.swaps(1*gib, 200*mib)
	f.psi(4_000_000)
	n = a.waitFor("vm-b's eviction", n, a.line("evict", "vm-b"))

	// SIGTERM mid-eviction: the stop waits 300 ms, forces nothing and
	// records the eviction as interrupted.
	a.stop()
	a.waitFor("vm-b's interrupted outcome", n, func(r agent.Record) bool {
		return r.Action == "evicted" && r.Workload == "vm-b" && r.Outcome.Result == "interrupted"
	})
	if b, _ := os.ReadFile(filepath.Join(f.root, "cgroup/node/vm-b/cgroup.kill")); len(b) != 0 {
		t.Fatalf("the stop wrote %q to vm-b's cgroup.kill", b)
	}
	golden := a.masked()

	// A new agent finds vm-b in the journal and waits for it: a second
	// stall while vm-b is leaving chooses no second victim (vm-c). The
	// victim leaves once the stall is out of the window.
	b := startE2EAgent(t, f)
	n = b.waitFor("vm-b's resumed eviction", 0, b.line("resume_eviction", "vm-b"))
	b.seen(func(v agent.View) bool { return evaluated(v, "psi_memory_full") })
	f.psi(6_000_000)
	n = b.waitFor("a note that vm-b is still leaving", n, func(r agent.Record) bool {
		return r.Action == "none" && strings.Contains(r.Reason, "previous victim")
	})
	// A round after the note's (the view is published at a round's end,
	// after its lines), evaluated and not firing: a window too short to
	// give a rate is no sign that the stall has left it.
	noted := b.log.All()[n-1].Time
	b.seen(func(v agent.View) bool { return v.Time.After(noted) && evaluated(v, "psi_memory_full") && !firing(v) })
	if err := os.RemoveAll(filepath.Join(f.root, "cgroup/node/vm-b")); err != nil {
		t.Fatal(err)
	}
	b.waitFor("vm-b's outcome", 0, b.line("evicted", "vm-b"))
	b.stop()
	golden += "--- restarted\n" + b.masked()

	// Collapse runs of an identical line (a round may repeat a note while
	// a file is being replaced) so the golden file holds what was decided,
	// not how many rounds saw it.
	got := collapseRepeats(golden)
	path := filepath.Join("testdata", "agent-e2e.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("decision log differs from %s (rerun with -update-golden after checking it):\n--- got\n%s--- want\n%s", path, got, want)
	}
	t.Logf("end to end on the fixture tree in %.1f s", time.Since(start).Seconds())
}

func collapseRepeats(s string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if len(out) == 0 || out[len(out)-1] != l {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
