//go:build system

package swaptier

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// upForTest sets up spec with a state file of the test's own, taken down
// when the test ends even if it fails half-way.
func upForTest(t *testing.T, spec tierspec.Spec) (*Setup, string) {
	t.Helper()
	testenv.RequireRoot(t)
	state := filepath.Join(t.TempDir(), "swap.json")
	t.Cleanup(func() {
		if s, err := LoadState(state); err == nil && s != nil {
			if err := s.Down(); err != nil {
				t.Errorf("restore: %v", err)
			}
		}
	})
	s, err := Up(spec, state)
	if err != nil {
		t.Fatal(err)
	}
	return s, state
}

// swapOut makes a 64 MiB cgroup hold 192 MiB of pages that compress 4:1,
// so about 128 MiB go to swap, and returns once they have; stop ends the
// process (swapoff cannot bring its pages back into the full cgroup).
func swapOut(t *testing.T) (stop func()) {
	t.Helper()
	node := testenv.NewMemoryCgroup(t, 64<<20)
	return node.StartLoad(t, "--size", "192Mi", "--content", "compress=4", "--scan", "none", "--duration", "600s")
}

func tier(t *testing.T, st Status, kind string) TierStatus {
	t.Helper()
	for _, tr := range st.Tiers {
		if tr.Kind == kind && tr.MadeByHeadroom {
			return tr
		}
	}
	t.Fatalf("no %s tier made by headroom in %+v", kind, st.Tiers)
	return TierStatus{}
}

func TestSystemSwapTiers(t *testing.T) {
	t.Run("ZramInFrontOfAFile", func(t *testing.T) {
		setup, state := upForTest(t, tierspec.Spec{File: &tierspec.FileSpec{SizeBytes: 256 << 20, Priority: 10},
			Zram: &tierspec.ZramSpec{SizeBytes: 256 << 20, Algorithm: "lzo", Priority: 100}})
		file, zram := setup.Device(host.TierDisk), setup.Device(host.TierZram)
		stop := swapOut(t)
		st, err := ReadStatus(state)
		if err != nil {
			t.Fatal(err)
		}
		z, f := tier(t, st, host.TierZram), tier(t, st, host.TierDisk)
		t.Logf("zram: %d MiB stored in %d MiB of RAM (%.2f:1, %s); file: %d MiB used",
			z.StoredBytes>>20, z.RAMBytes>>20, z.CompressionRatio, z.Algorithm, f.UsedBytes>>20)
		// The faster tier fills first, and pages that compress 4:1 take at
		// most half their size in zram's RAM.
		if z.StoredBytes < 100<<20 || f.UsedBytes > 16<<20 || z.CompressionRatio < 2 || z.Algorithm != "lzo" {
			t.Errorf("zram %+v, file %+v: want ≥ 100 MiB in zram at ≥ 2:1 with lzo and the file (nearly) unused", z, f)
		}
		if st.Tiers[0].Kind != host.TierZram {
			t.Errorf("status lists %s first, want zram (the higher priority)", st.Tiers[0].Kind)
		}
		if _, err := Up(tierspec.Spec{File: &tierspec.FileSpec{SizeBytes: 1 << 20}}, state); !IsInputError(err) || !strings.Contains(err.Error(), "already") {
			t.Errorf("a second up: %v, want a refusal", err)
		}
		stop()
		s, err := LoadState(state)
		if err != nil || s == nil {
			t.Fatalf("state: %v, %v", s, err)
		}
		if err := s.Down(); err != nil {
			t.Fatal(err)
		}
		if isActive(file) || isActive(zram) {
			t.Errorf("still on after down: %s", readFile("/proc/swaps"))
		}
		if size := strings.TrimSpace(readFile("/sys/block/" + filepath.Base(zram) + "/disksize")); size != "0" && size != "" {
			t.Errorf("%s not reset: disksize %s", zram, size)
		}
		if _, err := os.Stat(filepath.Dir(file)); err == nil {
			t.Errorf("the swap file's directory %s is left", filepath.Dir(file))
		}
		if _, err := os.Stat(state); err == nil {
			t.Error("the state file is left after down")
		}
	})

	t.Run("ZswapRestoredAfterDown", func(t *testing.T) {
		before, err := host.ReadZswapParams()
		testenv.Require(t, err == nil, "zswap")
		_, state := upForTest(t, tierspec.Spec{File: &tierspec.FileSpec{SizeBytes: 256 << 20, Priority: 10}, Zswap: &tierspec.ZswapSpec{MaxPoolPercent: 7}})
		if z, _ := host.ReadZswapParams(); !z.Enabled || z.MaxPoolPercent != 7 {
			t.Fatalf("zswap after up: %+v", z)
		}
		stop := swapOut(t)
		st, err := ReadStatus(state)
		if err != nil {
			t.Fatal(err)
		}
		z := tier(t, st, host.TierZswap)
		t.Logf("zswap: %d MiB stored in %d MiB of RAM (%.2f:1, %s)", z.StoredBytes>>20, z.RAMBytes>>20, z.CompressionRatio, z.Algorithm)
		if z.StoredBytes < 64<<20 || z.CompressionRatio < 2 {
			t.Errorf("zswap %+v: want ≥ 64 MiB held at ≥ 2:1", z)
		}
		stop()
		s, _ := LoadState(state)
		if err := s.Down(); err != nil {
			t.Fatal(err)
		}
		if after, _ := host.ReadZswapParams(); after != before {
			t.Errorf("zswap after down %+v, want %+v", after, before)
		}
	})

	t.Run("DownRemovesOnlyWhatUpMade", func(t *testing.T) {
		theirs := testenv.SwapFile(t, 64<<20)
		_, state := upForTest(t, tierspec.Spec{Zswap: &tierspec.ZswapSpec{}}) // zswap in front of swap found on
		s, _ := LoadState(state)
		if err := s.Down(); err != nil {
			t.Fatal(err)
		}
		if !isActive(theirs) {
			t.Errorf("down turned off %s, which it did not make", theirs)
		}
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
