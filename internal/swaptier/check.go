package swaptier

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

// InputError is a request this machine cannot or should not honour; the
// command reports it in one line and exits 2, before anything is changed.
type InputError struct{ msg string }

func (e InputError) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return InputError{fmt.Sprintf(format, args...)}
}

// IsInputError reports whether err is an InputError.
func IsInputError(err error) bool {
	var ie InputError
	return errors.As(err, &ie)
}

// FileMarginBytes is left free beside a swap file (results, scratch
// files, everything else on the file system).
const FileMarginBytes = 256 << 20

// Machine is what the checks need to know about the host.
type Machine struct {
	RAMBytes uint64
	// FreeBytes reports the space free for an unprivileged writer on the
	// file system holding dir.
	FreeBytes func(dir string) (uint64, error)
	// ZramAlgorithms are the compressors zram offers ("" if no zram).
	ZramAlgorithms   []string
	HasZramWriteback bool
	HasZswap         bool
	// ActiveSwapBytes is the swap already on.
	ActiveSwapBytes uint64
}

// ThisMachine reads the host's facts.
func ThisMachine() (Machine, error) {
	mem, err := host.ReadMemory()
	if err != nil {
		return Machine{}, err
	}
	m := Machine{RAMBytes: mem.TotalBytes, ActiveSwapBytes: mem.SwapTotalBytes, FreeBytes: freeBytes}
	if b, err := os.ReadFile("/sys/block/zram0/comp_algorithm"); err == nil {
		m.ZramAlgorithms = strings.Fields(strings.NewReplacer("[", "", "]", "").Replace(string(b)))
		_, err := os.Stat("/sys/block/zram0/backing_dev")
		m.HasZramWriteback = err == nil
	} else if _, err := os.Stat("/sys/class/zram-control"); err == nil {
		m.ZramAlgorithms = []string{""} // a device is hot-added; its list is read then
	}
	_, err = os.Stat(host.ZswapDir)
	m.HasZswap = err == nil
	return m, nil
}

func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Check refuses a spec that is unsafe or impossible here, naming the flag.
func Check(s tierspec.Spec, m Machine) error {
	if s.File == nil && s.Zram == nil && s.Zswap == nil {
		return inputErrorf("nothing to set up: no swap file, zram or zswap asked for")
	}
	if f := s.File; f != nil {
		dir := tierspec.DefaultFileDir
		if f.Path != "" {
			dir = filepath.Dir(f.Path)
			if _, err := os.Lstat(f.Path); err == nil {
				return inputErrorf("swap file %s exists; headroom only makes new swap files", f.Path)
			}
		}
		free, err := m.FreeBytes(dir)
		if err != nil {
			return inputErrorf("swap file: cannot check the free space in %s: %v", dir, err)
		}
		if f.SizeBytes+FileMarginBytes > free {
			return inputErrorf("a swap file of %s does not fit in %s (%s free, %s kept free)",
				units.FormatBytes(f.SizeBytes), dir, units.FormatBytes(free), units.FormatBytes(FileMarginBytes))
		}
	}
	if z := s.Zram; z != nil {
		if len(m.ZramAlgorithms) == 0 {
			return inputErrorf("zram: this kernel has no zram (modprobe zram)")
		}
		// zram holds its pages compressed in RAM: at the usual 2-3:1 more
		// than twice RAM cannot be filled, and its metadata grows with it.
		if z.SizeBytes > 2*m.RAMBytes {
			return inputErrorf("zram of %s is more than twice this machine's RAM (%s)",
				units.FormatBytes(z.SizeBytes), units.FormatBytes(m.RAMBytes))
		}
		if z.Algorithm != "" && m.ZramAlgorithms[0] != "" && !slices.Contains(m.ZramAlgorithms, z.Algorithm) {
			return inputErrorf("zram algorithm=%s: this kernel's zram offers %s", z.Algorithm, strings.Join(m.ZramAlgorithms, ", "))
		}
		if z.Writeback != "" && !m.HasZramWriteback {
			return inputErrorf("zram writeback=%s: this kernel's zram has no writeback (CONFIG_ZRAM_WRITEBACK)", z.Writeback)
		}
	}
	if z := s.Zswap; z != nil {
		switch {
		case !m.HasZswap:
			return inputErrorf("zswap: this kernel has no zswap")
		case s.Zram != nil:
			return inputErrorf("zswap in front of zram compresses every page twice: choose one")
		case s.File == nil && m.ActiveSwapBytes == 0:
			return inputErrorf("zswap caches pages on their way to a swap device and none is on or set up")
		}
	}
	return nil
}
