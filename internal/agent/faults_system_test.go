//go:build system

package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The faults the agent must survive on the real machine (issue 57). Each
// test says which fix its assertion would catch reverted.

// agentProc is the agent binary on a scope of this machine, its decision
// log followed, its log kept, its HTTP address known.
type agentProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *testenv.Buffer
	log    *testenv.Lines[Record]
}

// startAgentProc runs the agent on node's subtree with metaDir's metadata,
// serving HTTP on a free port; stdout, when given, takes the decision log
// instead of the test (which then sees no records).
func startAgentProc(t *testing.T, node *testenv.MemoryCgroup, metaDir string, stdout *os.File, args ...string) *agentProc {
	t.Helper()
	scope := strings.TrimPrefix(node.Path, testenv.CgroupV1MemoryRoot)
	a := &agentProc{t: t, stderr: &testenv.Buffer{}}
	a.cmd = exec.Command(testenv.HeadroomBinary(t), append([]string{"agent", "--scope", scope, "--workloads-dir", metaDir,
		"--listen", "127.0.0.1:0", "--state-dir", t.TempDir()}, args...)...)
	var out io.Reader = strings.NewReader("")
	if stdout != nil {
		a.cmd.Stdout = stdout
	} else {
		pipe, err := a.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		out = pipe
	}
	errPipe, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.log = testenv.FollowLines[Record](out)
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.log.Done()
		a.cmd.Wait()
	})
	addr := testenv.CopyLines(errPipe, a.stderr, "msg=serving addr=")
	select {
	case a.addr = <-addr:
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent did not serve within 10 s; its log:\n%s", a.stderr.String())
	}
	return a
}

// waitFor waits up to d for a decision line past the first `from` for
// which match holds, and returns its index + 1.
func (a *agentProc) waitFor(what string, from int, d time.Duration, match func(Record) bool) int {
	a.t.Helper()
	return a.log.WaitFor(a.t, what, from, d, match, func() string { return "its log:\n" + a.stderr.String() })
}

func (a *agentProc) all() []Record { return a.log.All() }

func setSwapOf(name string) func(Record) bool {
	return func(r Record) bool { return r.Action == policy.ActionSetSwap && r.Workload == name }
}

// get fetches path from the agent's HTTP API.
func (a *agentProc) get(path string) (int, []byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + a.addr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metric is one value of /metrics: the sum over the family's series whose
// labels include every one of labels ("k=v").
func (a *agentProc) metric(name string, labels ...string) float64 {
	a.t.Helper()
	code, body, err := a.get("/metrics")
	if err != nil || code != 200 {
		a.t.Fatalf("GET /metrics: %d %v", code, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		a.t.Fatal(err)
	}
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.Metric {
		have := map[string]bool{}
		for _, l := range m.Label {
			have[l.GetName()+"="+l.GetValue()] = true
		}
		match := true
		for _, l := range labels {
			match = match && have[l]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

func (a *agentProc) snapshot() View {
	a.t.Helper()
	code, body, err := a.get("/v1/snapshot")
	if err != nil || code != 200 {
		a.t.Fatalf("GET /v1/snapshot: %d %v", code, err)
	}
	var v View
	if err := json.Unmarshal(body, &v); err != nil {
		a.t.Fatal(err)
	}
	return v
}

// stop sends SIGTERM and waits for exit status 0.
func (a *agentProc) stop() {
	a.t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.log.Done()
	if err := a.cmd.Wait(); err != nil {
		a.t.Fatalf("the agent after SIGTERM: %v; its log:\n%s", err, a.stderr.String())
	}
}

func writeMeta(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memswLimit is a v1 workload's swap allowance as the kernel holds it.
func memswLimit(t *testing.T, cg *testenv.MemoryCgroup) int64 {
	t.Helper()
	memsw, err := cg.ReadInt("memory.memsw.limit_in_bytes")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := cg.ReadInt("memory.limit_in_bytes")
	if err != nil {
		t.Fatal(err)
	}
	return memsw - limit
}

// The agent SIGKILLed right after it chose a victim that takes 5 s to
// shut down (its memory held meanwhile), and a new one started: the new
// agent resumes the eviction from the journal, chooses no second victim
// for the same pressure, sets the same allowances again, and its metrics
// start from zero. (Without the journal, the new agent evicts w-high.)
func TestSystemAgentKilledMidEvictionResumes(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	node := testenv.NewMemoryCgroup(t, 256<<20)
	metaDir, stateDir := t.TempDir(), t.TempDir()
	kids := map[string]*testenv.MemoryCgroup{}
	for name, prio := range map[string]int{"w-low": 1, "w-high": 10} {
		writeMeta(t, metaDir, name, fmt.Sprintf(`{"priority": %d, "memoryRequest": "64Mi"}`, prio))
		kids[name] = node.Child(t, name, 256<<20)
	}
	// 2 × 150 MiB against RAM + 0.1 × swap = 281.6 MiB: swap_utilization
	// fires once both have populated.
	args := []string{"--state-dir", stateDir, "--swap-utilization-threshold-factor", "0.1",
		"--eviction-grace", "30s", "--eviction-deadline", "60s", "--cooldown", "1s"}
	first := startAgentProc(t, node, metaDir, nil, args...)
	first.waitFor("w-low's allowance", 0, 10*time.Second, setSwapOf("w-low"))
	first.waitFor("w-high's allowance", 0, 10*time.Second, setSwapOf("w-high"))
	allowances := map[string]int64{}
	for name, cg := range kids {
		testenv.Eventually(t, 5*time.Second, func() bool { return memswLimit(t, cg) > 0 })
		allowances[name] = memswLimit(t, cg)
	}
	lowLoad := kids["w-low"].Command(testenv.HeadroomBinary(t), "load", "--size", "150Mi", "--scan", "none", "--stop-delay", "5s", "--interval", "10s")
	if err := lowLoad.Start(); err != nil {
		t.Fatal(err)
	}
	lowDone := make(chan error, 1)
	go func() { lowDone <- lowLoad.Wait() }()
	t.Cleanup(func() { lowLoad.Process.Kill() })
	kids["w-high"].StartLoad(t, "--size", "150Mi", "--scan", "none", "--interval", "10s")

	i := first.waitFor("w-low's eviction", 0, 20*time.Second, func(r Record) bool { return r.Action == policy.ActionEvict })
	if victim := first.all()[i-1].Workload; victim != "w-low" {
		t.Fatalf("the first agent chose %s, want w-low", victim)
	}
	// The journal holds the eviction before the signal goes out; SIGKILL
	// as soon as the decision is seen.
	first.cmd.Process.Kill()
	<-first.log.Done()
	first.cmd.Wait()
	killedAt := time.Now()

	second := startAgentProc(t, node, metaDir, nil, args...)
	select {
	case err := <-lowDone:
		t.Logf("w-low's load exited %v, %.1f s after the first agent was killed", err, time.Since(killedAt).Seconds())
	case <-time.After(20 * time.Second):
		t.Fatal("w-low never left")
	}
	// Past the cool-down, with the pressure gone: no second victim was
	// chosen while w-low was leaving, nor after.
	time.Sleep(2 * time.Second)
	for _, r := range second.all() {
		if r.Action == policy.ActionEvict {
			line, _ := json.Marshal(r)
			t.Fatalf("the new agent chose a second victim for the same pressure: %s", line)
		}
	}
	n := second.waitFor("w-low's resumed eviction", 0, time.Second, func(r Record) bool {
		return r.Action == policy.ActionResumeEviction && r.Workload == "w-low"
	})
	second.waitFor("w-low's outcome", n, time.Second, func(r Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == "w-low" && r.Outcome.Result == policy.EvictedGracefully
	})
	for name, cg := range kids {
		if got := memswLimit(t, cg); got != allowances[name] {
			t.Errorf("%s's swap allowance %d after the restart, %d before", name, got, allowances[name])
		}
	}
	if ev := second.metric("headroom_agent_evictions_total"); ev != 0 {
		t.Errorf("the new agent counted %g evictions", ev)
	}
	second.stop()
}

// Swap areas come and go under the agent (swapon of a second file, then
// swapoff of the first): allowances and the utilization threshold follow
// within a second, and nothing is evicted. (Reading the host's swap total
// at the discovery cadence only, the threshold lags.)
func TestSystemSwapoffSwaponUnderAgent(t *testing.T) {
	first := testenv.SwapFile(t, 256<<20)
	const ramBytes = 512 << 20
	node := testenv.NewMemoryCgroup(t, ramBytes)
	metaDir := t.TempDir()
	writeMeta(t, metaDir, "w1", `{"memoryRequest": "128Mi"}`)
	w1 := node.Child(t, "w1", 128<<20)
	// Stats and listing every 30 s: only the sample, every round, may see
	// the swap change.
	config := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(config, []byte("discoverySeconds: 30\nworkloadStatsSeconds: 30\n"), 0o644)
	a := startAgentProc(t, node, metaDir, nil, "--config", config)
	n := a.waitFor("w1's allowance", 0, 10*time.Second, setSwapOf("w1"))

	hostSwap := func() uint64 {
		swaps, err := host.ReadSwaps()
		if err != nil {
			t.Fatal(err)
		}
		var total uint64
		for _, s := range swaps {
			total += s.SizeBytes
		}
		return total
	}
	follows := func(what string) {
		t.Helper()
		swap := hostSwap()
		want := policy.SwapAllowance(policy.Workload{RequestBytes: 128 << 20}, policy.Scope{RAMBytes: ramBytes, SwapBytes: swap})
		start := time.Now()
		n = a.waitFor(what, n, 5*time.Second, func(r Record) bool {
			return setSwapOf("w1")(r) && r.Swap.SwapBytes == want
		})
		t.Logf("%s: host swap %d MiB, w1's allowance %d MiB decided %.0f ms after the change", what, swap>>20, want>>20,
			float64(time.Since(start).Milliseconds()))
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: the allowance followed after %s, want within a second", what, d)
		}
		// The threshold is RAM + 0.8 × the swap the workloads may use: here
		// w1's allowance, the only one.
		testenv.Eventually(t, 2*time.Second, func() bool {
			v := a.snapshot()
			for _, s := range v.Signals {
				if s.Name == policy.SignalSwapUtilization {
					return v.Sample.Scope.SwapBytes == swap && s.Threshold == float64(ramBytes)+0.8*float64(want)
				}
			}
			return false
		})
	}
	testenv.SwapFile(t, 256<<20)
	follows("swapon of a second area")
	if out, err := exec.Command("swapoff", first).CombinedOutput(); err != nil {
		t.Fatalf("swapoff %s: %v %s", first, err, out)
	}
	follows("swapoff of the first area")
	if got := memswLimit(t, w1); got < 0 {
		t.Fatalf("w1's memsw limit %d", got)
	}
	for _, r := range a.all() {
		if r.Action == policy.ActionEvict {
			t.Fatalf("evicted %s on a swap change", r.Workload)
		}
	}
	a.stop()
}

// A workload's metadata file turns corrupt, truncated, oversized and a
// symlink out of its directory: each gives the defaults (no request: no
// swap) and exactly one log line, and the symlink's target (which would
// protect the workload and give it swap) is never read.
func TestSystemWorkloadMetadataFaults(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	node := testenv.NewMemoryCgroup(t, 512<<20)
	metaDir := t.TempDir()
	good := `{"priority": 3, "memoryRequest": "128Mi"}`
	writeMeta(t, metaDir, "w1", good)
	w1 := node.Child(t, "w1", 128<<20)
	outside := filepath.Join(t.TempDir(), "w1.json")
	os.WriteFile(outside, []byte(`{"memoryRequest": "512Mi", "protected": true}`), 0o644)

	// Metadata is re-read at the stats refresh: every half second here.
	config := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(config, []byte("workloadStatsSeconds: 0.5\n"), 0o644)
	a := startAgentProc(t, node, metaDir, nil, "--config", config)
	n := a.waitFor("w1's allowance", 0, 10*time.Second, func(r Record) bool { return setSwapOf("w1")(r) && r.Swap.SwapBytes > 0 })
	faults := []struct {
		name  string
		write func(path string)
	}{
		{"corrupt", func(p string) { os.WriteFile(p, []byte(`{"priority": 3, "memoryRequest": 128Mi}`), 0o644) }},
		{"truncated", func(p string) { os.WriteFile(p, []byte(good[:len(good)/2]), 0o644) }},
		{"oversized", func(p string) { os.WriteFile(p, []byte(good+strings.Repeat(" ", 70<<10)), 0o644) }},
		{"symlink out of its directory", func(p string) { os.Symlink(outside, p) }},
	}
	for i, f := range faults {
		path := filepath.Join(metaDir, "w1.json")
		os.Remove(path)
		f.write(path)
		n = a.waitFor(f.name+": the defaults", n, 10*time.Second, func(r Record) bool { return setSwapOf("w1")(r) && r.Swap.SwapBytes == 0 })
		testenv.Eventually(t, 5*time.Second, func() bool { return memswLimit(t, w1) == 0 })
		// A few rounds more: still one line for this file.
		time.Sleep(time.Second)
		if got := strings.Count(a.stderr.String(), "workload metadata unusable"); got != i+1 {
			t.Fatalf("%s: %d log lines on unusable metadata after %d faults, want one each:\n%s", f.name, got, i+1, a.stderr.String())
		}
		for _, w := range a.snapshot().Workloads {
			if w.Name == "w1" && (w.Protected || w.Priority != 0) {
				t.Fatalf("%s: w1 is %+v, want the defaults", f.name, w.Workload)
			}
		}
		os.Remove(path)
		writeMeta(t, metaDir, "w1", good)
		n = a.waitFor(f.name+": the good file again", n, 10*time.Second, func(r Record) bool { return setSwapOf("w1")(r) && r.Swap.SwapBytes > 0 })
	}
	if got := a.metric("headroom_agent_read_errors_total", "source=metadata"); got != float64(len(faults)) {
		t.Errorf("read_errors_total{source=metadata} %g, want %d", got, len(faults))
	}
	a.stop()
}

// The decision log's file system fills (a 16 KiB tmpfs): the agent goes
// on deciding and acting — every one of 120 workloads gets its allowance in
// the kernel — and counts the lines it lost.
func TestSystemDecisionLogOnFullFileSystem(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	node := testenv.NewMemoryCgroup(t, 1<<30)
	metaDir := t.TempDir()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16k", "headroom-test-log", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("restore: umount %s: %v %s", mnt, err, out)
		}
	})
	logFile, err := os.Create(filepath.Join(mnt, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	const workloads = 120
	var kids []*testenv.MemoryCgroup
	for i := range workloads {
		name := fmt.Sprintf("w%03d", i)
		writeMeta(t, metaDir, name, `{"memoryRequest": "8Mi"}`)
		kids = append(kids, node.Child(t, name, 64<<20))
	}
	a := startAgentProc(t, node, metaDir, logFile)
	for _, cg := range kids {
		testenv.Eventually(t, 10*time.Second, func() bool { return memswLimit(t, cg) > 0 })
	}
	var lost float64
	testenv.Eventually(t, 5*time.Second, func() bool { lost = a.metric("headroom_agent_decision_log_lost_lines_total"); return lost > 0 })
	fi, _ := logFile.Stat()
	t.Logf("%d workloads given their allowance; decision log %d B on a 16 KiB tmpfs, %g lines lost", workloads, fi.Size(), lost)
	healthy := time.Now()
	testenv.Eventually(t, 10*time.Second, func() bool { code, _, err := a.get("/healthz"); return err == nil && code == 200 })
	t.Logf("healthy after %.2f s more", time.Since(healthy).Seconds())
	a.stop()
}

// Workload churn: 1000 cgroups made at 10 a second, each removed 3 s
// later. Every one gets its allowance; the agent's RSS, goroutines and
// open files stay flat.
func TestSystemWorkloadChurn(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	node := testenv.NewMemoryCgroup(t, 1<<30)
	metaDir := t.TempDir()
	a := startAgentProc(t, node, metaDir, nil)
	const (
		total    = 1000
		perSec   = 10
		lifetime = 3 * time.Second
	)
	type kid struct {
		name string
		path string
		gone time.Time
	}
	var alive []kid
	remove := func(k kid) {
		t.Helper()
		os.Remove(filepath.Join(metaDir, k.name+".json"))
		if err := os.Remove(k.path); err != nil {
			t.Fatalf("remove %s: %v", k.path, err)
		}
	}
	defer func() {
		for _, k := range alive {
			os.Remove(filepath.Join(metaDir, k.name+".json"))
			os.Remove(k.path)
		}
	}()
	var startRSS uint64
	var startFDs, startGoroutines int
	tick := time.NewTicker(time.Second / perSec)
	defer tick.Stop()
	for i := 0; i < total || len(alive) > 0; {
		now := <-tick.C
		for len(alive) > 0 && now.After(alive[0].gone) {
			remove(alive[0])
			alive = alive[1:]
		}
		if i < total {
			name := fmt.Sprintf("c%04d", i)
			writeMeta(t, metaDir, name, `{"memoryRequest": "16Mi"}`)
			p := filepath.Join(node.Path, name)
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(p, "memory.limit_in_bytes"), []byte("67108864"), 0o644)
			alive = append(alive, kid{name, p, now.Add(lifetime)})
			i++
		}
		if i == 10*perSec && startRSS == 0 { // warm: 10 s in
			startRSS, startFDs = testenv.ProcessStatus(t, a.cmd.Process.Pid)
			startGoroutines = int(a.metric("go_goroutines"))
			if startGoroutines == 0 {
				t.Fatal("no go_goroutines in /metrics")
			}
		}
	}
	// Every cgroup got its allowance while it lived.
	given := map[string]bool{}
	for _, r := range a.all() {
		if r.Action == policy.ActionSetSwap && r.Swap.SwapBytes > 0 {
			given[r.Workload] = true
		}
	}
	var missing []string
	for i := range total {
		if name := fmt.Sprintf("c%04d", i); !given[name] {
			missing = append(missing, name)
		}
	}
	time.Sleep(2 * time.Second) // the last removals listed
	endRSS, endFDs := testenv.ProcessStatus(t, a.cmd.Process.Pid)
	endGoroutines := int(a.metric("go_goroutines"))
	t.Logf("%d cgroups at %d/s: %d got an allowance; agent RSS %.1f → %.1f MiB, goroutines %d → %d, open files %d → %d",
		total, perSec, total-len(missing), float64(startRSS)/(1<<20), float64(endRSS)/(1<<20), startGoroutines, endGoroutines, startFDs, endFDs)
	if len(missing) > 0 {
		t.Errorf("%d cgroups never got an allowance, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if endRSS > startRSS+16<<20 {
		t.Errorf("the agent's RSS grew by %.1f MiB", float64(endRSS-startRSS)/(1<<20))
	}
	if endGoroutines > startGoroutines+4 || endFDs > startFDs+4 {
		t.Errorf("goroutines %d → %d, open files %d → %d: a leak", startGoroutines, endGoroutines, startFDs, endFDs)
	}
	a.stop()
}

// The HTTP API serves reads only, and no client stalls the loop: write
// methods get 405, a 10 MB header is refused, and while 10,000 slow
// connections hold every slot a new workload still gets its allowance
// within two seconds; once they time out, the API answers again.
func TestSystemHTTPOnlyReadsAndNeverStallsTheLoop(t *testing.T) {
	testenv.SwapFile(t, 256<<20)
	node := testenv.NewMemoryCgroup(t, 512<<20)
	metaDir := t.TempDir()
	writeMeta(t, metaDir, "w1", `{"memoryRequest": "64Mi"}`)
	node.Child(t, "w1", 128<<20)
	a := startAgentProc(t, node, metaDir, nil)
	n := a.waitFor("w1's allowance", 0, 10*time.Second, setSwapOf("w1"))
	if !strings.HasPrefix(DefaultConfig().Listen, "127.0.0.1:") {
		t.Errorf("the default listen address %q is not loopback", DefaultConfig().Listen)
	}

	for _, path := range []string{"/v1/decisions", "/v1/snapshot", "/metrics", "/healthz"} {
		for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			req, _ := http.NewRequest(method, "http://"+a.addr+path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", method, path, resp.StatusCode)
			}
		}
	}

	req, _ := http.NewRequest("GET", "http://"+a.addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 10<<20))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 10 MB header: %d, want 431", resp.StatusCode)
		}
	}

	_, fdsBefore := testenv.ProcessStatus(t, a.cmd.Process.Pid)
	const slow = 10000
	conns := make(chan net.Conn, slow)
	var wg sync.WaitGroup
	for range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", a.addr, 3*time.Second)
			if err != nil {
				return // past the backlog: refused or timed out, as it should be
			}
			c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")) // and never the end of the header
			conns <- c
		}()
	}
	wg.Wait()
	close(conns)
	held := 0
	var open []net.Conn
	for c := range conns {
		open = append(open, c)
		held++
	}
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	// The agent holds at most maxHTTPConnections of them; the rest wait in
	// the kernel's backlog, costing it no file, goroutine or buffer.
	_, fdsFlooded := testenv.ProcessStatus(t, a.cmd.Process.Pid)
	if fdsFlooded > fdsBefore+maxHTTPConnections+8 {
		t.Errorf("the agent holds %d open files in the flood (%d before): it accepts more than %d connections", fdsFlooded, fdsBefore, maxHTTPConnections)
	}
	flooded := time.Now()
	writeMeta(t, metaDir, "w2", `{"memoryRequest": "64Mi"}`)
	node.Child(t, "w2", 128<<20)
	a.waitFor("w2's allowance during the flood", n, 3*time.Second, setSwapOf("w2"))
	t.Logf("%d of %d slow connections established, the agent's open files %d → %d; w2's allowance decided %.2f s into the flood",
		held, slow, fdsBefore, fdsFlooded, time.Since(flooded).Seconds())
	// The held ones time out after 5 s (the read header timeout), 64 at a
	// time; once the clients give up, the API answers again at once.
	for _, c := range open {
		c.Close()
	}
	closed := time.Now()
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, err := a.get("/healthz")
		return err == nil && code == 200
	})
	t.Logf("/healthz answered %.1f s after the slow clients closed", time.Since(closed).Seconds())
	a.stop()
}
