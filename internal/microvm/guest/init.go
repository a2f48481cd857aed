package guest

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IsInit reports whether this process is a guest's /init: PID 1 started as
// InitPath, as the kernel starts the initramfs's. A container's PID 1 (the
// agent in its DaemonSet pod, a workload pod's load) is headroom's command
// line, not a guest's init.
func IsInit() bool { return isInit(os.Getpid(), os.Args) }

func isInit(pid int, args []string) bool { return pid == 1 && len(args) > 0 && args[0] == InitPath }

// deviceWait bounds how long /init waits for a device (a virtio-serial
// port, the swap disk) to appear after its driver is loaded.
const deviceWait = 30 * time.Second

// Main is /init. It never returns: it powers the machine off.
func Main() {
	console := openConsole()
	logf := func(format string, args ...any) { fmt.Fprintf(console, "headroom-init: "+format+"\n", args...) }
	control, err := boot(logf)
	if err != nil {
		logf("%v", err)
		report(control, Event{Event: EventFailed, Error: err.Error()})
		powerOff(logf)
	}
	status, signalName, err := runCommand(control, logf)
	if err != nil {
		logf("%v", err)
		report(control, Event{Event: EventFailed, Error: err.Error()})
	} else {
		report(control, Event{Event: EventExited, ExitStatus: &status, Signal: signalName})
	}
	powerOff(logf)
}

func openConsole() io.Writer {
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		return f
	}
	return os.Stderr
}

// boot prepares the machine and returns the control port (nil if it could
// not be opened).
func boot(logf func(string, ...any)) (*os.File, error) {
	if err := mountAll(); err != nil {
		return nil, err
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, err
	}
	kv := ParseCmdline(string(cmdline))
	start := uptime()
	if err := loadModules(kv); err != nil {
		return nil, err
	}
	loaded := uptime()
	ports, _ := strconv.Atoi(kv[PortsKey])
	if err := linkPorts(max(ports, 3)); err != nil {
		return nil, err
	}
	logf("started at %.2fs; modules loaded in %.2fs, ports found in %.2fs", start, loaded-start, uptime()-loaded)
	control, err := os.OpenFile(filepath.Join(PortDir, PortControl), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open control port: %w", err)
	}
	if dev := kv[SwapKey]; dev != "" {
		if err := swapOn("/dev/" + dev); err != nil {
			return control, err
		}
	}
	if dev := kv[CacheKey]; dev != "" {
		began := uptime()
		n, err := fillPageCache("/dev/" + dev)
		if err != nil {
			return control, err
		}
		logf("read %d MiB of %s into the page cache in %.2fs", n>>20, dev, uptime()-began)
	}
	report(control, Event{Event: EventBooted})
	return control, nil
}

// mountAll mounts the pseudo file systems and cgroup2 with the memory
// controller enabled for child groups.
func mountAll() error {
	mounts := []struct{ fstype, target string }{
		{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}, {"tmpfs", "/run"}, {"tmpfs", "/tmp"},
		{"cgroup2", "/sys/fs/cgroup"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0o644); err != nil {
		return fmt.Errorf("enable the cgroup2 memory controller: %w", err)
	}
	return nil
}

// loadModules loads the image's modules in their listed order, each with
// its parameters from the kernel command line ("virtio_mmio.device=..."),
// as modprobe would pass them.
func loadModules(cmdline map[string]string) error {
	b, err := os.ReadFile(ModulesOrder)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel with everything built in
	}
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(b)) {
		f, err := os.Open(filepath.Join(ModulesDir, name+".ko"))
		if err != nil {
			return fmt.Errorf("load module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), moduleParams(cmdline, name), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

// moduleParams collects "module.key=value" words for one module.
func moduleParams(cmdline map[string]string, module string) string {
	var params []string
	for k, v := range cmdline {
		if p, ok := strings.CutPrefix(k, module+"."); ok && p != "" {
			params = append(params, p+"="+v)
		}
	}
	return strings.Join(params, " ")
}

// linkPorts waits for want virtio-serial ports and links each as
// /dev/virtio-ports/<name>, as udev does on a full distribution.
func linkPorts(want int) error {
	if err := os.MkdirAll(PortDir, 0o755); err != nil {
		return err
	}
	deadline := time.Now().Add(deviceWait)
	for {
		entries, _ := os.ReadDir("/sys/class/virtio-ports")
		named := 0
		for _, e := range entries {
			name, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if n := strings.TrimSpace(string(name)); err == nil && n != "" {
				if _, err := os.Stat("/dev/" + e.Name()); err == nil {
					named++
					os.Symlink("/dev/"+e.Name(), filepath.Join(PortDir, n))
				}
			}
		}
		if named >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d virtio-serial ports appeared within %s", named, want, deviceWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitForDevice waits for a disk's device node to appear.
func waitForDevice(what, dev string) error {
	deadline := time.Now().Add(deviceWait)
	for {
		if _, err := os.Stat(dev); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s did not appear within %s", what, dev, deviceWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldCacheDisk stays open for the guest's lifetime: the kernel drops a
// block device's page cache when its last opener closes it (and the
// garbage collector would close an unreachable file).
var heldCacheDisk *os.File

// fillPageCache reads a disk whole through the page cache, keeps it open
// so the cache stays, and returns how many bytes it read.
func fillPageCache(dev string) (int64, error) {
	if err := waitForDevice("cache disk", dev); err != nil {
		return 0, err
	}
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20) // large reads: few syscalls under TCG
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			heldCacheDisk = f
			return total, nil
		}
		if err != nil {
			f.Close()
			return total, fmt.Errorf("read cache disk %s: %w", dev, err)
		}
	}
}

// swapOn enables the swap disk the host formatted with mkswap.
func swapOn(dev string) error {
	if err := waitForDevice("swap disk", dev); err != nil {
		return err
	}
	p, err := unix.BytePtrFromString(dev)
	if err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0, 0); errno != 0 {
		return fmt.Errorf("swapon %s: %w", dev, errno)
	}
	return nil
}

// runCommand starts the guest command with its output on the stdout and
// stderr ports, forwards a power-button press as SIGTERM (SIGKILL after
// the grace period), reaps every orphan, and returns the command's exit
// status once it has ended.
func runCommand(control *os.File, logf func(string, ...any)) (status int, signalName string, err error) {
	cmdline, _ := os.ReadFile("/proc/cmdline")
	kv := ParseCmdline(string(cmdline))
	args, err := DecodeArgs(kv[ArgsKey])
	if err != nil {
		return 0, "", err
	}
	grace := 30 * time.Second
	if s, err := strconv.Atoi(kv[GraceKey]); err == nil && s > 0 {
		grace = time.Duration(s) * time.Second
	}
	stdout, err := os.OpenFile(filepath.Join(PortDir, PortStdout), os.O_WRONLY, 0)
	if err != nil {
		return 0, "", fmt.Errorf("open stdout port: %w", err)
	}
	stderr, err := os.OpenFile(filepath.Join(PortDir, PortStderr), os.O_WRONLY, 0)
	if err != nil {
		return 0, "", fmt.Errorf("open stderr port: %w", err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, "", err
	}
	path := args[0]
	if !strings.HasPrefix(path, "/") {
		// A headroom subcommand: run ourselves with it.
		path, args = InitPath, append([]string{InitPath}, args...)
	}
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	proc, err := os.StartProcess(path, args, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{"PATH=/bin:/sbin", "HOME=/", "HEADROOM_GUEST=1"},
		Files: []*os.File{devNull, stdout, stderr},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	devNull.Close()
	if err != nil {
		return 0, "", fmt.Errorf("start %s: %w", strings.Join(args, " "), err)
	}
	report(control, Event{Event: EventStarted, PID: proc.Pid})

	power := powerButton(logf)
	var kill <-chan time.Time
	for {
		select {
		case <-children:
			for {
				var ws unix.WaitStatus
				pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
				if pid == proc.Pid {
					stdout.Close()
					stderr.Close()
					if ws.Signaled() {
						return 128 + int(ws.Signal()), ws.Signal().String(), nil
					}
					return ws.ExitStatus(), "", nil
				}
			}
		case <-power:
			logf("power button pressed: stopping the command (SIGTERM, SIGKILL after %s)", grace)
			syscall.Kill(-proc.Pid, syscall.SIGTERM)
			kill = time.After(grace)
			power = nil
		case <-kill:
			logf("command still running after %s: SIGKILL", grace)
			syscall.Kill(-proc.Pid, syscall.SIGKILL)
		}
	}
}

// powerButton delivers a value when the ACPI power button is pressed
// (QMP system_powerdown); it watches every input device named "Power Button".
func powerButton(logf func(string, ...any)) <-chan struct{} {
	pressed := make(chan struct{}, 1)
	devices, _ := filepath.Glob("/sys/class/input/event*")
	watching := 0
	for _, d := range devices {
		name, _ := os.ReadFile(filepath.Join(d, "device", "name"))
		if strings.TrimSpace(string(name)) != "Power Button" {
			continue
		}
		f, err := os.Open("/dev/input/" + filepath.Base(d))
		if err != nil {
			logf("open power button %s: %v", d, err)
			continue
		}
		watching++
		go func() {
			// struct input_event on 64-bit: 16-byte time, u16 type, u16 code, s32 value.
			ev := make([]byte, 24)
			for {
				if _, err := io.ReadFull(f, ev); err != nil {
					return
				}
				typ, code := binary.LittleEndian.Uint16(ev[16:]), binary.LittleEndian.Uint16(ev[18:])
				value := int32(binary.LittleEndian.Uint32(ev[20:]))
				if typ == unix.EV_KEY && code == keyPower && value == 1 {
					select {
					case pressed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	if watching == 0 {
		logf("no ACPI power button found: power-down requests will be ignored")
	}
	return pressed
}

// report writes one event on the control port.
func report(control *os.File, e Event) {
	if control == nil {
		return
	}
	e.UptimeSeconds = uptime()
	b, _ := json.Marshal(e)
	control.Write(append(b, '\n'))
}

// uptime is the guest's uptime in seconds (0 if unreadable).
func uptime() float64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return float64(ts.Nano()) / 1e9
}

// powerOff ends every other process (SIGTERM, SIGKILL for what is left
// after a second), flushes and powers the machine off.
func powerOff(logf func(string, ...any)) {
	syscall.Kill(-1, syscall.SIGTERM)
	if !reapAll(time.Second) {
		syscall.Kill(-1, syscall.SIGKILL)
		reapAll(time.Second)
	}
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	logf("power off: %v", err)
	select {} // PID 1 must not exit: that is a kernel panic
}

// reapAll waits for every child to exit, at most timeout; it reports
// whether none is left. (The waiting goroutine outlives a timeout: the
// machine powers off next.)
func reapAll(timeout time.Duration) bool {
	none := make(chan struct{})
	go func() {
		for {
			if _, err := unix.Wait4(-1, nil, 0, nil); errors.Is(err, unix.ECHILD) {
				close(none)
				return
			}
		}
	}()
	select {
	case <-none:
		return true
	case <-time.After(timeout):
		return false
	}
}

// keyPower is KEY_POWER from linux/input-event-codes.h.
const keyPower = 116
