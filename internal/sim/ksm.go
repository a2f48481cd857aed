package sim

import (
	"math"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
	"github.com/headroom-dev/headroom/internal/policy"
)

// KSM model constants, from measurements on this machine and the
// kernel's and headroom load's behaviour.
const (
	// ksmd's CPU: a batch's wake-up (draining the per-CPU LRU caches,
	// finding its place) and each page by what it finds: a page not
	// merged is checksummed and looked up in the unstable tree, a page
	// merging is compared with its twin, write-protected and replaced, a
	// page already merged is checked against its stable node. Solved from
	// four runs of bench/ksm.sh's workload here (2026-11-25/26): the
	// kernel's defaults idle at 1.2% of a core (100 pages a batch, all
	// merged), the advisor's first scan took 2.8% at 500 pages a batch
	// (nothing merges in a first scan), brute force 1.99 CPU-seconds to
	// 90% of its saving (a scan of 512k pages and nine tenths of the
	// next, where 80% merge). The advisor's merging scan at 90 pages a
	// batch took 3.1% of a core where these give 2.3%: merging in small
	// batches costs more.
	ksmWakeSeconds               = 0.25e-3
	ksmChecksumSecondsPerPage    = 0.83e-6
	ksmMergeSecondsPerPage       = 3.9e-6
	ksmMergedCheckSecondsPerPage = 0.36e-6
	// ksmSleepOvershootSeconds: ksmd's sleep of sleep_millisecs lasted 3
	// ms longer here (42 batches a second at 20 ms; HZ 250 rounds the
	// timeout to 4 ms jiffies).
	ksmSleepOvershootSeconds = 3e-3
	// ksmTemplates is how many distinct contents headroom load's
	// duplicate pages come from, the same in every worker: merged, they
	// are the KSM pages (pages_shared); every other merged page is saved.
	ksmTemplates = loadspec.MaxDupTemplates
	// ksmRmapBytes is the kernel's rmap_item per merged page, what
	// general_profit subtracts from the pages saved.
	ksmRmapBytes = 64
)

// DupFraction is the share of a workload's pages KSM can merge for a
// content class: dup=F's duplicates, or every page of zero content.
func DupFraction(c loadspec.Content) float64 {
	switch c.Kind {
	case loadspec.ContentDup:
		return c.DupFraction
	case loadspec.ContentZero:
		return 1
	}
	return 0
}

// ksmd is the kernel's same-page merging daemon as the agent's set_ksm
// decisions configure it. It scans every VM's workload pages (QEMU offers
// all guest RAM for merging) in batches of pagesToScan every sleepMs,
// each batch and each page costing a core's time; a duplicate page is
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
	// passStart is when the current full scan started, on the step's
	// simulated clock (passStarted: it has).
	passStart   float64
	passStarted bool
	// scanPos is how far into the current full scan ksmd is, in pages;
	// mergedThisPass the pages it merged in it (behind scanPos).
	scanPos, mergedThisPass float64
	fullScans               uint64
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
	k.scanPos, k.mergedThisPass = 0, 0
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

// ksmTick advances ksmd by dt from simulated time now: it scans, and on
// second and later scans merges the unmerged duplicates it passes.
func (s *node) ksmTick(now, dt float64) {
	k := s.ksm
	k.coresUsed = 0
	total := s.mergeablePages()
	if k.run != 1 || total < 1 {
		return
	}
	cpuBefore := k.cpuSeconds
	if k.scanPos >= total-minPages { // VMs left: the pass ends early
		k.endPass(now)
	}
	for left := dt; left > 1e-12; {
		rem := total - k.scanPos
		batch := k.batchSeconds(s.ksmPageSeconds(total, rem))
		perSecond := k.pagesToScan / (batch + k.sleepMs/1000 + ksmSleepOvershootSeconds)
		cpuPerPage := batch / k.pagesToScan
		if !k.passStarted {
			k.passStart, k.passStarted = now, true
		}
		// Whole passes beyond two change nothing but the count (each
		// costs what a pass finding nothing to merge does). The advisor
		// adjusts after each, so its passes are taken one by one, unless
		// they are shorter than a millisecond (it reads them all as one
		// second).
		if pass := total / perSecond; k.advisor != "scan-time" || pass < 1e-3 {
			if extra := math.Floor(left/pass) - 2; extra > 0 {
				converged := k.batchSeconds(s.ksmPageSeconds(total, 0)) / k.pagesToScan
				k.fullScans += uint64(extra)
				k.pagesScanned += extra * total
				k.cpuSeconds += extra * total * converged
				left -= extra * pass
				now += extra * pass
			}
		}
		seconds := min(left, rem/perSecond)
		scanned := min(perSecond*seconds, rem)
		if k.fullScans > 0 {
			// From the second pass on, the unmerged duplicates in the
			// part scanned merge: they lie spread over what is left of
			// the pass (the merged ones are behind it).
			for _, v := range s.vms {
				if v.live() {
					merging := v.ksmUnmerged() * scanned / rem
					v.merged += merging
					k.mergedThisPass += merging
				}
			}
		}
		k.scanPos += scanned
		k.pagesScanned += scanned
		k.cpuSeconds += scanned * cpuPerPage
		left -= seconds
		now += seconds
		if k.scanPos >= total-minPages {
			k.endPass(now)
		}
	}
	k.coresUsed = (k.cpuSeconds - cpuBefore) / dt
}

// batchSeconds is ksmd's CPU for one batch at perPage a page.
func (k *ksmd) batchSeconds(perPage float64) float64 {
	return ksmWakeSeconds + k.pagesToScan*perPage
}

// ksmUnmerged is a VM's duplicates not merged yet: only resident ones
// count (swap is not scanned).
func (v *vmState) ksmUnmerged() float64 {
	return max(v.dupShare*v.resident-v.merged, 0)
}

// ksmPageSeconds is ksmd's mean CPU per page over the rest of the pass,
// rem of total pages: the unmerged duplicates there merge (from the
// second pass on), the pages merged before this pass are spread over it,
// and the others are checksummed.
func (s *node) ksmPageSeconds(total, rem float64) float64 {
	if s.ksm.fullScans == 0 || total <= 0 {
		return ksmChecksumSecondsPerPage
	}
	var unmerged, merged float64
	for _, v := range s.vms {
		if v.live() {
			unmerged += v.ksmUnmerged()
			merged += v.merged
		}
	}
	merging, done := 0.0, min(max(merged-s.ksm.mergedThisPass, 0)/total, 1)
	if rem > 0 {
		merging = min(unmerged/rem, 1-done)
	}
	return merging*ksmMergeSecondsPerPage + done*ksmMergedCheckSecondsPerPage + (1-merging-done)*ksmChecksumSecondsPerPage
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
