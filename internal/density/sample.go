package density

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/results"
)

// nodeCounters are the cumulative counters step rates are computed from;
// vmstatErr and psiErr say why a read failed (its counters are zero).
type nodeCounters struct {
	at                        time.Time
	pswpin, pswpout, pgmajflt uint64
	psi                       host.PSI
	cpuBusySeconds            float64
	// swapUsedBytes is the machine's swap in use (SwapTotal - SwapFree,
	// the slots swapped-in pages keep included).
	swapUsedBytes                     uint64
	vmstatErr, psiErr, cpuErr, memErr error
}

func (h *Harness) readCounters() nodeCounters {
	c := nodeCounters{at: time.Now()}
	var v host.VMStat
	if v, c.vmstatErr = host.ReadVMStat(); c.vmstatErr == nil {
		c.pswpin, c.pswpout, c.pgmajflt = v.PswpIn, v.PswpOut, v.PgMajFault
	}
	c.psi, c.psiErr = h.readPSI()
	c.cpuBusySeconds, c.cpuErr = host.BusyCPUSeconds()
	var mem host.Memory
	if mem, c.memErr = host.ReadMemory(); c.memErr == nil {
		c.swapUsedBytes = mem.SwapTotalBytes - min(mem.SwapFreeBytes, mem.SwapTotalBytes)
	}
	return c
}

// nodeRates are a step's node rates between two reads of the counters.
type nodeRates struct {
	swapInPerSec, swapOutPerSec, majorFaultsPerSec float64
	psiSomePercent, psiFullPercent                 float64
	cpuBusyCores                                   float64
	// swapUsedBytes is the swap in use at the second read.
	swapUsedBytes uint64
	// problem says which rates are unknown and why ("": none).
	problem string
}

// ratesBetween computes the node rates; a rate is left at zero and named
// in problem when a read failed or its counter went backwards (a wrap or
// reset), instead of recording an absurd difference.
func ratesBetween(before, after nodeCounters) nodeRates {
	var r nodeRates
	secs := after.at.Sub(before.at).Seconds()
	var problems []string
	if secs <= 0 {
		return nodeRates{problem: "no time between the counter reads"}
	}
	rate := func(name string, b, a uint64) float64 {
		if a < b {
			problems = append(problems, name+" went backwards")
			return 0
		}
		return float64(a-b) / secs
	}
	if err := errors.Join(before.vmstatErr, after.vmstatErr); err != nil {
		problems = append(problems, "vmstat unreadable: "+err.Error())
	} else {
		r.swapInPerSec = rate("pswpin", before.pswpin, after.pswpin)
		r.swapOutPerSec = rate("pswpout", before.pswpout, after.pswpout)
		r.majorFaultsPerSec = rate("pgmajfault", before.pgmajflt, after.pgmajflt)
	}
	if err := errors.Join(before.psiErr, after.psiErr); err != nil {
		problems = append(problems, "memory pressure unreadable: "+err.Error())
	} else {
		r.psiSomePercent = rate("PSI some", before.psi.SomeMicros, after.psi.SomeMicros) / 1e4
		r.psiFullPercent = rate("PSI full", before.psi.FullMicros, after.psi.FullMicros) / 1e4
	}
	if err := errors.Join(before.cpuErr, after.cpuErr); err != nil {
		problems = append(problems, "CPU time unreadable: "+err.Error())
	} else if after.cpuBusySeconds < before.cpuBusySeconds {
		problems = append(problems, "CPU busy time went backwards")
	} else {
		r.cpuBusyCores = (after.cpuBusySeconds - before.cpuBusySeconds) / secs
	}
	if after.memErr != nil {
		problems = append(problems, "swap in use unreadable: "+after.memErr.Error())
	} else {
		r.swapUsedBytes = after.swapUsedBytes
	}
	r.problem = strings.Join(problems, "; ")
	return r
}

func (h *Harness) readPSI() (host.PSI, error) {
	if f := h.backend.Scope().PressureFile(); f != "" {
		if p, err := host.ReadPSIFile(f); err == nil {
			return p, nil
		}
	}
	return host.ReadMemoryPSI()
}

// sampleNode appends a node sample to the timeline once a second.
func (h *Harness) sampleNode(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				c := h.readCounters()
				s := results.Sample{Time: now.UTC(), Step: int(h.step.Load()), PswpIn: c.pswpin, PswpOut: c.pswpout,
					PgMajFault: c.pgmajflt, PSISomeMicros: c.psi.SomeMicros, PSIFullMicros: c.psi.FullMicros, CPUBusySeconds: c.cpuBusySeconds}
				if m, err := host.ReadMemory(); err == nil {
					s.MemAvailableBytes = m.AvailableBytes
				}
				if u, err := h.backend.Scope().Usage(); err == nil {
					s.ScopeUsageBytes, s.ScopeSwapBytes = u.UsageBytes, u.SwapBytes
				}
				s.Workers = h.sampleWorkers()
				h.timeline.Write(s)
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// sampleWorkers reads every current worker; during the measured phase the
// samples are kept for the step's results.
func (h *Harness) sampleWorkers() []results.WorkerSample {
	h.mu.Lock()
	ws := append([]*worker(nil), h.current...)
	h.mu.Unlock()
	var out []results.WorkerSample
	for _, w := range ws {
		if s, ok := w.Sample(); ok {
			out = append(out, s)
		}
	}
	h.mu.Lock()
	if h.measuring {
		for _, s := range out {
			h.lastSample[s.Name] = s
		}
	}
	h.mu.Unlock()
	return out
}

// setWorkers tells the sampler which workers exist and whether the
// measured phase runs.
func (h *Harness) setWorkers(ws []*worker, measuring bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.current, h.measuring = ws, measuring
	if measuring {
		h.lastSample = map[string]results.WorkerSample{}
	}
}
