package libvirt

import (
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/policy"
)

type gm = policy.GuestMemory

func TestGuestMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	stat := func(tag golibvirt.DomainMemoryStatTags, v uint64) golibvirt.DomainMemoryStat {
		return golibvirt.DomainMemoryStat{Tag: int32(tag), Val: v}
	}
	full := []golibvirt.DomainMemoryStat{
		stat(golibvirt.DomainMemoryStatSwapIn, 8), stat(golibvirt.DomainMemoryStatSwapOut, 16),
		stat(golibvirt.DomainMemoryStatMajorFault, 3), stat(golibvirt.DomainMemoryStatMinorFault, 9000),
		stat(golibvirt.DomainMemoryStatUnused, 100<<10), stat(golibvirt.DomainMemoryStatAvailable, 480<<10),
		stat(golibvirt.DomainMemoryStatActualBalloon, 512<<10), stat(golibvirt.DomainMemoryStatRss, 300<<10),
		stat(golibvirt.DomainMemoryStatUsable, 400<<10), stat(golibvirt.DomainMemoryStatLastUpdate, 998),
		stat(golibvirt.DomainMemoryStatDiskCaches, 20<<10),
	}
	for _, tc := range []struct {
		name  string
		stats []golibvirt.DomainMemoryStat
		ok    bool
		check func(t *testing.T, g gm)
	}{
		{"all reported", full, true, func(t *testing.T, g gm) {
			if g.MemoryBytes != 512<<20 || g.MaxBytes != 1<<30 || g.TotalBytes != 480<<20 || g.AvailableBytes != 400<<20 ||
				g.FreeBytes != 100<<20 || g.DiskCachesBytes != 20<<20 || g.MajorFaults != 3 || g.SwapInBytes != 8<<10 ||
				g.SwapOutBytes != 16<<10 || g.AgeSeconds != 2 {
				t.Errorf("%+v", g)
			}
		}},
		// Only actual and rss until the guest reports (no period set).
		{"not reported yet", []golibvirt.DomainMemoryStat{stat(golibvirt.DomainMemoryStatActualBalloon, 512<<10),
			stat(golibvirt.DomainMemoryStatRss, 300<<10)}, false, nil},
		{"last_update 0", []golibvirt.DomainMemoryStat{stat(golibvirt.DomainMemoryStatActualBalloon, 512<<10),
			stat(golibvirt.DomainMemoryStatLastUpdate, 0)}, false, nil},
		{"some missing", []golibvirt.DomainMemoryStat{stat(golibvirt.DomainMemoryStatActualBalloon, 512<<10),
			stat(golibvirt.DomainMemoryStatLastUpdate, 1005)}, true, func(t *testing.T, g gm) {
			if g.TotalBytes != -1 || g.AvailableBytes != -1 || g.MajorFaults != -1 || g.SwapInBytes != -1 || g.AgeSeconds != 0 {
				t.Errorf("missing figures not -1, or a future update aged: %+v", g)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, ok := GuestMemory(tc.stats, 1<<30, now)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if tc.check != nil {
				tc.check(t, gm(g))
			}
		})
	}
}
