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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/results"
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
	// Depths are the rates at each queue depth Options.Depths asked for.
	Depths []DepthRates `json:"depths,omitempty"`
	// LargeBlockBytes, when Options asked for it, is the size of a second
	// pair of random reads and writes at Jobs; LargeReadIOPS and
	// LargeWriteIOPS their rates: against the 4 KiB rates they give what
	// each byte beyond an I/O's first page costs (swap reads a readahead
	// window and writes merged pages as one I/O).
	LargeBlockBytes int     `json:"large_block_bytes,omitempty"`
	LargeReadIOPS   float64 `json:"large_read_iops,omitempty"`
	LargeWriteIOPS  float64 `json:"large_write_iops,omitempty"`
	// Rounds is how many times it was all measured; each figure is the
	// median of the rounds.
	Rounds int `json:"rounds"`
}

// DepthRates are a device's 4 KiB random rates at one queue depth: many
// devices (NVMe, virtio) serve several times more I/Os at depth 16 than
// at depth 1, and paging's depth is the number of tasks faulting at once.
type DepthRates struct {
	QueueDepth int     `json:"queue_depth"`
	ReadIOPS   float64 `json:"read_iops"`
	WriteIOPS  float64 `json:"write_iops,omitempty"`
}

// Options choose what to measure: either a block device (a swap
// partition: read only, since an active swap area must never be written)
// or a directory on the swap file's file system, where a scratch file is
// written full and then read and written at random. A swap file itself is
// not read: its unwritten blocks are answered by the file system without
// touching the device.
type Options struct {
	Device       string // block device to read
	DeviceBytes  uint64
	Dir          string // directory for a scratch file (read and write tests)
	ScratchBytes uint64
	Duration     time.Duration
	Jobs         int
	// Depths, if any, are further queue depths to measure, each for
	// Duration (Jobs' own rates are Result's main figures).
	Depths []int
	// LargeBlockBytes, if set (a multiple of 4 KiB), is measured too, at
	// Jobs.
	LargeBlockBytes int
	// Rounds, if more than 1, repeats the whole measurement and keeps each
	// figure's median: a shared disk's rate at one depth moves by 10-30%
	// between tests seconds apart.
	Rounds int
	// Progress, if set, is told of each round as it starts.
	Progress func(line string)
}

// Run measures random reads, then (with a scratch file) random writes, at
// Jobs and then at each of Depths, Rounds times.
func Run(ctx context.Context, o Options) (Result, error) {
	r := Result{Device: o.Device, Jobs: o.Jobs, Seconds: o.Duration.Seconds(), Rounds: 1}
	readPath, readBytes := o.Device, o.DeviceBytes
	if o.Dir != "" {
		path, err := scratchFile(o.Dir, o.ScratchBytes)
		if err != nil {
			return r, err
		}
		defer os.Remove(path)
		r.Device, r.WritePath = o.Dir, path
		readPath, readBytes = path, o.ScratchBytes
	}
	if readBytes < 2*BlockBytes {
		return r, fmt.Errorf("probe %s: too small to probe", readPath)
	}
	r.ReadPath = readPath
	if o.LargeBlockBytes < 0 || o.LargeBlockBytes%BlockBytes != 0 || uint64(o.LargeBlockBytes) > readBytes/2 {
		return r, fmt.Errorf("probe: large block of %d bytes: want a multiple of %d, at most half of %s", o.LargeBlockBytes, BlockBytes, readPath)
	}
	for _, depth := range o.Depths {
		if depth < 1 {
			return r, fmt.Errorf("probe: queue depth %d: want at least 1", depth)
		}
	}
	target := readPath
	if o.Dir != "" {
		target = "a scratch file in " + o.Dir
	}
	rounds := make([]Result, max(o.Rounds, 1))
	for i := range rounds {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf("probing %s: 4 KiB random %s, about %s (round %d of %d)", target, o.tests(), o.roundTime(), i+1, len(rounds)))
		}
		rounds[i] = r
		if err := o.measure(ctx, &rounds[i], readBytes); err != nil {
			return r, err
		}
	}
	return medianOfRounds(rounds), nil
}

// tests names what a round measures.
func (o Options) tests() string {
	what := "reads"
	if o.Dir != "" {
		what = "reads and writes"
	}
	if len(o.Depths) > 0 {
		return fmt.Sprintf("%s at queue depths %d to %d", what, min(o.Jobs, slices.Min(o.Depths)), max(o.Jobs, slices.Max(o.Depths)))
	}
	return fmt.Sprintf("%s at queue depth %d", what, o.Jobs)
}

// roundTime is how long a round's tests take: one of Duration at Jobs,
// at the large block and at each further depth, for reads and for writes.
func (o Options) roundTime() time.Duration {
	tests := 1
	if o.LargeBlockBytes > 0 {
		tests++
	}
	for _, d := range o.Depths {
		if d != o.Jobs {
			tests++
		}
	}
	if o.Dir != "" {
		tests *= 2
	}
	return time.Duration(tests) * o.Duration
}

// measure fills one round's figures into r: reads, and writes with a
// scratch file, at Jobs (4 KiB, then the large block), then at each
// further depth.
func (o Options) measure(ctx context.Context, r *Result, readBytes uint64) error {
	rates := func(depth, block int) (read, write float64, readLatUs, writeLatUs float64, err error) {
		n, d, err := randomIO(ctx, r.ReadPath, unix.O_RDONLY, readBytes, o.Duration, depth, block, false)
		if err == nil {
			err = interrupted(ctx)
		}
		if err != nil {
			return 0, 0, 0, 0, err
		}
		read, readLatUs = float64(n)/d.Seconds(), latencyMicros(n, d, depth)
		if o.Dir != "" {
			if n, d, err = randomIO(ctx, r.WritePath, unix.O_WRONLY, o.ScratchBytes, o.Duration, depth, block, true); err == nil {
				err = interrupted(ctx)
			}
			if err != nil {
				return 0, 0, 0, 0, err
			}
			write, writeLatUs = float64(n)/d.Seconds(), latencyMicros(n, d, depth)
		}
		return read, write, readLatUs, writeLatUs, nil
	}
	var err error
	if r.ReadIOPS, r.WriteIOPS, r.ReadLatencyUs, r.WriteLatencyUs, err = rates(o.Jobs, BlockBytes); err != nil {
		return err
	}
	if o.LargeBlockBytes > 0 {
		r.LargeBlockBytes = o.LargeBlockBytes
		if r.LargeReadIOPS, r.LargeWriteIOPS, _, _, err = rates(o.Jobs, o.LargeBlockBytes); err != nil {
			return err
		}
	}
	for _, depth := range o.Depths {
		dr := DepthRates{QueueDepth: depth, ReadIOPS: r.ReadIOPS, WriteIOPS: r.WriteIOPS}
		if depth != o.Jobs { // Jobs' depth is measured already
			if dr.ReadIOPS, dr.WriteIOPS, _, _, err = rates(depth, BlockBytes); err != nil {
				return err
			}
		}
		r.Depths = append(r.Depths, dr)
	}
	return nil
}

// interrupted is an error once ctx is done: a test cut short measured a
// rate over part of its duration, and the next test would measure none, so
// no figure of an interrupted probe is reported.
func interrupted(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("probe interrupted: %w", context.Cause(ctx))
	}
	return nil
}

// medianOfRounds is the first round with each figure replaced by its
// median over all rounds (the rounds measured the same depths; of an
// even number, the lower middle one).
func medianOfRounds(rounds []Result) Result {
	r := rounds[0]
	r.Rounds = len(rounds)
	r.Depths = slices.Clone(r.Depths)
	median := func(of func(Result) float64) float64 {
		xs := make([]float64, len(rounds))
		for i, x := range rounds {
			xs[i] = of(x)
		}
		return results.Quantile(xs, 0.5)
	}
	r.ReadIOPS = median(func(x Result) float64 { return x.ReadIOPS })
	r.WriteIOPS = median(func(x Result) float64 { return x.WriteIOPS })
	r.ReadLatencyUs = median(func(x Result) float64 { return x.ReadLatencyUs })
	r.WriteLatencyUs = median(func(x Result) float64 { return x.WriteLatencyUs })
	r.LargeReadIOPS = median(func(x Result) float64 { return x.LargeReadIOPS })
	r.LargeWriteIOPS = median(func(x Result) float64 { return x.LargeWriteIOPS })
	for i := range r.Depths {
		r.Depths[i].ReadIOPS = median(func(x Result) float64 { return x.Depths[i].ReadIOPS })
		r.Depths[i].WriteIOPS = median(func(x Result) float64 { return x.Depths[i].WriteIOPS })
	}
	return r
}

// scratchFile writes a file of size bytes in dir with direct I/O and
// syncs it, so that every block is really on the device.
func scratchFile(dir string, size uint64) (string, error) {
	const chunk = 1 << 20
	size = max(size/chunk, 1) * chunk
	f, err := os.CreateTemp(dir, ".headroom-probe-")
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	path := f.Name()
	f.Close()
	fail := func(err error) (string, error) {
		os.Remove(path)
		return "", fmt.Errorf("probe: write scratch file %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fail(err)
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not zero: no file system may elide it
	}
	for off := uint64(0); off < size; off += chunk {
		if _, err := unix.Pwrite(fd, buf, int64(off)); err != nil {
			return fail(err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fail(err)
	}
	return path, nil
}

func latencyMicros(n uint64, d time.Duration, jobs int) float64 {
	if n == 0 {
		return 0
	}
	return d.Seconds() * float64(jobs) / float64(n) * 1e6
}

// randomIO runs jobs workers doing direct I/O of block bytes at uniform
// block-aligned offsets in [block, size) (the first page of a swap
// partition is its header) for d.
func randomIO(ctx context.Context, path string, mode int, size uint64, d time.Duration, jobs, block int, write bool) (uint64, time.Duration, error) {
	blocks := size/uint64(block) - 1
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
			buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(j), 0x5eed))
			for ctx.Err() == nil {
				off := int64(1+rng.Uint64N(blocks)) * int64(block)
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
