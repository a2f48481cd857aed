//go:build system

package qmp_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/qmp"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// TestSystemQMPAgainstQEMU speaks to a real QEMU: a paused machine with a
// balloon and no guest, so every answer comes from QEMU itself (the guest's
// side is tested in internal/microvm).
func TestSystemQMPAgainstQEMU(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	testenv.Require(t, err == nil, "qemu-system-x86_64 (apt-get install qemu-system-x86)")
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	cmd := exec.Command(qemu, "-S", "-M", "pc", "-accel", "tcg", "-m", "128", "-nodefaults", "-no-user-config",
		"-display", "none", "-device", "virtio-balloon-pci,id=balloon0", "-qmp", "unix:"+sock+",server=on,wait=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *qmp.Client
	for c == nil {
		// QEMU creates the socket during start-up: retry until it answers.
		c, err = qmp.Dial(ctx, sock)
		if err != nil {
			select {
			case <-ctx.Done():
				t.Fatalf("QMP never answered: %v", err)
			case <-exited:
				t.Fatalf("qemu exited: %v", waitErr)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	defer c.Close()
	if c.Version() == "" || c.Version() == "0.0.0" {
		t.Errorf("version %q", c.Version())
	}
	st, err := c.QueryStatus(ctx)
	if err != nil || st.Running || st.Status != "prelaunch" {
		t.Errorf("status of a -S machine: %+v, %v", st, err)
	}
	actual, err := c.QueryBalloon(ctx)
	if err != nil || actual != 128<<20 {
		t.Errorf("query-balloon = %d, %v; want the full 128 MiB", actual, err)
	}
	if err := c.Balloon(ctx, 64<<20); err != nil {
		t.Errorf("balloon: %v", err)
	}
	if err := c.SetGuestStatsPollingInterval(ctx, "/machine/peripheral/balloon0", 1); err != nil {
		t.Errorf("polling interval: %v", err)
	}
	var interval int
	if err := c.QOMGet(ctx, "/machine/peripheral/balloon0", "guest-stats-polling-interval", &interval); err != nil || interval != 1 {
		t.Errorf("polling interval read back: %d, %v", interval, err)
	}
	stats, err := c.GuestStats(ctx, "/machine/peripheral/balloon0")
	if err != nil || !stats.LastUpdate.IsZero() {
		t.Errorf("guest stats before any guest: %+v, %v", stats, err)
	}
	var qe *qmp.Error
	if err := c.Execute(ctx, "no-such-command", nil, nil); !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("unknown command: %v", err)
	}
	if err := c.SystemPowerdown(ctx); err != nil {
		t.Errorf("system_powerdown: %v", err)
	}
	if err := c.Quit(ctx); err != nil {
		t.Fatalf("quit: %v", err)
	}
	var sawShutdown bool
	for ev := range c.Events() {
		if ev.Name == qmp.EventShutdown {
			sawShutdown = true
		}
	}
	if !sawShutdown {
		t.Error("no SHUTDOWN event before the connection closed")
	}
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("qemu still running after quit")
	}
}
