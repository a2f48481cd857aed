package cgroup

import (
	"context"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ChildWatch tells its owner when a child group is made under a watched
// directory: cgroups are made with mkdir (a kubelet's pod cgroup, a
// libvirt domain's scope, a density worker), which inotify reports on the
// parent, and a group renamed into place (v1) as a move. A group removed
// and made again under its old path is made, too. The inotify descriptor
// waits in Go's network poller: no thread and no timer while nothing
// happens.
type ChildWatch struct {
	fd      int
	file    *os.File
	mu      sync.Mutex
	watched map[string]bool
}

// WatchChildren starts a watch that calls made after each batch of
// events until ctx ends; if reading fails before that, it calls failed
// once and stops. Directories are added with Add.
func WatchChildren(ctx context.Context, made func(), failed func(error)) (*ChildWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, &os.SyscallError{Syscall: "inotify_init1", Err: err}
	}
	w := &ChildWatch{fd: fd, file: os.NewFile(uintptr(fd), "inotify"), watched: map[string]bool{}}
	context.AfterFunc(ctx, func() { w.file.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := w.file.Read(buf)
			if err != nil {
				if ctx.Err() == nil {
					failed(err)
				}
				return
			}
			if madeDirectory(buf[:n]) {
				made()
			}
		}
	}()
	return w, nil
}

// madeDirectory reports whether a batch of inotify events holds one for a
// directory (a file made in a fixture tree is not a group).
func madeDirectory(events []byte) bool {
	for len(events) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&events[0]))
		if ev.Mask&unix.IN_ISDIR != 0 {
			return true
		}
		events = events[min(len(events), unix.SizeofInotifyEvent+int(ev.Len)):]
	}
	return false
}

// Add watches dir for groups made in it, once.
func (w *ChildWatch) Add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[dir] {
		return nil
	}
	if _, err := unix.InotifyAddWatch(w.fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	w.watched[dir] = true
	return nil
}
