package memload

import (
	"fmt"
	"time"
)

// Params are the workload's parameters; they are echoed in every summary.
type Params struct {
	SizeBytes       uint64        `json:"size_bytes"`
	Scan            Scan          `json:"scan"`
	StrideBytes     uint64        `json:"stride_bytes"`
	WriteFraction   float64       `json:"writes"`
	RatePagesPerSec float64       `json:"rate_pages_per_sec"` // 0: as fast as possible
	Duration        time.Duration `json:"-"`
	DurationSeconds float64       `json:"duration_seconds,omitempty"`
	Iterations      uint64        `json:"iterations,omitempty"` // full passes; 0: use Duration
	Content         Content       `json:"-"`
	ContentName     string        `json:"content"`
	Seed            uint64        `json:"seed"`
	Mergeable       bool          `json:"mergeable"`
	// Checksum: checksum the block after populate and at the end (equal
	// when nothing wrote to it: a save and restore lost nothing).
	Checksum        bool          `json:"checksum,omitempty"`
	HugePages       HugePages     `json:"hugepages"`
	Interval        time.Duration `json:"-"`
	IntervalSeconds float64       `json:"interval_seconds"`
	// Pace is how often a rate-capped run wakes to touch its next batch
	// (0: DefaultPace).
	Pace        time.Duration `json:"-"`
	PaceSeconds float64       `json:"pace_seconds,omitempty"`
	// SharedStartWindow is set when many workers start at one instant:
	// after its first small batch (its start) the worker pauses until this
	// long after starting, leaving the CPU to the workers that have not
	// begun yet, so that every worker begins before any runs a scheduler
	// time slice (50 workers on 2 cores otherwise begin up to 100 ms
	// apart). It costs one short pause in a run of seconds.
	SharedStartWindow time.Duration `json:"-"`
}

// Normalize fills the JSON mirror fields.
func (p *Params) Normalize() {
	p.DurationSeconds = p.Duration.Seconds()
	p.IntervalSeconds = p.Interval.Seconds()
	p.PaceSeconds = p.Pace.Seconds()
	p.ContentName = p.Content.String()
}

// Validate checks the parameters against each other and the page size. The
// error names the offending flag.
func (p *Params) Validate(pageBytes uint64) error {
	switch {
	case p.SizeBytes < pageBytes:
		return fmt.Errorf("--size must be at least one page (%d bytes)", pageBytes)
	case p.StrideBytes == 0 || p.StrideBytes > p.SizeBytes:
		return fmt.Errorf("--stride must be between 1 and --size bytes, got %d", p.StrideBytes)
	case !(p.WriteFraction >= 0 && p.WriteFraction <= 1):
		return fmt.Errorf("--writes must be a fraction in [0,1], got %g", p.WriteFraction)
	case p.RatePagesPerSec < 0 || p.RatePagesPerSec > 1e9:
		return fmt.Errorf("--rate must be between 0 (unlimited) and 1G pages/s, got %g", p.RatePagesPerSec)
	case p.Duration < 0:
		return fmt.Errorf("--duration must not be negative")
	case p.Interval < 10*time.Millisecond:
		return fmt.Errorf("--interval must be at least 10ms, got %s", p.Interval)
	case p.Scan != ScanNone && p.Scan != ScanSeq && p.Scan != ScanRandom:
		return fmt.Errorf("--scan must be none, seq or random, got %q", p.Scan)
	case p.HugePages != HugePagesNever && p.HugePages != HugePagesMadvise:
		return fmt.Errorf("--hugepages must be never or madvise, got %q", p.HugePages)
	}
	return ValidatePace(p.Pace, p.RatePagesPerSec)
}

// ValidatePace checks --pace against its range and --rate (0: the default).
func ValidatePace(pace time.Duration, ratePagesPerSec float64) error {
	switch {
	case pace != 0 && (pace < time.Millisecond || pace > time.Second):
		return fmt.Errorf("--pace must be between 1ms and 1s, got %s", pace)
	case pace != 0 && ratePagesPerSec == 0:
		return fmt.Errorf("--pace needs --rate: a run without a cap never sleeps")
	}
	return nil
}
