package cgroup

import (
	"fmt"
	"path/filepath"
)

// v1Group is a cgroup v1 memory group. Swap is accounted through memsw
// (memory + swap): swap = memsw.usage - usage, and a swap allowance is
// memsw.limit = limit + allowance.
type v1Group struct {
	path string
}

func (g *v1Group) Path() string       { return g.path }
func (g *v1Group) ChargesZswap() bool { return false }

func (g *v1Group) CapsSwap() (bool, error) {
	limit, err := readUint(g.file("memory.limit_in_bytes"))
	return err == nil && limit != Unlimited, err
}

func (g *v1Group) PressureFile() string { return "" }
func (g *v1Group) DisableSwap() error   { return writeValue(g.file("memory.swappiness"), 0) }
func (g *v1Group) file(name string) string {
	return filepath.Join(g.path, name)
}

func (g *v1Group) Usage() (Usage, error) {
	u, err := readUsage(g.file("memory.usage_in_bytes"), g.file("memory.memsw.usage_in_bytes"), true,
		g.file("memory.stat"), "total_inactive_file")
	if err != nil {
		return Usage{}, fmt.Errorf("%w (memsw files need swap accounting: swapaccount=1)", err)
	}
	return u, nil
}

func (g *v1Group) Memory() (Memory, error) {
	u, err := g.Usage()
	if err != nil {
		return Memory{}, err
	}
	m := Memory{UsageBytes: u.UsageBytes, WorkingSetBytes: u.WorkingSetBytes, SwapBytes: u.SwapBytes}
	if m.LimitBytes, err = readUint(g.file("memory.limit_in_bytes")); err != nil {
		return Memory{}, err
	}
	memswLimit, err := readUint(g.file("memory.memsw.limit_in_bytes"))
	if err != nil {
		return Memory{}, err
	}
	m.SwapLimitBytes = Unlimited
	if memswLimit != Unlimited && m.LimitBytes != Unlimited {
		m.SwapLimitBytes = subtract(memswLimit, m.LimitBytes)
	}
	oom, err := readKeyValues(g.file("memory.oom_control"))
	if err != nil {
		return Memory{}, err
	}
	m.OOMKills = oom["oom_kill"]
	return m, nil
}

// SetSwapLimit sets memsw.limit = limit + swapBytes. v1 cannot cap swap
// without a memory limit, and refuses a memsw limit below current usage
// (EBUSY), which the caller sees as an error.
func (g *v1Group) SetSwapLimit(swapBytes uint64) error {
	limit, err := readUint(g.file("memory.limit_in_bytes"))
	if err != nil {
		return err
	}
	if limit == Unlimited {
		return fmt.Errorf("%s: cgroup v1 cannot limit swap of a group without a memory limit", g.path)
	}
	target := Unlimited
	if swapBytes != Unlimited {
		target = limit + swapBytes
	}
	return writeValue(g.file("memory.memsw.limit_in_bytes"), target)
}

// SetMemoryLimit sets memory.limit_in_bytes, keeping memsw at least as
// large (v1 refuses a memory limit above the memsw limit).
func (g *v1Group) SetMemoryLimit(limitBytes uint64) error {
	memsw, err := readUint(g.file("memory.memsw.limit_in_bytes"))
	if err != nil {
		return err
	}
	if memsw != Unlimited && memsw < limitBytes {
		if err := writeValue(g.file("memory.memsw.limit_in_bytes"), limitBytes); err != nil {
			return err
		}
	}
	return writeValue(g.file("memory.limit_in_bytes"), limitBytes)
}

func (g *v1Group) Procs() ([]int, error) { return readProcs(g.path) }
func (g *v1Group) Kill() error           { return killTree(g.path) }

func (g *v1Group) Children() ([]Group, error) {
	dirs, err := childDirs(g.path)
	if err != nil {
		return nil, err
	}
	out := make([]Group, len(dirs))
	for i, d := range dirs {
		out[i] = &v1Group{path: d}
	}
	return out, nil
}
