package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// Record is one logged decision: the policy's decision and what acting on
// it did.
type Record struct {
	policy.Decision
	DryRun bool   `json:"dry_run,omitempty"` // decided with --dry-run: nothing was done
	Error  string `json:"error,omitempty"`   // why acting on it failed (the kernel's or the API's answer)
	// SignaledAt is when the eviction signal was sent.
	SignaledAt *time.Time `json:"signaled_at,omitempty"`
	// LatencyBoundSeconds bounds the time from the threshold crossing to
	// the eviction signal: the crossing happened after the previous sample,
	// which had not fired.
	LatencyBoundSeconds float64 `json:"latency_bound_seconds,omitempty"`
}

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

const recentDecisions = 512

// Agent is the node agent.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	decisions io.Writer // JSON lines, one per Record
	obs       *observer
	evictor   Evictor
	ksm       *ksmActuator // nil unless a KSM mode is on
	// ballooned are the VMs the agent ballooned, with their RAM.
	ballooned map[string]uint64
	metrics   *metrics
	// own are the agent's own memory cgroups (its swap is turned off).
	own []cgroup.Group
	// pressure is told which signals fire after every round (nil: no one).
	pressure PressureReporter

	// Loop state, touched only by the loop goroutine.
	state         policy.State
	groups        map[string]cgroup.Group
	workloads     map[string]policy.Workload
	names         []string // of workloads, sorted; rebuilt when the set changes
	meta          map[string]workloadmeta.Metadata
	lastDiscovery time.Time
	statsAt       time.Time
	prevSample    time.Time
	evictions     sync.WaitGroup

	outcomesMu  sync.Mutex // guards outcomes, filled by eviction goroutines
	outcomes    []policy.EvictionOutcome
	swapResults []policy.SwapResult // applied this round, for the next decide

	// display are the workloads' display names and cgroupPaths their
	// cgroups, replaced (not changed) when metadata is read or the set
	// changes, so HTTP readers may keep the old maps.
	display     map[string]string
	cgroupPaths map[string]string

	mu     sync.Mutex // guards pub and recent for HTTP readers
	pub    published
	recent []Record
	ticked time.Time
}

// New validates cfg and opens the scope; nothing on the machine is changed.
func New(cfg Config, log *slog.Logger, decisions io.Writer) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	scope, err := cgroup.Open(cfg.Scope)
	if err != nil {
		return nil, err
	}
	return NewForScope(cfg, scope, log, decisions)
}

// NewForScope is New for an already opened scope (tests use fixture trees).
func NewForScope(cfg Config, scope cgroup.Group, log *slog.Logger, decisions io.Writer) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, log: log, decisions: decisions,
		evictor: DefaultEvictor{Grace: seconds(cfg.EvictionGraceSeconds), Poll: 50 * time.Millisecond},
		groups:  map[string]cgroup.Group{}, ballooned: map[string]uint64{},
		workloads: map[string]policy.Workload{},
		meta:      map[string]workloadmeta.Metadata{},
	}
	a.metrics = newMetrics(a)
	files := &cgroupSource{scope: scope, workloadsDir: cfg.WorkloadsDir, ignore: map[string]bool{}}
	for _, name := range cfg.IgnoreCgroups {
		files.ignore[name] = true
	}
	a.obs = &observer{scope: scope, hostScope: filepath.Clean("/"+cfg.Scope) == "/", source: files,
		readErrors: func(src string) { a.metrics.readErrors.WithLabelValues(src).Inc() },
		vms:        map[string]*vmConn{}, vmPoll: seconds(cfg.IntervalSeconds),
		usageWake: make(chan time.Time, 1), log: log}
	if cfg.KSMMode != policy.KSMOff && cfg.KSMMode != "" {
		a.obs.ksm = &ksmObserver{ksmDir: host.KSMDir}
		a.ksm = &ksmActuator{dir: host.KSMDir}
	}
	own, err := cgroup.Self()
	if err != nil {
		log.Warn("cannot read the agent's own cgroup; it is not excluded from the workloads", "err", err)
	}
	files.own = own
	a.own = own
	return a, nil
}

// SetEvictor replaces the default signal evictor.
func (a *Agent) SetEvictor(e Evictor) { a.evictor = e }

// SetSource replaces the default source of workloads (the scope's child
// cgroups and their metadata files).
func (a *Agent) SetSource(s Source) { a.obs.source = s }

// SetPressureReporter makes the agent tell r, after every round, which
// signals fire (the Kubernetes node taint and condition).
func (a *Agent) SetPressureReporter(r PressureReporter) { a.pressure = r }

// minUsageWakeGap is the shortest time between a round and one started by
// a usage threshold crossing.
const minUsageWakeGap = 20 * time.Millisecond

// Run protects the agent, serves HTTP and runs the loop until ctx ends;
// evictions in progress are then finished (forced) before it returns.
func (a *Agent) Run(ctx context.Context) error {
	protectSelf(a.cfg, a.own, a.log)
	var srv *http.Server
	if a.cfg.Listen != "" {
		ln, err := net.Listen("tcp", a.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", a.cfg.Listen, err)
		}
		srv = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		a.log.Info("serving", "addr", ln.Addr().String())
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
	a.log.Info("agent started", "scope", a.cfg.Scope, "dry_run", a.cfg.DryRun, "interval_s", a.cfg.IntervalSeconds)
	ticker := time.NewTicker(seconds(a.cfg.IntervalSeconds))
	defer ticker.Stop()
	a.Tick(ctx, time.Now())
	for {
		select {
		case <-ctx.Done():
			if srv != nil {
				srv.Close()
			}
			a.evictions.Wait()
			a.restoreBalloons()
			a.obs.closeVMs()
			a.obs.closeUsageWatch()
			if a.ksm != nil {
				if err := a.ksm.restore(); err != nil {
					a.log.Warn("could not restore KSM's settings", "err", err)
				}
			}
			return nil
		case now := <-ticker.C:
			a.Tick(ctx, now)
		case <-a.obs.source.Changed():
			a.lastDiscovery = time.Time{} // list now
			a.Tick(ctx, time.Now())
		case <-wake:
			a.metrics.psiWakeups.Inc()
			a.Tick(ctx, time.Now())
		case <-a.obs.usageWake:
			// Usage hovering at a threshold crosses it again and again:
			// rounds stay at least minUsageWakeGap apart.
			if wait := time.Until(a.prevSample.Add(minUsageWakeGap)); wait > 0 {
				time.Sleep(wait)
			}
			a.metrics.usageWakeups.Inc()
			a.Tick(ctx, time.Now())
		}
	}
}

// Tick runs one observe → decide → act round.
func (a *Agent) Tick(ctx context.Context, now time.Time) {
	a.metrics.ticks.Inc()
	if now.Sub(a.lastDiscovery) >= seconds(a.cfg.DiscoverySeconds) {
		a.obs.refreshLimits()
		a.discover()
		a.lastDiscovery = now
	}
	// Evictions that ended before the sample is read: the sample then
	// holds the memory they freed, as the policy assumes.
	outcomes := a.takeOutcomes()
	sample := a.obs.sample(now)
	if now.Sub(a.statsAt) >= seconds(a.cfg.WorkloadStatsSeconds) {
		a.refreshWorkloads(now, false)
	}
	a.refreshGuests(now)
	snap := policy.Snapshot{Sample: sample, Workloads: a.workloadList(), Outcomes: outcomes, SwapResults: a.swapResults}
	a.swapResults = nil
	decisions, next := policy.Decide(snap, a.cfg.Config, a.state)
	if a.statsAt.Before(now) && next.Firing() {
		// A signal fired: rank on fresh numbers (cached stats may predate
		// the workloads' processes), re-reading every workload and deciding
		// again from the same state (Decide is pure).
		a.refreshWorkloads(now, true)
		snap.Workloads = a.workloadList()
		decisions, next = policy.Decide(snap, a.cfg.Config, a.state)
	}
	a.state = next
	if sample.ScopeErr == "" {
		a.obs.watchUsage(usageThresholds(policy.UsageBounds(snap, a.state, a.cfg.Config)))
	}
	for _, d := range decisions {
		a.act(ctx, d)
	}
	if a.cfg.DryRun {
		clear(a.state.Evicting) // nothing was evicted: keep deciding
	}
	a.prevSample = now
	if a.pressure != nil {
		a.pressure.Report(now, a.state.Signals)
	}
	a.publish(snap)
}

// refreshGuests attaches every VM's latest guest statistics (its goroutine
// reads them every round; taking them costs no I/O): the balloon
// controller follows a guest's growth from one second to the next.
func (a *Agent) refreshGuests(now time.Time) {
	for name, w := range a.workloads {
		if vm := a.obs.vms[name]; vm != nil {
			w.Guest = vm.Guest(now)
			a.workloads[name] = w
		}
	}
}

// takeOutcomes returns the evictions that ended since the last round.
func (a *Agent) takeOutcomes() []policy.EvictionOutcome {
	a.outcomesMu.Lock()
	defer a.outcomesMu.Unlock()
	out := a.outcomes
	a.outcomes = nil
	return out
}

// discover updates the set of child cgroups; new ones are read at once.
func (a *Agent) discover() {
	kids, err := a.obs.discover()
	if err != nil {
		a.log.Warn("cannot list workloads", "err", err)
		return
	}
	seen := map[string]bool{}
	changed := false
	for _, l := range kids {
		seen[l.Name] = true
		if known, ok := a.groups[l.Name]; !ok || known.Path() != l.Group.Path() || a.obs.madeAgain(l.Name, l.Group) {
			changed = true
			a.groups[l.Name] = l.Group
			a.workloads[l.Name], a.meta[l.Name] = a.obs.workload(l.Name, l.Group, true)
		}
	}
	for name := range a.groups {
		if !seen[name] {
			changed = true
			delete(a.groups, name)
			delete(a.workloads, name)
			delete(a.meta, name)
			a.obs.forget(name)
		}
	}
	if changed {
		a.names = slices.Sorted(maps.Keys(a.workloads))
		a.refreshDisplay()
	}
}

func (a *Agent) refreshWorkloads(now time.Time, full bool) {
	for name, g := range a.groups {
		a.workloads[name], a.meta[name] = a.obs.workload(name, g, full)
	}
	a.statsAt = now
	a.refreshDisplay()
}

// refreshDisplay replaces the display names and cgroup paths.
func (a *Agent) refreshDisplay() {
	d := make(map[string]string, len(a.meta))
	for name, md := range a.meta {
		d[name] = md.Name
	}
	a.display = d
	paths := make(map[string]string, len(a.groups))
	for name, g := range a.groups {
		paths[name] = g.Path()
	}
	a.cgroupPaths = paths
}

func (a *Agent) workloadList() []policy.Workload {
	out := make([]policy.Workload, 0, len(a.names))
	for _, name := range a.names {
		out = append(out, a.workloads[name])
	}
	return out
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
func (a *Agent) publish(snap policy.Snapshot) {
	v := View{Time: snap.Sample.Time, Scope: a.cfg.Scope, DryRun: a.cfg.DryRun, Sample: snap.Sample, Signals: a.state.Signals,
		SwapTiers: a.obs.tiers}
	if a.ksm != nil {
		k := a.state.KSM
		v.KSM = &k
	}
	if a.cfg.Balloon {
		b := a.state.Balloon
		b.Targets = maps.Clone(b.Targets)
		v.Balloon = &b
	}
	p := published{view: v, workloads: snap.Workloads, display: a.display, cgroups: a.cgroupPaths,
		allowance: a.state.SwapAllowance, evicting: a.state.Evicting}
	a.mu.Lock()
	a.pub, a.ticked = p, time.Now()
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
func (a *Agent) Decisions() []Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Record(nil), a.recent...)
}

// Handler serves /v1/decisions, /v1/snapshot, /metrics and /healthz.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/decisions", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.Decisions()) })
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.Snapshot()) })
	mux.Handle("GET /metrics", a.metrics.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		age := time.Since(a.ticked)
		a.mu.Unlock()
		if a.ticked.IsZero() || age > 5*seconds(a.cfg.IntervalSeconds)+time.Second {
			http.Error(w, fmt.Sprintf("no sample for %s", age.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		return
	}
}
