package microvm

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

const smapsFixture = `55fd19804000-55fd19953000 r--p 00c94000 fe:00 10166279                   /usr/bin/qemu-system-x86_64
Size:               1340 kB
Rss:                1004 kB
Anonymous:          1004 kB
Swap:                  0 kB
VmFlags: rd mr mw me ac sd
55fd36c61000-55fd37ca4000 rw-p 00000000 00:00 0                          [heap]
Size:              16652 kB
Rss:                5120 kB
Anonymous:          5120 kB
Swap:                  8 kB
7faeb3e00000-7faecbe00000 rw-p 00000000 00:00 0 
Size:             393216 kB
Rss:              374784 kB
Anonymous:        374784 kB
Swap:              18432 kB
THPeligible:    0
7faed2000000-7faed3fff000 rwxp 00000000 00:00 0 
Size:              32764 kB
Rss:               32764 kB
Anonymous:         32764 kB
Swap:                  0 kB
7fc496800000-7fc497e73000 r--p 00000000 fe:00 10068082                   /root/.cache/headroom/guest/initramfs/d9.cpio
Size:              22988 kB
Rss:               22988 kB
Anonymous:             0 kB
Swap:                  0 kB
`

func TestParseSmaps(t *testing.T) {
	h, err := ParseSmaps(strings.NewReader(smapsFixture), 384<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := HostMemory{
		RSSBytes:          (1004 + 5120 + 374784 + 32764 + 22988) << 10,
		GuestRAMBytes:     374784 << 10,
		GuestRAMSwapBytes: 18432 << 10,
		OverheadBytes:     (1004 + 5120 + 32764) << 10,
		OverheadSwapBytes: 8 << 10,
		FileBytes:         22988 << 10,
	}
	if h != want {
		t.Errorf("got  %+v\nwant %+v", h, want)
	}
	// The guest RAM is recognised by its size; a VM of another size has none.
	if _, err := ParseSmaps(strings.NewReader(smapsFixture), 1<<30); err == nil {
		t.Error("no error for a missing guest RAM mapping")
	}
	if _, err := ParseSmaps(strings.NewReader("Size: 4 kB\n"), 0); err == nil {
		t.Error("no error for smaps without mappings")
	}
	if _, err := ParseSmaps(strings.NewReader(smapsFixture+"Rss: x kB\n"), 384<<20); err == nil {
		t.Error("no error for a malformed value")
	}
}

func FuzzParseSmaps(f *testing.F) {
	f.Add([]byte(smapsFixture), uint64(384<<20))
	f.Add([]byte("0-1 rw-p 0 0:0 0\nRss: 4 kB\nAnonymous: 8 kB\n"), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, guest uint64) {
		h, err := ParseSmaps(bytes.NewReader(b), guest)
		if err != nil {
			return
		}
		if h.GuestRAMBytes+h.OverheadBytes+h.FileBytes != h.RSSBytes {
			t.Fatalf("parts %d+%d+%d do not add up to RSS %d", h.GuestRAMBytes, h.OverheadBytes, h.FileBytes, h.RSSBytes)
		}
	})
}

func TestParseModinfo(t *testing.T) {
	info := []byte("license=GPL\x00depends=virtio,virtio_ring\x00retpoline=Y\x00name=virtio_balloon\x00vermagic=6.1.0\x00")
	name, deps, err := parseModinfo(info)
	if err != nil || name != "virtio_balloon" || strings.Join(deps, ",") != "virtio,virtio_ring" {
		t.Errorf("got %q %q %v", name, deps, err)
	}
	name, deps, err = parseModinfo([]byte("depends=\x00name=virtio\x00"))
	if err != nil || name != "virtio" || len(deps) != 0 {
		t.Errorf("no dependencies: got %q %q %v", name, deps, err)
	}
	if _, _, err := parseModinfo([]byte("depends=x\x00")); err == nil {
		t.Error("modinfo without a name accepted")
	}
	if moduleName("drivers/misc/pvpanic/pvpanic-mmio.ko") != "pvpanic_mmio" {
		t.Error("module file names map dashes to underscores")
	}
}

func FuzzParseModinfo(f *testing.F) {
	f.Add([]byte("name=a\x00depends=b,c\x00"))
	f.Add([]byte("depends=,,\x00name=\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, deps, err := parseModinfo(b)
		if err != nil {
			return
		}
		if name == "" {
			t.Fatal("empty name accepted")
		}
		for _, d := range deps {
			if d == "" || strings.Contains(d, ",") {
				t.Fatalf("dependency %q", d)
			}
		}
	})
}

// readCPIO reads a newc archive back: name → content (a symlink's
// target), and each entry's mode and device numbers.
func readCPIO(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	off := 0
	field := func(i int) int {
		n, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d at %d: %v", i, off, err)
		}
		return int(n)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		mode, size, major, minor, nameSize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		data := align(off + 110 + nameSize)
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = fmt.Sprintf("%o %d:%d %s", mode, major, minor, b[data:data+size])
		off = align(data + size)
	}
}

func TestWriteCPIO(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3<<20+1)
	entries := []cpioEntry{
		{Name: "init", Type: cpioFile, Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Name: "bin", Type: cpioDir, Mode: 0o755},
		{Name: "bin/sh", Type: cpioSymlink, Mode: 0o777, Data: []byte("busybox")},
		{Name: "dev/console", Type: cpioCharDev, Mode: 0o600, Major: 5, Minor: 1},
		{Name: "big", Type: cpioFile, Mode: 0o644, Size: int64(len(big)),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(big)), nil }},
	}
	var a, b bytes.Buffer
	if err := writeCPIO(&a, entries); err != nil {
		t.Fatal(err)
	}
	// Reproducible: the order entries are given in does not matter.
	reversed := []cpioEntry{entries[4], entries[3], entries[2], entries[1], entries[0]}
	if err := writeCPIO(&b, reversed); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same entries in another order give another archive")
	}
	if a.Len()%4 != 0 {
		t.Errorf("archive of %d bytes is not 4-byte aligned (a second archive could not follow)", a.Len())
	}
	got := readCPIO(t, a.Bytes())
	want := map[string]string{
		"init":        "100755 0:0 #!/bin/sh\n",
		"bin":         "40755 0:0 ",
		"bin/sh":      "120777 0:0 busybox",
		"dev/console": "20600 5:1 ",
		"big":         "100644 0:0 " + string(big),
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %.40q, want %.40q", name, got[name], w)
		}
	}
	// A streamed file that is not the size announced is an error, not a
	// corrupt archive.
	short := []cpioEntry{{Name: "f", Type: cpioFile, Size: 10, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("abc")), nil
	}}}
	if err := writeCPIO(io.Discard, short); err == nil {
		t.Error("short file accepted")
	}
}

func TestChooseAccel(t *testing.T) {
	cases := []struct {
		facts hostFacts
		want  Accel
		why   string
	}{
		{hostFacts{kvmDevice: true, cpuHasVirtE: true}, AccelKVM, "works"},
		{hostFacts{kvmDevice: true, cpuHasVirtE: true, pvmModule: true}, AccelTCG, "PVM"},
		{hostFacts{kvmDevice: true, pvmModule: true}, AccelTCG, "PVM"},
		{hostFacts{kvmDevice: false, cpuHasVirtE: true}, AccelTCG, "missing"},
		{hostFacts{kvmDevice: true, cpuHasVirtE: false}, AccelTCG, "no vmx or svm"},
	}
	for _, c := range cases {
		got, why := chooseAccel(c.facts)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%+v: got %s (%s), want %s (%s)", c.facts, got, why, c.want, c.why)
		}
	}
	if _, err := ParseAccel("hvf"); err == nil {
		t.Error("unknown accelerator accepted")
	}
}

func TestParseControl(t *testing.T) {
	out := []byte("Package: linux-image-cloud-amd64\nSource: linux-signed-amd64 (6.1.192+2)\nVersion: 6.1.192-2\n" +
		"Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)\nDescription: x\n continued\n\nPackage: other\nVersion: 1\n")
	f := parseControl(out)
	if f["Package"] != "linux-image-cloud-amd64" || f["Version"] != "6.1.192-2" || !strings.HasPrefix(f["Depends"], "linux-image-6.1.0-56") {
		t.Errorf("parsed %v", f)
	}
}

func TestExtractVmlinuxRefusesGarbage(t *testing.T) {
	if _, err := ExtractVmlinux(make([]byte, 1024)); err == nil || !strings.Contains(err.Error(), "HdrS") {
		t.Errorf("err = %v", err)
	}
	hdr := make([]byte, 0x300)
	copy(hdr[0x202:], "HdrS")
	hdr[0x1f1] = 1
	hdr[0x24c] = 0xff // payload longer than the file
	if _, err := ExtractVmlinux(hdr); err == nil || !strings.Contains(err.Error(), "outside the file") {
		t.Errorf("err = %v", err)
	}
}

// Disks are named in the order of their devices: the guest must be told
// the name its swap and cache disks get.
func TestDiskNamesFollowDeviceOrder(t *testing.T) {
	for _, tc := range []struct {
		swap, cache string
		want        []string
	}{
		{"", "", nil},
		{"/var/tmp/swap", "", []string{"headroom.swap=vda"}},
		{"", "/var/tmp/cache", []string{"headroom.cache=vda"}},
		{"/var/tmp/swap", "/var/tmp/cache", []string{"headroom.swap=vda", "headroom.cache=vdb"}},
	} {
		vm := &VM{cfg: Config{Args: []string{"load"}, CacheDisk: tc.cache, GuestSwap: &SwapDisk{}}, swapFile: tc.swap, accel: AccelTCG}
		args := vm.qemuArgs("initrd")
		cmdline := args[len(args)-1]
		var got []string
		for _, f := range strings.Fields(cmdline) {
			if strings.HasPrefix(f, "headroom.swap=") || strings.HasPrefix(f, "headroom.cache=") {
				got = append(got, f)
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("swap %q cache %q: kernel args %v, want %v", tc.swap, tc.cache, got, tc.want)
		}
		drives := strings.Count(strings.Join(args, " "), "virtio-blk-pci")
		if drives != len(tc.want) {
			t.Errorf("swap %q cache %q: %d virtio-blk devices, want %d", tc.swap, tc.cache, drives, len(tc.want))
		}
	}
}
