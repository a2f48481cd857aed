package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/machine"
)

// Measured is what --machine this measured as scenario values, by flag:
// the figures it could measure, none of what it could not.
func Measured(fig machine.Figures) map[string]string {
	measured := map[string]string{}
	set := func(name, value string) { measured[name] = value }
	set("node-memory", fmt.Sprint(fig.RAMBytes))
	set("cpus", fmt.Sprint(fig.CPUs))
	set("touch-rate", sim.FormatTouchRate(fig.TouchRate))
	set("populate-rate", fmt.Sprint(fig.PopulateRatePerCore))
	if fig.TouchTurnBlocks > 0 {
		set("touch-turn-blocks", fmt.Sprint(fig.TouchTurnBlocks))
	}
	set("swap-read-iops", fmt.Sprint(fig.ReadIOPS))
	set("swap-write-iops", fmt.Sprint(fig.WriteIOPS))
	set("swap-latency", time.Duration(fig.LatencySeconds*float64(time.Second)).String())
	if fig.ReadBytesPerSec > 0 {
		set("swap-read-bandwidth", fmt.Sprint(uint64(math.Round(fig.ReadBytesPerSec))))
	}
	if fig.WriteBytesPerSec > 0 {
		set("swap-write-bandwidth", fmt.Sprint(uint64(math.Round(fig.WriteBytesPerSec))))
	}
	if len(fig.Depths) > 0 {
		set("swap-depths", sim.FormatDepths(fig.Depths))
	}
	if len(fig.PagingCPU) > 0 {
		set("paging-cpu", sim.FormatPagingSeconds(fig.PagingCPU))
	}
	if len(fig.RunQueueWait) > 0 {
		set("run-queue-wait", sim.FormatPagingSeconds(fig.RunQueueWait))
	}
	if len(fig.ReadaheadPages) > 0 {
		set("swap-read-pages", sim.FormatIOPages(fig.ReadaheadPages))
	}
	if len(fig.WritePages) > 0 {
		set("swap-write-pages", sim.FormatIOPages(fig.WritePages))
	}
	if len(fig.MixedCapacity) > 0 {
		set("swap-mixed-capacity", sim.FormatMixedCapacity(fig.MixedCapacity))
	}
	if fig.SwapSizeBytes > 0 {
		set("swap", fmt.Sprint(fig.SwapSizeBytes))
	}
	set("ksmd-cpu", (time.Duration(math.Round(fig.KSMDCPUSeconds*1e3)) * time.Millisecond).String())
	if r := fig.TierRatio(); r > 0 {
		set("swap-tier-ratio", fmt.Sprint(r))
	}
	return measured
}
