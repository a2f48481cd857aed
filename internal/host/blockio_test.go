package host

import (
	"testing"

	"github.com/prometheus/procfs/blockdevice"
	"golang.org/x/sys/unix"
)

// The swap areas' devices are found by number: a partition's own line,
// not its disk's (whose counts include it), and each device once.
func TestSumBlockIO(t *testing.T) {
	line := func(major, minor uint32, name string, reads, writes uint64) blockdevice.Diskstats {
		return blockdevice.Diskstats{Info: blockdevice.Info{MajorNumber: major, MinorNumber: minor, DeviceName: name},
			IOStats: blockdevice.IOStats{ReadIOs: reads, WriteIOs: writes}}
	}
	stats := []blockdevice.Diskstats{line(254, 0, "vda", 1000, 2000), line(254, 1, "vda1", 600, 1500), line(253, 0, "zram0", 7, 9)}
	for _, c := range []struct {
		devices map[uint64]bool
		want    BlockIO
	}{
		{map[uint64]bool{unix.Mkdev(254, 1): true}, BlockIO{600, 1500}},
		{map[uint64]bool{unix.Mkdev(254, 0): true}, BlockIO{1000, 2000}},
		{map[uint64]bool{unix.Mkdev(254, 1): true, unix.Mkdev(253, 0): true}, BlockIO{607, 1509}},
		{map[uint64]bool{unix.Mkdev(8, 0): true}, BlockIO{}},
		{nil, BlockIO{}},
	} {
		if got := sumBlockIO(stats, c.devices); got != c.want {
			t.Errorf("devices %v: %+v, want %+v", c.devices, got, c.want)
		}
	}
}
