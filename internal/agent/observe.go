package agent

import (
	"path/filepath"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
)

// observer reads the scope, the node counters and the workloads.
type observer struct {
	scope        cgroup.Group
	hostScope    bool // scope "/": RAM and swap are the host's
	workloadsDir string
	readErrors   func(source string) // counts read failures for metrics
}

// sample reads one policy.Sample. Read failures are recorded in the
// sample's Err fields, never hidden.
func (o *observer) sample(now time.Time) policy.Sample {
	s := policy.Sample{Time: now}
	mem, err := host.ReadMemory()
	if err != nil {
		s.ScopeErr = err.Error()
		o.readErrors("meminfo")
	} else if o.hostScope {
		s.Scope = policy.Scope{
			RAMBytes:        mem.TotalBytes,
			SwapBytes:       mem.SwapTotalBytes,
			WorkingSetBytes: mem.TotalBytes - min(mem.AvailableBytes, mem.TotalBytes),
			SwapUsedBytes:   mem.SwapTotalBytes - min(mem.SwapFreeBytes, mem.SwapTotalBytes),
		}
	} else if m, err := o.scope.Memory(); err != nil {
		s.ScopeErr = err.Error()
		o.readErrors("scope")
	} else {
		s.Scope = scopeFromGroup(m, mem)
	}

	if v, err := host.ReadVMStat(); err != nil {
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
	return s
}

// scopeFromGroup: a sub-tree scope's RAM is its memory limit (the host's
// RAM if unlimited) and its swap what it may use: the swap devices, capped
// by its swap limit.
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
		return readPSIFile(f)
	}
	return host.ReadMemoryPSI()
}

// pressureFile is the file PSI triggers are armed on.
func (o *observer) pressureFile() string {
	if f := o.scope.PressureFile(); f != "" && !o.hostScope {
		return f
	}
	return "/proc/pressure/memory"
}

// discover lists the scope's child cgroups.
func (o *observer) discover() ([]cgroup.Group, error) {
	kids, err := o.scope.Children()
	if err != nil {
		o.readErrors("discovery")
	}
	return kids, err
}

// workload reads one child cgroup's stats and metadata.
func (o *observer) workload(g cgroup.Group) (policy.Workload, Metadata) {
	name := filepath.Base(g.Path())
	w := policy.Workload{Name: name}
	md, err := readMetadata(o.workloadsDir, name)
	if err != nil {
		w.Err = err.Error()
		o.readErrors("metadata")
	}
	w.Priority, w.RequestBytes, w.Protected = md.Priority, md.MemoryRequestBytes, md.Protected
	procs, perr := g.Procs()
	m, merr := g.Memory()
	switch {
	case merr != nil:
		w.Err = merr.Error()
		o.readErrors("workload")
	case perr != nil:
		w.Err = perr.Error()
		o.readErrors("workload")
	}
	w.Processes = len(procs)
	w.WorkingSetBytes, w.SwapBytes = m.WorkingSetBytes, m.SwapBytes
	return w, md
}
