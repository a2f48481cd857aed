package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/sim"

	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// touchSizesPerCore are the blocks the touch rate is measured with, one
// worker a core: from what the caches hold to what they do not.
var touchSizesPerCore = []uint64{64 << 20, 256 << 20, 1 << 30}

// touchRun is one round's measurement of one block: pages/s a core with a
// worker on every core, and the pages/s a core filled the block at.
type touchRun struct {
	BytesPerCore        uint64
	AllPagesPerSec      float64
	PopulatePagesPerSec float64
}

// measureTouchRate runs `headroom load` at each block size that fits in a
// quarter of RAM, one worker a core, and touchTurnWorkersPerCore workers a
// core taking turns over a quarter of the largest block, for o.rounds()
// rounds, and puts the medians in f (summarizeTouchRuns, summarizeTurns).
func measureTouchRate(ctx context.Context, o Options, f *Figures) error {
	cpus := f.CPUs
	var sizes []uint64
	for _, size := range touchSizesPerCore {
		if uint64(cpus)*size > f.RAMBytes/4 && len(sizes) > 0 {
			break
		}
		sizes = append(sizes, size)
	}
	turnBlock := sizes[len(sizes)-1] / touchTurnBlocksInLargest
	if turnBlock < sizes[0] { // the curve does not reach the turns' total
		turnBlock = 0
	}
	var runs []touchRun
	var turns []turnRound
	for r := range o.rounds() {
		o.progress("touch rate: headroom load, a worker a core over %s to %s, then workers taking turns (round %d of %d)",
			units.FormatBytes(sizes[0]), units.FormatBytes(sizes[len(sizes)-1]), r+1, o.rounds())
		round := turnRound{PagesPerSec: map[int]float64{}}
		for _, size := range sizes {
			all, err := loadSummary(ctx, o, cpus, size)
			if err != nil {
				return err
			}
			run := touchRun{BytesPerCore: size, AllPagesPerSec: all.PagesPerSec / float64(cpus)}
			if all.PopulateSeconds > 0 {
				run.PopulatePagesPerSec = float64(size/sim.PageBytes) / all.PopulateSeconds
			}
			runs = append(runs, run)
			round.Curve = append(round.Curve, sim.TouchRate{BytesPerCore: float64(size), PagesPerSec: run.AllPagesPerSec})
		}
		if turnBlock == 0 {
			continue
		}
		for _, perCore := range touchTurnWorkersPerCore {
			s, err := loadSummary(ctx, o, perCore*cpus, turnBlock)
			if err != nil {
				return err
			}
			round.PagesPerSec[perCore] = s.PagesPerSec / float64(cpus)
		}
		turns = append(turns, round)
	}
	f.TouchRate, f.PopulateRatePerCore = summarizeTouchRuns(runs)
	if len(turns) > 0 {
		f.TouchTurnBytes = float64(turnBlock)
		f.TouchTurns, f.TouchTurnBlocks = summarizeTurns(turns, f.TouchTurnBytes)
	}
	return nil
}

// loadSummary runs `headroom load` with workers workers of size bytes each.
func loadSummary(ctx context.Context, o Options, workers int, size uint64) (loadrun.FleetSummary, error) {
	var s loadrun.FleetSummary
	out, err := exec.CommandContext(ctx, o.Headroom, "load", "--workers", strconv.Itoa(workers), "--size", strconv.FormatUint(size, 10),
		"--scan", string(o.Scan), "--duration", o.Duration.String(), "--json").Output()
	if err != nil {
		return s, fmt.Errorf("measure the touch rate (headroom load, %d workers of %s): %w", workers, units.FormatBytes(size), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || !(s.PagesPerSec > 0) || s.Workers != workers {
		return s, fmt.Errorf("measure the touch rate: no summary of %d workers from headroom load", workers)
	}
	return s, nil
}

// summarizeTouchRuns turns the rounds into the model's figures: per block,
// the median of its rates with every core busy, and the median populate
// rate of the smallest block.
func summarizeTouchRuns(runs []touchRun) (rates []sim.TouchRate, populatePerCore float64) {
	all, populate := map[uint64][]float64{}, map[uint64][]float64{}
	for _, r := range runs {
		if !(r.AllPagesPerSec > 0) {
			continue
		}
		all[r.BytesPerCore] = append(all[r.BytesPerCore], r.AllPagesPerSec)
		if r.PopulatePagesPerSec > 0 {
			populate[r.BytesPerCore] = append(populate[r.BytesPerCore], r.PopulatePagesPerSec)
		}
	}
	sizes := slices.Sorted(maps.Keys(all))
	for _, size := range sizes {
		rates = append(rates, sim.TouchRate{BytesPerCore: float64(size), PagesPerSec: math.Round(results.Quantile(all[size], 0.5))})
	}
	if len(sizes) > 0 && len(populate[sizes[0]]) > 0 {
		populatePerCore = math.Round(results.Quantile(populate[sizes[0]], 0.5))
	}
	return rates, populatePerCore
}

// turnRound is one round of the touch probe: its one-worker-a-core curve
// and a core's pages/s with workers taking turns, by the workers a core.
type turnRound struct {
	Curve       []sim.TouchRate
	PagesPerSec map[int]float64
}

// summarizeTurns is the median rate of each count of workers a core
// taking turns over blocks of blockBytes, and the median of the blocks'
// worth each of their rates gives on its own round's curve (0 where no
// curve can tell): a round's turns and curve move together with the
// machine, where the medians of its rounds may each come from another.
func summarizeTurns(rounds []turnRound, blockBytes float64) (turns []TouchTurn, turnBlocks float64) {
	byCount := map[int][]float64{}
	var blocks []float64
	for _, r := range rounds {
		for perCore, rate := range r.PagesPerSec {
			byCount[perCore] = append(byCount[perCore], rate)
			if b, ok := turnBlocksFrom(r.Curve, blockBytes, rate); ok {
				blocks = append(blocks, b)
			}
		}
	}
	for _, perCore := range slices.Sorted(maps.Keys(byCount)) {
		turns = append(turns, TouchTurn{WorkersPerCore: perCore, PagesPerSec: math.Round(results.Quantile(byCount[perCore], 0.5))})
	}
	if len(blocks) > 0 {
		turnBlocks = math.Round(results.Quantile(blocks, 0.5)*100) / 100
	}
	return turns, turnBlocks
}

// touchTurnWorkersPerCore are the workers a core the touch probe runs
// taking turns, each over a block touchTurnBlocksInLargest times smaller
// than the largest it measures one worker a core, to tell how much
// sharing a core slows a worker (Node.TouchTurnBlocks): the model's
// turns cost the same from two a core on, and two and four tell it twice
// a round.
var touchTurnWorkersPerCore = []int{2, 4}

// touchTurnBlocksInLargest is how many of the turns' blocks the largest
// block of the one-worker-a-core curve holds: the curve can tell the
// turns' cost up to that many blocks.
const touchTurnBlocksInLargest = 4

// TouchTurn is a core's pages/s with WorkersPerCore workers taking turns
// on it.
type TouchTurn struct {
	WorkersPerCore int     `json:"workers_per_core"`
	PagesPerSec    float64 `json:"pages_per_sec"`
}

// turnBlocksFrom is the turnBlocks (TouchBytes) at which the one-worker-
// a-core rates rs give turnRate, the pages/s a core touched with workers
// of blockBytes taking turns on it: 1 at or above the rate of one block,
// the largest size over the block at or below the rate there (the curve
// holds beyond it, so it cannot tell more). ok is false where rs cannot
// tell, not falling from the block to its largest size.
func turnBlocksFrom(rs []sim.TouchRate, blockBytes, turnRate float64) (turnBlocks float64, ok bool) {
	if len(rs) == 0 || !(blockBytes > 0) {
		return 0, false
	}
	most := rs[len(rs)-1].BytesPerCore / blockBytes
	one, all := sim.TouchRateAt(rs, blockBytes), sim.TouchRateAt(rs, blockBytes*most)
	switch {
	case !(most > 1) || !(turnRate > 0) || !(one > all):
		return 0, false
	case turnRate >= one:
		return 1, true
	case turnRate <= all:
		return most, true
	}
	// The rate falls as the bytes grow: bisect in log2 of the blocks.
	lo, hi := 0.0, math.Log2(most)
	for range 40 {
		mid := (lo + hi) / 2
		if sim.TouchRateAt(rs, blockBytes*math.Exp2(mid)) > turnRate {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Round(math.Exp2((lo+hi)/2)*100) / 100, true
}
