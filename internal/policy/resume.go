package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Parked is a workload the agent parked: saved to disk (a libvirt
// domain's managed save), its memory free, to be started again when the
// scope has room for it (Config.ResumeParked).
type Parked struct {
	Name     string `json:"name"`
	Priority int    `json:"priority"`
	// MemoryBytes is what it takes back when started: its RAM.
	MemoryBytes uint64    `json:"memory_bytes"`
	ParkedAt    time.Time `json:"parked_at"`
}

// ResumeState is what the resume controller carries between rounds.
type ResumeState struct {
	// Candidate is the parked workload the scope has had room for since
	// RoomSince.
	Candidate string    `json:"candidate,omitempty"`
	RoomSince time.Time `json:"room_since,omitzero"`
	// Resuming is the workload last asked to start, until it is no longer
	// parked or EvictionDeadlineSeconds after ResumingAt: no second one
	// starts before the first one's memory is counted.
	Resuming   string    `json:"resuming,omitempty"`
	ResumingAt time.Time `json:"resuming_at,omitzero"`
}

// decideResume starts the parked workload of highest priority (then the
// one parked first) once the scope has had room for it, for
// ResumeHoldSeconds: RAM + swapUtilizationThresholdFactor × the swap its
// workloads may use, less what they use, at least its memory plus
// ResumeMarginBytes. The room is measured against the eviction threshold,
// so a resume cannot make the swap signal fire by itself. quiet says
// nothing else holds it back: the scope readable, no signal firing, no
// eviction in progress or in its cool-down. scope is the sample's, with
// the usable swap.
func decideResume(snap Snapshot, cfg Config, st *State, scope Scope, quiet bool) []Decision {
	r := &st.Resume
	if !cfg.ResumeParked {
		*r = ResumeState{}
		return nil
	}
	now := snap.Sample.Time
	if r.Resuming != "" {
		still := slices.ContainsFunc(snap.Parked, func(p Parked) bool { return p.Name == r.Resuming })
		if still && now.Sub(r.ResumingAt).Seconds() < cfg.EvictionDeadlineSeconds {
			return nil
		}
		r.Resuming, r.ResumingAt = "", time.Time{}
	}
	if !quiet || len(snap.Parked) == 0 {
		r.Candidate, r.RoomSince = "", time.Time{}
		return nil
	}
	cand := slices.MinFunc(snap.Parked, func(a, b Parked) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.ParkedAt.Compare(b.ParkedAt), cmp.Compare(a.Name, b.Name))
	})
	limit := float64(scope.RAMBytes) + cfg.SwapUtilizationThresholdFactor*float64(scope.SwapBytes)
	room := limit - float64(scope.UsedBytes())
	need := float64(cand.MemoryBytes) + cfg.ResumeMarginBytes
	if room < need {
		r.Candidate, r.RoomSince = "", time.Time{}
		return nil
	}
	if r.Candidate != cand.Name || r.RoomSince.IsZero() {
		r.Candidate, r.RoomSince = cand.Name, now
	}
	held := now.Sub(r.RoomSince).Seconds()
	if held < cfg.ResumeHoldSeconds {
		return nil
	}
	*r = ResumeState{Resuming: cand.Name, ResumingAt: now}
	return []Decision{{Time: now, Action: ActionResume, Workload: cand.Name,
		Reason: fmt.Sprintf("room for it for %.1f s: %.0f B below the threshold (RAM + %g × swap), at least its %d B + a margin of %.0f B; priority %d, the highest of %d parked",
			held, room, cfg.SwapUtilizationThresholdFactor, cand.MemoryBytes, cfg.ResumeMarginBytes, cand.Priority, len(snap.Parked))}}
}
