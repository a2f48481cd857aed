package swaptier

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/headroom-dev/headroom/internal/host"
)

// Compression is what a compressor made of a workload's pages in zram:
// the bytes written and the RAM they took, the allocator (zsmalloc, which
// zswap's pool uses too) included.
type Compression struct {
	Algorithm   string `json:"algorithm"`
	StoredBytes uint64 `json:"stored_bytes"`
	RAMBytes    uint64 `json:"ram_bytes"`
	// SamePages were stored as a fill pattern, in no RAM at all.
	SamePages uint64 `json:"same_pages"`
}

// Ratio is stored bytes per RAM byte (0: nothing stored); +Inf when every
// page was a fill pattern.
func (c Compression) Ratio() float64 {
	if c.StoredBytes == 0 {
		return 0
	}
	return float64(c.StoredBytes) / float64(c.RAMBytes)
}

// MeasureCompression writes pageCount pages (page(i) returns page i, of the
// system's page size) to a scratch zram device compressing with algorithm
// ("": the device's default) and reads what they took. The device is
// reset, and removed if it was added, before MeasureCompression returns.
// zram compresses each page on its own, as swap stores it, so the ratio is
// the one a zram or zswap tier gets on that content.
func MeasureCompression(pageCount uint64, page func(i uint64) []byte, algorithm string) (c Compression, err error) {
	dev, hot, err := freeZram()
	if err != nil {
		return c, err
	}
	s := &Setup{}
	s.add(Made{Kind: host.TierZram, Device: "/dev/" + dev, HotAdded: hot})
	defer func() {
		if derr := s.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	sys := filepath.Join("/sys/block", dev)
	if algorithm != "" {
		if err := os.WriteFile(filepath.Join(sys, "comp_algorithm"), []byte(algorithm), 0o644); err != nil {
			return c, InputError{fmt.Sprintf("zram %s: compressor %s refused (%v); /proc/crypto lists what the kernel has", dev, algorithm, err)}
		}
	}
	pageBytes := uint64(os.Getpagesize())
	if err := os.WriteFile(filepath.Join(sys, "disksize"), []byte(strconv.FormatUint(pageCount*pageBytes, 10)), 0o644); err != nil {
		return c, fmt.Errorf("zram %s: set disksize: %w", dev, err)
	}
	f, err := os.OpenFile("/dev/"+dev, os.O_WRONLY, 0)
	if err != nil {
		return c, err
	}
	for i := uint64(0); i < pageCount; i++ {
		if _, err := f.Write(page(i)); err != nil {
			f.Close()
			return c, fmt.Errorf("write page %d to /dev/%s: %w", i, dev, err)
		}
	}
	// Written back from the page cache, every page is in the device.
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c, fmt.Errorf("/dev/%s: %w", dev, err)
	}
	st, alg, err := host.ReadZram("/dev/" + dev)
	if err != nil {
		return c, err
	}
	return Compression{Algorithm: alg, StoredBytes: st.OrigDataBytes, RAMBytes: st.MemUsedBytes, SamePages: st.SamePages}, nil
}
