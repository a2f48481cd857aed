package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// PagingCPUForm describes the accepted --paging-cpu syntax.
const PagingCPUForm = "DURATION or TASKS:DURATION[,...] (e.g. 5us, or 2:57us,8:97us: the CPU per page with that many tasks faulting at once)"

// PagingCost is the CPU one page paged in (and another out) costs with
// Tasks tasks faulting at once: the more fault, the more each page costs
// (they contend for the LRU, the swap device's slots and, on a VM, its
// host; measured here, a seq page costs 57 µs with two workers, 97 µs
// with eight and 118 µs with sixteen).
type PagingCost struct {
	Tasks          float64
	SecondsPerPage float64
}

// ParsePagingCPU parses --paging-cpu: one duration (the cost whatever the
// tasks) or costs by task count, ascending.
func ParsePagingCPU(s string) ([]PagingCost, error) {
	bad := fmt.Errorf("--paging-cpu %q: want %s, task counts ascending from 1, durations not negative", s, PagingCPUForm)
	if d, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
		if d < 0 {
			return nil, bad
		}
		return []PagingCost{{Tasks: 1, SecondsPerPage: d.Seconds()}}, nil
	}
	var out []PagingCost
	for _, part := range strings.Split(s, ",") {
		tasks, cost, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, bad
		}
		n, err := strconv.ParseFloat(tasks, 64)
		d, err2 := time.ParseDuration(cost)
		if err != nil || err2 != nil || d < 0 || !(n >= 1) || math.IsInf(n, 0) || (len(out) > 0 && !(n > out[len(out)-1].Tasks)) {
			return nil, bad
		}
		out = append(out, PagingCost{Tasks: n, SecondsPerPage: d.Seconds()})
	}
	return out, nil
}

// FormatPagingCPU is ParsePagingCPU's inverse.
func FormatPagingCPU(cs []PagingCost) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%g:%s", c.Tasks, time.Duration(math.Round(c.SecondsPerPage*1e9)))
	}
	return strings.Join(parts, ",")
}

// pagingCPUAt is the CPU per page with tasks faulting at once: linear in
// log2 of the task count between the given counts and, beyond them, along
// the nearest segment (a cost by one count alone holds for any), never
// below zero.
func pagingCPUAt(cs []PagingCost, tasks float64) float64 {
	if len(cs) == 0 {
		return 0
	}
	return max(alongLog2(cs, max(tasks, 1), func(c PagingCost) float64 { return c.Tasks },
		func(c PagingCost) float64 { return c.SecondsPerPage }, true), 0)
}
