package host

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/headroom-dev/headroom/internal/pseudofile"
)

// Swap tier kinds (SwapTier.Kind).
const (
	TierDisk  = "disk"  // a swap file or partition
	TierZram  = "zram"  // a compressed RAM block device used as swap
	TierZswap = "zswap" // the compressed cache in front of every swap device
)

// SwapTier is one place swapped pages go, with what it costs in RAM.
type SwapTier struct {
	Kind   string `json:"kind"`
	Device string `json:"device"` // the swap area's path; "zswap" for zswap
	// SizeBytes is the swap area's size (zswap: its pool limit).
	SizeBytes uint64 `json:"size_bytes"`
	// UsedBytes is the swap space in use (zswap: the original size of the
	// pages it holds, which also hold slots on the device behind it).
	UsedBytes uint64 `json:"used_bytes"`
	Priority  int    `json:"priority"`
	// StoredBytes and RAMBytes are what a compressed tier holds (original
	// size) and the RAM it takes for that; 0 for a disk.
	StoredBytes uint64 `json:"stored_bytes,omitempty"`
	RAMBytes    uint64 `json:"ram_bytes,omitempty"`
	// Algorithm is a compressed tier's compressor.
	Algorithm string `json:"algorithm,omitempty"`
}

// CompressionRatio is stored bytes per RAM byte (0 while empty).
func (t SwapTier) CompressionRatio() float64 {
	if t.RAMBytes == 0 {
		return 0
	}
	return float64(t.StoredBytes) / float64(t.RAMBytes)
}

// ZramStat is a zram device's mm_stat (bytes).
type ZramStat struct {
	OrigDataBytes  uint64 // what was written, uncompressed
	ComprDataBytes uint64 // its compressed size
	MemUsedBytes   uint64 // RAM the device takes, allocator overhead included
	MemLimitBytes  uint64 // 0: no limit
	SamePages      uint64 // pages stored as a fill pattern (no RAM)
}

// ParseZramMMStat parses /sys/block/zramN/mm_stat: orig_data_size
// compr_data_size mem_used_total mem_limit mem_used_max same_pages … .
func ParseZramMMStat(b []byte) (ZramStat, error) {
	f := strings.Fields(string(b))
	if len(f) < 6 {
		return ZramStat{}, fmt.Errorf("zram mm_stat: want at least 6 fields, got %d", len(f))
	}
	var v [6]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return ZramStat{}, fmt.Errorf("zram mm_stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return ZramStat{OrigDataBytes: v[0], ComprDataBytes: v[1], MemUsedBytes: v[2], MemLimitBytes: v[3], SamePages: v[5]}, nil
}

// ReadZram reads the mm_stat and algorithm of a zram device (/dev/zramN).
func ReadZram(dev string) (ZramStat, string, error) { return DefaultRoots.ReadZram(dev) }

// ReadZram reads a zram device's statistics under r.
func (r Roots) ReadZram(dev string) (ZramStat, string, error) {
	sys := r.sys("block", filepath.Base(dev))
	st, err := pseudofile.Parse(filepath.Join(sys, "mm_stat"), func(b []byte) (ZramStat, error) {
		st, err := ParseZramMMStat(b)
		if err != nil {
			return st, fmt.Errorf("%s: %w", dev, err)
		}
		return st, nil
	})
	if err != nil {
		return ZramStat{}, "", err
	}
	alg, _ := pseudofile.ReadString(filepath.Join(sys, "comp_algorithm"))
	return st, SelectedOption(alg), nil
}

// IsZram reports whether a swap area is a zram device.
func IsZram(path string) bool { return strings.HasPrefix(filepath.Base(path), "zram") }

// ZswapDir holds zswap's module parameters.
const ZswapDir = "/sys/module/zswap/parameters"

// Zswap is zswap's configuration (module parameters).
type Zswap struct {
	Enabled        bool
	MaxPoolPercent uint64
	Compressor     string
}

// ReadZswapParams reads ZswapDir; an error if the kernel has no zswap.
func ReadZswapParams() (Zswap, error) { return DefaultRoots.ReadZswapParams() }

// ReadZswapParams reads zswap's parameters under r.
func (r Roots) ReadZswapParams() (Zswap, error) {
	var z Zswap
	dir := r.sys("module", "zswap", "parameters")
	enabled, err := pseudofile.ReadString(filepath.Join(dir, "enabled"))
	if err != nil {
		return z, err
	}
	z.Enabled = strings.HasPrefix(strings.TrimSpace(enabled), "Y")
	if err := readSysUint(filepath.Join(dir, "max_pool_percent"), &z.MaxPoolPercent); err != nil {
		return z, err
	}
	c, err := pseudofile.ReadString(filepath.Join(dir, "compressor"))
	if err != nil {
		return z, err
	}
	z.Compressor = strings.TrimSpace(c)
	return z, nil
}

// ReadSwapTiers lists every active swap area and, when enabled, zswap in
// front of them, with the RAM the compressed ones take.
func ReadSwapTiers() ([]SwapTier, error) { return DefaultRoots.ReadSwapTiers() }

// ReadSwapTiers lists the swap tiers under r.
func (r Roots) ReadSwapTiers() ([]SwapTier, error) {
	swaps, err := r.ReadSwaps()
	if err != nil {
		return nil, err
	}
	var tiers []SwapTier
	for _, s := range swaps {
		t := SwapTier{Kind: TierDisk, Device: s.Path, SizeBytes: s.SizeBytes, UsedBytes: s.UsedBytes, Priority: s.Priority}
		if IsZram(s.Path) {
			t.Kind = TierZram
			st, alg, err := r.ReadZram(s.Path)
			if err != nil {
				return nil, err
			}
			t.StoredBytes, t.RAMBytes, t.Algorithm = st.OrigDataBytes, st.MemUsedBytes, alg
		}
		tiers = append(tiers, t)
	}
	z, err := r.ReadZswapParams()
	if err != nil || !z.Enabled {
		return tiers, nil
	}
	fs, err := procfs.NewFS(r.Proc)
	if err != nil {
		return nil, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return nil, fmt.Errorf("read /proc/meminfo: %w", err)
	}
	t := SwapTier{Kind: TierZswap, Device: "zswap", Priority: 1 << 16, Algorithm: z.Compressor}
	if mi.MemTotalBytes != nil {
		t.SizeBytes = *mi.MemTotalBytes * z.MaxPoolPercent / 100
	}
	if mi.ZswapBytes != nil && mi.ZswappedBytes != nil {
		t.RAMBytes, t.StoredBytes = *mi.ZswapBytes, *mi.ZswappedBytes
		t.UsedBytes = t.StoredBytes
	}
	return append(tiers, t), nil
}
