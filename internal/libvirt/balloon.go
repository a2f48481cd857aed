package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/policy"
)

// balloonStatsSeconds is the statistics period the agent sets on a
// domain's balloon that has none: the guest reports once a second, as a
// headroom micro-VM's does.
const balloonStatsSeconds = 1

// Balloons are the running domains' balloons, read and set through
// libvirtd (ConnectGetAllDomainStats, DomainSetMemoryFlags with LIVE) by one
// goroutine beside the agent's loop.
type Balloons struct{ h *Host }

// Balloons returns the host's domains' balloons for the agent.
func (h *Host) Balloons() *Balloons { return &Balloons{h} }

// Balloon is the domain's balloon; nil when the domain is not running or
// has no virtio balloon: it is watched, never ballooned.
func (b *Balloons) Balloon(name string) agent.Balloon {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if d, ok := b.h.balloons[name]; ok {
		return d
	}
	return nil
}

// domainBalloon is one domain's balloon, as the agent sees it: its
// statistics and pending target in the agent's BalloonCache.
type domainBalloon struct {
	h    *Host
	name string
	agent.BalloonCache

	mu       sync.Mutex
	id       int32  // the domain's ID: a domain started again starts over
	maxBytes uint64 // <memory>
	// statsSet: the statistics period is set (in the XML, or by us).
	statsSet bool
	err      error
}

// Deflate sets the domain's memory to maxBytes and waits for libvirtd.
func (d *domainBalloon) Deflate(maxBytes uint64) error {
	ent, conn, ok := d.h.lookup(d.name)
	if !ok {
		return fmt.Errorf("domain %s: not running, or libvirt %s is down", d.name, d.h.cfg.URI)
	}
	return d.h.call("set memory of "+d.name, func() error {
		return conn.DomainSetMemoryFlags(ent.dom, maxBytes>>10, uint32(golibvirt.DomainMemLive))
	})
}

// newDomainBalloon is the balloon of domain name running under ID id.
func newDomainBalloon(h *Host, name string, id int32) *domainBalloon {
	d := &domainBalloon{h: h, name: name, id: id}
	d.Wake = h.wakeBalloons
	return d
}

// followBalloons keeps one domainBalloon per running domain with a virtio
// balloon, made again when the domain runs under a new ID. h.mu is held.
func (h *Host) followBalloons() {
	for name, d := range h.balloons {
		if e, ok := h.domains[name]; !ok || !e.info.HasBalloon || e.dom.ID != d.id {
			delete(h.balloons, name)
		}
	}
	for name, e := range h.domains {
		if !e.info.HasBalloon {
			continue
		}
		d, ok := h.balloons[name]
		if !ok {
			d = newDomainBalloon(h, name, e.dom.ID)
			h.balloons[name] = d
		}
		d.mu.Lock()
		d.maxBytes = e.info.MaxMemoryBytes
		d.statsSet = d.statsSet || e.info.BalloonStatsSeconds > 0
		d.mu.Unlock()
	}
}

func (h *Host) wakeBalloons() {
	select {
	case h.balloonWake <- struct{}{}:
	default:
	}
}

// pollBalloons reads every balloon's statistics each BalloonPoll and
// sends pending targets at once, until ctx ends. The statistics of all
// running domains come in one call (ConnectGetAllDomainStats): one call
// per domain each second cost 20 domains' agent half a core percent.
func (h *Host) pollBalloons(ctx context.Context) {
	every := h.cfg.BalloonPoll
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		h.mu.Lock()
		conn := h.conn
		todo := make([]*domainBalloon, 0, len(h.balloons))
		doms := make([]golibvirt.Domain, 0, len(h.balloons))
		for name, d := range h.balloons {
			todo = append(todo, d)
			doms = append(doms, h.domains[name].dom)
		}
		h.mu.Unlock()
		if conn != nil && len(todo) > 0 {
			for i, d := range todo {
				d.send(conn, doms[i])
			}
			var records []golibvirt.DomainStatsRecord
			err := h.call("balloon statistics", func() (err error) {
				records, err = conn.ConnectGetAllDomainStats(nil, uint32(golibvirt.DomainStatsBalloon), uint32(golibvirt.ConnectGetAllDomainsStatsActive))
				return err
			})
			stats := BalloonStats(records)
			now := time.Now()
			for _, d := range todo {
				d.store(stats[d.name], err, now)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.balloonWake:
		}
	}
}

// send sets the statistics period if the domain has none and sends a
// pending target.
func (d *domainBalloon) send(conn *golibvirt.Libvirt, dom golibvirt.Domain) {
	d.mu.Lock()
	statsSet := d.statsSet
	d.mu.Unlock()
	if !statsSet {
		err := d.h.call("set the balloon statistics period of "+d.name, func() error {
			return conn.DomainSetMemoryStatsPeriod(dom, balloonStatsSeconds, golibvirt.DomainMemLive)
		})
		d.mu.Lock()
		d.statsSet, d.err = err == nil, err
		d.mu.Unlock()
	}
	if target := d.PendingTarget(); target != 0 {
		d.TargetSent(target, d.h.call("set memory of "+d.name, func() error {
			return conn.DomainSetMemoryFlags(dom, target>>10, uint32(golibvirt.DomainMemLive))
		}))
	}
}

// store keeps the domain's statistics of this round (err: the round's
// call failed).
func (d *domainBalloon) store(stats []golibvirt.DomainMemoryStat, err error, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.err = err
		return
	}
	g, ok := GuestMemory(stats, d.maxBytes, now)
	if !ok {
		d.err = errNoStatsYet
		return
	}
	d.err = nil
	d.StoreGuest(g, now)
}

// balloonStatFields are the "balloon." fields of ConnectGetAllDomainStats
// as DomainMemoryStats' tags, so that both read the same way.
var balloonStatFields = map[string]golibvirt.DomainMemoryStatTags{
	"balloon.current": golibvirt.DomainMemoryStatActualBalloon, "balloon.swap_in": golibvirt.DomainMemoryStatSwapIn,
	"balloon.swap_out": golibvirt.DomainMemoryStatSwapOut, "balloon.major_fault": golibvirt.DomainMemoryStatMajorFault,
	"balloon.minor_fault": golibvirt.DomainMemoryStatMinorFault, "balloon.unused": golibvirt.DomainMemoryStatUnused,
	"balloon.available": golibvirt.DomainMemoryStatAvailable, "balloon.usable": golibvirt.DomainMemoryStatUsable,
	"balloon.last-update": golibvirt.DomainMemoryStatLastUpdate, "balloon.disk_caches": golibvirt.DomainMemoryStatDiskCaches,
	"balloon.rss": golibvirt.DomainMemoryStatRss,
}

// BalloonStats are the domains' balloon statistics by name, from
// ConnectGetAllDomainStats' records, as DomainMemoryStats gives them
// (sizes in KiB). A field that is not a non-negative integer is left out.
func BalloonStats(records []golibvirt.DomainStatsRecord) map[string][]golibvirt.DomainMemoryStat {
	out := make(map[string][]golibvirt.DomainMemoryStat, len(records))
	for _, r := range records {
		var stats []golibvirt.DomainMemoryStat
		for _, p := range r.Params {
			tag, ok := balloonStatFields[p.Field]
			if !ok {
				continue
			}
			if v, ok := typedUint(p.Value.I); ok {
				stats = append(stats, golibvirt.DomainMemoryStat{Tag: int32(tag), Val: v})
			}
		}
		out[r.Dom.Name] = stats
	}
	return out
}

// typedUint is a typed parameter's integer value.
func typedUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint64:
		return x, true
	case uint32:
		return uint64(x), true
	case int64:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	}
	return 0, false
}

var errNoStatsYet = errors.New("the guest has not reported statistics yet")

// GuestMemory is the policy's view of a domain's memory statistics (as
// DomainMemoryStats returns them: sizes in KiB, faults as counts,
// last_update in seconds since the epoch), at now; false until the guest
// has reported once. libvirt's "available" is the guest's total memory and
// "usable" what it could use without swapping (QEMU's stat-total-memory
// and stat-available-memory); a figure the guest does not report is -1.
func GuestMemory(stats []golibvirt.DomainMemoryStat, maxBytes uint64, now time.Time) (policy.GuestMemory, bool) {
	v := map[golibvirt.DomainMemoryStatTags]uint64{}
	for _, s := range stats {
		v[golibvirt.DomainMemoryStatTags(s.Tag)] = s.Val
	}
	kib := func(tag golibvirt.DomainMemoryStatTags) int64 {
		if x, ok := v[tag]; ok && x < 1<<53 {
			return int64(x) << 10
		}
		return -1
	}
	count := func(tag golibvirt.DomainMemoryStatTags) int64 {
		if x, ok := v[tag]; ok && x < 1<<63 {
			return int64(x)
		}
		return -1
	}
	last, ok := v[golibvirt.DomainMemoryStatLastUpdate]
	actual, hasActual := v[golibvirt.DomainMemoryStatActualBalloon]
	if !ok || last == 0 || !hasActual {
		return policy.GuestMemory{}, false
	}
	age := now.Sub(time.Unix(int64(last), 0)).Seconds()
	return policy.GuestMemory{MemoryBytes: actual << 10, MaxBytes: maxBytes,
		TotalBytes: kib(golibvirt.DomainMemoryStatAvailable), AvailableBytes: kib(golibvirt.DomainMemoryStatUsable),
		FreeBytes: kib(golibvirt.DomainMemoryStatUnused), DiskCachesBytes: kib(golibvirt.DomainMemoryStatDiskCaches),
		MajorFaults: count(golibvirt.DomainMemoryStatMajorFault),
		SwapInBytes: kib(golibvirt.DomainMemoryStatSwapIn), SwapOutBytes: kib(golibvirt.DomainMemoryStatSwapOut),
		AgeSeconds: max(age, 0)}, true
}
