package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const mi = 1 << 20

func TestMinFreeBytes(t *testing.T) {
	for _, c := range []struct{ ram, want uint64 }{
		{28 * gi, 899 * mi},
		{128 * gi, 899*mi + 100*gi/100},
		{1 * gi, 899 * mi / 28},
	} {
		if got := MinFreeBytes(c.ram); got != c.want {
			t.Errorf("MinFreeBytes(%d MiB) = %d, want %d", c.ram/mi, got, c.want)
		}
	}
}

func TestNextMemState(t *testing.T) {
	const minFree = 100 * mi
	for _, c := range []struct {
		from string
		free uint64
		want string
	}{
		{"", 500 * mi, MemHigh},
		{"", 399 * mi, MemClear},
		{"", 99 * mi, MemSoft},
		{"", 63 * mi, MemHard},
		{"", 31 * mi, MemLow},
		{MemHigh, 399 * mi, MemClear},
		{MemClear, 450 * mi, MemClear}, // back to high only from 500 MiB
		{MemClear, 500 * mi, MemHigh},
		{MemSoft, 110 * mi, MemSoft}, // back to clear only from 125 MiB
		{MemSoft, 125 * mi, MemClear},
		{MemSoft, 10 * mi, MemLow},
		{MemLow, 900 * mi, MemHigh},
	} {
		if got := nextMemState(c.from, c.free, minFree); got != c.want {
			t.Errorf("from %q with %d MiB free: %s, want %s", c.from, c.free/mi, got, c.want)
		}
	}
}

// vm is a guest of maxMi MiB at curMi, with activeMi MiB in use (the
// rest available), its stats fresh.
func vm(name string, maxMi, curMi, activeMi uint64) Workload {
	return Workload{Name: name, Processes: 1, WorkingSetBytes: curMi * mi, Guest: &GuestMemory{
		MemoryBytes: curMi * mi, MaxBytes: maxMi * mi, TotalBytes: int64(curMi * mi),
		AvailableBytes: int64((curMi - activeMi) * mi), FreeBytes: int64((curMi - activeMi) * mi), SwapInBytes: -1}}
}

func balloonConfig() Config {
	c := DefaultConfig()
	c.Balloon = true
	c.BalloonMinFreeBytes = 100 * mi
	c.BalloonGuestMarginBytes = 32 * mi
	c.BalloonGuestMarginFraction = 0
	c.BalloonStartSeconds = 0 // TestBalloonStartMargin has it
	return c
}

// balloonSnap is a 2 GiB scope with freeMi MiB free.
func balloonSnap(sec float64, freeMi uint64, vms ...Workload) Snapshot {
	return Snapshot{Sample: Sample{Time: at(sec), Scope: Scope{RAMBytes: 2 * gi, SwapBytes: gi,
		WorkingSetBytes: 2*gi - freeMi*mi}}, Workloads: vms}
}

// settled is the state after the controller has watched the VMs for
// longer than they take to settle, the host in the clear state.
func settled(vms ...Workload) State {
	_, st := Decide(balloonSnap(-15, 300, vms...), balloonConfig(), State{})
	return st
}

func targets(ds []Decision) map[string]uint64 {
	out := map[string]uint64{}
	for _, d := range ds {
		if d.Action == ActionSetBalloon {
			out[d.Workload] = d.Balloon.TargetBytes / mi
		}
	}
	return out
}

func TestBalloonSoftTakesFromTheMostIdleFirst(t *testing.T) {
	// Soft: 80 MiB free, 125 MiB wanted: 45 MiB to take. "idle" has 512 -
	// (100 + 32) = 380 MiB above its floor, "busy" 512 - (450 + 32) = 30.
	ds, st := Decide(balloonSnap(0, 80, vm("idle", 512, 512, 100), vm("busy", 512, 512, 450)), balloonConfig(), settled(vm("idle", 512, 512, 100), vm("busy", 512, 512, 450)))
	if st.Balloon.HostState != MemSoft {
		t.Fatalf("state %s, want soft", st.Balloon.HostState)
	}
	if got := targets(ds); len(got) != 1 || got["idle"] != 512-45 {
		t.Fatalf("targets %v (MiB), want only idle at %d", got, 512-45)
	}
	// The balloon has not yet reached its target: what it will return
	// counts, so nothing more is taken.
	ds, _ = Decide(balloonSnap(2, 80, vm("idle", 512, 512, 100), vm("busy", 512, 512, 450)), balloonConfig(), st)
	if got := targets(ds); len(got) != 0 {
		t.Fatalf("second round targets %v, want none while the first is pending", got)
	}
}

func TestBalloonLowTakesEveryGuestToItsFloor(t *testing.T) {
	ds, _ := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100), vm("b", 512, 512, 300)), balloonConfig(), settled(vm("a", 512, 512, 100), vm("b", 512, 512, 300)))
	if got := targets(ds); got["a"] != 132 || got["b"] != 332 {
		t.Fatalf("targets %v (MiB), want a 132 and b 332 (active + 32 MiB)", got)
	}
}

func TestBalloonHighDeflates(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	ds, st := Decide(balloonSnap(5, 600, vm("a", 512, 132, 100)), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 || st.Balloon.HostState != MemHigh {
		t.Fatalf("targets %v in %s, want a back at 512 in high", got, st.Balloon.HostState)
	}
}

func TestBalloonGivesAStarvedGuestItsMemoryAtOnce(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100), vm("b", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100), vm("b", 512, 512, 100)))
	// a's workload grew: 10 MiB available (< half its 32 MiB margin), the
	// host still short.
	ds, st := Decide(balloonSnap(2, 20, vm("a", 512, 132, 122), vm("b", 512, 132, 100)), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 {
		t.Fatalf("targets %v, want a back at 512 MiB at once", got)
	}
	// It is left alone for a while even though the host stays short.
	ds, _ = Decide(balloonSnap(10, 20, vm("a", 512, 512, 300), vm("b", 512, 132, 100)), balloonConfig(), st)
	if _, touched := targets(ds)["a"]; touched {
		t.Fatalf("a ballooned again %v within the hold", targets(ds))
	}
}

func TestBalloonFaultingGuestGrows(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	faulting := vm("a", 512, 132, 60) // plenty available, yet 1000 faults in 1 s
	faulting.Guest.MajorFaults = 1000
	ds, _ := Decide(balloonSnap(1, 200, faulting), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 {
		t.Fatalf("targets %v, want a faulting guest back at 512 MiB", got)
	}
}

func TestBalloonNeverInflatesWithoutFreshStats(t *testing.T) {
	stale := vm("a", 512, 512, 100)
	stale.Guest.AgeSeconds = 10
	unknown := vm("b", 512, 512, 100)
	unknown.Guest.AvailableBytes = -1
	ds, _ := Decide(balloonSnap(0, 20, stale, unknown), balloonConfig(), settled(stale, unknown))
	if got := targets(ds); len(got) != 0 {
		t.Fatalf("targets %v for guests whose use is unknown", got)
	}
}

func TestBalloonMOM(t *testing.T) {
	cfg := balloonConfig()
	cfg.BalloonPolicy = BalloonMOM
	// 10% of 2 GiB free (< 20%): shrink by 5% a round, every 10 s.
	ds, st := Decide(balloonSnap(0, 205, vm("a", 512, 512, 100)), cfg, settled(vm("a", 512, 512, 100)))
	if got := targets(ds); got["a"] != 486 {
		t.Fatalf("MOM under pressure: %v, want a at 486 MiB", got)
	}
	if ds, _ := Decide(balloonSnap(5, 205, vm("a", 512, 486, 100)), cfg, st); len(targets(ds)) != 0 {
		t.Fatalf("MOM acted %v before its 10 s interval", targets(ds))
	}
	// No pressure: grow by 5%.
	ds, _ = Decide(balloonSnap(10, 1000, vm("a", 512, 400, 100)), cfg, st)
	if got := targets(ds); got["a"] != 420 {
		t.Fatalf("MOM without pressure: %v, want a at 420 MiB", got)
	}
}

// A guest whose balloon can deflate on OOM keeps its MemTotal (470 of 512
// MiB, 42 reserved by its kernel) and counts the balloon as used: its
// floor is still the reserve + what it actively uses + the margin.
func TestBalloonFloorWithDeflateOnOOM(t *testing.T) {
	cfg := balloonConfig()
	for _, g := range []struct {
		name                   string
		actual, total, availMi uint64
	}{
		{"full", 512, 470, 352},
		{"ballooned, MemTotal kept", 256, 470, 96},
		{"ballooned, MemTotal reduced", 256, 214, 96},
	} {
		w := vm("a", 512, g.actual, 0)
		w.Guest.TotalBytes, w.Guest.AvailableBytes = int64(g.total*mi), int64(g.availMi*mi)
		st := State{}
		st.Balloon.faults = map[string]guestFaults{}
		if v := st.Balloon.view(w, cfg, t0); v.floor != (42+118+32)*mi {
			t.Errorf("%s: floor %d MiB, want %d", g.name, v.floor/mi, 42+118+32)
		}
	}
}

func TestBalloonGrowingGuestGetsItsMemoryBeforeItRunsOut(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 60)), balloonConfig(), settled(vm("a", 512, 512, 60)))
	// The balloon reaches 132 MiB; stats are trusted once it stood still.
	_, st = Decide(balloonSnap(1, 20, vm("a", 512, 132, 60)), balloonConfig(), st)
	_, st = Decide(balloonSnap(2, 20, vm("a", 512, 132, 60)), balloonConfig(), st)
	// Active memory up by 40 MiB in a second, 32 MiB still available.
	ds, _ := Decide(balloonSnap(3, 20, vm("a", 512, 132, 100)), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 || !strings.Contains(ds[0].Reason, "grew") {
		t.Fatalf("targets %v (%v), want a growing guest back at 512 MiB", got, ds)
	}
	// The same growth back to the 100 MiB its floor still holds (its
	// workload exited and starts again) leaves its margin: not need.
	_, st = Decide(balloonSnap(0, 20, vm("r", 512, 512, 100)), balloonConfig(), settled(vm("r", 512, 512, 100)))
	_, st = Decide(balloonSnap(1, 20, vm("r", 512, 132, 60)), balloonConfig(), st)
	_, st = Decide(balloonSnap(2, 20, vm("r", 512, 132, 60)), balloonConfig(), st)
	if ds, _ := Decide(balloonSnap(3, 20, vm("r", 512, 132, 100)), balloonConfig(), st); len(targets(ds)) != 0 {
		t.Fatalf("a guest back at the active memory its floor held was deflated: %v", ds)
	}
	// Its floor held the peak for balloonPeakSeconds, not just 10 s.
	if ds, _ := Decide(balloonSnap(30, 20, vm("r", 512, 132, 60)), balloonConfig(), st); len(targets(ds)) != 0 {
		t.Fatalf("30 s after its peak the guest was ballooned below it: %v", targets(ds))
	}
	// A workload that runs just under its peak for 100 s and then exits:
	// the hold counts from its last use (100 s), not from its first.
	st = settled(vm("p", 512, 512, 100))
	for sec := 0.0; sec <= 100; sec += 5 {
		_, st = Decide(balloonSnap(sec, 300, vm("p", 512, 512, 99)), balloonConfig(), st)
	}
	_, st = Decide(balloonSnap(105, 300, vm("p", 512, 512, 60)), balloonConfig(), st)
	if ds, _ := Decide(balloonSnap(150, 20, vm("p", 512, 512, 60)), balloonConfig(), st); targets(ds)["p"] != 132 {
		t.Fatalf("50 s after its workload last used its peak: targets %v, want p at 132 MiB (its peak of 100 held)", targets(ds))
	}
	if ds, _ := Decide(balloonSnap(161, 20, vm("p", 512, 512, 60)), balloonConfig(), st); targets(ds)["p"] != 92 {
		t.Fatalf("61 s after its workload last used its peak: targets %v, want p at 92 MiB", targets(ds))
	}
	// Growth below the threshold (16 MiB) with memory to spare is not need.
	_, st = Decide(balloonSnap(0, 20, vm("b", 512, 512, 100)), balloonConfig(), settled(vm("b", 512, 512, 100)))
	_, st = Decide(balloonSnap(1, 20, vm("b", 512, 200, 90)), balloonConfig(), st)
	_, st = Decide(balloonSnap(2, 20, vm("b", 512, 200, 90)), balloonConfig(), st)
	if ds, _ := Decide(balloonSnap(3, 20, vm("b", 512, 200, 100)), balloonConfig(), st); targets(ds)["b"] == 512 {
		t.Fatalf("a guest that grew by 10 MiB with 100 MiB available was given all its memory back")
	}
}

// Stats taken before the balloon moved do not match its size now: a guest
// whose balloon just moved is not judged on them.
func TestBalloonDistrustsStatsFromBeforeAMove(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	// The balloon is at 132 MiB but the stats still show 300 MiB available
	// (taken at 512): active would read as -168 MiB, then jump.
	stale := vm("a", 512, 132, 0)
	stale.Guest.AvailableBytes = 300 * mi
	_, st = Decide(balloonSnap(1, 20, stale), balloonConfig(), st)
	ds, _ := Decide(balloonSnap(1.25, 20, vm("a", 512, 132, 110)), balloonConfig(), st)
	if _, touched := targets(ds)["a"]; touched {
		t.Fatalf("acted on stats from before the balloon moved: %v", ds)
	}
}

func TestBalloonGuestThatDeflatedOnOOMGetsItsMemory(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	_, st = Decide(balloonSnap(1, 20, vm("a", 512, 132, 100)), balloonConfig(), st)
	// The guest released 40 MiB of balloon on its own.
	ds, _ := Decide(balloonSnap(2, 20, vm("a", 512, 172, 100)), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 {
		t.Fatalf("targets %v, want a guest that deflated on OOM back at 512 MiB", got)
	}
}

// On OOM the balloon driver gives back 1 MiB at a time, as fast as the
// guest allocates: a guest that grows slowly deflates by less than 8 MiB
// between two reads of its memory, and is still deflating on OOM.
func TestBalloonGuestDeflatingOnOOMSlowlyGetsItsMemory(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	_, st = Decide(balloonSnap(1, 20, vm("a", 512, 132, 100)), balloonConfig(), st)
	var ds []Decision
	for i, cur := range []uint64{133, 137, 141, 145} {
		var round []Decision
		round, st = Decide(balloonSnap(1.25+0.25*float64(i), 20, vm("a", 512, cur, 100)), balloonConfig(), st)
		ds = append(ds, round...)
	}
	if got := targets(ds); got["a"] != 512 || len(ds) != 1 || !strings.Contains(ds[0].Reason, "OOM") {
		t.Fatalf("targets %v (%v), want a guest deflating on OOM back at 512 MiB", got, ds)
	}
}

// A guest deflating to a target below its maximum (the high state gives
// back what is free) is not deflating on OOM, though it grew and QEMU
// rounds it past its target by part of a page: measured, 1639 B past
// 297.8 MiB; taken for OOM, it was given all 512 MiB.
func TestBalloonGuestReachingItsTargetIsNotDeflatingOnOOM(t *testing.T) {
	_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), settled(vm("a", 512, 512, 100)))
	_, st = Decide(balloonSnap(1, 20, vm("a", 512, 132, 100)), balloonConfig(), st)
	st.Balloon.Targets["a"] = 200*mi + 10000 // a partial deflation's target
	_, st = Decide(balloonSnap(1.5, 300, vm("a", 512, 132, 100)), balloonConfig(), st)
	reached := vm("a", 512, 200, 100)
	reached.Guest.MemoryBytes += 10000 + 1639
	// The host is clear: only a needy guest would be given memory.
	if ds, _ := Decide(balloonSnap(2, 300, reached), balloonConfig(), st); len(targets(ds)) != 0 {
		t.Fatalf("a guest that reached its target was given more: %v", ds)
	}
}

func TestBalloonLeavesBootingAndGrowingGuestsAlone(t *testing.T) {
	// Seen for the first time: it boots; not ballooned even in the low state.
	if ds, _ := Decide(balloonSnap(0, 20, vm("new", 512, 512, 100)), balloonConfig(), State{}); len(targets(ds)) != 0 {
		t.Fatalf("a guest seen for the first time was ballooned: %v", targets(ds))
	}
	// Seen while it boots (no stats yet), its stats first at 0 s: left
	// alone for 10 s from then, not from when it was first seen — a TCG
	// guest's boot can outlast the settle time.
	booting := vm("b", 512, 512, 100)
	booting.Guest.TotalBytes, booting.Guest.AvailableBytes = 0, -1
	_, boot := Decide(balloonSnap(-30, 20, booting), balloonConfig(), State{})
	_, boot = Decide(balloonSnap(0, 20, vm("b", 512, 512, 100)), balloonConfig(), boot)
	if ds, _ := Decide(balloonSnap(5, 20, vm("b", 512, 512, 100)), balloonConfig(), boot); len(targets(ds)) != 0 {
		t.Fatalf("a guest ballooned 5 s after its first stats: %v", targets(ds))
	}
	if ds, _ := Decide(balloonSnap(11, 20, vm("b", 512, 512, 100)), balloonConfig(), boot); targets(ds)["b"] != 132 {
		t.Fatalf("targets %v 11 s after its first stats, want b at its floor (132 MiB)", targets(ds))
	}
	// Settled, then its active memory grows by 10 MiB: left alone for 10 s.
	st := settled(vm("a", 512, 512, 100))
	_, st = Decide(balloonSnap(0, 300, vm("a", 512, 512, 110)), balloonConfig(), st)
	if ds, _ := Decide(balloonSnap(5, 20, vm("a", 512, 512, 110)), balloonConfig(), st); len(targets(ds)) != 0 {
		t.Fatalf("a guest that grew 5 s ago was ballooned: %v", targets(ds))
	}
	if ds, _ := Decide(balloonSnap(11, 20, vm("a", 512, 512, 110)), balloonConfig(), st); targets(ds)["a"] != 142 {
		t.Fatalf("targets %v 11 s after the growth, want a at its floor (142 MiB)", targets(ds))
	}
}

func TestBalloonForgetsAVMMadeAgain(t *testing.T) {
	// "a" is ballooned to 132 MiB; then its VM is made again under the
	// same name (a density step's next VMs), at its full 512 MiB.
	first, again := vm("a", 512, 512, 100), vm("a", 512, 512, 100)
	first.Instance, again.Instance = 1, 2
	_, st := Decide(balloonSnap(0, 20, first), balloonConfig(), settled(first))
	ballooned := vm("a", 512, 132, 100)
	ballooned.Instance = 1
	_, st = Decide(balloonSnap(1, 20, ballooned), balloonConfig(), st)
	_, st = Decide(balloonSnap(2, 20, ballooned), balloonConfig(), st)
	// Decide leaves the state it is given alone: a round whose result is
	// dropped changes nothing for the next.
	_, _ = Decide(balloonSnap(3, 20, again), balloonConfig(), st)
	// The old one's target and lowest memory would make the new one a
	// guest that deflated its balloon on OOM; it is a new guest: left
	// alone while it settles.
	for _, sec := range []float64{3, 5, 9} {
		var ds []Decision
		if ds, st = Decide(balloonSnap(sec, 20, again), balloonConfig(), st); len(targets(ds)) != 0 {
			t.Fatalf("%g s: a VM made again was treated as its predecessor: %v", sec, ds)
		}
	}
	if ds, _ := Decide(balloonSnap(14, 20, again), balloonConfig(), st); targets(ds)["a"] != 132 {
		t.Fatalf("settled, the new VM: targets %v, want its floor 132 MiB", targets(ds))
	}
}

// A VM that leaves, or whose balloon does (its QMP socket gone), is
// forgotten, ballooned or not: a long-running agent on a node whose VMs
// come and go keeps nothing of them.
func TestBalloonForgetsAVMThatLeft(t *testing.T) {
	for _, c := range []struct {
		name  string
		after []Workload
	}{
		{"left", nil},
		{"balloon gone", []Workload{{Name: "a", Processes: 1}}},
	} {
		_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), balloonConfig(), State{})
		if len(st.Balloon.faults) != 1 {
			t.Fatalf("%s: the guest's history not kept while it runs: %v", c.name, st.Balloon.faults)
		}
		_, st = Decide(balloonSnap(1, 20, c.after...), balloonConfig(), st)
		if len(st.Balloon.faults)+len(st.Balloon.Targets)+len(st.Balloon.changed)+len(st.Balloon.hold) != 0 {
			t.Fatalf("%s: still remembered: faults %v, targets %v", c.name, st.Balloon.faults, st.Balloon.Targets)
		}
	}
}

func TestBalloonStartMargin(t *testing.T) {
	// Stats first at 0 s, settled at 11 s in the low state: the floor is
	// 100 MiB active + the 32 MiB margin + 32 MiB of start room while the
	// guest is young. Its workload then starts and populates: using the
	// start room is not need (available memory is judged against half the
	// first margin, 16 MiB; growth against 16 MiB + the start room), so 24
	// or 44 MiB keep the balloon and 52 MiB (12 MiB left) does not.
	// Without the start room the floor is 132 MiB and 24 MiB leaves 8:
	// needy, deflated in full.
	for _, c := range []struct {
		startSeconds     float64
		populateMi       uint64
		wantFloorMi      uint64
		wantAfterStartMi uint64 // 0: no change
		wantAfterYouthMi uint64 // target once young no more, 0: not checked
	}{
		{startSeconds: 60, populateMi: 24, wantFloorMi: 164, wantAfterYouthMi: 156},
		{startSeconds: 60, populateMi: 44, wantFloorMi: 164},
		{startSeconds: 60, populateMi: 52, wantFloorMi: 164, wantAfterStartMi: 512},
		{startSeconds: 0, populateMi: 24, wantFloorMi: 132, wantAfterStartMi: 512},
	} {
		name := fmt.Sprintf("start %g s, populate %d MiB", c.startSeconds, c.populateMi)
		cfg := balloonConfig()
		cfg.BalloonStartSeconds = c.startSeconds
		_, st := Decide(balloonSnap(0, 20, vm("a", 512, 512, 100)), cfg, State{})
		ds, st := Decide(balloonSnap(11, 20, vm("a", 512, 512, 100)), cfg, st)
		if got := targets(ds)["a"]; got != c.wantFloorMi {
			t.Fatalf("%s: target %d MiB, want the floor %d", name, got, c.wantFloorMi)
		}
		floor, active := c.wantFloorMi, 100+c.populateMi
		_, st = Decide(balloonSnap(14, 20, vm("a", 512, floor, 100)), cfg, st)
		ds, st = Decide(balloonSnap(15, 20, vm("a", 512, floor, active)), cfg, st)
		if got := targets(ds)["a"]; got != c.wantAfterStartMi {
			t.Fatalf("%s: target %d MiB after the populate, want %d (%v)", name, got, c.wantAfterStartMi, ds)
		}
		if c.wantAfterYouthMi == 0 {
			continue
		}
		// Still low: young until 60 s, then the floor is active + one
		// margin again.
		if ds, _ := Decide(balloonSnap(59, 20, vm("a", 512, floor, active)), cfg, st); len(targets(ds)) != 0 {
			t.Fatalf("%s: a young guest ballooned into its start room: %v", name, targets(ds))
		}
		ds, _ = Decide(balloonSnap(61, 20, vm("a", 512, floor, active)), cfg, st)
		if got := targets(ds)["a"]; got != c.wantAfterYouthMi {
			t.Fatalf("%s: young no more, target %d MiB, want %d", name, got, c.wantAfterYouthMi)
		}
	}
}

func TestBalloonsHoldEviction(t *testing.T) {
	// 2 GiB RAM, 1 GiB swap: the threshold is 2 GiB + 0.8 GiB = 2867.2 MiB.
	sample := func(sec float64, usedMi uint64) Sample {
		return Sample{Time: at(sec), Scope: Scope{RAMBytes: 2 * gi, SwapBytes: gi, WorkingSetBytes: 2 * gi, SwapUsedBytes: usedMi*mi - 2*gi}}
	}
	util := func(usedMi uint64) Signal {
		return above(SignalSwapUtilization, float64(usedMi*mi), 2*gi+0.8*gi, "bytes")
	}
	swapIn := Signal{Name: SignalSwapIn, Value: 5000, Threshold: 1000, Firing: true}
	for _, c := range []struct {
		name             string
		usedThenMi       uint64 // 3 s ago
		usedMi           uint64
		reclaimingMi     uint64
		balloonMovedSecs float64 // ago
		extra            []Signal
		want             bool
	}{
		{"use falling, balloons owe more than the excess", 2990, 2928, 560, 1, nil, true},
		{"use rising: balloons take free pages the host never had", 2900, 2928, 560, 1, nil, false},
		{"use flat", 2928, 2928, 560, 1, nil, false},
		{"nothing asked of the balloons", 2990, 2928, 0, 1, nil, false},
		{"balloons owe less than the excess", 2990, 2928, 50, 1, nil, false},
		{"balloons stalled", 2990, 2928, 560, balloonProgressSeconds + 0.5, nil, false},
		{"the node thrashes as well", 2990, 2928, 560, 1, []Signal{swapIn}, false},
		{"RAM + swap nearly full", 3050, 3000, 900, 1, nil, false},
		{"just enough room", 3000, 2969, 560, 1, nil, true},
	} {
		b := BalloonState{ReclaimingBytes: c.reclaimingMi * mi, ReclaimedAt: at(10 - c.balloonMovedSecs)}
		window := []Sample{sample(6, c.usedThenMi+10), sample(7, c.usedThenMi), sample(9, (c.usedThenMi+c.usedMi)/2), sample(10, c.usedMi)}
		signals := append([]Signal{util(c.usedMi)}, c.extra...)
		reason, got := balloonsHoldEviction(b, signals, window, at(10))
		if got != c.want {
			t.Errorf("%s: hold %v (%q), want %v", c.name, got, reason, c.want)
		}
	}
}

// After an eviction, while balloons bring the node's use down but not yet
// under the threshold, a second VM is not evicted; once the use stops
// falling, it is.
func TestBalloonsHoldASecondEvictionWhileUseFalls(t *testing.T) {
	snap := func(sec float64, swapUsedMi uint64, vms ...Workload) Snapshot {
		s := balloonSnap(sec, 20, vms...)
		s.Sample.Scope.SwapUsedBytes = swapUsedMi * mi // threshold: used 2867.2 MiB
		return s
	}
	cfg := balloonConfig()
	st := settled(vm("a", 512, 512, 100), vm("b", 512, 512, 300))
	// A victim chosen long ago is still leaving: no new eviction while the
	// balloons are asked to go to their floors (132 and 332 MiB).
	st.LastEviction, st.Evicting = at(-10), map[string]time.Time{"gone": at(-10)}
	gone := Workload{Name: "gone", Processes: 1, WorkingSetBytes: 100 * mi}
	ds, st := Decide(snap(0, 900, vm("a", 512, 512, 100), vm("b", 512, 512, 300), gone), cfg, st)
	if got := targets(ds); got["a"] != 132 || got["b"] != 332 {
		t.Fatalf("targets %v, want a 132 and b 332 MiB", got)
	}
	holds := 0
	for _, r := range []struct {
		sec        float64
		swapUsedMi uint64
		a, b       uint64 // the guests' memory, MiB
	}{{1, 890, 480, 500}, {2, 880, 440, 490}, {3, 870, 400, 480}} {
		ds, st = Decide(snap(r.sec, r.swapUsedMi, vm("a", 512, r.a, 100), vm("b", 512, r.b, 300)), cfg, st)
		for _, d := range ds {
			switch {
			case d.Action == ActionEvict:
				t.Fatalf("t=%gs: evicted %s while the balloons brought the use down", r.sec, d.Workload)
			case d.Action == ActionNone && strings.Contains(d.Reason, "balloons are returning"):
				holds++
			}
		}
	}
	if holds != 1 {
		t.Fatalf("%d hold lines, want 1 (when the hold starts)", holds)
	}
	// The balloons stop short; the use stops falling.
	_, st = Decide(snap(5, 870, vm("a", 512, 400, 100), vm("b", 512, 480, 300)), cfg, st)
	ds, _ = Decide(snap(7, 870, vm("a", 512, 400, 100), vm("b", 512, 480, 300)), cfg, st)
	evicted := false
	for _, d := range ds {
		evicted = evicted || d.Action == ActionEvict
	}
	if !evicted {
		t.Fatalf("no eviction once the use stopped falling: %+v", ds)
	}
}

// In the high state the balloons give back what is free beyond the goal
// (125 MiB here), the most ballooned guest first — not everything at once.
func TestBalloonHighDeflatesWhatIsFree(t *testing.T) {
	a, b := vm("a", 512, 512, 100), vm("b", 512, 512, 300)
	_, st := Decide(balloonSnap(0, 20, a, b), balloonConfig(), settled(a, b))
	// a at 132 (380 MiB ballooned), b at 332 (180 MiB); 525 MiB free: a
	// budget of 400 MiB, all of a's 380 and 20 of b's 180.
	ds, st := Decide(balloonSnap(5, 525, vm("a", 512, 132, 100), vm("b", 512, 332, 300)), balloonConfig(), st)
	if got := targets(ds); got["a"] != 512 || got["b"] != 352 {
		t.Fatalf("targets %v (MiB), want a back at 512 and b at 352", got)
	}
	// The guests have not used it yet: free memory is the same, and
	// nothing more is given.
	ds, st = Decide(balloonSnap(7, 525, vm("a", 512, 512, 100), vm("b", 512, 352, 300)), balloonConfig(), st)
	if got := targets(ds); len(got) != 0 {
		t.Fatalf("targets %v given again from the same free memory", got)
	}
	// More comes free: b gets it.
	ds, _ = Decide(balloonSnap(9, 625, vm("a", 512, 512, 100), vm("b", 512, 352, 300)), balloonConfig(), st)
	if got := targets(ds); got["b"] != 452 {
		t.Fatalf("targets %v, want b at 452 once 100 MiB more is free", got)
	}
}

// A round that asks a balloon to shrink a guest marks the balloons as
// reclaiming then (what an eviction hold waits on), before any guest has
// shrunk; one that only holds them does not.
func TestBalloonRequestMarksReclaiming(t *testing.T) {
	a, b := vm("a", 512, 512, 100), vm("b", 512, 512, 300)
	st := settled(a, b)
	ds, st := Decide(balloonSnap(0, 20, a, b), balloonConfig(), st)
	if len(targets(ds)) == 0 {
		t.Fatal("no balloon asked to shrink with 20 MiB free")
	}
	if !st.Balloon.ReclaimedAt.Equal(at(0)) || st.Balloon.ReclaimingBytes == 0 {
		t.Fatalf("reclaimed at %v, reclaiming %d B; want at %v and > 0", st.Balloon.ReclaimedAt, st.Balloon.ReclaimingBytes, at(0))
	}
}
