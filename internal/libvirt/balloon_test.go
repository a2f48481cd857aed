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

// The bulk statistics read as DomainMemoryStats' do: the same guest view.
func TestBalloonStats(t *testing.T) {
	param := func(field string, v any) golibvirt.TypedParam {
		return golibvirt.TypedParam{Field: field, Value: golibvirt.TypedParamValue{D: 4, I: v}}
	}
	records := []golibvirt.DomainStatsRecord{
		{Dom: golibvirt.Domain{Name: "a"}, Params: []golibvirt.TypedParam{
			param("balloon.current", uint64(512<<10)), param("balloon.maximum", uint64(1<<20)),
			param("balloon.available", uint64(480<<10)), param("balloon.usable", uint64(400<<10)),
			param("balloon.unused", uint64(100<<10)), param("balloon.disk_caches", uint64(20<<10)),
			param("balloon.major_fault", uint64(3)), param("balloon.swap_in", uint64(8)), param("balloon.swap_out", uint64(16)),
			param("balloon.last-update", uint64(998)), param("balloon.rss", uint64(300<<10)),
			param("state.state", int32(1)), param("balloon.unused", "lots"),
		}},
		{Dom: golibvirt.Domain{Name: "no-report"}, Params: []golibvirt.TypedParam{param("balloon.current", uint64(256<<10))}},
		{Dom: golibvirt.Domain{Name: "negative"}, Params: []golibvirt.TypedParam{param("balloon.current", int64(-1))}},
	}
	stats := BalloonStats(records)
	g, ok := GuestMemory(stats["a"], 1<<30, time.Unix(1000, 0))
	if !ok || g.MemoryBytes != 512<<20 || g.TotalBytes != 480<<20 || g.AvailableBytes != 400<<20 || g.FreeBytes != 100<<20 ||
		g.DiskCachesBytes != 20<<20 || g.MajorFaults != 3 || g.SwapInBytes != 8<<10 || g.SwapOutBytes != 16<<10 || g.AgeSeconds != 2 {
		t.Errorf("a: %v %+v", ok, g)
	}
	if _, ok := GuestMemory(stats["no-report"], 1<<30, time.Unix(1000, 0)); ok {
		t.Error("a domain whose guest never reported has a view")
	}
	if len(stats["negative"]) != 0 || len(stats) != 3 {
		t.Errorf("stats %v", stats)
	}
}
