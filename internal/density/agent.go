package density

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/agent"
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

// agentStartTimeout bounds the agent's start: its configuration is read
// and its first round done in well under a second.
const agentStartTimeout = 30 * time.Second

// runningAgent is the run's agent process.
type runningAgent struct {
	cmd       *exec.Cmd
	out, logf *os.File // its decisions and its log, in the results
	stateDir  string   // its eviction journal's, removed at its stop
	exited    chan struct{}
	// Set before exited is closed: how it ended and its last log line.
	waitErr error
	lastLog string
}

func (a *runningAgent) hasExited() bool {
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

// exitReason says why the agent ended, once it has.
func (a *runningAgent) exitReason() string {
	status, line := "exit status 0", a.lastLog
	if a.waitErr != nil {
		status = a.waitErr.Error()
	}
	if line == "" {
		line = "none"
	}
	return fmt.Sprintf("the agent exited (%s); its last log line: %s", status, line)
}

// stop ends the agent (SIGTERM, SIGKILL after 15 s) and closes its files.
func (a *runningAgent) stop() {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
	a.out.Close()
	a.logf.Close()
	os.RemoveAll(a.stateDir)
}

// startAgent runs `headroom agent` on the run's node for the whole run and
// returns once it has started; its decisions go to agent.jsonl in the
// results, its log to agent.log. An agent that exits at its start (a
// configuration it refuses) is an error naming its last log line.
func (h *Harness) startAgent() (*runningAgent, error) {
	hier, err := cgroup.Find()
	if err != nil {
		return nil, err
	}
	scope := strings.TrimPrefix(h.backend.Scope().Path(), hier.Mount)
	// Its own eviction journal: the default is the node agent's, which a
	// second agent would overwrite (and resume from).
	a := &runningAgent{stateDir: filepath.Join(h.dir, "agent-state"), exited: make(chan struct{})}
	args := []string{"agent", "--scope", scope, "--listen", "", "--state-dir", a.stateDir}
	if p, ok := h.backend.(platformBackend); ok {
		args = append(args, p.AgentArgs()...)
	} else {
		args = append(args, "--workloads-dir", h.metaDir)
	}
	if h.p.Balloon != "" {
		args = append(args, "--balloon", "--balloon-policy", h.p.Balloon)
	}
	logPath := filepath.Join(h.dir, "agent.log")
	if a.out, err = os.Create(filepath.Join(h.dir, results.AgentFile)); err != nil {
		return nil, err
	}
	if a.logf, err = os.Create(logPath); err != nil {
		a.out.Close()
		return nil, err
	}
	a.cmd = exec.Command(h.p.Executable, args...)
	a.cmd.Stdout = a.out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := a.cmd.StderrPipe()
	if err == nil {
		err = a.cmd.Start()
	}
	if err != nil {
		a.out.Close()
		a.logf.Close()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	started := make(chan struct{})
	go func() {
		announced := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(a.logf, line)
			a.lastLog = line
			if !announced && strings.Contains(line, `msg="`+agent.StartedMessage+`"`) {
				close(started)
				announced = true
			}
		}
		io.Copy(a.logf, stderr) // past a line too long to scan: the agent must never block on its log
		// Wait closes the pipe: the log is read to its end first.
		a.waitErr = a.cmd.Wait()
		close(a.exited)
	}()
	select {
	case <-started:
	case <-a.exited:
		a.stop()
		return nil, fmt.Errorf("%s (%s)", a.exitReason(), logPath)
	case <-time.After(agentStartTimeout):
		a.stop()
		return nil, fmt.Errorf("the agent did not start within %s (%s)", agentStartTimeout, logPath)
	}
	h.rep.Note("agent running on %s (pid %d)", scope, a.cmd.Process.Pid)
	return a, nil
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
