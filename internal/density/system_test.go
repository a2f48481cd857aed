//go:build system

package density

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// testReporter lets a test act on progress.
type testReporter struct {
	t        *testing.T
	onStatus func(step, workers, ready int, elapsed time.Duration)
	onRate   func(step int, pagesPerSec float64)
}

func (r testReporter) Status(step, workers, ready int, elapsed time.Duration, pagesPerSec float64) {
	if r.onStatus != nil {
		r.onStatus(step, workers, ready, elapsed)
	}
	if r.onRate != nil {
		r.onRate(step, pagesPerSec)
	}
}

// interruptOnceMeasured is a reporter that cancels the run as Ctrl-C
// would, 2 s after step 1 first reports a rate. The step's workers start
// at one instant, so by then each has measured; cancelling on readiness
// alone raced the start (a worker stopped before it began has no rate).
func interruptOnceMeasured(t *testing.T, cancel context.CancelCauseFunc) testReporter {
	var firstRate time.Time
	return testReporter{t: t, onRate: func(step int, pagesPerSec float64) {
		switch {
		case step != 1 || pagesPerSec <= 0:
		case firstRate.IsZero():
			firstRate = time.Now()
		case time.Since(firstRate) > 2*time.Second:
			cancel(errors.New("signal: interrupt"))
		}
	}}
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

// holdStateDir takes an agent's state directory for the test, as a
// running agent holds it, and leaves the machine as it was.
func holdStateDir(t *testing.T, dir string) {
	t.Helper()
	_, statErr := os.Stat(dir)
	_, lockErr := os.Stat(filepath.Join(dir, agent.StateLockFile))
	unlock, err := agent.LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unlock()
		switch {
		case os.IsNotExist(statErr):
			os.RemoveAll(dir)
		case os.IsNotExist(lockErr):
			os.Remove(filepath.Join(dir, agent.StateLockFile))
		}
	})
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
	// A node agent runs on this host: the run's agent keeps its own
	// journal (on the node agent's, it would not start).
	holdStateDir(t, agent.DefaultConfig().StateDir)
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
		// The harness creates the workers one after another.
		for i, w := range s.PerWorker {
			if first := i == 0; first != (w.CreateOffsetSeconds == 0) || (!first && w.CreateOffsetSeconds <= s.PerWorker[i-1].CreateOffsetSeconds) {
				t.Errorf("step %d: worker %s created %.4f s after the first", s.Index, w.Name, w.CreateOffsetSeconds)
			}
		}
		// Its workers touch memory flat out: at least one core busy.
		if s.CPUBusyCores < 0.5 || s.CPUBusyCores > float64(runtime.NumCPU())+0.1 {
			t.Errorf("step %d: %.2f CPU cores busy on a node of %d", s.Index, s.CPUBusyCores, runtime.NumCPU())
		}
	}
	timeline, err := results.ReadTimeline(dir)
	if err != nil || len(timeline) < 3 {
		t.Fatalf("timeline: %d samples, %v", len(timeline), err)
	}
	// Every worker's CPU time grows while it runs, and so does the node's.
	workerCPU := map[string]float64{}
	for i, s := range timeline {
		if i > 0 && s.CPUBusySeconds <= timeline[i-1].CPUBusySeconds {
			t.Errorf("node busy CPU %.2f s at %s, %.2f s a sample before", s.CPUBusySeconds, s.Time, timeline[i-1].CPUBusySeconds)
		}
		for _, w := range s.Workers {
			workerCPU[w.Name] = max(workerCPU[w.Name], w.CPUSeconds)
		}
	}
	for name, cpu := range workerCPU {
		if cpu <= 0 {
			t.Errorf("worker %s: no CPU time in the timeline", name)
		}
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

// killW1WhenReady is a reporter that SIGKILLs worker w1's processes (a
// VM's QEMU) once every worker of the step is ready, and sets killed.
func killW1WhenReady(t *testing.T, killed *bool) testReporter {
	return testReporter{t: t, onStatus: func(step, workers, ready int, elapsed time.Duration) {
		if *killed || ready < workers {
			return
		}
		node, _ := NodeCgroupPath(os.Getpid())
		b, _ := os.ReadFile(filepath.Join(node, "w1", "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			syscall.Kill(pid, syscall.SIGKILL)
			*killed = true
		}
	}}
}

func TestSystemWorkerKilledMidStep(t *testing.T) {
	p := smallNode(t)
	p.Deployments = []int{2, 3}
	p.WorkloadRuntime = 5 * time.Second
	killed := false
	rep := killW1WhenReady(t, &killed)
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
	rep := interruptOnceMeasured(t, cancel)
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
	p.Zram = &tierspec.ZramSpec{SizeBytes: 128 << 20, Priority: tierspec.DefaultZramPriority}
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

// qemuNode is the target run: 1..6 micro-VMs of 384 MiB, each with
// a 256 MiB workload, on a 1.5 GiB node with 2 GiB of swap.
func qemuNode(t *testing.T) Params {
	img := testenv.GuestImage(t)
	return Params{Backend: "qemu", Deployments: []int{1, 2, 3, 4, 5, 6}, VMMemoryBytes: 384 << 20, MemorySizeBytes: 256 << 20,
		Scan: memload.ScanRandom, WriteFraction: 1, Content: memload.Content{Kind: memload.ContentRandom},
		WorkloadRuntime: 8 * time.Second, OvercommitPercent: 250, OverheadBytes: DefaultVMOverheadBytes, Repeat: 1,
		StopOnFailure: false, NodeMemoryBytes: 1536 << 20, Swap: "file", SwapFileBytes: 2 << 30, Seed: 1,
		Interval: time.Second, Out: t.TempDir(), Executable: testenv.HeadroomBinary(t), Image: &img}
}

// assertNoVMsLeft checks that no QEMU process or VM directory outlived the run.
func assertNoVMsLeft(t *testing.T) {
	t.Helper()
	if q, _ := exec.Command("pgrep", "-x", "qemu-system-x86").Output(); len(strings.TrimSpace(string(q))) > 0 {
		t.Errorf("QEMU processes left: %s", q)
	}
	if dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "headroom-density-vms-*")); len(dirs) > 0 {
		t.Errorf("VM directories left: %v", dirs)
	}
}

// The ramp of micro-VMs shows the three regimes, and every step records
// the VMs' start-up phases, their host overhead and the guests' own view.
func TestSystemQEMURampShowsRegimes(t *testing.T) {
	p := qemuNode(t)
	dir, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	assertNoVMsLeft(t)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Steps) != 6 || run.StopReason != "completed" {
		t.Fatalf("%d steps, stop reason %q", len(run.Steps), run.StopReason)
	}
	for _, s := range run.Steps {
		if s.Failed {
			t.Errorf("step %d failed: %s", s.Index, s.FailReason)
		}
		if len(s.CreatePhases) != 5 || s.CreationRatePerMinute <= 0 {
			t.Errorf("step %d: phases %+v, rate %.1f/min", s.Index, s.CreatePhases, s.CreationRatePerMinute)
		}
		for _, w := range s.PerWorker {
			if w.VM == nil || w.VM.BootCPUSeconds <= 0 || w.VM.Host == nil || w.VM.Host.OverheadBytes == 0 || w.VM.Host.Guest == nil ||
				w.VM.Host.CPUSeconds < w.VM.BootCPUSeconds {
				t.Errorf("step %d %s: VM result %+v", s.Index, w.Name, w.VM)
			}
		}
	}
	reg := run.Regimes()
	last := run.Steps[len(run.Steps)-1]
	if reg.KneeWorkers < 1 || reg.KneeWorkers >= 6 || last.AggregatePagesPerSec > reg.PeakPagesPerSec/2 || last.SwapInPagesPerSec <= 0 {
		t.Errorf("regimes %+v; last step %.0f pages/s, %.0f swap-ins/s", reg, last.AggregatePagesPerSec, last.SwapInPagesPerSec)
	}
	// Six VMs of 432 MiB each with its overhead on a 1.5 GiB node: some
	// hundreds of MiB out, within the run's swap file.
	if last.SwapUsedBytes < 256<<20 || last.SwapUsedBytes > p.SwapFileBytes {
		t.Errorf("last step: %d MiB of swap in use, want 256 MiB to the file's %d MiB", last.SwapUsedBytes>>20, p.SwapFileBytes>>20)
	}
	timeline, err := results.ReadTimeline(dir)
	if err != nil {
		t.Fatal(err)
	}
	guestViews := 0
	for _, s := range timeline {
		for _, w := range s.Workers {
			if w.Guest != nil && w.Guest.AvailableBytes > 0 && w.QEMURSSBytes > 0 {
				guestViews++
			}
		}
	}
	if guestViews < 10 {
		t.Errorf("%d timeline samples with a guest's view, want them every second", guestViews)
	}
	t.Logf("regimes: peak %.0f pages/s at %d VMs, last in RAM %d, plateau from %d", reg.PeakPagesPerSec, reg.PeakWorkers, reg.KneeWorkers, reg.PlateauStartWorkers)
}

// A VM that dies mid-step fails the step with the reason and its console,
// and the teardown leaves nothing behind.
func TestSystemQEMUVMKilledMidStep(t *testing.T) {
	p := qemuNode(t)
	p.Deployments, p.StopOnFailure = []int{2}, true
	killed := false
	rep := killW1WhenReady(t, &killed)
	_, run, err := Run(context.Background(), p, rep)
	assertRestored(t)
	assertNoVMsLeft(t)
	if err != nil {
		t.Fatal(err)
	}
	if !killed || len(run.Steps) != 1 || !run.Steps[0].Failed {
		t.Fatalf("killed %v, steps %+v", killed, run.Steps)
	}
	s := run.Steps[0]
	w1 := s.PerWorker[0]
	if !strings.Contains(s.FailReason, "worker w1") || w1.VM == nil || w1.VM.ConsoleTail == "" {
		t.Fatalf("fail reason %q, w1 %+v", s.FailReason, w1.VM)
	}
	if w2 := s.PerWorker[1]; w2.Error != "" || w2.PagesPerSec <= 0 {
		t.Fatalf("the surviving VM: %+v", w2)
	}
}

// With --balloon the agent reclaims the guests' idle page cache
// (--guest-cache) through their balloons on a node too small for all of
// it: memory states and balloon targets in agent.jsonl, granted memory
// below the VMs' size in the timeline, no failed step, nothing left.
func TestSystemQEMUBalloonReclaimsGuestCache(t *testing.T) {
	p := qemuNode(t)
	p.Deployments, p.VMMemoryBytes, p.MemorySizeBytes, p.GuestCacheBytes = []int{3}, 512<<20, 128<<20, 192<<20
	p.NodeMemoryBytes, p.OvercommitPercent, p.WorkloadRuntime = 1<<30, 400, 20*time.Second
	p.Agent, p.Balloon = true, "headroom"
	dir, run, err := Run(context.Background(), p, testReporter{t: t})
	assertRestored(t)
	assertNoVMsLeft(t)
	if disks, _ := filepath.Glob("/var/tmp/headroom-density-cache-*"); len(disks) > 0 {
		t.Errorf("cache disks left: %v", disks)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s := run.Steps[0]; s.Failed || s.OOMKills > 0 {
		t.Fatalf("step %+v", s)
	}
	decisions, err := results.ReadDecisions(dir)
	if err != nil {
		t.Fatal(err)
	}
	states, inflations := 0, 0
	for _, d := range decisions {
		switch {
		case d.Action == "memory_state":
			states++
		case d.Action == "set_balloon" && d.Balloon.TargetBytes < d.Balloon.MaxBytes:
			inflations++
		}
	}
	timeline, err := results.ReadTimeline(dir)
	if err != nil {
		t.Fatal(err)
	}
	least := uint64(p.VMMemoryBytes)
	for _, s := range timeline {
		for _, w := range s.Workers {
			if w.Guest != nil && w.Guest.BalloonActualBytes > 0 {
				least = min(least, w.Guest.BalloonActualBytes)
			}
		}
	}
	if states == 0 || inflations == 0 || least > p.VMMemoryBytes-64<<20 {
		t.Fatalf("%d memory_state and %d inflating set_balloon lines; least granted %d MiB", states, inflations, least>>20)
	}
	t.Logf("%d state changes, %d inflations; least memory granted to a VM %d MiB of %d; %.0f pages/s", states, inflations,
		least>>20, p.VMMemoryBytes>>20, run.Steps[0].AggregatePagesPerSec)
}

// A run asked for with the agent runs with it: an agent that cannot start
// fails the run before any step (naming its last log line), and one that
// dies mid-run ends the ramp after that step, saying so.
func TestSystemRunEndsWithItsAgent(t *testing.T) {
	p := smallNode(t)
	p.Agent = true
	unlock, err := agent.LockStateDir(filepath.Join(p.Out, "agent-state"))
	if err != nil {
		t.Fatal(err)
	}
	_, run, err := Run(context.Background(), p, testReporter{t: t})
	unlock()
	assertRestored(t)
	if err == nil || !strings.Contains(err.Error(), "the agent exited (exit status 2)") || !strings.Contains(err.Error(), "held by another agent") {
		t.Fatalf("a run whose agent could not start: err %v", err)
	}
	if run != nil && len(run.Steps) != 0 {
		t.Fatalf("steps ran without the agent: %+v", run.Steps)
	}

	p.Out = t.TempDir()
	killed := false
	kill := func(step int, pagesPerSec float64) {
		if killed || step != 1 || pagesPerSec <= 0 {
			return
		}
		killed = true
		pid := processWithArg(t, filepath.Join(p.Out, "agent-state"))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Errorf("kill the agent (pid %d): %v", pid, err)
		}
	}
	_, run, err = Run(context.Background(), p, testReporter{t: t, onRate: kill})
	assertRestored(t)
	if err != nil {
		t.Fatal(err)
	}
	if !killed || len(run.Steps) != 1 || !strings.HasPrefix(run.StopReason, "the agent exited (signal: killed)") {
		t.Fatalf("killed %v; %d steps; stop reason %q", killed, len(run.Steps), run.StopReason)
	}
}

// processWithArg is the PID of the one process with arg on its command line.
func processWithArg(t *testing.T, arg string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			if found != 0 {
				t.Fatalf("two processes with %s: %d and %d", arg, found, pid)
			}
			found = pid
		}
	}
	if found == 0 {
		t.Fatalf("no process with %s", arg)
	}
	return found
}
