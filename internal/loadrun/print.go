package loadrun

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/units"
)

// printer writes a run's output as a table or as JSON lines. Its methods
// may be called from the reporting goroutine and the main one.
type printer struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	rows int
	// intervalSeconds is the run's reporting interval (0: not known).
	intervalSeconds float64
}

func newPrinter(w io.Writer, asJSON bool) *printer { return &printer{w: w, json: asJSON} }

func (p *printer) emitJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	p.w.Write(append(b, '\n'))
}

func (p *printer) header(params memload.Params) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.intervalSeconds = params.IntervalSeconds
	if p.json {
		return
	}
	fmt.Fprintf(p.w, "headroom load: %s, scan %s, stride %d B, writes %g, content %s, rate %s\n",
		units.FormatBytes(params.SizeBytes), params.Scan, params.StrideBytes, params.WriteFraction,
		params.Content, rateText(params.RatePagesPerSec))
}

func (p *printer) populated(pop memload.PopulateStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		p.emitJSON(struct {
			Type string `json:"type"`
			memload.PopulateStats
		}{"populate", pop})
		return
	}
	fmt.Fprintf(p.w, "populated %d pages in %.2f s (%s pages/s, %d major faults)%s\n",
		pop.Pages, pop.Seconds, units.FormatRate(pop.PagesPerSec), pop.MajorFaults, checksumText(pop.Checksum))
}

func (p *printer) record(r memload.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		p.emitJSON(r)
		return
	}
	if r.IntervalSeconds < p.intervalSeconds/10 {
		// The moment between the last tick and the stop: its rate is
		// noise, and the summary counts its pages.
		return
	}
	if p.rows%20 == 0 {
		fmt.Fprintf(p.w, "%8s %10s %10s %10s %10s %10s\n", "elapsed", "pages/s", "majflt/s", "minflt/s", "rss", "swap")
	}
	p.rows++
	fmt.Fprintf(p.w, "%7.1fs %10s %10s %10s %10s %10s\n", r.ElapsedSeconds, units.FormatRate(r.PagesPerSec),
		units.FormatRate(float64(r.MajorFaults)/r.IntervalSeconds), units.FormatRate(float64(r.MinorFaults)/r.IntervalSeconds),
		units.FormatBytes(r.RSSBytes), units.FormatBytes(r.SwapBytes))
}

func (p *printer) summary(s memload.Summary) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		p.emitJSON(s)
		return
	}
	fmt.Fprintf(p.w, "summary: %d pages in %.2f s = %s pages/s; %d major faults (%s/s), %d minor; cpu user %.2f s sys %.2f s; populate %.2f s; stopped: %s%s\n",
		s.Pages, s.Seconds, units.FormatRate(s.PagesPerSec), s.MajorFaults, units.FormatRate(s.MajorFaultsPerSec), s.MinorFaults,
		s.UserCPUSeconds, s.SystemCPUSeconds, s.PopulateSeconds, s.StopReason, checksumText(s.Checksum))
}

func checksumText(sum string) string {
	if sum == "" {
		return ""
	}
	return "; checksum " + sum
}

func rateText(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return units.FormatRate(r) + " pages/s"
}

// note prints a progress line (table mode only).
func (p *printer) note(format string, args ...any) {
	if p.json {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// progress prints the fleet's current aggregate rate every interval (table
// mode only) until the returned function is called.
func (p *printer) progress(l *latestRates, every time.Duration) (stop func()) {
	if p.json {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				total, n := l.sum()
				if n == 0 {
					continue // no worker has finished an interval yet
				}
				p.note("%7.1fs  aggregate %s pages/s from %d workers", now.Sub(start).Seconds(), units.FormatRate(total), n)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// fleet prints per-worker results and the aggregate.
func (p *printer) fleet(results []loadctl.Result, agg FleetSummary) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		p.emitJSON(agg)
		return
	}
	var first time.Time
	for _, r := range results {
		if !r.StartedAt.IsZero() && (first.IsZero() || r.StartedAt.Before(first)) {
			first = r.StartedAt
		}
	}
	fmt.Fprintf(p.w, "%-8s %10s %10s %10s %12s  %s\n", "worker", "pages/s", "majflt/s", "populate", "start+ms", "status")
	for _, r := range results {
		status, rate, majflt := "ok", "-", "-"
		if r.Failed() {
			status = "FAILED: " + r.Err
		}
		if r.Summary != nil {
			rate, majflt = units.FormatRate(r.Summary.PagesPerSec), units.FormatRate(r.Summary.MajorFaultsPerSec)
		}
		pop, started := "-", "-"
		if r.Populate != nil {
			pop = fmt.Sprintf("%.2fs", r.Populate.Seconds)
		}
		if !r.StartedAt.IsZero() {
			started = fmt.Sprintf("%.3f", float64(r.StartedAt.Sub(first))/float64(time.Millisecond))
		}
		fmt.Fprintf(p.w, "%-8s %10s %10s %10s %12s  %s\n", r.Worker, rate, majflt, pop, started, status)
	}
	fmt.Fprintf(p.w, "aggregate: %d workers (%d failed), %s pages/s, %s major faults/s, slowest populate %.2f s, start skew %.3f ms\n",
		agg.Workers, agg.Failed, units.FormatRate(agg.PagesPerSec), units.FormatRate(agg.MajorFaultsPerSec), agg.PopulateSeconds, agg.StartSkewSeconds*1e3)
}
