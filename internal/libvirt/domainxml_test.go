package libvirt

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/headroom-dev/headroom/internal/microvm/guest"
)

// headroomPorts are the virtio-serial port names of a domain's XML that
// are headroom's, each with its source (a file or a unix socket's path).
func headroomPorts(t testing.TB, x string) map[string]string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatalf("the domain XML does not parse: %v\n%s", err, x)
	}
	ports := map[string]string{}
	for _, c := range d.Devices.Channels {
		if c.Target == nil || c.Target.VirtIO == nil || !strings.HasPrefix(c.Target.VirtIO.Name, "org.headroom.") {
			continue
		}
		name := c.Target.VirtIO.Name
		if _, dup := ports[name]; dup {
			t.Fatalf("port %s twice:\n%s", name, x)
		}
		switch {
		case c.Source != nil && c.Source.UNIX != nil:
			ports[name] = "unix:" + c.Source.UNIX.Path
		case c.Source != nil && c.Source.File != nil:
			ports[name] = "file:" + c.Source.File.Path
		default:
			ports[name] = "?"
		}
	}
	return ports
}

// A density domain's control and controller ports are unix sockets, and
// the guest is told to wait for four ports.
func TestGuestDomainXMLSockets(t *testing.T) {
	x, err := GuestDomainXML(GuestSpec{Name: "d-w1", MemoryBytes: 384 << 20, Kernel: "/k", Initramfs: "/i", Command: []string{"load"},
		Dir: "/d", ControlSocket: "/d/control.sock", ControllerSocket: "/run/ctl.sock"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{guest.PortControl: "unix:/d/control.sock", guest.PortStdout: "file:/d/stdout",
		guest.PortStderr: "file:/d/stderr", guest.PortController: "unix:/run/ctl.sock"}
	got := headroomPorts(t, x)
	for port, src := range want {
		if got[port] != src {
			t.Errorf("port %s: %q, want %q", port, got[port], src)
		}
	}
	if len(got) != len(want) || !strings.Contains(x, guest.PortsKey+"=4") {
		t.Errorf("ports %v; cmdline wants %s=4:\n%s", got, guest.PortsKey, x)
	}
}

const userTemplate = `<domain type='kvm'>
  <name>golden</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <memory unit='GiB'>4</memory><currentMemory unit='GiB'>2</currentMemory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>/images/vmlinuz</kernel><initrd>/images/initrd</initrd><cmdline>root=/dev/vda1</cmdline></os>
  <cpu mode='host-passthrough'/>
  <devices>
    <disk type='file' device='disk'><source file='/images/root.qcow2'/><target dev='vda' bus='virtio'/></disk>
    <channel type='unix'><source mode='bind' path='/run/old.sock'/><target type='virtio' name='org.headroom.control'/></channel>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
  </devices>
</domain>`

// A template keeps what is the user's (type, machine, CPU, disks, other
// channels) and gets the run's name, memory, partition, metadata, ports
// and command line; its own headroom ports are replaced.
func TestGuestDomainXMLFromTemplate(t *testing.T) {
	x, err := GuestDomainXML(GuestSpec{Name: "d-w2", MemoryBytes: 512 << 20, Command: []string{"load"}, Dir: "/d",
		Partition: "/machine/d.partition", TBCacheMiB: 32, Workload: &Workload{Priority: "0", MemoryRequest: "300000000"},
		ControlSocket: "/d/control.sock", ControllerSocket: "/run/ctl.sock", Template: userTemplate})
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if d.Name != "d-w2" || d.UUID != "" || d.Type != "kvm" || d.OS.Type.Machine != "pc" || d.CPU == nil || d.CPU.Mode != "host-passthrough" ||
		len(d.Devices.Disks) != 1 || d.VCPU.Value != 2 || d.OS.Kernel != "/images/vmlinuz" {
		t.Fatalf("the user's parts of the template are lost:\n%s", x)
	}
	if d.Features != nil && d.Features.TCG != nil {
		t.Errorf("a kvm domain got a TCG translation cache:\n%s", x)
	}
	if !strings.Contains(d.OS.Cmdline, guest.PortsKey+"=4") || strings.Contains(d.OS.Cmdline, "root=") {
		t.Errorf("command line %q", d.OS.Cmdline)
	}
	if got := headroomPorts(t, x); got[guest.PortControl] != "unix:/d/control.sock" || len(got) != 4 {
		t.Errorf("ports %v", got)
	}
	if !strings.Contains(x, "org.qemu.guest_agent.0") {
		t.Errorf("the template's own channel is gone:\n%s", x)
	}
	p, err := ParseDomain(x)
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxMemoryBytes != 512<<20 || p.CurrentMemoryBytes != 512<<20 || p.Meta.MemoryRequestBytes != 300000000 || !p.HasBalloon {
		t.Errorf("read back %+v", p)
	}
	if d.Resource == nil || d.Resource.Partition != "/machine/d.partition" {
		t.Errorf("partition %+v", d.Resource)
	}
}

// A template that boots from its disk keeps its boot: its guest runs
// headroom load itself.
func TestGuestDomainXMLTemplateWithoutKernel(t *testing.T) {
	tpl := `<domain type='qemu'><name>g</name><memory>1</memory><os><type>hvm</type><boot dev='hd'/></os></domain>`
	x, err := GuestDomainXML(GuestSpec{Name: "n", MemoryBytes: 256 << 20, Command: []string{"load"}, Template: tpl, TBCacheMiB: 32})
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if d.OS.Cmdline != "" || d.OS.Kernel != "" || len(d.OS.BootDevices) != 1 || d.Features.TCG == nil {
		t.Errorf("domain %s", x)
	}
}

func TestCheckTemplate(t *testing.T) {
	for _, tt := range []struct{ name, xml, err string }{
		{"a domain", userTemplate, ""},
		{"not XML", "domain", "not a libvirt domain XML"},
		{"another object", "<network><name>n</name></network>", "not a libvirt domain XML"},
		{"no type", "<domain><name>g</name></domain>", "no type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTemplate(tt.xml)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("CheckTemplate = %v, want %q", err, tt.err)
			}
		})
	}
}

// Whatever template is accepted, the domain made from it has the run's
// name and memory and each of headroom's ports once.
func FuzzGuestDomainXMLTemplate(f *testing.F) {
	f.Add(userTemplate)
	f.Add(`<domain type='qemu'><name>g</name></domain>`)
	f.Add(`<domain type='qemu'><os><kernel>/k</kernel></os><devices><channel><target type='virtio' name='org.headroom.stdout'/></channel></devices></domain>`)
	f.Fuzz(func(t *testing.T, tpl string) {
		if CheckTemplate(tpl) != nil {
			return
		}
		x, err := GuestDomainXML(GuestSpec{Name: "n", MemoryBytes: 256 << 20, Command: []string{"load"}, Dir: "/d", Template: tpl,
			ControlSocket: "/d/c.sock", ControllerSocket: "/r.sock", Workload: &Workload{Priority: "1"}})
		if err != nil {
			t.Fatalf("a checked template fails: %v", err)
		}
		if ports := headroomPorts(t, x); len(ports) != 4 {
			t.Fatalf("ports %v", ports)
		}
		d, err := ParseDomain(x)
		if err != nil {
			t.Fatalf("the domain does not read back: %v\n%s", err, x)
		}
		if d.Name != "n" || d.MaxMemoryBytes != 256<<20 || d.Meta.Priority != 1 {
			t.Fatalf("read back %+v", d)
		}
	})
}
