package sim

import (
	"strings"
	"testing"

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
