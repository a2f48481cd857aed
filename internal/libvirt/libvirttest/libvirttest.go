// Package libvirttest gives system tests a real libvirtd: the one running
// if there is one, else a libvirtd and a virtlogd of the test's own
// (there is no systemd to start them), stopped by PID when the test ends;
// and headroom's guest image booted as libvirt domains, destroyed,
// undefined and their managed-save images removed at the end.
package libvirttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// URI is the connection the tests use.
const URI = "qemu:///system"

// socketPath is libvirtd's read-write socket for qemu:///system.
const socketPath = "/run/libvirt/libvirt-sock"

// Daemon is the libvirtd the test talks to.
type Daemon struct {
	t       testing.TB
	own     bool // started by the test
	libvirt *exec.Cmd
	virtlog *exec.Cmd
	logs    string
}

// Start returns a libvirtd answering at URI.
func Start(t testing.TB) *Daemon {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := exec.LookPath("libvirtd")
	testenv.Require(t, err == nil, "libvirtd (apt-get install libvirt-daemon-system libvirt-daemon-driver-qemu)")
	d := &Daemon{t: t, logs: t.TempDir()}
	if answers() {
		return d
	}
	d.own = true
	restoreKVM := kvmForQEMUUser(t)
	// libvirt makes its default partition, /machine, in every hierarchy
	// the first time a domain starts, and leaves it: the test removes those
	// it did not find.
	var before []string
	for _, root := range cgroupMounts(t) {
		if _, err := os.Stat(filepath.Join(root, "machine")); err == nil {
			before = append(before, root)
		}
	}
	d.virtlog = d.spawn("virtlogd")
	d.StartLibvirtd()
	t.Cleanup(func() {
		d.StopLibvirtd()
		stop(d.virtlog)
		restoreKVM()
		for _, root := range cgroupMounts(t) {
			if !slices.Contains(before, root) {
				os.Remove(filepath.Join(root, "machine")) // only if empty: a domain left behind stays visible
			}
		}
	})
	return d
}

// kvmForQEMUUser gives /dev/kvm the owner and mode Debian's udev rule
// gives it (root:kvm 0660), which this machine, without udev, lacks. With
// /dev/kvm root's alone, libvirtd's QEMU probe (run as root) sees KVM and
// its check as the QEMU user does not, so it probes again on every call:
// a domain's define took 75-82 s here instead of milliseconds. It returns
// what puts the old owner and mode back.
func kvmForQEMUUser(t testing.TB) (restore func()) {
	const dev = "/dev/kvm"
	fi, err := os.Stat(dev)
	if err != nil {
		return func() {}
	}
	st := fi.Sys().(*syscall.Stat_t)
	grp, err := lookupGroup("kvm")
	if err != nil || (int(st.Gid) == grp && fi.Mode().Perm()&0o060 == 0o060) {
		return func() {}
	}
	if err := os.Chown(dev, -1, grp); err != nil {
		t.Fatalf("chgrp kvm %s: %v", dev, err)
	}
	if err := os.Chmod(dev, 0o660); err != nil {
		t.Fatalf("chmod 0660 %s: %v", dev, err)
	}
	return func() {
		os.Chmod(dev, fi.Mode().Perm())
		os.Chown(dev, -1, int(st.Gid))
	}
}

func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

func (d *Daemon) spawn(name string) *exec.Cmd {
	d.t.Helper()
	logf, err := os.Create(filepath.Join(d.logs, name+".log"))
	if err != nil {
		d.t.Fatal(err)
	}
	cmd := exec.Command(name)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start %s: %v", name, err)
	}
	return cmd
}

// StartLibvirtd starts the test's libvirtd (again) and waits for it to
// answer.
func (d *Daemon) StartLibvirtd() {
	d.t.Helper()
	if !d.own {
		d.t.Fatal("libvirtd is the machine's, not the test's: the test may not stop or start it")
	}
	d.libvirt = d.spawn("libvirtd")
	deadline := time.Now().Add(20 * time.Second)
	for !answers() {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(d.logs, "libvirtd.log"))
			d.t.Fatalf("libvirtd did not answer at %s within 20 s; its log:\n%s", socketPath, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopLibvirtd stops the test's libvirtd (its domains keep running).
func (d *Daemon) StopLibvirtd() {
	if d.own && d.libvirt != nil {
		stop(d.libvirt)
		d.libvirt = nil
	}
}

// Own reports whether the test started libvirtd (and so may stop it).
func (d *Daemon) Own() bool { return d.own }

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func answers() bool {
	c, err := net.DialTimeout("unix", socketPath, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Connect is a go-libvirt connection for the test, closed at its end.
func Connect(t testing.TB) *golibvirt.Libvirt {
	t.Helper()
	u, _ := url.Parse(URI)
	l, err := golibvirt.ConnectToURI(u)
	if err != nil {
		t.Fatalf("connect to %s: %v", URI, err)
	}
	t.Cleanup(func() { l.Disconnect() })
	return l
}

// Image is headroom's guest image where libvirt's QEMU user can read it
// (not under /root), removed when the test ends.
type Image struct {
	Kernel, Initramfs string
}

// GuestImage copies the guest image to /var/lib/libvirt/boot.
func GuestImage(t testing.TB) Image {
	t.Helper()
	img := testenv.GuestImage(t)
	dir := filepath.Join("/var/lib/libvirt/boot", "headroom-test-"+suffix())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out := Image{Kernel: filepath.Join(dir, "vmlinuz"), Initramfs: filepath.Join(dir, "initramfs")}
	for src, dst := range map[string]string{img.Kernel: out.Kernel, img.Initramfs: out.Initramfs} {
		if err := libvirt.CopyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func suffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Guest is a domain the test defined and started.
type Guest struct {
	Name string
	Dom  golibvirt.Domain
	Dir  string // console.log, stdout, stderr
}

// Stdout is what the guest's command printed so far.
func (g *Guest) Stdout() string {
	b, _ := os.ReadFile(filepath.Join(g.Dir, "stdout"))
	return string(b)
}

// Console is the guest's console so far.
func (g *Guest) Console() string {
	b, _ := os.ReadFile(filepath.Join(g.Dir, "console.log"))
	return string(b)
}

// WaitStdout waits until the guest's stdout holds want.
func (g *Guest) WaitStdout(t testing.TB, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(g.Stdout(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q on the guest's stdout within %s; console:\n%s\nstdout:\n%s", g.Name, want, d, g.Console(), g.Stdout())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Define defines spec's domain (persistent, as a managed save needs) with
// a name of the test's own and its files under /var/lib/libvirt; Start
// starts it. At the test's end it is destroyed and undefined with its
// managed-save image.
func Define(t testing.TB, l *golibvirt.Libvirt, spec libvirt.GuestSpec) *Guest {
	t.Helper()
	if spec.Name == "" {
		spec.Name = "hr-test-" + suffix()
	}
	dir := filepath.Join("/var/lib/libvirt/qemu", "headroom-test-"+spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Dir = dir
	x, err := libvirt.GuestDomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := l.DomainDefineXML(x)
	if err != nil {
		t.Fatalf("define %s: %v\n%s", spec.Name, err, x)
	}
	g := &Guest{Name: spec.Name, Dom: dom, Dir: dir}
	t.Cleanup(func() {
		if state, _, err := l.DomainGetState(dom, 0); err == nil && golibvirt.DomainState(state) != golibvirt.DomainShutoff {
			l.DomainDestroyFlags(dom, golibvirt.DomainDestroyDefault)
		}
		if err := l.DomainUndefineFlags(dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineNvram); err != nil {
			t.Errorf("restore: undefine %s: %v", spec.Name, err)
		}
		os.RemoveAll(dir)
	})
	return g
}

// Start starts a defined guest (from its managed-save image, if it has
// one).
func (g *Guest) Start(t testing.TB, l *golibvirt.Libvirt) {
	t.Helper()
	if err := l.DomainCreate(g.Dom); err != nil {
		t.Fatalf("start %s: %v; console:\n%s", g.Name, err, g.Console())
	}
}

// Running reports whether the domain runs.
func (g *Guest) Running(l *golibvirt.Libvirt) bool {
	state, _, err := l.DomainGetState(g.Dom, 0)
	return err == nil && golibvirt.DomainState(state) == golibvirt.DomainRunning
}

// WaitStopped waits until the domain is shut off.
func (g *Guest) WaitStopped(ctx context.Context, l *golibvirt.Libvirt) error {
	for {
		state, _, err := l.DomainGetState(g.Dom, 0)
		if err == nil && golibvirt.DomainState(state) == golibvirt.DomainShutoff {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still running: %w", g.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Partition is a libvirt resource partition of the test's own under
// /machine: its memory cgroup limits the domains placed in it (a node of
// the test's size), and nothing of the machine's default partition
// changes.
type Partition struct {
	// Name is the partition as a domain's <resource><partition> names it.
	Name string
	// Memory is its directory in the memory hierarchy.
	Memory string
}

// cgroupMounts are the machine's cgroup hierarchies (v1 and v2): libvirt
// places a domain in each.
func cgroupMounts(t testing.TB) []string {
	t.Helper()
	out, err := libvirt.CgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// NewPartition makes /machine/headroom-test-XXXX with ramBytes of memory
// and swapBytes of swap, removed when the test ends (after its domains,
// which are destroyed first).
func NewPartition(t testing.TB, ramBytes, swapBytes int64) Partition {
	t.Helper()
	h, err := cgroup.Find()
	if err != nil {
		t.Fatal(err)
	}
	p, err := libvirt.CreatePartition(h, "headroom-test-"+suffix(), uint64(ramBytes), uint64(swapBytes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Remove(10 * time.Second); err != nil {
			t.Errorf("restore: %v", err)
		}
	})
	return Partition{Name: p.Name, Memory: p.Memory.Path()}
}

// Cgroup is the running domain's memory cgroup directory.
func (g *Guest) Cgroup(t testing.TB, h cgroup.Hierarchy) string {
	t.Helper()
	dir, err := g.cgroupDir(h)
	if err != nil {
		t.Fatalf("%s: %v", g.Name, err)
	}
	return dir
}

func (g *Guest) cgroupDir(h cgroup.Hierarchy) (string, error) {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", g.Name+".pid"))
	if err != nil {
		return "", fmt.Errorf("its PID: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("its PID: %w", err)
	}
	p, err := h.ProcessPath("/proc", pid)
	if err != nil {
		return "", err
	}
	return filepath.Join(h.Mount, libvirt.DomainCgroupPath(p)), nil
}

// SwapBytes is the swap the running domain's memory cgroup holds (0 once
// the domain is gone).
func (g *Guest) SwapBytes(h cgroup.Hierarchy) uint64 {
	dir, err := g.cgroupDir(h)
	if err != nil {
		return 0
	}
	if h.Version == cgroup.V1 {
		stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0
		}
		v, _ := cgroup.StatValue(stat, "swap")
		return v
	}
	cur, err := os.ReadFile(filepath.Join(dir, "memory.swap.current"))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
	return v
}

// LimitMemory writes the running domain's cgroup memory limit, as an
// operator's <memtune><hard_limit> would (which this machine refuses:
// libvirt then raises QEMU's RLIMIT_MEMLOCK, and root here lacks
// CAP_SYS_RESOURCE). On cgroup v1 a swap allowance needs a memory limit.
func (g *Guest) LimitMemory(t testing.TB, h cgroup.Hierarchy, bytes uint64) {
	t.Helper()
	file := "memory.max"
	if h.Version == cgroup.V1 {
		file = "memory.limit_in_bytes"
	}
	dir := g.Cgroup(t, h)
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatUint(bytes, 10)), 0o644); err != nil {
		t.Fatalf("%s: memory limit: %v", g.Name, err)
	}
}
