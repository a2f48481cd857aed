package tierspec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/units"
)

// Form is the one --swap-tier grammar, of `headroom density` (a real
// tier in front of the swap) and `headroom sim` (a modelled one). ratio,
// pool and a zswap pool's size describe a modelled tier only: a real one
// compresses at its content's ratio, in the node's RAM, its pool limited
// by max_pool_percent.
const Form = "zram:SIZE[,algorithm=A][,priority=N][,writeback=DEV][,ratio=R][,pool=node|host] or " +
	"zswap[:POOL_SIZE|:max_pool_percent=N][,compressor=C][,ratio=R][,pool=node|host]"

// Tier is a parsed --swap-tier.
type Tier struct {
	// One of Zram and Zswap is set.
	Zram  *ZramSpec
	Zswap *ZswapSpec
	// ZswapPoolBytes is a zswap pool given by its size (modelled only).
	ZswapPoolBytes uint64
	// Ratio is how many bytes of pages the tier stores in a byte of RAM
	// (0: not given; modelled only); PoolOnHost puts the compressed pool
	// outside the node's RAM (modelled only).
	Ratio      float64
	PoolOnHost bool
	// modelled lists the modelled-only parts given, for Real.
	modelled []string
}

// Parse parses a swap tier in Form ("" is no tier: both specs nil); its
// errors say what is wrong with s, the caller names its flag.
func Parse(s string) (Tier, error) {
	bad := func(why string) (Tier, error) {
		return Tier{}, fmt.Errorf("%q: %s; want %s", s, why, Form)
	}
	var t Tier
	kind, opts, _ := strings.Cut(s, ":")
	var parts []string
	if opts != "" {
		parts = strings.Split(opts, ",")
	}
	switch {
	case s == "":
		return t, nil
	case kind == "":
		return bad("no tier named")
	}
	switch kind {
	case "zram":
		if len(parts) == 0 {
			return bad("zram needs its SIZE")
		}
		size, err := units.ParseBytes(parts[0])
		if err != nil || size == 0 {
			return bad(fmt.Sprintf("zram's SIZE %q is not a size", parts[0]))
		}
		t.Zram, parts = &ZramSpec{SizeBytes: size, Priority: DefaultZramPriority}, parts[1:]
	case "zswap":
		t.Zswap = &ZswapSpec{}
		if len(parts) > 0 && !strings.Contains(parts[0], "=") {
			size, err := units.ParseBytes(parts[0])
			if err != nil || size == 0 {
				return bad(fmt.Sprintf("zswap's POOL_SIZE %q is not a size", parts[0]))
			}
			t.ZswapPoolBytes, parts = size, parts[1:]
			t.modelled = append(t.modelled, "a zswap POOL_SIZE")
		}
	default:
		return bad(fmt.Sprintf("unknown tier %q", kind))
	}
	seen := map[string]bool{}
	for _, o := range parts {
		k, v, ok := strings.Cut(o, "=")
		if !ok || v == "" {
			return bad(fmt.Sprintf("%q is not key=value", o))
		}
		if seen[k] {
			return bad(fmt.Sprintf("%s given twice", k))
		}
		seen[k] = true
		switch {
		case k == "ratio":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !(r >= 1) {
				return bad("ratio R must be a number of at least 1")
			}
			t.Ratio = r
			t.modelled = append(t.modelled, "ratio=")
		case k == "pool":
			if v != "node" && v != "host" {
				return bad("pool must be node or host")
			}
			t.PoolOnHost = v == "host"
			t.modelled = append(t.modelled, "pool=")
		case k == "algorithm" && t.Zram != nil:
			t.Zram.Algorithm = v
		case k == "writeback" && t.Zram != nil:
			t.Zram.Writeback = v
		case k == "priority" && t.Zram != nil:
			n, err := priority("zram", v, DefaultZramPriority)
			if err != nil {
				return bad(err.Error())
			}
			t.Zram.Priority = n
		case k == "compressor" && t.Zswap != nil:
			t.Zswap.Compressor = v
		case k == "max_pool_percent" && t.Zswap != nil:
			if t.ZswapPoolBytes > 0 {
				return bad("give a zswap pool its POOL_SIZE or max_pool_percent, not both")
			}
			n, err := maxPoolPercent("zswap", v)
			if err != nil {
				return bad(err.Error())
			}
			t.Zswap.MaxPoolPercent = n
		default:
			return bad(fmt.Sprintf("%s is not a key of %s", k, kind))
		}
	}
	return t, nil
}

// Real refuses what only a modelled tier takes: a real tier's ratio is
// its content's, and its pool is in the node's RAM, limited by
// max_pool_percent.
func (t Tier) Real() error {
	if len(t.modelled) > 0 {
		return fmt.Errorf("%s describe%s a modelled tier (headroom sim); a real tier compresses at its content's ratio, in RAM, its zswap pool limited by max_pool_percent",
			strings.Join(t.modelled, ", "), map[bool]string{true: "s", false: ""}[len(t.modelled) == 1])
	}
	return nil
}
