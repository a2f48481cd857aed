package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/qmp"
	"github.com/headroom-dev/headroom/internal/units"
)

// MinMemoryBytes is the least guest memory the image boots in: the kernel
// and the unpacked initramfs (headroom itself is most of it) need about
// 100 MiB before the guest command allocates anything.
const MinMemoryBytes = 160 << 20

// BalloonPath is the balloon device's QOM path (for qom-get guest-stats).
const BalloonPath = "/machine/peripheral/balloon0"

// Config describes one VM.
type Config struct {
	Image Image
	// Name labels the VM in QEMU (-name) and in errors.
	Name        string
	MemoryBytes uint64
	CPUs        int
	// Args is the guest command: a headroom subcommand with its flags
	// ("load", "--size", "256Mi") or an absolute path in the guest.
	Args []string
	// Dir holds the VM's sockets and console log; it is created if
	// missing and removed by Close. Default: a new directory in /tmp.
	Dir string
	// Console is where the guest's serial console goes (default
	// Dir/console.log, removed with Dir).
	Console string
	// QMPSocket is a QMP socket for others (an agent, a user); default
	// Dir/qmp.sock. The VM keeps its own QMP connection besides.
	QMPSocket string
	// Cgroup is the memory cgroup directory QEMU runs in from its first
	// instruction ("" leaves it in the caller's).
	Cgroup string
	// Controller is a loadctl controller's unix socket: the guest gets the
	// controller port connected to it.
	Controller string
	// GuestSwap gives the guest a swap disk.
	GuestSwap *SwapDisk
	// CacheDisk is a host file the guest gets as a read-only disk and
	// reads whole into its page cache before its command starts ("":
	// none). Several VMs may share one file.
	CacheDisk string
	// ExtraFiles are added to the initramfs (guest path → host path).
	ExtraFiles map[string]string
	// KernelArgs are appended to the kernel command line.
	KernelArgs []string
	// Accel is the accelerator; AccelAuto detects it.
	Accel Accel
	// Stdout and Stderr receive the guest command's output (nil: the
	// console log).
	Stdout, Stderr io.Writer
	// GraceSeconds is how long the guest command gets between SIGTERM
	// (on power-down) and SIGKILL inside the guest.
	GraceSeconds int
	// PowerOffWait is how long QEMU may run on once the guest has
	// reported its command's end (default DefaultPowerOffWait); then
	// headroom ends QEMU itself and says so in Exit.Ended.
	PowerOffWait time.Duration
}

// DefaultPowerOffWait: /init's power-off takes about 2 s (a second for
// its processes to leave, another for the stragglers, a sync); a guest
// that has not powered off well after that will not.
const DefaultPowerOffWait = 10 * time.Second

// SwapDisk is a guest swap disk backed by a host file.
type SwapDisk struct {
	SizeBytes uint64
	// Tmpfs backs it with a file in /dev/shm (host memory) instead of
	// /var/tmp (the disk).
	Tmpfs bool
}

// Start boots a VM and returns once QEMU answers QMP; the guest boots on.
// ctx bounds only the start; the VM lives until it exits or Close.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	vm := &VM{cfg: cfg, booted: make(chan struct{}), started: make(chan struct{}), exited: make(chan struct{}),
		events: make(chan qmp.Event, 64)}
	vm.phases.Created = time.Now()
	if err := vm.prepare(); err != nil {
		vm.cleanup()
		return nil, err
	}
	if err := vm.start(ctx); err != nil {
		vm.Close()
		return nil, err
	}
	return vm, nil
}

func (vm *VM) prepare() error {
	c := &vm.cfg
	switch {
	case c.MemoryBytes < MinMemoryBytes:
		return fmt.Errorf("guest memory %s is below the minimum of %s", units.FormatBytes(c.MemoryBytes), units.FormatBytes(MinMemoryBytes))
	case len(c.Args) == 0:
		return errors.New("no guest command")
	}
	if c.CPUs < 1 {
		c.CPUs = 1
	}
	if c.Name == "" {
		c.Name = "headroom-vm"
	}
	if c.Accel == "" || c.Accel == AccelAuto {
		c.Accel, _ = DetectAccel()
	}
	vm.accel = c.Accel
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "headroom-vm-")
		if err != nil {
			return err
		}
		c.Dir = dir
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	vm.dirMade = true
	if c.Console == "" {
		c.Console = filepath.Join(c.Dir, "console.log")
	}
	// QEMU appends to the console (so do the output copies when they have
	// no writer of their own); start it empty.
	if err := os.WriteFile(c.Console, nil, 0o644); err != nil {
		return fmt.Errorf("console log: %w", err)
	}
	if c.QMPSocket == "" {
		c.QMPSocket = filepath.Join(c.Dir, "qmp.sock")
	}
	if c.GuestSwap != nil {
		f, err := createSwapFile(c.GuestSwap, c.Name)
		if err != nil {
			return err
		}
		vm.swapFile = f
	}
	return nil
}

// socketPair returns a connected pair: one end for QEMU, one for us.
func socketPair() (qemuEnd *os.File, ours net.Conn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	qemuEnd = os.NewFile(uintptr(fds[0]), "qemu")
	f := os.NewFile(uintptr(fds[1]), "ours")
	ours, err = net.FileConn(f)
	f.Close()
	if err != nil {
		qemuEnd.Close()
		return nil, nil, err
	}
	return qemuEnd, ours, nil
}

// start runs QEMU with the VM's devices and connects to it.
func (vm *VM) start(ctx context.Context) error {
	c := vm.cfg
	initrd := c.Image.Initramfs
	if len(c.ExtraFiles) > 0 {
		var err error
		if initrd, err = c.Image.WithFiles(c.Dir, c.ExtraFiles); err != nil {
			return fmt.Errorf("add files to the initramfs: %w", err)
		}
	}
	// Socket pairs: QEMU's ends are inherited as fds 3.. in this order.
	names := []string{"qmp", guest.PortControl, guest.PortStdout, guest.PortStderr}
	qemuEnds := make([]*os.File, len(names))
	ours := make([]net.Conn, len(names))
	closeQEMUEnds := func() {
		for _, f := range qemuEnds {
			if f != nil {
				f.Close()
			}
		}
	}
	defer closeQEMUEnds()
	for i := range names {
		var err error
		if qemuEnds[i], ours[i], err = socketPair(); err != nil {
			return err
		}
	}
	args := vm.qemuArgs(initrd)
	qemu, err := FindQEMU()
	if err != nil {
		return err
	}
	if c.Cgroup != "" {
		vm.cmd = cgroup.Command(c.Cgroup, qemu, args...)
	} else {
		vm.cmd = exec.Command(qemu, args...)
	}
	vm.cmd.ExtraFiles = qemuEnds
	qemuLog := &tailBuffer{max: 4096}
	vm.cmd.Stderr = qemuLog
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	vm.copies.Add(3)
	if err := vm.cmd.Start(); err != nil {
		vm.copies.Add(-3)
		for _, c := range ours {
			c.Close()
		}
		return fmt.Errorf("start qemu: %w", err)
	}
	vm.setPhase(func(p *Phases) { p.QEMUStarted = time.Now() })
	// Only QEMU holds its ends now: when it exits, ours see end-of-file.
	closeQEMUEnds()
	qemuEnds = nil
	go vm.wait(qemuLog)
	go vm.readControl(ours[1])
	go vm.copyOutput(ours[2], c.Stdout)
	go vm.copyOutput(ours[3], c.Stderr)

	client, err := qmp.NewClient(ctx, ours[0])
	if err != nil {
		ours[0].Close()
		select {
		case <-vm.exited:
			return fmt.Errorf("qemu exited at start: %s", vm.Exit().Reason)
		default:
		}
		return fmt.Errorf("qemu did not answer QMP: %w", err)
	}
	vm.qmp = client
	vm.setPhase(func(p *Phases) { p.QMPReady = time.Now() })
	go vm.forwardEvents()
	// Guest statistics once a second: the guest's own view of its memory.
	if err := client.SetGuestStatsPollingInterval(ctx, BalloonPath, 1); err != nil {
		return fmt.Errorf("enable guest statistics: %w", err)
	}
	return nil
}

// TCGTranslationCacheMiB is the translation cache of a TCG guest (QEMU's
// tb-size; libvirt's tb-cache). The whole cache ends up resident: at 32 MiB
// a micro-VM's QEMU held 54-63 MiB beyond guest RAM, at 16 MiB 35-37 (a
// libvirt domain 59-63 against 40-44), for about 0.25 CPU-s more to boot
// and no change in the workload's touch rate in RAM or paging in the guest
// (docs/guide/vm.md). KVM has no translation cache.
const TCGTranslationCacheMiB = 16

// qemuArgs is the QEMU command line. The machine is `q35` booted by qboot
// (QEMU's minimal firmware) straight into the PVH entry of the
// uncompressed kernel: docs/guide/vm.md has the measurements behind each
// choice.
func (vm *VM) qemuArgs(initrd string) []string {
	c := vm.cfg
	nports := 3
	append_ := GuestKernelArgs(c.Args, c.CPUs, vm.accel == AccelTCG, c.GraceSeconds)
	// virtio-blk disks are named in the order of their devices.
	disks := 0
	diskName := func() string { disks++; return "vd" + string(rune('a'+disks-1)) }
	if vm.swapFile != "" {
		append_ = append(append_, guest.SwapKey+"="+diskName())
	}
	if c.CacheDisk != "" {
		append_ = append(append_, guest.CacheKey+"="+diskName())
	}
	accel := string(vm.accel)
	if vm.accel == AccelTCG {
		accel += ",tb-size=" + strconv.Itoa(TCGTranslationCacheMiB)
	}
	args := []string{
		"-name", c.Name,
		"-machine", "q35",
		"-accel", accel,
		"-cpu", cpuModel(vm.accel),
		"-smp", strconv.Itoa(c.CPUs),
		"-m", strconv.FormatUint(c.MemoryBytes>>20, 10) + "M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", c.Image.Kernel, "-initrd", initrd,
		"-chardev", "file,id=console,append=on,path=" + c.Console, "-serial", "chardev:console",
		"-chardev", "socket,id=qmp0,fd=3", "-mon", "chardev=qmp0,mode=control",
		"-qmp", "unix:" + c.QMPSocket + ",server=on,wait=off",
		"-device", "virtio-balloon-pci,id=balloon0,free-page-reporting=on,deflate-on-oom=on",
		"-device", "virtio-serial-pci,id=vs0",
		"-chardev", "socket,id=control,fd=4", "-device", "virtserialport,bus=vs0.0,chardev=control,name=" + guest.PortControl,
		"-chardev", "socket,id=stdout,fd=5", "-device", "virtserialport,bus=vs0.0,chardev=stdout,name=" + guest.PortStdout,
		"-chardev", "socket,id=stderr,fd=6", "-device", "virtserialport,bus=vs0.0,chardev=stderr,name=" + guest.PortStderr,
	}
	if fw := "/usr/share/qemu/qboot.rom"; fileExists(fw) {
		args = append(args, "-bios", fw)
	}
	if c.Controller != "" {
		nports++
		args = append(args, "-chardev", "socket,id=controller,path="+c.Controller,
			"-device", "virtserialport,bus=vs0.0,chardev=controller,name="+guest.PortController)
	}
	if vm.swapFile != "" {
		cacheMode := "none" // direct I/O: guest swap really reaches the disk
		if c.GuestSwap.Tmpfs {
			cacheMode = "writeback" // tmpfs has no direct I/O
		}
		args = append(args, "-drive", "file="+vm.swapFile+",if=none,id=swap0,format=raw,cache="+cacheMode,
			"-device", "virtio-blk-pci,drive=swap0")
	}
	if c.CacheDisk != "" {
		// Direct I/O: the content reaches each guest from the disk, not
		// from one copy in the host's page cache charged to whichever VM
		// read it first.
		args = append(args, "-drive", "file="+c.CacheDisk+",if=none,id=cache0,format=raw,readonly=on,cache=none",
			"-device", "virtio-blk-pci,drive=cache0")
	}
	append_ = append(append_, guest.PortsKey+"="+strconv.Itoa(nports))
	append_ = append(append_, c.KernelArgs...)
	return append(args, "-append", strings.Join(append_, " "))
}

// GuestKernelArgs are the kernel command line of headroom's guest image
// running command: on cpus vCPUs, under TCG or not, with graceSeconds
// between a power-down's SIGTERM and SIGKILL (0: the guest's default).
// The host adds the ports key (guest.PortsKey) and its disks' keys.
func GuestKernelArgs(command []string, cpus int, tcg bool, graceSeconds int) []string {
	// init_on_alloc=0: Debian's kernel zeroes every page it allocates,
	// the balloon driver's too, so inflating a balloon wrote each page
	// before handing it back — the host faulted in (from swap, if it had
	// swapped the page) every page it was being given, only to discard it.
	args := []string{"console=ttyS0", "no_timer_check", "panic=-1", "quiet", "init_on_alloc=0", guest.ArgsKey + "=" + guest.EncodeArgs(command)}
	if tcg {
		args = append(args, tcgBootArgs(cpus)...)
	}
	if graceSeconds > 0 {
		args = append(args, guest.GraceKey+"="+strconv.Itoa(graceSeconds))
	}
	return args
}

// tcgBootArgs skip the slowest parts of a kernel boot under TCG, measured
// with initcall_debug (CPU-seconds of a 1.6 s boot): the crypto self-tests
// (0.16 s, and 0.2 s for the KDF's own test) and boot-time kprobe set-up
// (0.06 s). A one-vCPU guest also skips the local APIC timer and its
// calibration (0.11 s: 100 ms of waiting for jiffies); the HPET serves as
// its clock event device, the TSC stays its clock.
func tcgBootArgs(cpus int) []string {
	args := []string{"cryptomgr.notests", "initcall_blacklist=crypto_kdf108_init,init_kprobe_trace"}
	if cpus == 1 {
		args = append(args, "noapictimer")
	}
	return args
}

// FindQEMU returns the QEMU binary, or a SetupError saying what to install.
func FindQEMU() (string, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", &SetupError{Problem: "qemu-system-x86_64 not found", Fix: "apt-get install --no-install-recommends qemu-system-x86"}
	}
	return qemu, nil
}

// cpuModel: the host's CPU on KVM; under TCG QEMU's baseline qemu64, which
// boots in 0.05 CPU-s less than "max" and leaves 8 MiB less translated code
// (the guest takes no AVX paths); and without PCID a guest context switch
// flushes QEMU's software TLB, the only time QEMU resizes it, so density's
// workers touch memory 2.4 times as fast as on "max".
func cpuModel(a Accel) string {
	if a == AccelKVM {
		return "host"
	}
	return "qemu64"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// createSwapFile makes and formats a guest swap disk's backing file.
func createSwapFile(d *SwapDisk, name string) (string, error) {
	dir := "/var/tmp"
	if d.Tmpfs {
		dir = "/dev/shm"
	}
	f, err := os.CreateTemp(dir, "headroom-guest-swap-")
	if err != nil {
		return "", fmt.Errorf("guest swap disk: %w", err)
	}
	path := f.Name()
	if d.Tmpfs {
		err = f.Truncate(int64(d.SizeBytes)) // tmpfs pages are allocated as the guest writes
	} else {
		err = unix.Fallocate(int(f.Fd()), 0, 0, int64(d.SizeBytes))
	}
	f.Close()
	if err == nil {
		var out []byte
		if out, err = exec.Command("mkswap", "-q", path).CombinedOutput(); err != nil {
			err = fmt.Errorf("mkswap: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("guest swap disk %s for %s: %w", path, name, err)
	}
	return path, nil
}
