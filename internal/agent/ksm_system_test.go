//go:build system

package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The KSM node: 4 processes of 64 MiB, 80% of their pages duplicates,
// offered for merging, in a 1 GiB node (a quarter of its RAM).
const (
	ksmNodeRAM  = 1 << 30
	ksmWorkers  = 4
	ksmWorkerMi = 64
)

// startMergeable starts the KSM node's processes and returns once every
// one has populated its memory.
func startMergeable(t *testing.T, node *testenv.MemoryCgroup) {
	t.Helper()
	for i := range ksmWorkers {
		node.StartLoad(t, "--size", strconv.Itoa(ksmWorkerMi)+"Mi", "--content", "dup=0.8", "--mergeable",
			"--scan", "none", "--duration", "600s", "--seed", strconv.Itoa(i+1))
	}
}

// nextKSM returns the agent's next set_ksm decision.
func nextKSM(t *testing.T, records <-chan Record, within time.Duration) policy.KSMSetting {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case r, ok := <-records:
			if !ok {
				t.Fatal("the agent exited")
			}
			if r.Action == policy.ActionSetKSM && r.KSM != nil {
				if r.Error != "" {
					t.Fatalf("set_ksm failed: %s", r.Error)
				}
				t.Logf("set_ksm: %s", r.Reason)
				return *r.KSM
			}
		case <-deadline:
			t.Fatalf("no set_ksm decision within %s", within)
		}
	}
}

// assertKSMRestored checks that the agent put back ksmd's settings as the
// test found them (stopped, the kernel's pace and advisor).
func assertKSMRestored(t *testing.T, want host.KSM) {
	t.Helper()
	got, err := host.ReadKSM()
	if err != nil {
		t.Fatal(err)
	}
	if got.Run != 0 || got.PagesToScan != want.PagesToScan || got.SleepMillisecs != want.SleepMillisecs || got.AdvisorMode != want.AdvisorMode {
		t.Errorf("KSM after the agent: run=%d pages_to_scan=%d sleep_millisecs=%d advisor_mode=%q; want run=0 %d %d %q",
			got.Run, got.PagesToScan, got.SleepMillisecs, got.AdvisorMode, want.PagesToScan, want.SleepMillisecs, want.AdvisorMode)
	}
}

func TestSystemKSMGovernor(t *testing.T) {
	saved := testenv.KSM(t)
	node := testenv.NewMemoryCgroup(t, ksmNodeRAM)
	startMergeable(t, node)
	mergeable := uint64(ksmWorkers * ksmWorkerMi << 20)

	t.Run("StandbyWhileRAMIsNotNeeded", func(t *testing.T) {
		// The node is at a quarter of its RAM; merging is wanted from 90%.
		records, stop := startAgent(t, node, t.TempDir(), "--ksm", "governor", "--ksm-ram-need", "0.9")
		if s := nextKSM(t, records, 10*time.Second); s.Phase != policy.KSMStandby || s.Run != 0 {
			t.Fatalf("first decision %+v, want standby with ksmd stopped", s)
		}
		stop()
		assertKSMRestored(t, saved)
	})

	t.Run("BurstsThenIdlesAndRestores", func(t *testing.T) {
		records, stop := startAgent(t, node, t.TempDir(), "--ksm", "governor", "--ksm-ram-need", "0.2")
		burst := nextKSM(t, records, 10*time.Second)
		if burst.Phase != policy.KSMBurst || burst.Run != 1 || burst.PagesToScan < 1000 {
			t.Fatalf("first decision %+v, want a burst of at least 1000 pages a batch", burst)
		}
		// The burst may retune its pace when ksmd's measured CPU drifts
		// from the target (it does when other work shares the cores);
		// the decision that ends the burst is the first of another phase.
		steady, ends := nextKSM(t, records, 60*time.Second), time.Now().Add(60*time.Second)
		for steady.Phase == policy.KSMBurst {
			burst = steady
			steady = nextKSM(t, records, time.Until(ends))
		}
		k, err := host.ReadKSM()
		if err != nil {
			t.Fatal(err)
		}
		// dup=0.8 makes 80% of the pages copies: merging them saves at
		// least 60% of the mergeable memory before the governor calls it done.
		if steady.Phase != policy.KSMSteady || steady.PagesToScan*10 > burst.PagesToScan {
			t.Errorf("after the burst %+v, want steady at under a tenth of the burst's pace", steady)
		}
		if k.GeneralProfitBytes < int64(mergeable*6/10) {
			t.Errorf("the governor stopped bursting at a profit of %d MiB of %d MiB mergeable, want ≥ 60%%",
				k.GeneralProfitBytes>>20, mergeable>>20)
		}
		t.Logf("steady with %d MiB saved of %d MiB mergeable after %d full scans", k.GeneralProfitBytes>>20, mergeable>>20, k.FullScans)
		stop()
		assertKSMRestored(t, saved)
		// Stopping ksmd does not unmerge: the saving stays.
		if k, _ := host.ReadKSM(); k.PagesSharing == 0 {
			t.Error("the agent's restore unmerged the pages")
		}
	})

	t.Run("AdvisorModeHandsThePaceToTheKernel", func(t *testing.T) {
		if saved.AdvisorMode == "" {
			t.Skip("this kernel has no KSM advisor")
		}
		// Turning the advisor on or off resets the pace to its own default
		// (500 and 100 pages): a pace of neither shows that the agent puts
		// back what it found.
		found := saved
		found.PagesToScan = 1234
		if err := os.WriteFile(filepath.Join(host.KSMDir, "pages_to_scan"), []byte("1234"), 0o644); err != nil {
			t.Fatal(err)
		}
		records, stop := startAgent(t, node, t.TempDir(), "--ksm", "advisor")
		if s := nextKSM(t, records, 10*time.Second); s.Phase != policy.KSMAdvised {
			t.Fatalf("decision %+v, want the advisor", s)
		}
		k, err := host.ReadKSM()
		if err != nil {
			t.Fatal(err)
		}
		if k.Run != 1 || k.AdvisorMode != "scan-time" {
			t.Errorf("ksmd run=%d advisor_mode=%q, want 1 and scan-time", k.Run, k.AdvisorMode)
		}
		stop()
		assertKSMRestored(t, found)
	})
}
