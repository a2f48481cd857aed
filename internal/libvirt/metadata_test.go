package libvirt

import (
	"strings"
	"testing"
)

const domainHead = `<domain type='qemu'><name>vm-1</name><memory unit='KiB'>524288</memory><currentMemory unit='KiB'>393216</currentMemory>`

func TestParseDomain(t *testing.T) {
	for _, tt := range []struct {
		name      string
		xml       string
		priority  int
		request   uint64
		protected bool
		eviction  string
		balloon   bool
		err       string
	}{
		{"no metadata: current memory as the request", domainHead + `</domain>`, 0, 384 << 20, false, EvictShutdown, false, ""},
		{"headroom's element", domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" priority="10" memoryRequest="256Mi" eviction="managedsave"/></metadata></domain>`,
			10, 256 << 20, false, EvictManagedSave, false, ""},
		{"another namespace's element is not ours", domainHead + `<metadata><w:workload xmlns:w="https://example.com/other" priority="99"/></metadata></domain>`,
			0, 384 << 20, false, EvictShutdown, false, ""},
		{"ours beside others", domainHead + `<metadata><a:x xmlns:a="urn:a"><y/></a:x><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" protected="true"/></metadata></domain>`,
			0, 384 << 20, true, EvictShutdown, false, ""},
		{"a balloon", domainHead + `<devices><memballoon model='virtio'><stats period='1'/></memballoon></devices></domain>`, 0, 384 << 20, false, EvictShutdown, true, ""},
		{"no balloon", domainHead + `<devices><memballoon model='none'/></devices></domain>`, 0, 384 << 20, false, EvictShutdown, false, ""},
		{"memory in MiB", `<domain type='qemu'><name>m</name><memory unit='MiB'>512</memory></domain>`, 0, 512 << 20, false, EvictShutdown, false, ""},
		{"bad priority", domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" priority="high"/></metadata></domain>`,
			0, 0, false, "", false, "priority must be an integer"},
		{"bad eviction", domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" eviction="pause"/></metadata></domain>`,
			0, 0, false, "", false, "eviction must be shutdown or managedsave"},
		{"bad request", domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" memoryRequest="lots"/></metadata></domain>`,
			0, 0, false, "", false, "memoryRequest"},
		{"not a domain", `<network/>`, 0, 0, false, "", false, "parse domain XML"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDomain(tt.xml)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Meta.Priority != tt.priority || d.Meta.MemoryRequestBytes != tt.request || d.Meta.Protected != tt.protected ||
				d.Eviction != tt.eviction || d.HasBalloon != tt.balloon {
				t.Fatalf("got %+v", d)
			}
		})
	}
}

func TestParseWorkload(t *testing.T) {
	w, err := ParseWorkload(`<workload xmlns="https://headroom.dev/xmlns/workload/1" priority="3" eviction="managedsave"/>`)
	if err != nil || w.Priority != "3" || w.Eviction != EvictManagedSave {
		t.Fatalf("%+v %v", w, err)
	}
}

func FuzzParseDomain(f *testing.F) {
	f.Add(domainHead + `</domain>`)
	f.Add(domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1" priority="10" memoryRequest="256Mi" eviction="managedsave" protected="1"/></metadata></domain>`)
	f.Add(domainHead + `<metadata><hr:workload xmlns:hr="https://headroom.dev/xmlns/workload/1"><hr:workload/></hr:workload></metadata></domain>`)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDomain(s)
		if err != nil {
			return
		}
		if d.Eviction != EvictShutdown && d.Eviction != EvictManagedSave {
			t.Fatalf("eviction %q", d.Eviction)
		}
		if d.Meta.Name != d.Name {
			t.Fatalf("metadata name %q for domain %q", d.Meta.Name, d.Name)
		}
	})
}

// A guest domain's XML carries its metadata, balloon and memory as
// ParseDomain reads them back.
func TestGuestDomainXMLRoundTrip(t *testing.T) {
	x, err := GuestDomainXML(GuestSpec{Name: "hr-1", MemoryBytes: 384 << 20, Kernel: "/k", Initramfs: "/i",
		Command: []string{"load", "--size", "128Mi"}, Dir: "/d", Partition: "/machine/hr", TBCacheMiB: 32,
		Workload: &Workload{Priority: "7", Eviction: EvictManagedSave}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<tb-cache unit=\"MiB\">32</tb-cache>", "org.headroom.control", "<partition>/machine/hr</partition>", "headroom.ports=3"} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, x)
		}
	}
	d, err := ParseDomain(x)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "hr-1" || d.Meta.Priority != 7 || d.Eviction != EvictManagedSave || !d.HasBalloon || d.Meta.MemoryRequestBytes != 384<<20 {
		t.Fatalf("read back %+v from\n%s", d, x)
	}
	if got := MetadataElement(Workload{Priority: "3", Protected: "true"}); got != `<workload priority="3" protected="true"/>` {
		t.Errorf("metadata element %s", got)
	}
}
