package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// What paging costs the cores of the VMs that do not page. Measured here
// (docs/sim.md, "Where the cores go while some workers page"): with the
// cores busy, the host of this machine (itself a VM) took 0.27-0.38 cores
// from it (steal) while it paged 13-18k pages a second in, and a worker
// in RAM touched 0.6-0.85 of its rate a core beside the paging, in a
// cgroup reclaim never touched.

// TouchBesidePaging is how fast a core touches while the swap device
// pages in PagesInPerSec pages a second, as a share of the touch rate in
// RAM.
type TouchBesidePaging struct {
	Share         float64
	PagesInPerSec float64
}

// TouchBesidePagingForm describes the accepted --touch-beside-paging syntax.
const TouchBesidePagingForm = "SHARE@PAGES_PER_SEC (e.g. 0.8@15k: a core touches 0.8 of --touch-rate while the swap device pages 15k pages a second in; in proportion below that rate, no less beyond it), or 0 for none"

// ParseTouchBesidePaging parses --touch-beside-paging ("" or "0": none).
func ParseTouchBesidePaging(s string) (TouchBesidePaging, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return TouchBesidePaging{}, nil
	}
	share, rate, ok := strings.Cut(s, "@")
	var t TouchBesidePaging
	var err error
	if ok {
		if t.Share, err = strconv.ParseFloat(strings.TrimSpace(share), 64); err == nil {
			t.PagesInPerSec, err = parseRate(rate)
		}
	}
	if !ok || err != nil || !t.valid() {
		return TouchBesidePaging{}, fmt.Errorf("--touch-beside-paging %q: want %s, the share in (0, 2], the rate positive", s, TouchBesidePagingForm)
	}
	return t, nil
}

// String is ParseTouchBesidePaging's inverse.
func (t TouchBesidePaging) String() string {
	if t == (TouchBesidePaging{}) {
		return "0"
	}
	return strconv.FormatFloat(t.Share, 'g', -1, 64) + "@" + strconv.FormatFloat(t.PagesInPerSec, 'g', -1, 64)
}

// valid: none, or a share in (0, 2] at a positive rate.
func (t TouchBesidePaging) valid() bool {
	return t == (TouchBesidePaging{}) || (t.Share > 0 && t.Share <= 2 && t.PagesInPerSec > 0 && !math.IsInf(t.PagesInPerSec, 1))
}

// factor is the touch rate's factor with the device paging pagesInPerSec
// in: 1 with no paging, the measured share from its rate on, linear in
// between (the slowdown grows with the paging around the core).
func (t TouchBesidePaging) factor(pagesInPerSec float64) float64 {
	if t == (TouchBesidePaging{}) || !(pagesInPerSec > 0) {
		return 1
	}
	return 1 - (1-t.Share)*min(pagesInPerSec/t.PagesInPerSec, 1)
}

// maxStealShare caps the cores the host's steal takes, as a share of the
// node's: the model needs cores left to share, and the measured steal
// stayed under a fifth of them.
const maxStealShare = 0.5

// stealCores is the cores this machine's host takes from it while the
// device pages pagesInPerSec in, at stealSecondsPerPage a page.
func stealCores(stealSecondsPerPage, pagesInPerSec, cpus float64) float64 {
	if !(stealSecondsPerPage > 0) || !(pagesInPerSec > 0) {
		return 0
	}
	return min(stealSecondsPerPage*pagesInPerSec, maxStealShare*cpus)
}
