package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/pseudofile"
)

// KSMDir is where the kernel's same-page merging is controlled and counted.
const KSMDir = "/sys/kernel/mm/ksm"

// KSM is ksmd's settings and counters (cumulative where they count).
type KSM struct {
	Run            int    `json:"run"` // 0 stopped, 1 running, 2 unmerge all
	PagesToScan    uint64 `json:"pages_to_scan"`
	SleepMillisecs uint64 `json:"sleep_millisecs"`
	// AdvisorMode is the kernel advisor's mode ("none", "scan-time"); ""
	// where the kernel has no advisor.
	AdvisorMode   string `json:"advisor_mode,omitempty"`
	PagesScanned  uint64 `json:"pages_scanned"`
	PagesShared   uint64 `json:"pages_shared"`
	PagesSharing  uint64 `json:"pages_sharing"`
	PagesUnshared uint64 `json:"pages_unshared"`
	PagesVolatile uint64 `json:"pages_volatile"`
	FullScans     uint64 `json:"full_scans"`
	// GeneralProfitBytes is what merging saves after KSM's own metadata
	// (negative while it costs more than it saves).
	GeneralProfitBytes int64 `json:"general_profit_bytes"`
}

// ReadKSM reads KSMDir.
func ReadKSM() (KSM, error) { return ReadKSMDir(KSMDir) }

// KSMDir is where KSM is controlled and counted under r.
func (r Roots) KSMDir() string { return r.sys("kernel", "mm", "ksm") }

// ReadKSMDir reads a KSM sysfs directory (tests use fixture trees). Files
// newer kernels added (pages_scanned, general_profit, advisor_mode) are
// optional.
func ReadKSMDir(dir string) (KSM, error) {
	var k KSM
	required := []struct {
		name string
		dst  *uint64
	}{
		{"pages_to_scan", &k.PagesToScan}, {"sleep_millisecs", &k.SleepMillisecs},
		{"pages_shared", &k.PagesShared}, {"pages_sharing", &k.PagesSharing},
		{"pages_unshared", &k.PagesUnshared}, {"pages_volatile", &k.PagesVolatile}, {"full_scans", &k.FullScans},
	}
	for _, f := range required {
		if err := readSysUint(filepath.Join(dir, f.name), f.dst); err != nil {
			return KSM{}, err
		}
	}
	var run uint64
	if err := readSysUint(filepath.Join(dir, "run"), &run); err != nil {
		return KSM{}, err
	}
	k.Run = int(run)
	if err := readSysUint(filepath.Join(dir, "pages_scanned"), &k.PagesScanned); err != nil && !errors.Is(err, os.ErrNotExist) {
		return KSM{}, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "general_profit")); err == nil {
		if k.GeneralProfitBytes, err = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err != nil {
			return KSM{}, fmt.Errorf("parse %s/general_profit: %w", dir, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "advisor_mode")); err == nil {
		k.AdvisorMode = SelectedOption(string(b))
	}
	return k, nil
}

func readSysUint(path string, dst *uint64) error {
	n, err := pseudofile.Parse(path, func(b []byte) (uint64, error) {
		n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", path, err)
		}
		return n, nil
	})
	if err != nil {
		return err
	}
	*dst = n
	return nil
}

// SelectedOption returns the bracketed choice of a sysfs option list such
// as "[none] scan-time", or the whole trimmed value if none is bracketed.
func SelectedOption(s string) string {
	for _, f := range strings.Fields(s) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return f[1 : len(f)-1]
		}
	}
	return strings.TrimSpace(s)
}

// KsmdCPU reads the CPU time the ksmd kernel thread has used; the thread
// is found by name once and remembered. Proc is /proc's root ("": the
// machine's).
type KsmdCPU struct {
	Proc string
	pid  int
}

// Seconds reads ksmd's CPU time (user + system).
func (k *KsmdCPU) Seconds() (float64, error) {
	if k.Proc == "" {
		k.Proc = DefaultRoots.Proc
	}
	if k.pid == 0 {
		pid, err := findKernelThread(k.Proc, "ksmd")
		if err != nil {
			return 0, err
		}
		k.pid = pid
	}
	b, err := os.ReadFile(filepath.Join(k.Proc, strconv.Itoa(k.pid), "stat"))
	if err != nil {
		k.pid = 0
		return 0, fmt.Errorf("read ksmd's stat: %w", err)
	}
	return ParseStatCPUSeconds(b, clockTicks)
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

// ParseStatCPUSeconds returns utime + stime of a /proc/PID/stat line.
func ParseStatCPUSeconds(b []byte, ticksPerSecond float64) (float64, error) {
	// The command name is in parentheses and may hold spaces: fields
	// count from after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("parse stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(0) ppid ... utime is field 14 of the line,
	// index 11 here; stime index 12.
	if len(f) < 13 {
		return 0, errors.New("parse stat: too few fields")
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse stat: utime %q stime %q", f[11], f[12])
	}
	return float64(utime+stime) / ticksPerSecond, nil
}

func findKernelThread(proc, name string) (int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s kernel thread (a kernel without KSM?)", name)
}

// MergeableBytes sums the sizes of a process's mappings that KSM may
// merge (VmFlags "mg" in /proc/PID/smaps: MADV_MERGEABLE, or a QEMU guest's
// RAM with mem-merge).
func MergeableBytes(pid int) (uint64, error) { return DefaultRoots.MergeableBytes(pid) }

// MergeableBytes reads a process's smaps under r.
func (r Roots) MergeableBytes(pid int) (uint64, error) {
	b, err := os.ReadFile(r.proc(strconv.Itoa(pid), "smaps"))
	if err != nil {
		return 0, err
	}
	return ParseMergeable(b)
}

// ParseMergeable sums Size over smaps mappings whose VmFlags include mg.
func ParseMergeable(b []byte) (uint64, error) {
	var total, size uint64
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		switch {
		case bytes.HasPrefix(line, []byte("Size:")):
			f := bytes.Fields(line)
			if len(f) != 3 {
				return 0, fmt.Errorf("parse smaps: %q", line)
			}
			n, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil || n > 1<<42 {
				return 0, fmt.Errorf("parse smaps: %q", line)
			}
			size = n << 10
		case bytes.HasPrefix(line, []byte("VmFlags:")):
			for _, flag := range bytes.Fields(line[len("VmFlags:"):]) {
				if string(flag) == "mg" {
					total += size
					break
				}
			}
			size = 0
		}
	}
	return total, nil
}
