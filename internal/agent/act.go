package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
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
func protectSelf(cfg Config, log *slog.Logger) {
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
	if err := disableOwnSwap(); err != nil {
		log.Info("own cgroup swap not limited", "reason", err)
	}
}

// ownMemoryCgroups returns the directories of the cgroups the agent runs
// in that carry the memory controller (v1 memory hierarchy, v2 unified),
// leaving out the roots.
func ownMemoryCgroups() ([]cgroup.Version, []string, error) {
	self, err := procfs.Self()
	if err != nil {
		return nil, nil, err
	}
	groups, err := self.Cgroups()
	if err != nil {
		return nil, nil, err
	}
	var versions []cgroup.Version
	var dirs []string
	for _, g := range groups {
		if g.Path == "/" {
			continue
		}
		switch {
		case g.HierarchyID == 0 && len(g.Controllers) == 0:
			for _, m := range cgroup.V2Mounts {
				if dir := filepath.Join(m, g.Path); isDir(dir) {
					versions, dirs = append(versions, cgroup.V2), append(dirs, dir)
				}
			}
		case slices.Contains(g.Controllers, "memory"):
			versions, dirs = append(versions, cgroup.V1), append(dirs, filepath.Join(cgroup.V1Mount, g.Path))
		}
	}
	return versions, dirs, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// disableOwnSwap turns swap off for the agent's own cgroup when it has one
// of its own (not the root): memory.swap.max=0 on v2, swappiness 0 on v1.
func disableOwnSwap() error {
	versions, dirs, err := ownMemoryCgroups()
	if err != nil {
		return err
	}
	for i, dir := range dirs {
		if versions[i] == cgroup.V2 {
			if f := filepath.Join(dir, "memory.swap.max"); fileExists(f) {
				return os.WriteFile(f, []byte("0"), 0o644)
			}
			continue
		}
		return os.WriteFile(filepath.Join(dir, "memory.swappiness"), []byte("0"), 0o644)
	}
	return fmt.Errorf("the agent runs in the root memory cgroup")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
