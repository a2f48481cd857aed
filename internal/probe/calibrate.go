package probe

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
)

// CalibrateOptions are `headroom agent calibrate`'s parameters.
type CalibrateOptions struct {
	// Duration is the length of each of the read and write tests.
	Duration time.Duration
	// Jobs is the number of concurrent I/Os (queue depth).
	Jobs int
	// Fraction of the device's measured rate allowed before evicting.
	Fraction float64
	// WriteTestDir is a directory on the swap device for the write test
	// (default: beside a swap file; none for a partition).
	WriteTestDir string
	// Depths are further queue depths to measure (the simulator's device
	// model; the thresholds use Jobs').
	Depths []int
	// LargeBlockBytes, if set, is a block size measured too, at Jobs (the
	// simulator's cost of an I/O's bytes).
	LargeBlockBytes int
	// Rounds repeats the whole probe and keeps each figure's median
	// (0 or 1: once).
	Rounds int
	// Progress, if set, is told of each round as it starts.
	Progress func(line string)
}

// maxCalibrateRounds bounds CalibrateOptions.Rounds: each round is
// several tests of Duration.
const maxCalibrateRounds = 20

// Validate names the first bad option by its flag.
func (o CalibrateOptions) Validate() error {
	switch {
	case !(o.Fraction > 0 && o.Fraction <= 1):
		return fmt.Errorf("--fraction must be in (0,1], got %g", o.Fraction)
	case o.Jobs < 1 || o.Jobs > 256:
		return fmt.Errorf("--jobs must be in [1,256], got %d", o.Jobs)
	case o.Duration < 100*time.Millisecond:
		return fmt.Errorf("--duration must be at least 100ms")
	case o.Rounds < 1 || o.Rounds > maxCalibrateRounds:
		return fmt.Errorf("--rounds must be in [1,%d], got %d", maxCalibrateRounds, o.Rounds)
	}
	return nil
}

// Calibration is a measured swap device and the rate thresholds derived
// from it, keyed by their configuration keys.
type Calibration struct {
	Device     host.SwapDevice    `json:"device"`
	Probe      Result             `json:"probe"`
	Fraction   float64            `json:"fraction"`
	Thresholds map[string]float64 `json:"thresholds"`
}

// Calibrate measures dev's 4 KiB random-read and random-write rates with
// direct I/O and sets the swap-in and swap-out thresholds to a fraction of
// them: thresholds that mean something for this device. A swap file is
// probed on a scratch file written full beside it (a swap file's unwritten
// blocks would be answered without device I/O); a partition is only read,
// and written only in WriteTestDir on the same device.
func Calibrate(ctx context.Context, dev host.SwapDevice, o CalibrateOptions) (Calibration, error) {
	opts := Options{Duration: o.Duration, Jobs: o.Jobs, ScratchBytes: min(dev.SizeBytes, 256<<20), Depths: o.Depths, LargeBlockBytes: o.LargeBlockBytes,
		Rounds: o.Rounds, Progress: o.Progress}
	switch {
	case o.WriteTestDir != "":
		opts.Dir = o.WriteTestDir
	case dev.Type == "file":
		opts.Dir = filepath.Dir(dev.Path)
	default:
		opts.Device, opts.DeviceBytes = dev.Path, dev.SizeBytes
	}
	res, err := Run(ctx, opts)
	if err != nil {
		return Calibration{}, err
	}
	c := Calibration{Device: dev, Probe: res, Fraction: o.Fraction,
		Thresholds: map[string]float64{"maxAverageSwapInPagesPerSecond": o.Fraction * res.ReadIOPS}}
	if res.WriteIOPS > 0 {
		c.Thresholds["maxAverageSwapOutPagesPerSecond"] = o.Fraction * res.WriteIOPS
	}
	return c, nil
}

// PickSwapDevice returns the active swap area at path, or (path "") the
// highest-priority one that is not zram.
func PickSwapDevice(path string) (host.SwapDevice, error) {
	swaps, err := host.ReadSwaps()
	if err != nil {
		return host.SwapDevice{}, err
	}
	var best *host.SwapDevice
	for i, s := range swaps {
		if path != "" && s.Path == path {
			return s, nil
		}
		if path == "" && !strings.Contains(s.Path, "zram") && (best == nil || s.Priority > best.Priority) {
			best = &swaps[i]
		}
	}
	if path != "" {
		return host.SwapDevice{}, fmt.Errorf("--device %s is not an active swap area (see /proc/swaps)", path)
	}
	if best == nil {
		return host.SwapDevice{}, fmt.Errorf("no active swap area to calibrate (zram is not probed); enable swap or pass --device")
	}
	return *best, nil
}
