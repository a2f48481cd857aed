package policy

import (
	"fmt"
	"testing"
)

// BenchmarkDecideWith200Workloads is one round of the policy in the
// agent's steady state on a node of 200 workloads in RAM: every allowance
// applied, nothing firing, a full window (0.25 s rounds over the default
// 10 s): what the agent's decide step costs a round.
func BenchmarkDecideWith200Workloads(b *testing.B) {
	const workloads, intervalSeconds = 200, 0.25
	cfg := DefaultConfig()
	ws := make([]Workload, workloads)
	for i := range ws {
		ws[i] = made(wl(fmt.Sprintf("vm-%d", i), i%7, 0.01, 0.005, 0), uint64(i+1))
	}
	round := func(i int, st State, results []SwapResult) ([]Decision, State) {
		s := sample(float64(i)*intervalSeconds, 2, 0)
		s.PswpIn, s.PswpOut, s.PSISomeMicros = uint64(i), uint64(i), uint64(i)
		return Decide(Snapshot{Sample: s, Workloads: ws, SwapResults: results}, cfg, st)
	}
	// Settle: allowances decided and confirmed, the window filled.
	var st State
	var ds []Decision
	rounds := int(cfg.AverageWindowSizeSeconds/intervalSeconds) + 1
	for i := range rounds {
		var results []SwapResult
		for _, d := range ds {
			if d.Action == ActionSetSwap {
				results = append(results, SwapResult{Workload: d.Workload, SwapBytes: d.Swap.SwapBytes})
			}
		}
		ds, st = round(i, st, results)
	}
	if len(st.SwapAllowance) != workloads || len(st.Window) < rounds-1 {
		b.Fatalf("not settled: %d allowances, %d samples in the window", len(st.SwapAllowance), len(st.Window))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ds, st = round(rounds+i, st, nil)
		if len(ds) != 0 {
			b.Fatalf("round %d decided %v in a steady state", i, ds)
		}
	}
}
