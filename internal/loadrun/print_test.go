package loadrun

import (
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
)

// The table leaves out the moment between the last tick and the stop (a
// rate over milliseconds); JSON keeps every record.
func TestTableLeavesOutTheStopsMoment(t *testing.T) {
	params := memload.Params{Interval: time.Second, IntervalSeconds: 1, Scan: memload.ScanSeq}
	records := []memload.Record{
		{ElapsedSeconds: 1, IntervalSeconds: 1, PagesPerSec: 60e6},
		{ElapsedSeconds: 2, IntervalSeconds: 1, PagesPerSec: 61e6},
		{ElapsedSeconds: 2.002, IntervalSeconds: 0.002, PagesPerSec: 79e6, MinorFaults: 37},
	}
	for _, c := range []struct {
		asJSON bool
		row    string // how a record's line starts
		want   int
	}{{false, "    ", 2}, {true, `{"type"`, 3}} {
		var b strings.Builder
		p := newPrinter(&b, c.asJSON)
		p.header(params)
		for _, r := range records {
			p.record(r)
		}
		got := 0
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, c.row) {
				got++
			}
		}
		if got != c.want {
			t.Errorf("JSON %v: %d records, want %d:\n%s", c.asJSON, got, c.want, b.String())
		}
	}
}
