package agent

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// observer reads the scope, the node counters and the workloads.
type observer struct {
	roots      host.Roots
	scope      cgroup.Group
	hostScope  bool                // scope "/": RAM and swap are the host's
	readErrors func(source string) // counts read failures for metrics
	// source lists the workloads and gives their metadata.
	source Source

	// A sub-tree scope's limits and the host's RAM and swap change rarely:
	// they are re-read by refreshLimits (at discovery cadence), not every
	// sample.
	limits    cgroup.Memory
	hostMem   host.Memory
	limitsErr error
	// workloadLimits caches each workload's memory limit (0: none), read
	// in full when it is discovered and before every ranking.
	workloadLimits map[string]uint64
	// uncapped are the workloads whose swap cannot be capped (cgroup v1
	// without a memory limit), read with their limits and re-checked
	// every round (recapped) so that a limit set later takes effect.
	uncapped map[string]bool
	// vms follows the workloads whose metadata names a QMP socket, each
	// read every vmPoll (the agent's round interval).
	vms map[string]*vmConn
	// balloons, when set, are the VMs' balloons instead (libvirt's).
	balloons Balloons
	vmPoll   time.Duration
	clock    loop.Clock
	// instances are the workloads' cgroup IDs: a workload whose cgroup
	// was made again is a new one (a density step's VMs keep their
	// predecessors' names), and its VM connection starts over.
	instances map[string]uint64
	// ksm reads ksmd when a KSM mode is on (nil otherwise).
	ksm *ksmObserver
	// tiers are the swap tiers of the last sample.
	tiers []host.SwapTier

	// usageWake receives a value when a v1 sub-tree scope's usage crosses
	// one of usageThresholds (armed by watchUsage after every round from
	// the scope and the swap its workloads may use): a round then starts
	// at once, not at the next tick. A burst of allocation can cross from
	// the eviction threshold to the OOM point within one interval.
	usageWake       chan time.Time
	usageWatch      io.Closer
	usageThresholds []uint64
	log             *slog.Logger
}

// refreshLimits re-reads the scope's limits and the host's memory totals.
func (o *observer) refreshLimits() {
	if o.hostScope {
		return
	}
	o.hostMem, o.limitsErr = o.roots.ReadMemory()
	if o.limitsErr == nil {
		o.limits, o.limitsErr = o.scope.Memory()
	}
}

// usageThresholdSteps is how many usage thresholds are armed from the
// eviction threshold up to the OOM point. The kernel's usage counts page
// cache, which the policy's does not: a crossing can come early, and the
// next one still wakes the agent before the OOM point.
const usageThresholdSteps = 4

// usageThresholds are the usages at which the agent is woken: the eviction
// threshold and steps from it to the OOM point (policy.UsageBounds).
func usageThresholds(thresholdBytes, oomBytes uint64) []uint64 {
	if oomBytes < thresholdBytes { // a factor above 1 is refused by Validate
		return nil
	}
	out := make([]uint64, 0, usageThresholdSteps)
	for i := range usageThresholdSteps {
		t := thresholdBytes + (oomBytes-thresholdBytes)*uint64(i)/usageThresholdSteps
		if len(out) == 0 || t != out[len(out)-1] {
			out = append(out, t)
		}
	}
	return out
}

// watchUsage (re-)arms the usage thresholds when they changed. Where the
// hierarchy has no such events (v2), or the scope is the host's, the agent
// samples on its interval and PSI triggers.
func (o *observer) watchUsage(thresholds []uint64) {
	if o.hostScope || o.usageWake == nil || slices.Equal(thresholds, o.usageThresholds) {
		return
	}
	o.closeUsageWatch()
	o.usageThresholds = thresholds
	if len(thresholds) == 0 {
		return
	}
	w, err := o.scope.WatchUsage(thresholds, o.usageWake)
	if err != nil {
		if !errors.Is(err, cgroup.ErrNoUsageEvents) {
			o.log.Warn("usage thresholds unavailable; sampling on the interval only", "err", err)
		}
		return
	}
	o.usageWatch = w
}

func (o *observer) closeUsageWatch() {
	if o.usageWatch != nil {
		o.usageWatch.Close()
		o.usageWatch = nil
	}
}

// sample reads one policy.Sample. Read failures are recorded in the
// sample's Err fields, never hidden.
func (o *observer) sample(now time.Time) policy.Sample {
	s := policy.Sample{Time: now}
	// Swap tiers first: a sub-tree scope's swap total follows the swap
	// areas of this sample (a swapoff or swapon counts within a round, not
	// at the next discovery).
	tiers, tiersErr := o.roots.ReadSwapTiers()
	if tiersErr != nil {
		o.readErrors("swap_tiers")
	} else {
		o.tiers = tiers
	}
	if o.hostScope {
		if mem, err := o.roots.ReadMemory(); err != nil {
			s.ScopeErr = err.Error()
			o.readErrors("meminfo")
		} else {
			s.Scope = policy.Scope{
				RAMBytes:        mem.TotalBytes,
				SwapBytes:       mem.SwapTotalBytes,
				WorkingSetBytes: mem.TotalBytes - min(mem.AvailableBytes, mem.TotalBytes),
				SwapUsedBytes:   mem.SwapTotalBytes - min(mem.SwapFreeBytes, mem.SwapTotalBytes),
			}
		}
	} else if o.limitsErr != nil {
		s.ScopeErr = o.limitsErr.Error()
		o.readErrors("scope")
	} else if u, err := o.scope.Usage(); err != nil {
		s.ScopeErr = err.Error()
		o.readErrors("scope")
	} else {
		m, hostMem := o.limits, o.hostMem
		m.UsageBytes, m.WorkingSetBytes, m.SwapBytes = u.UsageBytes, u.WorkingSetBytes, u.SwapBytes
		if tiersErr == nil {
			hostMem.SwapTotalBytes = swapAreasBytes(tiers)
		}
		s.Scope = scopeFromGroup(m, hostMem)
	}
	// The RAM compressed tiers hold for the scope. A sub-tree scope whose
	// share cannot be read is not acted on.
	if tiersErr != nil {
		if !o.hostScope && s.ScopeErr == "" {
			s.ScopeErr = tiersErr.Error()
		}
	} else if s.ScopeErr == "" {
		s.Scope.CompressedRAMBytes = compressedRAM(tiers, s.Scope.SwapUsedBytes, o.hostScope, o.scope.ChargesZswap())
	}

	v, err := o.roots.ReadVMStat()
	if err != nil {
		s.VMStatErr = err.Error()
		o.readErrors("vmstat")
	} else {
		s.PswpIn, s.PswpOut = v.PswpIn, v.PswpOut
	}
	if p, err := o.readPSI(); err != nil {
		s.PSIErr = err.Error()
		o.readErrors("psi")
	} else {
		s.PSISomeMicros, s.PSIFullMicros = p.SomeMicros, p.FullMicros
	}
	if o.ksm != nil {
		if err := o.ksm.sample(&s, now, v.CowKSM, o.scope, o.hostScope, o.roots); err != nil {
			s.KSMErr = err.Error()
			o.readErrors("ksm")
		}
	}
	return s
}

// scopeFromGroup: a sub-tree scope's RAM is its memory limit (the host's
// RAM if unlimited) and its swap what it may use: the swap devices, capped
// by its swap limit.
// swapAreasBytes is the size of the swap areas (zswap, a cache in front of
// them, holds no swap of its own).
func swapAreasBytes(tiers []host.SwapTier) uint64 {
	var total uint64
	for _, t := range tiers {
		if t.Kind != host.TierZswap {
			total += t.SizeBytes
		}
	}
	return total
}

func scopeFromGroup(m cgroup.Memory, hostMem host.Memory) policy.Scope {
	ram := m.LimitBytes
	if ram == cgroup.Unlimited || ram > hostMem.TotalBytes {
		ram = hostMem.TotalBytes
	}
	return policy.Scope{
		RAMBytes:        ram,
		SwapBytes:       min(hostMem.SwapTotalBytes, m.SwapLimitBytes),
		WorkingSetBytes: m.WorkingSetBytes,
		SwapUsedBytes:   m.SwapBytes,
	}
}

func (o *observer) readPSI() (host.PSI, error) {
	if f := o.scope.PressureFile(); f != "" && !o.hostScope {
		return host.ReadPSIFile(f)
	}
	return host.ReadPSIFile(o.roots.MemoryPressureFile())
}

// pressureFile is the file PSI triggers are armed on.
func (o *observer) pressureFile() string {
	if f := o.scope.PressureFile(); f != "" && !o.hostScope {
		return f
	}
	return o.roots.MemoryPressureFile()
}

// discover lists the workloads.
func (o *observer) discover() ([]Listed, error) {
	l, err := o.source.List()
	if err != nil {
		o.readErrors("discovery")
	}
	return l, err
}

// workload reads one child cgroup's stats and metadata; full also re-reads
// its limits (more files), which the periodic refresh skips.
func (o *observer) workload(now time.Time, name string, g cgroup.Group, full bool) (policy.Workload, workloadmeta.Metadata) {
	w := policy.Workload{Name: name}
	if id, err := cgroup.ID(g); err == nil {
		w.Instance = id
		if was, ok := o.instances[name]; ok && was != id {
			o.followVM(name, "")
		}
		if o.instances == nil {
			o.instances = map[string]uint64{}
		}
		o.instances[name] = id
	}
	md, err := o.source.Metadata(name)
	if err != nil {
		w.Err = err.Error()
		o.readErrors("metadata")
	}
	w.Priority, w.RequestBytes, w.Protected = md.Priority, md.MemoryRequestBytes, md.Protected
	w.SwapRule, w.ExternalSwapBytes = md.SwapRule, md.ExternalSwapBytes
	if vm := o.followVM(name, md.QMPSocket); vm != nil {
		w.Guest = vm.Guest(now)
	}
	procs, perr := cgroup.CountProcesses(g)
	var u cgroup.Usage
	var merr error
	if full {
		var m cgroup.Memory
		if m, merr = g.Memory(); merr == nil {
			u = cgroup.Usage{UsageBytes: m.UsageBytes, WorkingSetBytes: m.WorkingSetBytes, SwapBytes: m.SwapBytes}
			if o.workloadLimits == nil {
				o.workloadLimits = map[string]uint64{}
			}
			o.workloadLimits[name] = m.LimitBytes
			if m.LimitBytes == cgroup.Unlimited {
				o.workloadLimits[name] = 0
			}
			o.readCapped(name, g)
		}
	} else {
		u, merr = g.Usage()
	}
	switch {
	case merr != nil:
		w.Err = merr.Error()
		o.readErrors("workload")
	case perr != nil:
		w.Err = perr.Error()
		o.readErrors("workload")
	}
	w.Processes = procs
	w.LimitBytes = o.workloadLimits[name]
	w.SwapUncapped = o.uncapped[name]
	w.WorkingSetBytes, w.SwapBytes = u.WorkingSetBytes, u.SwapBytes
	return w, md
}

// madeAgain reports whether a workload's cgroup was removed and made
// again under the same name since it was last read (its ID changed): a
// new workload, to be read at once rather than at the next stats refresh.
func (o *observer) madeAgain(name string, g cgroup.Group) bool {
	was, ok := o.instances[name]
	id, err := cgroup.ID(g)
	return ok && err == nil && id != was
}

// readCapped notes whether a workload's swap can be capped, and says so
// once when it cannot.
func (o *observer) readCapped(name string, g cgroup.Group) {
	capped, err := g.CapsSwap()
	if err != nil || capped {
		delete(o.uncapped, name)
		return
	}
	if o.uncapped == nil {
		o.uncapped = map[string]bool{}
	}
	if !o.uncapped[name] {
		o.log.Info("cgroup v1 cannot cap the swap of a group without a memory limit: its allowance is counted, not written",
			"workload", name, "cgroup", g.Path())
	}
	o.uncapped[name] = true
}

// recapped reports whether an uncapped workload's swap can be capped now
// (a memory limit was set): its stats are then read again in full.
func (o *observer) recapped(name string, g cgroup.Group) bool {
	if !o.uncapped[name] {
		return false
	}
	capped, err := g.CapsSwap()
	return err == nil && capped
}

// forget drops what is cached about a workload that is gone.
func (o *observer) forget(name string) {
	delete(o.workloadLimits, name)
	delete(o.uncapped, name)
	delete(o.instances, name)
	o.followVM(name, "")
}

// followVM keeps a QMP connection to a workload's VM while its metadata
// names one (socket ""), replacing it when the socket changes.
func (o *observer) followVM(name, socket string) *vmConn {
	vm := o.vms[name]
	if vm != nil && vm.socket != socket {
		vm.Close()
		delete(o.vms, name)
		vm = nil
	}
	if vm == nil && socket != "" {
		vm = newVMConn(socket, o.vmPoll, o.clock)
		o.vms[name] = vm
	}
	return vm
}

// balloon is the workload's balloon: the platform's, or its VM's QMP
// connection (nil: none).
func (o *observer) balloon(name string) Balloon {
	if o.balloons != nil {
		return o.balloons.Balloon(name)
	}
	if vm := o.vms[name]; vm != nil {
		return vm
	}
	return nil
}

// closeVMs ends every VM connection.
func (o *observer) closeVMs() {
	for name := range o.vms {
		o.followVM(name, "")
	}
}
