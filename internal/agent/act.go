package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

// Target is a workload to evict: its cgroup and, for a VM, its QMP
// connection.
type Target struct {
	Name  string
	Group cgroup.Group
	// VM is set when the workload's metadata names a QMP socket.
	VM vmControl
}

// vmControl is what an eviction needs of a VM.
type vmControl interface {
	Powerdown() error
	Quit() error
}

// Evictor removes a workload from the node in two steps: Begin asks it to
// leave and returns at once (it never waits on the workload); Finish,
// run in its own goroutine, waits for it to go, forces it after the grace
// period, and reports how it went. The Kubernetes Eviction API plugs in
// here.
type Evictor interface {
	Begin(t Target) error
	Finish(ctx context.Context, t Target) policy.EvictionOutcome
}

// DefaultEvictor evicts a process workload with SIGTERM, then SIGKILL
// after Grace (cgroup.kill on v2); a VM with its power button (QMP
// system_powerdown: the guest shuts down cleanly), then QMP quit, then
// SIGKILL. A VM whose QMP socket does not answer gets SIGTERM (QEMU exits)
// and the same forced path.
type DefaultEvictor struct {
	Grace time.Duration
	// Poll is how often the cgroup is checked for remaining processes; the
	// v1 hierarchy has no event for a cgroup becoming empty.
	Poll time.Duration
}

// Begin sends the graceful request. A VM's power-down is sent from its own
// goroutine (a QEMU that does not answer must not hold the agent); Finish
// learns its result.
func (e DefaultEvictor) Begin(t Target) error {
	if t.VM != nil {
		return nil
	}
	if err := cgroup.Signal(t.Group, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", t.Group.Path(), err)
	}
	return nil
}

// Finish waits for the workload's processes (in its whole subtree) to
// exit and forces what is left after the grace period. ctx bounds it: the
// eviction deadline.
func (e DefaultEvictor) Finish(ctx context.Context, t Target) policy.EvictionOutcome {
	start := time.Now()
	var notes []string
	if t.VM != nil {
		if err := t.VM.Powerdown(); err != nil {
			notes = append(notes, "QMP power-down failed ("+err.Error()+"), sent SIGTERM")
			cgroup.Signal(t.Group, syscall.SIGTERM)
		}
	}
	outcome := func(result string) policy.EvictionOutcome {
		return policy.EvictionOutcome{Workload: t.Name, Result: result, Seconds: time.Since(start).Seconds(), Err: strings.Join(notes, "; ")}
	}
	grace, cancel := context.WithTimeout(ctx, e.Grace)
	defer cancel()
	if e.waitEmpty(grace, t.Group) {
		return outcome(policy.EvictedGracefully)
	}
	if t.VM != nil {
		if err := t.VM.Quit(); err != nil {
			notes = append(notes, "QMP quit failed ("+err.Error()+")")
		} else {
			settle, cancel := context.WithTimeout(ctx, 2*time.Second)
			gone := e.waitEmpty(settle, t.Group)
			cancel()
			if gone {
				return outcome(policy.EvictedForcibly)
			}
		}
	}
	if err := t.Group.Kill(); err != nil {
		notes = append(notes, "kill: "+err.Error())
	}
	if e.waitEmpty(ctx, t.Group) {
		return outcome(policy.EvictedForcibly)
	}
	n, _ := cgroup.CountProcesses(t.Group)
	notes = append(notes, fmt.Sprintf("%d processes left after SIGKILL", n))
	return outcome(policy.EvictionFailed)
}

// waitEmpty polls until the group and its descendants hold no process or
// ctx ends; it reports whether they emptied.
func (e DefaultEvictor) waitEmpty(ctx context.Context, g cgroup.Group) bool {
	poll := time.NewTicker(max(e.Poll, 10*time.Millisecond))
	defer poll.Stop()
	for {
		if n, err := cgroup.CountProcesses(g); n == 0 && (err == nil || errors.Is(err, os.ErrNotExist)) {
			return true
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			return false
		}
	}
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
