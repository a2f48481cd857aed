package agent

import (
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

// applySwap sets a workload's swap allowance (v1: memsw.limit = limit +
// allowance; v2: memory.swap.max) and reports whether the kernel took it.
func applySwap(g cgroup.Group, d policy.Decision) policy.SwapResult {
	res := policy.SwapResult{Workload: d.Workload, SwapBytes: d.Swap.SwapBytes, TriedAt: d.Time}
	switch {
	case g == nil:
		res.Err = "workload cgroup no longer exists"
	default:
		if err := g.SetSwapLimit(d.Swap.SwapBytes); err != nil {
			res.Err = err.Error()
		}
	}
	return res
}
