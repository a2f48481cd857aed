package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/loop"
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
	// SignaledAt is when the graceful request went out (by this agent or
	// by the one before it, for an eviction it resumed): the grace period
	// counts from it.
	SignaledAt time.Time
	// Stopping is closed when the agent stops: from then on nothing is
	// forced; Finish waits for the victim to leave on its own until its
	// context ends (with ErrAgentStopped as its cause).
	Stopping <-chan struct{}
}

// AgentStopping reports whether the agent is stopping (nothing may be
// forced from then on).
func (t Target) AgentStopping() bool {
	select {
	case <-t.Stopping:
		return true
	default:
		return false
	}
}

// ErrAgentStopped is the cause of an eviction's context when the agent
// stopped before the eviction ended: the evictor reports it interrupted
// and forces nothing.
var ErrAgentStopped = errors.New("the agent stopped")

// Interrupted reports whether ctx ended because the agent stopped.
func Interrupted(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrAgentStopped) }

// vmControl is what an eviction needs of a VM.
type vmControl interface {
	Powerdown() error
	Quit() error
}

// Evictor removes a workload from the node in two steps, both run beside
// the agent's loop, never in it. Begin sends the graceful request within
// ctx (a timeout) and returns an error when the request was refused (a
// PodDisruptionBudget, an API or permission error): the workload is then
// backed off and the next candidate chosen at once. Its note says what it
// had to do instead (a VM whose QMP did not answer was sent SIGTERM).
// Finish waits for the workload to go, forces it after the grace period
// unless the agent is stopping, and reports how it went; ctx is the
// eviction deadline. The Kubernetes Eviction API plugs in here
// (internal/kube).
type Evictor interface {
	Begin(ctx context.Context, t Target) (note string, err error)
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
	Poll  time.Duration
	Clock loop.Clock
}

// Begin sends the graceful request: the VM's power button, or SIGTERM.
func (e DefaultEvictor) Begin(_ context.Context, t Target) (string, error) {
	var note string
	if t.VM != nil {
		err := t.VM.Powerdown()
		if err == nil {
			return "", nil
		}
		note = "QMP power-down failed (" + err.Error() + "), sent SIGTERM"
	}
	if err := cgroup.Signal(t.Group, syscall.SIGTERM); err != nil {
		return note, fmt.Errorf("SIGTERM %s: %w", t.Group.Path(), err)
	}
	return note, nil
}

// Finish waits for the workload's processes (in its whole subtree) to
// exit and forces what is left after the grace period, unless the agent is
// stopping. ctx bounds it: the eviction deadline.
func (e DefaultEvictor) Finish(ctx context.Context, t Target) policy.EvictionOutcome {
	var notes []string
	outcome := func(result string) policy.EvictionOutcome {
		return policy.EvictionOutcome{Workload: t.Name, Result: result, Seconds: e.Clock.Now().Sub(t.SignaledAt).Seconds(), Err: strings.Join(notes, "; ")}
	}
	left := func() policy.EvictionOutcome {
		n, _ := cgroup.CountProcesses(t.Group)
		notes = append(notes, fmt.Sprintf("%d processes left", n))
		return outcome(policy.EvictionInterrupted)
	}
	// Deadlines are durations from the clock's now: the clock may be a
	// test's, and a context's deadline is wall-clock time.
	grace, cancel := context.WithTimeout(ctx, e.Grace-e.Clock.Now().Sub(t.SignaledAt))
	defer cancel()
	if cgroup.WaitEmpty(grace, t.Group, e.Poll) {
		return outcome(policy.EvictedGracefully)
	}
	if t.AgentStopping() || Interrupted(ctx) {
		// Nothing is forced once the agent stops: the victim may still
		// leave on its own, as it was asked to.
		if cgroup.WaitEmpty(ctx, t.Group, e.Poll) {
			return outcome(policy.EvictedGracefully)
		}
		return left()
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
	if Interrupted(ctx) {
		return left()
	}
	n, _ := cgroup.CountProcesses(t.Group)
	notes = append(notes, fmt.Sprintf("%d processes left after SIGKILL", n))
	return outcome(policy.EvictionFailed)
}

// beginTimeout bounds the graceful request (an API call, QMP): a request
// that neither succeeds nor fails by then is refused.
const beginTimeout = 10 * time.Second

// evictions runs the agent's evictions beside its loop: each in its own
// goroutine, from the graceful request to its outcome, kept in the
// journal while it runs so a new agent resumes it rather than choosing a
// second victim. When the agent stops, they go on to their own end
// without being forced, for at most the stop's grace.
type evictions struct {
	evictor  Evictor
	clock    loop.Clock
	log      *slog.Logger
	journal  *journal // nil: none kept (dry run, or no state directory)
	deadline time.Duration

	// base is every eviction's context; it ends (cause ErrAgentStopped)
	// when the stop's grace has run out.
	base       context.Context
	cancelBase context.CancelCauseFunc
	stopping   chan struct{}
	wg         sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]*inflight
}

// inflight is an eviction running, as the stop logs it.
type inflight struct {
	chosenAt   time.Time
	signaledAt time.Time // zero while the request is being sent
}

func newEvictions(ev Evictor, clock loop.Clock, log *slog.Logger, j *journal, deadline time.Duration) *evictions {
	base, cancel := context.WithCancelCause(context.Background())
	return &evictions{evictor: ev, clock: clock, log: log, journal: j, deadline: deadline,
		base: base, cancelBase: cancel, stopping: make(chan struct{}), inflight: map[string]*inflight{}}
}

// start runs one eviction decided by the loop; heldBytes is what the
// victim used when it was chosen, instance its cgroup's ID.
func (e *evictions) start(ev loop.Eviction, t Target, instance, heldBytes uint64) {
	d := ev.Decision
	t.Stopping = e.stopping
	entry := journalEntry{Workload: d.Workload, Instance: instance, ChosenAt: d.Time}
	e.journal.put(entry)
	e.track(d.Workload, &inflight{chosenAt: d.Time})
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(e.base, e.deadline-e.clock.Now().Sub(d.Time))
		defer cancel()
		r := loop.Record{Decision: d}
		bctx, bcancel := context.WithTimeout(ctx, beginTimeout)
		note, err := e.evictor.Begin(bctx, t)
		bcancel()
		if err != nil {
			r.Error = err.Error()
			ev.Record(r)
			ev.Report(policy.EvictionOutcome{Workload: d.Workload, Result: policy.EvictionRefused, Err: joinNotes(note, err.Error())})
			e.untrack(d.Workload)
			e.journal.remove(d.Workload)
			return
		}
		sent := e.clock.Now()
		t.SignaledAt, r.SignaledAt = sent, &sent
		if !ev.PrevSample.IsZero() {
			r.LatencyBoundSeconds = sent.Sub(ev.PrevSample).Seconds()
		}
		if !ev.ThresholdEventAt.IsZero() && d.Trigger != nil && d.Trigger.Signal == policy.SignalSwapUtilization {
			r.ThresholdEventSeconds = sent.Sub(ev.ThresholdEventAt).Seconds()
		}
		ev.Record(r)
		entry.SignaledAt = sent
		e.journal.put(entry)
		e.track(d.Workload, &inflight{chosenAt: d.Time, signaledAt: sent})
		e.finish(ctx, t, heldBytes, note, ev.Record, ev.Report)
	}()
}

// resume waits for an eviction a previous agent began (from its journal):
// the request was sent at signaledAt (zero: perhaps not sent, so it is
// sent again).
func (e *evictions) resume(t Target, entry journalEntry, heldBytes uint64, record func(loop.Record), report func(policy.EvictionOutcome)) {
	t.Stopping = e.stopping
	e.track(t.Name, &inflight{chosenAt: entry.ChosenAt, signaledAt: entry.SignaledAt})
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(e.base, e.deadline-e.clock.Now().Sub(entry.ChosenAt))
		defer cancel()
		var note string
		t.SignaledAt = entry.SignaledAt
		if t.SignaledAt.IsZero() {
			bctx, bcancel := context.WithTimeout(ctx, beginTimeout)
			n, err := e.evictor.Begin(bctx, t)
			bcancel()
			if err != nil {
				report(policy.EvictionOutcome{Workload: t.Name, Result: policy.EvictionRefused, Err: joinNotes(n, err.Error())})
				e.untrack(t.Name)
				e.journal.remove(t.Name)
				return
			}
			note, t.SignaledAt = n, e.clock.Now()
			entry.SignaledAt = t.SignaledAt
			e.journal.put(entry)
		}
		e.finish(ctx, t, heldBytes, note, record, report)
	}()
}

// finish waits for the victim and reports the outcome; an eviction the
// stop interrupted is recorded, not reported (no round follows), and stays
// in the journal for the next agent.
func (e *evictions) finish(ctx context.Context, t Target, heldBytes uint64, note string, record func(loop.Record), report func(policy.EvictionOutcome)) {
	o := e.evictor.Finish(ctx, t)
	o.Workload, o.Err = t.Name, joinNotes(note, o.Err)
	e.untrack(t.Name)
	if o.Result == policy.EvictionInterrupted {
		record(loop.Record{Decision: policy.OutcomeDecision(e.clock.Now(), o, "; a new agent resumes it from its journal")})
		return
	}
	if o.Result != policy.EvictionFailed {
		left := uint64(0)
		if u, err := t.Group.Usage(); err == nil {
			left = u.WorkingSetBytes + u.SwapBytes
		}
		o.FreedBytes = heldBytes - min(left, heldBytes)
	}
	e.journal.remove(t.Name)
	if t.AgentStopping() {
		// No round follows to take the outcome: its line is written here.
		record(loop.Record{Decision: policy.OutcomeDecision(e.clock.Now(), o, "")})
		return
	}
	report(o)
}

func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}

func (e *evictions) track(name string, f *inflight) {
	e.mu.Lock()
	e.inflight[name] = f
	e.mu.Unlock()
}

func (e *evictions) untrack(name string) {
	e.mu.Lock()
	delete(e.inflight, name)
	e.mu.Unlock()
}

// stop lets the evictions in progress go on, unforced, for up to grace,
// logging each; those still running then are interrupted (recorded, and
// left to finish on their own). It returns once every eviction goroutine
// has ended.
func (e *evictions) stop(grace time.Duration) {
	close(e.stopping)
	e.mu.Lock()
	names := make([]string, 0, len(e.inflight))
	for name, f := range e.inflight {
		names = append(names, name)
		e.log.Info("stopping: an eviction is in progress; it is not forced", "workload", name,
			"chosen_s_ago", e.clock.Now().Sub(f.chosenAt).Seconds(), "signaled", !f.signaledAt.IsZero(), "wait_up_to_s", grace.Seconds())
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	if len(names) > 0 {
		select {
		case <-done:
			e.log.Info("stopping: every eviction in progress ended", "workloads", strings.Join(slices.Sorted(slices.Values(names)), ","))
			return
		case <-e.clock.After(grace):
			e.log.Warn("stopping: evictions still in progress after the shutdown grace; left to finish on their own", "grace_s", grace.Seconds())
		}
	}
	e.cancelBase(ErrAgentStopped)
	<-done
}
