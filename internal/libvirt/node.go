package libvirt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
)

// NodeConfig is a density run's node on a libvirt host.
type NodeConfig struct {
	URI string
	// Prefix names the run's partition and its domains (PREFIX-w1, ...).
	Prefix string
	// RAMBytes and SwapBytes limit the node's partition (0: no limits).
	RAMBytes, SwapBytes uint64
	// Kernel and Initramfs are headroom's guest image, copied where
	// libvirt's QEMU user can read them (unused with a Template that
	// boots its own).
	Kernel, Initramfs string
	// Template is the user's domain XML ("": headroom's own domain).
	Template string
	// TBCacheMiB is TCG's translation cache (0: QEMU's default).
	TBCacheMiB uint
	// GraceSeconds is the guest's time from power-down to SIGKILL.
	GraceSeconds int
}

// Node is the run's libvirt resource partition and the domains the run
// defined in it. Close destroys and undefines every one of them, with
// their managed-save images; it never touches a domain it did not define.
type Node struct {
	cfg       NodeConfig
	conn      *golibvirt.Libvirt
	hierarchy cgroup.Hierarchy
	part      *Partition
	// bootDir holds the guest image, filesDir each domain's files.
	bootDir, filesDir string
	qemuUID, qemuGID  int
	stopEvents        context.CancelFunc

	mu      sync.Mutex
	domains map[string]*NodeDomain // by domain name
}

// A domain's phases (results.Phase*), seconds after the start was asked
// for: defined (DomainDefineXML returned), qemu_started (DomainCreate
// returned: QEMU runs), booted (the guest's /init runs), command_started.

// OpenNode connects to libvirtd and makes the node's partition.
func OpenNode(cfg NodeConfig) (*Node, error) {
	u, err := url.Parse(cfg.URI)
	if err != nil || !strings.HasPrefix(u.Scheme, "qemu") || u.Path != "/system" {
		return nil, fmt.Errorf("libvirt URI %q: the density backend needs qemu:///system (its domains' files and sockets are the host's)", cfg.URI)
	}
	h, err := cgroup.Find()
	if err != nil {
		return nil, err
	}
	conn, err := dial(u)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, conn: conn, hierarchy: h, domains: map[string]*NodeDomain{},
		bootDir:  filepath.Join("/var/lib/libvirt/boot", cfg.Prefix),
		filesDir: filepath.Join("/var/lib/libvirt/qemu", cfg.Prefix)}
	n.qemuUID, n.qemuGID = qemuUser()
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, err
	}
	if n.part, err = CreatePartition(h, cfg.Prefix, cfg.RAMBytes, cfg.SwapBytes); err != nil {
		return fail(err)
	}
	for _, d := range []string{n.bootDir, n.filesDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	if cfg.Template == "" {
		for src, dst := range map[string]string{cfg.Kernel: n.kernel(), cfg.Initramfs: n.initramfs()} {
			if err := CopyFile(src, dst); err != nil {
				return fail(fmt.Errorf("guest image: %w", err))
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stopEvents = cancel
	events, err := conn.LifecycleEvents(ctx)
	if err != nil {
		return fail(fmt.Errorf("follow %s's domain events: %w", cfg.URI, err))
	}
	go n.follow(events)
	return n, nil
}

// Ping connects to libvirtd at uri and hangs up: an error says why it
// cannot be reached.
func Ping(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("libvirt URI %q: %w", uri, err)
	}
	conn, err := dial(u)
	if err != nil {
		return err
	}
	return conn.Disconnect()
}

func dial(u *url.URL) (*golibvirt.Libvirt, error) {
	type result struct {
		l   *golibvirt.Libvirt
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := golibvirt.ConnectToURI(u)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("connect to libvirtd at %s: %w", u, r.err)
		}
		return r.l, nil
	case <-time.After(rpcTimeout):
		return nil, fmt.Errorf("connect to libvirtd at %s: no answer in %s", u, rpcTimeout)
	}
}

func (n *Node) kernel() string    { return filepath.Join(n.bootDir, "vmlinuz") }
func (n *Node) initramfs() string { return filepath.Join(n.bootDir, "initramfs") }

// URI is libvirtd's connection.
func (n *Node) URI() string { return n.cfg.URI }

// Scope is the partition's memory group: the node.
func (n *Node) Scope() cgroup.Group { return n.part.Memory }

// PartitionName is the partition as <resource><partition> names it.
func (n *Node) PartitionName() string { return n.part.Name }

// DomainName is the run's domain for a worker.
func (n *Node) DomainName(worker string) string { return n.cfg.Prefix + "-" + worker }

// follow closes a domain's Exited channel when libvirt says it stopped.
func (n *Node) follow(events <-chan golibvirt.DomainEventLifecycleMsg) {
	for e := range events {
		if golibvirt.DomainEventType(e.Event) != golibvirt.DomainEventStopped {
			continue
		}
		n.mu.Lock()
		d := n.domains[e.Dom.Name]
		n.mu.Unlock()
		if d != nil {
			d.ended()
		}
	}
}

// DomainStart is one domain of a step.
type DomainStart struct {
	// Worker is the worker's name (the domain is Prefix-Worker).
	Worker      string
	MemoryBytes uint64
	// LimitBytes is the memory limit written on the domain's cgroup once
	// it runs (0: none): libvirt's <hard_limit> needs RLIMIT_MEMLOCK
	// raised, which a root without CAP_SYS_RESOURCE cannot.
	LimitBytes uint64
	Command    []string
	// ControllerSocket is the density controller's unix socket.
	ControllerSocket string
	Workload         *Workload
}

// Start defines and starts one domain in the partition, refusing a name a
// domain the run did not define has.
func (n *Node) Start(s DomainStart) (*NodeDomain, error) {
	name := n.DomainName(s.Worker)
	created := time.Now()
	if _, err := n.conn.DomainLookupByName(name); err == nil {
		return nil, fmt.Errorf("a domain named %s exists and is not this run's: refusing to touch it", name)
	}
	dir := filepath.Join(n.filesDir, s.Worker)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := &NodeDomain{node: n, Name: name, dir: dir, memoryBytes: s.MemoryBytes, created: created,
		phases: map[string]float64{}, exited: make(chan struct{}), status: -1}
	control := filepath.Join(dir, "control.sock")
	ln, err := net.Listen("unix", control)
	if err != nil {
		return nil, fmt.Errorf("domain %s: control socket: %w", name, err)
	}
	d.control = ln
	for _, sock := range []string{control, s.ControllerSocket} {
		if err := n.reachable(sock); err != nil {
			ln.Close()
			return nil, fmt.Errorf("domain %s: %w", name, err)
		}
	}
	go d.readControl()
	spec := GuestSpec{Name: name, MemoryBytes: s.MemoryBytes, Kernel: n.kernel(), Initramfs: n.initramfs(), Command: s.Command,
		GraceSeconds: n.cfg.GraceSeconds, Dir: dir, Partition: n.part.Name, TBCacheMiB: n.cfg.TBCacheMiB, Workload: s.Workload,
		BalloonStatsSeconds: 1, ControlSocket: control, ControllerSocket: s.ControllerSocket, Template: n.cfg.Template}
	x, err := GuestDomainXML(spec)
	if err != nil {
		ln.Close()
		return nil, err
	}
	dom, err := n.conn.DomainDefineXML(x)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("define domain %s: %w", name, err)
	}
	d.dom = dom
	d.phase(results.PhaseDefined, time.Now())
	n.mu.Lock()
	n.domains[name] = d
	n.mu.Unlock()
	if err := n.conn.DomainCreate(dom); err != nil {
		return d, fmt.Errorf("start domain %s: %w", name, err)
	}
	d.phase(results.PhaseQEMUStarted, time.Now())
	if err := d.findCgroup(); err != nil {
		return d, err
	}
	if s.LimitBytes > 0 {
		if err := d.group.SetMemoryLimit(s.LimitBytes); err != nil {
			return d, fmt.Errorf("domain %s: memory limit: %w", name, err)
		}
	}
	return d, nil
}

// reachable lets libvirt's QEMU user connect to a socket root made.
func (n *Node) reachable(sock string) error {
	if n.qemuUID < 0 {
		return os.Chmod(sock, 0o666)
	}
	if err := os.Chown(sock, n.qemuUID, n.qemuGID); err != nil {
		return fmt.Errorf("let QEMU's user reach %s: %w", sock, err)
	}
	return os.Chmod(sock, 0o660)
}

// qemuUser is the user libvirt runs QEMU as: qemu.conf's user, else the
// distribution's (libvirt-qemu on Debian, qemu on Fedora); -1 if none is
// found.
func qemuUser() (uid, gid int) {
	names := []string{"libvirt-qemu", "qemu"}
	if b, err := os.ReadFile("/etc/libvirt/qemu.conf"); err == nil {
		if m := regexp.MustCompile(`(?m)^\s*user\s*=\s*"([^"]+)"`).FindSubmatch(b); m != nil {
			names = []string{strings.TrimPrefix(string(m[1]), "+")}
		}
	}
	for _, name := range names {
		u, err := user.Lookup(name)
		if err != nil {
			u, err = user.LookupId(name)
		}
		if err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			return uid, gid
		}
	}
	return -1, -1
}

// Close destroys and undefines the run's domains (with their managed-save
// images), then removes the partition and the run's files.
func (n *Node) Close() error {
	n.mu.Lock()
	domains := make([]*NodeDomain, 0, len(n.domains))
	for _, d := range n.domains {
		domains = append(domains, d)
	}
	n.mu.Unlock()
	var errs []error
	for _, d := range domains {
		if err := d.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.stopEvents != nil {
		n.stopEvents()
	}
	if n.part != nil {
		if err := n.part.Remove(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []string{n.bootDir, n.filesDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if n.conn != nil {
		n.conn.Disconnect()
	}
	return errors.Join(errs...)
}

// NodeDomain is one domain the run defined.
type NodeDomain struct {
	node        *Node
	Name        string
	dom         golibvirt.Domain
	dir         string
	memoryBytes uint64
	created     time.Time
	control     net.Listener
	group       cgroup.Group
	pid         int

	mu     sync.Mutex
	phases map[string]float64
	status int // the guest command's exit status (-1: none reported)
	// bootCPUSeconds is QEMU's CPU time when the guest command started.
	bootCPUSeconds float64
	failure        string // /init's own failure
	exited         chan struct{}
	once           sync.Once
	removed        bool
}

func (d *NodeDomain) phase(name string, at time.Time) {
	d.mu.Lock()
	d.phases[name] = at.Sub(d.created).Seconds()
	d.mu.Unlock()
}

// Phases are the seconds from the start request to each phase reached.
func (d *NodeDomain) Phases() map[string]float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]float64, len(d.phases))
	for k, v := range d.phases {
		out[k] = v
	}
	return out
}

func (d *NodeDomain) ended() { d.once.Do(func() { close(d.exited) }) }

// Exited is closed when the domain has stopped.
func (d *NodeDomain) Exited() <-chan struct{} { return d.exited }

// readControl follows the guest's /init events on its control port.
func (d *NodeDomain) readControl() {
	conn, err := d.control.Accept()
	if err != nil {
		return
	}
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		ev, err := guest.ParseEvent(sc.Bytes())
		if err != nil {
			continue
		}
		now := time.Now()
		switch ev.Event {
		case guest.EventBooted:
			d.phase(results.PhaseBooted, now)
		case guest.EventStarted:
			d.phase(results.PhaseCommandStarted, now)
			if cpu, err := host.ProcessCPUSeconds(d.PID()); err == nil {
				d.mu.Lock()
				d.bootCPUSeconds = cpu
				d.mu.Unlock()
			}
		case guest.EventExited:
			d.mu.Lock()
			d.status = *ev.ExitStatus
			d.mu.Unlock()
		case guest.EventFailed:
			d.mu.Lock()
			d.failure = "guest /init: " + ev.Error
			d.mu.Unlock()
		}
	}
}

func (d *NodeDomain) findCgroup() error {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", d.Name+".pid"))
	if err != nil {
		return fmt.Errorf("domain %s: its QEMU's PID: %w", d.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("domain %s: its PID file holds %q", d.Name, b)
	}
	d.mu.Lock()
	d.pid = pid
	d.mu.Unlock()
	p, err := d.node.hierarchy.ProcessPath("/proc", pid)
	if err != nil {
		return fmt.Errorf("domain %s: %w", d.Name, err)
	}
	d.group, err = d.node.hierarchy.Open(DomainCgroupPath(p))
	return err
}

// Group is the domain's memory cgroup (nil if it never ran).
func (d *NodeDomain) Group() cgroup.Group { return d.group }

// PID is its QEMU's process (0 if it never ran).
func (d *NodeDomain) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pid
}

// BootCPUSeconds is QEMU's CPU time from its start to the guest command's
// (0 until it started).
func (d *NodeDomain) BootCPUSeconds() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bootCPUSeconds
}

// Stop presses the guest's power button.
func (d *NodeDomain) Stop() error {
	return d.node.conn.DomainShutdownFlags(d.dom, golibvirt.DomainShutdownAcpiPowerBtn)
}

// Kill destroys the domain at once.
func (d *NodeDomain) Kill() error {
	err := d.node.conn.DomainDestroyFlags(d.dom, golibvirt.DomainDestroyDefault)
	if state, _, serr := d.node.conn.DomainGetState(d.dom, 0); serr == nil && golibvirt.DomainState(state) == golibvirt.DomainShutoff {
		d.ended()
		return nil
	}
	return err
}

// Remove destroys the domain if it still runs and undefines it with its
// managed-save image; its files go too.
func (d *NodeDomain) Remove() error {
	d.mu.Lock()
	if d.removed {
		d.mu.Unlock()
		return nil
	}
	d.removed = true
	d.mu.Unlock()
	var errs []error
	if d.dom.Name != "" {
		if state, _, err := d.node.conn.DomainGetState(d.dom, 0); err == nil && golibvirt.DomainState(state) != golibvirt.DomainShutoff {
			if err := d.node.conn.DomainDestroyFlags(d.dom, golibvirt.DomainDestroyDefault); err != nil {
				errs = append(errs, fmt.Errorf("destroy %s: %w", d.Name, err))
			}
		}
		if err := d.node.conn.DomainUndefineFlags(d.dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineNvram); err != nil {
			errs = append(errs, fmt.Errorf("undefine %s: %w", d.Name, err))
		}
	}
	d.ended()
	if d.control != nil {
		d.control.Close()
	}
	d.node.mu.Lock()
	delete(d.node.domains, d.Name)
	d.node.mu.Unlock()
	if err := os.RemoveAll(d.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Failure says why the domain ended: the guest command's status, /init's
// failure, or the tail of its console.
func (d *NodeDomain) Failure() string {
	d.mu.Lock()
	status, failure := d.status, d.failure
	d.mu.Unlock()
	switch {
	case failure != "":
		return failure
	case status >= 0:
		return fmt.Sprintf("guest command exited with status %d", status)
	}
	return "the domain stopped without its guest reporting an exit status; console: " + d.ConsoleTail(5)
}

// ExitStatus is the guest command's exit status (-1: none reported).
func (d *NodeDomain) ExitStatus() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

// ConsoleTail is the last lines of the guest's console.
func (d *NodeDomain) ConsoleTail(lines int) string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "console.log"))
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// Guest is the guest's own view of its memory, from its balloon's
// statistics (false until it has reported).
func (d *NodeDomain) Guest() (policy.GuestMemory, bool) {
	stats, err := d.node.conn.DomainMemoryStats(d.dom, uint32(golibvirt.DomainMemoryStatNr), 0)
	if err != nil {
		return policy.GuestMemory{}, false
	}
	return GuestMemory(stats, d.memoryBytes, time.Now())
}

// CopyFile copies src to dst (mode 0644): the guest image, where libvirt's
// QEMU user can read it.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
