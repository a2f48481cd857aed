package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kernelBuild is a cached kernel: vmlinux and its modules.
type kernelBuild struct {
	Package string   `json:"package"`
	Version string   `json:"version"`
	Release string   `json:"release"`
	Modules []string `json:"modules"`
	dir     string
	cached  bool
	notes   []string
}

const kernelManifest = "kernel.json"

// ensureKernel finds the kernel package's current version with apt and
// returns it from the cache, downloading and extracting it the first
// time. Without a usable package source it falls back to the newest
// cached kernel.
func ensureKernel(ctx context.Context, o ImageOptions) (kernelBuild, error) {
	root := filepath.Join(o.CacheDir, "guest", "kernel")
	pkg, version, err := resolveKernelPackage(ctx, o.KernelPackage)
	if err != nil {
		// Without any package source (offline, no apt lists) a cached
		// kernel will do; a package the sources do not have is an error.
		if k, ok := newestCachedKernel(root); ok && !aptKnowsKernels(ctx) {
			k.notes = append(k.notes, fmt.Sprintf("apt could not resolve %s (%v); using the cached %s %s", o.KernelPackage, err, k.Package, k.Version))
			return k, nil
		}
		return kernelBuild{}, err
	}
	dir := filepath.Join(root, pkg+"_"+version)
	if k, err := readKernelManifest(dir); err == nil {
		k.cached = true
		return k, nil
	}
	o.Logf("downloading %s %s", pkg, version)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return kernelBuild{}, err
	}
	tmp, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return kernelBuild{}, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg+"="+version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return kernelBuild{}, &SetupError{Problem: fmt.Sprintf("cannot download %s %s: %s", pkg, version, lastLine(out, err)),
			Fix: "check the network and apt sources (apt-get update)"}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return kernelBuild{}, fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	tree := filepath.Join(tmp, "tree")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tree).CombinedOutput(); err != nil {
		return kernelBuild{}, fmt.Errorf("dpkg-deb -x %s: %s", debs[0], lastLine(out, err))
	}
	k := kernelBuild{Package: pkg, Version: version, dir: dir}
	if err := extractKernel(tree, tmp, &k); err != nil {
		return kernelBuild{}, fmt.Errorf("%s %s: %w", pkg, version, err)
	}
	os.Remove(debs[0])
	os.RemoveAll(tree)
	b, _ := json.MarshalIndent(k, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, kernelManifest), b, 0o644); err != nil {
		return kernelBuild{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if k, rerr := readKernelManifest(dir); rerr == nil { // built concurrently
			return k, nil
		}
		return kernelBuild{}, err
	}
	o.Logf("extracted vmlinux and %d modules into %s", len(k.Modules), dir)
	return k, nil
}

// extractKernel writes vmlinux and the guest's modules from an extracted
// package tree into out.
func extractKernel(tree, out string, k *kernelBuild) error {
	images, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return fmt.Errorf("package holds %d boot/vmlinuz-* images, want 1", len(images))
	}
	k.Release = strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	bz, err := os.ReadFile(images[0])
	if err != nil {
		return err
	}
	vmlinux, err := ExtractVmlinux(bz)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "vmlinux"), vmlinux, 0o644); err != nil {
		return err
	}
	order, files, err := resolveModules(filepath.Join(tree, "lib", "modules", k.Release), GuestModules)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(out, "modules"), 0o755); err != nil {
		return err
	}
	for _, name := range order {
		b, err := os.ReadFile(files[name])
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "modules", name+".ko"), b, 0o644); err != nil {
			return err
		}
	}
	k.Modules = order
	return nil
}

func readKernelManifest(dir string) (kernelBuild, error) {
	b, err := os.ReadFile(filepath.Join(dir, kernelManifest))
	if err != nil {
		return kernelBuild{}, err
	}
	var k kernelBuild
	if err := json.Unmarshal(b, &k); err != nil {
		return kernelBuild{}, err
	}
	k.dir = dir
	return k, nil
}

func newestCachedKernel(root string) (kernelBuild, bool) {
	entries, _ := os.ReadDir(root)
	var best kernelBuild
	var bestTime time.Time
	for _, e := range entries {
		k, err := readKernelManifest(filepath.Join(root, e.Name()))
		info, ierr := e.Info()
		if err == nil && ierr == nil && info.ModTime().After(bestTime) {
			best, bestTime = k, info.ModTime()
		}
	}
	best.cached = true
	return best, !bestTime.IsZero()
}

// resolveKernelPackage turns a kernel metapackage into the concrete
// package it depends on now, with its version (apt's candidate).
func resolveKernelPackage(ctx context.Context, name string) (pkg, version string, err error) {
	if _, err := exec.LookPath("apt-cache"); err != nil {
		return "", "", &SetupError{Problem: "apt-cache not found", Fix: "the guest kernel comes from Debian packages: run on a Debian-based host"}
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "show", "--no-all-versions", name).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("Package:")) {
		return "", "", &SetupError{Problem: fmt.Sprintf("no package source has %s (%s)", name, lastLine(out, err)),
			Fix: "run apt-get update, or add a Debian source with kernel packages"}
	}
	fields := parseControl(out)
	for _, dep := range strings.Split(fields["Depends"], ",") {
		dep = strings.TrimSpace(dep)
		if dname, rest, _ := strings.Cut(dep, " "); strings.HasPrefix(dname, "linux-image-") {
			if v := strings.Trim(strings.TrimSpace(rest), "(=) "); v != "" {
				return dname, v, nil
			}
		}
	}
	// Not a metapackage: the package itself holds the kernel.
	if fields["Version"] == "" {
		return "", "", fmt.Errorf("apt-cache show %s: no Version", name)
	}
	return fields["Package"], fields["Version"], nil
}

// aptKnowsKernels reports whether apt's package lists hold any kernel
// image package at all.
func aptKnowsKernels(ctx context.Context) bool {
	out, err := exec.CommandContext(ctx, "apt-cache", "pkgnames", "linux-image-").Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

// parseControl reads the first stanza of a Debian control file.
func parseControl(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			if len(out) > 0 {
				break
			}
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func lastLine(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	if err != nil {
		return err.Error()
	}
	return "no output"
}
