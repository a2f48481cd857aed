package sim

import (
	"math"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/policy"
)

// KSM model constants, from measurements on this machine and the
// kernel's and headroom load's behaviour.
const (
	// ksmCostSecondsPerPage is ksmd's CPU per page scanned while it
	// merges (measured here: 1.4 µs; a converged scan costs 0.35 µs, but
	// the governor then runs ksmd at its idle pace anyway).
	ksmCostSecondsPerPage = 1.4e-6
	// ksmTemplates is how many distinct contents headroom load's
	// duplicate pages come from, the same in every worker: merged, they
	// are the KSM pages (pages_shared); every other merged page is saved.
	ksmTemplates = memload.MaxDupTemplates
	// ksmRmapBytes is the kernel's rmap_item per merged page, what
	// general_profit subtracts from the pages saved.
	ksmRmapBytes = 64
)

// DupFraction is the share of a workload's pages KSM can merge for a
// content class: dup=F's duplicates, or every page of zero content.
func DupFraction(c memload.Content) float64 {
	switch c.Kind {
	case memload.ContentDup:
		return c.DupFraction
	case memload.ContentZero:
		return 1
	}
	return 0
}

// ksmd is the kernel's same-page merging daemon as the agent's set_ksm
// decisions configure it. It scans every VM's workload pages (QEMU offers
// all guest RAM for merging) in batches of pagesToScan every sleepMs,
// each page costing ksmCostSecondsPerPage of a core; a duplicate page is
// merged the second time a scan finds it unchanged (the first scan only
// checksums it). A write to a merged page breaks it (copy on write) and
// unmerges it; host reclaim evicting a merged page unmerges it too. With
// advisor "scan-time" the kernel's advisor sets pagesToScan at the end of
// every full scan.
type ksmd struct {
	run                  int
	pagesToScan, sleepMs float64
	advisor              string
	scanTime             scanTimeAdvisor
	// clock is ksmd's time, advanced by ksmTick; passStart is when the
	// current full scan started (passStarted: it has).
	clock, passStart float64
	passStarted      bool
	// scanPos is how far into the current full scan ksmd is, in pages.
	scanPos   float64
	fullScans uint64
	// cpuSeconds is ksmd's CPU time, counting what it used before the
	// run (Node.KSMDCPUSeconds), as /proc reports it.
	pagesScanned, cpuSeconds float64
	cowBreaks                float64
	coresUsed                float64 // this tick's share of a core
}

// newKSMD is ksmd with the kernel's defaults, stopped (run=0), having
// used cpuSeconds before.
func newKSMD(cpuSeconds float64) *ksmd {
	return &ksmd{pagesToScan: kernelDefaultPagesToScan, sleepMs: 20, advisor: "none", cpuSeconds: cpuSeconds}
}

// set applies a set_ksm decision. Turning the advisor on or off resets
// pages_to_scan and the advisor's state, as writing advisor_mode does;
// while it is on, the kernel refuses pages_to_scan.
func (k *ksmd) set(s policy.KSMSetting) {
	k.run = s.Run
	if s.AdvisorMode != "" && s.AdvisorMode != k.advisor {
		k.advisor = s.AdvisorMode
		k.scanTime = scanTimeAdvisor{}
		k.pagesToScan = kernelDefaultPagesToScan
		if k.advisor == "scan-time" {
			k.pagesToScan = advisorMinPagesToScan
		}
	}
	if s.PagesToScan > 0 && k.advisor != "scan-time" {
		k.pagesToScan = float64(s.PagesToScan)
	}
	if s.SleepMillisecs > 0 {
		k.sleepMs = float64(s.SleepMillisecs)
	}
}

// endPass ends a full scan at time now; the advisor, if on, sets the
// next scan's pace.
func (k *ksmd) endPass(now float64) {
	k.scanPos = 0
	k.fullScans++
	if k.advisor == "scan-time" && k.passStarted {
		k.pagesToScan = float64(k.scanTime.adjust(uint64(k.pagesToScan), now-k.passStart, k.cpuSeconds))
	}
	k.passStarted = false
}

// mergeablePages is the memory offered for merging: every live VM's
// populated workload pages.
func (s *node) mergeablePages() float64 {
	var pages float64
	for _, v := range s.vms {
		if v.live() {
			pages += v.populated
		}
	}
	return pages
}

// ksmMergedPages is the merged pages (a page per mapping) and the KSM
// pages they share.
func (s *node) ksmMergedPages() (merged, shared float64) {
	for _, v := range s.vms {
		if v.live() {
			merged += v.merged
		}
	}
	return merged, min(merged, ksmTemplates)
}

// ksmSavedPages is the RAM merging saves: every merged page but the KSM
// pages themselves.
func (s *node) ksmSavedPages() float64 {
	merged, shared := s.ksmMergedPages()
	return merged - shared
}

// ksmTick advances ksmd by dt: it scans, and on second and later scans
// merges the unmerged duplicates it passes.
func (s *node) ksmTick(dt float64) {
	k := s.ksm
	k.coresUsed = 0
	now := k.clock
	k.clock += dt
	total := s.mergeablePages()
	if k.run != 1 || total < 1 {
		return
	}
	cpuBefore := k.cpuSeconds
	if k.scanPos >= total-minPages { // VMs left: the pass ends early
		k.endPass(now)
	}
	for left := dt; left > 1e-12; {
		batch := k.pagesToScan * ksmCostSecondsPerPage
		perSecond := k.pagesToScan / (batch + k.sleepMs/1000)
		if !k.passStarted {
			k.passStart, k.passStarted = now, true
		}
		// Whole passes beyond two change nothing but the count. The
		// advisor adjusts after each, so its passes are taken one by
		// one, unless they are shorter than a millisecond (the advisor
		// reads them all as one second).
		if pass := total / perSecond; k.advisor != "scan-time" || pass < 1e-3 {
			if extra := math.Floor(left/pass) - 2; extra > 0 {
				k.fullScans += uint64(extra)
				k.pagesScanned += extra * total
				k.cpuSeconds += extra * total * ksmCostSecondsPerPage
				left -= extra * pass
				now += extra * pass
			}
		}
		rem := total - k.scanPos
		seconds := min(left, rem/perSecond)
		scanned := min(perSecond*seconds, rem)
		if k.fullScans > 0 {
			// From the second pass on, the unmerged duplicates in the
			// part scanned merge: they lie spread over what is left of
			// the pass (the merged ones are behind it).
			for _, v := range s.vms {
				if v.live() {
					// Only resident duplicates merge: swap is not scanned.
					unmerged := max(v.dupShare*v.resident-v.merged, 0)
					v.merged += unmerged * scanned / rem
				}
			}
		}
		k.scanPos += scanned
		k.pagesScanned += scanned
		k.cpuSeconds += scanned * ksmCostSecondsPerPage
		left -= seconds
		now += seconds
		if k.scanPos >= total-minPages {
			k.endPass(now)
		}
	}
	k.coresUsed = (k.cpuSeconds - cpuBefore) / dt
}

// ksmSample is what the agent reads of ksmd (/sys/kernel/mm/ksm, its CPU
// time, vmstat's cow_ksm).
func (s *node) ksmSample() *policy.KSMSample {
	k := s.ksm
	merged, shared := s.ksmMergedPages()
	sharing := merged - shared
	return &policy.KSMSample{Run: k.run, PagesToScan: uint64(k.pagesToScan), SleepMillisecs: uint64(k.sleepMs), AdvisorMode: k.advisor,
		PagesScanned: uint64(k.pagesScanned), FullScans: k.fullScans, KsmdCPUSeconds: k.cpuSeconds, CowKSM: uint64(k.cowBreaks),
		PagesShared: uint64(shared), PagesSharing: uint64(sharing),
		GeneralProfitBytes: int64(sharing*PageBytes - merged*ksmRmapBytes), MergeableBytes: uint64(s.mergeablePages() * PageBytes)}
}
