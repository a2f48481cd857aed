//go:build system

package swaptier

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The workload's content, written to a scratch zram device, compresses as
// its kind says, and the device is gone afterwards.
func TestSystemMeasureCompression(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := os.Stat("/sys/class/zram-control")
	testenv.Require(t, err == nil, "zram (modprobe zram)")
	devicesBefore, _ := filepath.Glob("/sys/block/zram*")
	const size = 16 << 20
	pages := func(content string) (uint64, func(uint64) []byte) {
		c, err := memload.ParseContent(content)
		if err != nil {
			t.Fatal(err)
		}
		b, err := memload.Map(size, false, memload.HugePagesNever)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		b.Populate(c, 1, func() bool { return false })
		return b.Pages(), b.Page
	}
	for _, tc := range []struct {
		content, algorithm string
		min, max           float64
	}{
		{"random", "", 0.9, 1.01},
		{"compress=2", "", 1.3, 2.2},
		{"compress=2", "lzo", 1.3, 2.2},
		{"compress=4", "", 2.5, 4.4},
		{"zero", "", 50, math.Inf(1)},
	} {
		n, page := pages(tc.content)
		c, err := MeasureCompression(n, page, tc.algorithm)
		if err != nil {
			t.Fatalf("%s: %v", tc.content, err)
		}
		t.Logf("%s with %s: %d B in %d B of RAM, %.2f:1, %d same-filled pages", tc.content, c.Algorithm, c.StoredBytes, c.RAMBytes, c.Ratio(), c.SamePages)
		if r := c.Ratio(); !(r >= tc.min && r <= tc.max) || c.StoredBytes != size {
			t.Errorf("%s: %.2f:1 over %d B, want %g..%g over %d B", tc.content, r, c.StoredBytes, tc.min, tc.max, size)
		}
		if tc.algorithm != "" && c.Algorithm != tc.algorithm {
			t.Errorf("%s: compressed with %s, asked for %s", tc.content, c.Algorithm, tc.algorithm)
		}
	}
	if _, err := MeasureCompression(1, func(uint64) []byte { return make([]byte, os.Getpagesize()) }, "no-such-compressor"); !IsInputError(err) {
		t.Errorf("an unknown compressor: %v, want an input error", err)
	}
	devicesAfter, _ := filepath.Glob("/sys/block/zram*")
	if len(devicesAfter) != len(devicesBefore) {
		t.Errorf("zram devices %v before, %v after", devicesBefore, devicesAfter)
	}
	for _, d := range devicesAfter {
		if b, _ := os.ReadFile(filepath.Join(d, "disksize")); string(b) != "0\n" {
			t.Errorf("%s left with disksize %q", d, b)
		}
	}
}
