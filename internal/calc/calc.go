// Package calc answers KubeVirt sizing questions before any VM exists:
// the virt-launcher pod's memory request as KubeVirt computes it, how many
// such VMs a node holds by request, and the swap the node then needs. The
// figures are KubeVirt's own, per version, from its source (each Version
// names the file and function).
package calc

import (
	"fmt"
	"math"
	"sort"
)

const mi = 1 << 20

// Version is one KubeVirt release line's memory arithmetic.
type Version struct {
	Name string `json:"name"`
	// Source is where the figures come from.
	Source string `json:"source"`
	// DefaultsVMIRequest: the VMI mutator sets spec.domain.resources.
	// requests.memory to guest × 100 / overcommit (v1.6, pkg/defaults), so
	// the page-table overhead is computed from it. From v1.7 the request
	// is set only in the pod (WithMemoryRequests in renderresources.go),
	// after the overhead was computed from the VMI's (empty) request: a VM
	// giving only memory.guest gets no page-table overhead.
	DefaultsVMIRequest bool `json:"defaults_vmi_request"`
	// SEVVariants: SEV-SNP and SEV-ES guests also get the SEV overhead.
	SEVVariants bool `json:"sev_variants"`
	// ReservedOverhead: spec.domain.memory.reservedOverhead.addedOverhead
	// is added (v1.8).
	ReservedOverhead bool `json:"reserved_overhead"`
}

// Versions are the supported release lines, by name.
var Versions = map[string]Version{
	"v1.6": {Name: "v1.6", Source: "kubevirt.io/kubevirt@v1.6.0 pkg/virt-controller/services/renderresources.go GetMemoryOverhead; template.go constants; pkg/defaults/defaults.go (VMI memory request from memory.guest and the overcommit)",
		DefaultsVMIRequest: true},
	"v1.7": {Name: "v1.7", Source: "kubevirt.io/kubevirt@v1.7.0 pkg/virt-controller/services/renderresources.go GetMemoryOverhead, WithMemoryRequests; template.go constants",
		SEVVariants: true},
	"v1.8": {Name: "v1.8", Source: "kubevirt.io/kubevirt@v1.8.0 pkg/hypervisor/kvm/hypervisorbackend.go GetMemoryOverhead and constants; pkg/virt-controller/services/renderresources.go WithMemoryRequests",
		SEVVariants: true, ReservedOverhead: true},
}

// DefaultVersion is the release line assumed where none is named: the
// newest supported.
const DefaultVersion = "v1.8"

// VersionNames lists the supported versions, oldest first.
func VersionNames() []string {
	names := make([]string, 0, len(Versions))
	for n := range Versions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Shape is a VM as its spec gives it.
type Shape struct {
	Name             string `json:"name,omitempty"`
	GuestMemoryBytes uint64 `json:"guest_memory_bytes"`
	CPUs             int    `json:"cpus"`
	// OvercommitPercent is the cluster's memoryOvercommit (100: none).
	OvercommitPercent int `json:"overcommit_percent"`
	// VMIRequestBytes is spec.domain.resources.requests.memory when the
	// VM sets it (0: not set, the usual case).
	VMIRequestBytes uint64 `json:"vmi_request_bytes,omitempty"`
	// NoGraphics is autoattachGraphicsDevice: false.
	NoGraphics bool `json:"no_graphics,omitempty"`
	// Arch is the VM's architecture: amd64 (default) or arm64.
	Arch string `json:"arch,omitempty"`
	// Optional parts.
	VFIO            bool `json:"vfio,omitempty"` // host devices, GPUs or SR-IOV
	DownwardMetrics bool `json:"downward_metrics,omitempty"`
	ExecProbes      int  `json:"exec_probes,omitempty"` // liveness and readiness exec probes, 0..2
	SEV             bool `json:"sev,omitempty"`
	SEVVariant      bool `json:"sev_variant,omitempty"` // SEV-SNP or SEV-ES
	TPM             bool `json:"tpm,omitempty"`
	// Dedicated is dedicatedCpuPlacement or a Guaranteed-QoS VM.
	Dedicated bool `json:"dedicated,omitempty"`
	// ReservedOverheadBytes is memory.reservedOverhead.addedOverhead (v1.8).
	ReservedOverheadBytes uint64 `json:"reserved_overhead_bytes,omitempty"`
	// OvercommitGuestOverhead keeps the overhead out of the request.
	OvercommitGuestOverhead bool `json:"overcommit_guest_overhead,omitempty"`
	// AdditionalOverheadRatio is the KubeVirt CR's
	// additionalGuestMemoryOverheadRatio (0: not set).
	AdditionalOverheadRatio float64 `json:"additional_overhead_ratio,omitempty"`
}

// Validate checks a shape, naming the bad field.
func (s Shape) Validate() error {
	switch {
	case s.GuestMemoryBytes == 0:
		return fmt.Errorf("guest memory must be > 0")
	case s.CPUs < 1:
		return fmt.Errorf("cpus must be >= 1, got %d", s.CPUs)
	case s.OvercommitPercent < 100:
		return fmt.Errorf("overcommit percent must be >= 100 (KubeVirt's memoryOvercommit), got %d", s.OvercommitPercent)
	case s.ExecProbes < 0 || s.ExecProbes > 2:
		return fmt.Errorf("exec probes must be 0, 1 or 2, got %d", s.ExecProbes)
	case s.Arch != "" && s.Arch != "amd64" && s.Arch != "arm64":
		return fmt.Errorf("arch must be amd64 or arm64, got %q", s.Arch)
	case s.AdditionalOverheadRatio != 0 && !(s.AdditionalOverheadRatio >= 1 && s.AdditionalOverheadRatio <= 100):
		return fmt.Errorf("additional overhead ratio must be >= 1, got %g", s.AdditionalOverheadRatio)
	}
	return nil
}

// Part is one term of the overhead.
type Part struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Request is the virt-launcher pod's memory as KubeVirt computes it.
type Request struct {
	Version Version `json:"kubevirt"`
	Shape   Shape   `json:"shape"`
	// VMIMemoryRequestBytes is the guest's share of the request: the
	// VMI's own request, or guest × 100 / overcommit.
	VMIMemoryRequestBytes int64  `json:"vmi_memory_request_bytes"`
	OverheadBytes         int64  `json:"overhead_bytes"`
	OverheadParts         []Part `json:"overhead_parts"`
	// PodMemoryRequestBytes is the compute container's request: what the
	// scheduler and the kubelet's LimitedSwap count.
	PodMemoryRequestBytes int64 `json:"pod_memory_request_bytes"`
}

// Compute is KubeVirt's arithmetic for one shape.
func Compute(v Version, s Shape) (Request, error) {
	if err := s.Validate(); err != nil {
		return Request{}, err
	}
	guest := int64(s.GuestMemoryBytes)
	vmiRequest := int64(s.VMIRequestBytes)
	if vmiRequest == 0 {
		// Integer division, as resource.Quantity values are.
		vmiRequest = guest * 100 / int64(s.OvercommitPercent)
		if s.OvercommitPercent == 100 {
			vmiRequest = guest
		}
	}
	// The page tables are computed from the VMI's own request.
	pageTableBasis := int64(s.VMIRequestBytes)
	if pageTableBasis == 0 && v.DefaultsVMIRequest {
		pageTableBasis = vmiRequest
	}
	var parts []Part
	add := func(name string, b int64) { parts = append(parts, Part{name, b}) }
	// One byte for every 512 of RAM, from the request rounded up to kB.
	kB := (pageTableBasis + 999) / 1000
	add("page_tables", kB*1000/512)
	add("virt_launcher_monitor", 25*mi)
	add("virt_launcher", 100*mi)
	add("virtlogd", 25*mi)
	add("virtqemud", 40*mi)
	add("qemu", 30*mi)
	add("vcpus", int64(s.CPUs)*8*mi)
	add("iothread", 8*mi)
	if !s.NoGraphics {
		add("video", 32*mi)
	}
	if s.Arch == "arm64" {
		add("arm64_uefi_pflash", 128*mi)
	}
	if s.VFIO {
		add("vfio", 1<<30)
	}
	if s.DownwardMetrics {
		add("downward_metrics", 1*mi)
	}
	if s.ExecProbes > 0 {
		add("exec_probes", int64(s.ExecProbes)*10*mi+100*mi)
	}
	if s.SEV || (s.SEVVariant && v.SEVVariants) {
		add("sev", 256*mi)
	}
	if s.TPM {
		add("tpm", 53*mi)
	}
	if s.Dedicated {
		add("dedicated_cpu", 100*mi)
	}
	if s.ReservedOverheadBytes > 0 && v.ReservedOverhead {
		add("reserved_overhead", int64(s.ReservedOverheadBytes))
	}
	var total int64
	for _, p := range parts {
		total += p.Bytes
	}
	if r := s.AdditionalOverheadRatio; r > 0 {
		// multiplyMemory: the extra is (ratio - 1) × the total in kB,
		// rounded up to kB first, truncated after.
		extra := int64(float64((total+999)/1000)*(r-1)) * 1000
		add("additional_ratio", extra)
		total += extra
	}
	podRequest := vmiRequest
	if !s.OvercommitGuestOverhead {
		podRequest += total
	}
	return Request{Version: v, Shape: s, VMIMemoryRequestBytes: vmiRequest, OverheadBytes: total, OverheadParts: parts,
		PodMemoryRequestBytes: podRequest}, nil
}

// Node is the node the VMs go on.
type Node struct {
	// MemoryBytes is what pods may request (allocatable).
	MemoryBytes uint64 `json:"memory_bytes"`
	// MaxPods is the kubelet's maxPods (110 by default).
	MaxPods int `json:"max_pods"`
}

// Fit is how many VMs of a shape the node holds and the swap it needs.
type Fit struct {
	Request
	Node Node `json:"node"`
	// VMsFit is how many pods fit by memory request and maxPods.
	VMsFit int `json:"vms_fit"`
	// LimitedBy is "memory" or "max_pods".
	LimitedBy string `json:"limited_by"`
	// NodeSwapBytes is wasp-agent's sizing rule: RAM × (percent/100 − 1).
	NodeSwapBytes uint64 `json:"node_swap_bytes"`
	// NodeSwapNeededBytes is what the fitted VMs can touch beyond RAM:
	// VMsFit × (guest memory + overhead) − node memory.
	NodeSwapNeededBytes uint64 `json:"node_swap_needed_bytes"`
}

// FitOnNode places as many VMs of r's shape on n as their requests allow.
func FitOnNode(r Request, n Node) (Fit, error) {
	if n.MemoryBytes == 0 {
		return Fit{}, fmt.Errorf("node memory must be > 0")
	}
	if n.MaxPods == 0 {
		n.MaxPods = 110
	}
	f := Fit{Request: r, Node: n, LimitedBy: "memory"}
	f.VMsFit = int(n.MemoryBytes / uint64(r.PodMemoryRequestBytes))
	if f.VMsFit > n.MaxPods {
		f.VMsFit, f.LimitedBy = n.MaxPods, "max_pods"
	}
	f.NodeSwapBytes = uint64(math.Round(float64(n.MemoryBytes) * (float64(r.Shape.OvercommitPercent)/100 - 1)))
	touch := uint64(f.VMsFit) * (r.Shape.GuestMemoryBytes + uint64(r.OverheadBytes))
	if touch > n.MemoryBytes {
		f.NodeSwapNeededBytes = touch - n.MemoryBytes
	}
	return f, nil
}
