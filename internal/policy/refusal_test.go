package policy

import (
	"strings"
	"testing"
)

// A refused eviction (a PodDisruptionBudget, a QMP error) is not a give-up:
// the workload is backed off (1 s, doubling, capped), and the next
// candidate goes in the round that learns of the refusal, without the
// cool-down and on the window the refused eviction had cleared.
func TestDecideRefusalBacksOffAndTheNextGoesAtOnce(t *testing.T) {
	cfg := DefaultConfig() // cool-down 5 s
	cfg.RefusalBackoffMaxSeconds = 4
	// A rate signal: it needs a window of more than a second to fire, so
	// a next candidate within one round needs the window back.
	cfg.MaxAverageSwapInPagesPerSecond = 100
	swapIn := func(s Sample, pages uint64) Sample { s.PswpIn = pages; return s }
	wls := []Workload{wl("pdb", 1, 2, 1, 0.5), wl("b", 5, 2, 1, 0.5), wl("c", 9, 2, 1, 0.5)}
	var st State
	var ds []Decision
	for i, sec := range []float64{0, 0.5, 1} {
		ds, st = Decide(Snapshot{Sample: swapIn(sample(sec, 4, 1), uint64(i)*1000), Workloads: wls}, cfg, st)
	}
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "pdb" || ev[0].Trigger.Signal != SignalSwapIn {
		t.Fatalf("first eviction: %+v", ds)
	}
	refused := func(name string) []EvictionOutcome {
		return []EvictionOutcome{{Workload: name, Result: EvictionRefused, Err: "refused by a PodDisruptionBudget"}}
	}
	cases := []struct {
		sec         float64
		outcomes    []EvictionOutcome
		wantEvict   string // "" for none
		wantRefused map[string]float64
	}{
		// The refusal comes back a round later: b goes at once.
		{1.25, refused("pdb"), "b", map[string]float64{"pdb": 1}},
		// b is refused too; pdb's back-off runs to 2.25: c.
		{1.5, refused("b"), "c", map[string]float64{"pdb": 1, "b": 1}},
		// c is refused; pdb's back-off is over: pdb again.
		{2.5, refused("c"), "pdb", map[string]float64{"pdb": 1, "b": 1, "c": 1}},
		// Refused again: its back-off doubles; b's ended at 2.5.
		{2.75, refused("pdb"), "b", map[string]float64{"pdb": 2, "b": 1, "c": 1}},
		// Every candidate backed off (c until 3.5): nobody.
		{3.0, refused("b"), "", map[string]float64{"pdb": 2, "b": 2, "c": 1}},
		{3.5, nil, "c", map[string]float64{"pdb": 2, "b": 2, "c": 1}},
		{3.75, refused("c"), "", map[string]float64{"pdb": 2, "b": 2, "c": 2}},
	}
	for _, c := range cases {
		ds, st = Decide(Snapshot{Sample: swapIn(sample(c.sec, 4, 1), uint64(c.sec*2000)), Workloads: wls, Outcomes: c.outcomes}, cfg, st)
		got := ""
		if ev := evictions(ds); len(ev) == 1 {
			got = ev[0].Workload
			if strings.Contains(ev[0].Reason, "cool-down") {
				t.Errorf("%.2f s: the refused eviction's cool-down was waited for: %q", c.sec, ev[0].Reason)
			}
		}
		if got != c.wantEvict {
			t.Errorf("%.2f s: evicted %q, want %q (%+v)", c.sec, got, c.wantEvict, ds)
		}
		if c.outcomes != nil && (ds[0].Action != ActionEvicted || ds[0].Outcome.Result != EvictionRefused || !strings.Contains(ds[0].Reason, "not chosen again for")) {
			t.Errorf("%.2f s: refusal line %+v", c.sec, ds[0])
		}
		for name, delay := range c.wantRefused {
			if r := st.Refused[name]; r.DelaySeconds != delay {
				t.Errorf("%.2f s: %s backed off %g s, want %g", c.sec, name, r.DelaySeconds, delay)
			}
		}
		if len(st.Abandoned) != 0 {
			t.Errorf("%.2f s: a refusal gave up on %v", c.sec, st.Abandoned)
		}
	}
	// The cap: pdb's next back-off is 4 s, not 8.
	for i, sec := range []float64{5.25, 9.5, 14} {
		var outcomes []EvictionOutcome
		if _, ok := st.Evicting["pdb"]; ok {
			outcomes = refused("pdb")
		}
		ds, st = Decide(Snapshot{Sample: swapIn(sample(sec, 4, 1), uint64(sec*2000)), Workloads: wls[:1], Outcomes: outcomes}, cfg, st)
		if i > 0 && st.Refused["pdb"].DelaySeconds > cfg.RefusalBackoffMaxSeconds {
			t.Fatalf("%.2f s: back-off %g s over its cap", sec, st.Refused["pdb"].DelaySeconds)
		}
	}
	if st.Refused["pdb"].DelaySeconds != 4 {
		t.Errorf("back-off after repeated refusals %g s, want the cap 4", st.Refused["pdb"].DelaySeconds)
	}
}

// A successful eviction's cool-down still holds after a later refusal:
// the refusal gives back only what its own decision took.
func TestDecideRefusalKeepsTheCooldownOfTheEvictionBefore(t *testing.T) {
	cfg := DefaultConfig()
	wls := []Workload{wl("a", 1, 2, 2, 1.5), wl("b", 5, 2, 2, 1.5), wl("c", 9, 2, 2, 1.5)}
	_, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	wls[0].Processes = 0
	_, st = Decide(Snapshot{Sample: sample(1, 4, 3.5), Workloads: wls,
		Outcomes: []EvictionOutcome{{Workload: "a", Result: EvictedGracefully, Seconds: 1}}}, cfg, st)
	ds, st := Decide(Snapshot{Sample: sample(6, 4, 3.5), Workloads: wls}, cfg, st)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "b" {
		t.Fatalf("after the cool-down: %+v", ds)
	}
	// b is refused at 6.5: its decision is undone, but a's at 0 is over.
	ds, _ = Decide(Snapshot{Sample: sample(6.5, 4, 3.5), Workloads: wls,
		Outcomes: []EvictionOutcome{{Workload: "b", Result: EvictionRefused, Err: "QMP: connection refused"}}}, cfg, st)
	if ev := evictions(ds); len(ev) != 1 || ev[0].Workload != "c" {
		t.Fatalf("after b's refusal: %+v", ds)
	}
}

// A victim given up on (past its deadline, or failed) is not chosen for
// abandonRetrySeconds; then a line says so and it is a candidate again.
func TestDecideAbandonmentExpires(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EvictionDeadlineSeconds, cfg.AbandonRetrySeconds, cfg.CooldownSeconds = 10, 60, 0
	wls := []Workload{wl("stuck", 1, 2, 2, 1.5)}
	_, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, State{})
	ds, st := Decide(Snapshot{Sample: sample(10, 4, 3.5), Workloads: wls}, cfg, st)
	if len(ds) == 0 || ds[0].Action != ActionAbandon || !strings.Contains(ds[0].Reason, "for 60 s") {
		t.Fatalf("at the deadline: %+v", ds)
	}
	ds, st = Decide(Snapshot{Sample: sample(69.9, 4, 3.5), Workloads: wls}, cfg, st)
	if len(evictions(ds)) != 0 {
		t.Fatalf("chosen again before the retry: %+v", ds)
	}
	ds, st = Decide(Snapshot{Sample: sample(70, 4, 3.5), Workloads: wls}, cfg, st)
	if len(ds) != 2 || ds[0].Action != ActionAbandonExpired || ds[0].Workload != "stuck" || ds[1].Action != ActionEvict || ds[1].Workload != "stuck" {
		t.Fatalf("at the retry: %+v", ds)
	}
	if _, still := st.Abandoned["stuck"]; still {
		t.Fatal("still abandoned after its retry")
	}
}

// An eviction a previous agent began holds off a second victim, and its
// deadline counts from its first choice.
func TestResumeEvictionBlocksASecondVictim(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EvictionDeadlineSeconds = 30
	wls := []Workload{wl("leaving", 1, 2, 2, 1.5), wl("next", 5, 2, 2, 1.5)}
	st, d := ResumeEviction(State{}, "leaving", at(-25), at(0))
	if d.Action != ActionResumeEviction || d.Workload != "leaving" || !strings.Contains(d.Reason, "25.0 s ago") {
		t.Fatalf("resume line %+v", d)
	}
	ds, st := Decide(Snapshot{Sample: sample(0, 4, 3.5), Workloads: wls}, cfg, st)
	if len(evictions(ds)) != 0 || !strings.Contains(ds[len(ds)-1].Reason, "previous victim") {
		t.Fatalf("a second victim while one leaves: %+v", ds)
	}
	ds, _ = Decide(Snapshot{Sample: sample(5, 4, 3.5), Workloads: wls}, cfg, st)
	if len(ds) != 2 || ds[0].Action != ActionAbandon || ds[1].Action != ActionEvict || ds[1].Workload != "next" {
		t.Fatalf("30 s after the first choice: %+v", ds)
	}
}
