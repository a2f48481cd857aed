package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/memload/loadspec"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
)

// The planner's answer is the largest count that keeps the per-VM rate,
// and, with a swap bound, the largest that keeps both; a failed step
// never counts, whatever its rate.
func TestFindMaxVMs(t *testing.T) {
	const swapBytes = 1000
	ramp := func(failedAt int) *results.Run {
		run := &results.Run{Node: results.Node{SwapBytes: swapBytes}}
		// per VM: 100, 100, 93, 37.5, 20 pages/s; swap 0, 0, 10%, 40%, 80%
		for i, c := range []struct {
			aggregate float64
			swapUsed  uint64
		}{{100, 0}, {200, 0}, {280, 100}, {150, 400}, {100, 800}} {
			s := results.Step{Workers: i + 1, AggregatePagesPerSec: c.aggregate, SwapUsedBytes: c.swapUsed}
			if i+1 == failedAt {
				s.Failed, s.FailReason = true, "oom"
			}
			run.Steps = append(run.Steps, s)
		}
		return run
	}
	for _, c := range []struct {
		failedAt             int
		minFraction, maxSwap float64
		want                 string
	}{
		{0, 0.5, 0, "max-vms: 3 VMs keep"},
		{0, 0.3, 0, "max-vms: 4 VMs keep"},
		{0, 0.2, 0, "max-vms: 5 VMs keep"},
		{0, 0.3, 0.25, "; 3 also keep swap use within 25%"},
		{0, 0.3, 0.5, "; 4 also keep swap use within 50%"},
		{4, 0.3, 0, "max-vms: 3 VMs keep"},
		{0, 1.01, 0, "max-vms: 0 VMs keep"},
		{0, 0.1, 0, "max-vms: 5 VMs keep a mean per-VM rate of at least 10% of the one-VM rate (100 pages/s) (the ramp's last step: a longer ramp may allow more)"},
	} {
		got := FindMaxVMs(ramp(c.failedAt), c.minFraction, c.maxSwap)
		last := got[strings.LastIndex(got, "\n")+1:]
		if !strings.Contains(last, c.want) {
			t.Errorf("failed at %d, fraction %.2f, swap %.2f: %q, want it to contain %q", c.failedAt, c.minFraction, c.maxSwap, last, c.want)
		}
	}
	if got := FindMaxVMs(&results.Run{}, 0.5, 0); got != "max-vms: no steps" {
		t.Errorf("no steps: %q", got)
	}
}

// The largest overcommit is the one whose admitted count (KubeVirt's own
// request) is the most VMs the ramp showed keeping the bounds: one
// percent more admits another VM.
func TestFindOvercommit(t *testing.T) {
	run := &results.Run{Node: results.Node{SwapBytes: 1 << 40}}
	for n := 1; n <= 20; n++ {
		perVM := 100.0
		if n > 11 {
			perVM = 1 // past the knee
		}
		run.Steps = append(run.Steps, results.Step{Workers: n, AggregatePagesPerSec: perVM * float64(n)})
	}
	v := calc.Versions[calc.DefaultVersion]
	vm := calc.Shape{GuestMemoryBytes: 16 << 30, CPUs: 1}
	const allocatable = 182 << 30
	got, err := FindOvercommit(run, 0.5, 0, v, vm, allocatable)
	if err != nil {
		t.Fatal(err)
	}
	last := got[strings.LastIndex(got, "\n")+1:]
	var percent, admitted int
	if _, err := fmt.Sscanf(last, "overcommit-percent: %d%% admits %d VMs", &percent, &admitted); err != nil {
		t.Fatalf("%q: %v", last, err)
	}
	fits := func(p int) int {
		s := vm
		s.OvercommitPercent = p
		r, _ := calc.Compute(v, s)
		f, _ := calc.FitOnNode(r, calc.Node{MemoryBytes: allocatable})
		return f.VMsFit
	}
	if admitted != 11 || fits(percent) != 11 || fits(percent+1) <= 11 {
		t.Errorf("%q: %d%% admits %d, %d%% admits %d; want the largest percentage admitting the 11 that keep the rate",
			last, percent, fits(percent), percent+1, fits(percent+1))
	}
	// Without overcommit the node already admits more than perform.
	small := &results.Run{Steps: run.Steps[:12]}
	small.Steps = append([]results.Step(nil), small.Steps...)
	for i := range small.Steps {
		small.Steps[i].AggregatePagesPerSec = float64(small.Steps[i].Workers)
		if small.Steps[i].Workers > 1 {
			small.Steps[i].AggregatePagesPerSec = 0.1
		}
	}
	if got, _ := FindOvercommit(small, 0.5, 0, v, vm, allocatable); !strings.Contains(got, "overcommit-percent: none") {
		t.Errorf("one VM keeps the rate on a node that admits 11 at 100%%: %q", got[strings.LastIndex(got, "\n")+1:])
	}
	// A ramp that ends inside the bounds, short of what the node admits
	// without overcommit, answers nothing: "none" would be wrong.
	short := &results.Run{Steps: run.Steps[:5]}
	if got, _ := FindOvercommit(short, 0.5, 0, v, vm, allocatable); !strings.Contains(got, "overcommit-percent: not found: the ramp's last step, 5 VMs, still keeps the bounds") ||
		!strings.Contains(got, "a ramp past 11 answers it") {
		t.Errorf("a ramp of 5 VMs all keeping the rate, on a node that admits 11 at 100%%: %q", got[strings.LastIndex(got, "\n")+1:])
	}
}

// Each count's request is the one of the largest overcommit admitting no
// more than that count: one percent more admits more VMs (or the search's
// bound was reached), and below the count 100% already admits, 100%'s.
func TestKubeVirtRequests(t *testing.T) {
	v := calc.Versions[calc.DefaultVersion]
	vm := calc.Shape{GuestMemoryBytes: 16 << 30, CPUs: 1}
	const allocatable = 182 << 30
	counts := []int{1, 10, 11, 12, 16, 40, 100, 5000}
	requests, err := KubeVirtRequests(v, vm, allocatable, counts)
	if err != nil {
		t.Fatal(err)
	}
	atFull, err := admitted(v, vm, allocatable, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range counts {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			got := requests[n]
			percent, fit, err := largestOvercommitAdmitting(v, vm, allocatable, n)
			if err != nil {
				t.Fatal(err)
			}
			if got != uint64(fit.PodMemoryRequestBytes) || got == 0 {
				t.Fatalf("request %d B, want %d B (the request at %d%%)", got, fit.PodMemoryRequestBytes, percent)
			}
			if n < atFull.VMsFit {
				if percent != 100 || fit.VMsFit != atFull.VMsFit {
					t.Fatalf("%d VMs, fewer than 100%% admits (%d): %d%% admitting %d, want 100%%", n, atFull.VMsFit, percent, fit.VMsFit)
				}
				return
			}
			if fit.VMsFit > n {
				t.Fatalf("%d%% admits %d VMs, more than %d", percent, fit.VMsFit, n)
			}
			if percent < MaxOvercommitPercent {
				if next, _ := admitted(v, vm, allocatable, percent+1); next.VMsFit <= n {
					t.Fatalf("%d%% admits %d VMs, no more than %d: %d%% is not the largest", percent+1, next.VMsFit, n, percent)
				}
			}
		})
	}
	if requests[16] >= requests[12] || requests[12] > requests[11] {
		t.Errorf("requests for 11, 12, 16 VMs: %d, %d, %d B; want them falling as the count rises", requests[11], requests[12], requests[16])
	}
}

// A ramp searching the overcommit admits every count without a request,
// but its agent sees each count's KubeVirt request: past RAM the VMs get
// swap allowances and swap, where with no request they got none and the
// kernel killed one.
func TestOvercommitSearchGivesTheAgentEachCountsRequest(t *testing.T) {
	p := paper(loadspec.ScanRandom, []int{16})
	p.Node.Swap.SizeBytes = 64 << 30
	p.VM.RequestBytes = 0
	p.Agent = withAgent(policy.DefaultConfig())
	v := calc.Versions[calc.DefaultVersion]
	requests, err := KubeVirtRequests(v, calc.Shape{GuestMemoryBytes: p.VM.MemoryBytes, CPUs: 1}, p.Node.RAMBytes-p.Node.SystemReserveBytes, p.Deployments)
	if err != nil {
		t.Fatal(err)
	}
	p.StepRequestBytes = requests
	run, decisions, err := Run(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := run.Steps[0]
	if s.SwapUsedBytes == 0 || s.OOMKills != 0 {
		t.Fatalf("16 VMs with KubeVirt's request %d B each: %d B swap used, %d OOM kills; want swap and no OOM kill", requests[16], s.SwapUsedBytes, s.OOMKills)
	}
	for _, d := range decisions {
		if d.Action == policy.ActionSetSwap && d.Swap != nil && d.Swap.SwapBytes == 0 {
			t.Fatalf("allowance of 0 for %s: %s", d.Workload, d.Reason)
		}
	}
}
