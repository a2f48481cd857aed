// Package loop is the agent's round, observe → decide → act, in the one
// form both its homes run: the agent on a host, with the kernel and the
// workloads' cgroups behind Node and Actuators, and the simulator, with the
// model behind them on simulated time. A round reads the node, decides
// with policy.Decide, carries out the decisions and records them;
// evictions run beside the round and their outcomes come back into the
// next one. The package touches nothing itself: every side effect and the
// clock are passed in.
package loop

import (
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
)

// Node is what a round observes.
type Node interface {
	// Discover lists the workloads again; one that is new is read in full
	// at once. sourceChanged says the source reported a change (Tick's
	// rediscover); otherwise the discovery interval came round.
	Discover(now time.Time, sourceChanged bool)
	// Refresh re-reads every workload's stats; full also re-reads what
	// changes rarely (limits), as before a ranking.
	Refresh(now time.Time, full bool)
	// Sample reads the scope and the node's counters.
	Sample(now time.Time) policy.Sample
	// Workloads are the workloads as last read, in a stable order, each
	// with its guest's latest statistics.
	Workloads(now time.Time) []policy.Workload
	// Parked are the workloads the agent parked (saved to disk), none
	// where the platform parks nothing.
	Parked() []policy.Parked
}

// Actuators carry out decisions. Each returns at once: a slow call (an
// API, QMP, libvirt) runs beside the round and never holds it.
type Actuators interface {
	// SetSwap sets a workload's swap allowance and says how it went.
	SetSwap(d policy.Decision) policy.SwapResult
	// SetBalloon hands a VM's balloon target over.
	SetBalloon(d policy.Decision) error
	// SetKSM paces ksmd.
	SetKSM(s policy.KSMSetting) error
	// Evict starts an eviction. It records the evict line once the
	// graceful request was sent or refused (e.Record), and reports how the
	// eviction ended exactly once (e.Report), from any goroutine.
	Evict(e Eviction)
	// Resume starts a parked workload again; it returns once the start
	// was asked for, and the start runs beside the loop.
	Resume(d policy.Decision) error
}

// Eviction is one eviction handed to the actuators.
type Eviction struct {
	Decision policy.Decision
	// PrevSample is when the round before the decision sampled: the
	// threshold was crossed after it, which bounds the reaction time.
	PrevSample time.Time
	// ThresholdEventAt is when the kernel's usage-threshold event that
	// woke the deciding round came (zero for a timed round): the kernel
	// checks a v1 cgroup's thresholds as it charges pages, so the crossing
	// came just before it.
	ThresholdEventAt time.Time
	// Record logs the evict line (with when the request went out, or why
	// it was refused); Report hands the outcome to the next round.
	Record func(Record)
	Report func(policy.EvictionOutcome)
}

// Record is one logged decision: the policy's decision and what acting on
// it did. It is one line of the decision log.
type Record struct {
	policy.Decision
	DryRun bool   `json:"dry_run,omitempty"` // decided with --dry-run: nothing was done
	Error  string `json:"error,omitempty"`   // why acting on it failed (the kernel's or the API's answer)
	// SignaledAt is when the eviction signal was sent.
	SignaledAt *time.Time `json:"signaled_at,omitempty"`
	// LatencyBoundSeconds bounds the time from the threshold crossing to
	// the eviction signal: the crossing happened after the previous
	// sample, which had not fired.
	LatencyBoundSeconds float64 `json:"latency_bound_seconds,omitempty"`
	// ThresholdEventSeconds is, for a round the kernel's usage-threshold
	// event woke (cgroup v1), the time from that event, the crossing, to
	// the eviction signal.
	ThresholdEventSeconds float64 `json:"threshold_event_seconds,omitempty"`
}

// Recorder takes every record, from the round and from evictions running
// beside it (it must be safe for concurrent use).
type Recorder interface {
	Record(r Record)
}

// Config is what a round needs beyond the policy's thresholds.
type Config struct {
	Policy policy.Config
	// DiscoverySeconds is how often the workloads are listed; stats are
	// re-read every WorkloadStatsSeconds, and in full before a ranking.
	DiscoverySeconds     float64
	WorkloadStatsSeconds float64
	// DryRun decides without acting.
	DryRun bool
}

// Loop runs rounds. Tick, Resume and State belong to one goroutine;
// Report may be called from any.
type Loop struct {
	cfg   Config
	node  Node
	act   Actuators
	rec   Recorder
	state policy.State

	lastDiscovery time.Time
	statsAt       time.Time
	prevSample    time.Time
	eventAt       time.Time           // the threshold event that woke this round (TickOnEvent)
	swapResults   []policy.SwapResult // applied this round, for the next

	mu       sync.Mutex // guards outcomes
	outcomes []policy.EvictionOutcome
}

// New is a loop over node, acting through act and recording into rec.
func New(cfg Config, node Node, act Actuators, rec Recorder) *Loop {
	return &Loop{cfg: cfg, node: node, act: act, rec: rec}
}

// Report queues an eviction's outcome for the next round.
func (l *Loop) Report(o policy.EvictionOutcome) {
	l.mu.Lock()
	l.outcomes = append(l.outcomes, o)
	l.mu.Unlock()
}

func (l *Loop) takeOutcomes() []policy.EvictionOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.outcomes
	l.outcomes = nil
	return out
}

// State is the policy's state after the last round.
func (l *Loop) State() policy.State { return l.state }

// Resume counts an eviction a previous agent began as in progress since
// chosenAt (policy.ResumeEviction), and records it.
func (l *Loop) Resume(name string, chosenAt, now time.Time) {
	var d policy.Decision
	l.state, d = policy.ResumeEviction(l.state, name, chosenAt, now)
	l.rec.Record(Record{Decision: d})
}

// PrevSample is when the last round sampled.
func (l *Loop) PrevSample() time.Time { return l.prevSample }

// TickOnEvent runs a round the kernel's usage-threshold event (at eventAt)
// woke: an eviction it decides is timed from the event.
func (l *Loop) TickOnEvent(now, eventAt time.Time) policy.Snapshot {
	l.eventAt = eventAt
	defer func() { l.eventAt = time.Time{} }()
	return l.Tick(now, false)
}

// Tick runs one round at now; rediscover lists the workloads whatever the
// discovery interval (the source said they changed). It returns the
// snapshot the round decided on.
func (l *Loop) Tick(now time.Time, rediscover bool) policy.Snapshot {
	if rediscover || now.Sub(l.lastDiscovery) >= seconds(l.cfg.DiscoverySeconds) {
		l.node.Discover(now, rediscover)
		l.lastDiscovery = now
	}
	// Evictions that ended before the sample is read: the sample then
	// holds the memory they freed, as the policy assumes.
	outcomes := l.takeOutcomes()
	sample := l.node.Sample(now)
	if now.Sub(l.statsAt) >= seconds(l.cfg.WorkloadStatsSeconds) {
		l.node.Refresh(now, false)
		l.statsAt = now
	}
	snap := policy.Snapshot{Sample: sample, Workloads: l.node.Workloads(now), Outcomes: outcomes, SwapResults: l.swapResults,
		Parked: l.node.Parked()}
	l.swapResults = nil
	decisions, next := policy.Decide(snap, l.cfg.Policy, l.state)
	if l.statsAt.Before(now) && next.Firing() {
		// A signal fired: rank on fresh numbers (cached stats may predate
		// the workloads' processes), re-reading every workload and deciding
		// again from the same state (Decide is pure).
		l.node.Refresh(now, true)
		l.statsAt = now
		snap.Workloads = l.node.Workloads(now)
		decisions, next = policy.Decide(snap, l.cfg.Policy, l.state)
	}
	l.state = next
	for _, d := range decisions {
		l.carryOut(d)
	}
	if l.cfg.DryRun {
		clear(l.state.Evicting) // nothing was evicted: keep deciding
	}
	l.prevSample = now
	return snap
}

// carryOut acts on one decision through its actuator and records it; an
// eviction records itself once its request went out.
func (l *Loop) carryOut(d policy.Decision) {
	r := Record{Decision: d, DryRun: l.cfg.DryRun}
	switch {
	case d.Action == policy.ActionSetSwap && l.cfg.DryRun:
		// Nothing is applied; the policy goes on as if it were.
		l.swapResults = append(l.swapResults, policy.SwapResult{Workload: d.Workload, SwapBytes: d.Swap.SwapBytes})
	case l.cfg.DryRun:
	case d.Action == policy.ActionSetSwap:
		res := l.act.SetSwap(d)
		l.swapResults = append(l.swapResults, res)
		r.Error = res.Err
	case d.Action == policy.ActionSetKSM:
		if err := l.act.SetKSM(*d.KSM); err != nil {
			r.Error = err.Error()
		}
	case d.Action == policy.ActionSetBalloon:
		if err := l.act.SetBalloon(d); err != nil {
			r.Error = err.Error()
		}
	case d.Action == policy.ActionResume:
		if err := l.act.Resume(d); err != nil {
			r.Error = err.Error()
		}
	case d.Action == policy.ActionEvict:
		l.act.Evict(Eviction{Decision: d, PrevSample: l.prevSample, ThresholdEventAt: l.eventAt, Record: l.rec.Record, Report: l.Report})
		return
	}
	l.rec.Record(r)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
