package sim

import (
	"errors"
	"math"
	"time"

	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
)

// AgentParams is the agent the simulated node runs: its policy and how
// often it samples, as in an operator's agent.yaml.
type AgentParams struct {
	Policy policy.Config
	// IntervalSeconds is the agent's sampling interval (intervalSeconds);
	// DiscoverySeconds and WorkloadStatsSeconds its listing and stats
	// cadences, which cost nothing in the model (it is read whole every
	// round) but are kept as the agent has them.
	IntervalSeconds      float64
	DiscoverySeconds     float64
	WorkloadStatsSeconds float64
}

// DefaultAgent is the agent with its defaults (agent.DefaultConfig's).
func DefaultAgent() AgentParams {
	return AgentParams{Policy: policy.DefaultConfig(), IntervalSeconds: DefaultAgentIntervalSeconds,
		DiscoverySeconds: 1, WorkloadStatsSeconds: 10}
}

// DefaultAgentIntervalSeconds is the agent's default intervalSeconds. At
// the default tick the agent decides every tick, so it acts within a tick
// of a threshold crossing, as the real one does on either hierarchy (v1
// wakes it at the crossing, v2 samples every interval).
const DefaultAgentIntervalSeconds = 0.25

// gracefulExitSeconds is how long an evicted VM takes to leave: a TCG
// micro-VM powered down by the agent left in 0.45 s
// (TestSystemAgentEvictsVMGracefully).
const gracefulExitSeconds = 0.5

// simAgent is the agent's own loop (internal/loop) on the simulated node:
// the model stands in for the kernel (simNode) and the actuators
// (simActuators), on simulated time.
type simAgent struct {
	loop     *loop.Loop
	node     *simNode
	act      *simActuators
	rec      *simRecorder
	interval float64
	next     float64
}

func newSimAgent(p Params, requestBytes uint64, start time.Time) *simAgent {
	if p.Agent == nil {
		return nil
	}
	interval := p.Agent.IntervalSeconds
	if interval <= 0 {
		interval = DefaultAgentIntervalSeconds
	}
	n := &simNode{request: requestBytes, limit: p.VM.MemoryBytes + p.VM.HostOverheadBytes, start: start, ksm: p.Agent.Policy.KSMMode}
	act := &simActuators{node: n, leaving: map[*vmState]leaving{}}
	rec := &simRecorder{}
	cfg := loop.Config{Policy: p.Agent.Policy, DiscoverySeconds: p.Agent.DiscoverySeconds, WorkloadStatsSeconds: p.Agent.WorkloadStatsSeconds}
	return &simAgent{loop: loop.New(cfg, n, act, rec), node: n, act: act, rec: rec, interval: interval}
}

// round lets evicted VMs leave and, once per interval, runs the agent's
// round on the node.
func (a *simAgent) round(s *node, now float64) {
	a.node.s, a.node.now = s, now
	a.act.leave(now)
	if now < a.next {
		return
	}
	a.next = now + a.interval
	a.loop.Tick(simTime(a.node.start, now), false)
}

// decisions are every decision the agent made.
func (a *simAgent) decisions() []policy.Decision { return a.rec.decisions }

// simNode is the loop's Node on the model: what the agent would read from
// the node's cgroups, /proc/vmstat and PSI.
type simNode struct {
	s       *node
	now     float64
	request uint64
	limit   uint64
	start   time.Time // the step's start on the run's simulated clock
	ksm     string
}

// The model is read whole every round: listing and refreshing cost nothing.
func (n *simNode) Discover(time.Time, bool) {}
func (n *simNode) Parked() []policy.Parked  { return nil } // the simulator parks nothing
func (n *simNode) Refresh(time.Time, bool)  {}

func (n *simNode) Sample(now time.Time) policy.Sample {
	s := n.s
	scope := policy.Scope{RAMBytes: uint64(s.capacityPages * PageBytes), SwapBytes: uint64(s.swapCapPages() * PageBytes)}
	var tier float64
	savedShare := n.savedShare()
	for _, v := range s.vms {
		if !v.live() {
			continue
		}
		scope.WorkingSetBytes += uint64(v.workingSetPages(savedShare) * PageBytes)
		scope.SwapUsedBytes += uint64(v.swapSlots() * PageBytes)
		tier += v.tier + v.cacheTier
	}
	if s.n.Tier != nil {
		scope.CompressedRAMBytes = uint64(tier / s.n.Tier.Ratio * PageBytes)
	}
	sample := policy.Sample{Time: now, Scope: scope, PswpIn: uint64(s.swapIns), PswpOut: uint64(s.swapOuts),
		PSISomeMicros: uint64(s.psiSome * 1e6), PSIFullMicros: uint64(s.psiFull * 1e6)}
	if n.ksm != policy.KSMOff && n.ksm != "" {
		sample.KSM = s.ksmSample()
	}
	return sample
}

// savedShare is the part of each VM's merged pages that leaves its
// working set: what merging saves is charged to no VM.
func (n *simNode) savedShare() float64 {
	merged, shared := n.s.ksmMergedPages()
	if merged == 0 {
		return 0
	}
	return (merged - shared) / merged
}

func (v *vmState) workingSetPages(savedShare float64) float64 {
	return v.resident + v.cache + v.overhead - v.merged*savedShare
}

func (n *simNode) Workloads(time.Time) []policy.Workload {
	savedShare := n.savedShare()
	var ws []policy.Workload
	for _, v := range n.s.vms {
		if !v.live() {
			continue
		}
		w := policy.Workload{Name: v.name, RequestBytes: n.request, Processes: 1, LimitBytes: n.limit,
			WorkingSetBytes: uint64(v.workingSetPages(savedShare) * PageBytes), SwapBytes: uint64(v.swapSlots() * PageBytes)}
		if !n.s.process {
			w.Guest = guestStats(v)
		}
		ws = append(ws, w)
	}
	return ws
}

func (n *simNode) vm(name string) *vmState {
	for _, v := range n.s.vms {
		if v.name == name && v.live() {
			return v
		}
	}
	return nil
}

// simActuators are the loop's Actuators on the model.
type simActuators struct {
	node    *simNode
	leaving map[*vmState]leaving
}

// leaving is an evicted VM on its way out.
type leaving struct {
	at     float64
	report func(policy.EvictionOutcome)
}

func (a *simActuators) SetSwap(d policy.Decision) policy.SwapResult {
	res := policy.SwapResult{Workload: d.Workload, SwapBytes: d.Swap.SwapBytes, TriedAt: d.Time}
	if v := a.node.vm(d.Workload); v != nil {
		v.allowance = math.Max(float64(d.Swap.SwapBytes)/PageBytes, v.swapped())
	} else {
		res.Err = "workload cgroup no longer exists"
	}
	return res
}

func (a *simActuators) SetBalloon(d policy.Decision) error {
	if v := a.node.vm(d.Workload); v != nil {
		v.setBalloon(float64(d.Balloon.TargetBytes) / PageBytes)
	}
	return nil
}

func (a *simActuators) Resume(d policy.Decision) error {
	return errors.New("the simulator parks nothing")
}

func (a *simActuators) SetKSM(s policy.KSMSetting) error {
	a.node.s.ksm.set(s)
	return nil
}

// Evict powers the VM down: it leaves gracefulExitSeconds later.
func (a *simActuators) Evict(e loop.Eviction) {
	v := a.node.vm(e.Decision.Workload)
	if v == nil {
		e.Record(loop.Record{Decision: e.Decision, Error: "workload cgroup no longer exists"})
		e.Report(policy.EvictionOutcome{Workload: e.Decision.Workload, Result: policy.EvictionRefused, Err: "workload cgroup no longer exists"})
		return
	}
	sent := e.Decision.Time
	e.Record(loop.Record{Decision: e.Decision, SignaledAt: &sent})
	a.leaving[v] = leaving{at: a.node.now + gracefulExitSeconds, report: e.Report}
}

// leave ends the evictions whose VMs are gone by now.
func (a *simActuators) leave(now float64) {
	for v, l := range a.leaving {
		if now >= l.at {
			v.phase, v.gone = phaseGone, "evicted"
			l.report(policy.EvictionOutcome{Workload: v.name, Result: policy.EvictedGracefully,
				Seconds: gracefulExitSeconds, FreedBytes: uint64((v.resident + v.cache + v.overhead + v.swapped()) * PageBytes)})
			delete(a.leaving, v)
		}
	}
}

// simRecorder keeps the decisions.
type simRecorder struct{ decisions []policy.Decision }

func (r *simRecorder) Record(rec loop.Record) { r.decisions = append(r.decisions, rec.Decision) }
