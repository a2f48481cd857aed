package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
)

// The release measurement: a density step just past RAM, in small.
// Workers, each in its own cgroup under one holding 1/releaseOverfill of
// their blocks, fill their blocks together and wait to be released, as
// density's workers do. Where reclaim falls behind the fill, it visits
// one cgroup at a time and takes a share of it (its LRU >> priority), so
// the pages out per worker by the release are a count of batches: their
// variance over their mean is the batch (Node.ReclaimBatchShare). It
// also takes more from the cgroups made first (Node.ReclaimOrderSlope):
// nine runs here, at 12-60% over, had the first worker at 1.2-1.9 times
// the mean out and the last at 0-1.1; with the workers started in the
// reverse order the first made still gave most.

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
// RAM once all had filled their blocks, and the pace reclaim swapped the
// fill's pages out at (FillOutPagesPerSec, 0: not told).
type ReleaseSample struct {
	PagesOut, PagesInRAM []float64
	FillOutPagesPerSec   float64
}

// swapOutReading is the host's pages swapped out (pswpout) at a time.
type swapOutReading struct {
	Seconds, Pages float64
}

// minFillOutSeconds is the least time the fill's pages must take going
// out to give a pace.
const minFillOutSeconds = 0.2

// fillOutPace is the pages a second swapped out while a fill's pages went
// out: from the last reading before they began to the first reading after
// they ended, readings in time order (0: too short or none).
func fillOutPace(readings []swapOutReading) float64 {
	if len(readings) < 2 {
		return 0
	}
	first, last := -1, -1
	for i := 1; i < len(readings); i++ {
		if readings[i].Pages > readings[i-1].Pages {
			if first < 0 {
				first = i - 1
			}
			last = i
		}
	}
	if first < 0 {
		return 0
	}
	seconds := readings[last].Seconds - readings[first].Seconds
	if seconds < minFillOutSeconds {
		return 0
	}
	return (readings[last].Pages - readings[first].Pages) / seconds
}

// fillOutEvery is how often the release run reads the host's pages out.
const fillOutEvery = 20 * time.Millisecond

// readSwapOuts reads the host's pages out every fillOutEvery until the
// stop it returns is called (once), which gives what it read (nothing
// where a read failed).
func readSwapOuts() (stop func() []swapOutReading) {
	stopped := make(chan struct{})
	done := make(chan []swapOutReading, 1)
	go func() {
		var readings []swapOutReading
		start := time.Now()
		tick := time.NewTicker(fillOutEvery)
		defer tick.Stop()
		for {
			vm, err := host.ReadVMStat()
			if err != nil {
				done <- nil
				return
			}
			readings = append(readings, swapOutReading{Seconds: time.Since(start).Seconds(), Pages: float64(vm.PswpOut)})
			select {
			case <-stopped:
				done <- readings
				return
			case <-tick.C:
			}
		}
	}()
	return func() []swapOutReading {
		close(stopped)
		return <-done
	}
}

// ReleaseFit is what release runs tell of reclaim where it falls behind:
// how much more readily it takes from the cgroups created first
// (OrderSlope, Node.ReclaimOrderSlope) and its batch a visit, in pages
// and as a share of a worker's pages in RAM (Node.ReclaimBatchShare, at
// most 1).
type ReleaseFit struct {
	OrderSlope, BatchPages, BatchShare float64
}

// maxOrderSlope bounds the fitted slope below 1, where the last cgroup
// would give nothing.
const maxOrderSlope = 0.95

// PooledRelease fits several runs (each of at least two workers, in the
// order their cgroups were made) together. Each worker's expected pages
// out are its run's mean times 1 + slope × its place (1 for the first,
// −1 for the last, evenly between), the slope fitted by least squares
// over all runs (at least 0: none measured is none). The batch is the
// spread left: the squared deviations from that expectation over the
// expectation's sum, less what the run's mean and a fitted slope took (a
// multinomial's variance is its batch times its mean, over workers − 1).
// Eight workers give a variance to about ±50%: pooling weighs every
// worker alike.
func PooledRelease(samples []ReleaseSample) ReleaseFit {
	var fit ReleaseFit
	var runs []ReleaseSample
	var means []float64
	for _, s := range samples {
		if len(s.PagesOut) >= 2 {
			runs, means = append(runs, s), append(means, meanOf(s.PagesOut))
		}
	}
	var across, along float64 // the slope's regression sums
	for r, s := range runs {
		for i, p := range s.PagesOut {
			place := releasePlace(i, len(s.PagesOut))
			across += (p - means[r]) * place
			along += means[r] * place * place
		}
	}
	if !(along > 0) {
		return fit
	}
	fit.OrderSlope = min(max(across/along, 0), maxOrderSlope)
	fitted := fit.OrderSlope == across/along // not held to its bounds
	var squares, dof, expected, workers, inRAM, inRAMWorkers float64
	for r, s := range runs {
		n := float64(len(s.PagesOut))
		// A multinomial's variance over its expected shares g (here 1 +
		// slope × place, summing to n) is the batch times mean × (n −
		// Σg²/n), and Σg²/n is 1 + spread.
		var spread float64
		for i, p := range s.PagesOut {
			place := fit.OrderSlope * releasePlace(i, len(s.PagesOut))
			squares += (p - means[r]*(1+place)) * (p - means[r]*(1+place))
			spread += place * place / n
		}
		dof += means[r] * (n - 1 - spread)
		expected += means[r] * n
		workers += n
		for _, p := range s.PagesInRAM {
			inRAM += p
			inRAMWorkers++
		}
	}
	// A fitted slope takes one degree of freedom, at the mean run's mean.
	if fitted {
		dof -= expected / workers
	}
	if !(dof > 0) {
		return fit
	}
	fit.BatchPages = squares / dof
	if inRAM > 0 {
		fit.BatchShare = min(fit.BatchPages/(inRAM/inRAMWorkers), 1)
	}
	return fit
}

// releasePlace is the i-th of n cgroups' place in creation order: 1 for
// the first, −1 for the last, evenly between.
func releasePlace(i, n int) float64 {
	return 1 - 2*float64(i)/float64(n-1)
}

func meanOf(xs []float64) float64 {
	return sumOf(xs) / float64(len(xs))
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
	stopReading := readSwapOuts()
	ws, _, err := launchLoadWorkers(g, "w", headroom, workers, args)
	defer ws.stop() // also those started before an error
	if err != nil {
		stopReading()
		return s, err
	}
	readyCtx, cancel := context.WithTimeoutCause(ctx, 2*time.Minute, fmt.Errorf("%d workers not full within two minutes", workers))
	defer cancel()
	err = ctl.AwaitReady(readyCtx, workers)
	readings := stopReading()
	if err != nil {
		return s, err
	}
	s.FillOutPagesPerSec = fillOutPace(readings)
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
