package sim

import (
	"fmt"
	"strconv"
)

// ReadaheadUsedForm describes the accepted --readahead-used syntax.
const ReadaheadUsedForm = "SHARE or TASKS:SHARE[,...] (e.g. 0.9, or 8:1,16:0.87: the share of the pages a sequential fault's swap readahead reads that the scans touch before reclaim takes them back, with that many tasks faulting at once)"

// minReadaheadUsed bounds the used share from below: a fault reads at
// most a hundred pages for each one touched.
const minReadaheadUsed = 0.01

// ReadaheadUse is the share of the pages swapped in that sequential
// scans touched, with Tasks tasks faulting at once. The rest were read
// ahead and reclaimed again before their scan came to them, to be read
// once more when it does: the more scans page at once, the shorter a
// page read ahead stays (measured here with 2 GiB of seq workers over a
// swap file: all of them used with eight workers, 0.87 with sixteen; a
// density ramp's plateau touched 0.84-0.92 of what it swapped in).
type ReadaheadUse struct {
	Tasks     float64 `json:"tasks"`
	UsedShare float64 `json:"used_share"`
}

// ParseReadaheadUsed parses --readahead-used: one share whatever the
// tasks, or shares by task count, ascending.
func ParseReadaheadUsed(s string) ([]ReadaheadUse, error) {
	share := func(v string) (float64, bool) {
		u, err := strconv.ParseFloat(v, 64)
		return u, err == nil && u >= minReadaheadUsed && u <= 1
	}
	out, ok := parseByTasks(s, share, func(tasks, v float64) ReadaheadUse { return ReadaheadUse{Tasks: tasks, UsedShare: v} })
	if !ok {
		return nil, fmt.Errorf("--readahead-used %q: want %s, task counts ascending from 1, shares %g to 1", s, ReadaheadUsedForm, minReadaheadUsed)
	}
	return out, nil
}

// FormatReadaheadUsed is ParseReadaheadUsed's inverse, to a hundredth.
func FormatReadaheadUsed(us []ReadaheadUse) string {
	return formatByTasks(us, func(u ReadaheadUse) (float64, float64) { return u.Tasks, u.UsedShare })
}

// readaheadUsedValid: task counts ascending from 1, each share
// minReadaheadUsed to 1 (none is valid).
func readaheadUsedValid(us []ReadaheadUse) bool {
	return byTasksValid(us, func(u ReadaheadUse) (float64, float64) { return u.Tasks, u.UsedShare }, minReadaheadUsed, 1)
}

// readaheadUsedAt is the used share with tasks faulting at once: linear
// in log2 of the task count between the counts given, the nearest
// count's beyond them; 1 (all used) when none are given.
func readaheadUsedAt(us []ReadaheadUse, tasks float64) float64 {
	if len(us) == 0 {
		return 1
	}
	u := alongLog2(us, max(tasks, 1), func(u ReadaheadUse) float64 { return u.Tasks }, func(u ReadaheadUse) float64 { return u.UsedShare }, false)
	return min(max(u, minReadaheadUsed), 1)
}
