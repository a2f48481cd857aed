package memload

import (
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

type faultCounts struct {
	major, minor uint64
}

// readFaults returns the process's page fault counters (all threads).
func readFaults() faultCounts {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return faultCounts{}
	}
	return faultCounts{major: uint64(ru.Majflt), minor: uint64(ru.Minflt)}
}

// cpuTimes returns the process's user and system CPU time.
func cpuTimes() (user, system time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// memoryUse returns the process's resident and swapped-out bytes from
// /proc/self/status (VmRSS, VmSwap); zeros if it cannot be read.
func memoryUse() (rssBytes, swapBytes uint64) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	s, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return s.VmRSS, s.VmSwap
}
