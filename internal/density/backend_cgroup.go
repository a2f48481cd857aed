package density

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/results"
)

// cgroupBackend: the node is a memory cgroup (limited to --node-memory)
// and a worker is a child cgroup (limited to --vm-memory) holding one
// `headroom load` process.
type cgroupBackend struct {
	scope      cgroup.Group
	executable string
}

func newCgroupBackend(p Params, nodeSwapBytes uint64) (*cgroupBackend, error) {
	g, err := newNodeCgroup(p, nodeSwapBytes)
	if err != nil {
		return nil, err
	}
	return &cgroupBackend{scope: g, executable: p.Executable}, nil
}

func (b *cgroupBackend) Scope() cgroup.Group            { return b.scope }
func (b *cgroupBackend) Close() error                   { return cgroup.Remove(b.scope, 30*time.Second) }
func (b *cgroupBackend) Metadata(string) map[string]any { return nil }

// StartLead: about 10 ms plus 0.2 ms per worker delivers every start
// message locally (bench/density-skew.sh).
func (b *cgroupBackend) StartLead(n int) time.Duration {
	return 10*time.Millisecond + time.Duration(n)*200*time.Microsecond
}

func (b *cgroupBackend) StartWorker(name string, memoryBytes uint64, loadArgs []string, controller string) (Worker, error) {
	g, err := workerCgroup(b.scope, name, memoryBytes)
	if err != nil {
		return nil, err
	}
	w := &cgroupWorker{name: name, group: g, exited: make(chan struct{}), stderr: limitedWriter{max: 4096}}
	w.cmd = cgroup.Command(g.Path(), b.executable, append([]string{"load"}, joinArgs(loadArgs, name, controller)...)...)
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
func (w *cgroupWorker) Failure() string         { return lastLine(w.stderr.String()) }
func (w *cgroupWorker) VM() *results.VMResult   { return nil }

func (w *cgroupWorker) Sample() (results.WorkerSample, bool) { return sampleCgroup(w.name, w.group) }

// OOMKilled reads the kernel's count of OOM kills in the worker's own
// cgroup, so a worker killed by anything else is not mistaken for one.
func (w *cgroupWorker) OOMKilled() bool {
	m, err := w.group.Memory()
	return err == nil && m.OOMKills > 0
}
