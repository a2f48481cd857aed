package sim

import (
	"math"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
)

// simAgent runs the agent's real decide step on the simulated node: the
// same policy.Decide the agent runs, fed snapshots built from the model
// on simulated time, its actions applied to the model.
type simAgent struct {
	cfg       policy.Config
	state     policy.State
	request   uint64
	limit     uint64
	start     time.Time // the step's start on the run's simulated clock
	next      float64
	decisions []policy.Decision
	// outcomes and swapResults go into the next snapshot, as the agent's
	// actors report them.
	outcomes    []policy.EvictionOutcome
	swapResults []policy.SwapResult
	// leaving are evicted VMs and when they are gone.
	leaving map[*vmState]float64
}

func newSimAgent(p Params, start time.Time) *simAgent {
	if p.Agent == nil {
		return nil
	}
	return &simAgent{cfg: *p.Agent, state: policy.State{}, request: p.VM.RequestBytes, start: start,
		limit: p.VM.MemoryBytes + p.VM.HostOverheadBytes, leaving: map[*vmState]float64{}}
}

// snapshot is what the agent would read from the node's cgroups,
// /proc/vmstat and PSI.
func (a *simAgent) snapshot(s *node, now float64) policy.Snapshot {
	scope := policy.Scope{RAMBytes: uint64(s.capacityPages * PageBytes), SwapBytes: uint64(s.swapCapPages() * PageBytes)}
	var tier float64
	var ws []policy.Workload
	// What merging saves is charged to no VM: each VM's merged pages,
	// less its share of the KSM pages, leave its working set.
	merged, shared := s.ksmMergedPages()
	savedShare := 0.0
	if merged > 0 {
		savedShare = (merged - shared) / merged
	}
	for _, v := range s.vms {
		if !v.live() {
			continue
		}
		set := (v.resident + v.cache + v.overhead - v.merged*savedShare) * PageBytes
		scope.WorkingSetBytes += uint64(set)
		scope.SwapUsedBytes += uint64(v.swapSlots() * PageBytes)
		tier += v.tier + v.cacheTier
		w := policy.Workload{Name: v.name, RequestBytes: a.request, Processes: 1, LimitBytes: a.limit,
			WorkingSetBytes: uint64(set), SwapBytes: uint64(v.swapSlots() * PageBytes)}
		if !s.process {
			w.Guest = guestStats(v)
		}
		ws = append(ws, w)
	}
	if s.n.Tier != nil {
		scope.CompressedRAMBytes = uint64(tier / s.n.Tier.Ratio * PageBytes)
	}
	snap := policy.Snapshot{Workloads: ws, Outcomes: a.outcomes, SwapResults: a.swapResults,
		Sample: policy.Sample{Time: simTime(a.start, now), Scope: scope, PswpIn: uint64(s.swapIns), PswpOut: uint64(s.swapOuts),
			PSISomeMicros: uint64(s.psiSome * 1e6), PSIFullMicros: uint64(s.psiFull * 1e6)}}
	if a.cfg.KSMMode != policy.KSMOff && a.cfg.KSMMode != "" {
		snap.Sample.KSM = s.ksmSample()
	}
	a.outcomes, a.swapResults = nil, nil
	return snap
}

// round lets evicted VMs leave and, once per interval, decides and acts.
func (a *simAgent) round(s *node, now float64) {
	for v, at := range a.leaving {
		if now >= at {
			v.phase, v.gone = phaseGone, "evicted"
			a.outcomes = append(a.outcomes, policy.EvictionOutcome{Workload: v.name, Result: policy.EvictedGracefully,
				Seconds: gracefulExitSeconds, FreedBytes: uint64((v.resident + v.cache + v.overhead + v.swapped()) * PageBytes)})
			delete(a.leaving, v)
		}
	}
	if now < a.next {
		return
	}
	a.next = now + agentIntervalSeconds
	ds, st := policy.Decide(a.snapshot(s, now), a.cfg, a.state)
	a.state = st
	byName := map[string]*vmState{}
	for _, v := range s.vms {
		byName[v.name] = v
	}
	for _, d := range ds {
		a.decisions = append(a.decisions, d)
		v := byName[d.Workload]
		switch {
		case v == nil:
		case d.Action == policy.ActionSetSwap:
			v.allowance = math.Max(float64(d.Swap.SwapBytes)/PageBytes, v.swapped())
			a.swapResults = append(a.swapResults, policy.SwapResult{Workload: v.name, SwapBytes: d.Swap.SwapBytes})
		case d.Action == policy.ActionEvict:
			a.leaving[v] = now + gracefulExitSeconds
		case d.Action == policy.ActionSetBalloon:
			v.setBalloon(float64(d.Balloon.TargetBytes) / PageBytes)
		}
		if d.Action == policy.ActionSetKSM { // the node's, not a VM's
			s.ksm.set(*d.KSM)
		}
	}
}
