package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/units"
)

// TierForm describes the accepted --swap-tier syntax.
const TierForm = "zram:SIZE[,ratio=R][,pool=node|host]"

// tierCPUSecondsPerPage is zram's cost to compress or decompress a page.
const tierCPUSecondsPerPage = 3e-6

// ContentRatio is how well a content class compresses (zram's ratio).
func ContentRatio(c memload.Content) float64 {
	switch c.Kind {
	case memload.ContentZero:
		return 50 // same-filled pages cost zram a few bytes
	case memload.ContentCompress:
		return c.CompressRatio
	case memload.ContentDup:
		return 1 / max(1-c.DupFraction, 0.02)
	}
	return 1
}

// ParseTier parses --swap-tier zram:SIZE[,ratio=R][,pool=node|host];
// without a ratio the tier compresses at contentRatio; pool=host puts the
// compressed pool outside the node's RAM.
func ParseTier(s string, contentRatio float64) (*Tier, error) {
	bad := fmt.Errorf("--swap-tier %q: want %s with R >= 1", s, TierForm)
	kind, opts, _ := strings.Cut(s, ":")
	if kind != "zram" || opts == "" {
		return nil, bad
	}
	parts := strings.Split(opts, ",")
	size, err := units.ParseBytes(parts[0])
	if err != nil || size == 0 {
		return nil, bad
	}
	t := &Tier{SizeBytes: size, Ratio: contentRatio, CPUSecondsPerPage: tierCPUSecondsPerPage}
	for _, o := range parts[1:] {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "ratio":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !(r >= 1) {
				return nil, bad
			}
			t.Ratio = r
		case "pool":
			if v != "node" && v != "host" {
				return nil, bad
			}
			t.PoolOnHost = v == "host"
		default:
			return nil, bad
		}
	}
	return t, nil
}
