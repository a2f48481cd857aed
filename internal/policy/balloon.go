package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Balloon policies (Config.BalloonPolicy).
const (
	// BalloonHeadroom moves between memory states on the scope's free
	// memory and sizes each guest's balloon from the guest's own stats.
	BalloonHeadroom = "headroom"
	// BalloonMOM is oVirt MOM's default balloon.rules, for comparison.
	BalloonMOM = "mom"
)

// Memory states of the scope, after VMware ESX's (BalloonState.HostState).
const (
	MemHigh  = "high"  // plenty free: balloons deflate at once
	MemClear = "clear" // enough free: balloons hold, starved guests grow
	MemSoft  = "soft"  // short: balloon the guests with the most idle memory
	MemHard  = "hard"  // shorter: balloon harder (the host also swaps)
	MemLow   = "low"   // critical: every guest to its floor (eviction does the rest)
)

// memStates are the states from best to worst with their lower bound, as
// a multiple of minFree: a state is entered when free memory falls below
// its bound and left for a better one when free memory is back above that
// one's bound × memStateHysteresis.
var memStates = []struct {
	name  string
	bound float64
}{{MemHigh, 4}, {MemClear, 1}, {MemSoft, 0.64}, {MemHard, 0.32}, {MemLow, 0}}

const memStateHysteresis = 1.25

// MinFreeBytes is VMware's minFree for a host of ramBytes — 899 MiB for the
// first 28 GiB plus 1% of the rest — scaled down in proportion for scopes
// under 28 GiB (3.1% of their RAM) so a small node gets small thresholds.
func MinFreeBytes(ramBytes uint64) uint64 {
	const first = 28 << 30
	if ramBytes <= first {
		return uint64(float64(ramBytes) * (899 << 20) / first)
	}
	return 899<<20 + (ramBytes-first)/100
}

// Balloon controller constants.
const (
	// balloonStepSeconds: one change per VM per interval (the guest's stats
	// refresh once a second).
	balloonStepSeconds = 1.0
	// balloonMinChangeBytes: smaller changes are not worth a request.
	balloonMinChangeBytes = 4 << 20
	// balloonStaleSeconds: older guest stats are not trusted to inflate.
	balloonStaleSeconds = 5.0
	// balloonGrownHoldSeconds: a guest given memory back because it needed
	// it is not ballooned again for this long.
	balloonGrownHoldSeconds = 30.0
	// balloonFaultsPerSecond: a guest faulting (major faults or swap-ins,
	// pages/s) faster than this needs its memory.
	balloonFaultsPerSecond = 50.0
	// balloonGrowthBytes: a guest whose active memory grew by more than
	// this since the last round (or half its margin, if more) is growing
	// and needs its memory before it runs out.
	balloonGrowthBytes = 16 << 20
	// balloonSettleSeconds: a guest is ballooned only once its active
	// memory has not grown (by balloonSettleBytes) for this long — not
	// while it boots or its workload populates.
	balloonSettleSeconds = 10.0
	balloonSettleBytes   = 8 << 20
	// balloonPeakSeconds: a guest's floor holds its peak active memory for
	// this long — fast up, slow down, as ESX's working-set estimate: a
	// workload that exits and starts again (a density ramp's next step, a
	// batch job's next run) finds its memory still there.
	balloonPeakSeconds = 60.0
	// balloonSelfDeflateBytes: a guest above its target that grew by more
	// than this since the target was set deflated its balloon itself (on
	// OOM) and needs its memory.
	balloonSelfDeflateBytes = 8 << 20
	// balloonTargetSlackBytes: a guest reaches its target only to QEMU's
	// page rounding; within this of it, a guest that grew was deflated to
	// its target, not beyond it on OOM.
	balloonTargetSlackBytes = 1 << 20
	// MOM's balloon.rules constants.
	momPressureThreshold  = 0.20
	momPressureCritical   = 0.05
	momMinGuestFree       = 0.20
	momMaxChangeFraction  = 0.05
	momMinChangeFraction  = 0.0025
	momMaxFreeAfterGrowth = 0.20
	// balloonProgressSeconds: balloons asked to shrink, or shrinking, within
	// this long are reclaiming: an eviction for swap utilization waits for
	// them (balloonsHoldEviction).
	balloonProgressSeconds = 3.0
	// balloonHoldRoomFraction: the eviction waits only while RAM + swap keep
	// at least this share of swap free (the kernel's OOM point is RAM + swap).
	balloonHoldRoomFraction = 0.1
)

// BalloonSetting is set_balloon's payload.
type BalloonSetting struct {
	// TargetBytes is the guest's memory after the balloon.
	TargetBytes uint64 `json:"target_bytes"`
	// FromBytes is its memory when decided; MaxBytes its configured RAM;
	// FloorBytes the least it may have (active memory plus a margin).
	FromBytes  uint64 `json:"from_bytes"`
	MaxBytes   uint64 `json:"max_bytes"`
	FloorBytes uint64 `json:"floor_bytes,omitempty"`
	// HostState and FreeBytes are the scope's memory state and free
	// memory when decided.
	HostState string `json:"host_state"`
	FreeBytes uint64 `json:"free_bytes"`
}

// MemoryStateChange is memory_state's payload: the scope moved from one
// memory state to another ("" before the first round).
type MemoryStateChange struct {
	From         string `json:"from"`           // the state left: high, clear, soft, hard or low
	To           string `json:"to"`             // the state entered
	FreeBytes    uint64 `json:"free_bytes"`     // the scope's free memory when it changed
	MinFreeBytes uint64 `json:"min_free_bytes"` // the scope's minFree, the unit of the states' bounds
}

// BalloonState is what the balloon controller remembers between rounds.
type BalloonState struct {
	HostState    string    `json:"host_state"`
	Since        time.Time `json:"since"`
	MinFreeBytes uint64    `json:"min_free_bytes"`
	// Targets are the balloon targets decided per VM.
	Targets map[string]uint64 `json:"targets"`
	// ReclaimingBytes is what the balloons were asked for and have not yet
	// returned (each guest's memory above its target, summed); ReclaimedAt
	// is when a balloon last shrank a guest or was asked to.
	ReclaimingBytes uint64    `json:"reclaiming_bytes"`
	ReclaimedAt     time.Time `json:"reclaimed_at,omitzero"`
	// changed is when each VM's target last changed; hold is until when a
	// guest that was given memory back is left alone.
	changed map[string]time.Time
	hold    map[string]time.Time
	// faults are each guest's fault counters at the previous round.
	faults  map[string]guestFaults
	lastMOM time.Time
	// givenInHigh is what deflation gave back since the state last became
	// high: a deflated guest uses its memory only later, so free memory
	// does not show it yet.
	givenInHigh uint64
}

// guestFaults is a guest's counters and active memory at a round.
type guestFaults struct {
	at          time.Time
	majorFaults int64
	swapInBytes int64
	activeBytes uint64 // 0 if unknown
	memoryBytes uint64 // the guest's memory after the balloon
	// lowestBytes is the least memory seen since targetBytes became the
	// guest's target: a guest that grew from there past its target
	// deflated its balloon itself, however slowly (on OOM the driver
	// gives back 1 MiB at a time, as fast as the guest allocates).
	lowestBytes, targetBytes uint64
	// settled is when the guest's active memory last grew (or the guest
	// was first seen, or its stats first trusted) plus
	// balloonSettleSeconds: it is not ballooned before.
	settled time.Time
	// firstTrustedAt is when the guest's stats were first trusted (zero
	// before). A VM is seen from QEMU's start; its stats come only once
	// its balloon driver is up, partway through a boot that can last 20 s
	// under TCG.
	firstTrustedAt time.Time
	// peakActiveBytes is the most active memory seen, peakAt when the
	// guest was last within balloonSettleBytes of it: the floor holds it
	// for balloonPeakSeconds from then, so stats taken before the
	// balloon's last move never make the guest look smaller than it is,
	// and a workload that starts again finds room.
	peakActiveBytes uint64
	peakAt          time.Time
	// movedAt is when the balloon last moved (the guest's memory changed):
	// guest stats taken before then do not match its memory now.
	movedAt time.Time
}

// vmView is one VM as the controller sees it in a round.
type vmView struct {
	w        Workload
	cur, max uint64
	floor    uint64 // 0 when the guest's stats cannot be trusted
	needy    string // why the guest needs memory now ("" if it does not)
	settling bool   // booting or growing: not ballooned yet
	// statsBeforeChange: the guest's stats predate its last target change.
	statsBeforeChange bool
	lastTarget        uint64
	// shrank: the guest's memory fell since the last round.
	shrank bool
}

// decideBalloon is the balloon part of Decide.
func decideBalloon(snap Snapshot, cfg Config, st *State) []Decision {
	if !cfg.Balloon || snap.Sample.ScopeErr != "" {
		return nil
	}
	b := &st.Balloon // its maps made by State.clone
	now := snap.Sample.Time
	scope := snap.Sample.Scope
	free := scope.RAMBytes - min(scope.RAMBytes, scope.WorkingSetBytes+scope.CompressedRAMBytes)
	b.MinFreeBytes = uint64(cfg.BalloonMinFreeBytes)
	if b.MinFreeBytes == 0 {
		b.MinFreeBytes = MinFreeBytes(scope.RAMBytes)
	}

	var vms []vmView
	present := map[string]bool{}
	for _, w := range snap.Workloads {
		if w.Guest == nil || w.Guest.MaxBytes == 0 || w.Err != "" || w.Protected {
			continue
		}
		present[w.Name] = true
		vms = append(vms, b.view(w, cfg, now))
	}
	// A VM gone (or no longer one with a balloon) is forgotten, all of it.
	isVM := func(name string) bool { return present[name] }
	forgetAbsent(b.Targets, isVM, b.forget)
	forgetAbsent(b.faults, isVM, b.forget)
	forgetAbsent(b.changed, isVM, b.forget)
	forgetAbsent(b.hold, isVM, b.forget)

	var out []Decision
	if next := nextMemState(b.HostState, free, b.MinFreeBytes); next != b.HostState {
		// A line per change, so a report can draw the states over time.
		out = append(out, Decision{Time: now, Action: ActionMemoryState,
			Reason:      fmt.Sprintf("%d B free, minFree %d B: %s", free, b.MinFreeBytes, next),
			MemoryState: &MemoryStateChange{From: b.HostState, To: next, FreeBytes: free, MinFreeBytes: b.MinFreeBytes}})
		b.HostState, b.Since, b.givenInHigh = next, now, 0
	}
	if cfg.BalloonPolicy == BalloonMOM {
		out = append(out, b.decideMOM(vms, free, scope.RAMBytes, now, cfg)...)
	} else {
		out = append(out, b.decideStates(vms, free, now)...)
	}
	// What the balloons still owe, with this round's targets; and whether
	// a balloon shrank a guest since the last round or was asked to now.
	b.ReclaimingBytes = 0
	for _, v := range vms {
		if t, ok := b.Targets[v.w.Name]; ok && v.cur > t {
			b.ReclaimingBytes += v.cur - t
		}
		if v.shrank {
			b.ReclaimedAt = now
		}
	}
	for _, d := range out {
		if d.Balloon != nil && d.Balloon.TargetBytes < d.Balloon.FromBytes {
			b.ReclaimedAt = now
		}
	}
	return out
}

// view reads one VM's guest stats: its floor (what its kernel reserved,
// what it actively uses, and a margin) and whether it needs memory now —
// its available memory is low, its active memory grows, it deflated the
// balloon itself (on OOM), or it faults.
func (b *BalloonState) view(w Workload, cfg Config, now time.Time) vmView {
	g := w.Guest
	v := vmView{w: w, cur: g.MemoryBytes, max: g.MaxBytes, lastTarget: g.MaxBytes}
	if t, ok := b.Targets[w.Name]; ok {
		v.lastTarget = t
	}
	prev, seen := b.faults[w.Name]
	recent := seen && now.Sub(prev.at).Seconds() <= 3
	movedAt := prev.movedAt // zero for a guest first seen: not known to have moved
	if seen && absDiff(v.cur, prev.memoryBytes) >= 2<<20 {
		movedAt = now
	}
	v.shrank = seen && prev.memoryBytes >= v.cur+1<<20
	active, peak, peakAt := prev.activeBytes, prev.peakActiveBytes, prev.peakAt
	// The guest's stats are up to a poll old, its memory is read live:
	// they match only once the balloon has stood still since the stats
	// were taken. Until then the last trusted figures stand.
	trusted := g.TotalBytes > 0 && g.AvailableBytes >= 0 && g.AgeSeconds <= balloonStaleSeconds &&
		now.Sub(movedAt).Seconds() > g.AgeSeconds+0.5
	firstTrustedAt := prev.firstTrustedAt
	if trusted && firstTrustedAt.IsZero() {
		firstTrustedAt = now
	}
	margin := uint64(max(cfg.BalloonGuestMarginBytes, cfg.BalloonGuestMarginFraction*float64(g.MaxBytes)))
	// startRoom: a guest that just booted gets a second margin above its
	// floor, room for the workload it starts. Using that room is what it
	// is for: need is still judged against the first margin.
	var startRoom uint64
	if !firstTrustedAt.IsZero() && now.Sub(firstTrustedAt).Seconds() < cfg.BalloonStartSeconds {
		startRoom = margin
	}
	if trusted {
		// MemTotal leaves out what the guest's kernel reserved, and the
		// balloon too unless the driver may deflate on OOM (then the
		// balloon's pages count as used, not available).
		total := uint64(g.TotalBytes)
		var usable uint64
		if total > v.cur { // the balloon is not subtracted from MemTotal
			reserved := v.max - min(total, v.max)
			usable = v.cur - min(reserved, v.cur)
		} else {
			usable = total
		}
		active = usable - min(uint64(g.AvailableBytes), usable)
		switch {
		case !(seen && prev.peakActiveBytes >= active && now.Sub(prev.peakAt).Seconds() < balloonPeakSeconds):
			peak, peakAt = active, now
		case active+balloonSettleBytes >= prev.peakActiveBytes:
			// Still at its peak (to the jitter of a running workload):
			// the hold counts from its last use, not its first.
			peakAt = now
		}
	}
	if peak > 0 && g.TotalBytes > 0 && g.AgeSeconds <= balloonStaleSeconds {
		// reserved: what the guest's kernel keeps outside MemTotal.
		reserved := v.max - min(uint64(g.TotalBytes), v.max)
		if uint64(g.TotalBytes) <= v.cur {
			reserved = v.cur - uint64(g.TotalBytes)
		}
		v.floor = min(reserved+peak+margin+startRoom, v.max)
		// Stats older than the balloon's last move do not size it again.
		if t, ok := b.changed[w.Name]; ok && now.Sub(t).Seconds() <= g.AgeSeconds {
			v.statsBeforeChange = true
		}
	}
	lowest := v.cur
	if seen && prev.targetBytes == v.lastTarget && prev.lowestBytes > 0 {
		lowest = min(prev.lowestBytes, v.cur)
	}
	grown := max(uint64(balloonGrowthBytes), margin/2) + startRoom
	// Growing back to a level the floor still holds is not a guest
	// running out: only growth beyond it is.
	was := prev.activeBytes
	if now.Sub(prev.peakAt).Seconds() < balloonPeakSeconds {
		was = max(was, prev.peakActiveBytes)
	}
	switch {
	case v.cur >= v.max:
	case v.floor > 0 && uint64(g.AvailableBytes) < margin/2:
		v.needy = fmt.Sprintf("its available memory is down to %d B (margin %d B)", g.AvailableBytes, margin)
	case trusted && recent && prev.activeBytes > 0 && active > was+grown:
		v.needy = fmt.Sprintf("its active memory grew by %d B in %.1f s, %d B beyond what its floor held", active-prev.activeBytes, now.Sub(prev.at).Seconds(), active-was)
	case recent && v.cur > v.lastTarget+balloonTargetSlackBytes && v.cur > lowest+balloonSelfDeflateBytes:
		v.needy = fmt.Sprintf("it deflated its balloon itself (on OOM): %d B above its target", v.cur-v.lastTarget)
	case recent && g.MajorFaults >= 0 && prev.majorFaults >= 0:
		dt := now.Sub(prev.at).Seconds()
		rate := float64(max(g.MajorFaults-prev.majorFaults, 0)) / dt
		if g.SwapInBytes >= 0 && prev.swapInBytes >= 0 {
			rate += float64(max(g.SwapInBytes-prev.swapInBytes, 0)) / pageBytes / dt
		}
		if dt > 0 && rate > balloonFaultsPerSecond {
			v.needy = fmt.Sprintf("it faults %.0f pages/s", rate)
		}
	}
	settled := prev.settled
	firstStats := trusted && prev.firstTrustedAt.IsZero()
	if !seen || firstStats || (trusted && prev.activeBytes > 0 && active > prev.activeBytes+balloonSettleBytes) {
		settled = now.Add(balloonSettleSeconds * time.Second)
	}
	v.settling = now.Before(settled)
	b.faults[w.Name] = guestFaults{at: now, majorFaults: g.MajorFaults, swapInBytes: g.SwapInBytes, activeBytes: active,
		memoryBytes: v.cur, lowestBytes: lowest, targetBytes: v.lastTarget, settled: settled, firstTrustedAt: firstTrustedAt, peakActiveBytes: peak, peakAt: peakAt, movedAt: movedAt}
	return v
}

// forget drops what the controller remembered of a VM: its target, its
// last moves and its guest's history.
func (b *BalloonState) forget(name string) {
	delete(b.Targets, name)
	delete(b.changed, name)
	delete(b.hold, name)
	delete(b.faults, name)
}

// nextMemState applies the states' bounds with hysteresis.
func nextMemState(cur string, free, minFree uint64) string {
	f := float64(free) / float64(max(minFree, 1))
	idx := -1
	for i, s := range memStates {
		if s.name == cur {
			idx = i
		}
	}
	if idx < 0 { // no state yet: the one free memory is in
		for _, s := range memStates {
			if f >= s.bound {
				return s.name
			}
		}
	}
	for idx < len(memStates)-1 && f < memStates[idx].bound {
		idx++
	}
	for idx > 0 && f >= memStates[idx-1].bound*memStateHysteresis {
		idx--
	}
	return memStates[idx].name
}

func (b *BalloonState) set(out []Decision, v vmView, target uint64, now time.Time, free uint64, reason string) []Decision {
	target = min(target, v.max)
	if target == v.lastTarget || (absDiff(target, v.lastTarget) < balloonMinChangeBytes && target != v.max) {
		return out
	}
	if t, ok := b.changed[v.w.Name]; ok && now.Sub(t).Seconds() < balloonStepSeconds {
		return out
	}
	b.Targets[v.w.Name] = target
	b.changed[v.w.Name] = now
	return append(out, Decision{Time: now, Action: ActionSetBalloon, Workload: v.w.Name, Reason: reason,
		Balloon: &BalloonSetting{TargetBytes: target, FromBytes: v.cur, MaxBytes: v.max, FloorBytes: v.floor,
			HostState: b.HostState, FreeBytes: free}})
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// decideStates is headroom's controller.
func (b *BalloonState) decideStates(vms []vmView, free uint64, now time.Time) []Decision {
	var out []Decision
	// A guest that needs memory gets all of it back at once, whatever the
	// host's state: ballooning below a guest's working set kills it.
	// (Giving it only what it needs, to spare the free page reporting of
	// the rest, was measured and not kept: docs/validation/balloon-density.md.)
	for _, v := range vms {
		if v.needy != "" && v.lastTarget < v.max {
			b.hold[v.w.Name] = now.Add(balloonGrownHoldSeconds * time.Second)
			out = b.set(out, v, v.max, now, free, fmt.Sprintf("the guest needs its memory: %s → back to %d B", v.needy, v.max))
		}
	}
	switch b.HostState {
	case MemHigh:
		return b.deflate(out, vms, free, now)
	case MemClear:
		return out
	}

	// Soft, hard, low: reclaim what brings free memory back above the
	// clear state's exit bound, counting what balloons already asked for
	// and not yet returned, from the guests with the most idle memory.
	goal := uint64(float64(b.MinFreeBytes) * memStateHysteresis)
	var pending uint64
	for _, v := range vms {
		if v.cur > v.lastTarget {
			pending += v.cur - v.lastTarget
		}
	}
	need := int64(goal) - int64(free) - int64(pending)
	if b.HostState == MemLow {
		need = 1 << 62 // every guest to its floor
	}
	if need <= 0 {
		return out
	}
	// room is what a guest can still give: from its memory (or its
	// target, if lower and not yet reached) down to its floor.
	room := func(v vmView) uint64 {
		if base := min(v.cur, v.lastTarget); base > v.floor {
			return base - v.floor
		}
		return 0
	}
	candidates := slices.DeleteFunc(slices.Clone(vms), func(v vmView) bool {
		return v.floor == 0 || v.needy != "" || v.settling || v.statsBeforeChange || now.Before(b.hold[v.w.Name]) || room(v) == 0
	})
	slices.SortFunc(candidates, func(a, c vmView) int {
		return cmp.Or(cmp.Compare(room(c), room(a)), cmp.Compare(a.w.Name, c.w.Name))
	})
	for _, v := range candidates {
		if need <= 0 {
			break
		}
		base := min(v.cur, v.lastTarget)
		take := min(uint64(need), base-v.floor)
		out = b.set(out, v, base-take, now, free, fmt.Sprintf("%s: %d B free of %d B wanted (minFree %d B); the guest has %d B idle above its floor of %d B (active memory + margin): balloon %d B",
			b.HostState, free, goal, b.MinFreeBytes, base-v.floor, v.floor, take))
		need -= int64(take)
	}
	return out
}

// deflate gives ballooned guests their memory back in the high state, the
// most ballooned first, up to what is free beyond the reclaim goal
// (minFree × memStateHysteresis): handing out more than the host has sends
// it straight back to low, and the balloons must inflate again — measured
// on a 1.5 GiB node, free page reporting returned 335 MiB at once, the
// state went high, every balloon deflated and the node was low 2 s later.
// What was given since the state became high counts against the budget.
func (b *BalloonState) deflate(out []Decision, vms []vmView, free uint64, now time.Time) []Decision {
	budget := int64(free) - int64(float64(b.MinFreeBytes)*memStateHysteresis) - int64(b.givenInHigh)
	ballooned := slices.DeleteFunc(slices.Clone(vms), func(v vmView) bool { return v.lastTarget >= v.max })
	slices.SortFunc(ballooned, func(a, c vmView) int {
		return cmp.Or(cmp.Compare(c.max-c.lastTarget, a.max-a.lastTarget), cmp.Compare(a.w.Name, c.w.Name))
	})
	for _, v := range ballooned {
		if budget < balloonMinChangeBytes {
			break
		}
		give := min(uint64(budget), v.max-v.lastTarget)
		n := len(out)
		out = b.set(out, v, v.lastTarget+give, now, free, fmt.Sprintf("the host has room (%s: %d B free, minFree %d B): deflate by %d B", b.HostState, free, b.MinFreeBytes, give))
		if len(out) > n {
			b.givenInHigh += give
			budget -= int64(give)
		}
	}
	return out
}

// decideMOM applies oVirt MOM's default balloon.rules every
// BalloonMOMIntervalSeconds: under pressure (free < 20% of RAM) every
// guest shrinks by at most 5% towards its used memory plus a free share
// scaled by the pressure; otherwise every ballooned guest grows by 5%
// (and at least to 20% free).
func (b *BalloonState) decideMOM(vms []vmView, free, ram uint64, now time.Time, cfg Config) []Decision {
	if !b.lastMOM.IsZero() && now.Sub(b.lastMOM).Seconds() < cfg.BalloonMOMIntervalSeconds {
		return nil
	}
	b.lastMOM = now
	hostFree := float64(free) / float64(max(ram, 1))
	var out []Decision
	for _, v := range vms {
		g := v.w.Guest
		if g.FreeBytes < 0 || g.AgeSeconds > balloonStaleSeconds {
			continue
		}
		used := float64(v.cur) - float64(g.FreeBytes)
		cur := float64(v.cur)
		var size float64
		var why string
		if hostFree < momPressureThreshold {
			guestFree := momMinGuestFree * hostFree / momPressureThreshold
			if hostFree <= momPressureCritical {
				guestFree = hostFree - 0.05
			}
			size = max(cur*(1-momMaxChangeFraction), used+guestFree*cur)
			if size > cur {
				continue
			}
			why = fmt.Sprintf("MOM: host free %.1f%% < %.0f%%: shrink by at most %.0f%% towards used + %.1f%% free", 100*hostFree, 100*momPressureThreshold, 100*momMaxChangeFraction, 100*guestFree)
		} else {
			if v.cur >= v.max {
				continue
			}
			size = max(cur*(1+momMaxChangeFraction), used+momMaxFreeAfterGrowth*float64(v.max))
			why = fmt.Sprintf("MOM: host free %.1f%% ≥ %.0f%%: grow by %.0f%%", 100*hostFree, 100*momPressureThreshold, 100*momMaxChangeFraction)
		}
		target := uint64(min(max(size, 0), float64(v.max)))
		if absDiff(target, v.cur) <= uint64(momMinChangeFraction*cur) {
			continue
		}
		b.Targets[v.w.Name] = target
		out = append(out, Decision{Time: now, Action: ActionSetBalloon, Workload: v.w.Name, Reason: why,
			Balloon: &BalloonSetting{TargetBytes: target, FromBytes: v.cur, MaxBytes: v.max, HostState: b.HostState, FreeBytes: free}})
	}
	return out
}

// balloonsHoldEviction says whether an eviction should wait for the
// balloons, and why: swap utilization is the only signal firing, the
// scope's use (RAM + swap) fell over the last balloonProgressSeconds while
// balloons moved, what they still owe would bring it back under the
// threshold, and RAM + swap keep room. Evicting a VM then loses a whole
// guest for memory that is already coming back, as the kubelet frees
// images before it evicts pods. Balloons moving is not enough: a balloon
// takes the guest's free pages first, and free page reporting has already
// given those to the host — measured in a boot burst of 7 TCG guests,
// balloons shrank the guests by 475 MiB in 12 s while the node's use grew
// by 370 MiB. Rates (swap-ins, stall time) say the node thrashes now: they
// never wait. window is oldest first, its last sample now's.
func balloonsHoldEviction(b BalloonState, signals []Signal, window []Sample, now time.Time) (string, bool) {
	if len(window) == 0 || b.ReclaimingBytes == 0 || b.ReclaimedAt.IsZero() || now.Sub(b.ReclaimedAt).Seconds() > balloonProgressSeconds {
		return "", false
	}
	var util *Signal
	for i := range signals {
		if !signals[i].Firing {
			continue
		}
		if signals[i].Name != SignalSwapUtilization {
			return "", false
		}
		util = &signals[i]
	}
	if util == nil || util.Value-float64(b.ReclaimingBytes) > util.Threshold {
		return "", false
	}
	scope := window[len(window)-1].Scope
	// The use balloonProgressSeconds ago (or the window's oldest, if the
	// window is shorter, but at least minRateSpanSeconds back).
	var then *Sample
	for i := len(window) - 1; i >= 0; i-- {
		age := now.Sub(window[i].Time).Seconds()
		if age >= minRateSpanSeconds && window[i].ScopeErr == "" {
			then = &window[i]
		}
		if age >= balloonProgressSeconds {
			break
		}
	}
	if then == nil {
		return "", false
	}
	fell := int64(then.Scope.UsedBytes()) - int64(scope.UsedBytes())
	if fell <= 0 {
		return "", false
	}
	room := float64(scope.RAMBytes+scope.SwapBytes) - float64(scope.UsedBytes())
	if room < balloonHoldRoomFraction*float64(scope.SwapBytes) {
		return "", false
	}
	return fmt.Sprintf("balloons are returning %d B: use fell %d B in %.1f s to %.0f B (threshold %.0f B), RAM + swap keep %.0f B free; the eviction waits while it falls",
		b.ReclaimingBytes, fell, now.Sub(then.Time).Seconds(), util.Value, util.Threshold, room), true
}
