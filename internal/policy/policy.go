// Package policy is the agent's decide step: from observed samples and
// workloads it computes swap allowances, evaluates eviction signals over a
// sliding window, ranks eviction victims and bounds each eviction (its
// deadline, a refused one's back-off, abandonment that expires), paces
// ksmd by what merging saves (the KSM governor, ksm.go) and sets VMs'
// balloon targets from memory states (balloon.go). It is pure — no I/O, no
// clock, no globals: the state it needs between rounds is State — so the
// agent, the simulator (both through internal/loop) and tests run the same
// decisions.
package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Config holds the thresholds. The JSON names are the YAML config keys;
// wasp-agent's environment variables map onto the first four.
type Config struct {
	// SwapUtilizationThresholdFactor: evict when the scope's working set
	// plus swap used exceeds RAM + factor × swap (SWAP_UTILIZATION_THRESHOLD_FACTOR).
	SwapUtilizationThresholdFactor float64 `json:"swapUtilizationThresholdFactor"`
	// MaxAverageSwapInPagesPerSecond: evict when swap-ins averaged over the
	// window exceed this (MAX_AVERAGE_SWAP_IN_PAGES_PER_SECOND); 0 disables.
	MaxAverageSwapInPagesPerSecond float64 `json:"maxAverageSwapInPagesPerSecond"`
	// MaxAverageSwapOutPagesPerSecond: likewise for swap-outs; 0 disables.
	MaxAverageSwapOutPagesPerSecond float64 `json:"maxAverageSwapOutPagesPerSecond"`
	// AverageWindowSizeSeconds is the sliding window for rate, PSI and trend
	// signals (AVERAGE_WINDOW_SIZE_SECONDS).
	AverageWindowSizeSeconds float64 `json:"averageWindowSizeSeconds"`
	// PSIFullPercent: evict when memory "full" stall time is above this
	// share of the window; 0 disables.
	PSIFullPercent float64 `json:"psiFullPercent"`
	// PSISomePercent: likewise for "some" stall time; 0 disables.
	PSISomePercent float64 `json:"psiSomePercent"`
	// ExhaustionHorizonSeconds: evict when the trend of working set + swap
	// over the window reaches RAM + swap (the kernel's OOM point) within
	// this many seconds; 0 disables.
	ExhaustionHorizonSeconds float64 `json:"exhaustionHorizonSeconds"`
	// CooldownSeconds is the wait after an eviction before another; the
	// window restarts at each eviction so the re-check sees fresh data.
	CooldownSeconds float64 `json:"cooldownSeconds"`
	// EvictionDeadlineSeconds bounds an eviction: a victim still present
	// this long after it was chosen (processes that survive the kill, a VM
	// that answers nothing) is given up on for AbandonRetrySeconds, and
	// the next-ranked workload may be evicted.
	EvictionDeadlineSeconds float64 `json:"evictionDeadlineSeconds"`
	// AbandonRetrySeconds is how long a victim given up on is not chosen
	// again; after it, it is a candidate like any other (its own decision
	// line says so).
	AbandonRetrySeconds float64 `json:"abandonRetrySeconds"`
	// RefusalBackoffMaxSeconds caps the back-off of a workload whose
	// eviction was refused (a PodDisruptionBudget, a QMP or API error):
	// it is not chosen for 1 s, then twice as long after each further
	// refusal, up to this. The next candidate goes at once, without the
	// cool-down: nothing was freed.
	RefusalBackoffMaxSeconds float64 `json:"refusalBackoffMaxSeconds"`

	// KSMMode is off (KSM left as it is), advisor (the kernel's advisor
	// paces ksmd) or governor (decideKSM paces it by observed profit).
	KSMMode string `json:"ksmMode"`
	// KSMMaxCPUPercent is the governor's burst: the share of a core ksmd
	// may use while there is much to gain (merging costs about the same
	// CPU time however fast it goes).
	KSMMaxCPUPercent float64 `json:"ksmMaxCPUPercent"`
	// KSMIdleCPUPercent is the share of a core ksmd uses once a full scan
	// no longer pays (0: ksmd stops).
	KSMIdleCPUPercent float64 `json:"ksmIdleCPUPercent"`
	// KSMMinProfitBytesPerCPUSecond: a burst ends when a full scan gained
	// less than this per ksmd CPU-second.
	KSMMinProfitBytesPerCPUSecond float64 `json:"ksmMinProfitBytesPerCPUSecond"`
	// KSMRAMNeedFraction: the governor bursts only when the scope's
	// working set and swap use reach this fraction of its RAM.
	KSMRAMNeedFraction float64 `json:"ksmRAMNeedFraction"`

	// Balloon turns the balloon controller on for VMs whose metadata
	// names a QMP socket.
	Balloon bool `json:"balloon"`
	// BalloonPolicy is headroom (memory states, guest-aware targets) or
	// mom (oVirt MOM's balloon.rules, for comparison).
	BalloonPolicy string `json:"balloonPolicy"`
	// BalloonMinFreeBytes is the scope's minFree, the unit of the memory
	// states' bounds; 0 takes VMware's rule scaled to the scope.
	BalloonMinFreeBytes float64 `json:"balloonMinFreeBytes"`
	// A guest is never ballooned below its active memory plus a margin:
	// the larger of BalloonGuestMarginBytes and BalloonGuestMarginFraction
	// of its configured RAM.
	BalloonGuestMarginBytes    float64 `json:"balloonGuestMarginBytes"`
	BalloonGuestMarginFraction float64 `json:"balloonGuestMarginFraction"`
	// BalloonStartSeconds: for this long after a guest's statistics first
	// come, its floor has a second margin of start room, and using that
	// room is not need. A guest that has just booted has not shown its
	// working set yet: what its workload populates as it starts should
	// fit above its floor, not send the controller to deflate it in full
	// (docs/validation/balloon-density.md). 0 turns it off.
	BalloonStartSeconds float64 `json:"balloonStartSeconds"`
	// BalloonMOMIntervalSeconds is MOM's policy interval.
	BalloonMOMIntervalSeconds float64 `json:"balloonMOMIntervalSeconds"`

	// ResumeParked starts parked workloads (Snapshot.Parked) again, in
	// priority order, once the scope has room for one: ResumeMarginBytes
	// above its memory, under the eviction threshold, for
	// ResumeHoldSeconds (decideResume).
	ResumeParked      bool    `json:"resumeParked"`
	ResumeMarginBytes float64 `json:"resumeMarginBytes"`
	ResumeHoldSeconds float64 `json:"resumeHoldSeconds"`
}

// DefaultConfig is what the agent runs without configuration. Rate and PSI
// signals are off until set or calibrated (`headroom agent calibrate`):
// a fixed default cannot fit every swap device, which is why wasp-agent's
// 1000 pages/s default misfired. The exhaustion trend is off too: during a
// burst of allocation (guests booting, workloads populating) a linear trend
// cannot know where growth stops and evicts workloads that would have fit;
// enable it for slow, steady growth such as leaks.
func DefaultConfig() Config {
	return Config{
		SwapUtilizationThresholdFactor: 0.8,
		AverageWindowSizeSeconds:       10,
		CooldownSeconds:                5,
		EvictionDeadlineSeconds:        30,
		AbandonRetrySeconds:            600,
		RefusalBackoffMaxSeconds:       60,
		KSMMode:                        KSMOff,
		KSMMaxCPUPercent:               50,
		KSMIdleCPUPercent:              1,
		KSMMinProfitBytesPerCPUSecond:  16 << 20,
		KSMRAMNeedFraction:             0.5,
		BalloonPolicy:                  BalloonHeadroom,
		BalloonGuestMarginBytes:        32 << 20,
		BalloonGuestMarginFraction:     0.1,
		BalloonStartSeconds:            60,
		BalloonMOMIntervalSeconds:      10,
		ResumeMarginBytes:              256 << 20,
		ResumeHoldSeconds:              30,
	}
}

// Validate reports the first invalid setting, naming its key.
func (c Config) Validate() error {
	switch {
	case !(c.SwapUtilizationThresholdFactor > 0 && c.SwapUtilizationThresholdFactor <= 1):
		return fmt.Errorf("swapUtilizationThresholdFactor must be in (0,1], got %g", c.SwapUtilizationThresholdFactor)
	case !(c.MaxAverageSwapInPagesPerSecond >= 0):
		return fmt.Errorf("maxAverageSwapInPagesPerSecond must be >= 0, got %g", c.MaxAverageSwapInPagesPerSecond)
	case !(c.MaxAverageSwapOutPagesPerSecond >= 0):
		return fmt.Errorf("maxAverageSwapOutPagesPerSecond must be >= 0, got %g", c.MaxAverageSwapOutPagesPerSecond)
	case !(c.AverageWindowSizeSeconds >= 1 && c.AverageWindowSizeSeconds <= 3600):
		return fmt.Errorf("averageWindowSizeSeconds must be in [1,3600], got %g", c.AverageWindowSizeSeconds)
	case !(c.PSIFullPercent >= 0 && c.PSIFullPercent <= 100):
		return fmt.Errorf("psiFullPercent must be in [0,100], got %g", c.PSIFullPercent)
	case !(c.PSISomePercent >= 0 && c.PSISomePercent <= 100):
		return fmt.Errorf("psiSomePercent must be in [0,100], got %g", c.PSISomePercent)
	case !(c.ExhaustionHorizonSeconds >= 0):
		return fmt.Errorf("exhaustionHorizonSeconds must be >= 0, got %g", c.ExhaustionHorizonSeconds)
	case !(c.CooldownSeconds >= 0):
		return fmt.Errorf("cooldownSeconds must be >= 0, got %g", c.CooldownSeconds)
	case !(c.EvictionDeadlineSeconds >= 1 && c.EvictionDeadlineSeconds <= 3600):
		return fmt.Errorf("evictionDeadlineSeconds must be in [1,3600], got %g", c.EvictionDeadlineSeconds)
	case !(c.AbandonRetrySeconds >= c.EvictionDeadlineSeconds && c.AbandonRetrySeconds <= 86400):
		return fmt.Errorf("abandonRetrySeconds must be in [evictionDeadlineSeconds,86400], got %g", c.AbandonRetrySeconds)
	case !(c.RefusalBackoffMaxSeconds >= refusalBackoffSeconds && c.RefusalBackoffMaxSeconds <= 3600):
		return fmt.Errorf("refusalBackoffMaxSeconds must be in [%g,3600], got %g", float64(refusalBackoffSeconds), c.RefusalBackoffMaxSeconds)
	case c.KSMMode != KSMOff && c.KSMMode != KSMAdvisor && c.KSMMode != KSMGovernor && c.KSMMode != "":
		return fmt.Errorf("ksmMode must be off, advisor or governor, got %q", c.KSMMode)
	case !(c.KSMMaxCPUPercent > 0 && c.KSMMaxCPUPercent <= 100):
		return fmt.Errorf("ksmMaxCPUPercent must be in (0,100], got %g", c.KSMMaxCPUPercent)
	case !(c.KSMIdleCPUPercent >= 0 && c.KSMIdleCPUPercent <= c.KSMMaxCPUPercent):
		return fmt.Errorf("ksmIdleCPUPercent must be in [0,ksmMaxCPUPercent], got %g", c.KSMIdleCPUPercent)
	case !(c.KSMMinProfitBytesPerCPUSecond >= 0):
		return fmt.Errorf("ksmMinProfitBytesPerCPUSecond must be >= 0, got %g", c.KSMMinProfitBytesPerCPUSecond)
	case !(c.KSMRAMNeedFraction >= 0 && c.KSMRAMNeedFraction <= 1):
		return fmt.Errorf("ksmRAMNeedFraction must be in [0,1], got %g", c.KSMRAMNeedFraction)
	case c.BalloonPolicy != BalloonHeadroom && c.BalloonPolicy != BalloonMOM && c.BalloonPolicy != "":
		return fmt.Errorf("balloonPolicy must be headroom or mom, got %q", c.BalloonPolicy)
	case !(c.BalloonMinFreeBytes >= 0):
		return fmt.Errorf("balloonMinFreeBytes must be >= 0, got %g", c.BalloonMinFreeBytes)
	case !(c.BalloonGuestMarginBytes >= 0):
		return fmt.Errorf("balloonGuestMarginBytes must be >= 0, got %g", c.BalloonGuestMarginBytes)
	case !(c.BalloonGuestMarginFraction >= 0 && c.BalloonGuestMarginFraction < 1):
		return fmt.Errorf("balloonGuestMarginFraction must be in [0,1), got %g", c.BalloonGuestMarginFraction)
	case !(c.BalloonStartSeconds >= 0 && c.BalloonStartSeconds <= 3600):
		return fmt.Errorf("balloonStartSeconds must be in [0,3600], got %g", c.BalloonStartSeconds)
	case !(c.BalloonMOMIntervalSeconds >= 1 && c.BalloonMOMIntervalSeconds <= 600):
		return fmt.Errorf("balloonMOMIntervalSeconds must be in [1,600], got %g", c.BalloonMOMIntervalSeconds)
	case !(c.ResumeMarginBytes >= 0):
		return fmt.Errorf("resumeMarginBytes must be >= 0, got %g", c.ResumeMarginBytes)
	case !(c.ResumeHoldSeconds >= 0 && c.ResumeHoldSeconds <= 3600):
		return fmt.Errorf("resumeHoldSeconds must be in [0,3600], got %g", c.ResumeHoldSeconds)
	}
	return nil
}

// Scope is the node (or node-like cgroup subtree) the agent protects.
type Scope struct {
	RAMBytes        uint64 `json:"ram_bytes"`
	SwapBytes       uint64 `json:"swap_bytes"` // swap the scope may use
	WorkingSetBytes uint64 `json:"working_set_bytes"`
	SwapUsedBytes   uint64 `json:"swap_used_bytes"`
	// CompressedRAMBytes is RAM that compressed swap tiers (zram, zswap)
	// hold for the scope's swapped pages and the scope's own usage does
	// not count: a page there is in swap and, compressed, in RAM.
	CompressedRAMBytes uint64 `json:"compressed_ram_bytes,omitempty"`
}

// UsedBytes is what the scope's memory takes from RAM and swap together.
func (s Scope) UsedBytes() uint64 { return s.WorkingSetBytes + s.SwapUsedBytes + s.CompressedRAMBytes }

// Sample is one observation of the scope and of raw cumulative counters.
// An Err field says the matching data could not be read; signals that need
// it are then not evaluated.
type Sample struct {
	Time          time.Time `json:"time"`
	Scope         Scope     `json:"scope"`
	ScopeErr      string    `json:"scope_error,omitempty"`
	PswpIn        uint64    `json:"pswpin"`
	PswpOut       uint64    `json:"pswpout"`
	VMStatErr     string    `json:"vmstat_error,omitempty"`
	PSISomeMicros uint64    `json:"psi_some_micros"`
	PSIFullMicros uint64    `json:"psi_full_micros"`
	PSIErr        string    `json:"psi_error,omitempty"`
	// KSM is ksmd's state, read when a KSM mode is on (nil otherwise or
	// when unreadable: KSMErr says why).
	KSM    *KSMSample `json:"ksm,omitempty"`
	KSMErr string     `json:"ksm_error,omitempty"`
}

// Workload is one child cgroup of the scope with its metadata.
type Workload struct {
	Name string `json:"name"`
	// Instance tells incarnations of a name apart (the agent: its cgroup's
	// ID; 0: unknown). A workload whose Instance changed is a new one:
	// nothing remembered of the old one (its swap allowance, eviction or
	// balloon) carries over (forgetRenewed).
	Instance     uint64 `json:"instance,omitempty"`
	Priority     int    `json:"priority"`
	RequestBytes uint64 `json:"request_bytes"`
	Protected    bool   `json:"protected"`
	// SwapRule says how the swap allowance is set: SwapByRequest (the
	// default, ""), SwapNone, or SwapExternal.
	SwapRule string `json:"swap_rule,omitempty"`
	// ExternalSwapBytes is, with SwapExternal, the swap limit someone else
	// (the kubelet's LimitedSwap) set: the allowance, read and not written.
	ExternalSwapBytes uint64 `json:"external_swap_bytes,omitempty"`
	Processes         int    `json:"processes"`
	// LimitBytes is the workload's memory limit; 0 if it has none.
	LimitBytes uint64 `json:"limit_bytes,omitempty"`
	// SwapUncapped says the platform cannot cap the workload's swap now
	// (cgroup v1 caps memory plus swap, so not without a memory limit):
	// its allowance is not written, and the ranking counts its swap above
	// the allowance it would have.
	SwapUncapped    bool   `json:"swap_uncapped,omitempty"`
	WorkingSetBytes uint64 `json:"working_set_bytes"`
	SwapBytes       uint64 `json:"swap_bytes"`
	// Err says the workload's stats could not be read: it is never ranked.
	Err string `json:"error,omitempty"`
	// Guest is a VM's own view of its memory (nil for other workloads).
	Guest *GuestMemory `json:"guest,omitempty"`
}

// GuestMemory is a VM guest's view of its memory, from its balloon
// driver's statistics; -1 where the guest does not report a value.
type GuestMemory struct {
	// MemoryBytes is the guest's RAM minus the balloon; MaxBytes its
	// configured RAM (0 if unknown).
	MemoryBytes     uint64 `json:"memory_bytes"`
	MaxBytes        uint64 `json:"max_bytes,omitempty"`
	FreeBytes       int64  `json:"free_bytes"`
	DiskCachesBytes int64  `json:"disk_caches_bytes"`
	TotalBytes      int64  `json:"total_bytes"`
	AvailableBytes  int64  `json:"available_bytes"`
	MajorFaults     int64  `json:"major_faults"`
	SwapInBytes     int64  `json:"swap_in_bytes"`
	SwapOutBytes    int64  `json:"swap_out_bytes"`
	// AgeSeconds is how old the statistics are.
	AgeSeconds float64 `json:"age_seconds"`
}

// Eviction results reported in an EvictionOutcome.
const (
	// EvictedGracefully: the workload left after the graceful request
	// (SIGTERM, or a VM's power-down).
	EvictedGracefully = "graceful"
	// EvictedForcibly: it had to be killed (SIGKILL, cgroup.kill, QMP quit).
	EvictedForcibly = "forced"
	// EvictionFailed: it could not be removed within its deadline
	// (processes survive the kill, a pod a finalizer holds): given up on.
	EvictionFailed = "failed"
	// EvictionRefused: the graceful request itself was refused (a
	// PodDisruptionBudget, a QMP, libvirt or API error, permission
	// denied): nothing was done, the workload is backed off and the next
	// candidate may go at once.
	EvictionRefused = "refused"
	// EvictionInterrupted: the agent stopped while the victim was still
	// leaving; it was left to finish on its own, never forced. Only the
	// decision log has it: a new agent finds the victim in its journal.
	EvictionInterrupted = "interrupted"
	// EvictedSaved: a libvirt domain's state went to disk (managed save)
	// and its RAM was freed; started again, it carries on.
	EvictedSaved = "saved"
)

// EvictionOutcome is how an eviction ended, reported by the agent's actor
// into the next snapshot.
type EvictionOutcome struct {
	Workload string `json:"workload"` // the victim
	Result   string `json:"result"`   // graceful, forced, saved, failed, refused or interrupted
	// Seconds from the eviction signal to the workload leaving (or to the
	// actor giving up).
	Seconds float64 `json:"seconds"`
	// FreedBytes is the workload's memory (working set and swap) that left
	// with it.
	FreedBytes uint64 `json:"freed_bytes"`
	Err        string `json:"error,omitempty"`
}

// Snapshot is the input of Decide.
type Snapshot struct {
	Sample    Sample     `json:"sample"`
	Workloads []Workload `json:"workloads"`
	// Outcomes are evictions that ended since the last snapshot.
	Outcomes []EvictionOutcome `json:"outcomes,omitempty"`
	// SwapResults are how the last set_swap decisions were applied.
	SwapResults []SwapResult `json:"swap_results,omitempty"`
	// Parked are the workloads the agent parked, not running now.
	Parked []Parked `json:"parked,omitempty"`
}

// State is what Decide carries between calls.
type State struct {
	// Window holds the samples of the current window, oldest first.
	Window []Sample `json:"-"`
	// LastEviction is when the last eviction was decided.
	LastEviction time.Time `json:"last_eviction"`
	// VictimGone is when the last victim's eviction was reported ended
	// (its processes gone, its memory freed): growth inside the cool-down
	// is measured from there. A workload missing from a snapshot is not
	// enough: a pod leaves the API before its processes exit.
	VictimGone time.Time `json:"victim_gone,omitzero"`
	// lastVictim is the workload last chosen for eviction.
	lastVictim string
	// victimLeft is when a victim was last found gone (listed no more, or
	// without processes) or its eviction reported ended (settling).
	victimLeft time.Time
	// Evicting lists victims not yet gone (still have processes), with
	// when each was chosen.
	Evicting map[string]time.Time `json:"evicting"`
	// Abandoned lists victims given up on (past the eviction deadline, or
	// their eviction failed), with when: not chosen again for
	// Config.AbandonRetrySeconds.
	Abandoned map[string]time.Time `json:"abandoned"`
	// Refused lists workloads whose eviction was refused, with their
	// back-off: not chosen before Until.
	Refused map[string]Refusal `json:"refused,omitempty"`
	// held is what the last eviction decision replaced (the eviction
	// before it and the window), put back if that eviction is refused:
	// nothing was freed, so no cool-down and no fresh window are owed.
	held *heldEviction
	// SwapAllowance is the allowance in force per workload: applied, as
	// its SwapResult confirmed.
	SwapAllowance map[string]uint64 `json:"swap_allowance"`
	// swapPending is an allowance decided and not yet confirmed;
	// swapRetry is when a refused one may be tried again.
	swapPending map[string]uint64
	swapRetry   map[string]swapBackoff
	// Signals are the signals evaluated by the last Decide.
	Signals []Signal `json:"signals"`
	// KSM is the KSM governor's state.
	KSM KSMState `json:"ksm"`
	// Balloon is the balloon controller's state.
	Balloon BalloonState `json:"balloon"`
	// Resume is the resume controller's state.
	Resume ResumeState `json:"resume,omitzero"`
	// instances are the workloads' Workload.Instance when last seen: one
	// made again under the same name starts with nothing remembered.
	instances map[string]uint64
	// lastNote avoids repeating the same non-action decision every tick.
	lastNote string
	// evictionHeld: balloons are holding a due eviction; the hold is
	// logged once, when it starts.
	evictionHeld bool
}

// Refusal is a refused workload's back-off.
type Refusal struct {
	// Until is when it may be chosen again.
	Until time.Time `json:"until"`
	// DelaySeconds is the back-off that led there (doubled at the next
	// refusal).
	DelaySeconds float64 `json:"delay_seconds"`
}

// refusalBackoffSeconds is a refused workload's first back-off.
const refusalBackoffSeconds = 1

type heldEviction struct {
	lastEviction time.Time
	window       []Sample
}

// Actions a Decision asks for.
const (
	ActionSetSwap = "set_swap"
	ActionEvict   = "evict"
	// ActionEvicted records how an eviction ended (its outcome).
	ActionEvicted = "evicted"
	// ActionAbandon gives up on an eviction that did not finish in time
	// or failed; the next-ranked workload may then be evicted.
	ActionAbandon = "abandon_eviction"
	// ActionAbandonExpired: a victim given up on may be chosen again.
	ActionAbandonExpired = "abandon_expired"
	// ActionResumeEviction: an eviction the agent before this one began
	// is waited for.
	ActionResumeEviction = "resume_eviction"
	// ActionSetKSM sets ksmd's pace.
	ActionSetKSM = "set_ksm"
	// ActionSetBalloon sets a VM's balloon target.
	ActionSetBalloon = "set_balloon"
	// ActionMemoryState records that the scope's memory state changed
	// (nothing to carry out).
	ActionMemoryState = "memory_state"
	// ActionResume starts a parked workload again (Config.ResumeParked).
	ActionResume = "resume"
	// ActionNone records why a firing signal led to no eviction.
	ActionNone = "none"
)

// Actions lists every action a decision line can carry.
var Actions = []string{ActionSetSwap, ActionEvict, ActionEvicted, ActionAbandon, ActionAbandonExpired,
	ActionResumeEviction, ActionSetKSM, ActionSetBalloon, ActionMemoryState, ActionResume, ActionNone}

// EvictionResults lists every result an EvictionOutcome can carry.
var EvictionResults = []string{EvictedGracefully, EvictedForcibly, EvictionFailed, EvictionRefused, EvictionInterrupted, EvictedSaved}

// Decision is one decided action with its reasons; it is logged as a JSON
// line. Besides the action, its subject and its reason, it carries the one
// payload its action needs.
type Decision struct {
	Time     time.Time `json:"time"`               // the sample's time the decision was made on
	Action   string    `json:"action"`             // what is to be done (the list above)
	Workload string    `json:"workload,omitempty"` // its subject ("" for the node's own: set_ksm, memory_state, none)
	Reason   string    `json:"reason"`             // why, with the numbers it was decided on
	// Swap is set_swap's allowance.
	Swap *SwapSetting `json:"swap,omitempty"`
	// Trigger is the firing signal of an eviction (or of a non-action
	// while a signal fires).
	Trigger *Trigger `json:"trigger,omitempty"`
	// Outcome is how an eviction ended (evicted).
	Outcome *EvictionOutcome `json:"outcome,omitempty"`
	// KSM is set_ksm's setting.
	KSM *KSMSetting `json:"ksm,omitempty"`
	// Balloon is set_balloon's target.
	Balloon *BalloonSetting `json:"balloon,omitempty"`
	// MemoryState is memory_state's change.
	MemoryState *MemoryStateChange `json:"memory_state,omitempty"`
}

// SwapSetting is a workload's swap allowance.
type SwapSetting struct {
	SwapBytes uint64 `json:"swap_bytes"` // the swap the workload may use
}

// Trigger is the signal that fired, with every signal evaluated at the time.
type Trigger struct {
	Signal    string   `json:"signal"`            // the first signal past its threshold
	Value     float64  `json:"value"`             // its value, in Unit
	Threshold float64  `json:"threshold"`         // its threshold, in Unit
	Unit      string   `json:"unit"`              // bytes, pages_per_second, percent or seconds
	Signals   []Signal `json:"signals,omitempty"` // every signal evaluated then (evictions)
}

func triggerOf(s *Signal, all []Signal) *Trigger {
	return &Trigger{Signal: s.Name, Value: s.Value, Threshold: s.Threshold, Unit: s.Unit, Signals: all}
}

// SwapResult is how the agent applied a set_swap decision: the kernel may
// refuse it (cgroup v1 refuses a limit below current usage).
type SwapResult struct {
	Workload  string `json:"workload"`
	SwapBytes uint64 `json:"swap_bytes"`
	Err       string `json:"error,omitempty"`
	// TriedAt is the decision's time: a refusal's retry wait counts from
	// it, not from the round that learns of the refusal (zero: that round).
	TriedAt time.Time `json:"tried_at,omitzero"`
}

// swapRetrySeconds is how long a refused allowance first waits before it
// is tried again: short, because the usual refusal is a cgroup v1 group
// whose memory limit is not written yet (a kubelet creates a pod's cgroup,
// then sets its limits), and the swap limit should follow within a
// second of the pod: at the agent's 0.5 s rounds, the round that learns
// of the refusal tries again. Each further refusal doubles the wait, up to
// swapRetryMaxSeconds (a group that can never take one is not retried,
// and logged, every round).
const (
	swapRetrySeconds    = 0.25
	swapRetryMaxSeconds = 64
)

// swapBackoff is when a refused allowance may be tried again, and the wait
// that led there.
type swapBackoff struct {
	at           time.Time
	delaySeconds float64
}

// Firing reports whether any signal of the last Decide was past its threshold.
func (st State) Firing() bool { return firstFiring(st.Signals) != nil }

// Decide is the policy: given the newest snapshot, the configuration and the
// carried state, it returns the actions to take and the next state.
func Decide(snap Snapshot, cfg Config, st State) ([]Decision, State) {
	st = st.clone()
	now := snap.Sample.Time
	var out []Decision
	present := make(map[string]*Workload, len(snap.Workloads))
	for i := range snap.Workloads {
		present[snap.Workloads[i].Name] = &snap.Workloads[i]
	}
	renewed := forgetRenewed(now, snap.Workloads, &st)
	// Outcomes before the window: a refusal puts back the window and the
	// eviction time its decision replaced.
	for _, o := range snap.Outcomes {
		out = append(out, st.endEviction(now, o, cfg, present, renewed))
	}
	sample := snap.Sample
	sample.Scope.SwapBytes = usableSwap(snap, st)
	st.Window = appendToWindow(st.Window, sample, cfg, st.LastEviction)
	for name, since := range st.Evicting {
		w, ok := present[name]
		switch {
		case !ok || w.Processes == 0:
			delete(st.Evicting, name)
			st.victimLeft = now
		case now.Sub(since).Seconds() >= cfg.EvictionDeadlineSeconds:
			delete(st.Evicting, name)
			st.Abandoned[name] = now
			out = append(out, Decision{Time: now, Action: ActionAbandon, Workload: name,
				Reason: fmt.Sprintf("still present %.1f s after it was chosen (%d processes), past the %g s eviction deadline; it is not chosen again for %g s and the next candidate may be evicted",
					now.Sub(since).Seconds(), w.Processes, cfg.EvictionDeadlineSeconds, cfg.AbandonRetrySeconds)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.Abandoned)) {
		if at := st.Abandoned[name]; now.Sub(at).Seconds() >= cfg.AbandonRetrySeconds {
			delete(st.Abandoned, name)
			out = append(out, Decision{Time: now, Action: ActionAbandonExpired, Workload: name,
				Reason: fmt.Sprintf("given up on %.1f s ago (abandonRetrySeconds %g); it may be chosen again", now.Sub(at).Seconds(), cfg.AbandonRetrySeconds)})
		}
	}
	for _, r := range snap.SwapResults {
		if renewed[r.Workload] {
			continue // written to the old group, or to the new one before it was seen: set again
		}
		delete(st.swapPending, r.Workload)
		if r.Err == "" {
			st.SwapAllowance[r.Workload] = r.SwapBytes
			delete(st.swapRetry, r.Workload)
		} else {
			delay := float64(swapRetrySeconds)
			if prev, ok := st.swapRetry[r.Workload]; ok {
				delay = min(2*prev.delaySeconds, swapRetryMaxSeconds)
			}
			tried := r.TriedAt
			if tried.IsZero() || tried.After(now) {
				tried = now
			}
			st.swapRetry[r.Workload] = swapBackoff{at: tried.Add(time.Duration(delay * float64(time.Second))), delaySeconds: delay}
		}
	}
	st.forgetGone(present)
	if snap.Sample.ScopeErr == "" {
		out = append(out, swapAllowances(snap, &st)...)
	}
	out = append(out, decideKSM(snap, cfg, &st)...)
	out = append(out, decideBalloon(snap, cfg, &st)...)

	signals, unreadable := Evaluate(st.Window, cfg)
	st.Signals = signals
	firing := firstFiring(signals)
	quiet := snap.Sample.ScopeErr == "" && firing == nil && len(st.Evicting) == 0 && !inCooldown(st, cfg, now)
	out = append(out, decideResume(snap, cfg, &st, sample.Scope, quiet)...)
	// oomFirst says why the cool-down is not waited for ("" if it is not skipped).
	var oomFirst string
	switch {
	case snap.Sample.ScopeErr != "":
		out = st.note(out, Decision{Time: now, Action: ActionNone, Reason: "scope stats unreadable, not acting: " + snap.Sample.ScopeErr})
		return out, st
	case firing == nil:
		st.evictionHeld = false
		if len(unreadable) > 0 {
			out = st.note(out, Decision{Time: now, Action: ActionNone, Reason: "signals not evaluated, data unreadable: " + fmt.Sprint(unreadable)})
		} else {
			st.lastNote = ""
		}
		return out, st
	case len(st.Evicting) > 0:
		// A victim that takes its time to leave (a long preStop hook, a
		// guest slow to power off) holds its memory meanwhile, and may
		// still grow: past the cool-down, at the OOM point, the kernel
		// would kill the others first, so the next candidate goes beside
		// it. (Within the cool-down the victim is given its usual time.)
		near := nearOOM(sample.Scope)
		if near == "" || inCooldown(st, cfg, now) {
			out = st.note(out, Decision{Time: now, Action: ActionNone, Trigger: triggerOf(firing, nil),
				Reason: "waiting for the previous victim to exit"})
			return out, st
		}
		oomFirst = fmt.Sprintf("%s while %s is still leaving", near, strings.Join(slices.Sorted(maps.Keys(st.Evicting)), ", "))
	case inCooldown(st, cfg, now):
		// Past this only when the OOM point would come first.
		if oomFirst = oomBeforeCooldownEnds(st, cfg, now); oomFirst == "" {
			return out, st
		}
	}
	if oomFirst == "" && settling(st, now) {
		out = st.note(out, Decision{Time: now, Action: ActionNone, Trigger: triggerOf(firing, nil),
			Reason: fmt.Sprintf("the last victim just left: the next is chosen on samples from %g s after, once its memory is freed", victimSettleSeconds)})
		return out, st
	}
	if reason, hold := balloonsHoldEviction(st.Balloon, signals, st.Window, now); hold {
		if !st.evictionHeld {
			st.evictionHeld = true
			out = append(out, Decision{Time: now, Action: ActionNone, Trigger: triggerOf(firing, signals), Reason: reason})
		}
		return out, st
	}
	st.evictionHeld = false

	ranked := Rank(slices.DeleteFunc(slices.Clone(snap.Workloads), func(w Workload) bool {
		_, abandoned := st.Abandoned[w.Name]
		_, leaving := st.Evicting[w.Name]
		r, refused := st.Refused[w.Name]
		return abandoned || leaving || refused && now.Before(r.Until)
	}), rankAllowances(snap, st))
	if len(ranked) == 0 {
		out = st.note(out, Decision{Time: now, Action: ActionNone, Trigger: triggerOf(firing, nil),
			Reason: "no evictable workload (all protected, empty, unreadable, given up on, leaving, or refused a moment ago)"})
		return out, st
	}
	victim := ranked[0]
	reason := rankReason(ranked, rankAllowances(snap, st))
	switch {
	case oomFirst != "" && len(st.Evicting) > 0:
		reason += fmt.Sprintf("; %.1f s after the last eviction: %s", now.Sub(st.LastEviction).Seconds(), oomFirst)
	case oomFirst != "":
		reason += fmt.Sprintf("; %.1f s after the last eviction, inside the %g s cool-down: %s",
			now.Sub(st.LastEviction).Seconds(), cfg.CooldownSeconds, oomFirst)
	}
	st.held = &heldEviction{lastEviction: st.LastEviction, window: st.Window}
	st.LastEviction, st.lastVictim = now, victim.Name
	st.Evicting[victim.Name] = now
	st.Window = nil // re-check on data gathered after this eviction
	st.lastNote = ""
	out = append(out, Decision{Time: now, Action: ActionEvict, Workload: victim.Name,
		Reason: reason, Trigger: triggerOf(firing, signals)})
	return out, st
}

// victimSettleSeconds is how long after the last victim was found gone
// (its processes gone, or its eviction reported ended) the next one waits:
// the kernel frees a heavily swapped process's memory over a fraction of
// a second after it exits (pages in the swap cache are reclaimed, not
// freed at exit), and a sample from then still holds it. Inside the
// cool-down this costs nothing; it matters after a victim slower to leave
// than the cool-down (a guest powering off, a long preStop hook). At the
// OOM point the next one goes without it: the kernel would not wait.
const victimSettleSeconds = 1.0

// settling says the last victim left less than victimSettleSeconds ago.
func settling(st State, now time.Time) bool {
	return !st.victimLeft.IsZero() && !st.victimLeft.Before(st.LastEviction) && now.Sub(st.victimLeft).Seconds() < victimSettleSeconds
}

// inCooldown says an eviction was decided less than the cool-down ago.
func inCooldown(st State, cfg Config, now time.Time) bool {
	return !st.LastEviction.IsZero() && now.Sub(st.LastEviction).Seconds() < cfg.CooldownSeconds
}

// nearOOMSwapFactor: a scope whose working set and swap fill its RAM and
// this share of the swap its workloads may use is at its OOM point.
const nearOOMSwapFactor = 0.95

// nearOOM says the scope is at its OOM point (within 5% of its swap of
// it), or "" if it is not (or has no swap to measure it by).
func nearOOM(s Scope) string {
	if s.SwapBytes > 0 && float64(s.UsedBytes()) >= float64(s.RAMBytes)+nearOOMSwapFactor*float64(s.SwapBytes) {
		return fmt.Sprintf("the scope is within %.0f%% of its swap of the OOM point", 100*(1-nearOOMSwapFactor))
	}
	return ""
}

// oomBeforeCooldownEnds says why the scope would reach the kernel's OOM
// point (RAM + the swap its workloads may use) before the cool-down ends,
// or "" if it would not: once the last victim's eviction was reported
// ended (its memory freed), it is within 5% of the swap of it, or,
// measured since then (at least a second of samples), its working set and
// swap grow fast enough to get there. A burst (VMs
// populating) fills a node faster than a cool-down lasts: in the
// simulator ten VMs starting on a 3 GiB node were OOM-killed 2.25 s after
// the agent's first eviction, 2.75 s before its cool-down ended. An
// eviction then waits only for the previous victim to be gone.
func oomBeforeCooldownEnds(st State, cfg Config, now time.Time) string {
	if len(st.Window) == 0 {
		return ""
	}
	last := st.Window[len(st.Window)-1]
	if last.ScopeErr != "" || last.Scope.SwapBytes == 0 {
		return ""
	}
	// Only on data from after the last victim's memory was freed.
	if st.VictimGone.IsZero() || st.VictimGone.Before(st.LastEviction) || last.Time.Before(st.VictimGone) {
		return ""
	}
	if near := nearOOM(last.Scope); near != "" {
		return near
	}
	i := 0
	for i < len(st.Window) && st.Window[i].Time.Before(st.VictimGone) {
		i++
	}
	since := st.Window[i:]
	if len(since) < 2 || last.Time.Sub(since[0].Time).Seconds() < rateSpanSeconds(cfg) {
		return ""
	}
	left := cfg.CooldownSeconds - now.Sub(st.LastEviction).Seconds()
	if secs, ok := secondsToExhaustion(since); ok && secs < left {
		return fmt.Sprintf("growing since the last victim left, the scope reaches its OOM point in %.1f s, %.1f s before the cool-down ends", secs, left-secs)
	}
	return ""
}

// endEviction takes an eviction's outcome into the state and returns its
// decision line. A refusal backs the workload off and puts back the
// cool-down and window its eviction replaced; a failure gives it up.
func (st *State) endEviction(now time.Time, o EvictionOutcome, cfg Config, present map[string]*Workload, renewed map[string]bool) Decision {
	delete(st.Evicting, o.Workload)
	last := o.Workload == st.lastVictim // even if it left the listing before
	_, listed := present[o.Workload]
	var note string
	switch o.Result {
	case EvictionRefused:
		if last && st.held != nil {
			st.LastEviction = st.held.lastEviction
			st.Window = append(slices.Clone(st.held.window), st.Window...)
		}
		if listed && !renewed[o.Workload] {
			delay := float64(refusalBackoffSeconds)
			if prev, ok := st.Refused[o.Workload]; ok {
				delay = min(2*prev.DelaySeconds, cfg.RefusalBackoffMaxSeconds)
			}
			st.Refused[o.Workload] = Refusal{Until: now.Add(time.Duration(delay * float64(time.Second))), DelaySeconds: delay}
			note = fmt.Sprintf("; not chosen again for %g s, and the next candidate may go now", delay)
		}
	case EvictionFailed:
		if last {
			st.VictimGone = now
		}
		if listed && !renewed[o.Workload] {
			st.Abandoned[o.Workload] = now
			note = fmt.Sprintf("; it is not chosen again for %g s", cfg.AbandonRetrySeconds)
		}
	default:
		if last {
			st.VictimGone, st.victimLeft = now, now
		}
	}
	if last {
		st.held = nil
	}
	return OutcomeDecision(now, o, note)
}

// OutcomeDecision is the decision line of how an eviction ended; note is
// added to its reason (what the policy does next).
func OutcomeDecision(now time.Time, o EvictionOutcome, note string) Decision {
	var reason string
	switch o.Result {
	case EvictedGracefully:
		reason = fmt.Sprintf("left gracefully %.1f s after the eviction signal, freeing %d B", o.Seconds, o.FreedBytes)
	case EvictedForcibly:
		reason = fmt.Sprintf("killed after the grace period; gone %.1f s after the eviction signal, freeing %d B", o.Seconds, o.FreedBytes)
	case EvictionRefused:
		reason = "the eviction was refused: " + o.Err
	case EvictionInterrupted:
		reason = fmt.Sprintf("the agent stopped %.1f s into the eviction; the victim was left to finish on its own, not forced: %s", o.Seconds, o.Err)
	case EvictedSaved:
		reason = fmt.Sprintf("saved to disk (managed save) %.1f s after the eviction signal, freeing %d B", o.Seconds, o.FreedBytes)
	default:
		reason = fmt.Sprintf("could not be removed in %.1f s: %s", o.Seconds, o.Err)
	}
	if o.Err != "" && (o.Result == EvictedGracefully || o.Result == EvictedForcibly) {
		reason += " (" + o.Err + ")"
	}
	oc := o
	return Decision{Time: now, Action: ActionEvicted, Workload: o.Workload, Reason: reason + note, Outcome: &oc}
}

// ResumeEviction is st with an eviction a previous agent began and did
// not see end (its journal says so): the victim counts as being evicted
// since chosenAt, so no second victim is chosen for the same pressure and
// its deadline holds from its first choice. The decision line says so.
func ResumeEviction(st State, name string, chosenAt, now time.Time) (State, Decision) {
	st = st.clone()
	st.Evicting[name] = chosenAt
	if chosenAt.After(st.LastEviction) {
		st.LastEviction, st.lastVictim = chosenAt, name
	}
	return st, Decision{Time: now, Action: ActionResumeEviction, Workload: name,
		Reason: fmt.Sprintf("chosen %.1f s ago by the agent before this one and still present: waited for, no second victim is chosen meanwhile", now.Sub(chosenAt).Seconds())}
}

// note appends d unless the same note was the last one made.
func (st *State) note(out []Decision, d Decision) []Decision {
	key := d.Reason
	if d.Trigger != nil {
		key += d.Trigger.Signal
	}
	if key == st.lastNote {
		return out
	}
	st.lastNote = key
	return append(out, d)
}

func (st State) clone() State {
	c := st
	c.Window = append([]Sample(nil), st.Window...)
	c.Signals = nil
	c.Evicting = make(map[string]time.Time, len(st.Evicting))
	for k, v := range st.Evicting {
		c.Evicting[k] = v
	}
	c.Abandoned = make(map[string]time.Time, len(st.Abandoned))
	for k, v := range st.Abandoned {
		c.Abandoned[k] = v
	}
	if c.Refused = maps.Clone(st.Refused); c.Refused == nil {
		c.Refused = map[string]Refusal{}
	}
	c.SwapAllowance = maps.Clone(st.SwapAllowance)
	c.swapPending = maps.Clone(st.swapPending)
	c.swapRetry = maps.Clone(st.swapRetry)
	for _, m := range []*map[string]uint64{&c.SwapAllowance, &c.swapPending} {
		if *m == nil {
			*m = map[string]uint64{}
		}
	}
	if c.swapRetry == nil {
		c.swapRetry = map[string]swapBackoff{}
	}
	if c.instances = maps.Clone(st.instances); c.instances == nil {
		c.instances = map[string]uint64{}
	}
	b := &c.Balloon
	b.Targets, b.changed, b.hold, b.faults = maps.Clone(b.Targets), maps.Clone(b.changed), maps.Clone(b.hold), maps.Clone(b.faults)
	if b.Targets == nil {
		b.Targets, b.changed, b.hold, b.faults = map[string]uint64{}, map[string]time.Time{}, map[string]time.Time{}, map[string]guestFaults{}
	}
	return c
}

// forgetRenewed forgets a workload made again under the same name (its
// Instance changed) as one that is gone: a new cgroup has no swap limit
// set, and the old one's eviction is over (its memory is freed). It
// forgets the instances of workloads that are gone, and returns the
// names made again.
func forgetRenewed(now time.Time, workloads []Workload, st *State) map[string]bool {
	seen := make(map[string]bool, len(workloads))
	var renewed map[string]bool
	for _, w := range workloads {
		seen[w.Name] = true
		if w.Instance == 0 {
			continue
		}
		if was, ok := st.instances[w.Name]; ok && was != w.Instance {
			if renewed == nil {
				renewed = map[string]bool{}
			}
			renewed[w.Name] = true
			if _, ok := st.Evicting[w.Name]; ok && w.Name == st.lastVictim {
				st.VictimGone = now
			}
			st.forget(w.Name)
		}
		st.instances[w.Name] = w.Instance
	}
	for name := range st.instances {
		if !seen[name] {
			delete(st.instances, name)
		}
	}
	return renewed
}

// forget drops what Decide remembered of a workload: its allowance, a
// refusal's back-off, its eviction or the give-up on it, and its balloon.
func (st *State) forget(name string) {
	delete(st.SwapAllowance, name)
	delete(st.swapPending, name)
	delete(st.swapRetry, name)
	delete(st.Evicting, name)
	delete(st.Abandoned, name)
	delete(st.Refused, name)
	st.Balloon.forget(name)
}

// forgetGone forgets the workloads that are no longer listed.
func (st *State) forgetGone(present map[string]*Workload) {
	listed := func(name string) bool { _, ok := present[name]; return ok }
	forgetAbsent(st.SwapAllowance, listed, st.forget)
	forgetAbsent(st.swapPending, listed, st.forget)
	forgetAbsent(st.swapRetry, listed, st.forget)
	forgetAbsent(st.Abandoned, listed, st.forget)
	forgetAbsent(st.Refused, listed, st.forget)
}

// forgetAbsent calls forget with every key of m that present rejects
// (forget may delete from m).
func forgetAbsent[V any](m map[string]V, present func(string) bool, forget func(string)) {
	for name := range m {
		if !present(name) {
			forget(name)
		}
	}
}

// appendToWindow adds s and drops samples older than the window or taken
// before the last eviction.
func appendToWindow(w []Sample, s Sample, cfg Config, lastEviction time.Time) []Sample {
	if len(w) > 0 && !s.Time.After(w[len(w)-1].Time) {
		return w // out of order or duplicate: ignore
	}
	w = append(w, s)
	oldest := s.Time.Add(-time.Duration(cfg.AverageWindowSizeSeconds * float64(time.Second)))
	i := 0
	for i < len(w)-1 && (w[i].Time.Before(oldest) || w[i].Time.Before(lastEviction)) {
		i++
	}
	return w[i:]
}

// Swap rules of a Workload.
const (
	// SwapByRequest gives swap in proportion to the memory request.
	SwapByRequest = ""
	// SwapNone gives no swap (Kubernetes: Guaranteed and BestEffort pods,
	// containers whose request equals their limit).
	SwapNone = "none"
	// SwapExternal leaves the limit to someone else and takes what it set
	// as the allowance.
	SwapExternal = "external"
)

// SwapAllowance is a workload's share of the scope's swap: in proportion to
// its memory request (Kubernetes LimitedSwap), none for protected
// workloads or a zero request.
func SwapAllowance(w Workload, scope Scope) uint64 {
	if w.SwapRule == SwapExternal {
		return w.ExternalSwapBytes
	}
	if w.Protected || w.SwapRule == SwapNone || w.RequestBytes == 0 || scope.RAMBytes == 0 {
		return 0
	}
	share := float64(w.RequestBytes) / float64(scope.RAMBytes)
	return uint64(min(share, 1) * float64(scope.SwapBytes))
}

// UsageBounds are, for the round after one that ended in state st, the
// scope's usage above which swap_utilization fires and its OOM point: RAM
// plus the swap its workloads may use (the agent is woken at them).
func UsageBounds(snap Snapshot, st State, cfg Config) (thresholdBytes, oomBytes uint64) {
	scope := snap.Sample.Scope
	scope.SwapBytes = usableSwap(snap, st)
	return uint64(swapUtilizationThreshold(scope, cfg)), scope.RAMBytes + scope.SwapBytes
}

// usableSwap is the swap the scope's workloads may use: the scope's, or
// less when every workload has an allowance in force and they add up to
// less. Then the scope's OOM point is its RAM plus those allowances, and
// swap utilization is measured against them: against the whole swap, the
// workloads would reach their allowances, and the node its OOM point,
// before the threshold is crossed (found with headroom sim).
func usableSwap(snap Snapshot, st State) uint64 {
	swap := snap.Sample.Scope.SwapBytes
	if len(snap.Workloads) == 0 {
		return swap
	}
	var allowed uint64
	for _, w := range snap.Workloads {
		a, ok := st.SwapAllowance[w.Name]
		if !ok {
			return swap
		}
		allowed += a
	}
	return min(allowed, swap)
}

// rankAllowances are the allowances the ranking measures swap against:
// those in force, and for a workload whose swap cannot be capped, the one
// it would have.
func rankAllowances(snap Snapshot, st State) map[string]uint64 {
	out := st.SwapAllowance
	cloned := false
	for _, w := range snap.Workloads {
		if !w.SwapUncapped {
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(st.SwapAllowance), true
			if out == nil {
				out = map[string]uint64{}
			}
		}
		out[w.Name] = SwapAllowance(w, snap.Sample.Scope)
	}
	return out
}

func swapAllowances(snap Snapshot, st *State) []Decision {
	now := snap.Sample.Time
	var out []Decision
	for _, w := range snap.Workloads {
		want := SwapAllowance(w, snap.Sample.Scope)
		if w.SwapRule == SwapExternal {
			st.SwapAllowance[w.Name] = want // in force, not ours to write
			continue
		}
		if w.SwapUncapped {
			// Nothing in force, nothing to try until it can be capped.
			delete(st.SwapAllowance, w.Name)
			delete(st.swapPending, w.Name)
			delete(st.swapRetry, w.Name)
			continue
		}
		if have, ok := st.SwapAllowance[w.Name]; ok && have == want {
			continue
		}
		if pending, ok := st.swapPending[w.Name]; ok && pending == want {
			continue // decided, waiting for its result
		}
		if retry, ok := st.swapRetry[w.Name]; ok && now.Before(retry.at) {
			continue // refused by the kernel a moment ago
		}
		st.swapPending[w.Name] = want
		out = append(out, Decision{Time: now, Action: ActionSetSwap, Workload: w.Name, Swap: &SwapSetting{SwapBytes: want},
			Reason: fmt.Sprintf("request %d B of %d B scope RAM × %d B scope swap", w.RequestBytes, snap.Sample.Scope.RAMBytes, snap.Sample.Scope.SwapBytes)})
	}
	return out
}
