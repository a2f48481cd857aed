package sim

import (
	"fmt"
	"strings"

	"github.com/headroom-dev/headroom/internal/memload/loadspec"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

// zswapDefaultMaxPoolPercent is the kernel's default zswap.max_pool_percent.
const zswapDefaultMaxPoolPercent = 20

// zswapAcceptShare is the share of its limit a full zswap pool writes back
// down to before it takes pages again (zswap.accept_threshold_percent).
const zswapAcceptShare = 0.9

// zswapWritebackMultiple is how many times the pages the accept threshold
// names a full zswap pool writes back before it takes pages again. Its
// size is zsmalloc's pages, and loads free objects scattered over them:
// the pool shrinks only as whole pages empty. Measured here (random
// workers on a 1 GiB node, a 241 MiB pool, vmstat's zswpwb over each
// spell of refused stores: 31k, 46k, 46k and 63k pages) against the pool's
// pages at lzo's 1.83:1 on that content (the compressor's ratio `sim
// --machine this` measures): 2.7, 4.1, 4.1 and 5.6 times.
const zswapWritebackMultiple = 4.1

// isZswap reports whether the tier is a zswap pool (nil: no tier). What
// follows from it: a zswap page holds a slot on the device (zram's hold
// its own), keeps it when loaded below half full (zram frees it: a
// synchronous device bypasses the swap cache), and its loads and stores
// are no block I/O, so not pswpin or pswpout (zram's are).
func (t *Tier) isZswap() bool { return t != nil && t.Kind == TierZswap }

// tierCPUSecondsPerPage is zram's cost to compress or decompress a page.
const tierCPUSecondsPerPage = 3e-6

// SameFilledRatio is the ratio the model gives pages zram and zswap store
// as a fill pattern (a few bytes each); a measured ratio is capped there.
const SameFilledRatio = 50

// ContentRatio is how well a content class compresses (zram's ratio).
func ContentRatio(c loadspec.Content) float64 {
	switch c.Kind {
	case loadspec.ContentZero:
		return SameFilledRatio
	case loadspec.ContentCompress:
		return c.CompressRatio
	case loadspec.ContentDup:
		return 1 / max(1-c.DupFraction, 0.02)
	}
	return 1
}

// TierKindOf is the kind of tier a --swap-tier value names ("" for none,
// or a kind ParseTier refuses).
func TierKindOf(s string) TierKind {
	switch kind, _, _ := strings.Cut(s, ":"); TierKind(kind) {
	case TierZram:
		return TierZram
	case TierZswap:
		return TierZswap
	}
	return ""
}

// ParseTier parses a swap tier (tierspec.Form, the grammar density
// shares) into the modelled tier. zram:SIZE is a compressed swap device of
// SIZE (uncompressed); zswap is a compressed cache in front of the device,
// its pool limited to POOL_SIZE or max_pool_percent (default 20) of
// ramBytes, the RAM the kernel takes that percentage of. Without a ratio
// the tier compresses at contentRatio; pool=host puts the compressed pool
// outside the node's RAM. The compressor, algorithm and priority a real
// tier takes are accepted; the model's ratio stands for the compressor.
func ParseTier(s string, contentRatio float64, ramBytes uint64) (*Tier, error) {
	p, err := tierspec.Parse(s)
	if err != nil {
		return nil, err
	}
	t := &Tier{Ratio: contentRatio, CPUSecondsPerPage: tierCPUSecondsPerPage, PoolOnHost: p.PoolOnHost}
	if p.Ratio > 0 {
		t.Ratio = p.Ratio
	}
	switch {
	case p.Zram != nil:
		t.Kind, t.SizeBytes = TierZram, p.Zram.SizeBytes
	case p.Zswap != nil:
		t.Kind, t.PoolBytes = TierZswap, p.ZswapPoolBytes
		if t.PoolBytes == 0 {
			if ramBytes == 0 {
				return nil, fmt.Errorf("%q: a zswap pool sized by max_pool_percent needs the node's RAM (Node.RAMBytes), or give its size (zswap:POOL_SIZE)", s)
			}
			pct := uint64(zswapDefaultMaxPoolPercent)
			if p.Zswap.MaxPoolPercent > 0 {
				pct = p.Zswap.MaxPoolPercent
			}
			t.PoolBytes = ramBytes * pct / 100
		}
		// The pool holds compressed pages: it takes ratio times its
		// size of pages.
		t.SizeBytes = uint64(float64(t.PoolBytes) * t.Ratio)
	default:
		return nil, fmt.Errorf("%q: want %s", s, tierspec.Form)
	}
	return t, nil
}
