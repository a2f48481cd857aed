package libvirt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/cgroup"
)

// The domain's cgroup, from its QEMU's, in every layout libvirt uses.
func TestDomainCgroupPath(t *testing.T) {
	for _, tt := range []struct{ process, want string }{
		{"/machine/qemu-3-hrprobe1.libvirt-qemu", "/machine/qemu-3-hrprobe1.libvirt-qemu"},                                // v1, no systemd: memory not split
		{"/machine/qemu-3-hrprobe1.libvirt-qemu/emulator", "/machine/qemu-3-hrprobe1.libvirt-qemu"},                       // v1 cpu, or v2 without systemd
		{`/machine.slice/machine-qemu\x2d2\x2dvm.scope/libvirt/emulator`, `/machine.slice/machine-qemu\x2d2\x2dvm.scope`}, // v2 with systemd
		{`/machine.slice/machine-qemu\x2d2\x2dvm.scope/libvirt`, `/machine.slice/machine-qemu\x2d2\x2dvm.scope`},
		{"/machine/part.partition/qemu-1-a.libvirt-qemu/", "/machine/part.partition/qemu-1-a.libvirt-qemu"},
	} {
		if got := DomainCgroupPath(tt.process); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.process, got, tt.want)
		}
	}
}

// The scope "/" means libvirt's machine partition where there is one.
func TestScope(t *testing.T) {
	mount := t.TempDir()
	h := cgroup.Hierarchy{Version: cgroup.V1, Mount: mount}
	if got := Scope(h, "/"); got != "/" {
		t.Errorf("no partition yet: %s, want the host", got)
	}
	os.Mkdir(filepath.Join(mount, "machine.slice"), 0o755)
	if got := Scope(h, "/"); got != "/machine.slice" {
		t.Errorf("systemd: %s", got)
	}
	os.Mkdir(filepath.Join(mount, "machine"), 0o755)
	if got := Scope(h, ""); got != "/machine" {
		t.Errorf("cgroupfs: %s", got)
	}
	if got := Scope(h, "/machine/mine.partition"); got != "/machine/mine.partition" {
		t.Errorf("given: %s", got)
	}
}

func TestOpenRefusesBadURIs(t *testing.T) {
	for _, uri := range []string{"", "not a uri", "xen:///system", "qemu:///nowhere"} {
		if _, err := Open(Config{URI: uri}, nil); err == nil {
			t.Errorf("%q accepted", uri)
		}
	}
	if _, err := Open(Config{URI: "qemu:///system"}, nil); err != nil {
		t.Errorf("qemu:///system: %v", err)
	}
}

// A refused connection names its likely cause where the agent is not root
// on the system URI.
func TestAccessHint(t *testing.T) {
	if h := accessHint(0, "/system"); h != "" {
		t.Errorf("root: %q", h)
	}
	if h := accessHint(1000, "/session"); h != "" {
		t.Errorf("a session URI: %q", h)
	}
	if h := accessHint(65534, "/system"); !strings.Contains(h, "uid 65534") {
		t.Errorf("uid 65534 on qemu:///system: %q", h)
	}
}

// A domain that vanished or stopped mid-eviction is libvirt's "no domain"
// or "operation invalid" (not running), however wrapped; anything else is
// a refusal.
func TestStoppedErrors(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found"}, true},
		{fmt.Errorf("shutdown: %w", golibvirt.Error{Code: uint32(golibvirt.ErrOperationInvalid), Message: "domain is not running"}), true},
		{golibvirt.Error{Code: uint32(golibvirt.ErrAuthFailed), Message: "authentication failed"}, false},
		{errors.New("Domain not found"), false},
		{nil, false},
	} {
		if got := stopped(tt.err); got != tt.want {
			t.Errorf("stopped(%v) = %v", tt.err, got)
		}
	}
}
