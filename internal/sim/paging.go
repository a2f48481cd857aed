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

// ParsePagingCPU parses the CPU paging costs (PagingCPUForm): one
// duration (the cost whatever the tasks) or costs by task count, ascending.
func ParsePagingCPU(s string) ([]PagingCost, error) {
	return parseSecondsByTasks(PagingCPUForm, s)
}

// RunQueueWaitForm describes the accepted --run-queue-wait syntax.
const RunQueueWaitForm = "DURATION or TASKS:DURATION[,...] (e.g. 20us, or 2:5us,8:40us: a faulting task's wait for a core per page paged in, with that many tasks faulting at once)"

// ParseRunQueueWait parses a faulting task's wait for a core
// (RunQueueWaitForm), in ParsePagingCPU's form.
func ParseRunQueueWait(s string) ([]PagingCost, error) {
	return parseSecondsByTasks(RunQueueWaitForm, s)
}

// parseSecondsByTasks parses durations per page by task count (form
// describes them).
func parseSecondsByTasks(form, s string) ([]PagingCost, error) {
	seconds := func(v string) (float64, bool) {
		d, err := time.ParseDuration(v)
		return d.Seconds(), err == nil && d >= 0
	}
	out, ok := parseByTasks(s, seconds, func(tasks, v float64) PagingCost { return PagingCost{Tasks: tasks, SecondsPerPage: v} })
	if !ok {
		return nil, fmt.Errorf("%q: want %s, task counts ascending from 1, durations not negative", s, form)
	}
	return out, nil
}

// parseByTasks parses a figure whatever the tasks ("VALUE", taken at one
// task) or figures by task count ("TASKS:VALUE,...", counts ascending
// from 1), value parsing and checking each figure and of building it.
func parseByTasks[T any](s string, value func(string) (float64, bool), of func(tasks, v float64) T) ([]T, bool) {
	if v, ok := value(strings.TrimSpace(s)); ok {
		return []T{of(1, v)}, true
	}
	var out []T
	last := 0.0
	for _, part := range strings.Split(s, ",") {
		tasks, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, false
		}
		n, err := strconv.ParseFloat(tasks, 64)
		f, ok := value(v)
		if err != nil || !ok || !(n >= 1) || math.IsInf(n, 0) || (len(out) > 0 && !(n > last)) {
			return nil, false
		}
		out, last = append(out, of(n, f)), n
	}
	return out, true
}

// formatByTasks writes figures by task count as parseByTasks reads them,
// each figure to a hundredth.
func formatByTasks[T any](xs []T, figure func(T) (tasks, v float64)) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		tasks, v := figure(x)
		parts[i] = fmt.Sprintf("%g:%g", tasks, math.Round(v*100)/100)
	}
	return strings.Join(parts, ",")
}

// FormatPagingSeconds is ParsePagingCPU's and ParseRunQueueWait's
// inverse.
func FormatPagingSeconds(cs []PagingCost) string {
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

// runQueueWaitAt is the wait for a core per page paged in with tasks
// faulting at once on cores, the CPU a page as cpu gives it. A measured
// wait is mostly the fair share's stretch: with more faulting tasks than
// cores each waits for the others' CPU, (tasks/cores − 1) × the CPU a
// page (measured here, random workers on two cores waited 574 µs a page
// with eight against 597 from their CPU, and 1991 with sixteen against
// 1932). So a wait is read as that stretch at its count plus what it
// exceeds it by (a woken task's latency where the cores are not
// oversubscribed: 23 µs with two). Between the counts given the excess
// is linear in log2 of the count and the nearest count's beyond them,
// while the stretch is the count's own: interpolated whole, the wait grew
// with the log of the count where the stretch grows with the count, and
// at twelve and thirteen tasks ran 10-12% above the fair share. Never
// below zero; none without waits.
func runQueueWaitAt(waits, cpu []PagingCost, cores, tasks float64) float64 {
	if len(waits) == 0 {
		return 0
	}
	stretch := func(tasks float64) float64 {
		if cores <= 0 {
			return 0
		}
		return max(tasks/cores-1, 0) * pagingCPUAt(cpu, tasks)
	}
	tasks = max(tasks, 1)
	excess := alongLog2(waits, tasks, func(c PagingCost) float64 { return c.Tasks },
		func(c PagingCost) float64 { return c.SecondsPerPage - stretch(c.Tasks) }, false)
	return max(stretch(tasks)+excess, 0)
}

// IOPagesForm describes the accepted --swap-read-pages and
// --swap-write-pages syntax.
const IOPagesForm = "PAGES or TASKS:PAGES[,...] (e.g. 8, or 2:6,8:4.2: the pages one I/O carries with that many tasks faulting at once)"

// maxIOPages bounds the pages one swap I/O may carry (a readahead window
// is at most 2^10 pages, vm.page-cluster's largest).
const maxIOPages = 1024

// IOPages is how many pages one swap I/O carries with Tasks tasks
// faulting at once. Both sizes shrink as more tasks page: the kernel
// narrows a sequential fault's readahead window when what it read ahead
// went unused, and the writes of reclaimers in several cgroups at once
// interleave in the swap slots, so fewer pages are adjacent for the
// block layer to merge (measured here with seq workers: reads of 6 pages
// and writes of 7-8 with two workers, 4 and 2-3 with eight).
type IOPages struct {
	Tasks float64
	Pages float64
}

// ParseIOPages parses the pages an I/O to the device carries (IOPagesForm):
// one page count whatever the tasks, or counts by task count, ascending.
func ParseIOPages(s string) ([]IOPages, error) {
	pages := func(v string) (float64, bool) {
		p, err := strconv.ParseFloat(v, 64)
		return p, err == nil && p >= 1 && p <= maxIOPages
	}
	out, ok := parseByTasks(s, pages, func(tasks, v float64) IOPages { return IOPages{Tasks: tasks, Pages: v} })
	if !ok {
		return nil, fmt.Errorf("%q: want %s, task counts ascending from 1, pages 1..%d", s, IOPagesForm, maxIOPages)
	}
	return out, nil
}

// FormatIOPages is ParseIOPages' inverse, to a hundredth of a page.
func FormatIOPages(ps []IOPages) string {
	return formatByTasks(ps, func(p IOPages) (float64, float64) { return p.Tasks, p.Pages })
}

// ioPagesAt is the pages one I/O carries with tasks faulting at once:
// linear in log2 of the task count between the given counts, the nearest
// count's beyond them (a size does not shrink below one page or grow past
// its window); fallback when none are given.
func ioPagesAt(ps []IOPages, tasks, fallback float64) float64 {
	if len(ps) == 0 {
		return fallback
	}
	return max(alongLog2(ps, max(tasks, 1), func(p IOPages) float64 { return p.Tasks }, func(p IOPages) float64 { return p.Pages }, false), 1)
}
