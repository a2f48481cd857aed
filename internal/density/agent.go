package density

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/results"
)

// startAgent runs `headroom agent` on the run's node for the whole run;
// its decisions go to agent.jsonl in the results.
func (h *Harness) startAgent() (stop func(), err error) {
	mount := filepath.Dir(h.backend.Scope().Path())
	scope := strings.TrimPrefix(h.backend.Scope().Path(), mount)
	out, err := os.Create(filepath.Join(h.dir, results.AgentFile))
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(h.dir, "agent.log"))
	if err != nil {
		out.Close()
		return nil, err
	}
	args := []string{"agent", "--scope", scope, "--workloads-dir", h.metaDir, "--listen", ""}
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
