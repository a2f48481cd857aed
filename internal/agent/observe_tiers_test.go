package agent

import (
	"testing"

	"github.com/headroom-dev/headroom/internal/host"
)

func TestCompressedRAM(t *testing.T) {
	const mi = 1 << 20
	disk := host.SwapTier{Kind: host.TierDisk, UsedBytes: 300 * mi}
	zram := host.SwapTier{Kind: host.TierZram, UsedBytes: 100 * mi, StoredBytes: 100 * mi, RAMBytes: 30 * mi}
	zswap := host.SwapTier{Kind: host.TierZswap, UsedBytes: 80 * mi, StoredBytes: 80 * mi, RAMBytes: 20 * mi}
	emptyZram := host.SwapTier{Kind: host.TierZram, RAMBytes: 20 << 10}
	cases := []struct {
		name         string
		tiers        []host.SwapTier
		scopeSwap    uint64
		hostScope    bool
		chargesZswap bool
		want         uint64
	}{
		{"host scope counts pools in its used RAM already", []host.SwapTier{disk, zram}, 400 * mi, true, false, 0},
		{"disk only", []host.SwapTier{disk}, 300 * mi, false, false, 0},
		{"all the swap is the scope's: all of zram's pool", []host.SwapTier{disk, zram}, 400 * mi, false, false, 30 * mi},
		{"a quarter of the swap: a quarter of the pool", []host.SwapTier{disk, zram}, 100 * mi, false, false, 30 * mi / 4},
		{"zswap's pool on v1 (not charged)", []host.SwapTier{disk, zswap}, 150 * mi, false, false, 10 * mi},
		{"zswap's pool on v2 (charged to the cgroup)", []host.SwapTier{disk, zswap}, 150 * mi, false, true, 0},
		{"share capped at the whole pool", []host.SwapTier{disk, zram}, 800 * mi, false, false, 30 * mi},
		{"no swap in use", []host.SwapTier{emptyZram}, 0, false, false, 0},
	}
	for _, c := range cases {
		if got := compressedRAM(c.tiers, c.scopeSwap, c.hostScope, c.chargesZswap); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
