package machine

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/fit"

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

// releaseOverfill is the workers' blocks over their cgroup's limit: the
// model applies the order it measures to sim.FillOrderShare of a step's
// workloads, as at the density step it was read from (nine workers of
// 256 MiB and their runtime on a 2 GiB node).
const releaseOverfill = 1 / (1 - sim.FillOrderShare)

// releaseRunsPerRound is the release runs a round of the machine's
// figures: their variance is pooled.
const releaseRunsPerRound = 2

// releaseMinPagesOut is the least mean a worker had out that gives a
// figure.
const releaseMinPagesOut = 256

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

// MeasureRelease fills workers `headroom load` blocks together past their
// cgroup's limit, waits until all are full, and reads what each had out.
// With no swap active it pages to a swap file where density puts one.
func MeasureRelease(ctx context.Context, headroom string, scan memload.Scan, workers int) (s fit.ReleaseSample, err error) {
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
	limitBytes := uint64(float64(workers)*float64(blockBytes)/releaseOverfill) / sim.PageBytes * sim.PageBytes
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
		s.PagesOut = append(s.PagesOut, float64(u.SwapBytes/sim.PageBytes))
		s.PagesInRAM = append(s.PagesInRAM, float64(u.UsageBytes/sim.PageBytes))
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
