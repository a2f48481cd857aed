// Package density is the density benchmark: it ramps the number of workers
// (each a VM-sized memory cgroup running `headroom load`) on a node until
// something fails, measuring per-worker and aggregate pages/s, creation
// latency, swap traffic, pressure, OOM kills and evictions per step, and
// writes the shared result schema (internal/results).
package density

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

// Params are a density run's parameters; names follow ClusterBuster's.
type Params struct {
	Backend         string
	Deployments     []int
	VMMemoryBytes   uint64
	MemorySizeBytes uint64
	Scan            memload.Scan
	WriteFraction   float64
	RatePagesPerSec float64
	// Pace is how often a capped workload wakes (0: load's default).
	Pace              time.Duration
	Content           memload.Content
	WorkloadRuntime   time.Duration
	OvercommitPercent float64
	// OverheadBytes is added to every worker's request: what the scheduler
	// reserves beyond the guest memory (for a cgroup worker, the workload
	// process's own runtime; for a VM, QEMU's).
	OverheadBytes   uint64
	Repeat          int
	StopOnFailure   bool
	NodeMemoryBytes uint64 // 0: the host's RAM, no node cgroup limit
	// Swap is "" (none added), "existing", or a swap file size in bytes.
	Swap          string
	SwapFileBytes uint64
	// Zram or Zswap is a compressed tier in front of the swap (nil: none).
	Zram  *tierspec.ZramSpec
	Zswap *tierspec.ZswapSpec
	Agent bool
	// Balloon runs the agent's balloon controller with this policy
	// (headroom or mom; "": off).
	Balloon string
	// GuestCacheBytes is clean page cache each guest holds beside its
	// workload (qemu backend): it reads that much of a disk at boot.
	GuestCacheBytes uint64
	Out             string
	Label           string
	Seed            uint64
	Interval        time.Duration
	// Executable is the headroom binary that runs the workers and agent.
	Executable string
	// Image is the guest image (qemu and libvirt backends) and Accel its
	// accelerator (qemu).
	Image *microvm.Image
	Accel microvm.Accel
	// LibvirtURI is libvirtd's connection (libvirt backend), and
	// LibvirtTemplate a domain XML of the user's own to start each domain
	// from ("": headroom's own domain).
	LibvirtURI      string
	LibvirtTemplate string
	// LibvirtTBCacheBytes is TCG's translation cache of each qemu-type
	// domain (0: QEMU's default).
	LibvirtTBCacheBytes uint64
}

// Backends are the density backends of this package (kubevirt runs
// apart, on a cluster).
var Backends = []string{"cgroup", "qemu", "libvirt"}

// VM reports whether the backend's workers are VMs with headroom's guest.
func (p Params) VM() bool { return p.Backend == "qemu" || p.Backend == "libvirt" }

// DefaultOverheadBytes is the default per-worker request overhead: the
// resident size of a `headroom load` process beside its block.
const DefaultOverheadBytes = 16 << 20

// DeploymentsForm describes the accepted --deployments syntax.
const DeploymentsForm = "start:end:step (e.g. 1:100:1) or a comma-separated list (e.g. 1,2,4,8)"

// ParseDeployments parses "1:100:1", "1:10" (step 1) or "1,2,4,8".
func ParseDeployments(s string) ([]int, error) {
	var out []int
	if strings.Contains(s, ":") {
		parts := strings.Split(s, ":")
		if len(parts) > 3 {
			return nil, fmt.Errorf("invalid deployments %q", s)
		}
		nums := []int{0, 0, 1}
		for i, p := range parts {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				return nil, fmt.Errorf("invalid deployments %q", s)
			}
			nums[i] = n
		}
		start, end, step := nums[0], nums[1], nums[2]
		if start < 1 || end < start || step < 1 || (end-start)/step >= 10000 {
			return nil, fmt.Errorf("invalid deployments %q: need 1 <= start <= end and step >= 1", s)
		}
		for n := start; n <= end; n += step {
			out = append(out, n)
		}
		return out, nil
	}
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 100000 {
			return nil, fmt.Errorf("invalid deployments %q", s)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("invalid deployments %q: counts must increase", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseSwap parses --swap: "", "none", "existing" or a size.
func ParseSwap(s string) (mode string, sizeBytes uint64, err error) {
	switch s {
	case "", "none":
		return "", 0, nil
	case "existing":
		return "existing", 0, nil
	}
	n, err := units.ParseBytes(s)
	if err != nil || n < 40<<10 {
		return "", 0, fmt.Errorf("invalid swap %q: want none, existing or a size such as 8Gi", s)
	}
	return "file", n, nil
}

// ParseSwapTier parses --swap-tier (tierspec.Form, the grammar sim
// shares) for a real tier: "zram:2Gi,algorithm=lz4" or
// "zswap:max_pool_percent=20" ("" for none).
func ParseSwapTier(s string) (*tierspec.ZramSpec, *tierspec.ZswapSpec, error) {
	t, err := tierspec.Parse(s)
	if err == nil {
		err = t.Real()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--swap-tier %w", err)
	}
	return t.Zram, t.Zswap, nil
}

// SwapSpec is the swap the run sets up (File nil unless --swap SIZE).
func (p Params) SwapSpec() tierspec.Spec {
	spec := tierspec.Spec{Zram: p.Zram, Zswap: p.Zswap}
	if p.Swap == "file" {
		spec.File = &tierspec.FileSpec{SizeBytes: p.SwapFileBytes, Priority: tierspec.DefaultFilePriority}
	}
	return spec
}

// RequestBytes is what the scheduler reserves per worker: the declared
// memory scaled down by the overcommit percentage, plus the overhead.
func (p Params) RequestBytes() uint64 {
	return RequestBytes(p.VMMemoryBytes, p.OvercommitPercent, p.OverheadBytes)
}

// RequestBytes is a scheduler's reservation for a VM of vmMemoryBytes at
// an overcommit percentage, as KubeVirt sets the virt-launcher pod's
// request: the memory scaled down, plus the overhead.
func RequestBytes(vmMemoryBytes uint64, overcommitPercent float64, overheadBytes uint64) uint64 {
	return uint64(float64(vmMemoryBytes)*100/overcommitPercent) + overheadBytes
}

// Validate checks the parameters against each other, naming the flag.
func (p Params) Validate() error {
	switch {
	case !slices.Contains(Backends, p.Backend):
		return fmt.Errorf("--backend %q is not available: want %s or kubevirt", p.Backend, strings.Join(Backends, ", "))
	case p.VM() && p.VMMemoryBytes < microvm.MinMemoryBytes:
		return fmt.Errorf("--vm-memory %s is too small to boot a guest: the minimum is %s", units.FormatBytes(p.VMMemoryBytes), units.FormatBytes(microvm.MinMemoryBytes))
	case p.VM() && p.MemorySizeBytes+p.GuestCacheBytes+GuestFootprintBytes > p.VMMemoryBytes:
		return fmt.Errorf("--memory-size %s (and --guest-cache %s) leaves the guest too little of --vm-memory %s: keep %s for its kernel and initramfs",
			units.FormatBytes(p.MemorySizeBytes), units.FormatBytes(p.GuestCacheBytes), units.FormatBytes(p.VMMemoryBytes), units.FormatBytes(GuestFootprintBytes))
	case p.GuestCacheBytes > 0 && p.Backend != "qemu":
		return fmt.Errorf("--guest-cache needs --backend qemu: only a guest has a page cache of its own")
	case p.Balloon != "" && p.Balloon != "headroom" && p.Balloon != "mom":
		return fmt.Errorf("--balloon-policy %q: want headroom or mom", p.Balloon)
	case p.Balloon != "" && (!p.VM() || !p.Agent):
		return fmt.Errorf("--balloon needs --backend qemu or libvirt, and --agent: the agent's balloon controller drives the VMs' balloons")
	case p.Backend != "libvirt" && (p.LibvirtURI != "" || p.LibvirtTemplate != "" || p.LibvirtTBCacheBytes != 0):
		return fmt.Errorf("--libvirt-uri, --libvirt-template and --libvirt-tb-cache need --backend libvirt")
	case p.LibvirtTBCacheBytes%(1<<20) != 0:
		return fmt.Errorf("--libvirt-tb-cache %s: libvirt takes whole MiB", units.FormatBytes(p.LibvirtTBCacheBytes))
	case len(p.Deployments) == 0:
		return fmt.Errorf("--deployments is empty")
	case p.MemorySizeBytes == 0 || p.MemorySizeBytes > p.VMMemoryBytes:
		return fmt.Errorf("--memory-size must be positive and at most --vm-memory (%s)", units.FormatBytes(p.VMMemoryBytes))
	case p.OvercommitPercent < 100:
		return fmt.Errorf("--overcommit-percent must be at least 100, got %g", p.OvercommitPercent)
	case p.NodeMemoryBytes > 0 && p.RequestBytes() > p.NodeMemoryBytes: // a run of no steps
		return fmt.Errorf("--vm-memory %s requests %s a worker (--overcommit-percent %g, --overhead %s), more than --node-memory %s: not one worker is admitted",
			units.FormatBytes(p.VMMemoryBytes), units.FormatBytes(p.RequestBytes()), p.OvercommitPercent, units.FormatBytes(p.OverheadBytes), units.FormatBytes(p.NodeMemoryBytes))
	case p.WorkloadRuntime <= 0:
		return fmt.Errorf("--workload-runtime must be positive")
	case p.Repeat < 1:
		return fmt.Errorf("--repeat must be at least 1")
	case (p.Zram != nil || p.Zswap != nil) && p.Swap == "":
		return fmt.Errorf("--swap-tier needs --swap (a tier sits in front of a swap device)")
	case p.Agent && p.NodeMemoryBytes == 0:
		return fmt.Errorf("--agent needs --node-memory: the agent protects the run's node cgroup")
	}
	return memload.ValidatePace(p.Pace, p.RatePagesPerSec)
}

// LoadParams are every worker's `headroom load` parameters: the
// workload's fields, 4 KiB-page strides, no transparent huge pages.
func (p Params) LoadParams() memload.Params {
	return memload.Params{
		SizeBytes: p.MemorySizeBytes, Scan: p.Scan, StrideBytes: uint64(os.Getpagesize()),
		WriteFraction: p.WriteFraction, RatePagesPerSec: p.RatePagesPerSec, Pace: p.Pace, Duration: p.WorkloadRuntime,
		Content: p.Content, Seed: p.Seed, HugePages: memload.HugePagesNever, Interval: p.Interval,
	}
}

// AsMap renders the parameters for run.json.
func (p Params) AsMap() map[string]any {
	m := map[string]any{
		"backend": p.Backend, "deployments": p.Deployments, "vm_memory_bytes": p.VMMemoryBytes,
		"memory_size_bytes": p.MemorySizeBytes, "memory_scan": string(p.Scan), "writes": p.WriteFraction,
		"rate_pages_per_sec": p.RatePagesPerSec, "pace_seconds": p.Pace.Seconds(), "content": p.Content.String(),
		"workload_runtime_seconds": p.WorkloadRuntime.Seconds(), "overcommit_percent": p.OvercommitPercent,
		"overhead_bytes": p.OverheadBytes, "request_bytes": p.RequestBytes(), "repeat": p.Repeat,
		"stop_on_failure": p.StopOnFailure, "node_memory_bytes": p.NodeMemoryBytes, "swap": p.Swap,
		"swap_file_bytes": p.SwapFileBytes, "agent": p.Agent, "seed": p.Seed,
		"balloon": p.Balloon, "guest_cache_bytes": p.GuestCacheBytes,
	}
	if p.LibvirtTemplate != "" {
		m["libvirt_template"] = p.LibvirtTemplate
	}
	if p.Zram != nil {
		m["zram"] = p.Zram
	}
	if p.Zswap != nil {
		m["zswap"] = p.Zswap
	}
	if p.Image != nil {
		m["guest_image"] = map[string]any{"kernel_package": p.Image.KernelPackage, "kernel_version": p.Image.KernelVersion,
			"initramfs_sha256": p.Image.InitramfsSHA256}
	}
	return m
}
