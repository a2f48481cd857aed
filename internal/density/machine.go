package density

import (
	"fmt"

	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

// SwapDirPrefix starts the name of the directory holding a run's swap file.
const SwapDirPrefix = tierspec.DirPrefix

// CheckMachine checks the parameters against this machine before anything
// is created, naming the flag: the node must fit in RAM, and the swap the
// run sets up must be safe here (a zram tier in twice RAM, a swap file in
// its file system).
func (p Params) CheckMachine() error {
	m, err := swaptier.ThisMachine()
	if err != nil {
		return err
	}
	if p.NodeMemoryBytes > m.RAMBytes {
		return fmt.Errorf("--node-memory %s is larger than this machine's RAM (%s); leave it unset to use the whole host",
			units.FormatBytes(p.NodeMemoryBytes), units.FormatBytes(m.RAMBytes))
	}
	if spec := p.SwapSpec(); spec.File != nil || spec.Zram != nil || spec.Zswap != nil {
		if err := swaptier.Check(spec, m); err != nil {
			return fmt.Errorf("--swap/--swap-tier: %w", err)
		}
	}
	return nil
}
