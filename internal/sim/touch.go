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
// workers taking turns on a core, see Node.TouchOwnBlock).
type TouchRate struct {
	BytesPerCore float64
	PagesPerSec  float64
}

// ParseTouchRate parses --touch-rate: one rate (whatever the memory
// touched) or rates by the memory touched per core, ascending.
func ParseTouchRate(s string) ([]TouchRate, error) {
	bad := fmt.Errorf("--touch-rate %q: want %s, sizes ascending, rates positive", s, TouchRateForm)
	var out []TouchRate
	if !strings.Contains(s, ":") {
		r, err := parseRate(s)
		if err != nil {
			return nil, bad
		}
		out = []TouchRate{{PagesPerSec: r}}
	} else {
		for _, part := range strings.Split(s, ",") {
			size, rate, ok := strings.Cut(strings.TrimSpace(part), ":")
			b, err := units.ParseBytes(size)
			r, err2 := parseRate(rate)
			if !ok || err != nil || err2 != nil || b == 0 {
				return nil, bad
			}
			out = append(out, TouchRate{BytesPerCore: float64(b), PagesPerSec: r})
		}
	}
	if !touchRatesValid(out) {
		return nil, bad
	}
	return out, nil
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
	if len(rs) == 1 && rs[0].BytesPerCore == 0 {
		return strconv.FormatFloat(rs[0].PagesPerSec, 'g', -1, 64)
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f:%s", r.BytesPerCore, strconv.FormatFloat(r.PagesPerSec, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// touchRateAt is the pages/s a core touches cycling through bytesPerCore:
// linear in log2 of the bytes between the given sizes, and beyond them the
// nearest size's rate (a rate at one size alone holds for any). Holding,
// not extrapolating: past the largest size measured every walk already
// misses the caches.
func touchRateAt(rs []TouchRate, bytesPerCore float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	return alongLog2(rs, bytesPerCore, func(r TouchRate) float64 { return r.BytesPerCore },
		func(r TouchRate) float64 { return r.PagesPerSec }, false)
}

// touchTurnWorkersPerCore is how many workers a core the touch probe runs
// taking turns, each over a block that many times smaller than the
// largest it measures one worker a core, to tell how much of the memory
// a core's other workers cycle through slows a worker (Node.TouchOwnBlock).
const touchTurnWorkersPerCore = 4

// touchBytes is the memory that sets a core's touch rate while
// workersPerCore workers of blockBytes each take turns on it: all of it at
// ownBlock 0, one block at 1, between as a power of the workers, so the
// rate moves along its log2 curve in proportion.
func touchBytes(blockBytes, workersPerCore, ownBlock float64) float64 {
	return blockBytes * math.Pow(max(workersPerCore, 1), 1-ownBlock)
}

// ownBlockFrom is the ownBlock (touchBytes) at which the one-worker-a-core
// rates rs give turnRate, the pages/s a core touched with workersPerCore
// workers of blockBytes taking turns on it: 1 at or above the rate of one
// block, 0 at or below that of all of them. ok is false where rs cannot
// tell, not falling between the two.
func ownBlockFrom(rs []TouchRate, blockBytes, workersPerCore, turnRate float64) (ownBlock float64, ok bool) {
	one, all := touchRateAt(rs, blockBytes), touchRateAt(rs, blockBytes*workersPerCore)
	switch {
	case !(workersPerCore > 1) || !(turnRate > 0) || !(one > all):
		return 0, false
	case turnRate >= one:
		return 1, true
	case turnRate <= all:
		return 0, true
	}
	// The rate at touchBytes rises with ownBlock along a falling curve: bisect.
	lo, hi := 0.0, 1.0
	for range 40 {
		mid := (lo + hi) / 2
		if touchRateAt(rs, touchBytes(blockBytes, workersPerCore, mid)) < turnRate {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Round((lo+hi)/2*100) / 100, true
}

// maxTouchAloneSpeedup bounds Node.TouchAloneSpeedup: a core alone
// gains its neighbours' share of the caches and the memory bus, not
// several times its speed.
const maxTouchAloneSpeedup = 4

// aloneSpeedup is the factor on the touch rate with busyCores of cpus
// busy: speedup with one core busy, none with all, in proportion between.
func aloneSpeedup(speedup, busyCores, cpus float64) float64 {
	if !(speedup > 1) || !(cpus > 1) {
		return 1
	}
	idle := max(cpus-max(busyCores, 1), 0) // at most cpus-1
	return 1 + (speedup-1)*idle/(cpus-1)
}

// touchRatesValid says whether rates are as ParseTouchRate returns them.
func touchRatesValid(rs []TouchRate) bool {
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
