package swaptier

import (
	"errors"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

func TestParse(t *testing.T) {
	f, err := tierspec.ParseFile("8Gi,path=/srv/swap,priority=5")
	if err != nil || f != (tierspec.FileSpec{SizeBytes: 8 << 30, Path: "/srv/swap", Priority: 5}) {
		t.Errorf("ParseFile = %+v, %v", f, err)
	}
	if f, _ := tierspec.ParseFile("1Gi"); f.Priority != tierspec.DefaultFilePriority || f.Path != "" {
		t.Errorf("ParseFile defaults = %+v", f)
	}
	z, err := tierspec.ParseZram("4Gi,algorithm=lz4,priority=200")
	if err != nil || z != (tierspec.ZramSpec{SizeBytes: 4 << 30, Algorithm: "lz4", Priority: 200}) {
		t.Errorf("ParseZram = %+v, %v", z, err)
	}
	if z, _ := tierspec.ParseZram("512Mi"); z.Priority != tierspec.DefaultZramPriority {
		t.Errorf("ParseZram default priority %d", z.Priority)
	}
	zs, err := tierspec.ParseZswap("max_pool_percent=25,compressor=lzo")
	if err != nil || zs != (tierspec.ZswapSpec{MaxPoolPercent: 25, Compressor: "lzo"}) {
		t.Errorf("ParseZswap = %+v, %v", zs, err)
	}
	if zs, err := tierspec.ParseZswap(""); err != nil || zs != (tierspec.ZswapSpec{}) {
		t.Errorf("ParseZswap(bare) = %+v, %v", zs, err)
	}
	bad := []struct {
		parse func(string) error
		in    string
		says  string
	}{
		{fileErr, "", "--file"},
		{fileErr, "lots", "want --file SIZE"},
		{fileErr, "1k", "at least 40 KiB"},
		{fileErr, "1Gi,path=relative", "absolute path"},
		{fileErr, "1Gi,prio=3", `unknown or empty option "prio=3"`},
		{fileErr, "1Gi,priority=40000", "[-1,32767]"},
		{zramErr, "0", "--zram"},
		{zramErr, "1Gi,algorithm=", "unknown or empty option"},
		{zramErr, "1Gi,priority=-2", "[-1,32767]"},
		{zswapErr, "1Gi", "--zswap"},
		{zswapErr, "max_pool_percent=0", "[1,100]"},
		{zswapErr, "max_pool_percent=101", "[1,100]"},
		{zswapErr, "zpool=zbud", "unknown"},
	}
	for _, c := range bad {
		err := c.parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: error %v, want one saying %q", c.in, err, c.says)
		}
	}
}

func fileErr(s string) error  { _, err := tierspec.ParseFile(s); return err }
func zramErr(s string) error  { _, err := tierspec.ParseZram(s); return err }
func zswapErr(s string) error { _, err := tierspec.ParseZswap(s); return err }

func TestCheck(t *testing.T) {
	machine := func() Machine {
		return Machine{RAMBytes: 16 << 30, ZramAlgorithms: []string{"lzo-rle", "lzo", "lz4"}, HasZswap: true,
			FreeBytes: func(string) (uint64, error) { return 10 << 30, nil }}
	}
	file := func(size uint64) *tierspec.FileSpec { return &tierspec.FileSpec{SizeBytes: size, Priority: 10} }
	zram := func(size uint64, alg string) *tierspec.ZramSpec {
		return &tierspec.ZramSpec{SizeBytes: size, Algorithm: alg, Priority: 100}
	}
	cases := []struct {
		name string
		spec tierspec.Spec
		edit func(*Machine)
		says string // "" for accepted
	}{
		{"file fits", tierspec.Spec{File: file(8 << 30)}, nil, ""},
		{"file too big for the disk", tierspec.Spec{File: file(10 << 30)}, nil, "does not fit"},
		{"file path exists", tierspec.Spec{File: &tierspec.FileSpec{SizeBytes: 1 << 30, Path: "/"}}, nil, "exists"},
		{"free space unknown", tierspec.Spec{File: file(1 << 30)}, func(m *Machine) {
			m.FreeBytes = func(string) (uint64, error) { return 0, errors.New("no such dir") }
		}, "cannot check the free space"},
		{"zram twice RAM", tierspec.Spec{File: file(1 << 30), Zram: zram(32<<30, "")}, nil, ""},
		{"zram over twice RAM", tierspec.Spec{Zram: zram(32<<30+1, "")}, nil, "more than twice"},
		{"zram algorithm offered", tierspec.Spec{Zram: zram(1<<30, "lz4")}, nil, ""},
		{"zram algorithm not offered", tierspec.Spec{Zram: zram(1<<30, "zstd")}, nil, "offers lzo-rle, lzo, lz4"},
		{"no zram", tierspec.Spec{Zram: zram(1<<30, "")}, func(m *Machine) { m.ZramAlgorithms = nil }, "no zram"},
		{"zram writeback without support", tierspec.Spec{Zram: &tierspec.ZramSpec{SizeBytes: 1 << 30, Writeback: "/dev/vdb"}}, nil, "no writeback"},
		{"zswap with a file", tierspec.Spec{File: file(1 << 30), Zswap: &tierspec.ZswapSpec{}}, nil, ""},
		{"zswap on existing swap", tierspec.Spec{Zswap: &tierspec.ZswapSpec{}}, func(m *Machine) { m.ActiveSwapBytes = 1 << 30 }, ""},
		{"zswap without swap", tierspec.Spec{Zswap: &tierspec.ZswapSpec{}}, nil, "none is on"},
		{"zswap and zram", tierspec.Spec{Zram: zram(1<<30, ""), Zswap: &tierspec.ZswapSpec{}}, nil, "twice"},
		{"no zswap", tierspec.Spec{File: file(1 << 30), Zswap: &tierspec.ZswapSpec{}}, func(m *Machine) { m.HasZswap = false }, "no zswap"},
		{"nothing", tierspec.Spec{}, nil, "nothing to set up"},
	}
	for _, c := range cases {
		m := machine()
		if c.edit != nil {
			c.edit(&m)
		}
		err := Check(c.spec, m)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.says)
		case err != nil && !IsInputError(err):
			t.Errorf("%s: %v is not an input error", c.name, err)
		}
	}
}

func TestSortTiers(t *testing.T) {
	tiers := []host.SwapTier{
		{Kind: host.TierDisk, Device: "/swapfile", Priority: -2},
		{Kind: host.TierZswap, Device: "zswap", Priority: 1 << 16},
		{Kind: host.TierZram, Device: "/dev/zram0", Priority: 100},
		{Kind: host.TierDisk, Device: "/dev/vdb", Priority: -2},
	}
	var got []string
	for _, tier := range sortTiers(tiers) {
		got = append(got, tier.Device)
	}
	if strings.Join(got, " ") != "zswap /dev/zram0 /swapfile /dev/vdb" {
		t.Errorf("order %v", got)
	}
}

func FuzzParseZram(f *testing.F) {
	for _, s := range []string{"4Gi", "4Gi,algorithm=lz4,priority=5", "1,writeback=/dev/x", ",", "1Gi,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		z, err := tierspec.ParseZram(s)
		if err != nil {
			return
		}
		if z.SizeBytes == 0 || z.Priority < -1 || z.Priority > 32767 {
			t.Fatalf("accepted %q as %+v", s, z)
		}
	})
}

// A state file that cannot be read (a user without root) hides no tier:
// status shows them all, with who made them unknown and the reason said.
func TestStatusWithAnUnreadableRecord(t *testing.T) {
	st, err := ReadStatus("/proc/self/status/swap.json") // not a directory
	if err != nil || !strings.Contains(st.StateError, "which tiers headroom made is unknown") || st.Tiers == nil {
		t.Fatalf("status %+v, %v; want the tiers and the record's error", st, err)
	}
	st.Tiers = []TierStatus{{SwapTier: host.SwapTier{Kind: host.TierDisk, Device: "/var/tmp/s", Priority: 10, SizeBytes: 1 << 30}}}
	var b strings.Builder
	st.Print(&b)
	if out := b.String(); !strings.Contains(out, "  ?\n") || !strings.Contains(out, st.StateError) {
		t.Errorf("printed %q; want ? under made by headroom and the record's error", out)
	}
}
