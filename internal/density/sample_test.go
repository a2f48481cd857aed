package density

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
)

// A failed read or a counter that went backwards leaves its rates at zero
// and says why; it never records the difference to a zero counter.
func TestRatesBetween(t *testing.T) {
	t0 := time.Unix(100, 0)
	read := func(at time.Duration, in, out, maj, some uint64) nodeCounters {
		// 1.5 cores busy since a boot 1000 s before t0
		return nodeCounters{at: t0.Add(at), pswpin: in, pswpout: out, pgmajflt: maj, psi: host.PSI{SomeMicros: some, FullMicros: some / 2},
			cpuBusySeconds: 1.5 * (1000 + at.Seconds())}
	}
	failedVMStat := read(10*time.Second, 0, 0, 0, 3e6)
	failedVMStat.vmstatErr = errors.New("open /proc/vmstat: too many open files")
	failedPSI := read(10*time.Second, 6e9, 6e9, 6e9, 0)
	failedPSI.psiErr = errors.New("no pressure file")
	failedCPU := read(10*time.Second, 21000, 0, 0, 0)
	failedCPU.cpuBusySeconds, failedCPU.cpuErr = 0, errors.New("open /proc/stat: too many open files")
	cpuBackwards := read(10*time.Second, 21000, 0, 0, 0)
	cpuBackwards.cpuBusySeconds = 3 // the machine rebooted? a counter reset
	tests := []struct {
		name             string
		before, after    nodeCounters
		swapIn, psi, cpu float64
		problem          string
	}{
		{"ordinary", read(0, 1000, 0, 1000, 1e6), read(10*time.Second, 21000, 500, 31000, 3e6), 2000, 20, 1.5, ""},
		{"vmstat failed after", read(0, 5e9, 5e9, 5e9, 1e6), failedVMStat, 0, 20, 1.5, "vmstat unreadable: open /proc/vmstat"},
		{"vmstat failed before", failedVMStat, read(20*time.Second, 5e9, 5e9, 5e9, 5e6), 0, 20, 1.5, "vmstat unreadable"},
		{"PSI failed", read(0, 1000, 0, 1000, 1e6), failedPSI, 6e8 - 100, 0, 1.5, "memory pressure unreadable"},
		{"CPU time failed", read(0, 1000, 0, 0, 0), failedCPU, 2000, 0, 0, "CPU time unreadable: open /proc/stat"},
		{"CPU time went backwards", read(0, 1000, 0, 0, 0), cpuBackwards, 2000, 0, 0, "CPU busy time went backwards"},
		{"counter went backwards", read(0, 5000, 0, 0, 0), read(10*time.Second, 10, 0, 0, 0), 0, 0, 1.5, "pswpin went backwards"},
		{"no time passed", read(0, 0, 0, 0, 0), read(0, 10, 0, 0, 0), 0, 0, 0, "no time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ratesBetween(tt.before, tt.after)
			if r.swapInPerSec != tt.swapIn || r.psiSomePercent != tt.psi || math.Abs(r.cpuBusyCores-tt.cpu) > 1e-9 ||
				!strings.Contains(r.problem, tt.problem) || (tt.problem == "") != (r.problem == "") {
				t.Fatalf("rates %+v, want swap-in %g/s, PSI some %g%%, %g cores busy, problem %q", r, tt.swapIn, tt.psi, tt.cpu, tt.problem)
			}
		})
	}
}
