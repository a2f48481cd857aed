package density

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/results"
)

// Backend is where a run's workers live: the node and how a worker is
// started on it: a memory cgroup per worker (cgroup) or a micro-VM per
// worker (qemu), a libvirt domain per worker (libvirt); kubevirt
// implements the same interface.
type Backend interface {
	// Scope is the node's memory cgroup: the agent's scope, and where the
	// node's usage, swap and pressure are read.
	Scope() cgroup.Group
	// StartWorker starts a worker with memoryBytes of declared memory
	// running `headroom load` with loadArgs, joined as name to the
	// controller at controllerAddr ("unix:/path").
	StartWorker(name string, memoryBytes uint64, loadArgs []string, controllerAddr string) (Worker, error)
	// StartLead is how far ahead of now n workers are told to begin: long
	// enough for the start message to reach every one of them.
	StartLead(n int) time.Duration
	// Metadata is what the backend adds to a worker's agent metadata
	// (a VM's QMP socket); nil if nothing.
	Metadata(name string) map[string]any
	// Close removes the node and anything left on it.
	Close() error
}

// Worker is one started worker.
type Worker interface {
	Name() string
	// Exited is closed when the worker has ended.
	Exited() <-chan struct{}
	// Failure explains an ended worker: the start of its error output, or
	// why a VM stopped, with the tail of its console.
	Failure() string
	// OOMKilled reports whether the kernel OOM-killed the worker.
	OOMKilled() bool
	// Stop asks the worker to end (SIGTERM; for a VM, a power-down).
	Stop()
	// Kill ends it at once.
	Kill()
	// Remove releases what the worker held, after it has exited.
	Remove() error
	// Sample reads the worker's state from the host (for a VM, with the
	// guest's own view); ok is false once it cannot be read.
	Sample() (s results.WorkerSample, ok bool)
	// VM describes a VM worker's start-up (nil for other workers).
	VM() *results.VMResult
}

// newBackend creates the run's node, with nodeSwapBytes of swap.
// preflight checks, before the run changes anything (swap, cgroups), that
// the backend's platform answers.
func preflight(p Params) error {
	if p.Backend == "libvirt" {
		if err := libvirt.Ping(p.libvirtURI()); err != nil {
			return fmt.Errorf("%w (is libvirtd running? without systemd: virtlogd -d; libvirtd -d)", err)
		}
	}
	return nil
}

func newBackend(p Params, nodeSwapBytes uint64) (Backend, error) {
	switch p.Backend {
	case "cgroup":
		return newCgroupBackend(p, nodeSwapBytes)
	case "qemu":
		return newQEMUBackend(p, nodeSwapBytes)
	case "libvirt":
		return newLibvirtBackend(p, nodeSwapBytes)
	}
	return nil, fmt.Errorf("--backend %q is not available", p.Backend)
}

// newNodeCgroup creates the node cgroup; with --node-memory its memory
// limit is the node's RAM and its swap limit the node's swap.
func newNodeCgroup(p Params, nodeSwapBytes uint64) (cgroup.Group, error) {
	root, err := cgroup.Open("/")
	if err != nil {
		return nil, err
	}
	g, err := cgroup.Create(root, NodeCgroupName(os.Getpid()))
	if err != nil {
		return nil, err
	}
	if p.NodeMemoryBytes > 0 {
		err := g.SetMemoryLimit(p.NodeMemoryBytes)
		if err == nil {
			err = g.SetSwapLimit(nodeSwapBytes)
		}
		if err != nil {
			cgroup.Remove(g, time.Second)
			return nil, err
		}
	}
	return g, nil
}

// NodeCgroupName is the node cgroup (a child of the memory hierarchy's
// root) of the density run in process pid.
func NodeCgroupName(pid int) string { return fmt.Sprintf("headroom-density-%d", pid) }

// NodeCgroupPath is where the density run in process pid creates its node
// cgroup: in the memory hierarchy this machine uses (v2 or v1).
func NodeCgroupPath(pid int) (string, error) {
	root, err := cgroup.Open("/")
	if err != nil {
		return "", err
	}
	return filepath.Join(root.Path(), NodeCgroupName(pid)), nil
}

// workerCgroup creates a worker's cgroup under the node, limited to limitBytes.
func workerCgroup(scope cgroup.Group, name string, limitBytes uint64) (cgroup.Group, error) {
	g, err := cgroup.Create(scope, name)
	if err != nil {
		return nil, err
	}
	if err := g.SetMemoryLimit(limitBytes); err != nil {
		cgroup.Remove(g, time.Second)
		return nil, fmt.Errorf("worker %s: %w", name, err)
	}
	return g, nil
}

// sampleCgroup reads a worker cgroup's usage, swap and its processes' CPU
// time (0 where none could be read).
func sampleCgroup(name string, g cgroup.Group) (results.WorkerSample, bool) {
	u, err := g.Usage()
	if err != nil {
		return results.WorkerSample{Name: name}, false
	}
	s := results.WorkerSample{Name: name, CgroupUsageBytes: u.UsageBytes, CgroupSwapBytes: u.SwapBytes}
	if pids, err := g.Procs(); err == nil {
		for _, pid := range pids {
			if cpu, err := host.ProcessCPUSeconds(pid); err == nil { // gone meanwhile: not counted
				s.CPUSeconds += cpu
			}
		}
	}
	return s, true
}

// joinArgs adds the controller flags to a worker's load arguments.
func joinArgs(loadArgs []string, name, controller string) []string {
	return append(append([]string(nil), loadArgs...), "--controller", controller, "--worker-id", name)
}

// limitedWriter keeps the first max bytes written; safe to read while
// the process still writes.
type limitedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
