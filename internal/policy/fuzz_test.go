package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// byteSource decodes fuzz input into bounded values; it yields zeros once
// the input is used up so every input is a valid scenario.
type byteSource struct{ b []byte }

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

// upTo returns a value in [0, n).
func (s *byteSource) upTo(n int) int { return int(s.next()) % n }

// FuzzDecide runs Decide over a scenario decoded from the input (a config,
// then up to 40 ticks of a scope with up to 5 workloads) and checks the
// invariants the agent relies on, whatever the numbers.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 100, 50, 25, 12, 6, 3, 1})
	f.Add([]byte("\x03\x00\x05\xff\xff\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xb0\xc0\xd0\xe0\xf0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		cfg := Config{
			SwapUtilizationThresholdFactor: float64(1+src.upTo(100)) / 100,
			MaxAverageSwapInPagesPerSecond: float64(src.upTo(4) * 1000),
			PSIFullPercent:                 float64(src.upTo(3) * 10),
			AverageWindowSizeSeconds:       float64(1 + src.upTo(30)),
			ExhaustionHorizonSeconds:       float64(src.upTo(3) * 30),
			CooldownSeconds:                float64(src.upTo(10)),
			EvictionDeadlineSeconds:        float64(1 + src.upTo(20)),
			KSMMode:                        []string{KSMOff, KSMAdvisor, KSMGovernor}[src.upTo(3)],
			KSMMaxCPUPercent:               float64(1 + src.upTo(100)),
			KSMMinProfitBytesPerCPUSecond:  float64(src.upTo(4) << 22),
			KSMRAMNeedFraction:             float64(src.upTo(5)) / 4,
		}
		cfg.KSMIdleCPUPercent = float64(src.upTo(int(cfg.KSMMaxCPUPercent) + 1))
		cfg.Balloon = src.upTo(2) == 1
		cfg.BalloonPolicy = []string{BalloonHeadroom, BalloonMOM}[src.upTo(2)]
		cfg.BalloonMinFreeBytes = float64(src.upTo(4) << 26)
		cfg.BalloonGuestMarginBytes = float64(src.upTo(4) << 24)
		cfg.BalloonGuestMarginFraction = float64(src.upTo(4)) / 10
		cfg.BalloonMOMIntervalSeconds = float64(1 + src.upTo(15))
		// Short enough for a give-up to expire and a back-off to reach
		// its cap within a scenario.
		cfg.AbandonRetrySeconds, cfg.RefusalBackoffMaxSeconds = 2*cfg.EvictionDeadlineSeconds, 4
		cfg.ResumeParked, cfg.ResumeHoldSeconds, cfg.ResumeMarginBytes = src.upTo(2) == 1, float64(src.upTo(5)), float64(src.upTo(4)<<28)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded config invalid: %v", err)
		}
		const ramBytes, swapBytes = 4 * gi, 4 * gi
		st := State{}
		var pswpin, psiFull uint64
		ksm := KSMSample{MergeableBytes: uint64(src.upTo(8)) << 28}
		faults := map[string]int64{}
		instances := map[string]uint64{} // a workload made again gets the next
		now := t0
		for tick := 0; tick < 40 && len(src.b) > 0; tick++ {
			now = now.Add(time.Duration(src.upTo(3000)) * time.Millisecond)
			pswpin += uint64(src.upTo(256)) * 100
			psiFull += uint64(src.upTo(256)) * 5000
			snap := Snapshot{Sample: Sample{Time: now, PswpIn: pswpin, PSIFullMicros: psiFull,
				Scope: Scope{RAMBytes: ramBytes, SwapBytes: swapBytes,
					WorkingSetBytes: uint64(src.upTo(256)) * (ramBytes / 200),
					SwapUsedBytes:   uint64(src.upTo(256)) * (swapBytes / 200)}}}
			if src.upTo(16) == 0 {
				snap.Sample.ScopeErr = "unreadable"
			}
			// ksmd moves on: counters only grow.
			ksm.PagesScanned += uint64(src.upTo(256)) << 10
			ksm.KsmdCPUSeconds += float64(src.upTo(100)) / 100
			ksm.FullScans += uint64(src.upTo(2))
			ksm.PagesSharing = uint64(src.upTo(256)) << 10
			ksm.GeneralProfitBytes = int64(ksm.PagesSharing*4096) - int64(src.upTo(256))<<12
			if src.upTo(8) == 0 {
				ksm.MergeableBytes += uint64(src.upTo(4)) << 28
			}
			if src.upTo(10) > 0 {
				k := ksm
				snap.Sample.KSM = &k
			}
			n := src.upTo(6)
			for i := 0; i < n; i++ {
				flags := src.next()
				w := Workload{Name: fmt.Sprintf("w%d", i), Priority: src.upTo(4),
					RequestBytes:    uint64(src.upTo(4)) * gi / 2,
					Processes:       int(flags & 1),
					Protected:       flags&2 != 0,
					WorkingSetBytes: uint64(src.upTo(256)) * (gi / 128),
					SwapBytes:       uint64(src.upTo(256)) * (gi / 128)}
				if flags&4 != 0 {
					w.LimitBytes = uint64(1+src.upTo(4)) * gi / 2
				}
				if flags&8 != 0 {
					w.Err = "unreadable"
				}
				w.SwapUncapped = w.LimitBytes == 0 && flags&64 != 0 // cgroup v1 without a limit
				if flags&32 != 0 {
					instances[w.Name]++
				}
				w.Instance = instances[w.Name]
				if flags&16 != 0 { // a VM: its balloon at the last target or anywhere
					maxB := uint64(1+src.upTo(8)) << 27
					cur := maxB
					if t, ok := st.Balloon.Targets[w.Name]; ok && src.upTo(2) == 0 {
						cur = t
					} else if src.upTo(2) == 0 {
						cur = maxB * uint64(1+src.upTo(16)) / 16
					}
					total := int64(cur) - int64(src.upTo(8))<<20
					avail := int64(src.upTo(256)) * (total / 256)
					faults[w.Name] += int64(src.upTo(4) * src.upTo(256))
					w.Guest = &GuestMemory{MemoryBytes: cur, MaxBytes: maxB, TotalBytes: total, AvailableBytes: avail,
						FreeBytes: avail / int64(1+src.upTo(3)), MajorFaults: faults[w.Name], SwapInBytes: -1, AgeSeconds: float64(src.upTo(8))}
					if src.upTo(8) == 0 {
						w.Guest.AvailableBytes, w.Guest.FreeBytes = -1, -1
					}
				}
				snap.Workloads = append(snap.Workloads, w)
			}
			for i := range src.upTo(3) {
				snap.Parked = append(snap.Parked, Parked{Name: fmt.Sprintf("p%d", i), Priority: src.upTo(4),
					MemoryBytes: uint64(1+src.upTo(8)) << 28, ParkedAt: t0.Add(time.Duration(src.upTo(4)) * time.Second)})
			}
			// The kernel applies or refuses the last allowances at random.
			for name, want := range st.swapPending {
				r := SwapResult{Workload: name, SwapBytes: want}
				if src.upTo(4) == 0 {
					r.Err = "EBUSY"
				}
				snap.SwapResults = append(snap.SwapResults, r)
			}
			// Evictions in progress end (or fail) at random.
			for name := range st.Evicting {
				switch src.upTo(5) {
				case 0:
					snap.Outcomes = append(snap.Outcomes, EvictionOutcome{Workload: name, Result: EvictedGracefully})
				case 1:
					snap.Outcomes = append(snap.Outcomes, EvictionOutcome{Workload: name, Result: EvictionFailed, Err: "D state"})
				case 2:
					snap.Outcomes = append(snap.Outcomes, EvictionOutcome{Workload: name, Result: EvictionRefused, Err: "429: disruption budget"})
				}
			}

			before := st.clone()
			decisions, next := Decide(snap, cfg, st)
			checkDecisions(t, snap, cfg, st, decisions, next)
			if fmt.Sprint(before.Evicting, before.Abandoned, before.SwapAllowance, len(before.Window)) != fmt.Sprint(st.Evicting, st.Abandoned, st.SwapAllowance, len(st.Window)) {
				t.Fatalf("tick %d: Decide changed the state it was given", tick)
			}
			st = next
		}
	})
}

// prevTarget is a VM's balloon target before this decision (its RAM if none).
func prevTarget(st State, w Workload) uint64 {
	if t, ok := st.Balloon.Targets[w.Name]; ok {
		return t
	}
	return w.Guest.MaxBytes
}

func checkDecisions(t *testing.T, snap Snapshot, cfg Config, prev State, decisions []Decision, next State) {
	t.Helper()
	byName := map[string]Workload{}
	for _, w := range snap.Workloads {
		byName[w.Name] = w
	}
	evicted, ksmSets := 0, 0
	ballooned := map[string]bool{}
	now := snap.Sample.Time
	// A refusal of the last victim gives back what its eviction took: the
	// eviction before it (for the cool-down) and the window.
	// A workload made again has lost its allowance before the window
	// takes this sample.
	eff := prev.clone()
	for _, w := range snap.Workloads {
		if was, ok := prev.instances[w.Name]; ok && w.Instance != 0 && was != w.Instance {
			delete(eff.SwapAllowance, w.Name)
		}
	}
	for _, o := range snap.Outcomes {
		if o.Result == EvictionRefused && o.Workload == prev.lastVictim && prev.held != nil {
			eff.LastEviction = prev.held.lastEviction
			eff.Window = append(slices.Clone(prev.held.window), prev.Window...)
		}
	}
	for _, d := range decisions {
		if !slices.Contains(Actions, d.Action) {
			t.Fatalf("decision with an action Actions does not list: %+v", d)
		}
		if d.Outcome != nil && !slices.Contains(EvictionResults, d.Outcome.Result) {
			t.Fatalf("outcome with a result EvictionResults does not list: %+v", d.Outcome)
		}
		switch d.Action {
		case ActionSetSwap:
			w := byName[d.Workload]
			if d.Swap == nil {
				t.Fatal("set_swap without its setting")
			}
			if d.Swap.SwapBytes > snap.Sample.Scope.SwapBytes {
				t.Fatalf("allowance %d B above the scope's swap %d B", d.Swap.SwapBytes, snap.Sample.Scope.SwapBytes)
			}
			if w.Protected && d.Swap.SwapBytes != 0 {
				t.Fatalf("protected %s given %d B of swap", w.Name, d.Swap.SwapBytes)
			}
			if w.SwapUncapped {
				t.Fatalf("set_swap for %s, whose swap cannot be capped", w.Name)
			}
		case ActionEvict:
			evicted++
			w, ok := byName[d.Workload]
			switch {
			case !ok:
				t.Fatalf("evicted %q, which is not in the snapshot", d.Workload)
			case w.Protected, w.Err != "", w.Processes == 0:
				t.Fatalf("evicted an ineligible workload %+v", w)
			case snap.Sample.ScopeErr != "":
				t.Fatal("evicted while the scope was unreadable")
			case d.Trigger == nil || d.Trigger.Signal == "":
				t.Fatal("eviction without a firing signal")
			}
			// A second eviction needs the first to have ended (an outcome
			// reported: a workload that came back may be evicted again).
			ended := false
			for _, o := range snap.Outcomes {
				ended = ended || o.Workload == w.Name
			}
			// Nor one of the same name made again.
			if _, already := prev.Evicting[w.Name]; already && w.Processes > 0 && !ended && prev.instances[w.Name] == w.Instance {
				t.Fatalf("evicted %s twice", w.Name)
			}
			// A workload made again (a new instance) is a new workload:
			// its predecessor's give-up and back-off do not carry over.
			was, seenBefore := prev.instances[w.Name]
			renewed := w.Instance != 0 && seenBefore && was != w.Instance
			if at, abandoned := prev.Abandoned[w.Name]; abandoned && !renewed && now.Sub(at).Seconds() < cfg.AbandonRetrySeconds {
				t.Fatalf("evicted %s, given up on %.1f s ago (retry after %g s)", w.Name, now.Sub(at).Seconds(), cfg.AbandonRetrySeconds)
			}
			if _, abandoned := next.Abandoned[w.Name]; abandoned {
				t.Fatalf("evicted %s, which is given up on", w.Name)
			}
			if r, refused := prev.Refused[w.Name]; refused && !renewed && now.Before(r.Until) {
				t.Fatalf("evicted %s %.1f s before its refusal back-off ends", w.Name, r.Until.Sub(now).Seconds())
			}
			seen := snap.Sample
			seen.Scope.SwapBytes = usableSwap(snap, eff)
			// One at a time: beside a victim still leaving only past the
			// cool-down, at the OOM point (the kernel would kill the others
			// first), and saying so.
			if len(next.Evicting) != 1 && (inCooldown(eff, cfg, now) || nearOOM(seen.Scope) == "" || !strings.Contains(d.Reason, "is still leaving")) {
				t.Fatalf("evicting %v after choosing %s; one at a time (%q)", next.Evicting, w.Name, d.Reason)
			}
			// Inside the cool-down only when the OOM point comes first,
			// and saying so.
			then := eff.clone()
			then.Window, then.VictimGone = appendToWindow(eff.Window, seen, cfg, eff.LastEviction), next.VictimGone
			if inCooldown(eff, cfg, now) && (oomBeforeCooldownEnds(then, cfg, now) == "" || !strings.Contains(d.Reason, "OOM point")) {
				t.Fatalf("evicted %.3f s after the last eviction, cooldown %g s, the OOM point not before its end (%q)", now.Sub(eff.LastEviction).Seconds(), cfg.CooldownSeconds, d.Reason)
			}
			if len(next.Window) != 0 {
				t.Fatal("window not restarted after an eviction")
			}
		case ActionResume:
			parked := false
			for _, p := range snap.Parked {
				parked = parked || p.Name == d.Workload
			}
			switch {
			case !cfg.ResumeParked || !parked:
				t.Fatalf("resumed %s: resuming off, or not parked", d.Workload)
			case len(next.Evicting) > 0 || next.Firing() || snap.Sample.ScopeErr != "" || inCooldown(next, cfg, now):
				t.Fatalf("resumed %s while evicting, firing, cooling down or blind", d.Workload)
			case prev.Resume.Resuming != "" && now.Sub(prev.Resume.ResumingAt).Seconds() < cfg.EvictionDeadlineSeconds &&
				slicesContainsParked(snap.Parked, prev.Resume.Resuming):
				t.Fatalf("resumed %s while %s is still starting", d.Workload, prev.Resume.Resuming)
			}
		case ActionNone:
			if d.Reason == "" {
				t.Fatal("non-action without a reason")
			}
		case ActionEvicted:
			found := false
			for _, o := range snap.Outcomes {
				found = found || o.Workload == d.Workload
			}
			if !found || d.Outcome == nil {
				t.Fatalf("outcome decision for %s, which reported no outcome", d.Workload)
			}
		case ActionSetKSM:
			ksmSets++
			k := d.KSM
			switch {
			case cfg.KSMMode == KSMOff:
				t.Fatal("set_ksm with KSM off")
			case k == nil:
				t.Fatal("set_ksm without its setting")
			case k.Run == 1 && k.AdvisorMode != "scan-time" && (k.PagesToScan < 16 || k.PagesToScan > 1e7 || k.SleepMillisecs == 0):
				t.Fatalf("set_ksm out of bounds: %+v", k)
			case k.Run == 1 && k.AdvisorMode != "scan-time":
				cost := next.KSM.CostSecondsPerPage
				if cost <= 0 {
					cost = ksmPriorCostSecondsPerPage
				}
				scan := float64(k.PagesToScan) * cost
				if share := 100 * scan / (scan + float64(k.SleepMillisecs)/1000); share > cfg.KSMMaxCPUPercent*1.01 && k.PagesToScan > 16 {
					t.Fatalf("ksmd paced to %.1f%% of a core, over the %g%% budget: %+v", share, cfg.KSMMaxCPUPercent, k)
				}
			}
			if !prev.KSM.LastEval.IsZero() && snap.Sample.Time.Sub(prev.KSM.LastEval).Seconds() < ksmEvalSeconds {
				t.Fatal("set_ksm less than a second after the last evaluation")
			}
		case ActionSetBalloon:
			w, b := byName[d.Workload], d.Balloon
			switch {
			case !cfg.Balloon:
				t.Fatal("set_balloon with the balloon controller off")
			case b == nil || w.Guest == nil || w.Guest.MaxBytes == 0:
				t.Fatalf("set_balloon for %s without a setting or a known VM", d.Workload)
			case w.Protected || w.Err != "" || snap.Sample.ScopeErr != "":
				t.Fatalf("ballooned %+v: protected, unreadable, or the scope unreadable", w)
			case ballooned[d.Workload]:
				t.Fatalf("two set_balloon for %s at once", d.Workload)
			case b.TargetBytes > w.Guest.MaxBytes:
				t.Fatalf("target %d B above the VM's %d B", b.TargetBytes, w.Guest.MaxBytes)
			case cfg.BalloonPolicy == BalloonHeadroom && b.TargetBytes < w.Guest.MaxBytes && (b.FloorBytes == 0 || b.TargetBytes < b.FloorBytes):
				t.Fatalf("ballooned %s to %d B, below its floor %d B (0: the guest's stats unknown)", d.Workload, b.TargetBytes, b.FloorBytes)
			case cfg.BalloonPolicy == BalloonHeadroom && b.HostState == MemHigh && b.TargetBytes < prevTarget(prev, w):
				t.Fatalf("inflated %s while the host is in the high state", d.Workload)
			case cfg.BalloonPolicy == BalloonMOM && float64(b.TargetBytes) < float64(b.FromBytes)*(1-momMaxChangeFraction)-1:
				t.Fatalf("MOM shrank %s by more than 5%%: %d → %d B", d.Workload, b.FromBytes, b.TargetBytes)
			}
			ballooned[d.Workload] = true
		case ActionMemoryState:
			m := d.MemoryState
			switch {
			case !cfg.Balloon:
				t.Fatal("memory_state with the balloon controller off")
			case m == nil || m.From == m.To || m.From != prev.Balloon.HostState || m.To != next.Balloon.HostState:
				t.Fatalf("memory_state %+v: not the change from %q to %q", m, prev.Balloon.HostState, next.Balloon.HostState)
			}
		case ActionAbandon:
			if _, ok := prev.Evicting[d.Workload]; !ok {
				t.Fatalf("gave up on %s, which was not being evicted", d.Workload)
			}
		case ActionResumeEviction:
			t.Fatal("Decide resumed an eviction; only ResumeEviction does")
		case ActionAbandonExpired:
			at, ok := prev.Abandoned[d.Workload]
			if _, still := next.Abandoned[d.Workload]; !ok || still || now.Sub(at).Seconds() < cfg.AbandonRetrySeconds {
				t.Fatalf("give-up on %s expired wrongly: given up at %v (%v), still %v", d.Workload, at, ok, still)
			}
		default:
			t.Fatalf("unknown action %q", d.Action)
		}
	}
	if ksmSets > 1 {
		t.Fatalf("%d set_ksm decisions at once", ksmSets)
	}
	if evicted > 1 {
		t.Fatalf("%d evictions in one decision; one at a time", evicted)
	}
	if evicted == 0 && next.LastEviction != eff.LastEviction {
		t.Fatal("last eviction time moved without an eviction or a refusal")
	}
	for name, have := range next.SwapAllowance {
		confirmed := prev.SwapAllowance[name] == have
		for _, r := range snap.SwapResults {
			confirmed = confirmed || (r.Workload == name && r.Err == "" && r.SwapBytes == have)
		}
		if !confirmed {
			t.Fatalf("allowance %d B of %s in force without the kernel's confirmation", have, name)
		}
	}
	for name, since := range next.Evicting {
		if snap.Sample.Time.Sub(since).Seconds() >= cfg.EvictionDeadlineSeconds {
			t.Fatalf("%s still evicting %.1f s after it was chosen, past the %g s deadline", name, snap.Sample.Time.Sub(since).Seconds(), cfg.EvictionDeadlineSeconds)
		}
	}
}

func slicesContainsParked(ps []Parked, name string) bool {
	return slices.ContainsFunc(ps, func(p Parked) bool { return p.Name == name })
}
