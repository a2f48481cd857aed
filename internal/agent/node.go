package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// hostNode is the loop's Node on a host: the observer's readings of the
// scope, the kernel's counters and the workloads' cgroups, with the
// workloads' stats cached between refreshes.
type hostNode struct {
	obs *observer
	// discovered is called after every listing (journal entries wait for
	// their workloads to be listed).
	discovered func(now time.Time)

	groups    map[string]cgroup.Group
	workloads map[string]policy.Workload
	names     []string // of workloads, sorted; rebuilt when the set changes
	meta      map[string]workloadmeta.Metadata
	// display are the workloads' display names and cgroupPaths their
	// cgroups, replaced (not changed) when metadata is read or the set
	// changes, so HTTP readers may keep the old maps.
	display     map[string]string
	cgroupPaths map[string]string
	// listErr is the listing's last error, logged once until it changes
	// or clears (a failing listing is one line, not one a round; a source
	// that is down, ErrSourceDown, says so itself).
	listErr string
}

func newHostNode(obs *observer, discovered func(time.Time)) *hostNode {
	return &hostNode{obs: obs, discovered: discovered, groups: map[string]cgroup.Group{},
		workloads: map[string]policy.Workload{}, meta: map[string]workloadmeta.Metadata{}}
}

// Discover updates the set of workloads; new ones are read at once. A
// group made again under its old path is a new one too; a source that
// reports its changes (a pod's, a domain's, a cgroup's creation)
// reports that, so the periodic listing does not stat every group: with
// 500 pods that was a fifth of the agent's CPU. The stats refresh still
// notices one it missed.
func (n *hostNode) Discover(now time.Time, sourceChanged bool) {
	checkRemade := sourceChanged || n.obs.source.Changed() == nil
	n.obs.refreshLimits()
	kids, err := n.obs.discover()
	if err != nil {
		if msg := err.Error(); msg != n.listErr && !errors.Is(err, ErrSourceDown) {
			n.obs.log.Warn("cannot list workloads; keeping those known", "err", err)
			n.listErr = msg
		}
		return
	}
	if n.listErr != "" {
		n.obs.log.Info("listing workloads again")
		n.listErr = ""
	}
	seen := map[string]bool{}
	changed := false
	for _, l := range kids {
		seen[l.Name] = true
		if known, ok := n.groups[l.Name]; !ok || known.Path() != l.Group.Path() || checkRemade && n.obs.madeAgain(l.Name, l.Group) {
			changed = true
			n.groups[l.Name] = l.Group
			n.workloads[l.Name], n.meta[l.Name] = n.obs.workload(now, l.Name, l.Group, true)
		}
	}
	for name := range n.groups {
		if !seen[name] {
			changed = true
			delete(n.groups, name)
			delete(n.workloads, name)
			delete(n.meta, name)
			n.obs.forget(name)
		}
	}
	if changed {
		n.names = slices.Sorted(maps.Keys(n.workloads))
		n.refreshDisplay()
	}
	if n.discovered != nil {
		n.discovered(now)
	}
}

// Refresh re-reads every workload.
func (n *hostNode) Refresh(now time.Time, full bool) {
	for name, g := range n.groups {
		n.workloads[name], n.meta[name] = n.obs.workload(now, name, g, full)
	}
	n.refreshDisplay()
}

// Sample reads the scope and the node's counters.
func (n *hostNode) Sample(now time.Time) policy.Sample { return n.obs.sample(now) }

// Workloads lists the workloads, each VM with its latest guest statistics
// (its goroutine reads them every round; taking them costs no I/O): the
// balloon controller follows a guest's growth from one second to the next.
func (n *hostNode) Workloads(now time.Time) []policy.Workload {
	// Only the few workloads whose swap was found uncapped are checked
	// here, and guests only when there are VMs: a round with hundreds of
	// pods looks up each once.
	for name := range n.obs.uncapped {
		if g, ok := n.groups[name]; ok && n.obs.recapped(name, g) {
			n.workloads[name], n.meta[name] = n.obs.workload(now, name, g, true)
		}
	}
	withGuests := n.obs.balloons != nil || len(n.obs.vms) > 0
	out := make([]policy.Workload, len(n.names))
	for i, name := range n.names {
		w := n.workloads[name]
		if withGuests {
			if b := n.obs.balloon(name); b != nil {
				w.Guest = b.Guest(now)
				n.workloads[name] = w
			}
		}
		out[i] = w
	}
	return out
}

// Parked are the source's parked workloads (none unless it parks).
func (n *hostNode) Parked() []policy.Parked {
	if p, ok := n.obs.source.(Parker); ok {
		return p.Parked()
	}
	return nil
}

// refreshDisplay replaces the display names and cgroup paths.
func (n *hostNode) refreshDisplay() {
	d := make(map[string]string, len(n.meta))
	for name, md := range n.meta {
		d[name] = md.Name
	}
	n.display = d
	paths := make(map[string]string, len(n.groups))
	for name, g := range n.groups {
		paths[name] = g.Path()
	}
	n.cgroupPaths = paths
}

// hostActuators are the loop's Actuators on a host: cgroup swap limits,
// QMP balloons, ksmd's sysfs, and evictions run beside the loop.
type hostActuators struct {
	node      *hostNode
	ksm       *ksmActuator // nil unless a KSM mode is on
	ballooned map[string]uint64
	evictions *evictions
	log       *slog.Logger
}

func (h *hostActuators) SetSwap(d policy.Decision) policy.SwapResult {
	return applySwap(h.node.groups[d.Workload], d)
}

func (h *hostActuators) SetKSM(s policy.KSMSetting) error { return h.ksm.apply(s) }

func (h *hostActuators) SetBalloon(d policy.Decision) error {
	return h.applyBalloon(h.node.obs.balloon(d.Workload), d)
}

// Resume starts a parked workload beside the loop; a start that fails is
// logged, and the workload stays parked to be tried again.
func (h *hostActuators) Resume(d policy.Decision) error {
	p, ok := h.node.obs.source.(Parker)
	if !ok {
		return errors.New("this platform parks nothing")
	}
	go func() {
		started := time.Now()
		if err := p.Resume(d.Workload); err != nil {
			h.log.Warn("could not resume a parked workload", "workload", d.Workload, "err", err)
			return
		}
		h.log.Info("resumed a parked workload", "workload", d.Workload, "seconds", time.Since(started).Seconds())
	}()
	return nil
}

// Evict starts the eviction beside the loop.
func (h *hostActuators) Evict(e loop.Eviction) {
	d := e.Decision
	g := h.node.groups[d.Workload]
	if g == nil {
		e.Record(Record{Decision: d, Error: "workload cgroup no longer exists"})
		e.Report(policy.EvictionOutcome{Workload: d.Workload, Result: policy.EvictionRefused, Err: "workload cgroup no longer exists"})
		return
	}
	t := Target{Name: d.Workload, Group: g, Reason: d.Reason}
	if d.Trigger != nil {
		t.Reason = triggerText(d.Trigger) + "; " + d.Reason
	}
	if vm := h.node.obs.vms[d.Workload]; vm != nil {
		t.VM = vm
	}
	w := h.node.workloads[d.Workload]
	h.evictions.start(e, t, w.Instance, w.WorkingSetBytes+w.SwapBytes)
}

// triggerText says which signal fired, for the eviction's reason.
func triggerText(t *policy.Trigger) string {
	return fmt.Sprintf("%s %.4g %s over its threshold %.4g", t.Signal, t.Value, t.Unit, t.Threshold)
}
