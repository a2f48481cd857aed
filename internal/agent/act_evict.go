package agent

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

// Target is a workload to evict: its cgroup and, for a VM, its QMP
// connection.
type Target struct {
	Name  string
	Group cgroup.Group
	// Reason is the decision's: why this workload, on which signal.
	Reason string
	// VM is set when the workload's metadata names a QMP socket.
	VM vmControl
}

// vmControl is what an eviction needs of a VM.
type vmControl interface {
	Powerdown() error
	Quit() error
}

// Evictor removes a workload from the node in two steps: Begin asks it to
// leave and returns at once (it never waits on the workload); Finish,
// run in its own goroutine, waits for it to go, forces it after the grace
// period, and reports how it went. An error from Begin ends the eviction
// as failed at once, so the next candidate can be chosen (a Kubernetes
// eviction refused by a PodDisruptionBudget). The Kubernetes Eviction API
// plugs in here (internal/kube).
type Evictor interface {
	Begin(t Target) error
	Finish(ctx context.Context, t Target) policy.EvictionOutcome
}

// DefaultEvictor evicts a process workload with SIGTERM, then SIGKILL
// after Grace (cgroup.kill on v2); a VM with its power button (QMP
// system_powerdown: the guest shuts down cleanly), then QMP quit, then
// SIGKILL. A VM whose QMP socket does not answer gets SIGTERM (QEMU exits)
// and the same forced path.
type DefaultEvictor struct {
	Grace time.Duration
	// Poll is how often the cgroup is checked for remaining processes; the
	// v1 hierarchy has no event for a cgroup becoming empty.
	Poll time.Duration
}

// Begin sends the graceful request. A VM's power-down is sent from its own
// goroutine (a QEMU that does not answer must not hold the agent); Finish
// learns its result.
func (e DefaultEvictor) Begin(t Target) error {
	if t.VM != nil {
		return nil
	}
	if err := cgroup.Signal(t.Group, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", t.Group.Path(), err)
	}
	return nil
}

// Finish waits for the workload's processes (in its whole subtree) to
// exit and forces what is left after the grace period. ctx bounds it: the
// eviction deadline.
func (e DefaultEvictor) Finish(ctx context.Context, t Target) policy.EvictionOutcome {
	start := time.Now()
	var notes []string
	if t.VM != nil {
		if err := t.VM.Powerdown(); err != nil {
			notes = append(notes, "QMP power-down failed ("+err.Error()+"), sent SIGTERM")
			cgroup.Signal(t.Group, syscall.SIGTERM)
		}
	}
	outcome := func(result string) policy.EvictionOutcome {
		return policy.EvictionOutcome{Workload: t.Name, Result: result, Seconds: time.Since(start).Seconds(), Err: strings.Join(notes, "; ")}
	}
	grace, cancel := context.WithTimeout(ctx, e.Grace)
	defer cancel()
	if cgroup.WaitEmpty(grace, t.Group, e.Poll) {
		return outcome(policy.EvictedGracefully)
	}
	if t.VM != nil {
		if err := t.VM.Quit(); err != nil {
			notes = append(notes, "QMP quit failed ("+err.Error()+")")
		} else {
			settle, cancel := context.WithTimeout(ctx, 2*time.Second)
			gone := cgroup.WaitEmpty(settle, t.Group, e.Poll)
			cancel()
			if gone {
				return outcome(policy.EvictedForcibly)
			}
		}
	}
	if err := t.Group.Kill(); err != nil {
		notes = append(notes, "kill: "+err.Error())
	}
	if cgroup.WaitEmpty(ctx, t.Group, e.Poll) {
		return outcome(policy.EvictedForcibly)
	}
	n, _ := cgroup.CountProcesses(t.Group)
	notes = append(notes, fmt.Sprintf("%d processes left after SIGKILL", n))
	return outcome(policy.EvictionFailed)
}

// beginEviction sends the graceful request and starts the goroutine that
// finishes the eviction; it returns when the request was sent.
func (a *Agent) beginEviction(ctx context.Context, d policy.Decision, g cgroup.Group) (signaledAt *time.Time, errText string) {
	t := Target{Name: d.Workload, Group: g, Reason: d.Reason}
	if d.Trigger != nil {
		t.Reason = fmt.Sprintf("%s %.4g %s over its threshold %.4g; %s", d.Trigger.Signal, d.Trigger.Value, d.Trigger.Unit, d.Trigger.Threshold, d.Reason)
	}
	if vm := a.obs.vms[d.Workload]; vm != nil {
		t.VM = vm
	}
	w := a.workloads[d.Workload]
	held := w.WorkingSetBytes + w.SwapBytes
	if err := a.evictor.Begin(t); err != nil {
		a.outcomesMu.Lock()
		a.outcomes = append(a.outcomes, policy.EvictionOutcome{Workload: t.Name, Result: policy.EvictionFailed, Err: err.Error()})
		a.outcomesMu.Unlock()
		return nil, err.Error()
	}
	sent := time.Now()
	a.evictions.Add(1)
	go a.finishEviction(ctx, t, held)
	return &sent, ""
}

// finishEviction waits for a victim to leave, within the eviction
// deadline, and queues the outcome for the next round's decision. heldBytes
// is what the victim used when it was chosen.
func (a *Agent) finishEviction(ctx context.Context, t Target, heldBytes uint64) {
	defer a.evictions.Done()
	// A second before the policy's own deadline, so the decision log says
	// what happened (the outcome) rather than only that time ran out.
	deadline, cancel := context.WithTimeout(ctx, seconds(a.cfg.EvictionDeadlineSeconds-1))
	defer cancel()
	o := a.evictor.Finish(deadline, t)
	o.Workload = t.Name
	if o.Result != policy.EvictionFailed {
		left := uint64(0)
		if u, err := t.Group.Usage(); err == nil {
			left = u.WorkingSetBytes + u.SwapBytes
		}
		o.FreedBytes = heldBytes - min(left, heldBytes)
	}
	a.outcomesMu.Lock()
	a.outcomes = append(a.outcomes, o)
	a.outcomesMu.Unlock()
}
