package policy

import (
	"cmp"
	"fmt"
	"slices"
)

// Ranking follows kubelet's eviction manager: candidates are compared by
// a list of small named functions, the first that tells them apart wins.

type compareFunc func(a, b Workload, allowance map[string]uint64) int

// criterion is a named comparison, so a decision can say which one chose
// the victim.
type criterion struct {
	name    string
	compare compareFunc
}

func orderedBy(cs ...criterion) func(a, b Workload, allowance map[string]uint64) (int, string) {
	return func(a, b Workload, allowance map[string]uint64) (int, string) {
		for _, c := range cs {
			if r := c.compare(a, b, allowance); r != 0 {
				return r, c.name
			}
		}
		return cmp.Compare(a.Name, b.Name), "name (all else equal)"
	}
}

func used(w Workload) uint64 { return w.WorkingSetBytes + w.SwapBytes }

// overLimit: workloads using more than their memory limit plus swap
// allowance first. cgroup v1 enforces only that sum (memsw), so swap alone
// above the allowance is not over the limit; without a memory limit, swap
// above the allowance is.
func overLimit(a, b Workload, allowance map[string]uint64) int {
	over := func(w Workload) bool {
		if w.LimitBytes == 0 {
			return w.SwapBytes > allowance[w.Name]
		}
		return used(w) > w.LimitBytes+allowance[w.Name]
	}
	return boolFirst(over(a), over(b))
}

// exceedsRequest: workloads using more than they requested (counting swap) first.
func exceedsRequest(a, b Workload, _ map[string]uint64) int {
	return boolFirst(used(a) > a.RequestBytes, used(b) > b.RequestBytes)
}

// priority: lower priority first.
func priority(a, b Workload, _ map[string]uint64) int { return cmp.Compare(a.Priority, b.Priority) }

// usageAboveRequest: the most memory (counting swap) above request first.
func usageAboveRequest(a, b Workload, _ map[string]uint64) int {
	above := func(w Workload) int64 { return int64(used(w)) - int64(w.RequestBytes) }
	return cmp.Compare(above(b), above(a))
}

func boolFirst(a, b bool) int {
	switch {
	case a && !b:
		return -1
	case b && !a:
		return 1
	}
	return 0
}

var victimOrder = orderedBy(
	criterion{"over its limit plus swap allowance", overLimit},
	criterion{"exceeds its memory request", exceedsRequest},
	criterion{"lower priority", priority},
	criterion{"more memory above its request", usageAboveRequest},
)

// Rank returns the evictable workloads, the first to evict first. Protected
// workloads, workloads without processes and workloads whose stats could
// not be read are never candidates.
func Rank(workloads []Workload, allowance map[string]uint64) []Workload {
	var c []Workload
	for _, w := range workloads {
		if !w.Protected && w.Processes > 0 && w.Err == "" {
			c = append(c, w)
		}
	}
	slices.SortFunc(c, func(a, b Workload) int {
		r, _ := victimOrder(a, b, allowance)
		return r
	})
	return c
}

// rankReason says why ranked[0] comes first: the criterion that set it
// before the runner-up, and its numbers.
func rankReason(ranked []Workload, allowance map[string]uint64) string {
	w := ranked[0]
	why := "the only candidate"
	if len(ranked) > 1 {
		_, by := victimOrder(w, ranked[1], allowance)
		why = fmt.Sprintf("ranked first of %d candidates by %s (next: %s, priority %d, uses %d B, request %d B)",
			len(ranked), by, ranked[1].Name, ranked[1].Priority, used(ranked[1]), ranked[1].RequestBytes)
	}
	return fmt.Sprintf("%s; uses %d B (working set %d B + swap %d B, swap allowance %d B) against a request of %d B; priority %d",
		why, used(w), w.WorkingSetBytes, w.SwapBytes, allowance[w.Name], w.RequestBytes, w.Priority)
}
