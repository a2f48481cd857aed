// Package probe measures what a swap device can do: 4 KiB random reads and
// writes with direct I/O at a small queue depth, as fio does, so that swap
// rate thresholds can be set as a fraction of the device's real capacity.
package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// BlockBytes is the I/O size: one page, as swap does.
const BlockBytes = 4096

// Result is one device's measured rates.
type Result struct {
	Device         string  `json:"device"`
	ReadPath       string  `json:"read_path"`
	WritePath      string  `json:"write_path,omitempty"`
	Jobs           int     `json:"jobs"`
	Seconds        float64 `json:"seconds"`
	ReadIOPS       float64 `json:"read_iops"`
	WriteIOPS      float64 `json:"write_iops,omitempty"`
	ReadLatencyUs  float64 `json:"read_latency_us"`
	WriteLatencyUs float64 `json:"write_latency_us,omitempty"`
}

// Options choose what to measure.
type Options struct {
	// ReadPath is read at random offsets below ReadBytes (a swap file or
	// partition: reading an active swap area is safe).
	ReadPath  string
	ReadBytes uint64
	// WriteDir gets a scratch file for the write test ("" skips it; an
	// active swap area must never be written).
	WriteDir   string
	WriteBytes uint64
	Duration   time.Duration
	Jobs       int
}

// Run measures random reads, then random writes.
func Run(ctx context.Context, o Options) (Result, error) {
	r := Result{Device: o.ReadPath, ReadPath: o.ReadPath, Jobs: o.Jobs, Seconds: o.Duration.Seconds()}
	if o.ReadBytes < 2*BlockBytes {
		return r, fmt.Errorf("probe %s: too small to probe", o.ReadPath)
	}
	n, d, err := randomIO(ctx, o.ReadPath, unix.O_RDONLY, o.ReadBytes, o.Duration, o.Jobs, false)
	if err != nil {
		return r, err
	}
	r.ReadIOPS = float64(n) / d.Seconds()
	r.ReadLatencyUs = latencyMicros(n, d, o.Jobs)
	if o.WriteDir == "" {
		return r, nil
	}
	f, err := os.CreateTemp(o.WriteDir, ".headroom-probe-")
	if err != nil {
		return r, fmt.Errorf("probe write: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	err = unix.Fallocate(int(f.Fd()), 0, 0, int64(o.WriteBytes))
	f.Close()
	if err != nil {
		return r, fmt.Errorf("probe write: allocate %s: %w", path, err)
	}
	n, d, err = randomIO(ctx, path, unix.O_WRONLY, o.WriteBytes, o.Duration, o.Jobs, true)
	if err != nil {
		return r, err
	}
	r.WritePath = path
	r.WriteIOPS = float64(n) / d.Seconds()
	r.WriteLatencyUs = latencyMicros(n, d, o.Jobs)
	return r, nil
}

func latencyMicros(n uint64, d time.Duration, jobs int) float64 {
	if n == 0 {
		return 0
	}
	return d.Seconds() * float64(jobs) / float64(n) * 1e6
}

// randomIO runs jobs workers doing 4 KiB direct I/O at uniform offsets in
// [4 KiB, size) (the first page of a swap area is its header) for d.
func randomIO(ctx context.Context, path string, mode int, size uint64, d time.Duration, jobs int, write bool) (uint64, time.Duration, error) {
	blocks := size/BlockBytes - 1
	var ops atomic.Uint64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	for j := range jobs {
		fd, err := unix.Open(path, mode|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			cancel()
			wg.Wait()
			return 0, 0, fmt.Errorf("open %s with O_DIRECT: %w", filepath.Clean(path), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer unix.Close(fd)
			// Direct I/O needs an aligned buffer: a mapped page is.
			buf, err := unix.Mmap(-1, 0, BlockBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(j), 0x5eed))
			for ctx.Err() == nil {
				off := int64(1+rng.Uint64N(blocks)) * BlockBytes
				if write {
					_, err = unix.Pwrite(fd, buf, off)
				} else {
					_, err = unix.Pread(fd, buf, off)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("%s at offset %d: %w", path, off, err) })
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	return ops.Load(), time.Since(start), firstErr
}
