package policy

import (
	"strings"
	"testing"
)

// ksmNode is a scope at 3 of 4 GiB with KSM samples the test moves along.
type ksmNode struct {
	t   *testing.T
	cfg Config
	st  State
	sec float64
	k   KSMSample
}

func newKSMNode(t *testing.T, mode string) *ksmNode {
	cfg := DefaultConfig()
	cfg.KSMMode = mode
	return &ksmNode{t: t, cfg: cfg, k: KSMSample{PagesToScan: 100, SleepMillisecs: 20, AdvisorMode: "none", MergeableBytes: 2 * gi}}
}

// tick advances one second: ksmd scanned pages at cpu CPU-seconds,
// finishing scans full scans; merging adds sharing pages.
func (n *ksmNode) tick(pages uint64, cpu float64, scans uint64, sharing uint64) *KSMSetting {
	n.t.Helper()
	n.sec++
	n.k.PagesScanned += pages
	n.k.KsmdCPUSeconds += cpu
	n.k.FullScans += scans
	n.k.PagesSharing += sharing
	n.k.GeneralProfitBytes = int64(n.k.PagesSharing * pageBytes)
	k := n.k
	ds, st := Decide(Snapshot{Sample: Sample{Time: at(n.sec), Scope: Scope{RAMBytes: 4 * gi, SwapBytes: 4 * gi, WorkingSetBytes: 3 * gi}, KSM: &k}}, n.cfg, n.st)
	n.st = st
	for _, d := range ds {
		if d.Action == ActionSetKSM {
			// The agent applies it; the next sample shows it.
			n.k.Run, n.k.PagesToScan, n.k.SleepMillisecs = d.KSM.Run, d.KSM.PagesToScan, d.KSM.SleepMillisecs
			if d.KSM.AdvisorMode != "" {
				n.k.AdvisorMode = d.KSM.AdvisorMode
			}
			n.t.Logf("%.0fs %s", n.sec, d.Reason)
			return d.KSM
		}
	}
	return nil
}

func TestKSMGovernorBurstsThenSettles(t *testing.T) {
	n := newKSMNode(t, KSMGovernor)
	set := n.tick(0, 0, 0, 0)
	if set == nil || set.Phase != KSMBurst || set.Run != 1 {
		t.Fatalf("2 GiB mergeable on a node at 75%%: %+v", set)
	}
	// 50% of a core at the prior 1.5 µs/page: 20 ms of scan per 20 ms sleep.
	if set.PagesToScan < 10000 || set.PagesToScan > 16000 {
		t.Errorf("burst batch %d pages, want about 13k", set.PagesToScan)
	}
	// First full scan: checksums only, no gain; the burst goes on.
	n.tick(500000, 0.5, 1, 0)
	if n.st.KSM.Phase != KSMBurst {
		t.Fatalf("left the burst after the first scan: %+v", n.st.KSM)
	}
	// Second scan merges 1.6 GiB; third gains nothing: steady at 1%.
	n.tick(500000, 0.5, 1, 400000)
	set = n.tick(500000, 0.2, 1, 0)
	if set == nil || set.Phase != KSMSteady || set.Run != 1 {
		t.Fatalf("after a scan without gain: %+v (state %+v)", set, n.st.KSM)
	}
	// At the measured cost (0.4 µs a page from the last scan... averaged),
	// 1% of a core is a few hundred pages per 20 ms.
	if set.PagesToScan > 2000 {
		t.Errorf("steady batch %d pages, want a few hundred", set.PagesToScan)
	}
	// Quiet rounds at that pace (about 12k pages a second, 1% of a core):
	// no decision.
	for range 5 {
		if s := n.tick(12000, 0.0096, 0, 0); s != nil {
			t.Fatalf("decided %+v without news", s)
		}
	}
	// A new VM offers 512 MiB more: burst again.
	n.k.MergeableBytes += 512 << 20
	if s := n.tick(12000, 0.0096, 0, 0); s == nil || s.Phase != KSMBurst {
		t.Fatalf("new mergeable memory: %+v", s)
	}
}

func TestKSMGovernorWaitsForNeed(t *testing.T) {
	n := newKSMNode(t, KSMGovernor)
	n.cfg.KSMRAMNeedFraction = 0.9 // the node at 75% does not need it
	if s := n.tick(0, 0, 0, 0); s != nil && s.Run != 0 {
		t.Fatalf("scanning without need: %+v", s)
	}
	if n.st.KSM.Phase != KSMStandby {
		t.Fatalf("phase %q", n.st.KSM.Phase)
	}
	n.cfg.KSMRAMNeedFraction = 0.5
	if s := n.tick(0, 0, 0, 0); s == nil || s.Phase != KSMBurst {
		t.Fatalf("need arrived: %+v", s)
	}
}

func TestKSMAdvisorAndOff(t *testing.T) {
	n := newKSMNode(t, KSMAdvisor)
	s := n.tick(0, 0, 0, 0)
	if s == nil || s.AdvisorMode != "scan-time" || s.Run != 1 {
		t.Fatalf("advisor: %+v", s)
	}
	if s := n.tick(1000, 0.1, 0, 0); s != nil {
		t.Fatalf("advisor set twice: %+v", s)
	}
	off := newKSMNode(t, KSMOff)
	for range 3 {
		if s := off.tick(1000, 0.1, 1, 10); s != nil {
			t.Fatalf("off decided %+v", s)
		}
	}
}

func TestKSMReasonsCarryNumbers(t *testing.T) {
	n := newKSMNode(t, KSMGovernor)
	k := n.k
	ds, _ := Decide(Snapshot{Sample: Sample{Time: at(1), Scope: Scope{RAMBytes: 4 * gi, WorkingSetBytes: 3 * gi}, KSM: &k}}, n.cfg, State{})
	if len(ds) != 1 || !strings.Contains(ds[0].Reason, "2147483648 B mergeable") || !strings.Contains(ds[0].Reason, "75%") ||
		!strings.Contains(ds[0].Reason, "pages every 20 ms") {
		t.Fatalf("decision %+v", ds)
	}
}
