package density

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/units"
)

// SwapFileDir is where a run's swap file is created.
const SwapFileDir = "/var/tmp"

// swapFileMarginBytes is left free beside the swap file (results, the
// device probe's scratch file, everything else on the file system).
const swapFileMarginBytes = 256 << 20

// CheckMachine checks the parameters against this machine before anything
// is created, naming the flag: the node must fit in RAM, a zram tier in
// twice RAM, and a swap file in SwapFileDir.
func (p Params) CheckMachine() error {
	if mem, err := host.ReadMemory(); err == nil {
		if p.NodeMemoryBytes > mem.TotalBytes {
			return fmt.Errorf("--node-memory %s is larger than this machine's RAM (%s); leave it unset to use the whole host",
				units.FormatBytes(p.NodeMemoryBytes), units.FormatBytes(mem.TotalBytes))
		}
		// zram holds its pages compressed in RAM: at the usual 2-3:1 more
		// than twice RAM cannot be filled, and its page table grows with it.
		if p.ZramBytes > 2*mem.TotalBytes {
			return fmt.Errorf("--swap-tier zram:%s is more than twice this machine's RAM (%s)",
				units.FormatBytes(p.ZramBytes), units.FormatBytes(mem.TotalBytes))
		}
	}
	if p.Swap != "file" {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(SwapFileDir, &st); err != nil {
		return fmt.Errorf("--swap: check free space for the swap file in %s: %w", SwapFileDir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); p.SwapFileBytes+swapFileMarginBytes > free {
		return fmt.Errorf("--swap: a %s swap file does not fit in %s (%s free, %s kept free)",
			units.FormatBytes(p.SwapFileBytes), SwapFileDir, units.FormatBytes(free), units.FormatBytes(swapFileMarginBytes))
	}
	return nil
}
