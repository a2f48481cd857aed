package density

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

// Backend is where a run's workers live: the node and how a worker is
// started on it. The cgroup backend is the first; the qemu micro-VM and
// kubevirt backends implement the same interface.
type Backend interface {
	// Scope is the node's memory cgroup: the agent's scope, and where the
	// node's usage, swap and pressure are read.
	Scope() cgroup.Group
	// StartWorker starts a worker with memoryBytes of declared memory
	// running `headroom load` with loadArgs (which join the controller).
	StartWorker(name string, memoryBytes uint64, loadArgs []string) (Worker, error)
	// Close removes the node and anything left on it.
	Close() error
}

// Worker is one started worker.
type Worker interface {
	Name() string
	// Exited is closed when the worker has ended.
	Exited() <-chan struct{}
	// Stderr is the start of the worker's error output (failure reasons).
	Stderr() string
	// OOMKilled reports whether the kernel OOM-killed the worker.
	OOMKilled() bool
	// Stop asks the worker to end (SIGTERM; for a VM, a power-down).
	Stop()
	// Kill ends it at once.
	Kill()
	// Remove releases what the worker held, after it has exited.
	Remove() error
}

// newBackend creates the run's node, with nodeSwapBytes of swap.
func newBackend(p Params, nodeSwapBytes uint64) (Backend, error) {
	switch p.Backend {
	case "cgroup":
		return newCgroupBackend(p, nodeSwapBytes)
	}
	return nil, fmt.Errorf("--backend %q is not available", p.Backend)
}

// cgroupBackend: the node is a memory cgroup (limited to --node-memory)
// and a worker is a child cgroup (limited to --vm-memory) holding one
// `headroom load` process.
type cgroupBackend struct {
	scope      cgroup.Group
	executable string
}

// NodeCgroupName is the node cgroup (a child of the memory hierarchy's
// root) of the density run in process pid.
func NodeCgroupName(pid int) string { return fmt.Sprintf("headroom-density-%d", pid) }

// newCgroupBackend creates the node cgroup; with --node-memory its memory
// limit is the node's RAM and its swap limit the node's swap.
func newCgroupBackend(p Params, nodeSwapBytes uint64) (*cgroupBackend, error) {
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
	return &cgroupBackend{scope: g, executable: p.Executable}, nil
}

func (b *cgroupBackend) Scope() cgroup.Group { return b.scope }

func (b *cgroupBackend) Close() error { return cgroup.Remove(b.scope, 30*time.Second) }

func (b *cgroupBackend) StartWorker(name string, memoryBytes uint64, loadArgs []string) (Worker, error) {
	g, err := cgroup.Create(b.scope, name)
	if err != nil {
		return nil, err
	}
	if err := g.SetMemoryLimit(memoryBytes); err != nil {
		cgroup.Remove(g, time.Second)
		return nil, fmt.Errorf("worker %s: %w", name, err)
	}
	w := &cgroupWorker{name: name, group: g, exited: make(chan struct{}), stderr: limitedWriter{max: 4096}}
	// Join the cgroup before exec, so the workload's first page is charged to it.
	script := `echo $$ > "$0/cgroup.procs" && exec "$@"`
	args := append([]string{"-c", script, g.Path(), b.executable, "load"}, loadArgs...)
	w.cmd = exec.Command("/bin/sh", args...)
	w.cmd.Stderr = &w.stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		cgroup.Remove(g, time.Second)
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	go func() {
		w.cmd.Wait()
		close(w.exited)
	}()
	return w, nil
}

type cgroupWorker struct {
	name   string
	group  cgroup.Group
	cmd    *exec.Cmd
	stderr limitedWriter
	exited chan struct{}
}

func (w *cgroupWorker) Name() string            { return w.name }
func (w *cgroupWorker) Exited() <-chan struct{} { return w.exited }
func (w *cgroupWorker) Stop()                   { w.cmd.Process.Signal(syscall.SIGTERM) }
func (w *cgroupWorker) Kill()                   { w.cmd.Process.Kill() }
func (w *cgroupWorker) Remove() error           { return cgroup.Remove(w.group, 10*time.Second) }

func (w *cgroupWorker) Stderr() string { return w.stderr.String() }

// OOMKilled reads the kernel's count of OOM kills in the worker's own
// cgroup, so a worker killed by anything else is not mistaken for one.
func (w *cgroupWorker) OOMKilled() bool {
	m, err := w.group.Memory()
	return err == nil && m.OOMKills > 0
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
