// Package microvm runs headroom's micro-VMs: it builds the guest image (a
// Debian kernel booted directly as an uncompressed vmlinux, and an
// initramfs holding busybox, the kernel's virtio modules and headroom
// itself as /init), and launches QEMU with a balloon, QMP, the
// virtio-serial ports the guest's /init talks over, and the QEMU process
// inside the VM's memory cgroup before the guest runs.
package microvm

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/cache"
	"github.com/headroom-dev/headroom/internal/microvm/guest"
)

// DefaultKernelPackage is Debian's cloud kernel: the same virtio, balloon,
// cgroup2 and PSI support as the generic kernel in a third of the size,
// booting as fast.
const DefaultKernelPackage = "linux-image-cloud-amd64"

// initramfsLayout versions the initramfs layout; it is part of the content
// hash, so a layout change rebuilds cached images.
const initramfsLayout = "headroom-initramfs/1"

// keepInitramfs is how many initramfs files (one per headroom build) the
// cache keeps.
const keepInitramfs = 4

// SetupError is a missing prerequisite: a package to install, a package
// source to add, a binary to rebuild. Fix says what to do.
type SetupError struct {
	Problem string
	Fix     string
}

func (e *SetupError) Error() string { return e.Problem + ": " + e.Fix }

// ImageOptions say what to build the guest image from; zero values take
// the defaults.
type ImageOptions struct {
	// CacheDir is the cache root (default cache.Dir()).
	CacheDir string
	// KernelPackage is a Debian kernel package or metapackage.
	KernelPackage string
	// Headroom is the static headroom binary that becomes /init (default:
	// this executable).
	Headroom string
	// Busybox is a static busybox (default: busybox on PATH).
	Busybox string
	// Logf reports progress (downloads, builds); nil is silent.
	Logf func(format string, args ...any)
}

// Image is a bootable guest: what it was built from and where it is.
type Image struct {
	Kernel            string   `json:"kernel"`
	Initramfs         string   `json:"initramfs"`
	KernelPackage     string   `json:"kernel_package"`
	KernelVersion     string   `json:"kernel_version"`
	KernelRelease     string   `json:"kernel_release"`
	KernelCached      bool     `json:"kernel_cached"`
	Modules           []string `json:"modules"`
	Busybox           string   `json:"busybox"`
	BusyboxVersion    string   `json:"busybox_version"`
	Headroom          string   `json:"headroom"`
	HeadroomSHA256    string   `json:"headroom_sha256"`
	InitramfsSHA256   string   `json:"initramfs_sha256"`
	InitramfsBytes    int64    `json:"initramfs_bytes"`
	InitramfsCached   bool     `json:"initramfs_cached"`
	KernelSourceNotes []string `json:"kernel_source_notes,omitempty"`
}

// BuildImage returns the guest image for these options, building what the
// cache does not hold yet.
func BuildImage(ctx context.Context, o ImageOptions) (Image, error) {
	if o.CacheDir == "" {
		dir, err := cache.Dir()
		if err != nil {
			return Image{}, err
		}
		o.CacheDir = dir
	}
	if o.KernelPackage == "" {
		o.KernelPackage = DefaultKernelPackage
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Headroom == "" {
		exe, err := os.Executable()
		if err != nil {
			return Image{}, fmt.Errorf("find the headroom binary: %w", err)
		}
		o.Headroom = exe
	}
	if err := requireStatic(o.Headroom); err != nil {
		return Image{}, &SetupError{Problem: fmt.Sprintf("headroom at %s is dynamically linked (built with cgo) and cannot run as the guest's /init", o.Headroom),
			Fix: "rebuild it with CGO_ENABLED=0 (make build does)"}
	}
	busybox, busyboxVersion, err := findBusybox(o.Busybox)
	if err != nil {
		return Image{}, err
	}
	k, err := ensureKernel(ctx, o)
	if err != nil {
		return Image{}, err
	}
	img := Image{Kernel: filepath.Join(k.dir, "vmlinux"), KernelPackage: k.Package, KernelVersion: k.Version, KernelRelease: k.Release,
		KernelCached: k.cached, Modules: k.Modules, Busybox: busybox, BusyboxVersion: busyboxVersion, Headroom: o.Headroom,
		KernelSourceNotes: k.notes}
	if err := buildInitramfs(o, k, &img); err != nil {
		return Image{}, err
	}
	return img, nil
}

// requireStatic fails for a dynamically linked ELF executable.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked")
		}
	}
	return nil
}

func findBusybox(path string) (string, string, error) {
	missing := &SetupError{Problem: "no static busybox found", Fix: "apt-get install busybox-static"}
	if path == "" {
		p, err := exec.LookPath("busybox")
		if err != nil {
			return "", "", missing
		}
		path = p
	}
	if err := requireStatic(path); err != nil {
		missing.Problem = fmt.Sprintf("busybox at %s is not a static binary (%v)", path, err)
		return "", "", missing
	}
	out, _ := exec.Command(path).CombinedOutput() // prints its version and usage, exit 1
	version, _, _ := strings.Cut(string(out), "\n")
	version, _, _ = strings.Cut(version, " multi-call")
	return path, strings.TrimSpace(version), nil
}

// buildInitramfs writes the initramfs for this kernel, busybox and
// headroom into the cache unless an identical one is there.
func buildInitramfs(o ImageOptions, k kernelBuild, img *Image) error {
	entries, err := initramfsEntries(k, img)
	if err != nil {
		return err
	}
	h := sha256.New()
	io.WriteString(h, initramfsLayout+"\n")
	for _, e := range sortedEntries(entries) {
		sum, err := entryHash(e)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %o %o %d %d %x\n", e.Name, e.Type, e.Mode, e.Major, e.Minor, sum)
	}
	img.InitramfsSHA256 = hex.EncodeToString(h.Sum(nil))
	dir := filepath.Join(o.CacheDir, "guest", "initramfs")
	img.Initramfs = filepath.Join(dir, img.InitramfsSHA256[:16]+".cpio")
	if fi, err := os.Stat(img.Initramfs); err == nil {
		now := time.Now()
		os.Chtimes(img.Initramfs, now, now) // most recently used: kept by pruning
		img.InitramfsCached, img.InitramfsBytes = true, fi.Size()
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := writeCPIO(f, entries); err != nil {
		f.Close()
		return fmt.Errorf("write initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), img.Initramfs); err != nil {
		return err
	}
	if fi, err := os.Stat(img.Initramfs); err == nil {
		img.InitramfsBytes = fi.Size()
	}
	o.Logf("built %s", img.Initramfs)
	pruneInitramfs(dir)
	return nil
}

// initramfsEntries lists the image's files.
func initramfsEntries(k kernelBuild, img *Image) ([]cpioEntry, error) {
	var entries []cpioEntry
	for _, d := range []string{"bin", "dev", "etc", "lib", "lib/modules", "proc", "run", "sys", "tmp"} {
		entries = append(entries, cpioEntry{Name: d, Type: cpioDir, Mode: 0o755})
	}
	// The kernel opens /dev/console for /init before devtmpfs is mounted.
	entries = append(entries, cpioEntry{Name: "dev/console", Type: cpioCharDev, Mode: 0o600, Major: 5, Minor: 1})
	headroom, err := fileEntry(strings.TrimPrefix(guest.InitPath, "/"), img.Headroom, 0o755)
	if err != nil {
		return nil, err
	}
	sum, err := entryHash(headroom)
	if err != nil {
		return nil, err
	}
	img.HeadroomSHA256 = hex.EncodeToString(sum)
	busybox, err := fileEntry("bin/busybox", img.Busybox, 0o755)
	if err != nil {
		return nil, err
	}
	entries = append(entries, headroom, busybox)
	applets, _ := exec.Command(img.Busybox, "--list").Output()
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			entries = append(entries, cpioEntry{Name: "bin/" + a, Type: cpioSymlink, Mode: 0o777, Data: []byte("busybox")})
		}
	}
	for _, m := range k.Modules {
		e, err := fileEntry("lib/modules/"+m+".ko", filepath.Join(k.dir, "modules", m+".ko"), 0o644)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	entries = append(entries, cpioEntry{Name: strings.TrimPrefix(guest.ModulesOrder, "/"), Type: cpioFile, Mode: 0o644,
		Data: []byte(strings.Join(k.Modules, "\n") + "\n")})
	about, _ := json.MarshalIndent(map[string]string{"kernel_package": k.Package, "kernel_version": k.Version,
		"kernel_release": k.Release, "busybox": img.BusyboxVersion, "headroom_sha256": img.HeadroomSHA256}, "", "  ")
	entries = append(entries, cpioEntry{Name: "etc/headroom-image.json", Type: cpioFile, Mode: 0o644, Data: append(about, '\n')})
	return entries, nil
}

func fileEntry(name, path string, mode uint32) (cpioEntry, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return cpioEntry{}, err
	}
	return cpioEntry{Name: name, Type: cpioFile, Mode: mode, Size: fi.Size(),
		Open: func() (io.ReadCloser, error) { return os.Open(path) }}, nil
}

func entryHash(e cpioEntry) ([]byte, error) {
	h := sha256.New()
	if e.Open == nil {
		h.Write(e.Data)
		return h.Sum(nil), nil
	}
	r, err := e.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if _, err := io.Copy(h, r); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func sortedEntries(entries []cpioEntry) []cpioEntry {
	s := append([]cpioEntry(nil), entries...)
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
	return s
}

// pruneInitramfs keeps the most recently used initramfs files.
func pruneInitramfs(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.cpio"))
	type used struct {
		path string
		at   time.Time
	}
	var all []used
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			all = append(all, used{f, fi.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.After(all[j].at) })
	for i := keepInitramfs; i < len(all); i++ {
		os.Remove(all[i].path)
	}
}

// WithFiles returns an initrd that is the image's initramfs followed by a
// second archive adding files (guest path → host path), written into dir;
// the kernel unpacks both. Tests use it to run a test binary in a guest.
func (img Image) WithFiles(dir string, files map[string]string) (string, error) {
	var entries []cpioEntry
	seenDirs := map[string]bool{}
	for guestPath, hostPath := range files {
		name := strings.TrimPrefix(filepath.Clean("/"+guestPath), "/")
		for d := filepath.Dir(name); d != "." && !seenDirs[d]; d = filepath.Dir(d) {
			seenDirs[d] = true
			entries = append(entries, cpioEntry{Name: d, Type: cpioDir, Mode: 0o755})
		}
		fi, err := os.Stat(hostPath)
		if err != nil {
			return "", err
		}
		e, err := fileEntry(name, hostPath, uint32(fi.Mode().Perm()))
		if err != nil {
			return "", err
		}
		entries = append(entries, e)
	}
	out, err := os.Create(filepath.Join(dir, "initrd.cpio"))
	if err != nil {
		return "", err
	}
	defer out.Close()
	base, err := os.Open(img.Initramfs)
	if err != nil {
		return "", err
	}
	defer base.Close()
	if _, err := io.Copy(out, base); err != nil {
		return "", err
	}
	if err := writeCPIO(out, entries); err != nil {
		return "", err
	}
	return out.Name(), out.Close()
}
