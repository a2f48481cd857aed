//go:build system

package microvm_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/qmp"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// startVM boots a VM and closes it (leaving nothing) when the test ends.
func startVM(t *testing.T, cfg microvm.Config) *microvm.VM {
	t.Helper()
	if cfg.Image.Kernel == "" {
		cfg.Image = testenv.GuestImage(t)
	}
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 256 << 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, err := microvm.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.Close()
		if _, err := os.Stat(filepath.Dir(vm.QMPSocket())); err == nil {
			t.Errorf("VM directory %s left behind", filepath.Dir(vm.QMPSocket()))
		}
	})
	return vm
}

var wait = testenv.WaitVM

// An image built from an empty cache boots; the second build comes from
// the cache, and another empty cache gives the same bytes.
func TestSystemImageFromEmptyCacheIsReproducible(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.HeadroomBinary(t)
	build := func(cache string) microvm.Image {
		img, err := microvm.BuildImage(context.Background(), microvm.ImageOptions{CacheDir: cache, Headroom: bin, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	first := build(t.TempDir())
	if first.KernelCached || first.InitramfsCached || len(first.Modules) == 0 || first.BusyboxVersion == "" {
		t.Fatalf("first build: %+v", first)
	}
	again := build(filepath.Dir(filepath.Dir(filepath.Dir(first.Initramfs))))
	if !again.KernelCached || !again.InitramfsCached || again.Initramfs != first.Initramfs {
		t.Fatalf("second build did not come from the cache: %+v", again)
	}
	other := build(t.TempDir())
	a, _ := os.ReadFile(first.Initramfs)
	b, _ := os.ReadFile(other.Initramfs)
	if other.InitramfsSHA256 != first.InitramfsSHA256 || !bytes.Equal(a, b) {
		t.Fatal("two builds from the same inputs differ")
	}
	var out testenv.Buffer
	vm := startVM(t, microvm.Config{Image: other, Args: []string{"/bin/cat", "/etc/headroom-image.json"}, Stdout: &out})
	if e := wait(t, vm, 60*time.Second); e.Status != 0 || !strings.Contains(out.String(), first.HeadroomSHA256) {
		t.Fatalf("exit %+v, output %q", e, out.String())
	}
}

// A kernel package no source has is a setup error naming it, even with
// other kernels in the cache.
func TestSystemUnknownKernelPackage(t *testing.T) {
	testenv.GuestImage(t) // a cached kernel exists
	_, err := microvm.BuildImage(context.Background(), microvm.ImageOptions{KernelPackage: "linux-image-no-such-flavour",
		Headroom: testenv.HeadroomBinary(t)})
	var se *microvm.SetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "linux-image-no-such-flavour") {
		t.Fatalf("err = %v", err)
	}
}

// The guest command's stdout, stderr and exit status reach the host
// unchanged; the start-up phases are recorded in order.
func TestSystemVMRunsCommand(t *testing.T) {
	var stdout, stderr testenv.Buffer
	vm := startVM(t, microvm.Config{Args: []string{"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"},
		Stdout: &stdout, Stderr: &stderr})
	e := wait(t, vm, 60*time.Second)
	if e.Status != 3 || stdout.String() != "to-stdout\n" || stderr.String() != "to-stderr\n" {
		t.Fatalf("exit %+v, stdout %q, stderr %q", e, stdout.String(), stderr.String())
	}
	p := vm.Phases()
	order := []time.Time{p.Created, p.QEMUStarted, p.QMPReady, p.Booted, p.CommandStarted}
	for i := 1; i < len(order); i++ {
		if order[i].IsZero() || order[i].Before(order[i-1]) {
			t.Fatalf("phases out of order: %+v", p)
		}
	}
	if p.BootCPUSeconds <= 0 || p.GuestUptimeSeconds <= 0 {
		t.Fatalf("boot CPU %.2f s, guest uptime %.2f s", p.BootCPUSeconds, p.GuestUptimeSeconds)
	}
	t.Logf("%s: command started %.2f s after creation, QEMU %.2f CPU-s", vm.Accel(), p.CommandStarted.Sub(p.Created).Seconds(), p.BootCPUSeconds)
}

// A power-down stops the guest command with SIGTERM: headroom load prints
// its summary and exits 0, and the guest powers off.
func TestSystemPowerdownIsGraceful(t *testing.T) {
	var out testenv.Buffer
	vm := startVM(t, microvm.Config{Args: []string{"load", "--size", "32Mi", "--duration", "120s", "--json"}, Stdout: &out})
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(out.String(), `"type":"interval"`) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := vm.Powerdown(ctx); err != nil {
		t.Fatal(err)
	}
	e := wait(t, vm, 30*time.Second)
	if e.Status != 0 || !strings.Contains(out.String(), `"stop_reason":"signal: terminated"`) {
		t.Fatalf("exit %+v; output:\n%s", e, out.String())
	}
}

// A guest whose power-off does not end QEMU (here QEMU is told to pause
// on a guest shutdown instead of exiting) is ended by headroom once its
// command's status is in: the status is kept and Exit.Ended says so.
func TestSystemGuestThatDoesNotPowerOffIsEnded(t *testing.T) {
	const powerOffWait = 2 * time.Second
	vm := startVM(t, microvm.Config{Args: []string{"/bin/sh", "-c", "sleep 2; exit 4"}, PowerOffWait: powerOffWait})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := vm.QMP().Execute(ctx, "set-action", map[string]string{"shutdown": "pause"}, nil); err != nil {
		t.Fatal(err)
	}
	e := wait(t, vm, 60*time.Second)
	if console := vm.ConsoleTail(20); e.Status != 4 || !strings.Contains(e.Ended, "SIGTERM") || !strings.Contains(console, "Power down") {
		t.Fatalf("exit %+v, want status 4 and QEMU ended with SIGTERM after the guest's power-off; console:\n%s", e, console)
	}
	t.Logf("%s", e.Ended)
}

// waitFor polls cond (guest output or host state has no event to wait on)
// until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A guest kernel that panics (here: no init on its command line) ends the
// VM with the panic as the reason and the console to show it.
func TestSystemGuestPanicIsReported(t *testing.T) {
	vm := startVM(t, microvm.Config{Args: []string{"/bin/true"}, KernelArgs: []string{"rdinit=/no/such/init"}})
	e := wait(t, vm, 60*time.Second)
	if e.Status != -1 || !strings.Contains(e.Reason, "Kernel panic") || !strings.Contains(vm.ConsoleTail(20), "Kernel panic") {
		t.Fatalf("exit %+v; console:\n%s", e, vm.ConsoleTail(20))
	}
}

// QEMU runs in the VM's memory cgroup from its first instruction: the
// cgroup is charged for the guest's memory.
func TestSystemVMInItsCgroup(t *testing.T) {
	cg := testenv.NewMemoryCgroup(t, 1<<30)
	var out testenv.Buffer
	vm := startVM(t, microvm.Config{Cgroup: cg.Path, Stdout: &out,
		Args: []string{"load", "--size", "96Mi", "--scan", "none", "--duration", "60s", "--json"}})
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(out.String(), `"type":"interval"`) })
	procs, _ := os.ReadFile(filepath.Join(cg.Path, "cgroup.procs"))
	if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(vm.PID())+" ") {
		t.Fatalf("QEMU %d not in %s (%q)", vm.PID(), cg.Path, procs)
	}
	usage, err := cg.ReadInt("memory.usage_in_bytes")
	if err != nil || usage < 96<<20 {
		t.Fatalf("cgroup charged %d B for a guest holding 96 MiB: %v", usage, err)
	}
	h, err := microvm.ReadHostMemory(vm.PID(), 256<<20)
	if err != nil || h.GuestRAMBytes < 96<<20 || h.OverheadBytes == 0 {
		t.Fatalf("host memory %+v, %v", h, err)
	}
	t.Logf("QEMU RSS %d MiB: guest RAM %d MiB, overhead %d MiB, file pages %d MiB",
		h.RSSBytes>>20, h.GuestRAMBytes>>20, h.OverheadBytes>>20, h.FileBytes>>20)
}

// meminfoWatcher runs a guest loop printing one /proc/meminfo field (kB)
// every 50 ms and returns a function giving its latest value in bytes.
func meminfoWatcher(t *testing.T, cfg microvm.Config, field string) (*microvm.VM, func() int64) {
	t.Helper()
	pr, pw := io.Pipe()
	cfg.Stdout = pw
	cfg.Args = []string{"/bin/sh", "-c", "while :; do grep '^" + field + ":' /proc/meminfo; usleep 50000; done"}
	vm := startVM(t, cfg)
	var mu sync.Mutex
	var latest int64
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 {
				if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mu.Lock()
					latest = n << 10
					mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { pw.Close() })
	return vm, func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return latest
	}
}

// A balloon target shows inside the guest (its MemAvailable drops: the
// driver may deflate on OOM, so the balloon's pages count as used rather
// than leaving MemTotal) and QEMU reports the balloon's progress;
// deflating gives the memory back.
func TestSystemBalloonSeenInsideGuest(t *testing.T) {
	vm, memAvailable := meminfoWatcher(t, microvm.Config{MemoryBytes: 512 << 20}, "MemAvailable")
	waitFor(t, 60*time.Second, func() bool { return memAvailable() > 0 })
	before := memAvailable()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := vm.QMP().Balloon(ctx, 256<<20); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	waitFor(t, 10*time.Second, func() bool { return memAvailable() <= before-200<<20 })
	t.Logf("MemAvailable %d → %d MiB, seen in the guest %.2f s after the balloon command", before>>20, memAvailable()>>20, time.Since(asked).Seconds())
	// QEMU reports the balloon's progress until it reaches the target.
	for reached := false; !reached; {
		select {
		case ev := <-vm.Events():
			if ev.Name == qmp.EventBalloonChange {
				actual, err := qmp.BalloonActualBytes(ev)
				reached = err == nil && actual <= 256<<20
			}
		case <-ctx.Done():
			t.Fatal("no BALLOON_CHANGE event reaching the target")
		}
	}
	if actual, err := vm.QMP().QueryBalloon(ctx); err != nil || actual > 256<<20 {
		t.Fatalf("query-balloon %d, %v", actual, err)
	}
	if err := vm.QMP().Balloon(ctx, 512<<20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return memAvailable() >= before-16<<20 })
}

// Memory the guest frees goes back to the host (free page reporting):
// QEMU's resident guest RAM falls after the workload exits.
func TestSystemFreedGuestMemoryReturnsToHost(t *testing.T) {
	var out testenv.Buffer
	vm := startVM(t, microvm.Config{MemoryBytes: 512 << 20, Stdout: &out,
		Args: []string{"/bin/sh", "-c", "/init load --size 256Mi --scan none --duration 1s --json; echo freed; sleep 120"}})
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(out.String(), `"type":"summary"`) })
	held, err := microvm.ReadHostMemory(vm.PID(), 512<<20)
	if err != nil || held.GuestRAMBytes < 256<<20 {
		t.Fatalf("while the guest held 256 MiB: %+v, %v", held, err)
	}
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(out.String(), "freed") })
	freedAt := time.Now()
	waitFor(t, 20*time.Second, func() bool {
		h, err := microvm.ReadHostMemory(vm.PID(), 512<<20)
		return err == nil && h.GuestRAMBytes+200<<20 < held.GuestRAMBytes
	})
	h, _ := microvm.ReadHostMemory(vm.PID(), 512<<20)
	t.Logf("guest RAM resident on the host: %d MiB → %d MiB, %.2f s after the guest freed it",
		held.GuestRAMBytes>>20, h.GuestRAMBytes>>20, time.Since(freedAt).Seconds())
}

// A guest swap disk (backed by tmpfs here) is the guest's own swap.
func TestSystemGuestSwapDisk(t *testing.T) {
	var out testenv.Buffer
	vm := startVM(t, microvm.Config{MemoryBytes: 256 << 20, GuestSwap: &microvm.SwapDisk{SizeBytes: 256 << 20, Tmpfs: true}, Stdout: &out,
		Args: []string{"/bin/sh", "-c", "cat /proc/swaps; /init load --size 200Mi --scan seq --iterations 2 --json | grep summary"}})
	e := wait(t, vm, 120*time.Second)
	if e.Status != 0 || !strings.Contains(out.String(), "/dev/vda") {
		t.Fatalf("exit %+v; output:\n%s", e, out.String())
	}
	vm.Close()
	if files, _ := filepath.Glob("/dev/shm/headroom-guest-swap-*"); len(files) != 0 {
		t.Errorf("swap backing files left: %v", files)
	}
}

// The launcher leaves nothing behind when QEMU cannot start at all.
func TestSystemStartFailureLeavesNothing(t *testing.T) {
	img := testenv.GuestImage(t)
	img.Kernel = "/no/such/vmlinux"
	dir := filepath.Join(t.TempDir(), "vm")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := microvm.Start(ctx, microvm.Config{Image: img, MemoryBytes: 256 << 20, Args: []string{"/bin/true"}, Dir: dir}); err == nil {
		t.Fatal("started without a kernel")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s left behind", dir)
	}
}

// A cache disk is in the guest's page cache before its command starts, and
// a balloon takes that clean cache back without killing anything.
func TestSystemBalloonReclaimsGuestPageCache(t *testing.T) {
	const cacheBytes = 96 << 20
	f, err := os.CreateTemp("/var/tmp", "headroom-test-cache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	buf := make([]byte, 1<<20)
	for i := 0; i < cacheBytes>>20; i++ {
		for j := range buf {
			buf[j] = byte(i*31 + j*7 + j>>8)
		}
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	vm, buffers := meminfoWatcher(t, microvm.Config{MemoryBytes: 384 << 20, CacheDisk: f.Name()}, "Buffers")
	t.Cleanup(func() {
		if t.Failed() {
			actual, err := vm.QMP().QueryBalloon(context.Background())
			t.Logf("balloon at %d MiB (%v), Buffers %d MiB; console:\n%s", actual>>20, err, buffers()>>20, vm.ConsoleTail(20))
		}
	})
	waitFor(t, 60*time.Second, func() bool { return buffers() > 0 })
	before := buffers()
	if before < cacheBytes {
		t.Fatalf("Buffers %d MiB after reading a %d MiB cache disk", before>>20, cacheBytes>>20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := vm.QMP().Balloon(ctx, 128<<20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return buffers() <= before-48<<20 })
	t.Logf("guest page cache %d → %d MiB under a balloon to 128 MiB", before>>20, buffers()>>20)
	select {
	case <-vm.Exited():
		t.Fatalf("the guest ended: %+v", vm.Exit())
	default:
	}
}
