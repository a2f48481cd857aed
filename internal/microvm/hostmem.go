package microvm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// HostMemory is what a VM's QEMU process holds on the host, from
// /proc/PID/smaps.
type HostMemory struct {
	// RSSBytes is QEMU's whole resident memory (VmRSS).
	RSSBytes uint64 `json:"rss_bytes"`
	// GuestRAMBytes is the resident part of the guest's RAM, and
	// GuestRAMSwapBytes the part the host swapped out.
	GuestRAMBytes     uint64 `json:"guest_ram_bytes"`
	GuestRAMSwapBytes uint64 `json:"guest_ram_swap_bytes"`
	// OverheadBytes is anonymous memory beyond the guest's RAM: QEMU's
	// heap, TCG's translation cache, device buffers, thread stacks (and
	// OverheadSwapBytes its swapped part). It is what each VM costs the
	// host on top of the memory it backs.
	OverheadBytes     uint64 `json:"overhead_bytes"`
	OverheadSwapBytes uint64 `json:"overhead_swap_bytes"`
	// FileBytes is resident file-backed memory: QEMU's binary and
	// libraries, the kernel and initramfs images it keeps mapped. These
	// pages are shared by every VM and reclaimable, so they are not
	// counted as overhead.
	FileBytes uint64 `json:"file_bytes"`
}

// ReadHostMemory reads QEMU process pid's memory; guestRAMBytes is the
// VM's memory size, which identifies the guest RAM mapping.
func ReadHostMemory(pid int, guestRAMBytes uint64) (HostMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return HostMemory{}, err
	}
	defer f.Close()
	return ParseSmaps(f, guestRAMBytes)
}

// guestRAMSlackBytes: QEMU maps guest RAM with a little alignment padding.
const guestRAMSlackBytes = 4 << 20

// ParseSmaps sums /proc/PID/smaps. The guest RAM is the largest anonymous
// mapping between guestRAMBytes and guestRAMBytes+4 MiB in size.
func ParseSmaps(r io.Reader, guestRAMBytes uint64) (HostMemory, error) {
	type mapping struct {
		file                 bool
		size, rss, anon, swp uint64
	}
	var maps []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if isMappingHeader(fields) {
			file := len(fields) >= 6 && !bytes.HasPrefix(fields[5], []byte("["))
			maps = append(maps, mapping{file: file})
			continue
		}
		if len(maps) == 0 || len(fields) != 3 || string(fields[2]) != "kB" {
			continue
		}
		n, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil || n > 1<<40 {
			return HostMemory{}, fmt.Errorf("smaps: bad value in %q", line)
		}
		m := &maps[len(maps)-1]
		switch string(fields[0]) {
		case "Size:":
			m.size = n << 10
		case "Rss:":
			m.rss = n << 10
		case "Anonymous:":
			m.anon = n << 10
		case "Swap:":
			m.swp = n << 10
		}
	}
	if err := sc.Err(); err != nil {
		return HostMemory{}, err
	}
	if len(maps) == 0 {
		return HostMemory{}, fmt.Errorf("smaps: no mappings")
	}
	ram := -1
	for i, m := range maps {
		if !m.file && m.size >= guestRAMBytes && m.size <= guestRAMBytes+guestRAMSlackBytes && (ram < 0 || m.size > maps[ram].size) {
			ram = i
		}
	}
	var h HostMemory
	for i, m := range maps {
		h.RSSBytes += m.rss
		if i == ram {
			h.GuestRAMBytes, h.GuestRAMSwapBytes = m.rss, m.swp
			continue
		}
		anon := min(m.anon, m.rss)
		if !m.file {
			anon = m.rss // anonymous mappings: every resident page
		}
		h.OverheadBytes += anon
		h.OverheadSwapBytes += m.swp
		h.FileBytes += m.rss - anon
	}
	if ram < 0 && guestRAMBytes > 0 {
		return h, fmt.Errorf("smaps: no guest RAM mapping of %d bytes", guestRAMBytes)
	}
	return h, nil
}

// isMappingHeader recognises "start-end perms offset dev inode [path]".
func isMappingHeader(fields [][]byte) bool {
	if len(fields) < 5 || !bytes.Contains(fields[0], []byte("-")) || len(fields[1]) != 4 {
		return false
	}
	return !strings.HasSuffix(string(fields[0]), ":")
}
