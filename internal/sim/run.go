package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// Params are a simulated ramp's parameters.
type Params struct {
	Node           Node
	VM             VMSpec
	Deployments    []int
	RuntimeSeconds float64
	Seed           uint64
	// TickSeconds is the model's time step (0: DefaultTickSeconds).
	TickSeconds   float64
	StopOnFailure bool
	// Agent runs the agent's own loop on the simulated node (nil: none).
	Agent *AgentParams
	// StepRequestBytes, for a step's VM count it holds, is the request
	// each of the step's VMs has in place of VM.RequestBytes, which still
	// admits (KubeVirtRequests: a ramp searching the overcommit admits
	// every count, each at the request that overcommit gives it).
	StepRequestBytes map[int]uint64
	Label            string
}

// requestBytes is the request each VM of a step of n VMs holds.
func (p Params) requestBytes(n int) uint64 {
	if r, ok := p.StepRequestBytes[n]; ok {
		return r
	}
	return p.VM.RequestBytes
}

// DefaultTickSeconds is the model's default time step.
const DefaultTickSeconds = 0.25

// populateTimeoutSeconds ends a step whose workers never all populate.
const populateTimeoutSeconds = 3600

func workerName(i int) string { return fmt.Sprintf("w%d", i) }

// Run simulates the ramp: each step starts its VMs afresh, lets them
// populate, then measures RuntimeSeconds of simulated time. done is called
// after each step (nil: not at all). It returns the result in the density
// schema (kind "sim") and the agent's decisions.
func Run(ctx context.Context, p Params, done func(results.Step)) (*results.Run, []policy.Decision, error) {
	if err := Validate(p.Node, p.VM); err != nil {
		return nil, nil, err
	}
	dt := p.TickSeconds
	if dt <= 0 {
		dt = DefaultTickSeconds
	}
	run := &results.Run{Kind: "sim", Label: p.Label, StartedAt: time.Now().UTC(),
		Machine: results.Machine{Hostname: "simulated", CPUs: int(p.Node.CPUs), MemTotalBytes: p.Node.RAMBytes},
		Node: results.Node{Scope: "simulated node", MemoryBytes: p.Node.RAMBytes, SwapBytes: p.Node.Swap.SizeBytes,
			SwapReadIOPS: p.Node.Swap.ReadIOPS, RequestBytes: p.VM.RequestBytes}, StopReason: "completed"}
	if p.Node.Tier != nil {
		run.Node.SwapTier = fmt.Sprintf("compressed %s at %g:1", units.FormatBytes(p.Node.Tier.SizeBytes), p.Node.Tier.Ratio)
		if p.Node.Tier.isZswap() {
			run.Node.SwapTier = fmt.Sprintf("zswap, a pool of %s (%s of pages at %g:1)", units.FormatBytes(p.Node.Tier.PoolBytes), units.FormatBytes(p.Node.Tier.SizeBytes), p.Node.Tier.Ratio)
		}
		if p.Node.Tier.PoolOnHost {
			run.Node.SwapTier += ", its pool outside the node's RAM"
		}
	}
	var decisions []policy.Decision
	allocatable := p.Node.RAMBytes - p.Node.SystemReserveBytes
	// Simulated time runs from the run's start, step after step, so a
	// report draws the agent's decisions on one axis.
	clock := run.StartedAt
	for i, n := range p.Deployments {
		if err := ctx.Err(); err != nil {
			run.StopReason, run.Interrupted = "interrupted", true
			break
		}
		if refused := results.AdmissionRefused(n, p.VM.RequestBytes, allocatable); refused != "" {
			run.StopReason = refused
			break
		}
		step, ds := simulateStep(p, n, i+1, dt, clock)
		clock = clock.Add(time.Duration(step.Seconds * float64(time.Second)))
		decisions = append(decisions, ds...)
		run.Steps = append(run.Steps, step)
		if done != nil {
			done(step)
		}
		if step.Failed && p.StopOnFailure {
			run.StopReason = fmt.Sprintf("step %d (%d workers): %s", step.Index, n, step.FailReason)
			break
		}
	}
	run.FinishedAt = time.Now().UTC()
	return run, decisions, nil
}

// simTime turns a step's simulated seconds into the time the agent's
// policy sees: from the step's start on the run's simulated clock.
func simTime(start time.Time, seconds float64) time.Time {
	return start.Add(time.Duration(seconds * float64(time.Second)))
}

// simulateStep runs one step of n VMs, starting at start on the run's
// simulated clock.
func simulateStep(p Params, n, index int, dt float64, start time.Time) (results.Step, []policy.Decision) {
	s := newNode(p.Node, p.VM, n, dt, p.Seed+uint64(index)*7919)
	a := newSimAgent(p, p.requestBytes(n), start)
	step := results.Step{Index: index, Workers: n, Repeat: 1, Started: start}
	t, measureFrom := 0.0, -1.0
	var before counters
	for {
		if a != nil {
			a.round(s, t)
		}
		s.tick(t, measureFrom >= 0)
		t += dt
		live := 0
		for _, v := range s.vms {
			if v.live() {
				live++
			}
		}
		if live == 0 {
			break
		}
		if measureFrom < 0 {
			ready := true
			for _, v := range s.vms {
				ready = ready && (!v.live() || v.phase == phaseReady)
			}
			if ready {
				// The controller releases every worker at once.
				for _, v := range s.vms {
					if v.live() {
						v.phase = phaseRunning
					}
				}
				measureFrom, before = t, s.counters()
			} else if t > populateTimeoutSeconds {
				step.Failed, step.FailReason = true, fmt.Sprintf("workers did not populate within %d s", populateTimeoutSeconds)
				break
			}
			continue
		}
		if t-measureFrom >= p.RuntimeSeconds {
			break
		}
	}
	step.Seconds = t
	summarizeStep(&step, s, before, t, measureFrom, p.RuntimeSeconds)
	var ds []policy.Decision
	if a != nil {
		ds = a.decisions()
	}
	return step, ds
}

// counters are the node's cumulative counters at one moment.
type counters struct{ swapIns, swapOuts, majorFaults, psiSome, psiFull, cpuBusy float64 }

func (s *node) counters() counters {
	return counters{s.swapIns, s.swapOuts, s.majorFaults, s.psiSome, s.psiFull, s.vmCPUSeconds + s.ksm.cpuSeconds}
}

// summarizeStep fills a step's per-worker and node figures.
func summarizeStep(step *results.Step, s *node, before counters, now, measureFrom, runtime float64) {
	var create []float64
	for _, v := range s.vms {
		w := results.WorkerResult{Name: v.name, CreateOffsetSeconds: v.createdAt}
		if v.readyAt > 0 {
			w.CreateToReadySeconds = v.readyAt - v.createdAt
			w.PopulateSeconds = v.readyAt - v.startAt
			create = append(create, w.CreateToReadySeconds)
		}
		if measureFrom >= 0 {
			w.PagesPerSec = v.touches / runtime
			w.MajorFaultsPerSec = v.faults / runtime
		}
		switch v.gone {
		case "OOM-killed":
			w.OOMKilled, w.Error = true, "OOM-killed"
			step.OOMKills++
		case "evicted":
			w.Evicted, w.Error = true, "evicted (by the agent)"
			step.Evictions++
		}
		if w.Error != "" && !step.Failed {
			step.Failed, step.FailReason = true, fmt.Sprintf("worker %s %s", v.name, w.Error)
		}
		step.AggregatePagesPerSec += w.PagesPerSec
		step.PerWorker = append(step.PerWorker, w)
	}
	step.CreateP50Seconds = results.Quantile(create, 0.5)
	step.CreateP95Seconds = results.Quantile(create, 0.95)
	step.CreateP99Seconds = results.Quantile(create, 0.99)
	var slots float64
	for _, v := range s.vms {
		if v.live() {
			slots += v.swapSlots()
		}
	}
	step.SwapUsedBytes = uint64(slots * PageBytes)
	if measureFrom >= 0 && now > measureFrom {
		secs := now - measureFrom
		after := s.counters()
		step.SwapInPagesPerSec = (after.swapIns - before.swapIns) / secs
		step.SwapOutPagesPerSec = (after.swapOuts - before.swapOuts) / secs
		step.MajorFaultsPerSec = (after.majorFaults - before.majorFaults) / secs
		step.PSISomePercent = 100 * (after.psiSome - before.psiSome) / secs
		step.PSIFullPercent = 100 * (after.psiFull - before.psiFull) / secs
		step.CPUBusyCores = (after.cpuBusy - before.cpuBusy) / secs
	}
}
