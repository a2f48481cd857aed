package density

import (
	"slices"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
)

// The agent's evictions of a step's workers count from the step's start:
// an earlier step's w2 (same name) does not, nor another action, nor a
// worker of no step; a worker evicted twice counts once.
func TestEvictedSince(t *testing.T) {
	start := time.Date(2026, 11, 26, 3, 46, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	decisions := []policy.Decision{
		{Time: at(-30), Action: policy.ActionEvict, Workload: "w2"},
		{Time: at(5), Action: "set_swap", Workload: "w1"},
		{Time: at(14), Action: policy.ActionEvict, Workload: "w3"},
		{Time: at(14.5), Action: "evicted", Workload: "w3"},
		{Time: at(20), Action: policy.ActionEvict, Workload: "w9"},
		{Time: at(0), Action: policy.ActionEvict, Workload: "w1"},
		{Time: at(25), Action: policy.ActionEvict, Workload: "w3"},
	}
	got := evictedSince(decisions, []string{"w1", "w2", "w3", "w4"}, start)
	if want := []string{"w3", "w1"}; !slices.Equal(got, want) {
		t.Errorf("evicted since the step's start: %v, want %v", got, want)
	}
	if got := evictedSince(nil, []string{"w1"}, start); len(got) != 0 {
		t.Errorf("no decisions: %v", got)
	}
}
