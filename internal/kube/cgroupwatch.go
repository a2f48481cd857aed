package kube

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// cgroupWatch wakes the agent when a pod cgroup appears (inotify on the
// QoS cgroups: mkdir there is the kubelet creating a pod's cgroup), so a
// new pod's swap limit is written before its containers start rather than
// at the next discovery. The inotify descriptor waits in Go's network
// poller: no thread and no timer while nothing happens.
type cgroupWatch struct {
	fd      int
	file    *os.File
	mu      sync.Mutex
	watched map[string]bool
}

// startCgroupWatch watches the QoS cgroups that exist now (addMissing adds
// the others as they appear) and calls wake on every creation until ctx
// ends. Without inotify, nil is returned and discovery remains.
func (s *Source) startCgroupWatch(ctx context.Context) *cgroupWatch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		s.log.Warn("inotify unavailable; new pod cgroups are found at the discovery interval", "err", err)
		return nil
	}
	w := &cgroupWatch{fd: fd, file: os.NewFile(uintptr(fd), "inotify"), watched: map[string]bool{}}
	w.addMissing(s.cfg.Mount, s.cfg.Layout)
	go func() {
		<-ctx.Done()
		w.file.Close()
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.file.Read(buf); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("inotify read failed; new pod cgroups are found at the discovery interval", "err", err)
				}
				return
			}
			s.notify()
		}
	}()
	return w
}

// addMissing adds watches for QoS cgroups not watched yet (a node without
// Burstable pods may have no burstable cgroup at first).
func (w *cgroupWatch) addMissing(mount string, l Layout) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, dir := range l.QOSDirs() {
		p := filepath.Join(mount, dir)
		if w.watched[p] {
			continue
		}
		if _, err := unix.InotifyAddWatch(w.fd, p, unix.IN_CREATE|unix.IN_ONLYDIR); err == nil {
			w.watched[p] = true
		}
	}
}
