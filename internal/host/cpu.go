package host

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/procfs"
)

// BusyCPUSeconds reads the CPU time all the node's CPUs spent busy since
// boot: everything but idle, iowait and steal (time this machine's own
// host took from it), so a difference over a window is the cores the
// node kept busy times the window.
func BusyCPUSeconds() (float64, error) {
	busy, _, err := BusyAndStealCPUSeconds()
	return busy, err
}

// BusyAndStealCPUSeconds reads BusyCPUSeconds and the steal time since
// boot: the CPU time this machine's own host took from it, where it is a
// VM.
func BusyAndStealCPUSeconds() (busy, steal float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	t := st.CPUTotal
	return t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ, t.Steal, nil
}

// ProcessCPUSeconds reads a process's CPU time (user and system, all its
// threads) since it started.
func ProcessCPUSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	return st.CPUTime(), nil
}

// RunQueueWaitSeconds reads how long a process's threads have waited,
// runnable, for a core since they started (/proc/PID/task/*/schedstat):
// the time between a wakeup, such as a swap-in read's completion, and
// running again. A thread that exits meanwhile is not counted.
func RunQueueWaitSeconds(pid int) (float64, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0, fmt.Errorf("list /proc/%d/task: %w", pid, err)
	}
	var waitNanoseconds uint64
	for _, t := range threads {
		st, err := t.Schedstat()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, fmt.Errorf("read /proc/%d/task/%d/schedstat: %w", pid, t.PID, err)
		}
		waitNanoseconds += st.WaitingNanoseconds
	}
	return float64(waitNanoseconds) / 1e9, nil
}
