package libvirt

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
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
}

// DefaultTBCacheMiB is the translation cache headroom's micro-VMs use
// (QEMU's tb-size=32): libvirt's default cost a 320 MiB guest 441 MB of
// QEMU RSS here.
const DefaultTBCacheMiB = 32

// GuestDomainXML is the spec's domain XML (type qemu: TCG).
func GuestDomainXML(s GuestSpec) (string, error) {
	cpus := max(s.CPUs, 1)
	cmdline := append(microvm.GuestKernelArgs(s.Command, cpus, true, s.GraceSeconds), guest.PortsKey+"=3")
	file := func(name string) *libvirtxml.DomainChardevSource {
		// Appended to: a domain started again from a managed save keeps what
		// its guest printed before.
		return &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: filepath.Join(s.Dir, name), Append: "on"}}
	}
	channel := func(port, file_ string) libvirtxml.DomainChannel {
		return libvirtxml.DomainChannel{Source: file(file_),
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: port}}}
	}
	kib := uint(s.MemoryBytes >> 10)
	d := libvirtxml.Domain{
		Type: "qemu", Name: s.Name,
		Memory:        &libvirtxml.DomainMemory{Value: kib, Unit: "KiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: kib, Unit: "KiB"},
		VCPU:          &libvirtxml.DomainVCPU{Value: uint(cpus)},
		OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "q35", Type: "hvm"},
			Kernel: s.Kernel, Initrd: s.Initramfs, Cmdline: strings.Join(cmdline, " ")},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy", OnReboot: "destroy", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Serials:     []libvirtxml.DomainSerial{{Source: file("console.log")}},
			Controllers: []libvirtxml.DomainController{{Type: "virtio-serial"}},
			Channels: []libvirtxml.DomainChannel{channel(guest.PortControl, "control"), channel(guest.PortStdout, "stdout"),
				channel(guest.PortStderr, "stderr")},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio"},
		},
	}
	switch {
	case s.NoBalloon:
		d.Devices.MemBalloon.Model = "none"
	case s.BalloonStatsSeconds > 0:
		d.Devices.MemBalloon.Stats = &libvirtxml.DomainMemBalloonStats{Period: uint(s.BalloonStatsSeconds)}
	}
	if s.HardLimitBytes > 0 {
		d.MemoryTune = &libvirtxml.DomainMemoryTune{HardLimit: &libvirtxml.DomainMemoryTuneLimit{Value: s.HardLimitBytes >> 10, Unit: "KiB"}}
	}
	if s.TBCacheMiB > 0 {
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
