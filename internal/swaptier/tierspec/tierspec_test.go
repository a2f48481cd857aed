package tierspec

import (
	"strings"
	"testing"
)

// One grammar for density and sim: what a real tier takes, what only a
// modelled one does (Real refuses it), and what neither does.
func TestParseTier(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Tier // compared on its specs and modelled fields
		real bool // Real accepts it
		bad  string
	}{
		{in: "", real: true},
		{in: "zram:2Gi", want: Tier{Zram: &ZramSpec{SizeBytes: 2 << 30, Priority: DefaultZramPriority}}, real: true},
		{in: "zram:2Gi,algorithm=lz4,priority=50,writeback=/dev/vdb", want: Tier{Zram: &ZramSpec{SizeBytes: 2 << 30, Algorithm: "lz4", Priority: 50, Writeback: "/dev/vdb"}}, real: true},
		{in: "zswap", want: Tier{Zswap: &ZswapSpec{}}, real: true},
		{in: "zswap:max_pool_percent=20,compressor=zstd", want: Tier{Zswap: &ZswapSpec{MaxPoolPercent: 20, Compressor: "zstd"}}, real: true},
		{in: "zram:1Gi,ratio=3,pool=host", want: Tier{Zram: &ZramSpec{SizeBytes: 1 << 30, Priority: DefaultZramPriority}, Ratio: 3, PoolOnHost: true}},
		{in: "zswap:240Mi", want: Tier{Zswap: &ZswapSpec{}, ZswapPoolBytes: 240 << 20}},
		{in: "zram", bad: "needs its SIZE"},
		{in: "zram:lots", bad: "not a size"},
		{in: "zswap:0", bad: "not a size"},
		{in: "zcache:1Gi", bad: "unknown tier"},
		{in: ":", bad: "no tier named"}, // found by FuzzParseTier
		{in: ":zram", bad: "no tier named"},
		{in: "zram:1Gi,max_pool_percent=20", bad: "not a key of zram"},
		{in: "zswap:algorithm=lz4", bad: "not a key of zswap"},
		{in: "zswap:max_pool_percent=0", bad: "[1,100]"},
		{in: "zswap:240Mi,max_pool_percent=20", bad: "not both"},
		{in: "zram:1Gi,ratio=0.5", bad: "at least 1"},
		{in: "zram:1Gi,pool=guest", bad: "node or host"},
		{in: "zram:1Gi,priority=x", bad: "priority"},
		{in: "zswap:compressor=", bad: "not key=value"},
		{in: "zram:1Gi,ratio=2,ratio=3", bad: "twice"},
	} {
		got, err := Parse(c.in)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), Form) {
				t.Errorf("%q: %+v, %v; want an error saying %q and naming the grammar", c.in, got, err, c.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if (got.Zram == nil) != (c.want.Zram == nil) || got.Zram != nil && *got.Zram != *c.want.Zram ||
			(got.Zswap == nil) != (c.want.Zswap == nil) || got.Zswap != nil && *got.Zswap != *c.want.Zswap ||
			got.ZswapPoolBytes != c.want.ZswapPoolBytes || got.Ratio != c.want.Ratio || got.PoolOnHost != c.want.PoolOnHost {
			t.Errorf("%q: %+v, want %+v", c.in, got, c.want)
		}
		if err := got.Real(); (err == nil) != c.real {
			t.Errorf("%q: Real() = %v, want accepted %v", c.in, err, c.real)
		}
	}
}

func FuzzParseTier(f *testing.F) {
	for _, s := range []string{"zram:2Gi,algorithm=lz4", "zswap:240Mi,ratio=2,pool=host", "zswap:max_pool_percent=5", "zram:,", "zswap:="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tier, err := Parse(s)
		if err != nil {
			return
		}
		if s != "" && (tier.Zram == nil) == (tier.Zswap == nil) {
			t.Fatalf("%q: want exactly one of zram and zswap, got %+v", s, tier)
		}
		if tier.Ratio != 0 && !(tier.Ratio >= 1) {
			t.Fatalf("%q: ratio %g", s, tier.Ratio)
		}
	})
}
