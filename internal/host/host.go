// Package host reads the node's memory facts from /proc: meminfo, vmstat
// swap and fault counters, swap devices and pressure stall information,
// and arms PSI poll triggers so a memory stall wakes the agent at once.
package host

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"

	"github.com/headroom-dev/headroom/internal/pseudofile"
)

// Memory is the node's RAM and swap in bytes.
type Memory struct {
	TotalBytes     uint64
	AvailableBytes uint64
	SwapTotalBytes uint64
	SwapFreeBytes  uint64
}

// Roots are where the kernel's /proc and /sys are: the machine's own by
// default, a fixture tree in a test (as node_exporter's --path.procfs and
// --path.sysfs).
type Roots struct {
	Proc string
	Sys  string
}

// DefaultRoots are the machine's own.
var DefaultRoots = Roots{Proc: "/proc", Sys: "/sys"}

func (r Roots) proc(parts ...string) string {
	return filepath.Join(append([]string{r.Proc}, parts...)...)
}
func (r Roots) sys(parts ...string) string {
	return filepath.Join(append([]string{r.Sys}, parts...)...)
}

// ReadMemory reads /proc/meminfo.
func ReadMemory() (Memory, error) { return DefaultRoots.ReadMemory() }

// ReadMemory reads meminfo under r.
func (r Roots) ReadMemory() (Memory, error) {
	m, err := pseudofile.Parse(r.proc("meminfo"), ParseMeminfo)
	if err != nil {
		return Memory{}, fmt.Errorf("read %s: %w", r.proc("meminfo"), err)
	}
	return m, nil
}

// ParseMeminfo parses the four lines of /proc/meminfo the agent uses,
// "Key: N kB". (procfs parses every line, into pointers, and only from the
// file: the agent reads it at each listing.)
func ParseMeminfo(b []byte) (Memory, error) {
	var m Memory
	fields := []struct {
		key string
		dst *uint64
	}{{"MemTotal:", &m.TotalBytes}, {"MemAvailable:", &m.AvailableBytes}, {"SwapTotal:", &m.SwapTotalBytes}, {"SwapFree:", &m.SwapFreeBytes}}
	var found uint // a bit per field
	for line := range bytes.Lines(b) {
		key, rest, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		for i, f := range fields {
			if string(key) != f.key {
				continue
			}
			value, unit, _ := bytes.Cut(bytes.TrimSpace(rest), []byte{' '})
			n, err := strconv.ParseUint(string(value), 10, 64)
			if err != nil || string(unit) != "kB" || n > math.MaxUint64>>10 {
				return Memory{}, fmt.Errorf("parse meminfo: %q", bytes.TrimSpace(line))
			}
			*f.dst = n << 10
			found |= 1 << i
		}
	}
	if found != 1<<len(fields)-1 {
		return Memory{}, fmt.Errorf("parse meminfo: MemTotal, MemAvailable, SwapTotal or SwapFree missing")
	}
	return m, nil
}

// VMStat holds the /proc/vmstat counters the agent uses. They are
// cumulative since boot (and not zero at boot): use differences.
type VMStat struct {
	PswpIn     uint64 // pages swapped in
	PswpOut    uint64 // pages swapped out
	PgMajFault uint64 // major faults
	// CowKSM counts writes that broke a KSM-merged page (copy on write);
	// 0 on kernels that do not count them.
	CowKSM uint64
}

// ReadVMStat reads /proc/vmstat.
func ReadVMStat() (VMStat, error) { return DefaultRoots.ReadVMStat() }

// ReadVMStat reads vmstat under r.
func (r Roots) ReadVMStat() (VMStat, error) {
	v, err := pseudofile.Parse(r.proc("vmstat"), ParseVMStat)
	if err != nil {
		return VMStat{}, fmt.Errorf("read %s: %w", r.proc("vmstat"), err)
	}
	return v, nil
}

// ParseVMStat parses vmstat's "name value" lines; all three counters must
// be present.
func ParseVMStat(b []byte) (VMStat, error) {
	var v VMStat
	var found [4]bool // pswpin, pswpout, pgmajfault, cow_ksm (optional)
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		name, value, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		var dst *uint64
		var key int
		switch string(name) {
		case "pswpin":
			dst, key = &v.PswpIn, 0
		case "pswpout":
			dst, key = &v.PswpOut, 1
		case "pgmajfault":
			dst, key = &v.PgMajFault, 2
		case "cow_ksm":
			dst, key = &v.CowKSM, 3
		default:
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return VMStat{}, fmt.Errorf("parse vmstat %s: %w", name, err)
		}
		*dst = n
		found[key] = true
	}
	if !found[0] || !found[1] || !found[2] {
		return VMStat{}, fmt.Errorf("parse vmstat: pswpin, pswpout or pgmajfault missing")
	}
	return v, nil
}

// SwapDevice is one active swap area.
type SwapDevice struct {
	Path      string `json:"path"`
	Type      string `json:"type"` // file or partition
	SizeBytes uint64 `json:"size_bytes"`
	UsedBytes uint64 `json:"used_bytes"`
	Priority  int    `json:"priority"`
}

// ReadSwaps reads /proc/swaps.
func ReadSwaps() ([]SwapDevice, error) { return DefaultRoots.ReadSwaps() }

// ReadSwaps reads swaps under r.
func (r Roots) ReadSwaps() ([]SwapDevice, error) {
	swaps, err := pseudofile.Parse(r.proc("swaps"), ParseSwaps)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.proc("swaps"), err)
	}
	return swaps, nil
}

// ParseSwaps parses /proc/swaps: a header line, then "filename type size
// used priority" with sizes in KiB. (procfs parses it only from the file,
// which the agent reads every round.)
func ParseSwaps(b []byte) ([]SwapDevice, error) {
	var out []SwapDevice
	for i, line := range bytes.Split(b, []byte{'\n'}) {
		fields := bytes.Fields(line)
		if i == 0 || len(fields) == 0 {
			continue // the header
		}
		if len(fields) != 5 {
			return nil, fmt.Errorf("parse swaps: %q: want filename, type, size, used and priority", line)
		}
		size, err1 := strconv.ParseUint(string(fields[2]), 10, 64)
		used, err2 := strconv.ParseUint(string(fields[3]), 10, 64)
		prio, err3 := strconv.Atoi(string(fields[4]))
		if err := errors.Join(err1, err2, err3); err != nil || size > math.MaxUint64>>10 || used > size {
			return nil, fmt.Errorf("parse swaps: %q: size, used or priority is not a number, or used exceeds size", line)
		}
		out = append(out, SwapDevice{Path: string(fields[0]), Type: string(fields[1]), SizeBytes: size << 10, UsedBytes: used << 10, Priority: prio})
	}
	return out, nil
}

// PSI is a pressure file's cumulative stall times in microseconds.
type PSI struct {
	SomeMicros uint64
	FullMicros uint64
}

// ReadMemoryPSI reads the system-wide /proc/pressure/memory.
func ReadMemoryPSI() (PSI, error) { return ReadPSIFile(DefaultRoots.MemoryPressureFile()) }

// MemoryPressureFile is the system-wide memory pressure file under r.
func (r Roots) MemoryPressureFile() string { return r.proc("pressure", "memory") }

// ReadPSIFile reads a pressure file: /proc/pressure/* or a cgroup v2
// memory.pressure.
func ReadPSIFile(path string) (PSI, error) {
	p, err := pseudofile.Parse(path, ParsePSI)
	if err != nil {
		return PSI{}, fmt.Errorf("read %s: %w", path, err)
	}
	return p, nil
}

// ParsePSI parses a pressure file (/proc/pressure/memory or a cgroup v2
// memory.pressure): lines "some|full avg10=.. avg60=.. avg300=.. total=N".
// Only the cumulative totals are kept; averages are computed from their
// differences over the agent's own window.
func ParsePSI(b []byte) (PSI, error) {
	var p PSI
	seen := 0
	for line := range bytes.Lines(b) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var dst *uint64
		switch string(fields[0]) {
		case "some":
			dst = &p.SomeMicros
		case "full":
			dst = &p.FullMicros
		default:
			return PSI{}, fmt.Errorf("parse pressure: unexpected line %q", bytes.TrimSpace(line))
		}
		var total []byte
		for _, f := range fields[1:] {
			if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
				total = v
			}
		}
		n, err := strconv.ParseUint(string(total), 10, 64)
		if err != nil {
			return PSI{}, fmt.Errorf("parse pressure %s total: %q", fields[0], total)
		}
		*dst = n
		seen++
	}
	if seen == 0 {
		return PSI{}, fmt.Errorf("parse pressure: no some/full lines")
	}
	return p, nil
}
