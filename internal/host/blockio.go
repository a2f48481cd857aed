package host

import (
	"fmt"

	"github.com/prometheus/procfs/blockdevice"
	"golang.org/x/sys/unix"
)

// BlockIO is the I/O block devices completed since boot (/proc/diskstats).
type BlockIO struct {
	Reads, Writes uint64
}

// SwapBlockIO sums the completed I/O of the block devices under the
// active swap areas, each device once: a partition is its own device, a
// swap file is on its file system's. Swap's own I/O is only part of it
// where the file system is busy with other work.
func SwapBlockIO() (BlockIO, error) {
	swaps, err := ReadSwaps()
	if err != nil {
		return BlockIO{}, err
	}
	devices := map[uint64]bool{}
	for _, s := range swaps {
		dev, err := blockDeviceOf(s.Path)
		if err != nil {
			return BlockIO{}, fmt.Errorf("swap area: %w", err)
		}
		devices[dev] = true
	}
	fs, err := blockdevice.NewDefaultFS()
	if err != nil {
		return BlockIO{}, fmt.Errorf("read /proc/diskstats: %w", err)
	}
	stats, err := fs.ProcDiskstats()
	if err != nil {
		return BlockIO{}, fmt.Errorf("read /proc/diskstats: %w", err)
	}
	return sumBlockIO(stats, devices), nil
}

// sumBlockIO adds up the I/O of the listed devices (by device number).
func sumBlockIO(stats []blockdevice.Diskstats, devices map[uint64]bool) BlockIO {
	var io BlockIO
	for _, d := range stats {
		if devices[unix.Mkdev(d.MajorNumber, d.MinorNumber)] {
			io.Reads += d.ReadIOs
			io.Writes += d.WriteIOs
		}
	}
	return io
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
