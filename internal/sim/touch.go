package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/units"
)

// TouchRateForm describes the accepted --touch-rate syntax.
const TouchRateForm = "PAGES_PER_SEC or SIZE:PAGES_PER_SEC[,...] (e.g. 20M, or 64Mi:75M,256Mi:50M,1Gi:33M: pages/s one core touches with SIZE of memory touched per busy core)"

// TouchRate is the pages/s one core touches in RAM while the workloads it
// runs touch BytesPerCore of memory between them (0: whatever they touch).
// The more memory a core cycles through, the fewer of its page-table
// walks the caches serve: measured here with 2 cores, a core touched 76M
// random pages/s over 128 MiB, 50M over 256 MiB and 31M over 1 GiB (for
// workers taking turns on a core, see Node.TouchTurnBlocks).
type TouchRate struct {
	BytesPerCore float64
	PagesPerSec  float64
}

// ParseTouchRate parses a core's touch rate (TouchRateForm): one rate
// (whatever the memory touched) or rates by the memory touched per core,
// ascending.
func ParseTouchRate(s string) ([]TouchRate, error) {
	out, ok := parseBySize(s, parseRate, func(bytesPerCore, rate float64) TouchRate { return TouchRate{bytesPerCore, rate} })
	if !ok || !TouchRatesValid(out) {
		return nil, fmt.Errorf("%q: want %s, sizes ascending, rates positive", s, TouchRateForm)
	}
	return out, nil
}

// parseBySize parses one value (whatever the memory touched: size 0) or
// SIZE:VALUE pairs, each by of; the caller checks the order and values.
func parseBySize[T any](s string, value func(string) (float64, error), of func(bytesPerCore, v float64) T) ([]T, bool) {
	if !strings.Contains(s, ":") {
		v, err := value(s)
		return []T{of(0, v)}, err == nil
	}
	var out []T
	for _, part := range strings.Split(s, ",") {
		size, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		b, err := units.ParseBytes(size)
		f, err2 := value(v)
		if !ok || err != nil || err2 != nil || b == 0 {
			return nil, false
		}
		out = append(out, of(float64(b), f))
	}
	return out, true
}

// formatBySize is parseBySize's inverse.
func formatBySize[T any](xs []T, bytesPerCore, value func(T) float64) string {
	if len(xs) == 1 && bytesPerCore(xs[0]) == 0 {
		return strconv.FormatFloat(value(xs[0]), 'g', -1, 64)
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f:%s", bytesPerCore(x), strconv.FormatFloat(value(x), 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// parseRate takes a rate as units.ParseRate does ("20M") or as a
// scenario's YAML number prints (1.69e+07).
func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		r, err = units.ParseRate(s)
	}
	return r, err
}

// FormatTouchRate is ParseTouchRate's inverse.
func FormatTouchRate(rs []TouchRate) string {
	return formatBySize(rs, func(r TouchRate) float64 { return r.BytesPerCore }, func(r TouchRate) float64 { return r.PagesPerSec })
}

// TouchRateAt is the pages/s a core touches cycling through bytesPerCore:
// linear in log2 of the bytes between the given sizes, and beyond them the
// nearest size's rate (a rate at one size alone holds for any). Holding,
// not extrapolating: past the largest size measured every walk already
// misses the caches.
func TouchRateAt(rs []TouchRate, bytesPerCore float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	return alongLog2(rs, bytesPerCore, func(r TouchRate) float64 { return r.BytesPerCore },
		func(r TouchRate) float64 { return r.PagesPerSec }, false)
}

// TouchRatesValid says whether rates are as ParseTouchRate returns them.
func TouchRatesValid(rs []TouchRate) bool {
	if len(rs) == 0 {
		return false
	}
	for i, r := range rs {
		if !(r.PagesPerSec > 0) || math.IsInf(r.PagesPerSec, 0) || !(r.BytesPerCore >= 0) || math.IsInf(r.BytesPerCore, 0) ||
			(len(rs) > 1 && !(r.BytesPerCore > 0)) || (i > 0 && !(r.BytesPerCore > rs[i-1].BytesPerCore)) {
			return false
		}
	}
	return true
}

// MaxTouchTurnBlocks bounds Node.TouchTurnBlocks: sharing a core costs a
// worker its share of the caches, not a curve's worth of memory.
const MaxTouchTurnBlocks = 64

// TouchBytes is the memory that sets a core's touch rate while
// workersPerCore workers of blockBytes each take turns on it: the block
// alone with one a core or without the correction (turnBlocks 0 or 1),
// else the block × turnBlocks with two or more, and between them the
// block × turnBlocks^(workers a core − 1). Two are as many as sixteen:
// each turn of another worker (a scheduler's slice, in which a worker here
// cycles through all its block) evicts the page-table lines a worker had
// in the core's caches, and one other evicts them as well as many.
func TouchBytes(blockBytes, workersPerCore, turnBlocks float64) float64 {
	return blockBytes * math.Pow(max(turnBlocks, 1), min(max(workersPerCore-1, 0), 1))
}
