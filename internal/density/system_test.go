//go:build system

package density

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// testReporter lets a test act on progress.
type testReporter struct {
	t        *testing.T
	onStatus func(step, workers, ready int, elapsed time.Duration)
}

func (r testReporter) Status(step, workers, ready int, elapsed time.Duration, _ float64) {
	if r.onStatus != nil {
		r.onStatus(step, workers, ready, elapsed)
	}
}
func (r testReporter) StepDone(s results.Step) {
	r.t.Logf("step %d: %d workers, %.0f pages/s, failed %v %s", s.Index, s.Workers, s.AggregatePagesPerSec, s.Failed, s.FailReason)
}
func (r testReporter) Note(format string, args ...any) { r.t.Logf(format, args...) }

func smallNode(t *testing.T) Params {
	testenv.RequireRoot(t)
	return Params{Backend: "cgroup", Deployments: []int{1, 2, 3}, VMMemoryBytes: 96 << 20, MemorySizeBytes: 64 << 20,
		Scan: memload.ScanRandom, WriteFraction: 1, Content: memload.Content{Kind: memload.ContentRandom},
		WorkloadRuntime: 2 * time.Second, OvercommitPercent: 100, OverheadBytes: DefaultOverheadBytes, Repeat: 1,
		StopOnFailure: true, NodeMemoryBytes: 384 << 20, Swap: "file", SwapFileBytes: 512 << 20, Seed: 1,
		Interval: 500 * time.Millisecond, Out: t.TempDir(), Executable: testenv.HeadroomBinary(t)}
}

// assertRestored checks that the run left no swap or node cgroup behind.
func assertRestored(t *testing.T) {
	t.Helper()
	node, err := NodeCgroupPath(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	testenv.AssertRestored(t, SwapDirPrefix, node)
}

func TestSystemShortRampWithAgent(t *testing.T) {
	p := smallNode(t)
	p.Agent = true
	dir, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	if err != nil {
		t.Fatal(err)
	}
	read, err := results.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Steps) != 3 || read.StopReason != "completed" || run.Node.SwapReadIOPS <= 0 || read.Machine.Kernel == "" {
		t.Fatalf("run %+v", read)
	}
	for _, s := range read.Steps {
		if s.Failed || s.AggregatePagesPerSec <= 0 || len(s.PerWorker) != s.Workers || s.CreateP50Seconds <= 0 {
			t.Fatalf("step %+v", s)
		}
	}
	timeline, err := results.ReadTimeline(dir)
	if err != nil || len(timeline) < 3 {
		t.Fatalf("timeline: %d samples, %v", len(timeline), err)
	}
	workers, _ := os.ReadFile(filepath.Join(dir, results.WorkersFile))
	for step := 1; step <= 3; step++ {
		if !strings.Contains(string(workers), fmt.Sprintf(`{"step":%d,`, step)) {
			t.Errorf("workers.jsonl has no records of step %d", step)
		}
	}
	agent, _ := os.ReadFile(filepath.Join(dir, "agent.jsonl"))
	if !strings.Contains(string(agent), `"action":"set_swap"`) {
		t.Errorf("the agent's decisions are not in the results: %q", agent)
	}
}

func TestSystemWorkerKilledMidStep(t *testing.T) {
	p := smallNode(t)
	p.Deployments = []int{2, 3}
	p.WorkloadRuntime = 5 * time.Second
	killed := false
	rep := testReporter{t: t, onStatus: func(step, workers, ready int, elapsed time.Duration) {
		if killed || ready < workers {
			return
		}
		node, _ := NodeCgroupPath(os.Getpid())
		procs := filepath.Join(node, "w1", "cgroup.procs")
		b, _ := os.ReadFile(procs)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			syscall.Kill(pid, syscall.SIGKILL)
			killed = true
		}
	}}
	_, run, err := Run(context.Background(), p, rep)
	assertRestored(t)
	if err != nil {
		t.Fatal(err)
	}
	if !killed || len(run.Steps) != 1 || !run.Steps[0].Failed {
		t.Fatalf("killed %v, steps %+v", killed, run.Steps)
	}
	s := run.Steps[0]
	if !strings.Contains(s.FailReason, "worker w1") || strings.Contains(s.FailReason, "OOM") || s.OOMKills != 0 ||
		!strings.Contains(run.StopReason, "worker w1") {
		t.Fatalf("fail reason %q (OOM kills %d), stop reason %q", s.FailReason, s.OOMKills, run.StopReason)
	}
	if w2 := s.PerWorker[1]; w2.Error != "" || w2.PagesPerSec <= 0 {
		t.Fatalf("the surviving worker: %+v", w2)
	}
}

func TestSystemInterruptKeepsPartialResults(t *testing.T) {
	p := smallNode(t)
	p.WorkloadRuntime = 20 * time.Second
	p.Deployments = []int{1, 2}
	ctx, cancel := context.WithCancelCause(context.Background())
	rep := testReporter{t: t, onStatus: func(step, workers, ready int, elapsed time.Duration) {
		if step == 1 && ready == workers && elapsed > 2*time.Second {
			cancel(errors.New("signal: interrupt"))
		}
	}}
	start := time.Now()
	dir, run, err := Run(ctx, p, rep)
	assertRestored(t)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("interrupted run took %s to end", took)
	}
	read, err := results.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !run.Interrupted || !read.Interrupted || !strings.Contains(read.StopReason, "interrupt") || len(read.Steps) != 1 {
		t.Fatalf("run %+v", read)
	}
	if w := read.Steps[0].PerWorker; len(w) != 1 || w[0].PagesPerSec <= 0 {
		t.Fatalf("the interrupted step's measurements were lost: %+v", read.Steps[0])
	}
}

// A zram tier sits in front of the swap file for the run and is reset after.
func TestSystemZramTier(t *testing.T) {
	p := smallNode(t)
	p.Deployments = []int{1}
	p.ZramBytes = 128 << 20
	_, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	if err != nil {
		t.Fatal(err)
	}
	var zram, file bool
	for _, d := range run.Machine.SwapDevices {
		zram = zram || (strings.Contains(d.Path, "zram") && d.Priority == 100)
		file = file || strings.Contains(d.Path, SwapDirPrefix)
	}
	if !zram || !file || !strings.Contains(run.Node.SwapTier, "zram") || run.Steps[0].Failed {
		t.Fatalf("swap devices %+v, node %+v, step %+v", run.Machine.SwapDevices, run.Node, run.Steps[0])
	}
	swaps, _ := os.ReadFile("/proc/swaps")
	if strings.Contains(string(swaps), "zram") {
		t.Fatalf("zram still swapping:\n%s", swaps)
	}
	for _, z := range []string{"/sys/block/zram0/disksize", "/sys/block/zram1/disksize"} {
		if b, err := os.ReadFile(z); err == nil && strings.TrimSpace(string(b)) != "0" {
			t.Fatalf("%s = %s after the run", z, b)
		}
	}
}
