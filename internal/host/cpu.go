package host

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// BusyCPUSeconds reads the CPU time all the node's CPUs spent busy since
// boot: everything but idle, iowait and steal (time this machine's own
// host took from it), so a difference over a window is the cores the
// node kept busy times the window.
func BusyCPUSeconds() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	t := st.CPUTotal
	return t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ, nil
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
