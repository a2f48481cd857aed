package sim

import (
	"fmt"
	"strings"

	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// FindMaxVMs answers the planner's question from a ramp: the largest VM
// count whose mean per-VM rate stays at least minPerVMFraction of the
// one-VM (first step's) rate, with no VM lost, and — when maxSwapUtil > 0
// — whose swap in use stays within that share of the swap; with the step
// table behind the answer.
func FindMaxVMs(run *results.Run, minPerVMFraction, maxSwapUtil float64) string {
	if len(run.Steps) == 0 || run.Steps[0].Workers == 0 {
		return "max-vms: no steps"
	}
	f := findCounts(run, minPerVMFraction, maxSwapUtil)
	var b strings.Builder
	b.WriteString(f.table)
	fmt.Fprintf(&b, "max-vms: %d VMs keep a mean per-VM rate of at least %.0f%% of the one-VM rate (%s pages/s)",
		f.best, 100*minPerVMFraction, units.FormatRate(f.inRAM))
	if maxSwapUtil > 0 {
		fmt.Fprintf(&b, "; %d also keep swap use within %.0f%%", f.bestSwap, 100*maxSwapUtil)
	}
	if last := run.Steps[len(run.Steps)-1].Workers; f.best == last {
		b.WriteString(" (the ramp's last step: a longer ramp may allow more)")
	}
	return b.String()
}

// found is a ramp's counts that meet the planner's bounds.
type found struct {
	table string
	// best keeps the rate; bestSwap the rate and the swap bound.
	best, bestSwap int
	inRAM          float64
}

func findCounts(run *results.Run, minPerVMFraction, maxSwapUtil float64) *found {
	f := &found{}
	var table strings.Builder
	first := run.Steps[0]
	f.inRAM = first.AggregatePagesPerSec / float64(first.Workers)
	fmt.Fprintf(&table, "%7s %14s %10s %10s  %s\n", "VMs", "per-VM pages/s", "of 1-VM", "swap used", "meets")
	for _, s := range run.Steps {
		perVM := s.AggregatePagesPerSec / float64(max(s.Workers, 1))
		util := 0.0
		if run.Node.SwapBytes > 0 {
			util = float64(s.SwapUsedBytes) / float64(run.Node.SwapBytes)
		}
		okRate := !s.Failed && perVM >= minPerVMFraction*f.inRAM
		okSwap := maxSwapUtil <= 0 || util <= maxSwapUtil
		if okRate && s.Workers > f.best {
			f.best = s.Workers
		}
		if okRate && okSwap && s.Workers > f.bestSwap {
			f.bestSwap = s.Workers
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
		fmt.Fprintf(&table, "%7d %14s %9.1f%% %9.1f%%  %s\n", s.Workers, units.FormatRate(perVM), 100*perVM/f.inRAM, 100*util, meets)
	}
	f.table = table.String()
	return f
}

// MaxOvercommitPercent bounds the search for the largest overcommit: at
// 10000% a VM's request is its virt-launcher's overhead and 1% of it.
const MaxOvercommitPercent = 10000

// FindOvercommit answers the question of a KubeVirt cluster's operator
// from a ramp run without admission: the largest memoryOvercommit
// percentage whose admitted VM count (KubeVirt's virt-launcher request,
// internal/calc, on allocatableBytes) the ramp shows keeping
// minPerVMFraction of the one-VM rate and, when maxSwapUtil > 0, its
// swap within that share; with the step table and the count it admits.
func FindOvercommit(run *results.Run, minPerVMFraction, maxSwapUtil float64, v calc.Version, vm calc.Shape, allocatableBytes uint64) (string, error) {
	if len(run.Steps) == 0 || run.Steps[0].Workers == 0 {
		return "overcommit-percent: no steps", nil
	}
	f := findCounts(run, minPerVMFraction, maxSwapUtil)
	good := f.best
	if maxSwapUtil > 0 {
		good = f.bestSwap
	}
	atLo, err := admitted(v, vm, allocatableBytes, 100)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(f.table)
	last := run.Steps[len(run.Steps)-1].Workers
	if atLo.VMsFit > good {
		if good == last { // not an answer: the ramp ended inside the bounds
			fmt.Fprintf(&b, "overcommit-percent: not found: the ramp's last step, %d VMs, still keeps the bounds, and without overcommit (100%%) KubeVirt %s admits %d VMs of %s; a ramp past %d answers it",
				last, v.Name, atLo.VMsFit, units.FormatBytes(vm.GuestMemoryBytes), atLo.VMsFit)
			return b.String(), nil
		}
		fmt.Fprintf(&b, "overcommit-percent: none: without overcommit (100%%) KubeVirt %s admits %d VMs of %s, more than the %d that keep the bounds",
			v.Name, atLo.VMsFit, units.FormatBytes(vm.GuestMemoryBytes), good)
		return b.String(), nil
	}
	lo, fit, err := largestOvercommitAdmitting(v, vm, allocatableBytes, good)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "overcommit-percent: %d%% admits %d VMs of %s (KubeVirt %s: %s requested each, %s allocatable); %d keep a mean per-VM rate of at least %.0f%% of the one-VM rate",
		lo, fit.VMsFit, units.FormatBytes(vm.GuestMemoryBytes), v.Name, units.FormatBytes(uint64(fit.PodMemoryRequestBytes)),
		units.FormatBytes(allocatableBytes), good, 100*minPerVMFraction)
	if maxSwapUtil > 0 {
		fmt.Fprintf(&b, " and swap use within %.0f%%", 100*maxSwapUtil)
	}
	if good == last {
		fmt.Fprintf(&b, " (the ramp's last step: a longer ramp may allow more)")
	}
	return b.String(), nil
}

// admitted is how many VMs of shape vm KubeVirt's request admits on
// allocatableBytes at an overcommit of percent.
func admitted(v calc.Version, vm calc.Shape, allocatableBytes uint64, percent int) (calc.Fit, error) {
	vm.OvercommitPercent = percent
	r, err := calc.Compute(v, vm)
	if err != nil {
		return calc.Fit{}, err
	}
	return calc.FitOnNode(r, calc.Node{MemoryBytes: allocatableBytes})
}

// largestOvercommitAdmitting is the largest overcommit percentage (100 to
// MaxOvercommitPercent) admitting no more than n VMs, and what it admits;
// 100 where even that admits more.
func largestOvercommitAdmitting(v calc.Version, vm calc.Shape, allocatableBytes uint64, n int) (int, calc.Fit, error) {
	// The admitted count never falls as the percentage rises: bisection.
	lo, hi := 100, MaxOvercommitPercent
	atHi, err := admitted(v, vm, allocatableBytes, hi)
	if err != nil {
		return 0, calc.Fit{}, err
	}
	if atHi.VMsFit <= n {
		return hi, atHi, nil
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		fit, err := admitted(v, vm, allocatableBytes, mid)
		if err != nil {
			return 0, calc.Fit{}, err
		}
		if fit.VMsFit <= n {
			lo = mid
		} else {
			hi = mid
		}
	}
	fit, err := admitted(v, vm, allocatableBytes, lo)
	return lo, fit, err
}

// KubeVirtRequests is, for each VM count, the memory request each VM
// holds when KubeVirt runs that many: its virt-launcher's request at the
// largest overcommit admitting no more than the count (the overcommit
// FindOvercommit would answer with it), at 100% where even that admits
// more. A ramp that searches the overcommit admits every count, and its
// agent gives each VM the swap allowance of that request.
func KubeVirtRequests(v calc.Version, vm calc.Shape, allocatableBytes uint64, counts []int) (map[int]uint64, error) {
	requests := make(map[int]uint64, len(counts))
	for _, n := range counts {
		if _, ok := requests[n]; ok {
			continue
		}
		_, fit, err := largestOvercommitAdmitting(v, vm, allocatableBytes, n)
		if err != nil {
			return nil, err
		}
		requests[n] = uint64(fit.PodMemoryRequestBytes)
	}
	return requests, nil
}
