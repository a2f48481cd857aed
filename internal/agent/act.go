package agent

import (
	"context"
	"encoding/json"

	"github.com/headroom-dev/headroom/internal/policy"
)

// act carries out one decision through the actuator of its action, logs
// it, and counts it.
func (a *Agent) act(ctx context.Context, d policy.Decision) {
	r := Record{Decision: d, DryRun: a.cfg.DryRun}
	g := a.groups[d.Workload]
	switch {
	case d.Action == policy.ActionSetSwap && a.cfg.DryRun:
		// Nothing is applied; the policy goes on as if it were.
		a.swapResults = append(a.swapResults, policy.SwapResult{Workload: d.Workload, SwapBytes: d.Swap.SwapBytes})
	case a.cfg.DryRun:
	case d.Action == policy.ActionSetKSM:
		if err := a.ksm.apply(*d.KSM); err != nil {
			r.Error = err.Error()
		}
	case d.Action == policy.ActionSetBalloon:
		if err := a.applyBalloon(d); err != nil {
			r.Error = err.Error()
		}
	case d.Action == policy.ActionSetSwap:
		res := applySwap(g, d)
		a.swapResults = append(a.swapResults, res)
		r.Error = res.Err
	case d.Action == policy.ActionEvict && g == nil:
		r.Error = "workload cgroup no longer exists"
	case d.Action == policy.ActionEvict:
		r.SignaledAt, r.Error = a.beginEviction(ctx, d, g)
		if r.SignaledAt != nil && !a.prevSample.IsZero() {
			r.LatencyBoundSeconds = r.SignaledAt.Sub(a.prevSample).Seconds()
			a.metrics.evictionLatency.Observe(r.LatencyBoundSeconds)
		}
	}
	a.count(d)
	a.record(r)
}

// count updates the metrics for a decision.
func (a *Agent) count(d policy.Decision) {
	a.metrics.decisions.WithLabelValues(d.Action).Inc()
	switch d.Action {
	case policy.ActionEvict:
		a.metrics.evictions.WithLabelValues(d.Trigger.Signal).Inc()
	case policy.ActionEvicted:
		o := d.Outcome
		a.metrics.evictionResults.WithLabelValues(o.Result).Inc()
		if o.Result != policy.EvictionFailed {
			a.metrics.evictionSeconds.Observe(o.Seconds)
			a.metrics.evictedBytes.Add(float64(o.FreedBytes))
		}
	case policy.ActionAbandon:
		a.metrics.evictionResults.WithLabelValues("abandoned").Inc()
	}
}

// record writes a decision record as a JSON line and keeps it for the API.
func (a *Agent) record(r Record) {
	if b, err := json.Marshal(r); err == nil {
		a.decisions.Write(append(b, '\n'))
	}
	a.mu.Lock()
	a.recent = append(a.recent, r)
	if len(a.recent) > recentDecisions {
		a.recent = a.recent[len(a.recent)-recentDecisions:]
	}
	a.mu.Unlock()
}
