package microvm

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"
)

// GuestModules are the kernel modules the guest loads (with their
// dependencies): virtio transports, the balloon, the serial ports the
// host talks over, block devices for a guest swap disk, and the ACPI
// power button with evdev so /init sees a power-down request.
var GuestModules = []string{
	"virtio_pci", "virtio_mmio", "virtio_balloon", "virtio_console", "virtio_blk", "button", "evdev",
}

// ExtractVmlinux returns the uncompressed kernel inside a bzImage. QEMU
// boots it directly through its PVH entry point, skipping the bzImage's
// own decompressor, which under TCG costs several CPU-seconds per boot.
func ExtractVmlinux(bzImage []byte) ([]byte, error) {
	if len(bzImage) < 0x250 || string(bzImage[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS setup header)")
	}
	setupSects := int(bzImage[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	payloadOffset := int(binary.LittleEndian.Uint32(bzImage[0x248:]))
	payloadLength := int(binary.LittleEndian.Uint32(bzImage[0x24c:]))
	start := (setupSects+1)*512 + payloadOffset
	if payloadLength <= 0 || start < 0 || start+payloadLength > len(bzImage) || start+payloadLength < start {
		return nil, fmt.Errorf("bzImage payload (offset %d, length %d) lies outside the file (%d bytes)", start, payloadLength, len(bzImage))
	}
	payload := bzImage[start : start+payloadLength]
	r, err := decompressor(payload)
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(r, 512<<20))
	if err != nil {
		return nil, fmt.Errorf("decompress kernel: %w", err)
	}
	if err := checkPVH(out); err != nil {
		return nil, err
	}
	return out, nil
}

// decompressor picks the decompressor from the payload's magic number.
func decompressor(payload []byte) (io.Reader, error) {
	switch {
	case bytes.HasPrefix(payload, []byte{0x02, 0x21, 0x4c, 0x18}): // lz4 legacy frame (Debian's cloud kernels)
		return lz4.NewReader(bytes.NewReader(payload)), nil
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}): // xz (Debian's generic kernels)
		return xz.NewReader(bytes.NewReader(payload))
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		return gzip.NewReader(bytes.NewReader(payload))
	}
	n := min(len(payload), 4)
	return nil, fmt.Errorf("kernel payload compressed with an unsupported method (magic % x); lz4, xz and gzip are supported", payload[:n])
}

// checkPVH verifies that vmlinux is an x86-64 ELF with the Xen PVH entry
// note QEMU needs to boot it with -kernel.
func checkPVH(vmlinux []byte) error {
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return fmt.Errorf("decompressed kernel is not an ELF file: %w", err)
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("kernel is for %v, not x86-64", f.Machine)
	}
	const xenElfnotePhys32Entry = 18
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nameSize := int(binary.LittleEndian.Uint32(b[0:]))
			descSize := int(binary.LittleEndian.Uint32(b[4:]))
			typ := binary.LittleEndian.Uint32(b[8:])
			name := align4(nameSize)
			desc := align4(descSize)
			if nameSize < 0 || descSize < 0 || 12+name+desc > len(b) || 12+name+desc < 12 {
				break
			}
			if typ == xenElfnotePhys32Entry && strings.TrimRight(string(b[12:12+nameSize]), "\x00") == "Xen" {
				return nil
			}
			b = b[12+name+desc:]
		}
	}
	return errors.New("kernel has no PVH entry point (CONFIG_PVH): QEMU cannot boot its vmlinux directly")
}

func align4(n int) int { return (n + 3) &^ 3 }

// moduleInfo reads the .modinfo section of a kernel module: its name and
// the modules it depends on.
func moduleInfo(ko []byte) (name string, depends []string, err error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return "", nil, fmt.Errorf("not an ELF module: %w", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return "", nil, errors.New("no .modinfo section")
	}
	b, err := sec.Data()
	if err != nil {
		return "", nil, err
	}
	return parseModinfo(b)
}

// parseModinfo parses NUL-separated key=value strings.
func parseModinfo(b []byte) (name string, depends []string, err error) {
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "name":
			name = string(v)
		case "depends":
			for _, d := range strings.Split(string(v), ",") {
				if d = strings.TrimSpace(d); d != "" {
					depends = append(depends, d)
				}
			}
		}
	}
	if name == "" {
		return "", nil, errors.New(".modinfo has no name")
	}
	return name, depends, nil
}

// moduleName is the kernel's name for a module file: "pvpanic-mmio.ko" is
// pvpanic_mmio.
func moduleName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(file), ".ko"), "-", "_")
}

// resolveModules finds wanted and everything they depend on in an
// extracted lib/modules/<release> tree and returns their files in load
// order (dependencies first). Modules built into the kernel (listed in
// modules.builtin) need no loading and are left out.
func resolveModules(modulesDir string, wanted []string) (order []string, files map[string]string, err error) {
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modulesDir, "modules.builtin")); err == nil {
		for _, line := range strings.Fields(string(b)) {
			builtin[moduleName(line)] = true
		}
	}
	files = map[string]string{}
	err = filepath.WalkDir(modulesDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[moduleName(p)] = p
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list kernel modules: %w", err)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no kernel modules under %s", modulesDir)
	}
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(chain, name), " -> "))
		case 2:
			return nil
		}
		if builtin[name] {
			state[name] = 2
			return nil
		}
		path, ok := files[name]
		if !ok {
			return fmt.Errorf("kernel module %s not found (needed by %s)", name, strings.Join(chain, " -> "))
		}
		state[name] = 1
		ko, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, deps, err := moduleInfo(ko)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, name)
		return nil
	}
	for _, w := range wanted {
		if err := visit(w, nil); err != nil {
			return nil, nil, err
		}
	}
	used := map[string]string{}
	for _, n := range order {
		used[n] = files[n]
	}
	return order, used, nil
}
