package sim

// The kernel's scan-time advisor (mm/ksm.c, advisor_mode=scan-time), with
// its defaults. At the end of every full scan it sets pages_to_scan so
// that a scan would take the target time, smoothed by a moving average of
// how the scan time changed, and bounded by the CPU ksmd used over the
// scan: no more than the maximum share of a core, no less than the
// minimum. Integer arithmetic as the kernel's, since its truncations
// decide the result at these sizes.
const (
	advisorTargetScanSeconds = 200
	advisorMinPagesToScan    = 500
	advisorMaxPagesToScan    = 30000
	advisorMaxCPUPercent     = 70
	advisorMinCPUPercent     = 10
	advisorEWMAWeight        = 30
	// kernelDefaultPagesToScan is what turning the advisor off restores.
	kernelDefaultPagesToScan = 100
)

// scanTimeAdvisor is the kernel's advisor_ctx.
type scanTimeAdvisor struct {
	// cpuSeconds is ksmd's CPU time at the last adjustment. Turning the
	// advisor on zeroes it, so the first adjustment counts all the CPU
	// ksmd ever used as that scan's: on a host whose ksmd has run before,
	// the advisor starts by slowing ksmd down (measured here: 12.9 s of
	// ksmd's past over a 25 s scan read as 51% of a core, and
	// pages_to_scan went from 500 to 90).
	cpuSeconds float64
	// lastScanSeconds and change are the previous scan's time and the
	// moving average of the scan time's change, in percent.
	lastScanSeconds, change uint64
}

// adjust is scan_time_advisor: the pages_to_scan for the next scan after
// a scan of scanSeconds, with ksmd's CPU time now ksmdCPUSeconds.
func (a *scanTimeAdvisor) adjust(pagesToScan uint64, scanSeconds, ksmdCPUSeconds float64) uint64 {
	scanTime := uint64(scanSeconds*1000) / 1000
	scanTime = max(scanTime, 1)
	cpuMillis := uint64(max(ksmdCPUSeconds-a.cpuSeconds, 0) * 1000)
	cpuPercent := max(cpuMillis*100/(scanTime*1000), 1)
	last := a.lastScanSeconds
	if last == 0 {
		last = scanTime
	}
	factor := max(advisorTargetScanSeconds*100/scanTime, 1)
	change := max(scanTime*100/last, 1)
	change = ((100-advisorEWMAWeight)*a.change + advisorEWMAWeight*change) / 100
	pages := pagesToScan * 100 / factor
	pages = pages * change / 100
	perPageCost := max(pagesToScan/cpuPercent, 1)
	pages = min(pages, perPageCost*advisorMaxCPUPercent)
	pages = max(pages, perPageCost*advisorMinCPUPercent)
	pages = min(pages, advisorMaxPagesToScan)
	a.change, a.lastScanSeconds, a.cpuSeconds = change, scanTime, ksmdCPUSeconds
	return pages
}
