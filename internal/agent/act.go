package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

// Evictor removes a workload from the node in two steps: Begin starts a
// graceful eviction and returns once it is signalled; Finish waits for the
// workload to go and forces it after a grace period. The default signals
// processes; QMP power-down and the Kubernetes Eviction API plug in here.
type Evictor interface {
	Begin(g cgroup.Group) error
	Finish(ctx context.Context, g cgroup.Group) error
}

// SignalEvictor sends SIGTERM to every process of the workload's cgroup,
// then kills what is left after Grace (cgroup.kill on v2).
type SignalEvictor struct {
	Grace time.Duration
	// Poll is how often the cgroup is checked for remaining processes; the
	// v1 hierarchy has no event for a cgroup becoming empty.
	Poll time.Duration
}

// Begin sends SIGTERM to every process of the workload.
func (e SignalEvictor) Begin(g cgroup.Group) error {
	if err := cgroup.Signal(g, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", g.Path(), err)
	}
	return nil
}

// Finish waits for the workload's processes to exit and kills the rest
// after the grace period.
func (e SignalEvictor) Finish(ctx context.Context, g cgroup.Group) error {
	deadline := time.NewTimer(e.Grace)
	defer deadline.Stop()
	poll := time.NewTicker(max(e.Poll, 10*time.Millisecond))
	defer poll.Stop()
	for {
		if empty(g) {
			return nil
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			return g.Kill()
		case <-ctx.Done():
			return g.Kill()
		}
	}
}

func empty(g cgroup.Group) bool {
	pids, err := g.Procs()
	if err != nil || len(pids) > 0 {
		return false
	}
	kids, _ := g.Children()
	for _, k := range kids {
		if !empty(k) {
			return false
		}
	}
	return true
}

// protectSelf keeps the agent alive and resident under the pressure it is
// there to handle: its memory locked, the OOM killer pointed elsewhere, and
// no swap for its own cgroup. Each step is logged; failures do not stop it.
func protectSelf(cfg Config, own []cgroup.Group, log *slog.Logger) {
	if cfg.Mlock {
		// MCL_ONFAULT locks pages as they are touched instead of
		// populating every future mapping (the Go heap reserves large ones).
		if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
			log.Warn("mlockall failed; the agent may be swapped out", "err", err)
		}
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(cfg.OOMScoreAdj)), 0o644); err != nil {
		log.Warn("cannot set oom_score_adj", "value", cfg.OOMScoreAdj, "err", err)
	}
	if err := disableOwnSwap(own); err != nil {
		log.Info("own cgroup swap not limited", "reason", err)
	}
}

// disableOwnSwap turns swap off for the agent's own memory cgroup when it
// has one of its own (not the root).
func disableOwnSwap(own []cgroup.Group) error {
	if len(own) == 0 {
		return fmt.Errorf("the agent runs in the root memory cgroup")
	}
	return own[0].DisableSwap()
}
