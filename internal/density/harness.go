package density

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/probe"
	"github.com/headroom-dev/headroom/internal/results"
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

	var swap swapSetup
	defer func() {
		if uerr := swap.undo(); uerr != nil {
			rep.Note("could not remove the run's swap: %v", uerr)
			if err == nil {
				err = uerr
			}
		}
	}()
	if p.Swap == "file" {
		if err := swap.addSwapFile(SwapFileDir, p.SwapFileBytes); err != nil {
			return h.dir, run, err
		}
		rep.Note("swap file %s (%s) enabled", swap.file, units.FormatBytes(p.SwapFileBytes))
	}
	if p.ZramBytes > 0 {
		if err := swap.addZram(p.ZramBytes); err != nil {
			return h.dir, run, err
		}
		rep.Note("zram tier %s (%s) enabled in front", swap.zramDev, units.FormatBytes(p.ZramBytes))
	}
	run.Machine = machineFacts()
	run.Node = h.nodeFacts(run.Machine, swap)

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

	if p.Agent {
		stopAgent, err := h.startAgent()
		if err != nil {
			return h.dir, run, err
		}
		defer stopAgent()
	}

	nodeMemory := run.Node.MemoryBytes
	index := 0
ramp:
	for _, n := range p.Deployments {
		total := uint64(n) * run.Node.RequestBytes
		if total > nodeMemory {
			run.StopReason = fmt.Sprintf("admission refused at %d workers: %d × %s requested = %s exceeds the node's %s",
				n, n, units.FormatBytes(run.Node.RequestBytes), units.FormatBytes(total), units.FormatBytes(nodeMemory))
			rep.Note("%s", run.StopReason)
			break
		}
		for r := 1; r <= p.Repeat; r++ {
			if ctx.Err() != nil {
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
func (h *Harness) nodeFacts(m results.Machine, swap swapSetup) results.Node {
	n := results.Node{MemoryBytes: h.p.NodeMemoryBytes, RequestBytes: h.p.RequestBytes()}
	if n.MemoryBytes == 0 {
		n.MemoryBytes = m.MemTotalBytes
	}
	var deviceDir string
	for _, d := range m.SwapDevices {
		if strings.Contains(d.Path, "zram") {
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

// startAgent runs `headroom agent` on the run's node for the whole run;
// its decisions go to agent.jsonl in the results.
func (h *Harness) startAgent() (stop func(), err error) {
	mount := filepath.Dir(h.backend.Scope().Path())
	scope := strings.TrimPrefix(h.backend.Scope().Path(), mount)
	out, err := os.Create(filepath.Join(h.dir, "agent.jsonl"))
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(h.dir, "agent.log"))
	if err != nil {
		out.Close()
		return nil, err
	}
	cmd := exec.Command(h.p.Executable, "agent", "--scope", scope, "--workloads-dir", h.metaDir, "--listen", "")
	cmd.Stdout, cmd.Stderr = out, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		logf.Close()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	h.rep.Note("agent running on %s (pid %d)", scope, cmd.Process.Pid)
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
		logf.Close()
	}, nil
}

// nodeCounters are the cumulative counters step rates are computed from.
type nodeCounters struct {
	at                        time.Time
	pswpin, pswpout, pgmajflt uint64
	psi                       host.PSI
}

func (h *Harness) readCounters() nodeCounters {
	c := nodeCounters{at: time.Now()}
	if v, err := host.ReadVMStat(); err == nil {
		c.pswpin, c.pswpout, c.pgmajflt = v.PswpIn, v.PswpOut, v.PgMajFault
	}
	c.psi, _ = h.readPSI()
	return c
}

func (h *Harness) readPSI() (host.PSI, error) {
	if f := h.backend.Scope().PressureFile(); f != "" {
		if p, err := host.ReadPSIFile(f); err == nil {
			return p, nil
		}
	}
	return host.ReadMemoryPSI()
}

// sampleNode appends a node sample to the timeline once a second.
func (h *Harness) sampleNode(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				c := h.readCounters()
				s := results.Sample{Time: now.UTC(), Step: int(h.step.Load()), PswpIn: c.pswpin, PswpOut: c.pswpout,
					PgMajFault: c.pgmajflt, PSISomeMicros: c.psi.SomeMicros, PSIFullMicros: c.psi.FullMicros}
				if m, err := host.ReadMemory(); err == nil {
					s.MemAvailableBytes = m.AvailableBytes
				}
				if u, err := h.backend.Scope().Usage(); err == nil {
					s.ScopeUsageBytes, s.ScopeSwapBytes = u.UsageBytes, u.SwapBytes
				}
				s.Workers = h.sampleWorkers()
				h.timeline.Write(s)
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// sampleWorkers reads every current worker; during the measured phase the
// samples are kept for the step's results.
func (h *Harness) sampleWorkers() []results.WorkerSample {
	h.mu.Lock()
	ws := append([]*worker(nil), h.current...)
	h.mu.Unlock()
	var out []results.WorkerSample
	for _, w := range ws {
		if s, ok := w.Sample(); ok {
			out = append(out, s)
		}
	}
	h.mu.Lock()
	if h.measuring {
		for _, s := range out {
			h.lastSample[s.Name] = s
		}
	}
	h.mu.Unlock()
	return out
}

// setWorkers tells the sampler which workers exist and whether the
// measured phase runs.
func (h *Harness) setWorkers(ws []*worker, measuring bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.current, h.measuring = ws, measuring
	if measuring {
		h.lastSample = map[string]results.WorkerSample{}
	}
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
	params := h.loadParams()
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

// loadParams are every worker's `headroom load` parameters.
func (h *Harness) loadParams() memload.Params {
	return memload.Params{
		SizeBytes: h.p.MemorySizeBytes, Scan: h.p.Scan, StrideBytes: uint64(os.Getpagesize()),
		WriteFraction: h.p.WriteFraction, RatePagesPerSec: h.p.RatePagesPerSec, Duration: h.p.WorkloadRuntime,
		Content: h.p.Content, Seed: h.p.Seed, HugePages: memload.HugePagesNever, Interval: h.p.Interval,
	}
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

// summarize fills a step from the controller's results, the workers' exits
// and cgroups, and the node counters around the measured phase.
func (h *Harness) summarize(step *results.Step, res []loadctl.Result, workers []*worker, last map[string]results.WorkerSample, before, after nodeCounters) {
	byName := map[string]loadctl.Result{}
	for _, r := range res {
		byName[r.Worker] = r
	}
	// Give workers that failed a moment to exit so their exit status tells
	// an OOM kill from other failures.
	for _, w := range workers {
		if r := byName[w.Name()]; r.Failed() {
			select {
			case <-w.Exited():
			case <-time.After(2 * time.Second):
			}
		}
	}
	step.StartSkewSeconds = loadctl.StartSkew(res).Seconds()
	var first time.Time
	for _, r := range res {
		if !r.StartedAt.IsZero() && (first.IsZero() || r.StartedAt.Before(first)) {
			first = r.StartedAt
		}
	}
	var create []float64
	for _, w := range workers {
		r, ok := byName[w.Name()]
		wr := results.WorkerResult{Name: w.Name()}
		if ok && !r.ReadyAt.IsZero() {
			wr.CreateToReadySeconds = r.ReadyAt.Sub(w.created).Seconds()
			create = append(create, wr.CreateToReadySeconds)
		}
		if r.Populate != nil {
			wr.PopulateSeconds = r.Populate.Seconds
		}
		if !r.StartedAt.IsZero() {
			wr.StartOffsetSeconds = r.StartedAt.Sub(first).Seconds()
		}
		wr.OOMKilled = w.OOMKilled()
		if r.Clock != nil {
			wr.ClockOffsetSeconds = -float64(r.Clock.OffsetNanos) / 1e9
		}
		if wr.VM = w.VM(); wr.VM != nil {
			if s, ok := last[w.Name()]; ok {
				wr.VM.Host = &s
			}
		}
		switch {
		case !ok:
			wr.Error = "never connected to the controller: " + w.Failure()
		case r.Summary != nil:
			wr.PagesPerSec, wr.MajorFaultsPerSec = r.Summary.PagesPerSec, r.Summary.MajorFaultsPerSec
			if reason := r.Summary.StopReason; reason != memload.StopDuration {
				wr.Evicted = strings.Contains(reason, "terminated")
				wr.Error = "stopped early: " + reason
			}
		default:
			wr.Error = r.Err
			select {
			case <-w.Exited():
				if why := w.Failure(); why != "" {
					wr.Error += " (" + why + ")"
				}
			default:
			}
		}
		if wr.OOMKilled {
			wr.Error = "OOM-killed"
		} else if wr.Evicted {
			wr.Error = "evicted (" + wr.Error + ")"
		}
		if wr.Error != "" {
			step.Failed = true
			if step.FailReason == "" {
				step.FailReason = fmt.Sprintf("worker %s %s", w.Name(), wr.Error)
			}
		}
		if wr.OOMKilled {
			step.OOMKills++
		}
		if wr.Evicted {
			step.Evictions++
		}
		step.AggregatePagesPerSec += wr.PagesPerSec
		step.PerWorker = append(step.PerWorker, wr)
	}
	step.CreateP50Seconds = results.Quantile(create, 0.50)
	step.CreateP95Seconds = results.Quantile(create, 0.95)
	step.CreateP99Seconds = results.Quantile(create, 0.99)
	step.CreatePhases = phaseQuantiles(step.PerWorker)
	step.CreationRatePerMinute = creationRate(workers, byName)
	secs := after.at.Sub(before.at).Seconds()
	if secs > 0 {
		step.SwapInPagesPerSec = float64(after.pswpin-before.pswpin) / secs
		step.SwapOutPagesPerSec = float64(after.pswpout-before.pswpout) / secs
		step.MajorFaultsPerSec = float64(after.pgmajflt-before.pgmajflt) / secs
		step.PSISomePercent = float64(after.psi.SomeMicros-before.psi.SomeMicros) / 1e4 / secs
		step.PSIFullPercent = float64(after.psi.FullMicros-before.psi.FullMicros) / 1e4 / secs
	}
}

// phaseQuantiles summarises the VMs' start-up phases; ready (the
// workload populated) comes last.
func phaseQuantiles(ws []results.WorkerResult) []results.PhaseQuantiles {
	var out []results.PhaseQuantiles
	for _, phase := range []string{results.PhaseQEMUStarted, results.PhaseQMPReady, results.PhaseBooted, results.PhaseCommandStarted, results.PhaseReady} {
		var xs []float64
		for _, w := range ws {
			if phase == results.PhaseReady {
				if w.VM != nil && w.CreateToReadySeconds > 0 {
					xs = append(xs, w.CreateToReadySeconds)
				}
			} else if w.VM != nil {
				if v, ok := w.VM.Phases[phase]; ok {
					xs = append(xs, v)
				}
			}
		}
		if len(xs) == 0 {
			continue
		}
		out = append(out, results.PhaseQuantiles{Phase: phase, P50Seconds: results.Quantile(xs, 0.5), P95Seconds: results.Quantile(xs, 0.95),
			P99Seconds: results.Quantile(xs, 0.99), MaxSeconds: results.Quantile(xs, 1)})
	}
	return out
}

// creationRate is workers ready per minute, from the first creation to
// the last ready.
func creationRate(workers []*worker, byName map[string]loadctl.Result) float64 {
	var first, last time.Time
	ready := 0
	for _, w := range workers {
		if first.IsZero() || w.created.Before(first) {
			first = w.created
		}
		if r := byName[w.Name()]; !r.ReadyAt.IsZero() {
			ready++
			if r.ReadyAt.After(last) {
				last = r.ReadyAt
			}
		}
	}
	if ready == 0 || !last.After(first) {
		return 0
	}
	return float64(ready) / last.Sub(first).Minutes()
}

// progress reports the step's state to the reporter every 500 ms.
func (h *Harness) progress(index, n int, start time.Time, ctl *loadctl.Controller) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				h.rep.Status(index, n, ctl.ReadyCount(), time.Since(start), h.rates.sum())
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// rates keeps each worker's latest interval rate.
type rates struct {
	mu sync.Mutex
	m  map[string]float64
}

func (r *rates) reset() {
	r.mu.Lock()
	r.m = map[string]float64{}
	r.mu.Unlock()
}

func (r *rates) set(worker string, v float64) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]float64{}
	}
	r.m[worker] = v
	r.mu.Unlock()
}

func (r *rates) sum() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0.0
	for _, v := range r.m {
		total += v
	}
	return total
}
