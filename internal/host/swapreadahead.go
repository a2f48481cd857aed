package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// SwapReadaheadByOffset tells whether the kernel reads swap ahead by swap
// offset (the slots around a fault) rather than by the faulting task's
// addresses: it does with /sys/kernel/mm/swap/vma_ra_enabled off, or while
// any rotational swap area is active (swap_use_vma_readahead). Paths in
// more (a directory where a swap file is about to be made) count as
// active swap areas.
func SwapReadaheadByOffset(more ...string) (bool, error) {
	b, err := os.ReadFile("/sys/kernel/mm/swap/vma_ra_enabled")
	if err != nil {
		return false, fmt.Errorf("read vma_ra_enabled: %w", err)
	}
	if strings.TrimSpace(string(b)) != "true" {
		return true, nil
	}
	swaps, err := ReadSwaps()
	if err != nil {
		return false, err
	}
	paths := slices.Clone(more)
	for _, s := range swaps {
		paths = append(paths, s.Path)
	}
	for _, p := range paths {
		dev, err := blockDeviceOf(p)
		if err != nil {
			return false, err
		}
		if rotational(dev) {
			return true, nil
		}
	}
	return false, nil
}

// blockDeviceOf is the device number of the block device under path: the
// device itself for a device node, else its file system's.
func blockDeviceOf(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return st.Rdev, nil
	}
	return st.Dev, nil
}

// rotational reads the block device's queue/rotational flag (a
// partition's is its disk's); a device with none (tmpfs, overlay, zram's
// absent queue) is not rotational.
func rotational(dev uint64) bool {
	dir, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return false
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if b, err := os.ReadFile(filepath.Join(d, "queue", "rotational")); err == nil {
			return strings.TrimSpace(string(b)) == "1"
		}
	}
	return false
}
