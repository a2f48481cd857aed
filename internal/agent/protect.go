package agent

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

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
