package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
)

// Record is one line of the decision log.
type Record = loop.Record

// WorkloadView is a workload as shown by /v1/snapshot.
type WorkloadView struct {
	policy.Workload
	DisplayName string `json:"display_name"`
	// Cgroup is the workload's cgroup directory.
	Cgroup             string `json:"cgroup"`
	SwapAllowanceBytes uint64 `json:"swap_allowance_bytes"`
	Evicting           bool   `json:"evicting"`
}

// View is the agent's current picture, served by /v1/snapshot.
type View struct {
	Time      time.Time       `json:"time"`
	Scope     string          `json:"scope"`
	DryRun    bool            `json:"dry_run"`
	Sample    policy.Sample   `json:"sample"`
	Signals   []policy.Signal `json:"signals"`
	Workloads []WorkloadView  `json:"workloads"`
	// KSM is the KSM governor's state (with a KSM mode on).
	KSM *policy.KSMState `json:"ksm,omitempty"`
	// SwapTiers are the host's swap tiers, compressed ones with the RAM
	// they take.
	SwapTiers []host.SwapTier `json:"swap_tiers,omitempty"`
	// Balloon is the balloon controller's state (with --balloon).
	Balloon *policy.BalloonState `json:"balloon,omitempty"`
}

// Agent is the node agent: the loop (internal/loop) over this host's
// kernel and cgroups, its actuators, its HTTP API and metrics.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	clock   loop.Clock
	obs     *observer
	node    *hostNode
	act     *hostActuators
	rec     *recorder
	loop    *loop.Loop
	metrics *metrics
	// own are the agent's own memory cgroups (its swap is turned off).
	own []cgroup.Group
	// pressure is told which signals fire after every round (nil: no one).
	pressure PressureReporter
	// journal keeps evictions in progress; resumable are the ones the
	// agent before this one left, resumed once their workload is listed.
	journal   *journal
	resumable []journalEntry

	mu     sync.Mutex // guards pub and ticked for HTTP readers
	pub    published
	ticked time.Time
}

// New validates cfg and opens the scope; nothing on the machine is changed.
// decisions receives the decision log, one JSON line a decision.
func New(cfg Config, log *slog.Logger, decisions io.Writer) (*Agent, error) {
	return NewWithClock(cfg, log, decisions, loop.RealClock{})
}

// NewWithClock is New on another clock (a test's).
func NewWithClock(cfg Config, log *slog.Logger, decisions io.Writer, clock loop.Clock) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h, err := Hierarchy(cfg)
	if err != nil {
		return nil, err
	}
	scope, err := h.Open(cfg.Scope)
	if err != nil {
		return nil, err
	}
	roots := host.Roots{Proc: cfg.ProcRoot, Sys: cfg.SysRoot}
	a := &Agent{cfg: cfg, log: log, clock: clock}
	a.metrics = newMetrics(a)
	a.rec = &recorder{w: decisions, metrics: a.metrics}
	files := &cgroupSource{scope: scope, workloadsDir: cfg.WorkloadsDir, ignore: map[string]bool{}, log: log,
		unusable: func() { a.metrics.readErrors.WithLabelValues("metadata").Inc() }}
	if fi, err := os.Stat(cfg.WorkloadsDir); cfg.Libvirt.URI == "" && cfg.Kubernetes.NodeName == "" && (err != nil || !fi.IsDir()) {
		// Not an error (workloads may come before their metadata), but a
		// mistyped directory would silently give every workload no swap.
		log.Warn("no workload metadata directory: until it exists every workload has priority 0 and no memory request, so no swap allowance",
			"workloads_dir", cfg.WorkloadsDir)
	}
	for _, name := range cfg.IgnoreCgroups {
		files.ignore[name] = true
	}
	a.obs = &observer{roots: roots, scope: scope, hostScope: filepath.Clean("/"+cfg.Scope) == "/", source: files,
		readErrors: func(src string) { a.metrics.readErrors.WithLabelValues(src).Inc() },
		vms:        map[string]*vmConn{}, vmPoll: seconds(cfg.IntervalSeconds), clock: clock,
		usageWake: make(chan time.Time, 1), log: log}
	var ksm *ksmActuator
	if cfg.KSMMode != policy.KSMOff && cfg.KSMMode != "" {
		a.obs.ksm = &ksmObserver{ksmDir: roots.KSMDir(), ksmd: host.KsmdCPU{Proc: roots.Proc}}
		ksm = &ksmActuator{dir: roots.KSMDir()}
	}
	own, err := h.Self(roots.Proc)
	if err != nil {
		log.Warn("cannot read the agent's own cgroup; it is not excluded from the workloads", "err", err)
	}
	files.own, a.own = own, own
	if cfg.StateDir != "" && !cfg.DryRun {
		if a.journal, a.resumable, err = openJournal(cfg.StateDir, log); errors.Is(err, ErrStateDirHeld) {
			return nil, err
		} else if err != nil {
			log.Warn("no eviction journal: a restarted agent will not know of evictions in progress", "err", err)
		}
	}
	if swaps, err := roots.ReadSwaps(); err == nil && len(swaps) == 0 {
		log.Warn("no swap is active: until one is, no workload swaps and only the working set against RAM can call for an eviction")
	}
	a.node = newHostNode(a.obs, a.resumeListed)
	ev := newEvictions(DefaultEvictor{Grace: seconds(cfg.EvictionGraceSeconds), Poll: 50 * time.Millisecond, Clock: clock},
		clock, log, a.journal, seconds(cfg.EvictionDeadlineSeconds-1))
	a.act = &hostActuators{node: a.node, ksm: ksm, ballooned: map[string]uint64{}, evictions: ev, log: log}
	a.loop = loop.New(loop.Config{Policy: cfg.Config, DiscoverySeconds: cfg.DiscoverySeconds,
		WorkloadStatsSeconds: cfg.WorkloadStatsSeconds, DryRun: cfg.DryRun}, a.node, a.act, a.rec)
	return a, nil
}

// Hierarchy is the memory cgroup hierarchy the configuration names: the
// one mounted at cgroupMount, or the machine's under sysRoot.
func Hierarchy(cfg Config) (cgroup.Hierarchy, error) {
	if cfg.CgroupMount != "" {
		return cgroup.Detect(cfg.CgroupMount)
	}
	if filepath.Clean(cfg.SysRoot) != "/sys" {
		for _, m := range []string{"fs/cgroup", "fs/cgroup/unified", "fs/cgroup/memory"} {
			if h, err := cgroup.Detect(filepath.Join(cfg.SysRoot, m)); err == nil {
				return h, nil
			}
		}
		return cgroup.Hierarchy{}, fmt.Errorf("no memory cgroup hierarchy under %s/fs/cgroup", cfg.SysRoot)
	}
	return cgroup.Find()
}

// SetEvictor replaces the default signal evictor.
func (a *Agent) SetEvictor(e Evictor) { a.act.evictions.evictor = e }

// SetSource replaces the default source of workloads (the scope's child
// cgroups and their metadata files).
func (a *Agent) SetSource(s Source) { a.obs.source = s }

// SetBalloons makes b the VMs' balloons, in place of the QMP sockets
// their metadata names.
func (a *Agent) SetBalloons(b Balloons) { a.obs.balloons = b }

// SetPressureReporter makes the agent tell r, after every round, which
// signals fire (the Kubernetes node taint and condition).
func (a *Agent) SetPressureReporter(r PressureReporter) { a.pressure = r }

// minUsageWakeGap is the shortest time between a round and one started by
// a usage threshold crossing.
const minUsageWakeGap = 20 * time.Millisecond

// StartedMessage is the log message of an agent that has read its
// configuration and begins its rounds: a process that runs the agent
// waits for it.
const StartedMessage = "agent started"

// Run protects the agent, serves HTTP and runs the loop until ctx ends.
// Then it starts no eviction, lets those in progress go on to their own
// end for up to shutdownGraceSeconds without forcing any, gives the
// balloons back and puts KSM's settings back.
func (a *Agent) Run(ctx context.Context) error {
	protectSelf(a.cfg, a.own, a.log)
	srv, err := a.serve()
	if err != nil {
		return err
	}
	var wake <-chan time.Time
	if a.cfg.PSITriggerStallMillis > 0 {
		stall := time.Duration(a.cfg.PSITriggerStallMillis) * time.Millisecond
		trig, err := host.NewPSITrigger(ctx, a.obs.pressureFile(), "some", stall, time.Second)
		if err != nil {
			// Without CAP_SYS_RESOURCE the kernel only accepts windows that
			// are multiples of 2 s: keep the same stall share on 2 s.
			trig, err = host.NewPSITrigger(ctx, a.obs.pressureFile(), "some", 2*stall, 2*time.Second)
		}
		if err != nil {
			a.log.Warn("PSI trigger unavailable; sampling on the interval only", "err", err)
		} else {
			wake = trig.Events()
		}
	}
	a.log.Info(StartedMessage, "scope", a.cfg.Scope, "dry_run", a.cfg.DryRun, "interval_s", a.cfg.IntervalSeconds)
	if files, ok := a.obs.source.(*cgroupSource); ok {
		files.watch(ctx)
	}
	ticker := a.clock.NewTicker(seconds(a.cfg.IntervalSeconds))
	defer ticker.Stop()
	a.Tick(a.clock.Now(), true)
	for {
		select {
		case <-ctx.Done():
			a.stop(srv)
			return nil
		case now := <-ticker.C():
			a.Tick(now, false)
		case <-a.obs.source.Changed():
			a.Tick(a.clock.Now(), true)
		case <-wake:
			a.metrics.psiWakeups.Inc()
			a.Tick(a.clock.Now(), false)
		case eventAt := <-a.obs.usageWake:
			// Usage hovering at a threshold crosses it again and again:
			// rounds stay at least minUsageWakeGap apart.
			if wait := a.loop.PrevSample().Add(minUsageWakeGap).Sub(a.clock.Now()); wait > 0 {
				<-a.clock.After(wait)
			}
			a.metrics.usageWakeups.Inc()
			a.tick(a.clock.Now(), false, eventAt)
		}
	}
}

// stop ends the run: evictions in progress are waited for (never forced),
// then the machine is given back what the agent changed of it.
func (a *Agent) stop(srv *http.Server) {
	a.log.Info("stopping: no new evictions", "shutdown_grace_s", a.cfg.ShutdownGraceSeconds)
	a.act.evictions.stop(seconds(a.cfg.ShutdownGraceSeconds))
	if srv != nil {
		srv.Close()
	}
	a.act.restoreBalloons(a.obs.balloon)
	a.obs.closeVMs()
	a.obs.closeUsageWatch()
	if a.act.ksm != nil {
		if err := a.act.ksm.restore(); err != nil {
			a.log.Warn("could not restore KSM's settings", "err", err)
		}
	}
	a.journal.close()
}

// Tick runs one observe → decide → act round at now; rediscover lists the
// workloads at once.
func (a *Agent) Tick(now time.Time, rediscover bool) { a.tick(now, rediscover, time.Time{}) }

// tick is Tick for a round the kernel's usage-threshold event at eventAt
// woke (zero: a timed or listing round).
func (a *Agent) tick(now time.Time, rediscover bool, eventAt time.Time) {
	a.metrics.ticks.Inc()
	var snap policy.Snapshot
	if eventAt.IsZero() {
		snap = a.loop.Tick(now, rediscover)
	} else {
		snap = a.loop.TickOnEvent(now, eventAt)
	}
	st := a.loop.State()
	if snap.Sample.ScopeErr == "" {
		a.obs.watchUsage(usageThresholds(policy.UsageBounds(snap, st, a.cfg.Config)))
	}
	if a.pressure != nil {
		a.pressure.Report(now, st.Signals)
	}
	a.publish(snap, st)
}

// resumeListed resumes the evictions the agent before this one left in
// its journal, each once its workload is listed with the same cgroup and
// still has processes: the loop then waits for it rather than choosing a
// second victim. An entry past its deadline, or whose workload left or was
// made again, is dropped.
func (a *Agent) resumeListed(now time.Time) {
	kept := a.resumable[:0]
	for _, e := range a.resumable {
		g, listed := a.node.groups[e.Workload]
		w := a.node.workloads[e.Workload]
		switch {
		case now.Sub(e.ChosenAt).Seconds() >= a.cfg.EvictionDeadlineSeconds:
		case !listed:
			kept = append(kept, e) // not listed yet (a pod informer still syncing)
		case w.Instance != e.Instance || w.Processes == 0:
		default:
			a.loop.Resume(e.Workload, e.ChosenAt, now)
			a.journal.put(e)
			t := Target{Name: e.Workload, Group: g, Reason: "resumed from the journal"}
			if vm := a.obs.vms[e.Workload]; vm != nil {
				t.VM = vm
			}
			a.act.evictions.resume(t, e, w.WorkingSetBytes+w.SwapBytes, a.rec.Record, a.loop.Report)
		}
	}
	a.resumable = kept
}

// published is what the last round saw, kept for HTTP readers: the view
// without its workloads, which are built only when asked for (with
// hundreds of pods, building them every round was most of the agent's
// CPU). Every field is immutable once stored: the state's maps are cloned
// by the next Decide, not changed.
type published struct {
	view      View
	workloads []policy.Workload
	display   map[string]string
	cgroups   map[string]string
	allowance map[string]uint64
	evicting  map[string]time.Time
}

// publish stores the view served over HTTP.
func (a *Agent) publish(snap policy.Snapshot, st policy.State) {
	v := View{Time: snap.Sample.Time, Scope: a.cfg.Scope, DryRun: a.cfg.DryRun, Sample: snap.Sample, Signals: st.Signals,
		SwapTiers: a.obs.tiers}
	if a.act.ksm != nil {
		k := st.KSM
		v.KSM = &k
	}
	if a.cfg.Balloon {
		b := st.Balloon
		b.Targets = maps.Clone(b.Targets)
		v.Balloon = &b
	}
	p := published{view: v, workloads: snap.Workloads, display: a.node.display, cgroups: a.node.cgroupPaths,
		allowance: st.SwapAllowance, evicting: st.Evicting}
	a.mu.Lock()
	a.pub, a.ticked = p, a.clock.Now()
	a.mu.Unlock()
}

// Snapshot returns the current view.
func (a *Agent) Snapshot() View {
	a.mu.Lock()
	p := a.pub
	a.mu.Unlock()
	v := p.view
	for _, w := range p.workloads {
		_, evicting := p.evicting[w.Name]
		v.Workloads = append(v.Workloads, WorkloadView{Workload: w, DisplayName: p.display[w.Name], Cgroup: p.cgroups[w.Name],
			SwapAllowanceBytes: p.allowance[w.Name], Evicting: evicting})
	}
	return v
}

// Decisions returns the most recent decisions, oldest first.
func (a *Agent) Decisions() []Record { return a.rec.recentRecords() }

// serve starts the HTTP server on cfg.Listen (nil: none).
func (a *Agent) serve() (*http.Server, error) {
	if a.cfg.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", a.cfg.Listen, err)
	}
	srv := newHTTPServer(a.Handler())
	go srv.Serve(limitConnections(ln, maxHTTPConnections))
	a.log.Info("serving", "addr", ln.Addr().String())
	return srv, nil
}
