package calc

import (
	"testing"
)

const gi = 1 << 30

// Values computed by hand from KubeVirt's source (see Versions[].Source):
// 16 GiB guest, 1 vCPU, memoryOvercommit 150:
//
//	VMI request  = 17179869184 × 100 / 150            = 11453246122
//	page tables  = ceil(11453246122 / 1000) × 1000 / 512 = 22369623 (v1.6 only)
//	fixed        = (25 + 100 + 25 + 40 + 30) MiB        = 230686720
//	vCPU         = 8 MiB, IOThread 8 MiB, video 32 MiB  = 50331648
//	v1.6: overhead 303387991, pod request 11756634113
//	v1.7: overhead 281018368 (no page tables: the VMI has no request when
//	      the pod's is computed), pod request 11734264490
func TestComputeAgainstHandValues(t *testing.T) {
	tests := []struct {
		name                 string
		version              string
		shape                Shape
		wantVMI, wantOverhad int64
		wantPod              int64
	}{
		{"v1.6 16Gi 1 vCPU 150%", "v1.6", Shape{GuestMemoryBytes: 16 * gi, CPUs: 1, OvercommitPercent: 150},
			11453246122, 303387991, 11756634113},
		{"v1.7 16Gi 1 vCPU 150%", "v1.7", Shape{GuestMemoryBytes: 16 * gi, CPUs: 1, OvercommitPercent: 150},
			11453246122, 281018368, 11734264490},
		{"v1.8 16Gi 1 vCPU 150%", "v1.8", Shape{GuestMemoryBytes: 16 * gi, CPUs: 1, OvercommitPercent: 150},
			11453246122, 281018368, 11734264490},
		// 4 GiB, 4 vCPUs, no overcommit, no graphics, with the VMI's own
		// request (so page tables count in every version):
		// pt = 4294968 × 1000 / 512 = 8388609; fixed 230686720; vCPU 33554432;
		// IOThread 8388608 → 281018369.
		{"v1.7 4Gi explicit request", "v1.7", Shape{GuestMemoryBytes: 4 * gi, CPUs: 4, OvercommitPercent: 100, VMIRequestBytes: 4 * gi, NoGraphics: true},
			4 * gi, 281018369, 4*gi + 281018369},
		// 2 GiB, 2 vCPUs, 200%: request 1073741824; pt = 1073742 × 1000 / 512
		// = 2097152 (v1.6); fixed 230686720; vCPU 16777216; IOThread 8388608;
		// video 33554432; TPM 55574528; two exec probes 20 Mi + 100 Mi =
		// 125829120 → 472907776; ratio 1.5: kB = 472908, extra 236454 kB =
		// 236454000 → 709361776; overcommitGuestOverhead keeps it out.
		{"v1.6 2Gi options", "v1.6", Shape{GuestMemoryBytes: 2 * gi, CPUs: 2, OvercommitPercent: 200, TPM: true, ExecProbes: 2,
			AdditionalOverheadRatio: 1.5, OvercommitGuestOverhead: true},
			1 * gi, 709361776, 1 * gi},
		// SEV-SNP counts from v1.7 only.
		{"v1.6 SEV-SNP", "v1.6", Shape{GuestMemoryBytes: 1 * gi, CPUs: 1, OvercommitPercent: 100, SEVVariant: true, NoGraphics: true},
			1 * gi, 2097152 + 230686720 + 8388608 + 8388608, 1*gi + 2097152 + 230686720 + 8388608 + 8388608},
		{"v1.7 SEV-SNP", "v1.7", Shape{GuestMemoryBytes: 1 * gi, CPUs: 1, OvercommitPercent: 100, SEVVariant: true, NoGraphics: true},
			1 * gi, 230686720 + 8388608 + 8388608 + 256*mi, 1*gi + 230686720 + 8388608 + 8388608 + 256*mi},
	}
	for _, tt := range tests {
		r, err := Compute(Versions[tt.version], tt.shape)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.VMIMemoryRequestBytes != tt.wantVMI || r.OverheadBytes != tt.wantOverhad || r.PodMemoryRequestBytes != tt.wantPod {
			t.Errorf("%s: VMI %d overhead %d pod %d, want %d %d %d (parts %v)", tt.name,
				r.VMIMemoryRequestBytes, r.OverheadBytes, r.PodMemoryRequestBytes, tt.wantVMI, tt.wantOverhad, tt.wantPod, r.OverheadParts)
		}
	}
}

// The seed's node: 192 GiB, 16 GiB VMs at 150%: pod request 11756634113 B
// (v1.6) → 17 VMs by request; wasp-agent's rule 96 GiB of swap; the 17
// VMs can touch 17 × (16 GiB + 303387991 B) − 192 GiB of swap.
func TestFitOnNode(t *testing.T) {
	r, err := Compute(Versions["v1.6"], Shape{GuestMemoryBytes: 16 * gi, CPUs: 1, OvercommitPercent: 150})
	if err != nil {
		t.Fatal(err)
	}
	f, err := FitOnNode(r, Node{MemoryBytes: 192 * gi})
	if err != nil {
		t.Fatal(err)
	}
	wantNeeded := uint64(17*(16*gi+303387991) - 192*gi)
	if f.VMsFit != 17 || f.LimitedBy != "memory" || f.NodeSwapBytes != 96*gi || f.NodeSwapNeededBytes != wantNeeded {
		t.Errorf("fit %d (%s), swap %d, needed %d; want 17, 96 GiB, %d", f.VMsFit, f.LimitedBy, f.NodeSwapBytes, f.NodeSwapNeededBytes, wantNeeded)
	}
	small, _ := Compute(Versions["v1.6"], Shape{GuestMemoryBytes: 128 << 20, CPUs: 1, OvercommitPercent: 100})
	if f, _ := FitOnNode(small, Node{MemoryBytes: 192 * gi}); f.VMsFit != 110 || f.LimitedBy != "max_pods" {
		t.Errorf("tiny VMs: %d (%s), want 110 by max_pods", f.VMsFit, f.LimitedBy)
	}
}

func TestShapeValidation(t *testing.T) {
	for _, s := range []Shape{{CPUs: 1, OvercommitPercent: 100}, {GuestMemoryBytes: gi, OvercommitPercent: 100},
		{GuestMemoryBytes: gi, CPUs: 1, OvercommitPercent: 90}, {GuestMemoryBytes: gi, CPUs: 1, OvercommitPercent: 100, ExecProbes: 3},
		{GuestMemoryBytes: gi, CPUs: 1, OvercommitPercent: 100, Arch: "s390x"}, {GuestMemoryBytes: gi, CPUs: 1, OvercommitPercent: 100, AdditionalOverheadRatio: 0.5}} {
		if _, err := Compute(Versions["v1.6"], s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

// Fuzz: the pod request is the VMI request plus the overhead (or the VMI
// request alone with overcommitGuestOverhead), the overhead at least the
// fixed parts, and more overcommit never raises the request.
func FuzzCompute(f *testing.F) {
	f.Add(uint64(16*gi), 1, 150, false)
	f.Add(uint64(1<<20), 64, 100, true)
	f.Fuzz(func(t *testing.T, guest uint64, cpus, pct int, outside bool) {
		s := Shape{GuestMemoryBytes: guest % (1 << 44), CPUs: cpus, OvercommitPercent: pct, OvercommitGuestOverhead: outside}
		for _, name := range VersionNames() {
			r, err := Compute(Versions[name], s)
			if err != nil {
				return
			}
			want := r.VMIMemoryRequestBytes
			if !outside {
				want += r.OverheadBytes
			}
			if r.PodMemoryRequestBytes != want || r.OverheadBytes < 220*mi+16*mi {
				t.Fatalf("%s %+v: %+v", name, s, r)
			}
			s2 := s
			s2.OvercommitPercent++
			if r2, err := Compute(Versions[name], s2); err == nil && r2.PodMemoryRequestBytes > r.PodMemoryRequestBytes {
				t.Fatalf("%s: more overcommit raised the request %d -> %d", name, r.PodMemoryRequestBytes, r2.PodMemoryRequestBytes)
			}
		}
	})
}
