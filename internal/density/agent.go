package density

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
)

// platformBackend is a backend whose workloads the agent finds on their
// platform (libvirt's domains), not in the run's metadata files.
type platformBackend interface {
	// AgentArgs are the agent's flags for the platform.
	AgentArgs() []string
	// WorkloadName is the agent's name for a worker.
	WorkloadName(worker string) string
}

// workloadName is the agent's name for a worker.
func (h *Harness) workloadName(worker string) string {
	if p, ok := h.backend.(platformBackend); ok {
		return p.WorkloadName(worker)
	}
	return worker
}

// startAgent runs `headroom agent` on the run's node for the whole run;
// its decisions go to agent.jsonl in the results.
func (h *Harness) startAgent() (stop func(), err error) {
	hier, err := cgroup.Find()
	if err != nil {
		return nil, err
	}
	scope := strings.TrimPrefix(h.backend.Scope().Path(), hier.Mount)
	args := []string{"agent", "--scope", scope, "--listen", ""}
	if p, ok := h.backend.(platformBackend); ok {
		args = append(args, p.AgentArgs()...)
	} else {
		args = append(args, "--workloads-dir", h.metaDir)
	}
	out, err := os.Create(filepath.Join(h.dir, results.AgentFile))
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(h.dir, "agent.log"))
	if err != nil {
		out.Close()
		return nil, err
	}
	if h.p.Balloon != "" {
		args = append(args, "--balloon", "--balloon-policy", h.p.Balloon)
	}
	cmd := exec.Command(h.p.Executable, args...)
	cmd.Stdout, cmd.Stderr = out, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		logf.Close()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	h.rep.Note("agent running on %s (pid %d)", scope, cmd.Process.Pid)
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
		logf.Close()
	}, nil
}

// countStartEvictions names the agent's evictions of a step's workers
// while they started: such a worker only shows as one that exited or
// lost its connection before it was ready, so the step's evictions and
// its failure say what the agent's decisions say.
func (h *Harness) countStartEvictions(step *results.Step, workers []*worker, stepStart time.Time) {
	if !h.p.Agent {
		return
	}
	decisions, err := results.ReadDecisions(h.dir)
	if err != nil {
		return // the failure stands as the harness saw it
	}
	names := make([]string, len(workers))
	for i, w := range workers {
		names[i] = h.workloadName(w.Name())
	}
	evicted := evictedSince(decisions, names, stepStart)
	step.Evictions += len(evicted)
	if len(evicted) > 0 {
		step.FailReason = fmt.Sprintf("worker %s evicted by the agent while starting (%s)", strings.Join(evicted, ", "), step.FailReason)
	}
}

// evictedSince is the workers among names the agent decided to evict at
// or after since, in the order of its decisions, each once.
func evictedSince(decisions []policy.Decision, names []string, since time.Time) []string {
	var out []string
	for _, d := range decisions {
		if d.Action == policy.ActionEvict && !d.Time.Before(since) && slices.Contains(names, d.Workload) && !slices.Contains(out, d.Workload) {
			out = append(out, d.Workload)
		}
	}
	return out
}
