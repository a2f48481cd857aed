package density

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/results"
)

// DefaultLibvirtURI is --libvirt-uri's default.
const DefaultLibvirtURI = "qemu:///system"

// DefaultLibvirtTBCacheBytes is --libvirt-tb-cache's default: the cache of
// headroom's micro-VMs, so that the two backends' guests compare.
const DefaultLibvirtTBCacheBytes = libvirt.DefaultTBCacheMiB << 20

// libvirtBackend: the node is a libvirt resource partition of the run's
// own, limited to --node-memory and the run's swap; a worker is a domain
// booting headroom's guest (or the user's template) in it, its workload
// joined to the step's controller over a unix channel.
type libvirtBackend struct {
	node          *libvirt.Node
	overheadBytes uint64
	// requestBytes is every domain's memory request (its metadata), as
	// the other backends write it in the agent's files.
	requestBytes uint64
	template     bool
}

// libvirtURI is the run's libvirtd connection.
func (p Params) libvirtURI() string {
	if p.LibvirtURI == "" {
		return DefaultLibvirtURI
	}
	return p.LibvirtURI
}

func newLibvirtBackend(p Params, nodeSwapBytes uint64) (*libvirtBackend, error) {
	if p.Image == nil && p.LibvirtTemplate == "" {
		return nil, fmt.Errorf("the libvirt backend needs a guest image")
	}
	cfg := libvirt.NodeConfig{URI: p.libvirtURI(), Prefix: NodeCgroupName(os.Getpid()), Template: p.LibvirtTemplate,
		TBCacheMiB: uint(p.LibvirtTBCacheBytes >> 20), GraceSeconds: 5}
	if p.Image != nil {
		cfg.Kernel, cfg.Initramfs = p.Image.Kernel, p.Image.Initramfs
	}
	if p.NodeMemoryBytes > 0 {
		cfg.RAMBytes, cfg.SwapBytes = p.NodeMemoryBytes, nodeSwapBytes
	}
	n, err := libvirt.OpenNode(cfg)
	if err != nil {
		return nil, err
	}
	return &libvirtBackend{node: n, overheadBytes: p.OverheadBytes, requestBytes: p.RequestBytes(), template: p.LibvirtTemplate != ""}, nil
}

func (b *libvirtBackend) Scope() cgroup.Group { return b.node.Scope() }
func (b *libvirtBackend) Close() error        { return b.node.Close() }

// Metadata: the agent reads a domain's metadata from libvirt, not files.
func (b *libvirtBackend) Metadata(string) map[string]any { return nil }

// StartLead as for micro-VMs: the start message crosses a virtio-serial
// port to guests whose vCPUs wait for a host core.
func (b *libvirtBackend) StartLead(n int) time.Duration {
	return 100*time.Millisecond + time.Duration(n)*20*time.Millisecond
}

// AgentArgs: the agent follows libvirtd's domains.
func (b *libvirtBackend) AgentArgs() []string { return []string{"--libvirt-uri", b.node.URI()} }

// WorkloadName is the agent's name for a worker: its domain's.
func (b *libvirtBackend) WorkloadName(worker string) string { return b.node.DomainName(worker) }

func (b *libvirtBackend) StartWorker(name string, memoryBytes uint64, loadArgs []string, controller string) (Worker, error) {
	socket, ok := strings.CutPrefix(controller, "unix:")
	if !ok {
		return nil, fmt.Errorf("the libvirt backend needs a unix controller socket, got %s", controller)
	}
	d, err := b.node.Start(libvirt.DomainStart{Worker: name, MemoryBytes: memoryBytes,
		LimitBytes: memoryBytes + b.overheadBytes + vmFileSlackBytes,
		Command:    append([]string{"load"}, joinArgs(loadArgs, name, "serial:"+guest.ControllerPortPath)...), ControllerSocket: socket,
		Workload: &libvirt.Workload{Priority: "0", MemoryRequest: strconv.FormatUint(b.requestBytes, 10)}})
	if err != nil {
		if d != nil {
			d.Remove()
		}
		return nil, err
	}
	w := &domainWorker{name: name, d: d, memoryBytes: memoryBytes, accel: string(microvm.AccelTCG)}
	if b.template {
		w.accel = "" // the template's domain type says
	}
	return w, nil
}

type domainWorker struct {
	name        string
	d           *libvirt.NodeDomain
	memoryBytes uint64
	accel       string
}

func (w *domainWorker) Name() string            { return w.name }
func (w *domainWorker) Exited() <-chan struct{} { return w.d.Exited() }
func (w *domainWorker) Failure() string         { return w.d.Failure() }
func (w *domainWorker) Kill()                   { w.d.Kill() }
func (w *domainWorker) Remove() error           { return w.d.Remove() }

// Stop presses the power button (ACPI): the workload stops on SIGTERM,
// sends its summary, and the guest powers off.
func (w *domainWorker) Stop() {
	if err := w.d.Stop(); err != nil {
		w.d.Kill()
	}
}

func (w *domainWorker) OOMKilled() bool {
	g := w.d.Group()
	if g == nil {
		return false
	}
	m, err := g.Memory()
	return err == nil && m.OOMKills > 0
}

// Sample reads the domain's cgroup, its QEMU's memory and the guest's
// balloon statistics (through libvirt).
func (w *domainWorker) Sample() (results.WorkerSample, bool) {
	g := w.d.Group()
	if g == nil {
		return results.WorkerSample{Name: w.name}, false
	}
	s, ok := sampleCgroup(w.name, g)
	if !ok {
		return s, false
	}
	select {
	case <-w.d.Exited():
		return s, true
	default:
	}
	if h, err := microvm.ReadHostMemory(w.d.PID(), w.memoryBytes); err == nil {
		s.QEMURSSBytes, s.GuestRAMBytes, s.OverheadBytes = h.RSSBytes, h.GuestRAMBytes, h.OverheadBytes
	}
	if gm, ok := w.d.Guest(); ok {
		s.Guest = &results.GuestView{TotalBytes: gm.TotalBytes, AvailableBytes: gm.AvailableBytes, FreeBytes: gm.FreeBytes,
			MajorFaults: gm.MajorFaults, SwapInBytes: gm.SwapInBytes, SwapOutBytes: gm.SwapOutBytes, BalloonActualBytes: gm.MemoryBytes}
	}
	return s, true
}

// VM reports the domain's start-up phases and, for one that did not end
// well, the tail of its console.
func (w *domainWorker) VM() *results.VMResult {
	r := &results.VMResult{Phases: w.d.Phases(), BootCPUSeconds: w.d.BootCPUSeconds(), Accelerator: w.accel}
	select {
	case <-w.d.Exited():
		if w.d.ExitStatus() != 0 {
			r.ConsoleTail = w.d.ConsoleTail(15)
		}
	default:
	}
	return r
}
