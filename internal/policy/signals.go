package policy

import (
	"math"
	"sort"
)

// Signal names.
const (
	SignalSwapUtilization = "swap_utilization"
	SignalSwapIn          = "swap_in_rate"
	SignalSwapOut         = "swap_out_rate"
	SignalPSIFull         = "psi_memory_full"
	SignalPSISome         = "psi_memory_some"
	SignalSwapExhaustion  = "swap_exhaustion"
)

// Signal is one evaluated signal. It fires when Value is above Threshold,
// or below it for signals marked Below (time to exhaustion).
type Signal struct {
	Name      string  `json:"name"`            // swap_utilization, swap_in_rate, swap_out_rate, psi_memory_full, psi_memory_some, swap_exhaustion
	Value     float64 `json:"value"`           // the signal's value over the window, in Unit
	Threshold float64 `json:"threshold"`       // the configured threshold, in Unit
	Unit      string  `json:"unit"`            // bytes, pages_per_second, percent or seconds
	Below     bool    `json:"below,omitempty"` // the signal fires below its threshold (swap_exhaustion), not above
	Firing    bool    `json:"firing"`          // past its threshold
	// FitsInRAM marks a stall or paging rate past its threshold that does
	// not fire: the scope's working set and swap together fit in its RAM.
	FitsInRAM bool `json:"fits_in_ram,omitempty"`
}

// minRateSpanSeconds is the shortest stretch of samples a rate or trend is
// computed over; less is noise.
const minRateSpanSeconds = 1.0

// rateSpanSeconds is the shortest stretch a rate is computed over with
// this window: minRateSpanSeconds, or half the window when that is
// shorter. The window's samples never span all of it (the first is at
// most one interval younger than its start), so a 1 s window and a 1 s
// span would never give a rate.
func rateSpanSeconds(cfg Config) float64 {
	return min(minRateSpanSeconds, cfg.AverageWindowSizeSeconds/2)
}

// Evaluate computes every enabled signal over the window (oldest sample
// first). Signals whose data was unreadable in the window are left out and
// named in unreadable.
func Evaluate(window []Sample, cfg Config) (signals []Signal, unreadable []string) {
	if len(window) == 0 {
		return nil, nil
	}
	first, last := window[0], window[len(window)-1]
	span := last.Time.Sub(first.Time).Seconds()
	minSpan := rateSpanSeconds(cfg)

	if last.ScopeErr != "" {
		unreadable = append(unreadable, SignalSwapUtilization)
	} else {
		used := float64(last.Scope.UsedBytes())
		signals = append(signals, above(SignalSwapUtilization, used, swapUtilizationThreshold(last.Scope, cfg), "bytes"))
	}

	// Windowed averages of cumulative counters: the counter's increase over
	// the window, per second, times scale.
	vmstatErr := func(s Sample) string { return s.VMStatErr }
	psiErr := func(s Sample) string { return s.PSIErr }
	averages := []struct {
		name      string
		threshold float64
		unit      string
		scale     float64
		counter   func(Sample) uint64
		err       func(Sample) string
	}{
		{SignalSwapIn, cfg.MaxAverageSwapInPagesPerSecond, "pages/s", 1, func(s Sample) uint64 { return s.PswpIn }, vmstatErr},
		{SignalSwapOut, cfg.MaxAverageSwapOutPagesPerSecond, "pages/s", 1, func(s Sample) uint64 { return s.PswpOut }, vmstatErr},
		// Stall microseconds per second of window, as a percentage.
		{SignalPSIFull, cfg.PSIFullPercent, "percent", 1e-4, func(s Sample) uint64 { return s.PSIFullMicros }, psiErr},
		{SignalPSISome, cfg.PSISomePercent, "percent", 1e-4, func(s Sample) uint64 { return s.PSISomeMicros }, psiErr},
	}
	// A stall or a paging rate while the scope's memory fits in its RAM is
	// pages coming back after pressure has passed (an eviction, a finished
	// burst), not overcommit: evicting another workload would free nothing
	// the rest need, so those signals do not fire then. Unreadable usage
	// leaves them armed.
	fits := last.ScopeErr == "" && last.Scope.UsedBytes() <= last.Scope.RAMBytes
	for _, a := range averages {
		if a.threshold == 0 {
			continue
		}
		if anyErr(window, a.err) {
			unreadable = append(unreadable, a.name)
			continue
		}
		if span >= minSpan {
			perSec := delta(a.counter(first), a.counter(last)) / span
			sig := above(a.name, a.scale*perSec, a.threshold, a.unit)
			if sig.Firing && fits {
				sig.Firing, sig.FitsInRAM = false, true
			}
			signals = append(signals, sig)
		}
	}

	if cfg.ExhaustionHorizonSeconds > 0 {
		if anyErr(window, func(s Sample) string { return s.ScopeErr }) {
			unreadable = append(unreadable, SignalSwapExhaustion)
		} else if span >= minSpan {
			if secs, ok := secondsToExhaustion(window); ok {
				signals = append(signals, Signal{Name: SignalSwapExhaustion, Value: secs, Threshold: cfg.ExhaustionHorizonSeconds,
					Unit: "seconds", Below: true, Firing: secs < cfg.ExhaustionHorizonSeconds})
			}
		}
	}
	sort.SliceStable(signals, func(i, j int) bool { return signals[i].Firing && !signals[j].Firing })
	return signals, unreadable
}

// swapUtilizationThreshold is the working set + swap used above which
// swap_utilization fires: RAM + factor × swap.
func swapUtilizationThreshold(s Scope, cfg Config) float64 {
	return float64(s.RAMBytes) + cfg.SwapUtilizationThresholdFactor*float64(s.SwapBytes)
}

func above(name string, value, threshold float64, unit string) Signal {
	return Signal{Name: name, Value: value, Threshold: threshold, Unit: unit, Firing: value > threshold}
}

func firstFiring(signals []Signal) *Signal {
	for i := range signals {
		if signals[i].Firing {
			return &signals[i]
		}
	}
	return nil
}

func anyErr(window []Sample, err func(Sample) string) bool {
	for _, s := range window {
		if err(s) != "" {
			return true
		}
	}
	return false
}

// delta is the increase of a cumulative counter; a counter that went back
// (reset) counts as no increase rather than a huge one.
func delta(from, to uint64) float64 {
	if to < from {
		return 0
	}
	return float64(to - from)
}

// secondsToExhaustion fits a least-squares line to working set + swap used
// over the window and returns when it reaches RAM + swap; ok is false when
// usage is not growing.
func secondsToExhaustion(window []Sample) (float64, bool) {
	t0 := window[0].Time
	var n, sx, sy, sxx, sxy float64
	for _, s := range window {
		x := s.Time.Sub(t0).Seconds()
		y := float64(s.Scope.UsedBytes())
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, false
	}
	slope := (n*sxy - sx*sy) / den
	if slope <= 0 || math.IsNaN(slope) {
		return 0, false
	}
	last := window[len(window)-1]
	room := float64(last.Scope.RAMBytes+last.Scope.SwapBytes) - float64(last.Scope.UsedBytes())
	return max(room, 0) / slope, true
}
