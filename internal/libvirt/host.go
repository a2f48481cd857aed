// Package libvirt makes a libvirt host's domains the agent's workloads:
// listed and followed through libvirtd's RPC (go-libvirt, no C library),
// each in the memory cgroup its QEMU runs in, its priority, request,
// protection and eviction mode read from headroom's element in the
// domain's <metadata>, and evicted through libvirt (an ACPI shutdown, then
// destroy; or a managed save). The agent sees only its Source and Evictor
// interfaces, as with the Kubernetes source (internal/kube); go-libvirt
// and libvirtxml stay inside this package.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

// Config says where libvirtd is and how its domains' processes are found.
type Config struct {
	// URI is libvirt's connection URI, e.g. qemu:///system.
	URI string
	// Hierarchy is the memory cgroup hierarchy the domains' QEMUs are in.
	Hierarchy cgroup.Hierarchy
	// ProcRoot is where /proc is read.
	ProcRoot string
	// PIDDir holds the QEMU driver's NAME.pid files ("": the one for the
	// URI: /run/libvirt/qemu for qemu:///system).
	PIDDir string
	// Resync is how often the domains are listed and their XML read
	// again without an event (0: defaultResync). A metadata change, which
	// has no event followed here, takes effect within it; the agent passes
	// its workload stats interval, at which it re-reads metadata anyway.
	Resync time.Duration
	// Balloon follows the domains' balloons (the agent's --balloon): their
	// statistics are read each BalloonPoll (0: a second, the period the
	// guests report at). Off, no balloon is read or set: reading 20
	// domains' statistics each second took the agent from 0.63% to 1.33%
	// of a core.
	Balloon     bool
	BalloonPoll time.Duration
}

// Bounds of the connection's work.
const (
	// rpcTimeout bounds one call to libvirtd: one that does not answer
	// (libvirtd stopped, hung) drops the connection, which is made again.
	rpcTimeout = 10 * time.Second
	// reconnectEvery is how often a lost connection is tried again.
	reconnectEvery = time.Second
	// defaultResync is Config.Resync's default. Each resync reads and
	// parses every domain's XML: every 2 s, that was a third of the agent's
	// CPU with 20 domains (1.3% of a core in all).
	defaultResync = 10 * time.Second
)

// Host keeps a connection to libvirtd and a cache of its running domains,
// which the agent's loop reads without waiting on libvirtd: the cache is
// filled at the start, after every lifecycle event and every Config.Resync.
type Host struct {
	cfg    Config
	uri    *url.URL
	pidDir string
	log    *slog.Logger

	mu       sync.Mutex
	conn     *golibvirt.Libvirt // nil while disconnected
	domains  map[string]entry   // running domains by name
	connErr  error              // why there is no connection (nil: connected)
	reported map[string]string  // the last problem logged of each domain
	saves    map[string]chan error
	balloons map[string]*domainBalloon // running domains with a balloon
	parked   []policy.Parked           // domains the agent parked

	balloonWake chan struct{}

	changed chan struct{}
	up      prometheus.Gauge
	rpcErrs prometheus.Counter
}

// entry is one running domain.
type entry struct {
	dom    golibvirt.Domain
	info   Domain
	group  cgroup.Group
	metaOK bool // headroom's element, if any, parsed
}

// Open checks cfg and returns a host that is not yet connected (Run
// connects and keeps the connection).
func Open(cfg Config, log *slog.Logger) (*Host, error) {
	u, err := url.Parse(cfg.URI)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("libvirt URI %q: want a URI such as qemu:///system", cfg.URI)
	}
	if !strings.HasPrefix(u.Scheme, "qemu") {
		return nil, fmt.Errorf("libvirt URI %q: only the QEMU driver (qemu://...) runs domains headroom can find", cfg.URI)
	}
	pidDir := cfg.PIDDir
	if pidDir == "" {
		switch u.Path {
		case "/system":
			pidDir = "/run/libvirt/qemu"
		case "/session":
			pidDir = filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "libvirt", "qemu", "run")
		default:
			return nil, fmt.Errorf("libvirt URI %q: want qemu:///system or qemu:///session", cfg.URI)
		}
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	h := &Host{cfg: cfg, uri: u, pidDir: pidDir, log: log, domains: map[string]entry{}, reported: map[string]string{},
		saves: map[string]chan error{}, balloons: map[string]*domainBalloon{}, balloonWake: make(chan struct{}, 1), changed: make(chan struct{}, 1), connErr: errors.New("not connected yet"),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headroom_libvirt_up",
			Help: "1 while the agent is connected to libvirtd, 0 while it is not (the agent keeps the domains it knew)."}),
		rpcErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_libvirt_rpc_errors_total",
			Help: "Calls to libvirtd that failed or timed out."}),
	}
	return h, nil
}

// Collectors are the host's metrics.
func (h *Host) Collectors() []prometheus.Collector { return []prometheus.Collector{h.up, h.rpcErrs} }

// Run connects, follows the domains and reconnects when the connection is
// lost, until ctx ends.
func (h *Host) Run(ctx context.Context) {
	if h.cfg.Balloon {
		go h.pollBalloons(ctx)
	}
	down := ""
	for ctx.Err() == nil {
		conn, events, err := h.connect(ctx)
		if err != nil {
			if msg := err.Error(); msg != down {
				h.log.Warn("libvirt down; keeping the domains known, trying again every second", "uri", h.cfg.URI, "err", err)
				down = msg
			}
			h.setConn(nil, err)
			select {
			case <-ctx.Done():
			case <-time.After(reconnectEvery):
			}
			continue
		}
		if down != "" {
			h.log.Info("libvirt up again", "uri", h.cfg.URI)
		}
		down = ""
		h.setConn(conn, nil)
		h.follow(ctx, conn, events)
		conn.Disconnect()
	}
	h.setConn(nil, ctx.Err())
}

func (h *Host) connect(ctx context.Context) (*golibvirt.Libvirt, <-chan golibvirt.DomainEventLifecycleMsg, error) {
	type result struct {
		conn *golibvirt.Libvirt
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := golibvirt.ConnectToURI(h.uri)
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(rpcTimeout):
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Disconnect()
			}
		}()
		return nil, nil, fmt.Errorf("connect to %s: no answer in %s", h.cfg.URI, rpcTimeout)
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w%s", h.cfg.URI, r.err, accessHint(os.Geteuid(), h.uri.Path))
	}
	events, err := r.conn.LifecycleEvents(ctx)
	if err != nil {
		r.conn.Disconnect()
		return nil, nil, fmt.Errorf("follow %s's domain events: %w", h.cfg.URI, err)
	}
	return r.conn, events, nil
}

// accessHint says why a connection to the system libvirtd may be refused
// to an agent not running as root: libvirtd answers such a client with a
// permission error on its socket, or (polkit authorization without D-Bus)
// "Unable to get system bus connection", neither of which names the cause.
func accessHint(euid int, uriPath string) string {
	if euid == 0 || uriPath != "/system" {
		return ""
	}
	return fmt.Sprintf(" (the agent runs as uid %d: qemu:///system lets in root, or users its socket group or polkit allows)", euid)
}

// follow keeps the cache until the connection is lost or ctx ends.
func (h *Host) follow(ctx context.Context, conn *golibvirt.Libvirt, events <-chan golibvirt.DomainEventLifecycleMsg) {
	every := h.cfg.Resync
	if every <= 0 {
		every = defaultResync
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := h.resync(conn); err != nil {
			h.log.Warn("libvirt: listing the domains failed; connecting again", "err", err)
			h.setConn(nil, err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-conn.Disconnected():
			h.setConn(nil, errors.New("connection to libvirtd lost"))
			return
		case _, ok := <-events:
			if !ok {
				h.setConn(nil, errors.New("libvirtd's event stream ended"))
				return
			}
			// Every event that came meanwhile is covered by one listing.
			for drained := false; !drained; {
				select {
				case <-events:
				default:
					drained = true
				}
			}
		case <-tick.C:
		}
	}
}

func (h *Host) setConn(c *golibvirt.Libvirt, err error) {
	h.mu.Lock()
	h.conn, h.connErr = c, err
	h.mu.Unlock()
	if c != nil {
		h.up.Set(1)
	} else {
		h.up.Set(0)
	}
}

// call runs one libvirtd call with rpcTimeout.
func (h *Host) call(what string, f func() error) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), rpcTimeout, fmt.Errorf("no answer in %s", rpcTimeout))
	defer cancel()
	if err := callCtx(ctx, f); err != nil {
		h.rpcErrs.Inc()
		return fmt.Errorf("libvirt %s: %w", what, err)
	}
	return nil
}

// resync lists the running domains and finds each one's cgroup and
// metadata.
func (h *Host) resync(conn *golibvirt.Libvirt) error {
	var doms []golibvirt.Domain
	if err := h.call("list domains", func() (err error) {
		doms, _, err = conn.ConnectListAllDomains(1, golibvirt.ConnectListDomainsActive)
		return err
	}); err != nil {
		return err
	}
	h.mu.Lock()
	old := maps.Clone(h.domains)
	h.mu.Unlock()
	next := make(map[string]entry, len(doms))
	for _, d := range doms {
		e, err := h.describe(conn, d, old[d.Name])
		if err != nil {
			h.report(d.Name, err)
			if prev, ok := old[d.Name]; ok && prev.dom.ID == d.ID {
				next[d.Name] = prev // a passing failure keeps what was known
			}
			continue
		}
		h.report(d.Name, nil)
		next[d.Name] = e
	}
	parked, err := h.listParked(conn)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.domains = next
	h.parked = parked
	if h.cfg.Balloon {
		h.followBalloons()
	}
	h.mu.Unlock()
	if changedSet(old, next) {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	return nil
}

// describe reads one domain's XML and finds its cgroup (kept from the last
// listing while the domain runs under the same ID).
func (h *Host) describe(conn *golibvirt.Libvirt, d golibvirt.Domain, prev entry) (entry, error) {
	var x string
	if err := h.call("domain XML of "+d.Name, func() (err error) {
		x, err = conn.DomainGetXMLDesc(d, 0)
		return err
	}); err != nil {
		return entry{}, err
	}
	e := entry{dom: d, metaOK: true}
	info, err := ParseDomain(x)
	if err != nil {
		// The domain is still a workload, with the defaults: its current
		// memory as the request (if the XML gave it), priority 0.
		h.report(d.Name+" metadata", err)
		e.metaOK = false
		info = info.withDefaults(d.Name)
	} else {
		h.report(d.Name+" metadata", nil)
	}
	e.info = info
	if prev.group != nil && prev.dom.ID == d.ID {
		e.group = prev.group
		return e, nil
	}
	g, err := h.domainCgroup(d.Name)
	if err != nil {
		return entry{}, err
	}
	e.group = g
	return e, nil
}

// domainCgroup is the memory cgroup of a running domain's QEMU: the
// process's own, less libvirt's per-thread children (emulator, vcpuN) and
// systemd's libvirt/ sub-group, so it holds the whole domain.
func (h *Host) domainCgroup(name string) (cgroup.Group, error) {
	b, err := os.ReadFile(filepath.Join(h.pidDir, name+".pid"))
	if err != nil {
		return nil, fmt.Errorf("domain %s: its QEMU's PID: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("domain %s: its PID file holds %q", name, b)
	}
	p, err := h.cfg.Hierarchy.ProcessPath(h.cfg.ProcRoot, pid)
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", name, err)
	}
	return h.cfg.Hierarchy.Open(DomainCgroupPath(p))
}

// DomainCgroupPath is the domain's cgroup, given the path of its QEMU's:
// libvirt puts the emulator thread (and the vCPUs) in children of the
// domain's cgroup, under a libvirt/ child with systemd.
func DomainCgroupPath(processPath string) string {
	p := strings.TrimSuffix(filepath.Clean(processPath), "/emulator")
	return strings.TrimSuffix(p, "/libvirt")
}

// report logs a domain's problem once, until it changes or clears.
func (h *Host) report(key string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if h.reported[key] == msg {
		return
	}
	if msg == "" {
		delete(h.reported, key)
		return
	}
	h.reported[key] = msg
	h.log.Warn("libvirt domain: "+msg, "domain", strings.TrimSuffix(key, " metadata"))
}

func changedSet(a, b map[string]entry) bool {
	if len(a) != len(b) {
		return true
	}
	for name, e := range a {
		if f, ok := b[name]; !ok || f.dom.ID != e.dom.ID || f.info != e.info {
			return true
		}
	}
	return false
}

// lookup returns a running domain and the connection ("", false when it is
// not running or libvirt is down).
func (h *Host) lookup(name string) (entry, *golibvirt.Libvirt, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.domains[name]
	return e, h.conn, ok && h.conn != nil
}

// running reports whether the domain is in the last listing.
func (h *Host) running(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.domains[name]
	return ok
}
