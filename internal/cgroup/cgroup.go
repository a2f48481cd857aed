// Package cgroup reads and controls memory cgroups, v1 (memory + memsw)
// and v2 (memory.max, memory.swap.max, memory.events, cgroup.kill) behind
// one interface; every v1/v2 difference lives in this package.
//
// It reads the control files itself rather than through
// containerd/cgroups: the agent samples every workload four times a second
// and needs three files per workload (usage, swap, inactive file), where a
// library Stat reads every memory file of the group; and the tests need
// v1 memsw and v2 swap files handled as one "swap allowance".
package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/pseudofile"
)

// Unlimited is the value of a limit that is not set.
const Unlimited uint64 = math.MaxUint64

// Memory is a cgroup's memory state in bytes.
type Memory struct {
	UsageBytes uint64 `json:"usage_bytes"`
	// WorkingSetBytes is usage minus inactive file cache (kubelet's
	// definition): what the group needs resident.
	WorkingSetBytes uint64 `json:"working_set_bytes"`
	SwapBytes       uint64 `json:"swap_bytes"`
	LimitBytes      uint64 `json:"limit_bytes"`      // Unlimited if unset
	SwapLimitBytes  uint64 `json:"swap_limit_bytes"` // swap it may use; Unlimited if unset
	OOMKills        uint64 `json:"oom_kills"`
}

// Usage is the part of Memory that changes from moment to moment; it is
// cheaper to read (three files) than Memory.
type Usage struct {
	UsageBytes      uint64
	WorkingSetBytes uint64
	SwapBytes       uint64
}

// Group is one memory cgroup.
type Group interface {
	// Path is the cgroup's directory.
	Path() string
	// Memory reads the group's current memory state.
	Memory() (Memory, error)
	// Usage reads only usage, working set and swap.
	Usage() (Usage, error)
	// SetSwapLimit lets the group use at most swapBytes of swap.
	SetSwapLimit(swapBytes uint64) error
	// CapsSwap reports whether SetSwapLimit can take effect now: v2
	// always; v1 caps memory plus swap, so only with a memory limit.
	CapsSwap() (bool, error)
	// SetMemoryLimit sets the group's memory limit (v1: set it before the
	// group's processes grow; lowering it below usage fails with EBUSY).
	SetMemoryLimit(limitBytes uint64) error
	// Procs lists the processes in the group (not its children).
	Procs() ([]int, error)
	// Kill sends SIGKILL to every process in the group and its children.
	Kill() error
	// Children lists the child groups, sorted by name.
	Children() ([]Group, error)
	// PressureFile is the group's memory.pressure, or "" where the
	// hierarchy has none (v1: use the system-wide file).
	PressureFile() string
	// ChargesZswap reports whether the RAM zswap keeps for the group's
	// swapped pages counts in the group's usage (v2 only; zram's RAM is
	// never charged to a cgroup).
	ChargesZswap() bool
	// DisableSwap keeps the group's own memory out of swap (v1:
	// memory.swappiness 0; v2: memory.swap.max 0).
	DisableSwap() error
	// WatchUsage sends on wake, without blocking, each time the group's
	// memory and swap usage crosses one of thresholdsBytes; Close stops
	// it. v1 only: v2 returns ErrNoUsageEvents.
	WatchUsage(thresholdsBytes []uint64, wake chan<- time.Time) (io.Closer, error)
}

// Version is the cgroup hierarchy version.
type Version int

// Hierarchy versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Mount points probed by Open, in order: a v2 hierarchy with the memory
// controller, then the v1 memory hierarchy.
var (
	V2Mounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
	V1Mount  = "/sys/fs/cgroup/memory"
)

// Open finds the memory cgroup scope ("/", "machine.slice", a test's
// parent) on this machine's hierarchy.
func Open(scope string) (Group, error) {
	h, err := Find()
	if err != nil {
		return nil, err
	}
	return h.Open(scope)
}

// Find returns the memory hierarchy Open uses: cgroup2 with the memory
// controller, else the v1 memory hierarchy.
func Find() (Hierarchy, error) {
	for _, m := range V2Mounts {
		if hasMemoryController(m) {
			return Hierarchy{V2, m}, nil
		}
	}
	if _, err := os.Stat(filepath.Join(V1Mount, "memory.usage_in_bytes")); err == nil {
		return Hierarchy{V1, V1Mount}, nil
	}
	return Hierarchy{}, errors.New("no memory cgroup hierarchy found (looked for cgroup2 with the memory controller and a v1 memory mount)")
}

// Hierarchy is one memory cgroup hierarchy: its version and where it is
// mounted (a fixture tree in a test).
type Hierarchy struct {
	Version Version
	Mount   string
}

// Detect tells the version of the memory hierarchy mounted at mount: v2
// with the memory controller, or a v1 memory hierarchy.
func Detect(mount string) (Hierarchy, error) {
	if hasMemoryController(mount) {
		return Hierarchy{V2, mount}, nil
	}
	if _, err := os.Stat(filepath.Join(mount, "memory.usage_in_bytes")); err == nil {
		return Hierarchy{V1, mount}, nil
	}
	return Hierarchy{}, fmt.Errorf("%s is not a memory cgroup hierarchy (no cgroup.controllers with memory, no memory.usage_in_bytes)", mount)
}

// Open opens scope in the hierarchy.
func (h Hierarchy) Open(scope string) (Group, error) { return OpenAt(h.Version, h.Mount, scope) }

// Self returns the memory cgroups of h the calling process is in (from
// self/cgroup under procRoot), leaving out the hierarchy's root.
func (h Hierarchy) Self(procRoot string) ([]Group, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	self, err := fs.Self()
	if err != nil {
		return nil, err
	}
	return h.groupsOf(self)
}

// ProcessPath is the path, within h, of the memory cgroup process pid is
// in (from pid/cgroup under procRoot).
func (h Hierarchy) ProcessPath(procRoot string, pid int) (string, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return "", err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return "", err
	}
	entries, err := p.Cgroups()
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if h.holds(e) {
			return e.Path, nil
		}
	}
	return "", fmt.Errorf("process %d is in no memory cgroup of %s", pid, h.Mount)
}

// holds: e is a line of /proc/PID/cgroup for h's memory hierarchy.
func (h Hierarchy) holds(e procfs.Cgroup) bool {
	return (h.Version == V2 && e.HierarchyID == 0) || (h.Version == V1 && slices.Contains(e.Controllers, "memory"))
}

func (h Hierarchy) groupsOf(p procfs.Proc) ([]Group, error) {
	entries, err := p.Cgroups()
	if err != nil {
		return nil, err
	}
	var groups []Group
	for _, e := range entries {
		if e.Path == "/" || !h.holds(e) {
			continue
		}
		if g, err := h.Open(e.Path); err == nil {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

func hasMemoryController(mount string) bool {
	b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), "memory")
}

// OpenAt opens scope under a hierarchy of the given version mounted at
// mount (tests use fixture trees).
func OpenAt(v Version, mount, scope string) (Group, error) {
	p := filepath.Join(mount, filepath.Clean("/"+scope))
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cgroup scope %q: %s is not a cgroup directory", scope, p)
	}
	if v == V1 {
		return &v1Group{path: p}, nil
	}
	return &v2Group{path: p}, nil
}

// ParseLimit parses a single-value control file: a decimal number or "max".
// v1's "unlimited" (PAGE_COUNTER_MAX pages, about 2^63) is mapped to
// Unlimited as well.
func ParseLimit(b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return Unlimited, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse limit %q: %w", s, err)
	}
	if n >= 1<<62 {
		return Unlimited, nil
	}
	return n, nil
}

// ParseKeyValues parses "key value" lines (memory.stat, memory.events,
// memory.oom_control).
func ParseKeyValues(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("parse %q: want \"key value\"", line)
		}
		n, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		out[string(fields[0])] = n
	}
	return out, nil
}

// StatValue returns one key's value from a "key value" file such as
// memory.stat without parsing the rest; a missing key is an error.
func StatValue(b []byte, key string) (uint64, error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(line[len(key)+1:])), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s", key)
}

// readUsage reads usage, usage+swap or swap (swapIsTotal says which the
// second file holds) and the inactive file cache from a memory.stat key.
func readUsage(usageFile, swapFile string, swapIsTotal bool, statFile, inactiveKey string) (Usage, error) {
	var u Usage
	var err error
	if u.UsageBytes, err = readUint(usageFile); err != nil {
		return Usage{}, err
	}
	second, err := readUint(swapFile)
	if err != nil {
		return Usage{}, err
	}
	u.SwapBytes = second
	if swapIsTotal {
		u.SwapBytes = subtract(second, u.UsageBytes)
	}
	inactive, err := pseudofile.Parse(statFile, func(b []byte) (uint64, error) {
		v, err := StatValue(b, inactiveKey)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", statFile, err)
		}
		return v, nil
	})
	if err != nil {
		return Usage{}, err
	}
	u.WorkingSetBytes = subtract(u.UsageBytes, inactive)
	return u, nil
}

func writeValue(path string, v uint64) error {
	s := strconv.FormatUint(v, 10)
	if v == Unlimited {
		s = "max"
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("write %s to %s: %w", s, path, err)
	}
	return nil
}

// ID is the group's identity: its directory's inode, which cgroup v2 uses
// as the cgroup ID. A group removed and made again under the same path
// has a new one.
func ID(g Group) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(g.Path(), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Signal sends sig to every process in g and in its descendant groups.
func Signal(g Group, sig syscall.Signal) error { return signalTree(g.Path(), sig) }

// killTree SIGKILLs every process in dir and its descendants (v1 has no
// cgroup.kill).
func killTree(dir string) error { return signalTree(dir, syscall.SIGKILL) }

func signalTree(dir string, sig syscall.Signal) error {
	var firstErr error
	walkGroups(dir, func(dirfd int, dir string) {
		pids, err := appendProcs(nil, dirfd, dir)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH && firstErr == nil {
				firstErr = err
			}
		}
	})
	return firstErr
}

func subtract(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Create makes a child group of parent, of the same hierarchy version; on
// v2 it first enables the memory controller for parent's children.
func Create(parent Group, name string) (Group, error) {
	p := filepath.Join(parent.Path(), name)
	if _, ok := parent.(*v2Group); ok {
		ctl := filepath.Join(parent.Path(), "cgroup.subtree_control")
		if err := os.WriteFile(ctl, []byte("+memory"), 0o644); err != nil {
			return nil, fmt.Errorf("enable memory controller in %s: %w", parent.Path(), err)
		}
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if _, ok := parent.(*v2Group); ok {
		return &v2Group{path: p}, nil
	}
	return &v1Group{path: p}, nil
}

// WaitEmpty polls every poll (at least 10 ms) until g and its descendants
// hold no process, or g is gone, or ctx ends; it reports whether they
// emptied. The v1 hierarchy has no event for a cgroup becoming empty.
func WaitEmpty(ctx context.Context, g Group, poll time.Duration) bool {
	tick := time.NewTicker(max(poll, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if n, err := CountProcesses(g); n == 0 && (err == nil || errors.Is(err, os.ErrNotExist)) {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}

// Remove kills every process in g and its children and removes them all,
// deepest first, waiting up to timeout for killed processes to leave (v1
// has no event for a cgroup becoming empty).
func Remove(g Group, timeout time.Duration) error {
	var dirs []string
	walkGroups(g.Path(), func(_ int, dir string) { dirs = append(dirs, dir) })
	killTree(g.Path())
	deadline := time.Now().Add(timeout)
	for i := len(dirs) - 1; i >= 0; i-- {
		for {
			err := os.Remove(dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
			}
			killTree(dirs[i])
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// Command returns a command that joins the cgroup directory dir (v1 or v2)
// before it execs name, so the program's first page is already charged to
// the group: v1 cannot lower a limit below what a group already holds, so
// a process moved in later would escape it. Inherited descriptors
// (ExtraFiles) pass through.
func Command(dir, name string, args ...string) *exec.Cmd {
	script := `echo $$ > "$0/cgroup.procs" && exec "$@"`
	return exec.Command("/bin/sh", append([]string{"-c", script, dir, name}, args...)...)
}
