package policy

import (
	"fmt"
	"time"
)

// KSM modes (Config.KSMMode).
const (
	// KSMOff leaves the kernel's same-page merging as it is.
	KSMOff = "off"
	// KSMAdvisor hands ksmd's pace to the kernel's advisor (scan-time).
	KSMAdvisor = "advisor"
	// KSMGovernor decides whether and how fast ksmd scans from the profit
	// it observes per ksmd CPU-second.
	KSMGovernor = "governor"
)

// Governor phases (KSMSetting.Phase).
const (
	// KSMStandby: ksmd does not scan (run=0); merged pages stay merged.
	KSMStandby = "standby"
	// KSMBurst: there is much to gain and RAM is needed: ksmd scans at up
	// to KSMMaxCPUPercent of a core until a full scan no longer pays.
	KSMBurst = "burst"
	// KSMSteady: gains stopped: ksmd scans at KSMIdleCPUPercent, enough to
	// find new duplicates slowly.
	KSMSteady = "steady"
	// KSMAdvised: the kernel's advisor sets the pace.
	KSMAdvised = "advisor"
)

// KSMSample is ksmd's state and cost, read with every sample.
type KSMSample struct {
	Run            int    `json:"run"`
	PagesToScan    uint64 `json:"pages_to_scan"`
	SleepMillisecs uint64 `json:"sleep_millisecs"`
	AdvisorMode    string `json:"advisor_mode,omitempty"`
	// Cumulative counters.
	PagesScanned   uint64  `json:"pages_scanned"`
	FullScans      uint64  `json:"full_scans"`
	KsmdCPUSeconds float64 `json:"ksmd_cpu_seconds"`
	CowKSM         uint64  `json:"cow_ksm"`
	// Current values.
	PagesShared        uint64 `json:"pages_shared"`
	PagesSharing       uint64 `json:"pages_sharing"`
	PagesVolatile      uint64 `json:"pages_volatile"`
	GeneralProfitBytes int64  `json:"general_profit_bytes"`
	// MergeableBytes is the memory the scope's processes have offered for
	// merging (MADV_MERGEABLE).
	MergeableBytes uint64 `json:"mergeable_bytes"`
}

// KSMSetting is what the policy asks of ksmd.
type KSMSetting struct {
	Phase          string `json:"phase"`                     // the governor's phase: standby, burst, steady or advisor
	Run            int    `json:"run"`                       // ksmd's run: 0 stopped, 1 running
	PagesToScan    uint64 `json:"pages_to_scan,omitempty"`   // pages ksmd scans a batch
	SleepMillisecs uint64 `json:"sleep_millisecs,omitempty"` // ksmd's sleep between batches
	AdvisorMode    string `json:"advisor_mode,omitempty"`    // the kernel advisor's mode (none or scan-time)
}

// KSMState is what the governor remembers between rounds.
type KSMState struct {
	Phase string    `json:"phase"`
	Since time.Time `json:"since"`
	// ScansAtStart is the full-scan count when the phase began.
	ScansAtStart uint64 `json:"scans_at_start"`
	// The last full-scan boundary: scan count, profit and ksmd CPU there.
	MarkScans  uint64  `json:"mark_scans"`
	MarkProfit int64   `json:"mark_profit_bytes"`
	MarkCPU    float64 `json:"mark_cpu_seconds"`
	// ScanProfitPerCPUSecond is what the last full scan gained per ksmd
	// CPU-second.
	ScanProfitPerCPUSecond float64 `json:"scan_profit_per_cpu_second"`
	// CostSecondsPerPage is ksmd's measured CPU time per scanned page.
	CostSecondsPerPage float64 `json:"cost_seconds_per_page"`
	// MergeableAtStart is the mergeable memory when the phase began.
	MergeableAtStart uint64     `json:"mergeable_at_start"`
	LastEval         time.Time  `json:"last_eval"`
	prev             *KSMSample // the sample of the last evaluation
}

// Governor constants.
const (
	ksmEvalSeconds = 1.0
	// ksmSleepMillisecs is ksmd's pause between batches; the governor
	// sets the pace by the batch size.
	ksmSleepMillisecs = 20
	// ksmPriorCostSecondsPerPage until a measurement exists (merging runs
	// at 1.4 µs a page here, a converged scan at 0.35 µs).
	ksmPriorCostSecondsPerPage = 1.5e-6
	// ksmMinPotentialBytes is the least unmerged mergeable memory worth a burst.
	ksmMinPotentialBytes = 32 << 20
	// ksmNewMemoryBytes of new mergeable memory (a VM started) restarts a burst.
	ksmNewMemoryBytes = 64 << 20
	// ksmMinBurstScans: the first full scan only checksums pages (KSM
	// merges a page once it has not changed for a scan), so a burst runs
	// at least two.
	ksmMinBurstScans = 2
	pageBytes        = 4096
	// ksmCostSmoothing weighs a new cost measurement (exponential average).
	ksmCostSmoothing = 0.3
)

// decideKSM is the KSM part of Decide.
func decideKSM(snap Snapshot, cfg Config, st *State) []Decision {
	k := snap.Sample.KSM
	now := snap.Sample.Time
	if cfg.KSMMode == KSMOff || cfg.KSMMode == "" || k == nil {
		return nil
	}
	if !st.KSM.LastEval.IsZero() && now.Sub(st.KSM.LastEval).Seconds() < ksmEvalSeconds {
		return nil
	}
	g := &st.KSM
	g.LastEval = now
	if cfg.KSMMode == KSMAdvisor {
		want := KSMSetting{Phase: KSMAdvised, Run: 1, AdvisorMode: "scan-time"}
		g.Phase = KSMAdvised
		if k.Run == 1 && k.AdvisorMode == "scan-time" {
			return nil
		}
		return []Decision{{Time: now, Action: ActionSetKSM, KSM: &want, Reason: "the kernel's advisor sets ksmd's pace (scan-time)"}}
	}

	// Measure: ksmd's cost per scanned page, and what a full scan gained.
	if p := g.prev; p != nil && k.PagesScanned > p.PagesScanned+1000 && k.KsmdCPUSeconds > p.KsmdCPUSeconds {
		cost := (k.KsmdCPUSeconds - p.KsmdCPUSeconds) / float64(k.PagesScanned-p.PagesScanned)
		if g.CostSecondsPerPage == 0 {
			g.CostSecondsPerPage = cost
		} else {
			g.CostSecondsPerPage += ksmCostSmoothing * (cost - g.CostSecondsPerPage)
		}
	}
	scanEnded := k.FullScans > g.MarkScans
	if scanEnded {
		if cpu := k.KsmdCPUSeconds - g.MarkCPU; cpu > 0 && g.MarkScans > 0 {
			g.ScanProfitPerCPUSecond = float64(k.GeneralProfitBytes-g.MarkProfit) / cpu
		}
		g.MarkScans, g.MarkProfit, g.MarkCPU = k.FullScans, k.GeneralProfitBytes, k.KsmdCPUSeconds
	}
	kc := *k
	g.prev = &kc

	scope := snap.Sample.Scope
	needed := snap.Sample.ScopeErr == "" && scope.RAMBytes > 0 &&
		float64(scope.UsedBytes()) >= cfg.KSMRAMNeedFraction*float64(scope.RAMBytes)
	merged := (k.PagesShared + k.PagesSharing) * pageBytes
	potential := int64(k.MergeableBytes) - int64(merged)

	phase, why := g.Phase, ""
	enter := func(p, reason string) {
		phase, why = p, reason
		g.Phase, g.Since, g.ScansAtStart, g.MergeableAtStart = p, now, k.FullScans, k.MergeableBytes
	}
	usePct := 100 * float64(scope.UsedBytes()) / float64(max(scope.RAMBytes, 1))
	switch g.Phase {
	case "", KSMStandby, KSMAdvised:
		switch {
		case needed && potential >= ksmMinPotentialBytes:
			enter(KSMBurst, fmt.Sprintf("%d B mergeable, %d B merged, the scope at %.0f%% of its RAM (merging wanted from %.0f%%)",
				k.MergeableBytes, merged, usePct, 100*cfg.KSMRAMNeedFraction))
		case g.Phase != KSMStandby:
			enter(KSMStandby, fmt.Sprintf("nothing worth a scan: %d B mergeable, %d B merged, the scope at %.0f%% of its RAM (merging wanted from %.0f%%)",
				k.MergeableBytes, merged, usePct, 100*cfg.KSMRAMNeedFraction))
		}
	case KSMBurst:
		scans := k.FullScans - g.ScansAtStart
		switch {
		case !scanEnded || scans < ksmMinBurstScans:
		case g.ScanProfitPerCPUSecond < cfg.KSMMinProfitBytesPerCPUSecond:
			enter(KSMSteady, fmt.Sprintf("the last full scan gained %.0f B per ksmd CPU-second (a burst continues from %.0f); %d B merged, profit %d B",
				g.ScanProfitPerCPUSecond, cfg.KSMMinProfitBytesPerCPUSecond, merged, k.GeneralProfitBytes))
		case !needed:
			enter(KSMSteady, fmt.Sprintf("the scope is down to %.0f%% of its RAM (merging wanted from %.0f%%); %d B merged, profit %d B",
				usePct, 100*cfg.KSMRAMNeedFraction, merged, k.GeneralProfitBytes))
		}
	case KSMSteady:
		grown := k.MergeableBytes > g.MergeableAtStart+ksmNewMemoryBytes
		paying := scanEnded && g.ScanProfitPerCPUSecond >= 2*cfg.KSMMinProfitBytesPerCPUSecond
		switch {
		case needed && potential >= ksmMinPotentialBytes && (grown || paying):
			enter(KSMBurst, fmt.Sprintf("new gains: mergeable memory %d B (was %d B), the last full scan gained %.0f B per ksmd CPU-second",
				k.MergeableBytes, g.MergeableAtStart, g.ScanProfitPerCPUSecond))
		case k.MergeableBytes == 0 && k.PagesSharing == 0:
			enter(KSMStandby, "no mergeable memory left")
		}
	}

	want := ksmSettingFor(phase, cfg, g.CostSecondsPerPage)
	if why == "" && !ksmDiffers(*k, want) {
		return nil
	}
	if why == "" {
		why = fmt.Sprintf("%s: ksmd's pace drifted from the target", phase)
	}
	return []Decision{{Time: now, Action: ActionSetKSM, KSM: &want, Reason: fmt.Sprintf("%s → %s", why, describeKSM(want, cfg, g.CostSecondsPerPage))}}
}

// ksmSettingFor is ksmd's setting for a phase: a batch of pages every
// ksmSleepMillisecs sized to use the phase's share of a core.
func ksmSettingFor(phase string, cfg Config, costPerPage float64) KSMSetting {
	if costPerPage <= 0 {
		costPerPage = ksmPriorCostSecondsPerPage
	}
	pct := 0.0
	switch phase {
	case KSMBurst:
		pct = cfg.KSMMaxCPUPercent
	case KSMSteady:
		pct = cfg.KSMIdleCPUPercent
	}
	if pct <= 0 {
		return KSMSetting{Phase: phase, Run: 0}
	}
	f := min(pct/100, 0.95)
	scanSeconds := f / (1 - f) * ksmSleepMillisecs / 1000
	pages := uint64(max(16, min(scanSeconds/costPerPage, 1e7)))
	return KSMSetting{Phase: phase, Run: 1, PagesToScan: pages, SleepMillisecs: ksmSleepMillisecs, AdvisorMode: "none"}
}

// ksmDiffers reports whether ksmd runs far enough from want to change it:
// a third over the pace (over the CPU budget) or half under it; closer
// than that, the cost estimate's drift is not worth a change.
func ksmDiffers(k KSMSample, want KSMSetting) bool {
	if k.Run != want.Run || (want.AdvisorMode != "" && k.AdvisorMode != "" && k.AdvisorMode != want.AdvisorMode) {
		return true
	}
	if want.Run == 0 {
		return false
	}
	lo, hi := float64(want.PagesToScan)*0.5, float64(want.PagesToScan)*1.33
	return k.SleepMillisecs != want.SleepMillisecs || float64(k.PagesToScan) < lo || float64(k.PagesToScan) > hi
}

func describeKSM(s KSMSetting, cfg Config, costPerPage float64) string {
	if s.Run == 0 {
		return "ksmd stopped (merged pages stay merged)"
	}
	if costPerPage <= 0 {
		costPerPage = ksmPriorCostSecondsPerPage
	}
	pct := cfg.KSMIdleCPUPercent
	if s.Phase == KSMBurst {
		pct = cfg.KSMMaxCPUPercent
	}
	return fmt.Sprintf("ksmd at up to %.1f%% of a core: %d pages every %d ms (%.2f µs a page)", pct, s.PagesToScan, s.SleepMillisecs, costPerPage*1e6)
}
