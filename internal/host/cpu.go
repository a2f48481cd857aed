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

// ThreadSchedstat is one thread's scheduler counters since it started
// (/proc/PID/task/TID/schedstat): its time on a core and its time
// runnable, waiting for one (from a wakeup, such as a swap-in read's
// completion, to running again).
type ThreadSchedstat struct {
	TID         int
	RunSeconds  float64
	WaitSeconds float64
}

// ThreadSchedstats reads the scheduler counters of each of a process's
// threads. A thread that exits meanwhile is left out.
func ThreadSchedstats(pid int) ([]ThreadSchedstat, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return nil, fmt.Errorf("list /proc/%d/task: %w", pid, err)
	}
	var out []ThreadSchedstat
	for _, t := range threads {
		st, err := t.Schedstat()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("read /proc/%d/task/%d/schedstat: %w", pid, t.PID, err)
		}
		out = append(out, ThreadSchedstat{TID: t.PID, RunSeconds: float64(st.RunningNanoseconds) / 1e9, WaitSeconds: float64(st.WaitingNanoseconds) / 1e9})
	}
	return out, nil
}

// BusiestThreadWaitSeconds is the run-queue wait, between two readings
// of one process's threads, of the thread that ran the most between them
// (0: no thread in both). A worker touches its memory on one thread; the
// Go runtime's others (sysmon, the GC's) wake on their own, and where
// the cores are oversubscribed each wakeup waits too, which is not the
// touching thread's wait.
func BusiestThreadWaitSeconds(before, after []ThreadSchedstat) float64 {
	byTID := make(map[int]ThreadSchedstat, len(before))
	for _, t := range before {
		byTID[t.TID] = t
	}
	var busiestRun, wait float64
	for _, t := range after {
		b, ok := byTID[t.TID]
		if !ok {
			continue
		}
		if run := t.RunSeconds - b.RunSeconds; run > busiestRun {
			busiestRun, wait = run, max(t.WaitSeconds-b.WaitSeconds, 0)
		}
	}
	return wait
}
