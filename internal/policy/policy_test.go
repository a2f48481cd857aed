package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const gi = 1 << 30

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// sample builds a sample at sec with the scope using ws + swap GiB of a
// 4 GiB RAM + 4 GiB swap node.
func sample(sec, wsGiB, swapGiB float64) Sample {
	return Sample{Time: at(sec), Scope: Scope{RAMBytes: 4 * gi, SwapBytes: 4 * gi,
		WorkingSetBytes: uint64(wsGiB * gi), SwapUsedBytes: uint64(swapGiB * gi)}}
}

// withCompressedRAM adds RAM that zram or zswap holds for the scope.
func withCompressedRAM(s Sample, gib float64) Sample {
	s.Scope.CompressedRAMBytes = uint64(gib * gi)
	return s
}

func wl(name string, prio int, reqGiB, wsGiB, swapGiB float64) Workload {
	return Workload{Name: name, Priority: prio, RequestBytes: uint64(reqGiB * gi), Processes: 1,
		WorkingSetBytes: uint64(wsGiB * gi), SwapBytes: uint64(swapGiB * gi)}
}

func withLimit(w Workload, limitGiB float64) Workload {
	w.LimitBytes = uint64(limitGiB * gi)
	return w
}

func evictions(ds []Decision) []Decision {
	var out []Decision
	for _, d := range ds {
		if d.Action == ActionEvict {
			out = append(out, d)
		}
	}
	return out
}

func TestSwapAllowance(t *testing.T) {
	scope := Scope{RAMBytes: 4 * gi, SwapBytes: 8 * gi}
	tests := []struct {
		w    Workload
		want uint64
	}{
		{Workload{RequestBytes: 1 * gi}, 2 * gi},
		{Workload{RequestBytes: 2 * gi}, 4 * gi},
		{Workload{RequestBytes: 0}, 0},
		{Workload{RequestBytes: 1 * gi, Protected: true}, 0},
		{Workload{RequestBytes: 16 * gi}, 8 * gi}, // capped at the scope's swap
		{Workload{RequestBytes: 1 * gi, SwapRule: SwapNone}, 0},
		// The kubelet's own LimitedSwap is taken as it is, even above the formula.
		{Workload{RequestBytes: 1 * gi, SwapRule: SwapExternal, ExternalSwapBytes: 3 * gi}, 3 * gi},
	}
	for _, tt := range tests {
		if got := SwapAllowance(tt.w, scope); got != tt.want {
			t.Errorf("SwapAllowance(%+v) = %d, want %d", tt.w, got, tt.want)
		}
	}
	if got := SwapAllowance(Workload{RequestBytes: gi}, Scope{}); got != 0 {
		t.Errorf("allowance with zero scope RAM = %d", got)
	}
}

// A limit someone else set (the kubelet's LimitedSwap) is in force at once
// and never written.
func TestDecideTakesExternalSwapLimits(t *testing.T) {
	w := wl("pod", 0, 1, 0.5, 0)
	w.SwapRule, w.ExternalSwapBytes = SwapExternal, gi/2
	ds, st := Decide(Snapshot{Sample: sample(0, 1, 0), Workloads: []Workload{w}}, DefaultConfig(), State{})
	if len(ds) != 0 {
		t.Fatalf("decided %+v for an external limit", ds)
	}
	if st.SwapAllowance["pod"] != gi/2 {
		t.Fatalf("allowance in force %v, want the external %d", st.SwapAllowance, gi/2)
	}
}

func TestDecideAppliesAllowancesOnceAndOnChange(t *testing.T) {
	cfg := DefaultConfig()
	snap := Snapshot{Sample: sample(0, 1, 0), Workloads: []Workload{wl("a", 0, 1, 0.5, 0), wl("b", 0, 0, 0.1, 0)}}
	ds, st := Decide(snap, cfg, State{})
	if len(ds) != 2 || ds[0].Action != ActionSetSwap || ds[0].Swap.SwapBytes != 1*gi || ds[1].Swap.SwapBytes != 0 {
		t.Fatalf("first decisions %+v", ds)
	}
	snap.Sample = sample(1, 1, 0)
	if ds, st = Decide(snap, cfg, st); len(ds) != 0 {
		t.Fatalf("allowances re-applied without a change: %+v", ds)
	}
	// Swap devices grow: allowances follow.
	snap.Sample = sample(2, 1, 0)
	snap.Sample.Scope.SwapBytes = 8 * gi
	if ds, _ = Decide(snap, cfg, st); len(ds) != 1 || ds[0].Workload != "a" || ds[0].Swap.SwapBytes != 2*gi {
		t.Fatalf("after swap grew: %+v", ds)
	}
}

// A workload whose swap cannot be capped (cgroup v1 without a memory
// limit) gets no set_swap and no allowance in force, so the scope's whole
// swap stays usable; the ranking measures its swap against the allowance
// it would have; once it can be capped, its allowance is written.
func TestSwapUncappedIsCountedNotWritten(t *testing.T) {
	cfg := DefaultConfig()
	a := wl("a", 9, 1, 0.5, 0.5) // would get 1 GiB of 4 GiB RAM × 4 GiB swap
	a.SwapUncapped = true
	snap := Snapshot{Sample: sample(0, 1, 0.5), Workloads: []Workload{a}}
	ds, st := Decide(snap, cfg, State{})
	if len(ds) != 0 {
		t.Fatalf("decided %+v for a workload whose swap cannot be capped", ds)
	}
	if _, ok := st.SwapAllowance["a"]; ok || usableSwap(snap, st) != 4*gi {
		t.Fatalf("in force %v, usable swap %d B: want none in force and all 4 GiB usable", st.SwapAllowance, usableSwap(snap, st))
	}
	// Beside a capped workload of lower priority within its allowance, its
	// swap over what it would be allowed ranks it first.
	a.SwapBytes = 2 * gi
	b := wl("b", 1, 1, 1, 0.25)
	snap.Workloads = []Workload{a, b}
	allow := rankAllowances(snap, State{SwapAllowance: map[string]uint64{"b": gi}})
	if allow["a"] != gi || allow["b"] != gi {
		t.Fatalf("ranking allowances %v, want a's would-be 1 GiB and b's 1 GiB in force", allow)
	}
	if got := Rank(snap.Workloads, allow); got[0].Name != "a" {
		t.Fatalf("ranked %s first, want a (2 GiB of swap over its 1 GiB)", got[0].Name)
	}
	// A memory limit is set: the allowance is written.
	a.SwapUncapped = false
	snap = Snapshot{Sample: sample(1, 1, 0.5), Workloads: []Workload{a}}
	if ds, _ = Decide(snap, cfg, st); len(ds) != 1 || ds[0].Action != ActionSetSwap || ds[0].Swap.SwapBytes != gi {
		t.Fatalf("after a limit was set: %+v, want set_swap of 1 GiB", ds)
	}
}

// An allowance is in force only once the kernel took it; a refused one is
// tried again after a wait counted from the refused attempt, doubling with
// each refusal, not every round.
func TestSwapAllowanceFollowsResults(t *testing.T) {
	cfg := DefaultConfig()
	snap := Snapshot{Sample: sample(0, 1, 0), Workloads: []Workload{wl("a", 0, 1, 0.5, 0)}}
	ds, st := Decide(snap, cfg, State{})
	if len(ds) != 1 || len(st.SwapAllowance) != 0 {
		t.Fatalf("decided %+v; in force %v before any result", ds, st.SwapAllowance)
	}
	step := func(sec float64, results []SwapResult) []Decision {
		snap.Sample, snap.SwapResults = sample(sec, 1, 0), results
		ds, st = Decide(snap, cfg, st)
		return ds
	}
	refused := func(triedSec float64, err string) []SwapResult {
		return []SwapResult{{Workload: "a", SwapBytes: gi, Err: err, TriedAt: at(triedSec)}}
	}
	// Tried at 0, refused (learned at 0.1): next try at 0 + the first wait.
	if ds := step(0.1, refused(0, "write memsw.limit_in_bytes: device or resource busy")); len(ds) != 0 || len(st.SwapAllowance) != 0 {
		t.Fatalf("after a refusal: decided %+v, in force %v", ds, st.SwapAllowance)
	}
	if ds := step(0.9*swapRetrySeconds, nil); len(ds) != 0 {
		t.Fatalf("retried within %g s: %+v", swapRetrySeconds, ds)
	}
	if ds := step(1.1*swapRetrySeconds, nil); len(ds) != 1 || ds[0].Swap.SwapBytes != gi {
		t.Fatalf("no retry after %g s: %+v", swapRetrySeconds, ds)
	}
	// Refused again: the wait doubles, from the second attempt.
	second := 1.1 * swapRetrySeconds
	if ds := step(second+0.01, refused(second, "no memory limit")); len(ds) != 0 {
		t.Fatalf("decided with the refusal: %+v", ds)
	}
	if ds := step(second+1.9*swapRetrySeconds, nil); len(ds) != 0 {
		t.Fatalf("retried before twice the first wait: %+v", ds)
	}
	if ds := step(second+2.1*swapRetrySeconds, nil); len(ds) != 1 {
		t.Fatalf("no retry after twice the first wait: %+v", ds)
	}
	// A refusal learned after its wait has passed is retried in that round
	// (a 0.5 s round learning of a 0.25 s wait).
	third := second + 2.1*swapRetrySeconds
	if ds := step(third+5*swapRetrySeconds, refused(third, "no memory limit")); len(ds) != 1 {
		t.Fatalf("not retried in the round that learned of a refusal past its wait: %+v", ds)
	}
	if step(third+5.1*swapRetrySeconds, []SwapResult{{Workload: "a", SwapBytes: gi}}); st.SwapAllowance["a"] != gi {
		t.Fatalf("applied allowance not in force: %v", st.SwapAllowance)
	}
}

func TestRank(t *testing.T) {
	tests := []struct {
		name      string
		workloads []Workload
		allowance map[string]uint64
		want      []string
		why       string
	}{
		{"priority decides among equals over request",
			[]Workload{wl("hi", 10, 1, 2, 0), wl("lo", 1, 1, 2, 0), wl("mid", 5, 1, 2, 0)}, nil,
			[]string{"lo", "mid", "hi"}, "lower priority"},
		{"over request beats priority",
			[]Workload{wl("low-within", 1, 4, 1, 0), wl("high-over", 10, 1, 2, 0)}, nil,
			[]string{"high-over", "low-within"}, "exceeds its memory request"},
		{"swap counts toward usage",
			[]Workload{wl("swapper", 5, 1, 0.5, 1), wl("resident", 5, 1, 0.9, 0)}, map[string]uint64{"swapper": 2 * gi},
			[]string{"swapper", "resident"}, "exceeds its memory request"},
		{"without a memory limit, swap over the allowance is over the limit",
			[]Workload{wl("a", 1, 1, 3, 0), wl("b", 9, 1, 1, 0.5)}, map[string]uint64{"b": gi / 4},
			[]string{"b", "a"}, "over its limit plus swap allowance"},
		{"with a memory limit only the sum counts (cgroup v1 memsw)",
			[]Workload{withLimit(wl("a", 1, 1, 1.5, 0), 2), withLimit(wl("b", 9, 1, 1, 0.5), 2)}, map[string]uint64{"a": gi / 4, "b": gi / 4},
			[]string{"a", "b"}, "lower priority"},
		{"over memory limit plus allowance first",
			[]Workload{withLimit(wl("a", 1, 1, 1.5, 0), 2), withLimit(wl("b", 9, 1, 2, 0.5), 2)}, map[string]uint64{"a": gi / 4, "b": gi / 4},
			[]string{"b", "a"}, "over its limit plus swap allowance"},
		{"larger excess first at equal priority",
			[]Workload{wl("small", 1, 1, 1.5, 0), wl("big", 1, 1, 3, 0)}, nil,
			[]string{"big", "small"}, "more memory above its request"},
		{"protected, empty and unreadable are never candidates",
			[]Workload{
				{Name: "prot", Protected: true, Processes: 1, WorkingSetBytes: 9 * gi},
				{Name: "empty", Processes: 0, WorkingSetBytes: 9 * gi},
				{Name: "unreadable", Processes: 1, Err: "read memory.stat: no such file"},
				wl("ok", 100, 8, 1, 0),
			}, nil, []string{"ok"}, "the only candidate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Rank(tt.workloads, tt.allowance)
			var names []string
			for _, w := range got {
				names = append(names, w.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("Rank = %v, want %v", names, tt.want)
			}
			if why := rankReason(got, tt.allowance); !strings.Contains(why, tt.why) {
				t.Fatalf("reason %q does not say %q", why, tt.why)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	cfg := Config{SwapUtilizationThresholdFactor: 0.5, AverageWindowSizeSeconds: 10,
		MaxAverageSwapInPagesPerSecond: 1000, MaxAverageSwapOutPagesPerSecond: 2000,
		PSIFullPercent: 20, PSISomePercent: 50, ExhaustionHorizonSeconds: 30}
	withCounters := func(s Sample, in, out, some, full uint64) Sample {
		s.PswpIn, s.PswpOut, s.PSISomeMicros, s.PSIFullMicros = in, out, some, full
		return s
	}
	tests := []struct {
		name          string
		window        []Sample
		firing        []string
		unread        []string
		windowSeconds float64 // 0: cfg's
	}{
		{"calm", []Sample{withCounters(sample(0, 1, 0), 100, 100, 0, 0), withCounters(sample(10, 1, 0), 200, 200, 1e5, 0)}, nil, nil, 0},
		{"utilization over RAM + factor × swap", []Sample{sample(0, 4, 2.1)}, []string{SignalSwapUtilization}, nil, 0},
		{"utilization at the threshold does not fire", []Sample{sample(0, 4, 2)}, nil, nil, 0},
		{"compressed tiers' RAM counts in utilization", []Sample{withCompressedRAM(sample(0, 4, 2), 0.1)}, []string{SignalSwapUtilization}, nil, 0},
		{"swap-in average over threshold", []Sample{withCounters(sample(0, 4, 1), 0, 0, 0, 0), withCounters(sample(10, 4, 1), 10010, 0, 0, 0)}, []string{SignalSwapIn}, nil, 0},
		{"swap-out average is a difference, not the total", []Sample{withCounters(sample(0, 1, 0), 0, 1e9, 0, 0), withCounters(sample(10, 1, 0), 0, 1e9+100, 0, 0)}, nil, nil, 0},
		{"counter reset is no increase", []Sample{withCounters(sample(0, 1, 0), 1e9, 0, 0, 0), withCounters(sample(10, 1, 0), 5, 0, 0, 0)}, nil, nil, 0},
		{"PSI full share of the window", []Sample{withCounters(sample(0, 4, 1), 0, 0, 0, 0), withCounters(sample(10, 4, 1), 0, 0, 3e6, 2.5e6)}, []string{SignalPSIFull}, nil, 0},
		{"PSI some share of the window", []Sample{withCounters(sample(0, 4, 1), 0, 0, 0, 0), withCounters(sample(10, 4, 1), 0, 0, 6e6, 0)}, []string{SignalPSISome}, nil, 0},
		// Paging or a stall while working set + swap fit in RAM (3.5 of
		// 4 GiB) is pages coming back, not overcommit: nothing fires.
		{"a stall with the scope in RAM does not fire", []Sample{withCounters(sample(0, 3, 0.5), 0, 0, 0, 0), withCounters(sample(10, 3, 0.5), 20000, 0, 6e6, 3e6)}, nil, nil, 0},
		{"nor with the scope exactly at RAM", []Sample{withCounters(sample(0, 3, 1), 0, 0, 0, 0), withCounters(sample(10, 3, 1), 20000, 0, 6e6, 3e6)}, nil, nil, 0},
		{"rates need a second of samples", []Sample{withCounters(sample(0, 1, 0), 0, 0, 0, 0), withCounters(sample(0.5, 1, 0), 1e6, 1e6, 1e6, 1e6)}, nil, nil, 0},
		// The samples of a 1 s window span less than 1 s: half of it will do.
		{"a 1 s window gives rates", []Sample{withCounters(sample(0, 4, 1), 0, 0, 0, 0), withCounters(sample(0.95, 4, 1), 0, 0, 0, 1e6)}, []string{SignalPSIFull}, nil, 1},
		{"a 1 s window needs half a second", []Sample{withCounters(sample(0, 1, 0), 0, 0, 0, 0), withCounters(sample(0.45, 1, 0), 0, 0, 0, 1e6)}, nil, nil, 1},
		{"growth reaching RAM + swap within the horizon", []Sample{sample(0, 3, 1), sample(5, 4, 1.5), sample(10, 4, 2)}, []string{SignalSwapExhaustion}, nil, 0},
		{"slow growth is not exhaustion", []Sample{sample(0, 3, 1), sample(10, 3, 1.01)}, nil, nil, 0},
		{"unreadable vmstat leaves rates out", []Sample{{Time: at(0), VMStatErr: "boom"}, withCounters(sample(10, 1, 0), 1e9, 1e9, 0, 0)}, nil, []string{SignalSwapIn, SignalSwapOut}, 0},
		{"unreadable scope", []Sample{sample(0, 1, 0), {Time: at(10), ScopeErr: "gone"}}, nil, []string{SignalSwapUtilization, SignalSwapExhaustion}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.windowSeconds != 0 {
				c.AverageWindowSizeSeconds = tt.windowSeconds
			}
			signals, unread := Evaluate(tt.window, c)
			var firing []string
			for _, s := range signals {
				if s.Firing {
					firing = append(firing, s.Name)
				}
			}
			if strings.Join(firing, ",") != strings.Join(tt.firing, ",") || strings.Join(unread, ",") != strings.Join(tt.unread, ",") {
				t.Fatalf("firing %v unreadable %v; want %v, %v (signals %+v)", firing, unread, tt.firing, tt.unread, signals)
			}
		})
	}
}

func TestDecideEvictsLowestPriorityThenCoolsDown(t *testing.T) {
	cfg := DefaultConfig() // factor 0.8: threshold 4 + 3.2 GiB
	wls := []Workload{wl("gold", 10, 2, 2, 1), wl("bronze", 1, 2, 2, 1.5), wl("silver", 5, 2, 2, 0.5)}
	st := State{}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, st)
	ev := evictions(ds)
	if len(ev) != 1 || ev[0].Workload != "bronze" || ev[0].Trigger.Signal != SignalSwapUtilization || ev[0].Trigger.Threshold != 4*gi+0.8*4*gi {
		t.Fatalf("evictions %+v", ev)
	}
	if !strings.Contains(ev[0].Reason, "lower priority") || len(ev[0].Trigger.Signals) == 0 {
		t.Fatalf("reason %q, signals %v", ev[0].Reason, ev[0].Trigger.Signals)
	}
	// Bronze is still exiting: nobody else is evicted.
	ds, st = Decide(Snapshot{Sample: sample(1, 4, 3.5), Workloads: wls}, cfg, st)
	if len(evictions(ds)) != 0 || len(ds) != 1 || !strings.Contains(ds[0].Reason, "previous victim") {
		t.Fatalf("while the victim exits: %+v", ds)
	}
	// Bronze is gone, pressure remains, but the cool-down has not passed.
	wls[1].Processes = 0
	if ds, st = Decide(Snapshot{Sample: sample(3, 4, 3.4), Workloads: wls}, cfg, st); len(evictions(ds)) != 0 {
		t.Fatalf("evicted within the cool-down: %+v", ds)
	}
	// After the cool-down the re-check evicts the next one.
	ds, st = Decide(Snapshot{Sample: sample(6, 4, 3.4), Workloads: wls}, cfg, st)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "silver" {
		t.Fatalf("after cool-down: %+v", ds)
	}
	// Pressure resolved: nothing.
	wls[2].Processes = 0
	if ds, _ = Decide(Snapshot{Sample: sample(20, 3, 1), Workloads: wls}, cfg, st); len(ds) != 0 {
		t.Fatalf("calm node: %+v", ds)
	}
}

// A victim found gone (no processes; its pod object deleted) holds the
// next eviction back for victimSettleSeconds, also past the cool-down: a
// sample from just after its exit still holds memory the kernel has not
// freed yet (measured under a real apiserver: about 0.1 s for a 650 MiB
// process half in swap).
func TestDecideWaitsForASampleAfterTheVictimLeft(t *testing.T) {
	cfg := DefaultConfig() // cool-down 5 s
	wls := []Workload{wl("gold", 10, 2, 2, 1), wl("bronze", 1, 2, 2, 1.5), wl("silver", 5, 2, 2, 0.5)}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "bronze" {
		t.Fatalf("first eviction: %+v", ds)
	}
	gone := slices.Clone(wls)
	gone[1].Processes = 0
	for _, c := range []struct {
		sec       float64
		workloads []Workload
		want      string
	}{
		{1, wls, ""},           // leaving, within the cool-down
		{6, wls, ""},           // still leaving, past it: waited for
		{6.25, gone, ""},       // found gone: its memory may not be freed yet
		{7, gone, ""},          // 0.75 s after
		{7.25, gone, "silver"}, // 1 s after: still over
	} {
		ds, st = Decide(Snapshot{Sample: sample(c.sec, 4, 3.5), Workloads: c.workloads}, cfg, st)
		got := ""
		if ev := evictions(ds); len(ev) == 1 {
			got = ev[0].Workload
		}
		if got != c.want {
			t.Errorf("%g s: evicted %q, want %q (%+v)", c.sec, got, c.want, ds)
		}
	}
}

// When the scope would reach its OOM point (RAM + swap) before the
// cool-down ends, the next eviction waits only for the victim's eviction
// to be reported ended: a burst fills a node faster than a cool-down
// lasts. The scope is there within 5% of the swap of it, or when its
// growth since then gets it there in time. Short of both, or before the
// victim's memory is known freed, the cool-down holds.
func TestDecideSkipsTheCooldownAtTheOOMPoint(t *testing.T) {
	cfg := DefaultConfig()
	wls := []Workload{wl("gold", 10, 2, 2, 1), wl("bronze", 1, 2, 2, 1.5), wl("silver", 5, 2, 2, 0.5)}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "bronze" || strings.Contains(ev[0].Reason, "cool-down") {
		t.Fatalf("first eviction %+v", ev)
	}
	// Still exiting at the OOM point's margin: wait for it.
	if ds, st = Decide(Snapshot{Sample: sample(0.5, 4, 3.9), Workloads: wls}, cfg, st); len(evictions(ds)) != 0 {
		t.Fatalf("evicted while the victim exits: %+v", ds)
	}
	// The victim has left the listing (a pod leaves the API before its
	// processes exit) and its memory still counts: not gone yet.
	left := []Workload{wls[0], wls[2]}
	ds, leftSt := Decide(Snapshot{Sample: sample(0.8, 4, 3.9), Workloads: left}, cfg, st)
	if len(evictions(ds)) != 0 {
		t.Fatalf("evicted before the victim's eviction was reported ended: %+v", ds)
	}
	// Its eviction reported ended a round later still counts.
	ds, _ = Decide(Snapshot{Sample: sample(0.9, 4, 3.9), Workloads: left, Outcomes: []EvictionOutcome{{Workload: "bronze", Result: EvictedGracefully}}}, cfg, leftSt)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "silver" {
		t.Fatalf("the victim's eviction reported ended after it left the listing, at 3.9 of 4 GiB of swap: %+v", ds)
	}
	wls[1].Processes = 0
	ended := []EvictionOutcome{{Workload: "bronze", Result: EvictedGracefully, Seconds: 1}}
	ds, gone := Decide(Snapshot{Sample: sample(1, 4, 3.7), Workloads: wls, Outcomes: ended}, cfg, st)
	if len(evictions(ds)) != 0 {
		t.Fatalf("evicted within the cool-down at 3.7 of 4 GiB of swap: %+v", ds)
	}
	ds, _ = Decide(Snapshot{Sample: sample(1.5, 4, 3.9), Workloads: wls}, cfg, gone)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "silver" || !strings.Contains(ev[0].Reason, "within 5% of its swap of the OOM point") {
		t.Fatalf("at 3.9 of 4 GiB of swap, the victim gone, inside the cool-down: %+v", ds)
	}
	// Below the margin, growth since the victim left decides: 0.08 GiB/s
	// reaches the OOM point (0.22 GiB away) in 2.75 s, before the
	// cool-down ends 3 s later; 0.04 GiB/s (6.5 s) does not.
	for _, c := range []struct {
		swap  [2]float64
		evict bool
	}{{[2]float64{3.72, 3.74}, false}, {[2]float64{3.74, 3.78}, true}} {
		st := gone
		ds, st = Decide(Snapshot{Sample: sample(1.5, 4, c.swap[0]), Workloads: wls}, cfg, st)
		if len(evictions(ds)) != 0 {
			t.Fatalf("evicted on half a second of growth: %+v", ds)
		}
		ds, _ = Decide(Snapshot{Sample: sample(2, 4, c.swap[1]), Workloads: wls}, cfg, st)
		if ev := evictions(ds); (len(ev) == 1) != c.evict || (c.evict && !strings.Contains(ev[0].Reason, "reaches its OOM point in 2.8 s")) {
			t.Errorf("swap %.2f then %.2f GiB since the victim left: %+v; want an eviction: %v", c.swap[0], c.swap[1], ds, c.evict)
		}
	}
}

// An eviction that does not finish by its deadline is given up on and the
// next candidate is chosen; the stuck workload is never chosen again.
func TestDecideGivesUpOnStuckEvictionAtDeadline(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EvictionDeadlineSeconds = 10
	wls := []Workload{wl("gold", 10, 2, 2, 1), wl("stuck", 1, 2, 2, 1.5), wl("silver", 5, 2, 2, 0.5)}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "stuck" {
		t.Fatalf("first eviction %+v", ds)
	}
	// Before the deadline: still waiting.
	ds, st = Decide(Snapshot{Sample: sample(9.9, 4, 3.5), Workloads: wls}, cfg, st)
	if len(evictions(ds)) != 0 {
		t.Fatalf("evicted another before the deadline: %+v", ds)
	}
	// At the deadline the agent gives up on it and evicts the next one.
	ds, st = Decide(Snapshot{Sample: sample(10, 4, 3.5), Workloads: wls}, cfg, st)
	if len(ds) != 2 || ds[0].Action != ActionAbandon || ds[0].Workload != "stuck" || !strings.Contains(ds[0].Reason, "deadline") {
		t.Fatalf("at the deadline: %+v", ds)
	}
	if ds[1].Action != ActionEvict || ds[1].Workload != "silver" {
		t.Fatalf("next candidate not chosen: %+v", ds[1])
	}
	// Silver leaves gracefully; stuck is never chosen again, gold is.
	wls[2].Processes = 0
	ds, st = Decide(Snapshot{Sample: sample(11, 4, 3.5), Workloads: wls,
		Outcomes: []EvictionOutcome{{Workload: "silver", Result: EvictedGracefully, Seconds: 1, FreedBytes: 5 * gi / 2}}}, cfg, st)
	if len(ds) == 0 || ds[0].Action != ActionEvicted || ds[0].Outcome == nil || !strings.Contains(ds[0].Reason, "gracefully") {
		t.Fatalf("outcome not logged: %+v", ds)
	}
	ds, st = Decide(Snapshot{Sample: sample(20, 4, 3.5), Workloads: wls}, cfg, st)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "gold" {
		t.Fatalf("third eviction %+v", ds)
	}
	// Once stuck is gone, it is forgotten.
	wls = wls[:1]
	_, st = Decide(Snapshot{Sample: sample(21, 1, 0), Workloads: wls}, cfg, st)
	if len(st.Abandoned) != 0 {
		t.Fatalf("abandoned %v after the workload left", st.Abandoned)
	}
}

// A failed eviction (processes survived the kill) is given up on at once.
func TestDecideGivesUpOnFailedEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CooldownSeconds = 0
	wls := []Workload{wl("a", 1, 2, 2, 1.5), wl("b", 5, 2, 2, 1.5)}
	_, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	ds, _ := Decide(Snapshot{Sample: sample(1, 4, 3.5), Workloads: wls,
		Outcomes: []EvictionOutcome{{Workload: "a", Result: EvictionFailed, Seconds: 1, Err: "1 process left after SIGKILL"}}}, cfg, st)
	if len(ds) != 2 || ds[0].Action != ActionEvicted || !strings.Contains(ds[0].Reason, "could not be removed") {
		t.Fatalf("failed outcome: %+v", ds)
	}
	if ds[1].Action != ActionEvict || ds[1].Workload != "b" {
		t.Fatalf("next candidate: %+v", ds[1])
	}
}

// made gives w an Instance (its cgroup's ID).
func made(w Workload, instance uint64) Workload {
	w.Instance = instance
	return w
}

// A workload made again under the same name (density's next step, a pod
// recreated with its name) is a new one: the old one's swap allowance,
// eviction or abandonment does not carry over.
func TestDecideForgetsAWorkloadMadeAgain(t *testing.T) {
	t.Run("swap allowance", func(t *testing.T) {
		cfg := DefaultConfig()
		snap := Snapshot{Sample: sample(0, 1, 0), Workloads: []Workload{made(wl("a", 0, 1, 0.5, 0), 1)}}
		_, st := Decide(snap, cfg, State{})
		snap.Sample, snap.SwapResults = sample(1, 1, 0), []SwapResult{{Workload: "a", SwapBytes: gi}}
		_, st = Decide(snap, cfg, st)
		// The new group has no swap limit set: its allowance is decided again,
		// and a result in the same round (written by name, maybe to the old
		// group) does not count as applied to it.
		for _, results := range [][]SwapResult{nil, {{Workload: "a", SwapBytes: gi}}} {
			again := Snapshot{Sample: sample(2, 1, 0), Workloads: []Workload{made(wl("a", 0, 1, 0.5, 0), 2)}, SwapResults: results}
			ds, next := Decide(again, cfg, st)
			if len(ds) != 1 || ds[0].Action != ActionSetSwap || ds[0].Swap.SwapBytes != gi || len(next.SwapAllowance) != 0 {
				t.Fatalf("results %v: decided %+v, in force %v; want a's allowance set again and none in force", results, ds, next.SwapAllowance)
			}
		}
	})
	t.Run("refused allowance", func(t *testing.T) {
		cfg := DefaultConfig()
		snap := Snapshot{Sample: sample(0, 1, 0), Workloads: []Workload{made(wl("a", 0, 1, 0.5, 0), 1)}}
		_, st := Decide(snap, cfg, State{})
		snap.Sample, snap.SwapResults = sample(0.1, 1, 0), []SwapResult{{Workload: "a", SwapBytes: gi, Err: "no memory limit", TriedAt: at(0)}}
		_, st = Decide(snap, cfg, st)
		again := Snapshot{Sample: sample(0.2, 1, 0), Workloads: []Workload{made(wl("a", 0, 1, 0.5, 0), 2)}}
		if ds, _ := Decide(again, cfg, st); len(ds) != 1 || ds[0].Action != ActionSetSwap {
			t.Fatalf("a new group waited out its predecessor's refusal: %+v", ds)
		}
	})
	t.Run("eviction", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.EvictionDeadlineSeconds = 10
		wls := []Workload{made(wl("gold", 10, 2, 2, 1), 1), made(wl("stuck", 1, 2, 2, 1.5), 2)}
		ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
		if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "stuck" {
			t.Fatalf("first eviction %+v", ds)
		}
		// The victim's group is gone and one of the same name is made
		// before the agent saw it go: not the victim past its deadline.
		wls[1] = made(wl("stuck", 1, 2, 0.1, 0), 3)
		ds, st = Decide(Snapshot{Sample: sample(11, 1, 0), Workloads: wls}, cfg, st)
		for _, d := range ds {
			if d.Action == ActionAbandon {
				t.Fatalf("the new group was given up on as its predecessor: %+v", d)
			}
		}
		if len(st.Evicting) != 0 || len(st.Abandoned) != 0 || !st.VictimGone.Equal(at(11)) {
			t.Fatalf("evicting %v, abandoned %v, victim gone %v; want none, none, 11 s", st.Evicting, st.Abandoned, st.VictimGone)
		}
		// The old group's failure, learned in the round the new one is
		// first seen, is not the new one's.
		_, st = Decide(Snapshot{Sample: sample(20, 4, 3.5), Workloads: wls}, cfg, st)
		wls[1] = made(wl("stuck", 1, 2, 0.1, 0), 4)
		_, st = Decide(Snapshot{Sample: sample(21, 1, 0), Workloads: wls,
			Outcomes: []EvictionOutcome{{Workload: "stuck", Result: EvictionFailed, Err: "1 process left after SIGKILL"}}}, cfg, st)
		if len(st.Abandoned) != 0 {
			t.Fatalf("the new group was given up on for its predecessor's failed eviction: %v", st.Abandoned)
		}
	})
	t.Run("abandoned", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.CooldownSeconds = 0
		wls := []Workload{made(wl("a", 1, 2, 2, 1.5), 1), made(wl("b", 5, 2, 2, 1.5), 2)}
		_, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
		_, st = Decide(Snapshot{Sample: sample(1, 4, 3.5), Workloads: wls,
			Outcomes: []EvictionOutcome{{Workload: "a", Result: EvictionFailed, Err: "1 process left after SIGKILL"}}}, cfg, st)
		if _, ok := st.Abandoned["a"]; !ok {
			t.Fatalf("a not given up on: %v", st.Abandoned)
		}
		// b is evicted and gone; a is made again: the new a may be chosen
		// (once b's memory is known freed).
		wls = []Workload{made(wl("a", 1, 2, 2, 1.5), 3)}
		_, st = Decide(Snapshot{Sample: sample(2, 4, 3.5), Workloads: wls,
			Outcomes: []EvictionOutcome{{Workload: "b", Result: EvictedGracefully}}}, cfg, st)
		ds, _ := Decide(Snapshot{Sample: sample(3, 4, 3.5), Workloads: wls}, cfg, st)
		if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "a" {
			t.Fatalf("the new a was skipped as its abandoned predecessor: %+v", ds)
		}
	})
}

func TestDecideNeverEvictsProtectedOrUnreadable(t *testing.T) {
	cfg := DefaultConfig()
	prot := wl("prot", 0, 0, 6, 3)
	prot.Protected = true
	bad := wl("bad", 0, 0, 1, 1)
	bad.Err = "read memory.stat: no such file or directory"
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 4), Workloads: []Workload{prot, bad}}, cfg, State{})
	if len(evictions(ds)) != 0 {
		t.Fatalf("evicted %+v", ds)
	}
	var noted bool
	for _, d := range ds {
		noted = noted || (d.Action == ActionNone && strings.Contains(d.Reason, "no evictable workload"))
	}
	if !noted {
		t.Fatalf("no note explaining the non-eviction: %+v", ds)
	}
	// The same note is not repeated every tick.
	ds, _ = Decide(Snapshot{Sample: sample(1, 4, 4), Workloads: []Workload{prot, bad}}, cfg, st)
	for _, d := range ds {
		if d.Action == ActionNone {
			t.Fatalf("note repeated: %+v", d)
		}
	}
}

func TestDecideDoesNotActOnUnreadableScope(t *testing.T) {
	s := sample(0, 9, 9)
	s.ScopeErr = "read memory.usage_in_bytes: permission denied"
	ds, _ := Decide(Snapshot{Sample: s, Workloads: []Workload{wl("a", 0, 1, 5, 5)}}, DefaultConfig(), State{})
	if len(ds) != 1 || ds[0].Action != ActionNone || !strings.Contains(ds[0].Reason, "unreadable") {
		t.Fatalf("decisions %+v", ds)
	}
}

func TestWindowRestartsAfterEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxAverageSwapInPagesPerSecond = 100
	cfg.CooldownSeconds = 0
	s := func(sec float64, in uint64) Sample { x := sample(sec, 4, 1); x.PswpIn = in; return x }
	wls := []Workload{wl("a", 1, 1, 1, 0), wl("b", 2, 1, 1, 0)}
	st := State{}
	var ds []Decision
	_, st = Decide(Snapshot{Sample: s(0, 0), Workloads: wls}, cfg, st)
	ds, st = Decide(Snapshot{Sample: s(2, 10000), Workloads: wls}, cfg, st)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "a" {
		t.Fatalf("first eviction: %+v", ds)
	}
	wls[0].Processes = 0
	// Swap-ins stopped after the eviction; the old burst must not count.
	_, st = Decide(Snapshot{Sample: s(3, 10000), Workloads: wls}, cfg, st)
	ds, _ = Decide(Snapshot{Sample: s(5, 10010), Workloads: wls}, cfg, st)
	if len(evictions(ds)) != 0 {
		t.Fatalf("evicted on data from before the last eviction: %+v", ds)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.SwapUtilizationThresholdFactor = 0 },
		func(c *Config) { c.SwapUtilizationThresholdFactor = 1.5 },
		func(c *Config) { c.MaxAverageSwapInPagesPerSecond = -1 },
		func(c *Config) { c.AverageWindowSizeSeconds = 0 },
		func(c *Config) { c.PSIFullPercent = 101 },
		func(c *Config) { c.CooldownSeconds = -1 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, c)
		}
	}
}

// When the allowances in force add up to less than the swap, the scope's
// OOM point is its RAM plus the allowances: swap utilization is measured
// against them (4 GiB RAM, 4 GiB swap, two workloads allowed 0.5 GiB each:
// 4.9 GiB in use is past RAM + 0.8 × 1 GiB, far below RAM + 0.8 × 4 GiB).
func TestSwapUtilizationCountsOnlyTheAllowedSwap(t *testing.T) {
	cfg := DefaultConfig()
	ws := []Workload{wl("a", 0, 0.5, 2.2, 0.45), wl("b", 1, 0.5, 1.8, 0.45)}
	snap := Snapshot{Sample: sample(0, 4, 0.9), Workloads: ws}
	st := State{SwapAllowance: map[string]uint64{"a": gi / 2, "b": gi / 2}}
	ds, _ := Decide(snap, cfg, st)
	if e := evictions(ds); len(e) != 1 || e[0].Workload != "a" || e[0].Trigger.Signal != SignalSwapUtilization {
		t.Fatalf("decisions %+v: want workload a evicted on swap utilization", ds)
	}
	// Without allowances in force for every workload the whole swap counts.
	delete(st.SwapAllowance, "b")
	if ds, _ := Decide(snap, cfg, st); len(evictions(ds)) != 0 {
		t.Fatalf("evicted with the whole swap to use: %+v", ds)
	}
}

// UsageBounds' threshold is where swap_utilization fires, against the
// swap the workloads' allowances leave when they add up to less.
func TestUsageBounds(t *testing.T) {
	const mib = 1 << 20
	cfg := DefaultConfig()
	scope := Scope{RAMBytes: 1024 * mib, SwapBytes: 1024 * mib}
	snap := Snapshot{Sample: Sample{Scope: scope}, Workloads: []Workload{{Name: "a"}, {Name: "b"}}}
	for _, c := range []struct {
		name       string
		allowances map[string]uint64
		swapBytes  uint64
	}{
		{"no allowance in force: the scope's swap", map[string]uint64{}, 1024 * mib},
		{"allowances adding up to less", map[string]uint64{"a": 100 * mib, "b": 100 * mib}, 200 * mib},
		{"one workload without: the scope's swap", map[string]uint64{"a": 100 * mib}, 1024 * mib},
	} {
		threshold, oom := UsageBounds(snap, State{SwapAllowance: c.allowances}, cfg)
		if want := uint64(float64(1024*mib) + cfg.SwapUtilizationThresholdFactor*float64(c.swapBytes)); threshold != want {
			t.Errorf("%s: threshold %d, want %d", c.name, threshold, want)
		}
		if want := 1024*mib + c.swapBytes; oom != want {
			t.Errorf("%s: OOM point %d, want %d", c.name, oom, want)
		}
		at := Scope{RAMBytes: scope.RAMBytes, SwapBytes: c.swapBytes}
		for _, used := range []uint64{threshold, threshold + 1} {
			at.WorkingSetBytes = used
			signals, _ := Evaluate([]Sample{{Scope: at}}, cfg)
			if fires := signals[0].Firing; fires != (used > threshold) {
				t.Errorf("%s: at %d B swap_utilization firing %v, threshold %d", c.name, used, fires, threshold)
			}
		}
	}
}

// A victim slow to leave (a long preStop hook, a guest slow to power off)
// holds its memory and may grow meanwhile: past the cool-down, at the OOM
// point, the next candidate goes beside it; short of the OOM point, or
// within the cool-down, the agent waits for it.
func TestDecideNextGoesBesideASlowVictimAtTheOOMPoint(t *testing.T) {
	cfg := DefaultConfig() // cool-down 5 s; OOM margin: within 5% of 4 GiB of swap
	wls := []Workload{wl("gold", 10, 2, 2, 1), wl("bronze", 1, 2, 2, 1.5), wl("silver", 5, 2, 2, 0.5)}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "bronze" {
		t.Fatalf("first eviction %+v", ev)
	}
	for _, c := range []struct {
		name    string
		sec     float64
		swapGiB float64
		want    string // the workload evicted, "" for none
	}{
		{"within the cool-down, at the OOM point", 3, 3.9, ""},
		{"past the cool-down, short of the OOM point", 6, 3.7, ""},
		{"past the cool-down, at the OOM point", 6, 3.9, "silver"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ds, _ := Decide(Snapshot{Sample: sample(c.sec, 4, c.swapGiB), Workloads: wls}, cfg, st)
			ev := evictions(ds)
			switch {
			case c.want == "" && len(ev) != 0:
				t.Fatalf("evicted %+v while bronze is leaving", ev)
			case c.want == "" && (len(ds) == 0 || !strings.Contains(ds[len(ds)-1].Reason, "waiting for the previous victim")):
				t.Fatalf("decisions %+v, want a wait for bronze", ds)
			case c.want != "" && (len(ev) != 1 || ev[0].Workload != c.want || !strings.Contains(ev[0].Reason, "while bronze is still leaving")):
				t.Fatalf("evictions %+v, want %s beside bronze", ev, c.want)
			}
		})
	}
}
