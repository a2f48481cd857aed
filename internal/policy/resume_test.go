package policy

import (
	"testing"
	"time"
)

func TestDecideResume(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ResumeParked, cfg.ResumeHoldSeconds, cfg.ResumeMarginBytes = true, 10, 256<<20
	// Threshold: 4 GiB + 0.8 × 4 GiB = 7.2 GiB.
	scope := func(usedGiB float64) Scope {
		return Scope{RAMBytes: 4 * gi, SwapBytes: 4 * gi, WorkingSetBytes: uint64(usedGiB * gi)}
	}
	low := Parked{Name: "low", Priority: 1, MemoryBytes: gi, ParkedAt: t0}
	high := Parked{Name: "high", Priority: 5, MemoryBytes: 2 * gi, ParkedAt: t0.Add(time.Second)}
	highEarlier := Parked{Name: "high-first", Priority: 5, MemoryBytes: 2 * gi, ParkedAt: t0}
	type step struct {
		at     float64 // seconds after t0
		used   float64 // GiB
		parked []Parked
		quiet  bool
		want   string // the workload resumed ("": none)
	}
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		steps []step
	}{
		{"room held for the hold time: the highest priority goes", nil, []step{
			{0, 4, []Parked{low, high}, true, ""},
			{9.9, 4, []Parked{low, high}, true, ""},
			{10, 4, []Parked{low, high}, true, "high"},
		}},
		{"equal priorities: the one parked first", nil, []step{
			{0, 4, []Parked{high, highEarlier}, true, ""},
			{10, 4, []Parked{high, highEarlier}, true, "high-first"},
		}},
		// 7.2 - 5 = 2.2 GiB of room: enough for 2 GiB only with a margin under 0.2 GiB.
		{"room below its memory plus the margin", nil, []step{
			{0, 5, []Parked{high}, true, ""},
			{20, 5, []Parked{high}, true, ""},
		}},
		{"room lost during the hold starts it again", nil, []step{
			{0, 4, []Parked{high}, true, ""},
			{5, 6, []Parked{high}, true, ""},
			{6, 4, []Parked{high}, true, ""},
			{15, 4, []Parked{high}, true, ""},
			{16, 4, []Parked{high}, true, "high"},
		}},
		{"not while a signal fires, an eviction runs or cools down", nil, []step{
			{0, 4, []Parked{high}, true, ""},
			{5, 4, []Parked{high}, false, ""},
			{10, 4, []Parked{high}, true, ""},
			{19.9, 4, []Parked{high}, true, ""},
			{20, 4, []Parked{high}, true, "high"},
		}},
		{"one at a time: the next waits until the first is no longer parked", nil, []step{
			{0, 1, []Parked{low, high}, true, ""},
			{10, 1, []Parked{low, high}, true, "high"},
			{11, 1, []Parked{low, high}, true, ""}, // still starting
			{25, 1, []Parked{low, high}, true, ""},
			{26, 3, []Parked{low}, true, ""}, // it runs: the hold starts over
			{35.9, 3, []Parked{low}, true, ""},
			{36, 3, []Parked{low}, true, "low"},
		}},
		{"a start that never shows is tried again after the eviction deadline", func(c *Config) { c.EvictionDeadlineSeconds = 30 }, []step{
			{0, 1, []Parked{high}, true, ""},
			{10, 1, []Parked{high}, true, "high"},
			{39, 1, []Parked{high}, true, ""},
			{40, 1, []Parked{high}, true, ""}, // given up waiting: a new hold
			{50, 1, []Parked{high}, true, "high"},
		}},
		{"off: nothing", func(c *Config) { c.ResumeParked = false }, []step{
			{0, 0, []Parked{high}, true, ""},
			{100, 0, []Parked{high}, true, ""},
		}},
		{"no hold: at once", func(c *Config) { c.ResumeHoldSeconds = 0 }, []step{
			{0, 0, []Parked{low}, true, "low"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			var st State
			for _, s := range tc.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				snap := Snapshot{Sample: Sample{Time: now, Scope: scope(s.used)}, Parked: s.parked}
				ds := decideResume(snap, c, &st, snap.Sample.Scope, s.quiet)
				got := ""
				for _, d := range ds {
					if d.Action != ActionResume || d.Reason == "" {
						t.Fatalf("at %g s: %+v", s.at, d)
					}
					got = d.Workload
				}
				if len(ds) > 1 || got != s.want {
					t.Fatalf("at %g s: resumed %q (%d decisions), want %q", s.at, got, len(ds), s.want)
				}
			}
		})
	}
}

// Decide resumes only when nothing fires and no eviction is in progress or
// cooling down: a resume cannot follow the eviction that parked it.
func TestDecideResumesAfterTheCooldown(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ResumeParked, cfg.ResumeHoldSeconds, cfg.CooldownSeconds = true, 0, 20
	st := State{LastEviction: t0}
	parked := []Parked{{Name: "p", Priority: 1, MemoryBytes: gi, ParkedAt: t0}}
	for _, tc := range []struct {
		at   float64
		want bool
	}{{1, false}, {19, false}, {20, true}} {
		snap := Snapshot{Sample: Sample{Time: t0.Add(time.Duration(tc.at * float64(time.Second))),
			Scope: Scope{RAMBytes: 4 * gi, SwapBytes: 4 * gi, WorkingSetBytes: gi}}, Parked: parked}
		ds, next := Decide(snap, cfg, st)
		got := false
		for _, d := range ds {
			got = got || d.Action == ActionResume
		}
		if got != tc.want {
			t.Fatalf("at %g s after the eviction: resumed %v, want %v: %+v", tc.at, got, tc.want, ds)
		}
		st = next
	}
}
