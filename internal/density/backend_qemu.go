package density

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/results"
)

// DefaultVMOverheadBytes is the default per-VM request overhead of the qemu
// backend: the host memory a micro-VM's QEMU holds beyond the guest RAM it
// backs (heap, the TCG translation cache, device buffers), measured here
// at 35-37 MiB per TCG guest (docs/validation/benchmarks.md, "Micro-VMs"),
// rounded up with room for another QEMU or accelerator.
const DefaultVMOverheadBytes = 64 << 20

// GuestFootprintBytes is guest memory that is not the workload's: the
// kernel's reservations, the unpacked initramfs, headroom's own runtime and
// the kernel's free-memory reserve (a 384 MiB guest shows 294 MiB
// available before its command starts; a 512 MiB workload in a 640 MiB
// guest is OOM-killed there).
const GuestFootprintBytes = 128 << 20

// vmFileSlackBytes is added to a VM cgroup's limit for the file pages its
// QEMU maps (its binary and libraries, the kernel and initramfs images:
// about 90 MiB), charged to the VM that first touched them: the limit must
// never be what constrains a guest, the node's is.
const vmFileSlackBytes = 128 << 20

// vmStopTimeout bounds a power-down request.
const vmStopTimeout = 2 * time.Second

// qemuBackend: the node is a memory cgroup as for the cgroup backend; a
// worker is a micro-VM whose QEMU runs from its first instruction in its
// own child cgroup (limited to --vm-memory plus the overhead), like a
// libvirt machine.slice scope or a KubeVirt virt-launcher pod, with
// `headroom load` inside the guest joined to the step's controller over a
// virtio-serial port.
type qemuBackend struct {
	scope         cgroup.Group
	image         microvm.Image
	accel         microvm.Accel
	overheadBytes uint64
	// runDir holds each VM's sockets and console; removed by Close.
	runDir string
	// cacheDisk is the disk every guest reads into its page cache at boot
	// ("": none); removed by Close.
	cacheDisk string
}

func newQEMUBackend(p Params, nodeSwapBytes uint64) (*qemuBackend, error) {
	if p.Image == nil {
		return nil, fmt.Errorf("the qemu backend needs a guest image")
	}
	dir, err := os.MkdirTemp("", "headroom-density-vms-")
	if err != nil {
		return nil, err
	}
	g, err := newNodeCgroup(p, nodeSwapBytes)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	accel := p.Accel
	if accel == "" || accel == microvm.AccelAuto {
		accel, _ = microvm.DetectAccel()
	}
	b := &qemuBackend{scope: g, image: *p.Image, accel: accel, overheadBytes: p.OverheadBytes, runDir: dir}
	if p.GuestCacheBytes > 0 {
		if b.cacheDisk, err = createCacheDisk(p.GuestCacheBytes, p.Seed); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// createCacheDisk writes the disk the guests read into their page cache:
// random content, so neither a zero-page shortcut nor compression makes
// swapping it cheaper than it is, on a real file system (the guests read
// it with direct I/O, which tmpfs lacks).
func createCacheDisk(sizeBytes, seed uint64) (string, error) {
	f, err := os.CreateTemp("/var/tmp", "headroom-density-cache-")
	if err != nil {
		return "", fmt.Errorf("guest cache disk: %w", err)
	}
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	buf := make([]byte, 1<<20)
	for written := uint64(0); written < sizeBytes && err == nil; written += uint64(len(buf)) {
		rng.Read(buf)
		_, err = f.Write(buf)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("guest cache disk: %w", err)
	}
	return f.Name(), nil
}

func (b *qemuBackend) Scope() cgroup.Group { return b.scope }

func (b *qemuBackend) Close() error {
	err := cgroup.Remove(b.scope, 30*time.Second)
	if rerr := os.RemoveAll(b.runDir); rerr != nil && err == nil {
		err = rerr
	}
	if b.cacheDisk != "" {
		if rerr := os.Remove(b.cacheDisk); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func (b *qemuBackend) vmDir(name string) string { return filepath.Join(b.runDir, name) }

func (b *qemuBackend) qmpSocket(name string) string { return filepath.Join(b.vmDir(name), "qmp.sock") }

// Metadata names the VM's QMP socket, so the agent evicts it gracefully.
func (b *qemuBackend) Metadata(name string) map[string]any {
	return map[string]any{"qmp": b.qmpSocket(name)}
}

// StartLead: the start message must reach every guest over its
// virtio-serial port, and under TCG a guest's vCPU waits for a host core.
func (b *qemuBackend) StartLead(n int) time.Duration {
	return 100*time.Millisecond + time.Duration(n)*20*time.Millisecond
}

func (b *qemuBackend) StartWorker(name string, memoryBytes uint64, loadArgs []string, controller string) (Worker, error) {
	socket, ok := strings.CutPrefix(controller, "unix:")
	if !ok {
		return nil, fmt.Errorf("the qemu backend needs a unix controller socket, got %s", controller)
	}
	g, err := workerCgroup(b.scope, name, memoryBytes+b.overheadBytes+vmFileSlackBytes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"load"}, joinArgs(loadArgs, name, "serial:"+guest.ControllerPortPath)...)
	vm, err := microvm.Start(ctx, microvm.Config{
		Image: b.image, Name: name, MemoryBytes: memoryBytes, Args: args, Dir: b.vmDir(name),
		QMPSocket: b.qmpSocket(name), Cgroup: g.Path(), Controller: socket, Accel: b.accel, GraceSeconds: 5,
		CacheDisk: b.cacheDisk,
	})
	if err != nil {
		cgroup.Remove(g, 10*time.Second)
		return nil, fmt.Errorf("start VM %s: %w", name, err)
	}
	return &vmWorker{name: name, vm: vm, group: g, memoryBytes: memoryBytes}, nil
}

type vmWorker struct {
	name        string
	vm          *microvm.VM
	group       cgroup.Group
	memoryBytes uint64
}

func (w *vmWorker) Name() string            { return w.name }
func (w *vmWorker) Exited() <-chan struct{} { return w.vm.Exited() }
func (w *vmWorker) Kill()                   { w.vm.Kill() }

// Stop presses the guest's power button: the workload stops on SIGTERM,
// sends its summary, and the guest powers off.
func (w *vmWorker) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), vmStopTimeout)
	defer cancel()
	if err := w.vm.Powerdown(ctx); err != nil {
		w.vm.Kill()
	}
}

func (w *vmWorker) Remove() error {
	w.vm.Close()
	return cgroup.Remove(w.group, 10*time.Second)
}

// Failure says why the VM ended: the guest command's status, a kernel
// panic, QEMU killed.
func (w *vmWorker) Failure() string {
	select {
	case <-w.vm.Exited():
	default:
		return "VM still running"
	}
	e := w.vm.Exit()
	if e.Status >= 0 {
		return fmt.Sprintf("guest command exited with status %d", e.Status)
	}
	return e.Reason
}

func (w *vmWorker) OOMKilled() bool {
	m, err := w.group.Memory()
	return err == nil && m.OOMKills > 0
}

// Sample reads the VM's cgroup, QEMU's memory and the guest's balloon
// statistics.
func (w *vmWorker) Sample() (results.WorkerSample, bool) {
	s, ok := sampleCgroup(w.name, w.group)
	if !ok {
		return s, false
	}
	select {
	case <-w.vm.Exited():
		return s, true
	default:
	}
	if h, err := microvm.ReadHostMemory(w.vm.PID(), w.memoryBytes); err == nil {
		s.QEMURSSBytes, s.GuestRAMBytes, s.OverheadBytes = h.RSSBytes, h.GuestRAMBytes, h.OverheadBytes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	gs, err := w.vm.QMP().GuestStats(ctx, microvm.BalloonPath)
	if err != nil || gs.LastUpdate.IsZero() {
		return s, true
	}
	actual, _ := w.vm.QMP().QueryBalloon(ctx)
	s.Guest = &results.GuestView{TotalBytes: gs.TotalBytes, AvailableBytes: gs.AvailableBytes, FreeBytes: gs.FreeBytes,
		MajorFaults: gs.MajorFaults, SwapInBytes: gs.SwapInBytes, SwapOutBytes: gs.SwapOutBytes, BalloonActualBytes: actual}
	return s, true
}

// VM reports the start-up phases and, for a VM that did not end well, the
// tail of its console.
func (w *vmWorker) VM() *results.VMResult {
	p := w.vm.Phases()
	r := &results.VMResult{Phases: map[string]float64{}, BootCPUSeconds: p.BootCPUSeconds, Accelerator: string(w.vm.Accel())}
	for phase, t := range map[string]time.Time{results.PhaseQEMUStarted: p.QEMUStarted, results.PhaseQMPReady: p.QMPReady,
		results.PhaseBooted: p.Booted, results.PhaseCommandStarted: p.CommandStarted} {
		if !t.IsZero() {
			r.Phases[phase] = t.Sub(p.Created).Seconds()
		}
	}
	select {
	case <-w.vm.Exited():
		if w.vm.Exit().Status != 0 {
			r.ConsoleTail = w.vm.ConsoleTail(15)
		}
	default:
	}
	return r
}
