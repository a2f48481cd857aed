package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/units"
)

// protectSelf keeps the agent alive and resident under the pressure it is
// there to handle: its memory locked, the OOM killer pointed elsewhere, and
// no swap for its own cgroup. Each step is logged; failures do not stop it.
func protectSelf(cfg Config, own []cgroup.Group, log *slog.Logger) {
	if cfg.Mlock {
		// MCL_ONFAULT locks pages as they are touched instead of
		// populating every future mapping (the Go heap reserves large ones).
		if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
			var limit unix.Rlimit
			if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &limit) != nil {
				limit.Cur = unix.RLIM_INFINITY
			}
			log.Warn("mlockall failed; the agent may be swapped out", withFix([]any{"err", err}, mlockFix(err, limit.Cur))...)
		}
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(cfg.OOMScoreAdj)), 0o644); err != nil {
		log.Warn("cannot set oom_score_adj", withFix([]any{"value", cfg.OOMScoreAdj, "err", err}, oomScoreFix(err))...)
	}
	if err := disableOwnSwap(own); err != nil {
		log.Info("own cgroup swap not limited", "reason", err)
	}
}

// mlockFix says what lets the agent lock its memory, from mlockall's
// error and the RLIMIT_MEMLOCK it ran under: without CAP_IPC_LOCK the
// kernel refuses (EPERM) at a limit of 0 and runs out (ENOMEM) at any
// limit smaller than the agent.
func mlockFix(err error, limitBytes uint64) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return "grant the agent CAP_IPC_LOCK (deploy/daemonset.yaml does)"
	case errors.Is(err, unix.ENOMEM) && limitBytes != unix.RLIM_INFINITY:
		return fmt.Sprintf("RLIMIT_MEMLOCK is %s, less than the agent holds: grant it CAP_IPC_LOCK, or raise the limit (LimitMEMLOCK=infinity in a systemd unit, ulimit -l unlimited)",
			units.FormatBytes(limitBytes))
	default:
		return ""
	}
}

// oomScoreFix says what lets the agent set its oom_score_adj: lowering it
// needs CAP_SYS_RESOURCE.
func oomScoreFix(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return "lowering oom_score_adj needs CAP_SYS_RESOURCE (deploy/daemonset.yaml grants it; root without it, as in some containers, is refused too)"
	}
	return ""
}

// withFix adds a "fix" attribute to a log line's attributes when there is one.
func withFix(attrs []any, fix string) []any {
	if fix == "" {
		return attrs
	}
	return append(attrs, "fix", fix)
}

// disableOwnSwap turns swap off for the agent's own memory cgroup when it
// has one of its own (not the root).
func disableOwnSwap(own []cgroup.Group) error {
	if len(own) == 0 {
		return fmt.Errorf("the agent runs in the root memory cgroup")
	}
	return own[0].DisableSwap()
}
