package host

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// PSITrigger is an armed pressure trigger: Events receives a value each
// time the kernel reports that stall time in a window exceeded the
// threshold (Documentation/accounting/psi.rst, "Monitoring for pressure
// thresholds").
type PSITrigger struct {
	f      *os.File
	events chan time.Time
	done   chan struct{}
}

// NewPSITrigger arms a trigger on path (e.g. /proc/pressure/memory or a
// cgroup's memory.pressure): kind "some" or "full", stall threshold within
// each window. The kernel requires windows of 500 ms to 10 s.
func NewPSITrigger(ctx context.Context, path, kind string, stall, window time.Duration) (*PSITrigger, error) {
	// A trigger is written into the file: never into one that is not the
	// kernel's (a fixture tree's would be overwritten).
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, fmt.Errorf("open %s for a PSI trigger: %w", path, err)
	}
	if fs.Type != unix.PROC_SUPER_MAGIC && fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s is not on procfs or cgroup2, so it takes no PSI trigger", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for a PSI trigger: %w", path, err)
	}
	spec := fmt.Sprintf("%s %d %d", kind, stall.Microseconds(), window.Microseconds())
	if _, err := f.Write(append([]byte(spec), 0)); err != nil {
		f.Close()
		return nil, fmt.Errorf("arm PSI trigger %q on %s: %w", spec, path, err)
	}
	t := &PSITrigger{f: f, events: make(chan time.Time, 1), done: make(chan struct{})}
	go t.watch(ctx)
	return t, nil
}

// Events delivers trigger firings; a firing is dropped if the previous
// one has not been received yet.
func (t *PSITrigger) Events() <-chan time.Time { return t.events }

// Done is closed once the trigger is disarmed: its context ended (or the
// file failed).
func (t *PSITrigger) Done() <-chan struct{} { return t.done }

// watch blocks in poll until the trigger fires, or ctx ends and closes the
// pipe's write end. (A poll timeout to notice ctx woke the watcher, and the
// Go runtime with it, twice a second: a tenth of an idle agent's CPU on a
// machine whose wakeups are slow.)
func (t *PSITrigger) watch(ctx context.Context) {
	defer close(t.done)
	defer t.f.Close()
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return // no events: the agent's rounds still sample PSI
	}
	ended := context.AfterFunc(ctx, func() { unix.Close(pipe[1]) })
	defer func() {
		if ended() { // ctx has not ended: the write end is still ours
			unix.Close(pipe[1])
		}
		unix.Close(pipe[0])
	}()
	fds := []unix.PollFd{{Fd: int32(t.f.Fd()), Events: unix.POLLPRI}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || fds[0].Revents&unix.POLLERR != 0 || fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLPRI != 0 {
			select {
			case t.events <- time.Now():
			default:
			}
		}
	}
}
