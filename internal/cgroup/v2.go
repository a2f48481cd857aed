package cgroup

import (
	"errors"
	"os"
	"path/filepath"
)

// v2Group is a cgroup v2 group with the memory controller enabled.
type v2Group struct {
	path string
}

func (g *v2Group) Path() string            { return g.path }
func (g *v2Group) ChargesZswap() bool      { return true }
func (g *v2Group) CapsSwap() (bool, error) { return true, nil }

func (g *v2Group) PressureFile() string { return g.file("memory.pressure") }
func (g *v2Group) DisableSwap() error   { return writeValue(g.file("memory.swap.max"), 0) }
func (g *v2Group) file(name string) string {
	return filepath.Join(g.path, name)
}

func (g *v2Group) Usage() (Usage, error) {
	return readUsage(g.file("memory.current"), g.file("memory.swap.current"), false, g.file("memory.stat"), "inactive_file")
}

func (g *v2Group) Memory() (Memory, error) {
	u, err := g.Usage()
	if err != nil {
		return Memory{}, err
	}
	m := Memory{UsageBytes: u.UsageBytes, WorkingSetBytes: u.WorkingSetBytes, SwapBytes: u.SwapBytes}
	if m.LimitBytes, err = readUint(g.file("memory.max")); err != nil {
		return Memory{}, err
	}
	if m.SwapLimitBytes, err = readUint(g.file("memory.swap.max")); err != nil {
		return Memory{}, err
	}
	events, err := readKeyValues(g.file("memory.events"))
	if err != nil {
		return Memory{}, err
	}
	m.OOMKills = events["oom_kill"]
	return m, nil
}

func (g *v2Group) SetSwapLimit(swapBytes uint64) error {
	return writeValue(g.file("memory.swap.max"), swapBytes)
}

func (g *v2Group) SetMemoryLimit(limitBytes uint64) error {
	return writeValue(g.file("memory.max"), limitBytes)
}

func (g *v2Group) Procs() ([]int, error) { return readProcs(g.path) }

// Kill uses cgroup.kill (Linux 5.14+), which also reaches processes forked
// during the kill; older kernels fall back to signalling each process.
func (g *v2Group) Kill() error {
	err := os.WriteFile(g.file("cgroup.kill"), []byte("1"), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return killTree(g.path)
	}
	return err
}

func (g *v2Group) Children() ([]Group, error) {
	dirs, err := childDirs(g.path)
	if err != nil {
		return nil, err
	}
	out := make([]Group, len(dirs))
	for i, d := range dirs {
		out[i] = &v2Group{path: d}
	}
	return out, nil
}
