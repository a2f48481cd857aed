package memload

import (
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// usage is the process's page faults and CPU time so far (all threads).
type usage struct {
	major, minor uint64
	user, system time.Duration
}

// readUsage reads the process's usage; zeros if it cannot be read.
func readUsage() usage {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{
		major:  uint64(ru.Majflt),
		minor:  uint64(ru.Minflt),
		user:   time.Duration(ru.Utime.Nano()),
		system: time.Duration(ru.Stime.Nano()),
	}
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
