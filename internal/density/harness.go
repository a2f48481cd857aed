package density

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/probe"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/units"
)

// Reporter receives progress; the command prints it.
type Reporter interface {
	// Status is the current state of a step, updated often.
	Status(step, workers, ready int, elapsed time.Duration, pagesPerSec float64)
	// StepDone is called with each finished step.
	StepDone(s results.Step)
	// Note is a one-line message (swap set up, admission refused, ...).
	Note(format string, args ...any)
}

// Harness runs one density ramp.
type Harness struct {
	rates    rates // latest interval rate per worker, for progress
	p        Params
	rep      Reporter
	dir      string
	backend  Backend
	metaDir  string
	step     atomic.Int64 // current step index, for the node timeline
	workers  *results.JSONLines
	timeline *results.JSONLines

	// The step's workers as the sampler sees them, and each one's last
	// sample taken during the measured phase.
	mu         sync.Mutex
	current    []*worker
	measuring  bool
	lastSample map[string]results.WorkerSample
}

// Run executes the ramp and returns the results directory. Partial results
// are written after every step, so an interrupted or failed run keeps what
// it measured; everything the run set up (swap, zram, cgroups, processes)
// is removed before Run returns.
func Run(ctx context.Context, p Params, rep Reporter) (dir string, run *results.Run, err error) {
	if err := p.Validate(); err != nil {
		return "", nil, err
	}
	if err := preflight(p); err != nil {
		return "", nil, err
	}
	h := &Harness{p: p, rep: rep}
	h.dir = p.Out
	if h.dir == "" {
		h.dir = filepath.Join("results", time.Now().Format("20060102-150405")+"-density")
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("results directory: %w", err)
	}
	run = &results.Run{Kind: "density", Label: p.Label, StartedAt: time.Now().UTC(), Params: p.AsMap()}
	if run.Label == "" {
		run.Label = fmt.Sprintf("%s %s", p.Scan, units.FormatBytes(p.MemorySizeBytes))
	}
	defer func() {
		run.FinishedAt = time.Now().UTC()
		if werr := results.WriteRun(h.dir, run); werr != nil && err == nil {
			err = werr
		}
	}()

	swap := &swaptier.Setup{}
	defer func() {
		if uerr := swap.Down(); uerr != nil {
			rep.Note("could not remove the run's swap: %v", uerr)
			if err == nil {
				err = uerr
			}
		}
	}()
	if spec := p.SwapSpec(); spec.File != nil || spec.Zram != nil || spec.Zswap != nil {
		if swap, err = swaptier.Up(spec, ""); err != nil {
			swap = &swaptier.Setup{}
			return h.dir, run, err
		}
		for _, m := range swap.Made {
			rep.Note("swap: %s %s enabled", m.Kind, m.Device)
		}
	}
	run.Machine = machineFacts()
	run.Node = h.nodeFacts(run.Machine)

	backend, err := h.prepareNode(run.Node)
	if err != nil {
		return h.dir, run, err
	}
	h.backend = backend
	defer func() {
		if cerr := backend.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	run.Node.Scope = h.backend.Scope().Path()

	if h.workers, err = results.AppendLines(filepath.Join(h.dir, results.WorkersFile)); err != nil {
		return h.dir, run, err
	}
	defer h.workers.Close()
	if h.timeline, err = results.AppendLines(filepath.Join(h.dir, results.TimelineFile)); err != nil {
		return h.dir, run, err
	}
	defer h.timeline.Close()
	stopSampler := h.sampleNode(ctx)
	defer stopSampler()

	var agentProc *runningAgent
	if p.Agent {
		if agentProc, err = h.startAgent(); err != nil {
			return h.dir, run, err
		}
		defer agentProc.stop()
	}

	nodeMemory := run.Node.MemoryBytes
	index := 0
ramp:
	for _, n := range p.Deployments {
		if refused := results.AdmissionRefused(n, run.Node.RequestBytes, nodeMemory); refused != "" {
			run.StopReason = refused
			rep.Note("%s", run.StopReason)
			break
		}
		for r := 1; r <= p.Repeat; r++ {
			if ctx.Err() != nil {
				break ramp
			}
			if agentProc != nil && agentProc.hasExited() {
				// The run was asked for with the agent: without it, the
				// next steps would measure another configuration.
				run.StopReason = agentProc.exitReason()
				rep.Note("%s", run.StopReason)
				break ramp
			}
			index++
			s := h.runStep(ctx, index, n, r)
			run.Steps = append(run.Steps, s)
			rep.StepDone(s)
			if werr := results.WriteRun(h.dir, run); werr != nil {
				return h.dir, run, werr
			}
			if s.Failed && p.StopOnFailure {
				run.StopReason = fmt.Sprintf("step %d (%d workers): %s", index, n, s.FailReason)
				break ramp
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		run.Interrupted = true
		run.StopReason = "interrupted: " + context.Cause(ctx).Error()
	case run.StopReason == "":
		run.StopReason = "completed"
	}
	return h.dir, run, nil
}

func machineFacts() results.Machine {
	m := results.Machine{CPUs: runtime.NumCPU()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if mem, err := host.ReadMemory(); err == nil {
		m.MemTotalBytes = mem.TotalBytes
	}
	if swaps, err := host.ReadSwaps(); err == nil {
		for _, s := range swaps {
			m.SwapDevices = append(m.SwapDevices, results.SwapDevice{Path: s.Path, Type: s.Type, SizeBytes: s.SizeBytes, Priority: s.Priority})
		}
	}
	return m
}

// nodeFacts sizes the node and measures its swap device's random-read rate
// (the physical limit of page-ins shown on the report).
func (h *Harness) nodeFacts(m results.Machine) results.Node {
	n := results.Node{MemoryBytes: h.p.NodeMemoryBytes, RequestBytes: h.p.RequestBytes()}
	if n.MemoryBytes == 0 {
		n.MemoryBytes = m.MemTotalBytes
	}
	if z := h.p.Zswap; z != nil {
		n.SwapTier = "zswap"
		if z.MaxPoolPercent > 0 {
			n.SwapTier += fmt.Sprintf(" (pool %d%% of RAM)", z.MaxPoolPercent)
		}
	}
	var deviceDir string
	for _, d := range m.SwapDevices {
		if host.IsZram(d.Path) {
			n.SwapTier = fmt.Sprintf("zram %s", units.FormatBytes(d.SizeBytes))
		}
		if h.p.Swap != "" {
			n.SwapBytes += d.SizeBytes
		}
		if d.Type == "file" && deviceDir == "" {
			deviceDir = filepath.Dir(d.Path)
		}
	}
	if deviceDir != "" {
		res, err := probe.Run(context.Background(), probe.Options{Dir: deviceDir, ScratchBytes: 64 << 20, Duration: time.Second, Jobs: 4})
		if err == nil {
			n.SwapReadIOPS = res.ReadIOPS
			h.rep.Note("swap device: 4 KiB random read %.0f IOPS", res.ReadIOPS)
		} else {
			h.rep.Note("swap device not probed: %v", err)
		}
	}
	return n
}

// prepareNode creates the run's node through the backend, limited to the
// node's RAM and swap when --node-memory is set.
func (h *Harness) prepareNode(node results.Node) (Backend, error) {
	b, err := newBackend(h.p, node.SwapBytes)
	if err != nil {
		return nil, err
	}
	h.metaDir = filepath.Join(h.dir, "workloads")
	if err := os.MkdirAll(h.metaDir, 0o755); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// worker is one started worker of a step, with when it was created.
type worker struct {
	Worker
	created time.Time
}

// runStep runs n workers together once and tears them down.
func (h *Harness) runStep(ctx context.Context, index, n, repeat int) results.Step {
	h.step.Store(int64(index))
	step := results.Step{Index: index, Workers: n, Repeat: repeat, Started: time.Now().UTC()}
	stepStart := time.Now()
	ctl, err := loadctl.Listen("unix:" + filepath.Join(os.TempDir(), fmt.Sprintf("headroom-density-%d-%d.sock", os.Getpid(), index)))
	if err != nil {
		step.Failed, step.FailReason = true, err.Error()
		return step
	}
	defer ctl.Close()

	readyCtx, cancelReady := context.WithCancelCause(ctx)
	defer cancelReady(nil)
	workers := make([]*worker, 0, n)
	defer func() {
		h.setWorkers(nil, false)
		h.teardown(workers)
	}()
	params := h.p.LoadParams()
	for i := 1; i <= n; i++ {
		w, err := h.startWorker(fmt.Sprintf("w%d", i), params, uint64(index*100000+i), ctl.Addr())
		if err != nil {
			step.Failed, step.FailReason = true, err.Error()
			return step
		}
		workers = append(workers, w)
		h.setWorkers(workers, false)
		go func() {
			<-w.Exited()
			cancelReady(fmt.Errorf("worker %s exited before it was ready: %s", w.Name(), w.Failure()))
		}()
	}
	readyTimeout := 60*time.Second + time.Duration(n)*time.Duration(h.p.MemorySizeBytes/(20<<20))*time.Second
	timeoutCtx, cancelTimeout := context.WithTimeoutCause(readyCtx, readyTimeout, fmt.Errorf("not ready within %s", readyTimeout))
	defer cancelTimeout()
	progressDone := h.progress(index, n, stepStart, ctl)
	defer progressDone()
	if err := ctl.AwaitReady(timeoutCtx, n); err != nil {
		step.Failed, step.FailReason = true, "workers failed to start: "+err.Error()
		h.countStartEvictions(&step, workers, stepStart)
		return step
	}

	before := h.readCounters()
	h.setWorkers(workers, true)
	ctl.Start(h.backend.StartLead(n))
	collectCtx, cancelCollect := context.WithTimeout(ctx, h.p.WorkloadRuntime+30*time.Second)
	defer cancelCollect()
	silence := max(15*time.Second, 10*h.p.Interval)
	h.rates.reset()
	res := ctl.Collect(collectCtx, loadctl.CollectOptions{StopGrace: 10 * time.Second, Silence: silence, OnRecord: func(r memload.Record) {
		h.rates.set(r.Worker, r.PagesPerSec)
		h.workers.Write(struct {
			Step   int `json:"step"`
			Repeat int `json:"repeat"`
			memload.Record
		}{index, repeat, r})
	}})
	after := h.readCounters()
	h.mu.Lock()
	h.measuring = false
	last := h.lastSample
	h.mu.Unlock()
	h.summarize(&step, res, workers, last, before, after)
	if ctx.Err() != nil {
		step.Failed, step.FailReason = true, "interrupted: "+context.Cause(ctx).Error()
	}
	step.Seconds = time.Since(stepStart).Seconds()
	return step
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// startWorker writes the worker's metadata for the agent and starts it
// through the backend.
func (h *Harness) startWorker(name string, params memload.Params, seed uint64, controller string) (*worker, error) {
	md := map[string]any{"name": name, "priority": 0, "memoryRequest": h.p.RequestBytes()}
	for k, v := range h.backend.Metadata(name) {
		md[k] = v
	}
	b, _ := json.Marshal(md)
	if err := os.WriteFile(filepath.Join(h.metaDir, name+".json"), b, 0o644); err != nil {
		return nil, err
	}
	params.Seed += seed
	created := time.Now()
	w, err := h.backend.StartWorker(name, h.p.VMMemoryBytes, loadrun.Args(params), controller)
	if err != nil {
		return nil, err
	}
	return &worker{Worker: w, created: created}, nil
}

// teardown stops every worker (then kills what is left after a grace
// period) and releases them.
func (h *Harness) teardown(workers []*worker) {
	for _, w := range workers {
		select {
		case <-w.Exited():
		default:
			w.Stop()
		}
	}
	grace := time.After(5 * time.Second)
	for _, w := range workers {
		select {
		case <-w.Exited():
		case <-grace:
			for _, other := range workers {
				other.Kill()
			}
			<-w.Exited()
		}
	}
	for _, w := range workers {
		if err := w.Remove(); err != nil {
			h.rep.Note("teardown: %v", err)
		}
		os.Remove(filepath.Join(h.metaDir, w.Name()+".json"))
	}
}
