//go:build system

package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// A memory stall fires the trigger armed as the agent arms it (some 150 ms
// in 1 s, on /proc/pressure/memory, or 300 ms in 2 s without
// CAP_SYS_RESOURCE), and the trigger disarms once its context ends: the
// watcher wakes for the end itself, not at a timeout.
func TestSystemPSITriggerFiresAndStops(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.SwapFile(t, 512<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pressure := host.DefaultRoots.MemoryPressureFile()
	trig, err := host.NewPSITrigger(ctx, pressure, "some", 150*time.Millisecond, time.Second)
	if err != nil {
		trig, err = host.NewPSITrigger(ctx, pressure, "some", 300*time.Millisecond, 2*time.Second)
	}
	testenv.Require(t, err == nil, "a PSI trigger on /proc/pressure/memory: "+errString(err))

	// 192 MiB touched at random in 48 MiB: the workload stalls on swap-in.
	cg := testenv.NewMemoryCgroup(t, 48<<20)
	cg.StartLoad(t, "--size", "192Mi", "--scan", "random", "--duration", "60s")
	select {
	case <-trig.Events():
	case <-time.After(60 * time.Second):
		t.Fatal("no trigger event while a workload swapped for 60 s")
	}

	ended := time.Now()
	cancel()
	select {
	case <-trig.Done():
		t.Logf("disarmed %.3f s after its context ended", time.Since(ended).Seconds())
	case <-time.After(5 * time.Second):
		t.Fatal("the trigger still armed 5 s after its context ended")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
