package kube

import (
	"context"
	"path/filepath"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

// cgroupWatch wakes the agent when a pod cgroup appears (mkdir in a QoS
// cgroup is the kubelet creating a pod's cgroup), so a new pod's swap limit
// is written before its containers start rather than at the next
// discovery.
type cgroupWatch struct{ *cgroup.ChildWatch }

// startCgroupWatch watches the QoS cgroups that exist now (addMissing adds
// the others as they appear) and calls notify on every creation until ctx
// ends. Without inotify, nil is returned and discovery remains.
func (s *Source) startCgroupWatch(ctx context.Context) *cgroupWatch {
	w, err := cgroup.WatchChildren(ctx, s.notify, func(err error) {
		s.log.Warn("inotify read failed; new pod cgroups are found at the discovery interval", "err", err)
	})
	if err != nil {
		s.log.Warn("inotify unavailable; new pod cgroups are found at the discovery interval", "err", err)
		return nil
	}
	cw := &cgroupWatch{w}
	cw.addMissing(s.cfg.Mount, s.cfg.Layout)
	return cw
}

// addMissing adds watches for QoS cgroups not watched yet (a node without
// Burstable pods may have no burstable cgroup at first).
func (w *cgroupWatch) addMissing(mount string, l Layout) {
	if w == nil {
		return
	}
	for _, dir := range l.QOSDirs() {
		w.Add(filepath.Join(mount, dir)) // one not there yet is added later
	}
}
