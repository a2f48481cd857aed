package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/qmp"
)

// Phases are the moments of a VM's start, on the host clock.
type Phases struct {
	Created time.Time `json:"created"`
	// QEMUStarted: the QEMU process exists.
	QEMUStarted time.Time `json:"qemu_started"`
	// QMPReady: QEMU answered the QMP handshake.
	QMPReady time.Time `json:"qmp_ready"`
	// Booted: the guest's /init reported it is up (modules, ports, swap).
	Booted time.Time `json:"booted"`
	// CommandStarted: /init started the guest command.
	CommandStarted time.Time `json:"command_started"`
	// BootCPUSeconds is QEMU's CPU time from its start until the guest
	// command started.
	BootCPUSeconds float64 `json:"boot_cpu_seconds"`
	// GuestUptimeSeconds is the guest's uptime when the command started.
	GuestUptimeSeconds float64 `json:"guest_uptime_seconds"`
}

// Exit is how a VM ended.
type Exit struct {
	// Status is the guest command's exit status; -1 if it did not report one.
	Status int
	// Reason explains a VM that ended without its command's status: a
	// guest kernel panic, QEMU killed, /init failing.
	Reason string
	// QEMUErr is QEMU's own exit error, if any.
	QEMUErr error
	// Ended says why headroom ended QEMU itself after the guest had
	// reported its command's end ("": QEMU exited on its own).
	Ended string
}

// VM is a running micro-VM.
type VM struct {
	cfg    Config
	cmd    *exec.Cmd
	accel  Accel
	qmp    *qmp.Client
	events chan qmp.Event

	mu        sync.Mutex
	phases    Phases
	exit      Exit
	gotStatus bool
	booted    chan struct{}
	started   chan struct{}
	exited    chan struct{}
	copies    sync.WaitGroup
	dirMade   bool // Dir exists: Close removes it
	swapFile  string
	closeOnce sync.Once
}

func (vm *VM) setPhase(f func(*Phases)) {
	vm.mu.Lock()
	f(&vm.phases)
	vm.mu.Unlock()
}

// wait records QEMU's exit.
func (vm *VM) wait(qemuLog *tailBuffer) {
	err := vm.cmd.Wait()
	vm.copies.Wait() // every byte of output and every control event is in
	vm.mu.Lock()
	vm.exit.QEMUErr = err
	if !vm.gotStatus {
		vm.exit.Status = -1
		if vm.exit.Reason == "" {
			vm.exit.Reason = vm.explainExit(err, qemuLog.String())
		}
	}
	vm.mu.Unlock()
	close(vm.exited)
}

// explainExit says why a VM ended without its command's exit status.
func (vm *VM) explainExit(err error, qemuLog string) string {
	tail := vm.ConsoleTail(20)
	for _, line := range strings.Split(tail, "\n") {
		if i := strings.Index(line, "Kernel panic"); i >= 0 {
			return "guest kernel panic: " + strings.TrimSpace(line[i:])
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("qemu killed by %v", ws.Signal())
		}
	}
	if l := lastNonEmptyLine(qemuLog); l != "" {
		return "qemu: " + l
	}
	if err != nil {
		return "qemu: " + err.Error()
	}
	return "the guest powered off without reporting its command's exit status"
}

// readControl follows /init's events.
func (vm *VM) readControl(conn net.Conn) {
	defer vm.copies.Done()
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
			vm.setPhase(func(p *Phases) { p.Booted = now })
			close(vm.booted)
		case guest.EventStarted:
			cpu := vm.cpuSeconds()
			vm.setPhase(func(p *Phases) {
				p.CommandStarted, p.BootCPUSeconds, p.GuestUptimeSeconds = now, cpu, ev.UptimeSeconds
			})
			close(vm.started)
		case guest.EventExited:
			vm.mu.Lock()
			vm.exit.Status, vm.gotStatus = *ev.ExitStatus, true
			vm.mu.Unlock()
			vm.endAfterPowerOffWait()
		case guest.EventFailed:
			vm.mu.Lock()
			vm.exit.Reason = "guest /init: " + ev.Error
			vm.mu.Unlock()
			vm.endAfterPowerOffWait()
		}
	}
}

// endAfterPowerOffWait ends QEMU if it still runs PowerOffWait after the
// guest reported its command's end: /init powers off next, and a guest
// whose power-off does not reach QEMU would otherwise hold its memory
// (and whoever waits for it) forever. SIGTERM lets QEMU exit cleanly;
// SIGKILL follows if that does not end it either.
func (vm *VM) endAfterPowerOffWait() {
	wait := vm.cfg.PowerOffWait
	if wait <= 0 {
		wait = DefaultPowerOffWait
	}
	go func() {
		select {
		case <-vm.exited:
			return
		case <-time.After(wait):
		}
		vm.mu.Lock()
		vm.exit.Ended = fmt.Sprintf("QEMU still ran %s after the guest command ended: sent SIGTERM", wait)
		vm.mu.Unlock()
		vm.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-vm.exited:
		case <-time.After(killAfterTerm):
			vm.mu.Lock()
			vm.exit.Ended += fmt.Sprintf(", SIGKILL %s later", killAfterTerm)
			vm.mu.Unlock()
			vm.Kill()
		}
	}()
}

// killAfterTerm is how long QEMU gets to exit on SIGTERM.
const killAfterTerm = 3 * time.Second

// copyOutput copies a guest output port to w (the console log if nil).
func (vm *VM) copyOutput(conn net.Conn, w io.Writer) {
	defer vm.copies.Done()
	defer conn.Close()
	if w == nil {
		f, err := os.OpenFile(vm.cfg.Console, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			io.Copy(io.Discard, conn)
			return
		}
		defer f.Close()
		w = f
	}
	io.Copy(w, conn)
}

func (vm *VM) forwardEvents() {
	for ev := range vm.qmp.Events() {
		select {
		case vm.events <- ev:
		default: // nobody reads them
		}
	}
	close(vm.events)
}

// cpuSeconds is QEMU's CPU time so far.
func (vm *VM) cpuSeconds() float64 {
	s, _ := host.ProcessCPUSeconds(vm.cmd.Process.Pid)
	return s
}

// PID is QEMU's process id.
func (vm *VM) PID() int { return vm.cmd.Process.Pid }

// Accel is the accelerator the VM runs on.
func (vm *VM) Accel() Accel { return vm.accel }

// QMP is the VM's own QMP connection.
func (vm *VM) QMP() *qmp.Client { return vm.qmp }

// QMPSocket is the QMP socket others may connect to.
func (vm *VM) QMPSocket() string { return vm.cfg.QMPSocket }

// Events delivers QMP events (SHUTDOWN, BALLOON_CHANGE, ...).
func (vm *VM) Events() <-chan qmp.Event { return vm.events }

// Booted is closed when the guest's /init is up.
func (vm *VM) Booted() <-chan struct{} { return vm.booted }

// CommandStarted is closed when the guest command has started.
func (vm *VM) CommandStarted() <-chan struct{} { return vm.started }

// Exited is closed when QEMU has exited and all guest output is copied.
func (vm *VM) Exited() <-chan struct{} { return vm.exited }

// Phases returns the start-up timestamps recorded so far.
func (vm *VM) Phases() Phases {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.phases
}

// Exit is how the VM ended (valid once Exited is closed).
func (vm *VM) Exit() Exit {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.exit
}

// Wait blocks until the VM has exited or ctx ends.
func (vm *VM) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-vm.exited:
		return vm.Exit(), nil
	case <-ctx.Done():
		return Exit{}, context.Cause(ctx)
	}
}

// Powerdown presses the guest's power button: /init stops the command
// (SIGTERM), which reports and exits, and the guest powers off.
func (vm *VM) Powerdown(ctx context.Context) error { return vm.qmp.SystemPowerdown(ctx) }

// Stop ends the VM gracefully: a power-down, then QMP quit after grace,
// then SIGKILL. It returns once QEMU has exited.
func (vm *VM) Stop(grace time.Duration) {
	select {
	case <-vm.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := vm.Powerdown(ctx); err == nil {
		select {
		case <-vm.exited:
			return
		case <-ctx.Done():
		}
	}
	quit, cancelQuit := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelQuit()
	if vm.qmp.Quit(quit) == nil {
		select {
		case <-vm.exited:
			return
		case <-quit.Done():
		}
	}
	vm.Kill()
	<-vm.exited
}

// Kill ends QEMU at once.
func (vm *VM) Kill() {
	if vm.cmd != nil && vm.cmd.Process != nil {
		vm.cmd.Process.Kill()
	}
}

// Close kills QEMU if it still runs and removes what the VM created
// (its directory, sockets, console log unless given, swap file).
func (vm *VM) Close() error {
	vm.closeOnce.Do(func() {
		if vm.cmd != nil && vm.cmd.Process != nil {
			vm.Kill()
			<-vm.exited
		}
		if vm.qmp != nil {
			vm.qmp.Close()
		}
		vm.cleanup()
	})
	return nil
}

func (vm *VM) cleanup() {
	if vm.swapFile != "" {
		os.Remove(vm.swapFile)
	}
	if vm.dirMade {
		os.RemoveAll(vm.cfg.Dir)
	}
}

// ConsoleTail returns the last n lines of the guest's console.
func (vm *VM) ConsoleTail(n int) string {
	f, err := os.Open(vm.cfg.Console)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		f.Seek(fi.Size()-window, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func lastNonEmptyLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
