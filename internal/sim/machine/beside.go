package machine

import (
	"context"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
)

// The beside measurement: the paging measurement's workers, with workers
// in RAM beside them in cgroups of their own that reclaim never touches,
// one on every core but one, so the cores stay busy as in a density
// transition, where some VMs page and the rest run in RAM. It gives what
// the paging costs the cores that do not page (Node.PagingStealSeconds,
// Node.TouchBesidePaging).

// besideWorkersPerCore is the paging workers a core of the beside run: as
// in the transitions measured here (seven paging beside two in RAM).
const besideWorkersPerCore = 4

// residentMaxWorkerBytes is a resident worker's block: the touch rate's
// middle block, or less where they would hold more than an eighth of RAM.
const residentMaxWorkerBytes = 256 << 20

// BesideSample is what paging cost the cores beside it.
type BesideSample struct {
	// StealSecondsPerPage is the CPU time this machine's host took from
	// it (steal, /proc/stat) per page paged in, with the cores busy.
	StealSecondsPerPage float64
	// PagesInPerSec is the pages paged in a second around the residents.
	PagesInPerSec float64
	// ResidentPagesPerCoreSecond is the resident workers' touches per
	// second of their own CPU time; ResidentCores the cores they got.
	ResidentPagesPerCoreSecond float64
	ResidentCores              float64
	ResidentBlockBytes         uint64
}

// residentWorkerBytes is each of n resident workers' block (whole MiB).
func residentWorkerBytes(n int, ramBytes uint64) uint64 {
	const mib = 1 << 20
	return min(residentMaxWorkerBytes, ramBytes/8/uint64(max(n, 1))) / mib * mib
}

// MeasurePagingBeside pages with workers `headroom load` workers as
// MeasurePaging does, beside resident workers in RAM, and measures what
// the paging costs the residents: their touches per core-second and the
// steal over the window.
func MeasurePagingBeside(ctx context.Context, headroom string, scan memload.Scan, workers, resident int, window time.Duration) (BesideSample, error) {
	_, beside, err := measurePaging(ctx, pagingRun{headroom: headroom, scan: scan, workers: workers, window: window, resident: max(resident, 1)})
	return beside, err
}

// besideSub fills b from two readings window apart.
func (c pagingCounters) besideSub(before pagingCounters, window time.Duration, b *BesideSample) {
	in := float64(c.vm.PswpIn - before.vm.PswpIn)
	b.PagesInPerSec = in / window.Seconds()
	if in > 0 {
		b.StealSecondsPerPage = max(c.stealCPUSeconds-before.stealCPUSeconds, 0) / in
	}
	cpu := c.residentCPUSeconds - before.residentCPUSeconds
	b.ResidentCores = cpu / window.Seconds()
	if cpu > 0 {
		b.ResidentPagesPerCoreSecond = float64(c.residentTouched-before.residentTouched) / cpu
	}
}
