package sim

import (
	"fmt"
	"strings"

	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// FindMaxVMs answers the planner's question from a ramp: the largest VM
// count whose mean per-VM rate stays at least minPerVMFraction of the
// one-VM (first step's) rate, with no VM lost, and — when maxSwapUtil > 0
// — whose swap in use stays within that share of the swap; with the step
// table behind the answer.
func FindMaxVMs(run *results.Run, minPerVMFraction, maxSwapUtil float64) string {
	var b strings.Builder
	if len(run.Steps) == 0 || run.Steps[0].Workers == 0 {
		return "max-vms: no steps"
	}
	first := run.Steps[0]
	inRAM := first.AggregatePagesPerSec / float64(first.Workers)
	fmt.Fprintf(&b, "%7s %14s %10s %10s  %s\n", "VMs", "per-VM pages/s", "of 1-VM", "swap used", "meets")
	best, bestSwap := 0, 0
	for _, s := range run.Steps {
		perVM := s.AggregatePagesPerSec / float64(max(s.Workers, 1))
		util := 0.0
		if run.Node.SwapBytes > 0 {
			util = float64(s.SwapUsedBytes) / float64(run.Node.SwapBytes)
		}
		okRate := !s.Failed && perVM >= minPerVMFraction*inRAM
		okSwap := maxSwapUtil <= 0 || util <= maxSwapUtil
		if okRate && s.Workers > best {
			best = s.Workers
		}
		if okRate && okSwap && s.Workers > bestSwap {
			bestSwap = s.Workers
		}
		meets := "rate"
		switch {
		case s.Failed:
			meets = "failed: " + s.FailReason
		case !okRate:
			meets = "-"
		case maxSwapUtil > 0 && okSwap:
			meets = "rate, swap"
		}
		fmt.Fprintf(&b, "%7d %14s %9.1f%% %9.1f%%  %s\n", s.Workers, units.FormatRate(perVM), 100*perVM/inRAM, 100*util, meets)
	}
	fmt.Fprintf(&b, "max-vms: %d VMs keep a mean per-VM rate of at least %.0f%% of the one-VM rate (%s pages/s)",
		best, 100*minPerVMFraction, units.FormatRate(inRAM))
	if maxSwapUtil > 0 {
		fmt.Fprintf(&b, "; %d also keep swap use within %.0f%%", bestSwap, 100*maxSwapUtil)
	}
	return b.String()
}
