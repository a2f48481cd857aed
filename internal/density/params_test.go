package density

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

func TestParseDeployments(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"1:5:1", []int{1, 2, 3, 4, 5}},
		{"1:10:3", []int{1, 4, 7, 10}},
		{"2:4", []int{2, 3, 4}},
		{"1,2,4,8", []int{1, 2, 4, 8}},
		{"7", []int{7}},
	}
	for _, tt := range tests {
		got, err := ParseDeployments(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseDeployments(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0:5", "5:1", "1:5:0", "1:2:3:4", "a:b", "1,1", "4,2", "-1", "1:1000000:1"} {
		if got, err := ParseDeployments(bad); err == nil {
			t.Errorf("ParseDeployments(%q) = %v accepted", bad, got)
		}
	}
}

func FuzzParseDeployments(f *testing.F) {
	for _, s := range []string{"1:100:1", "1,2,4,8", "3:3", "0", "9:1", "1:5:-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := ParseDeployments(s)
		if err != nil {
			return
		}
		if len(ns) == 0 || len(ns) > 10000 {
			t.Fatalf("%q: %d counts", s, len(ns))
		}
		for i, n := range ns {
			if n < 1 || (i > 0 && n <= ns[i-1]) {
				t.Fatalf("%q: counts %v are not positive and increasing", s, ns)
			}
		}
	})
}

func TestParseSwapAndTier(t *testing.T) {
	for in, want := range map[string]string{"": "", "none": "", "existing": "existing", "8Gi": "file"} {
		if mode, _, err := ParseSwap(in); err != nil || mode != want {
			t.Errorf("ParseSwap(%q) = %q, %v", in, mode, err)
		}
	}
	if _, n, _ := ParseSwap("8Gi"); n != 8<<30 {
		t.Errorf("ParseSwap size %d", n)
	}
	for _, bad := range []string{"lots", "1k", "-1Gi"} {
		if _, _, err := ParseSwap(bad); err == nil {
			t.Errorf("ParseSwap(%q) accepted", bad)
		}
	}
	if z, _, err := ParseSwapTier("zram:2Gi,algorithm=lz4"); err != nil || z == nil || z.SizeBytes != 2<<30 || z.Algorithm != "lz4" {
		t.Errorf("ParseSwapTier(zram) = %+v, %v", z, err)
	}
	if _, z, err := ParseSwapTier("zswap"); err != nil || z == nil || z.MaxPoolPercent != 0 {
		t.Errorf("ParseSwapTier(zswap) = %+v, %v", z, err)
	}
	if _, z, err := ParseSwapTier("zswap:max_pool_percent=20"); err != nil || z == nil || z.MaxPoolPercent != 20 {
		t.Errorf("ParseSwapTier(zswap:max_pool_percent=20) = %+v, %v", z, err)
	}
	for _, bad := range []string{"zswap:1Gi", "zram:", "zram:0", "zram", "disk:1Gi", "zswap:max_pool_percent=0"} {
		if _, _, err := ParseSwapTier(bad); err == nil {
			t.Errorf("ParseSwapTier(%q) accepted", bad)
		}
	}
}

func valid() Params {
	return Params{Backend: "cgroup", Deployments: []int{1, 2}, VMMemoryBytes: 512 << 20, MemorySizeBytes: 256 << 20,
		Scan: memload.ScanSeq, WorkloadRuntime: time.Second, OvercommitPercent: 100, OverheadBytes: 16 << 20, Repeat: 1}
}

func TestRequestBytes(t *testing.T) {
	p := valid()
	if got := p.RequestBytes(); got != 528<<20 {
		t.Fatalf("request at 100%% = %d", got)
	}
	// The users' example: 16 GiB VM at 200% requests 8 GiB plus overhead.
	p.VMMemoryBytes, p.OvercommitPercent = 16<<30, 200
	if got := p.RequestBytes(); got != 8<<30+16<<20 {
		t.Fatalf("request at 200%% = %d", got)
	}
}

func TestValidate(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatal(err)
	}
	vm := valid()
	for _, backend := range []string{"qemu", "libvirt"} {
		vm.Backend = backend // 512 MiB VMs with 256 MiB workloads
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	vm.LibvirtURI, vm.Agent, vm.NodeMemoryBytes, vm.Balloon = DefaultLibvirtURI, true, 1<<30, "headroom"
	if err := vm.Validate(); err != nil {
		t.Fatalf("libvirt with the agent's balloons: %v", err)
	}
	bad := map[string]func(*Params){
		"--backend":              func(p *Params) { p.Backend = "kubevirt" },
		"--vm-memory":            func(p *Params) { p.Backend, p.VMMemoryBytes, p.MemorySizeBytes = "qemu", 128<<20, 16<<20 },
		"keep 128.0 MiB":         func(p *Params) { p.Backend, p.MemorySizeBytes = "qemu", 448<<20 },
		"--memory-size":          func(p *Params) { p.MemorySizeBytes = 1 << 30 },
		"--overcommit-percent":   func(p *Params) { p.OvercommitPercent = 50 },
		"--workload-runtime":     func(p *Params) { p.WorkloadRuntime = 0 },
		"--repeat":               func(p *Params) { p.Repeat = 0 },
		"--swap-tier":            func(p *Params) { p.Zram = &tierspec.ZramSpec{SizeBytes: 1 << 30} },
		"--agent":                func(p *Params) { p.Agent = true },
		"--guest-cache":          func(p *Params) { p.GuestCacheBytes = 64 << 20 },
		"and --guest-cache":      func(p *Params) { p.Backend, p.GuestCacheBytes = "qemu", 192<<20 },
		"--balloon-policy \"x\"": func(p *Params) { p.Backend, p.Agent, p.NodeMemoryBytes, p.Balloon = "qemu", true, 1<<30, "x" },
		"--balloon needs":        func(p *Params) { p.Backend, p.Balloon = "qemu", "mom" },
		"need --backend libvirt": func(p *Params) { p.LibvirtTemplate = "<domain/>" },
		"whole MiB":              func(p *Params) { p.Backend, p.LibvirtTBCacheBytes = "libvirt", 1<<19 },
		"needs --backend qemu or libvirt, and --agent": func(p *Params) { p.Backend, p.Balloon = "libvirt", "headroom" },
		"keep 128.0 MiB for":                           func(p *Params) { p.Backend, p.MemorySizeBytes = "libvirt", 448<<20 },
		"not one worker is admitted":                   func(p *Params) { p.NodeMemoryBytes = 527 << 20 },
	}
	for flag, f := range bad {
		p := valid()
		f(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: Validate = %v", flag, err)
		}
	}
}

// A libvirtd that cannot be reached stops the run before it changes
// anything, with one line saying so.
func TestRunRefusesAnUnreachableLibvirtd(t *testing.T) {
	p := valid()
	p.Backend, p.LibvirtURI, p.Out = "libvirt", "qemu:///system?socket="+t.TempDir()+"/no-libvirt-sock", t.TempDir()+"/results"
	dir, run, err := Run(t.Context(), p, nil)
	if err == nil || !strings.Contains(err.Error(), "is libvirtd running?") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run = %v", err)
	}
	if _, serr := os.Stat(p.Out); dir != "" || run != nil || serr == nil {
		t.Fatalf("the refused run made %q (%v)", dir, serr)
	}
}
