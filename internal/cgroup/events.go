package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoUsageEvents: the hierarchy has no usage threshold notifications
// (cgroup v2 has none; its memory.pressure triggers are the alternative).
var ErrNoUsageEvents = fmt.Errorf("usage threshold notifications: %w", errors.ErrUnsupported)

// usageEvents is an armed set of v1 memory+swap usage thresholds
// (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds"):
// the kernel signals one eventfd each time usage crosses any of them, up
// or down, checked as pages are charged, so a watcher learns of a
// crossing at once instead of at its next sample.
type usageEvents struct {
	eventfd *os.File
	done    chan struct{}
}

// WatchUsage arms thresholds on memory.memsw.usage_in_bytes (memory and
// swap together, page cache included) and sends the time on wake, without
// blocking, each time usage crosses one. Close disarms them.
func (g *v1Group) WatchUsage(thresholdsBytes []uint64, wake chan<- time.Time) (io.Closer, error) {
	if len(thresholdsBytes) == 0 {
		return nil, fmt.Errorf("%s: no usage threshold to watch", g.path)
	}
	// Non-blocking, so the runtime poller reads it and Close ends the read.
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd for usage thresholds: %w", err)
	}
	e := &usageEvents{eventfd: os.NewFile(uintptr(fd), "usage-thresholds"), done: make(chan struct{})}
	usage, err := os.Open(g.file("memory.memsw.usage_in_bytes"))
	if err != nil {
		e.eventfd.Close()
		return nil, fmt.Errorf("%w (memsw files need swap accounting: swapaccount=1)", err)
	}
	// The kernel holds the group, not the usage file: it may close after.
	defer usage.Close()
	control := g.file("cgroup.event_control")
	for _, t := range thresholdsBytes {
		spec := fmt.Sprintf("%d %d %d", fd, usage.Fd(), t)
		if err := os.WriteFile(control, []byte(spec), 0); err != nil {
			e.eventfd.Close()
			return nil, fmt.Errorf("arm usage threshold %d B on %s: %w", t, g.path, err)
		}
	}
	go e.forward(wake)
	return e, nil
}

func (g *v2Group) WatchUsage([]uint64, chan<- time.Time) (io.Closer, error) {
	return nil, ErrNoUsageEvents
}

func (e *usageEvents) forward(wake chan<- time.Time) {
	defer close(e.done)
	var count [8]byte
	for {
		// The eventfd's count (crossings since the last read) is not
		// needed: one wake covers them all.
		// A removed group signals once more, then never: the read
		// blocks until Close.
		if _, err := e.eventfd.Read(count[:]); err != nil {
			return // closed
		}
		select {
		case wake <- time.Now():
		default:
		}
	}
}

// Close disarms the thresholds (the kernel drops them with the eventfd)
// and waits for the forwarder to stop.
func (e *usageEvents) Close() error {
	err := e.eventfd.Close()
	<-e.done
	return err
}
