package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
)

// The release measurement: a density step just past RAM, in small.
// Workers, each in its own cgroup under one holding 1/releaseOverfill of
// their blocks, fill their blocks together and wait to be released, as
// density's workers do. Where reclaim falls behind the fill, it visits
// one cgroup at a time and takes a share of it (its LRU >> priority), so
// the pages out per worker by the release are a count of batches: their
// variance over their mean is the batch (Node.ReclaimBatchShare). In two
// density ramps here (nine workers of 256 MiB on a 2 GiB node) three of
// nine had nothing out by then and the rest 20-70 MiB: a batch of a
// tenth of a worker.

// releaseWorkersPerCore is the release run's workers a core: as many as
// the density steps just past RAM measured here (nine on two cores).
const releaseWorkersPerCore = 4

// releaseOverfill is the workers' blocks over their cgroup's limit: as at
// the density step the batch was read from (nine workers of 256 MiB and
// their runtime on a 2 GiB node).
const releaseOverfill = 1.12

// releaseRunsPerRound is the release runs a round of the machine's
// figures: their variance is pooled.
const releaseRunsPerRound = 2

// releaseMinPagesOut is the least mean a worker had out that gives a
// figure.
const releaseMinPagesOut = 256

// ReleaseSample is one release run: the pages each worker had out and in
// RAM once all had filled their blocks.
type ReleaseSample struct {
	PagesOut, PagesInRAM []float64
}

// BatchPages is reclaim's batch a visit: the variance of the pages out
// per worker (over workers − 1, which offsets the multinomial's 1 − 1/n)
// over their mean.
func (s ReleaseSample) BatchPages() float64 {
	pages, _ := PooledBatch([]ReleaseSample{s})
	return pages
}

// BatchShare is the batch as a share of a worker's pages in RAM (the
// model's Node.ReclaimBatchShare), at most 1.
func (s ReleaseSample) BatchShare() float64 {
	_, share := PooledBatch([]ReleaseSample{s})
	return share
}

// PooledBatch is the batch of several runs (each of at least two
// workers), pooled: their squared deviations from their own means over
// their means times their workers − 1, summed; and that as a share of
// the workers' mean pages in RAM, at most 1. Eight workers give a
// variance to about ±50%, and single runs here read 0.03-0.17 of a
// worker: pooling weighs every worker alike.
func PooledBatch(samples []ReleaseSample) (pages, share float64) {
	var squares, means, inRAM, workers float64
	for _, s := range samples {
		n := float64(len(s.PagesOut))
		if n < 2 {
			continue
		}
		var mean float64
		for _, p := range s.PagesOut {
			mean += p / n
		}
		for _, p := range s.PagesOut {
			squares += (p - mean) * (p - mean)
		}
		means += mean * (n - 1)
		for _, p := range s.PagesInRAM {
			inRAM += p
			workers++
		}
	}
	if !(means > 0) {
		return 0, 0
	}
	pages = squares / means
	if workers > 0 && inRAM > 0 {
		share = min(pages/(inRAM/workers), 1)
	}
	return pages, share
}

// MeasureRelease fills workers `headroom load` blocks together past their
// cgroup's limit, waits until all are full, and reads what each had out.
// With no swap active it pages to a swap file where density puts one.
func MeasureRelease(ctx context.Context, headroom string, scan memload.Scan, workers int) (s ReleaseSample, err error) {
	sw, err := readProbeSwap()
	if err != nil {
		return s, err
	}
	workers = max(workers, 2)
	blockBytes, err := sw.workerBytes(workers)
	if err != nil {
		return s, err
	}
	down, err := sw.up(pagingSwapBytes)
	if err != nil {
		return s, err
	}
	defer func() {
		if derr := down(); derr != nil && err == nil {
			err = derr
		}
	}()
	root, err := cgroup.Open("/")
	if err != nil {
		return s, err
	}
	g, err := cgroup.Create(root, fmt.Sprintf("headroom-sim-release-%d", os.Getpid()))
	if err != nil {
		return s, err
	}
	defer cgroup.Remove(g, 10*time.Second)
	limitBytes := uint64(float64(workers)*float64(blockBytes)/releaseOverfill) / PageBytes * PageBytes
	if err := g.SetMemoryLimit(limitBytes); err != nil {
		return s, err
	}
	ctl, err := loadctl.Listen("unix:" + filepath.Join(os.TempDir(), fmt.Sprintf("headroom-sim-release-%d.sock", os.Getpid())))
	if err != nil {
		return s, err
	}
	// Closing the controller ends workers still waiting for the release.
	defer ctl.Close()
	args := func(i int) []string {
		return append(loadArgs(scan, blockBytes, time.Second), "--controller", ctl.Addr(), "--worker-id", fmt.Sprintf("w%d", i+1))
	}
	ws, _, err := launchLoadWorkers(g, "w", headroom, workers, args)
	defer ws.stop() // also those started before an error
	if err != nil {
		return s, err
	}
	readyCtx, cancel := context.WithTimeoutCause(ctx, 2*time.Minute, fmt.Errorf("%d workers not full within two minutes", workers))
	defer cancel()
	if err := ctl.AwaitReady(readyCtx, workers); err != nil {
		return s, err
	}
	for _, w := range ws.groups {
		u, err := w.Usage()
		if err != nil {
			return s, err
		}
		s.PagesOut = append(s.PagesOut, float64(u.SwapBytes/PageBytes))
		s.PagesInRAM = append(s.PagesInRAM, float64(u.UsageBytes/PageBytes))
	}
	var out float64
	for _, p := range s.PagesOut {
		out += p / float64(workers)
	}
	if out < releaseMinPagesOut {
		return s, fmt.Errorf("workers had %.0f pages out each once full: too few to measure", math.Round(out))
	}
	return s, nil
}
