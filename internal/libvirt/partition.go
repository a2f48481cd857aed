package libvirt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

// Partition is a libvirt resource partition under /machine: a domain whose
// <resource><partition> names it has its cgroups below it in every
// hierarchy, so the partition's memory limit bounds its domains (a node of
// a density run) and the default partition's limits never change.
type Partition struct {
	// Name is the partition as <resource><partition> names it.
	Name string
	// Memory is its group in the memory hierarchy.
	Memory cgroup.Group
	// made are the directories created, parents first.
	made []string
}

// CreatePartition makes /machine/NAME with ramBytes of memory and swapBytes
// of swap (0: no limits). libvirt without systemd (cgroupfs) keeps a
// partition as "NAME.partition" in every mounted hierarchy and refuses to
// start a domain in one a hierarchy lacks; with systemd a partition must
// be a slice, which this does not make.
func CreatePartition(h cgroup.Hierarchy, name string, ramBytes, swapBytes uint64) (*Partition, error) {
	mounts, err := CgroupMounts()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(h.Mount, "machine.slice")); err == nil {
		return nil, errors.New("libvirt partition: this host's libvirt uses systemd slices (machine.slice), which headroom does not make")
	}
	p := &Partition{Name: "/machine/" + name}
	for _, root := range mounts {
		machine := filepath.Join(root, "machine")
		if _, err := os.Stat(machine); os.IsNotExist(err) {
			if err := os.Mkdir(machine, 0o755); err != nil {
				p.Remove(0)
				return nil, fmt.Errorf("libvirt partition: %w", err)
			}
			p.made = append(p.made, machine)
		}
		dir := filepath.Join(machine, name+".partition")
		if err := os.Mkdir(dir, 0o755); err != nil {
			p.Remove(0)
			return nil, fmt.Errorf("libvirt partition: %w", err)
		}
		p.made = append(p.made, dir)
		if filepath.Base(root) == "cpuset" {
			// A new cpuset is empty, and a task cannot join an empty one.
			for _, d := range []string{machine, dir} {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if cur, _ := os.ReadFile(filepath.Join(d, f)); len(strings.TrimSpace(string(cur))) == 0 {
						parent, _ := os.ReadFile(filepath.Join(filepath.Dir(d), f))
						os.WriteFile(filepath.Join(d, f), parent, 0o644)
					}
				}
			}
		}
	}
	if p.Memory, err = h.Open(filepath.Join("machine", name+".partition")); err != nil {
		p.Remove(0)
		return nil, fmt.Errorf("libvirt partition: %w", err)
	}
	if ramBytes > 0 {
		err := p.Memory.SetMemoryLimit(ramBytes)
		if err == nil {
			err = p.Memory.SetSwapLimit(swapBytes)
		}
		if err != nil {
			p.Remove(0)
			return nil, fmt.Errorf("libvirt partition %s: %w", name, err)
		}
	}
	return p, nil
}

// Remove removes the partition's directories, children first, waiting up
// to wait for libvirt to remove its destroyed domains' groups below them.
// A /machine made for it goes only if nothing else is in it.
func (p *Partition) Remove(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var errs []error
	for i := len(p.made) - 1; i >= 0; i-- {
		dir := p.made[i]
		isMachine := filepath.Base(dir) == "machine"
		for {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) || isMachine {
				break // a /machine others use now stays
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	p.made = nil
	return errors.Join(errs...)
}

// CgroupMounts are the mounted cgroup hierarchies (v1 controllers and v2).
func CgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			out = append(out, f[1])
		}
	}
	return out, nil
}
