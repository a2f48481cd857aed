package testenv

import (
	"path/filepath"
	"testing"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
)

// RequireNoSwap: root, and no swap area active, for a probe that makes
// its own swap file (sim's paging runs).
func RequireNoSwap(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	swaps, err := host.ReadSwaps()
	if err != nil {
		t.Fatal(err)
	}
	Require(t, len(swaps) == 0, "no swap area active (the probe makes its own swap file)")
}

// RequireProbeCleanedUp fails where a probe left a swap area active or
// a cgroup named by pattern (e.g. "headroom-sim-*") under the root.
func RequireProbeCleanedUp(t testing.TB, pattern string) {
	t.Helper()
	if swaps, err := host.ReadSwaps(); err != nil || len(swaps) != 0 {
		t.Fatalf("swap areas left active: %v (%v)", swaps, err)
	}
	root, err := cgroup.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	if left, err := filepath.Glob(filepath.Join(root.Path(), pattern)); err != nil || len(left) > 0 {
		t.Fatalf("cgroups left: %v (%v)", left, err)
	}
}
