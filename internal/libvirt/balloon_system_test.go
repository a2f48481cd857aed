//go:build system

package libvirt_test

import (
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/libvirt/libvirttest"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// guestMemory reads a domain's balloon statistics as the agent does.
func guestMemory(t *testing.T, l *golibvirt.Libvirt, g *libvirttest.Guest) (policy.GuestMemory, bool) {
	t.Helper()
	stats, err := l.DomainMemoryStats(g.Dom, uint32(golibvirt.DomainMemoryStatNr), 0)
	if err != nil {
		return policy.GuestMemory{}, false
	}
	return libvirt.GuestMemory(stats, 0, time.Now())
}

// The balloon through libvirt: on a node whose minFree is set above what
// is free, the agent balloons an idle domain through libvirtd, and the
// guest sees it: the memory its kernel reports shrinks by what the
// balloon took. The domain came without a statistics period; the agent
// set one. A domain without a balloon is watched, never ballooned. When
// the agent stops, the guest gets its memory back.
func TestSystemLibvirtAgentBalloonsADomain(t *testing.T) {
	libvirttest.Start(t)
	testenv.SwapFile(t, 512<<20)
	l := libvirttest.Connect(t)
	img := libvirttest.GuestImage(t)
	parts := libvirttest.NewPartition(t, 1<<30, 512<<20)
	var guests []*libvirttest.Guest
	for _, noBalloon := range []bool{false, true} {
		spec := guestSpec(img, 512, "--size 64Mi --scan none --duration 300s", &libvirt.Workload{Priority: "1", MemoryRequest: "256Mi"})
		spec.Partition, spec.NoBalloon, spec.BalloonStatsSeconds = parts.Name, noBalloon, 0
		guests = append(guests, libvirttest.Define(t, l, spec))
	}
	ballooned, plain := guests[0], guests[1]
	lines, pid := runAgentPID(t, "--scope", scopeOf(parts), "--balloon", "--balloon-min-free", "1Gi", "--balloon-start", "0")
	for _, g := range guests {
		startLimited(t, l, g, 512)
	}
	for _, g := range guests {
		g.WaitStdout(t, `"type":"populate"`, 120*time.Second)
	}
	var before policy.GuestMemory
	testenv.Eventually(t, 30*time.Second, func() bool {
		var ok bool
		before, ok = guestMemory(t, l, ballooned)
		return ok // the period the agent set: the guest reports
	})
	t.Logf("%s before: actual %d MiB, the guest's total %d MiB", ballooned.Name, before.MemoryBytes>>20, before.TotalBytes>>20)

	n := lines.WaitFor(t, "an inflating balloon", 0, 120*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionSetBalloon && r.Workload == ballooned.Name && r.Balloon.TargetBytes < r.Balloon.MaxBytes
	}, func() string { return "" })
	set := lines.All()[n-1]
	asked := time.Now()
	target := set.Balloon.TargetBytes
	t.Logf("set_balloon %s: %d → %d MiB: %s", ballooned.Name, set.Balloon.FromBytes>>20, target>>20, set.Reason)
	var after policy.GuestMemory
	testenv.Eventually(t, 30*time.Second, func() bool {
		g, ok := guestMemory(t, l, ballooned)
		after = g
		// The guest sees at least 80% of what the balloon took gone from
		// its memory.
		took := int64(before.MemoryBytes) - int64(g.MemoryBytes)
		return ok && g.MemoryBytes <= target+4<<20 && before.TotalBytes-g.TotalBytes >= took*8/10 && took > 0
	})
	t.Logf("%s %.1f s after set_balloon: actual %d MiB, the guest's total %d MiB (was %d)", ballooned.Name, time.Since(asked).Seconds(),
		after.MemoryBytes>>20, after.TotalBytes>>20, before.TotalBytes>>20)
	for _, r := range lines.All() {
		if r.Action == policy.ActionSetBalloon && r.Workload == plain.Name {
			t.Errorf("ballooned %s, which has no balloon: %+v", plain.Name, r)
		}
	}
	if g, _ := guestMemory(t, l, ballooned); g.TotalBytes <= 0 {
		t.Errorf("no guest statistics from %s", ballooned.Name)
	}

	// The agent stops: the balloon it inflated deflates.
	syscall.Kill(pid, syscall.SIGTERM)
	stopped := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool {
		g, ok := guestMemory(t, l, ballooned)
		return ok && g.MemoryBytes >= 512<<20-4<<20
	})
	t.Logf("agent stopped: %s back to its 512 MiB %.1f s later", ballooned.Name, time.Since(stopped).Seconds())
}
