package machine

import (
	"errors"
	"fmt"
	"os"

	"github.com/headroom-dev/headroom/internal/sim"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/units"
)

// compressionProbeBytes is how much of the workload's content the tier's
// compressor is measured on: enough pages that zsmalloc's size classes
// fill, a fraction of a second to write.
const compressionProbeBytes = 64 << 20

// measureTierCompression writes compressionProbeBytes of the workload's
// content to a scratch zram device with the compressor the tier uses
// (zswap's current one; zram's default) and keeps what they took.
func (f *Figures) measureTierCompression(o Options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (a scratch zram device)")
	}
	algorithm := ""
	if o.Tier == sim.TierZswap {
		z, err := host.ReadZswapParams()
		if err != nil {
			return fmt.Errorf("zswap's compressor: %w", err)
		}
		algorithm = z.Compressor
	}
	b, err := memload.Map(compressionProbeBytes, false, memload.HugePagesNever)
	if err != nil {
		return err
	}
	defer b.Close()
	b.Populate(o.Content, 1, func() bool { return false })
	c, err := swaptier.MeasureCompression(b.Pages(), b.Page, algorithm)
	if err != nil {
		return fmt.Errorf("measure the %s tier's compression on %s content: %w", o.Tier, o.Content, err)
	}
	f.TierCompression = &c
	return nil
}

// TierRatio is the ratio the model's tier takes from the measured
// compression: at least 1 (an incompressible page is stored whole) and at
// most SameFilledRatio.
func (f Figures) TierRatio() float64 {
	if f.TierCompression == nil {
		return 0
	}
	return min(max(f.TierCompression.Ratio(), 1), sim.SameFilledRatio)
}

func (f Figures) tierCompressionString() string {
	c := f.TierCompression
	if c == nil {
		if f.TierNote != "" {
			return "; the tier's compression " + f.TierNote
		}
		return ""
	}
	return fmt.Sprintf("; the tier's compressor %s stored %s of the workload's content in %s of RAM, %.2f:1 (%d pages as a fill pattern; a scratch zram device)",
		c.Algorithm, units.FormatBytes(c.StoredBytes), units.FormatBytes(c.RAMBytes), c.Ratio(), c.SamePages)
}
