package libvirt

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/headroom-dev/headroom/internal/units"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// Namespace is the XML namespace of headroom's element in a domain's
// <metadata>; MetadataKey is the prefix virsh metadata writes it with.
const (
	Namespace   = "https://headroom.dev/xmlns/workload/1"
	MetadataKey = "headroom"
)

// How a domain is evicted (the element's eviction attribute).
const (
	// EvictShutdown: an ACPI shutdown, then destroy after the grace period.
	EvictShutdown = "shutdown"
	// EvictManagedSave: the domain's state is saved to disk and its RAM
	// freed; started again, it carries on where it stopped.
	EvictManagedSave = "managedsave"
)

// Workload is headroom's element in a domain's <metadata>, e.g.
//
//	<workload xmlns="https://headroom.dev/xmlns/workload/1"
//	  priority="10" memoryRequest="512Mi" protected="false" eviction="managedsave"/>
//
// set with `virsh metadata DOMAIN --uri https://headroom.dev/xmlns/workload/1
// --key headroom --set '<workload priority="10"/>'`.
type Workload struct {
	XMLName xml.Name `xml:"workload"`
	// Priority: higher is more important; the lowest is evicted first.
	Priority string `xml:"priority,attr,omitempty"`
	// MemoryRequest is a size ("512Mi") or bytes; without it, the
	// domain's current memory.
	MemoryRequest string `xml:"memoryRequest,attr,omitempty"`
	// Protected domains are never evicted and get no swap.
	Protected string `xml:"protected,attr,omitempty"`
	// Eviction is shutdown (default) or managedsave.
	Eviction string `xml:"eviction,attr,omitempty"`
	// Parked is set by the agent, in the persistent configuration only,
	// when it parked the domain by managed save (RFC 3339): with
	// --libvirt-resume the agent starts it again when there is room. A
	// domain an operator saved has none and is never started by the agent.
	Parked string `xml:"parked,attr,omitempty"`
}

// Domain is what the agent takes from a domain's XML.
type Domain struct {
	Name string
	// CurrentMemoryBytes is <currentMemory>: the request of a domain
	// without headroom's element.
	CurrentMemoryBytes uint64
	Meta               workloadmeta.Metadata
	// Eviction is EvictShutdown or EvictManagedSave.
	Eviction string
	// MaxMemoryBytes is <memory>: the most the balloon gives back.
	MaxMemoryBytes uint64
	// HasBalloon: the domain has a virtio balloon (<memballoon
	// model='virtio'>), so it may be ballooned.
	HasBalloon bool
	// BalloonStatsSeconds is the balloon's statistics period (<stats
	// period>; 0: the guest reports none until it is set).
	BalloonStatsSeconds int
	// Element is headroom's element as found (zero: none); ParkedAt is
	// its parked time (zero: not parked by the agent).
	Element  Workload
	ParkedAt time.Time
}

// ParseDomain reads a domain's XML (as DomainGetXMLDesc returns it): its
// name, memory, balloon and headroom's element. A domain without the
// element gets priority 0 and its current memory as its request; a
// malformed element is an error (the agent then gives the defaults and
// says why).
func ParseDomain(domainXML string) (Domain, error) {
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(domainXML); err != nil {
		return Domain{}, fmt.Errorf("parse domain XML: %w", err)
	}
	d := Domain{Name: dx.Name, Eviction: EvictShutdown}
	if m := dx.CurrentMemory; m != nil {
		d.CurrentMemoryBytes = memoryBytes(m.Value, m.Unit)
	} else if m := dx.Memory; m != nil {
		d.CurrentMemoryBytes = memoryBytes(m.Value, m.Unit)
	}
	if m := dx.Memory; m != nil {
		d.MaxMemoryBytes = memoryBytes(m.Value, m.Unit)
	}
	if dx.Devices != nil && dx.Devices.MemBalloon != nil {
		b := dx.Devices.MemBalloon
		d.HasBalloon = b.Model == "virtio" || b.Model == "virtio-transitional" || b.Model == "virtio-non-transitional"
		if b.Stats != nil {
			d.BalloonStatsSeconds = int(b.Stats.Period)
		}
	}
	d = d.withDefaults(dx.Name)
	if dx.Metadata == nil {
		return d, nil
	}
	w, found, err := findWorkload(dx.Metadata.XML)
	if err != nil || !found {
		return d, err
	}
	d.Element = w
	return d, w.apply(&d)
}

// withDefaults is the domain as a workload without headroom's element:
// what the XML says of its memory and balloon (and the element as found),
// with priority 0, its current memory as the request and a shutdown
// eviction. A domain whose element does not parse gets these.
func (d Domain) withDefaults(name string) Domain {
	d.Name, d.Eviction, d.ParkedAt = name, EvictShutdown, time.Time{}
	d.Meta = workloadmeta.Metadata{Name: name, MemoryRequestBytes: d.CurrentMemoryBytes}
	return d
}

// findWorkload finds headroom's element among a <metadata>'s children.
func findWorkload(inner string) (Workload, bool, error) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	for {
		tok, err := dec.Token()
		if err != nil {
			return Workload{}, false, nil // the end, or nothing more we can read
		}
		start, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if start.Name.Space != Namespace || start.Name.Local != "workload" {
			if err := dec.Skip(); err != nil {
				return Workload{}, false, nil
			}
			continue
		}
		var w Workload
		if err := dec.DecodeElement(&w, &start); err != nil {
			return Workload{}, true, fmt.Errorf("headroom metadata: %w", err)
		}
		return w, true, nil
	}
}

// ParseWorkload parses the element alone, as DomainGetMetadata returns it.
func ParseWorkload(elementXML string) (Workload, error) {
	var w Workload
	if err := xml.Unmarshal([]byte(elementXML), &w); err != nil {
		return Workload{}, fmt.Errorf("headroom metadata: %w", err)
	}
	return w, nil
}

func (w Workload) apply(d *Domain) error {
	if w.Priority != "" {
		p, err := strconv.Atoi(w.Priority)
		if err != nil {
			return fmt.Errorf("headroom metadata: priority must be an integer, got %q", w.Priority)
		}
		d.Meta.Priority = p
	}
	if w.MemoryRequest != "" {
		n, err := units.ParseBytes(w.MemoryRequest)
		if err != nil {
			return fmt.Errorf("headroom metadata: memoryRequest: %w", err)
		}
		d.Meta.MemoryRequestBytes = n
	}
	if w.Protected != "" {
		p, err := strconv.ParseBool(w.Protected)
		if err != nil {
			return fmt.Errorf("headroom metadata: protected must be true or false, got %q", w.Protected)
		}
		d.Meta.Protected = p
	}
	if w.Parked != "" {
		at, err := time.Parse(time.RFC3339Nano, w.Parked)
		if err != nil {
			return fmt.Errorf("headroom metadata: parked must be an RFC 3339 time, got %q", w.Parked)
		}
		d.ParkedAt = at.UTC()
	}
	switch w.Eviction {
	case "", EvictShutdown:
	case EvictManagedSave:
		d.Eviction = EvictManagedSave
	default:
		return fmt.Errorf("headroom metadata: eviction must be %s or %s, got %q", EvictShutdown, EvictManagedSave, w.Eviction)
	}
	return nil
}

// memoryBytes converts a libvirt memory value in its unit (KiB when
// none) to bytes.
func memoryBytes(v uint, unit string) uint64 {
	mult := map[string]uint64{"": 1 << 10, "b": 1, "bytes": 1, "KB": 1000, "k": 1 << 10, "KiB": 1 << 10,
		"MB": 1000 * 1000, "M": 1 << 20, "MiB": 1 << 20, "GB": 1000 * 1000 * 1000, "G": 1 << 30, "GiB": 1 << 30,
		"TB": 1000 * 1000 * 1000 * 1000, "T": 1 << 40, "TiB": 1 << 40}[unit]
	if mult == 0 {
		mult = 1 << 10
	}
	return uint64(v) * mult
}
