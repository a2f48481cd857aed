package memload

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Record is one interval's measurement. Counts are for the interval only.
type Record struct {
	Type            string    `json:"type"` // "interval"
	Worker          string    `json:"worker,omitempty"`
	Time            time.Time `json:"time"`
	ElapsedSeconds  float64   `json:"elapsed_seconds"`
	IntervalSeconds float64   `json:"interval_seconds"`
	Pages           uint64    `json:"pages"`
	PagesPerSec     float64   `json:"pages_per_sec"`
	MajorFaults     uint64    `json:"major_faults"`
	MinorFaults     uint64    `json:"minor_faults"`
	// UserCPUSeconds and SystemCPUSeconds are the worker process's CPU
	// time in the interval: with pages, its touch rate per core-second,
	// which tells a worker slowed on its core from one kept off it.
	UserCPUSeconds   float64 `json:"user_cpu_seconds"`
	SystemCPUSeconds float64 `json:"system_cpu_seconds"`
	RSSBytes         uint64  `json:"rss_bytes"`
	SwapBytes        uint64  `json:"swap_bytes"`
}

// Summary describes a whole run. Pages counts touches (one per stride; with
// the default stride, one per page) in the measured phase only.
type Summary struct {
	Type              string        `json:"type"` // "summary"
	Worker            string        `json:"worker,omitempty"`
	Pages             uint64        `json:"pages"`
	Seconds           float64       `json:"seconds"`
	PagesPerSec       float64       `json:"pages_per_sec"`
	MajorFaults       uint64        `json:"major_faults"`
	MinorFaults       uint64        `json:"minor_faults"`
	MajorFaultsPerSec float64       `json:"major_faults_per_sec"`
	UserCPUSeconds    float64       `json:"user_cpu_seconds"`
	SystemCPUSeconds  float64       `json:"system_cpu_seconds"`
	RSSBytes          uint64        `json:"rss_bytes"`
	SwapBytes         uint64        `json:"swap_bytes"`
	PopulateSeconds   float64       `json:"populate_seconds"`
	Populate          PopulateStats `json:"populate"`
	// Checksum is the block's CRC-64 at the end (Params.Checksum).
	Checksum      string `json:"checksum,omitempty"`
	StartUnixNano int64  `json:"start_unix_nano"`
	StopReason    string `json:"stop_reason"`
	Params        Params `json:"params"`
}

// Stop reasons reported in Summary.StopReason.
const (
	StopDuration   = "duration"
	StopIterations = "iterations"
	StopCanceled   = "canceled"
)

// Batch sizes: at full speed a batch is sized to last about targetBatch so
// that stop requests and interval counters stay fresh even when every touch
// is a major fault; under a rate cap a batch is a pace's worth of touches
// (Params.Pace, DefaultPace unless set), and the bucket holds rateBurst or
// a pace, whichever is longer.
const (
	minBatch         = 16
	maxBatch         = 1 << 16
	targetBatch      = time.Millisecond
	rateBurst        = 50 * time.Millisecond
	sharedStartBatch = 64
)

// DefaultPace: a rate-capped run wakes 100 times a second. Each wake-up
// ends a sleep, and in a guest that is dear (under TCG every guest context
// switch empties QEMU's software TLB): at 1M pages/s over 32 MiB a TCG
// guest's QEMU used 0.49-0.58 cores waking 500 times a second, 0.29-0.37
// at 100, 0.10 at 20 (0.075 idle); natively a wake-up costs microseconds.
const DefaultPace = 10 * time.Millisecond

// Run performs the measured phase on a populated block until the duration
// or iteration budget is spent or ctx ends, calling emit once per interval
// (from one goroutine at a time) and returning the summary. Cancel ctx with
// a cause (context.WithCancelCause) to have the cause reported as the stop
// reason.
func Run(ctx context.Context, b *Block, p Params, pop PopulateStats, emit func(Record)) Summary {
	p.Normalize()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var stop atomic.Bool
	cancelWatch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer cancelWatch()

	usage0 := readUsage()
	start := time.Now()

	var touched atomic.Uint64
	rep := newReporter(start, usage0, emit)
	reporterDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(p.Interval)
		defer ticker.Stop()
		for {
			select {
			case now := <-ticker.C:
				rep.report(now, touched.Load())
			case <-reporterDone:
				return
			}
		}
	}()

	var reason string
	if p.Scan == ScanNone {
		reason = hold(ctx, p.Duration)
	} else {
		reason = touchLoop(ctx, b, p, start, &stop, &touched)
	}
	end := time.Now()
	close(reporterDone)
	wg.Wait()
	done := touched.Load()
	rep.report(end, done)

	if reason == StopCanceled {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			reason = cause.Error()
		}
	}
	var sum string
	if p.Checksum {
		sum = b.Checksum()
	}
	usage1 := readUsage()
	rss, swap := memoryUse()
	elapsed := end.Sub(start)
	return Summary{
		Type:              "summary",
		Pages:             done,
		Seconds:           elapsed.Seconds(),
		PagesPerSec:       perSecond(done, elapsed),
		MajorFaults:       usage1.major - usage0.major,
		MinorFaults:       usage1.minor - usage0.minor,
		MajorFaultsPerSec: perSecond(usage1.major-usage0.major, elapsed),
		UserCPUSeconds:    (usage1.user - usage0.user).Seconds(),
		SystemCPUSeconds:  (usage1.system - usage0.system).Seconds(),
		RSSBytes:          rss,
		SwapBytes:         swap,
		PopulateSeconds:   pop.Seconds,
		Populate:          pop,
		Checksum:          sum,
		StartUnixNano:     start.UnixNano(),
		StopReason:        reason,
		Params:            p,
	}
}

// hold keeps the memory without touching it until the duration ends or ctx does.
func hold(ctx context.Context, d time.Duration) string {
	if d <= 0 {
		<-ctx.Done()
		return StopCanceled
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return StopDuration
	case <-ctx.Done():
		return StopCanceled
	}
}

// touchLoop runs batches of touches, publishing the running count after
// each batch, until a budget is spent or stop is set.
func touchLoop(ctx context.Context, b *Block, p Params, start time.Time, stop *atomic.Bool, touched *atomic.Uint64) string {
	t := newToucher(b, p.StrideBytes, p.WriteFraction, p.Content, p.Seed)
	var budget uint64
	if p.Iterations > 0 {
		budget = p.Iterations * t.slots
	}
	var deadline time.Time
	if p.Duration > 0 {
		deadline = start.Add(p.Duration)
	}

	batch := uint64(1024)
	var limiter *rate.Limiter
	var sleeper *time.Timer
	if p.RatePagesPerSec > 0 {
		var burst int
		batch, burst = ratedBatch(p.RatePagesPerSec, p.Pace)
		limiter = rate.NewLimiter(rate.Limit(p.RatePagesPerSec), burst)
		// Start with an empty bucket: the run is paced from its first touch,
		// with no initial burst.
		limiter.ReserveN(start, burst)
		sleeper = time.NewTimer(time.Hour)
		sleeper.Stop()
	}

	pauseUntil := start.Add(p.SharedStartWindow)
	var done uint64
	for !stop.Load() {
		n := batch
		if budget > 0 {
			if done >= budget {
				return StopIterations
			}
			n = min(n, budget-done)
		}
		batchStart := time.Now()
		if limiter != nil {
			if delay := limiter.ReserveN(batchStart, int(n)).DelayFrom(batchStart); delay > 0 {
				sleeper.Reset(delay)
				select {
				case <-sleeper.C:
				case <-ctx.Done():
					return StopCanceled
				}
			}
		}
		first := done == 0 && p.SharedStartWindow > 0
		if first {
			n = min(n, sharedStartBatch)
		}
		t.touch(p.Scan, n)
		done += n
		touched.Store(done)
		if first {
			// Begun (the first batch is this worker's start): now leave the
			// CPU to the workers that have not, until the window ends.
			if !sleepUntil(ctx, pauseUntil) {
				return StopCanceled
			}
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return StopDuration
		}
		if limiter == nil {
			batch = adaptBatch(batch, now.Sub(batchStart))
		}
	}
	return StopCanceled
}

// ratedBatch is a capped run's batch, a pace's worth of touches (at least
// one), and its bucket, rateBurst or a pace, whichever holds more.
func ratedBatch(ratePagesPerSec float64, pace time.Duration) (batch uint64, burst int) {
	if pace == 0 {
		pace = DefaultPace
	}
	burst = max(1, int(ratePagesPerSec*max(rateBurst, pace).Seconds()))
	return min(uint64(burst), max(1, uint64(ratePagesPerSec*pace.Seconds()))), burst
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// adaptBatch steers the batch size toward targetBatch of work.
func adaptBatch(batch uint64, took time.Duration) uint64 {
	switch {
	case took < targetBatch/2 && batch < maxBatch:
		return batch * 2
	case took > targetBatch*2 && batch > minBatch:
		return batch / 2
	}
	return batch
}

// reporter turns running totals into per-interval records.
type reporter struct {
	start     time.Time
	last      time.Time
	lastPages uint64
	lastUsage usage
	emit      func(Record)
}

func newReporter(start time.Time, u usage, emit func(Record)) *reporter {
	return &reporter{start: start, last: start, lastUsage: u, emit: emit}
}

func (r *reporter) report(now time.Time, pages uint64) {
	if r.emit == nil || !now.After(r.last) {
		return
	}
	u := readUsage()
	rss, swap := memoryUse()
	d := now.Sub(r.last)
	r.emit(Record{
		Type:             "interval",
		Time:             now,
		ElapsedSeconds:   now.Sub(r.start).Seconds(),
		IntervalSeconds:  d.Seconds(),
		Pages:            pages - r.lastPages,
		PagesPerSec:      perSecond(pages-r.lastPages, d),
		MajorFaults:      u.major - r.lastUsage.major,
		MinorFaults:      u.minor - r.lastUsage.minor,
		UserCPUSeconds:   (u.user - r.lastUsage.user).Seconds(),
		SystemCPUSeconds: (u.system - r.lastUsage.system).Seconds(),
		RSSBytes:         rss,
		SwapBytes:        swap,
	})
	r.last, r.lastPages, r.lastUsage = now, pages, u
}
