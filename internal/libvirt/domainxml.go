package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
)

// GuestSpec is a domain that boots headroom's guest image straight into
// its command, as a micro-VM does, with the guest's ports as files.
type GuestSpec struct {
	Name        string
	MemoryBytes uint64
	CPUs        int
	// Kernel and Initramfs must be readable by libvirt's QEMU user (not
	// under /root: copy them to /var/lib/libvirt/boot).
	Kernel, Initramfs string
	// Command is what the guest runs (e.g. load --size 256Mi).
	Command []string
	// GraceSeconds is the guest's time from a power-down's SIGTERM to
	// SIGKILL (0: the guest's default).
	GraceSeconds int
	// Dir receives the console and the command's stdout and stderr
	// (console.log, stdout, stderr); libvirt's QEMU user must be able to
	// write there.
	Dir string
	// Partition is the libvirt resource partition ("": libvirt's default,
	// /machine).
	Partition string
	// TBCacheMiB is TCG's translation cache (0: QEMU's default, which is
	// large: see docs/guide/libvirt.md).
	TBCacheMiB uint
	// Workload is headroom's metadata element (nil: none).
	Workload *Workload
	// HardLimitBytes is <memtune><hard_limit> (0: none): libvirt's memory
	// limit of the domain's cgroup. On cgroup v1 a swap allowance needs
	// one (memsw counts memory and swap together).
	HardLimitBytes uint64
	// NoBalloon gives the domain no balloon (<memballoon model='none'>).
	NoBalloon bool
	// BalloonStatsSeconds is the balloon's statistics period (0: none, so
	// the guest reports nothing until someone sets one).
	BalloonStatsSeconds int
	// ControlSocket, if set, is a unix socket QEMU connects the guest's
	// control port to (its /init events: booted, started, exited) instead
	// of the file "control"; ControllerSocket, if set, is the density
	// controller's socket, reached by the guest's controller port. libvirt's
	// QEMU user must be able to connect to both.
	ControlSocket, ControllerSocket string
	// Template is a domain XML of the user's own to start from ("": none):
	// its name, memory, partition, metadata, headroom's ports and (if it
	// boots a kernel directly) the kernel command line are set; the rest
	// (disks, devices, CPU model) is kept.
	Template string
}

// DefaultTBCacheMiB is the translation cache headroom's micro-VMs use, so
// that the two kinds of guest compare: libvirt's default cost a 320 MiB
// guest 441 MB of QEMU RSS here.
const DefaultTBCacheMiB = microvm.TCGTranslationCacheMiB

// GuestDomainXML is the spec's domain XML (type qemu: TCG).
func GuestDomainXML(s GuestSpec) (string, error) {
	cpus := max(s.CPUs, 1)
	ports := 3
	if s.ControllerSocket != "" {
		ports = 4
	}
	cmdline := append(microvm.GuestKernelArgs(s.Command, cpus, true, s.GraceSeconds), guest.PortsKey+"="+strconv.Itoa(ports))
	file := func(name string) *libvirtxml.DomainChardevSource {
		// Appended to: a domain started again from a managed save keeps what
		// its guest printed before.
		return &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: filepath.Join(s.Dir, name), Append: "on"}}
	}
	unix := func(path string) *libvirtxml.DomainChardevSource {
		return &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "connect", Path: path}}
	}
	channel := func(port string, src *libvirtxml.DomainChardevSource) libvirtxml.DomainChannel {
		return libvirtxml.DomainChannel{Source: src,
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: port}}}
	}
	control := file("control")
	if s.ControlSocket != "" {
		control = unix(s.ControlSocket)
	}
	channels := []libvirtxml.DomainChannel{channel(guest.PortControl, control), channel(guest.PortStdout, file("stdout")),
		channel(guest.PortStderr, file("stderr"))}
	if s.ControllerSocket != "" {
		channels = append(channels, channel(guest.PortController, unix(s.ControllerSocket)))
	}
	kib := uint(s.MemoryBytes >> 10)
	d := libvirtxml.Domain{
		Type: "qemu",
		VCPU: &libvirtxml.DomainVCPU{Value: uint(cpus)},
		OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "q35", Type: "hvm"},
			Kernel: s.Kernel, Initrd: s.Initramfs},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy", OnReboot: "destroy", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Serials:    []libvirtxml.DomainSerial{{Source: file("console.log")}},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio"},
		},
	}
	if s.Template != "" {
		d = libvirtxml.Domain{}
		if err := d.Unmarshal(s.Template); err != nil {
			return "", fmt.Errorf("domain template: %w", err)
		}
		d.UUID, d.ID = "", nil // a new domain's
		if d.Devices == nil {
			d.Devices = &libvirtxml.DomainDeviceList{}
		}
		if d.Features == nil {
			d.Features = &libvirtxml.DomainFeatureList{}
		}
		if d.Devices.MemBalloon == nil {
			d.Devices.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "virtio"}
		}
		// headroom's ports replace any of the same names the template has.
		d.Devices.Channels = slices.DeleteFunc(d.Devices.Channels, func(c libvirtxml.DomainChannel) bool {
			return c.Target != nil && c.Target.VirtIO != nil && strings.HasPrefix(c.Target.VirtIO.Name, "org.headroom.")
		})
	}
	d.Name = s.Name
	d.Memory = &libvirtxml.DomainMemory{Value: kib, Unit: "KiB"}
	d.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: kib, Unit: "KiB"}
	if d.OS != nil && d.OS.Kernel != "" {
		d.OS.Cmdline = strings.Join(cmdline, " ")
	}
	if !slices.ContainsFunc(d.Devices.Controllers, func(c libvirtxml.DomainController) bool { return c.Type == "virtio-serial" }) {
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "virtio-serial"})
	}
	d.Devices.Channels = append(d.Devices.Channels, channels...)
	switch {
	case s.NoBalloon:
		d.Devices.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
	case s.BalloonStatsSeconds > 0:
		d.Devices.MemBalloon.Stats = &libvirtxml.DomainMemBalloonStats{Period: uint(s.BalloonStatsSeconds)}
	}
	if s.HardLimitBytes > 0 {
		d.MemoryTune = &libvirtxml.DomainMemoryTune{HardLimit: &libvirtxml.DomainMemoryTuneLimit{Value: s.HardLimitBytes >> 10, Unit: "KiB"}}
	}
	if s.TBCacheMiB > 0 && d.Type == "qemu" {
		d.Features.TCG = &libvirtxml.DomainFeatureTCG{TBCache: &libvirtxml.DomainFeatureTCGTBCache{Unit: "MiB", Size: s.TBCacheMiB}}
	}
	if s.Partition != "" {
		d.Resource = &libvirtxml.DomainResource{Partition: s.Partition}
	}
	if s.Workload != nil {
		b, err := xml.Marshal(struct {
			XMLName xml.Name `xml:"hr:workload"`
			NS      string   `xml:"xmlns:hr,attr"`
			Workload
		}{NS: Namespace, Workload: *s.Workload})
		if err != nil {
			return "", err
		}
		d.Metadata = &libvirtxml.DomainMetadata{XML: string(b)}
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("domain XML for %s: %w", s.Name, err)
	}
	return out, nil
}

// CheckTemplate checks that a --libvirt-template is a domain XML headroom
// can start domains from.
func CheckTemplate(x string) error {
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return fmt.Errorf("not a libvirt domain XML: %w", err)
	}
	if d.Type == "" {
		return errors.New("the domain has no type (qemu or kvm)")
	}
	_, err := GuestDomainXML(GuestSpec{Name: "check", MemoryBytes: 256 << 20, Template: x})
	return err
}

// MetadataElement is w as `virsh metadata --set` takes it.
func MetadataElement(w Workload) string {
	var b strings.Builder
	b.WriteString("<workload")
	for _, a := range [][2]string{{"priority", w.Priority}, {"memoryRequest", w.MemoryRequest}, {"protected", w.Protected}, {"eviction", w.Eviction},
		{"parked", w.Parked}} {
		if a[1] != "" {
			b.WriteString(" " + a[0] + "=" + strconv.Quote(a[1]))
		}
	}
	b.WriteString("/>")
	return b.String()
}
