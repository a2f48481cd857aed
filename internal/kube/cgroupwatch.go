package kube

import (
	"context"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// watchCgroups wakes the agent when a pod cgroup appears (inotify on the
// QoS cgroups: mkdir there is the kubelet creating a pod's cgroup), so a
// new pod's swap limit is written before its containers start rather than
// at the next discovery. Without inotify the discovery interval remains.
func (s *Source) watchCgroups(ctx context.Context) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		s.log.Warn("inotify unavailable; new pod cgroups are found at the discovery interval", "err", err)
		return
	}
	defer unix.Close(fd)
	watched := map[string]bool{}
	buf := make([]byte, 64<<10)
	for ctx.Err() == nil {
		// The QoS cgroups may appear after the agent starts (a node
		// without Burstable pods yet): add watches as they do.
		for _, dir := range s.cfg.Layout.QOSDirs() {
			p := filepath.Join(s.cfg.Mount, dir)
			if watched[p] {
				continue
			}
			if _, err := unix.InotifyAddWatch(fd, p, unix.IN_CREATE|unix.IN_ONLYDIR); err == nil {
				watched[p] = true
			}
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((time.Second).Milliseconds()))
		if err != nil && err != unix.EINTR {
			s.log.Warn("inotify poll failed; new pod cgroups are found at the discovery interval", "err", err)
			return
		}
		if n > 0 {
			for {
				if k, err := unix.Read(fd, buf); k <= 0 || err != nil {
					break
				}
			}
			s.notify()
		}
	}
}
