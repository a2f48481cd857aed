package density

import (
	"fmt"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
)

// summarize fills a step from the controller's results, the workers' exits
// and cgroups, and the node counters around the measured phase.
func (h *Harness) summarize(step *results.Step, res []loadctl.Result, workers []*worker, last map[string]results.WorkerSample, before, after nodeCounters) {
	byName := map[string]loadctl.Result{}
	for _, r := range res {
		byName[r.Worker] = r
	}
	// Give workers that failed a moment to exit so their exit status tells
	// an OOM kill from other failures.
	for _, w := range workers {
		if r := byName[w.Name()]; r.Failed() {
			select {
			case <-w.Exited():
			case <-time.After(2 * time.Second):
			}
		}
	}
	step.StartSkewSeconds = loadctl.StartSkew(res).Seconds()
	var first time.Time
	for _, r := range res {
		if !r.StartedAt.IsZero() && (first.IsZero() || r.StartedAt.Before(first)) {
			first = r.StartedAt
		}
	}
	var firstCreated time.Time
	for _, w := range workers {
		if firstCreated.IsZero() || w.created.Before(firstCreated) {
			firstCreated = w.created
		}
	}
	var create []float64
	for _, w := range workers {
		r, ok := byName[w.Name()]
		wr := results.WorkerResult{Name: w.Name(), CreateOffsetSeconds: w.created.Sub(firstCreated).Seconds()}
		if ok && !r.ReadyAt.IsZero() {
			wr.CreateToReadySeconds = r.ReadyAt.Sub(w.created).Seconds()
			create = append(create, wr.CreateToReadySeconds)
		}
		if r.Populate != nil {
			wr.PopulateSeconds = r.Populate.Seconds
		}
		if !r.StartedAt.IsZero() {
			wr.StartOffsetSeconds = r.StartedAt.Sub(first).Seconds()
		}
		wr.OOMKilled = w.OOMKilled()
		if r.Clock != nil {
			wr.ClockOffsetSeconds = -float64(r.Clock.OffsetNanos) / 1e9
		}
		if wr.VM = w.VM(); wr.VM != nil {
			if s, ok := last[w.Name()]; ok {
				wr.VM.Host = &s
			}
		}
		switch {
		case !ok:
			wr.Error = "never connected to the controller: " + w.Failure()
		case r.Summary != nil:
			wr.PagesPerSec, wr.MajorFaultsPerSec = r.Summary.PagesPerSec, r.Summary.MajorFaultsPerSec
			if reason := r.Summary.StopReason; reason != memload.StopDuration {
				wr.Evicted = strings.Contains(reason, "terminated")
				wr.Error = "stopped early: " + reason
			}
		default:
			wr.Error = r.Err
			select {
			case <-w.Exited():
				if why := w.Failure(); why != "" {
					wr.Error += " (" + why + ")"
				}
			default:
			}
		}
		if wr.OOMKilled {
			wr.Error = "OOM-killed"
		} else if wr.Evicted {
			wr.Error = "evicted (" + wr.Error + ")"
		}
		if wr.Error != "" {
			step.Failed = true
			if step.FailReason == "" {
				step.FailReason = fmt.Sprintf("worker %s %s", w.Name(), wr.Error)
			}
		}
		if wr.OOMKilled {
			step.OOMKills++
		}
		if wr.Evicted {
			step.Evictions++
		}
		step.AggregatePagesPerSec += wr.PagesPerSec
		step.PerWorker = append(step.PerWorker, wr)
	}
	step.CreateP50Seconds = results.Quantile(create, 0.50)
	step.CreateP95Seconds = results.Quantile(create, 0.95)
	step.CreateP99Seconds = results.Quantile(create, 0.99)
	step.CreatePhases = phaseQuantiles(step.PerWorker)
	step.CreationRatePerMinute = creationRate(workers, byName)
	r := ratesBetween(before, after)
	step.SwapInPagesPerSec, step.SwapOutPagesPerSec, step.MajorFaultsPerSec = r.swapInPerSec, r.swapOutPerSec, r.majorFaultsPerSec
	step.PSISomePercent, step.PSIFullPercent = r.psiSomePercent, r.psiFullPercent
	step.CPUBusyCores = r.cpuBusyCores
	step.SwapUsedBytes = r.swapUsedBytes
	step.NodeCountersProblem = r.problem
}

// phaseQuantiles summarises the VMs' start-up phases; ready (the
// workload populated) comes last.
func phaseQuantiles(ws []results.WorkerResult) []results.PhaseQuantiles {
	var out []results.PhaseQuantiles
	for _, phase := range []string{results.PhaseDefined, results.PhaseQEMUStarted, results.PhaseQMPReady, results.PhaseBooted, results.PhaseCommandStarted, results.PhaseReady} {
		var xs []float64
		for _, w := range ws {
			if phase == results.PhaseReady {
				if w.VM != nil && w.CreateToReadySeconds > 0 {
					xs = append(xs, w.CreateToReadySeconds)
				}
			} else if w.VM != nil {
				if v, ok := w.VM.Phases[phase]; ok {
					xs = append(xs, v)
				}
			}
		}
		if len(xs) == 0 {
			continue
		}
		out = append(out, results.PhaseQuantiles{Phase: phase, P50Seconds: results.Quantile(xs, 0.5), P95Seconds: results.Quantile(xs, 0.95),
			P99Seconds: results.Quantile(xs, 0.99), MaxSeconds: results.Quantile(xs, 1)})
	}
	return out
}

// creationRate is workers ready per minute, from the first creation to
// the last ready.
func creationRate(workers []*worker, byName map[string]loadctl.Result) float64 {
	var first, last time.Time
	ready := 0
	for _, w := range workers {
		if first.IsZero() || w.created.Before(first) {
			first = w.created
		}
		if r := byName[w.Name()]; !r.ReadyAt.IsZero() {
			ready++
			if r.ReadyAt.After(last) {
				last = r.ReadyAt
			}
		}
	}
	if ready == 0 || !last.After(first) {
		return 0
	}
	return float64(ready) / last.Sub(first).Minutes()
}
