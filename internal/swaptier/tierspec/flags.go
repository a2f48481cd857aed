// Package swaptier sets up and tears down the swap a host or a test runs
// with — a swap file, a zram device in front of it, zswap — and says what
// each tier holds and what it costs in RAM. Up records what it made, so
// Down removes exactly that and nothing it found.
package tierspec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-dev/headroom/internal/units"
)

// Spec is the swap to set up; nil parts are not touched.
type Spec struct {
	File  *FileSpec  `json:"file,omitempty"`
	Zram  *ZramSpec  `json:"zram,omitempty"`
	Zswap *ZswapSpec `json:"zswap,omitempty"`
}

// FileSpec is a swap file.
type FileSpec struct {
	SizeBytes uint64 `json:"size_bytes"`
	// Path of the file; "" makes a new directory under DefaultFileDir
	// (named DirPrefix…) holding it.
	Path     string `json:"path,omitempty"`
	Priority int    `json:"priority"`
}

// ZramSpec is a zram device used as swap.
type ZramSpec struct {
	SizeBytes uint64 `json:"size_bytes"`
	Algorithm string `json:"algorithm,omitempty"` // "": the kernel's default
	Priority  int    `json:"priority"`
	// Writeback is a block device for idle or incompressible pages, where
	// the kernel has CONFIG_ZRAM_WRITEBACK.
	Writeback string `json:"writeback,omitempty"`
}

// ZswapSpec turns zswap on; zero values keep the kernel's setting.
type ZswapSpec struct {
	MaxPoolPercent uint64 `json:"max_pool_percent,omitempty"`
	Compressor     string `json:"compressor,omitempty"`
}

// Defaults: zram in front of the file (a higher priority is used first).
const (
	DefaultFilePriority = 10
	DefaultZramPriority = 100
	// DefaultFileDir is where a swap file without a path goes.
	DefaultFileDir = "/var/tmp"
	// DirPrefix starts the name of a directory made for a swap file.
	DirPrefix = "headroom-swap-"
)

// options splits "SIZE,key=value,…" (or "key=value,…" when sized is
// false) and checks every key against the accepted ones.
func options(flag, s string, sized bool, accepted ...string) (size uint64, kv map[string]string, err error) {
	forms := keyForms(accepted)
	if sized {
		forms = append([]string{"SIZE"}, forms...)
	}
	form := flag + " " + strings.Join(forms, ",")
	parts := strings.Split(s, ",")
	if sized {
		size, err = units.ParseBytes(parts[0])
		if err != nil || size == 0 {
			return 0, nil, fmt.Errorf("%s %q: want %s", flag, s, form)
		}
		parts = parts[1:]
	}
	kv = map[string]string{}
	for _, p := range parts {
		if p == "" && !sized && len(parts) == 1 {
			break
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || v == "" || !slices.Contains(accepted, k) {
			return 0, nil, fmt.Errorf("%s %q: unknown or empty option %q; want %s", flag, s, p, form)
		}
		kv[k] = v
	}
	return size, kv, nil
}

func keyForms(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "[" + k + "=…]"
	}
	return out
}

// priority parses a swap priority (swapon accepts -1..32767).
func priority(flag, v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 || n > 32767 {
		return 0, fmt.Errorf("%s priority=%q: want an integer in [-1,32767]", flag, v)
	}
	return n, nil
}

// ParseFile parses --file SIZE[,path=P][,priority=N].
func ParseFile(s string) (FileSpec, error) {
	size, kv, err := options("--file", s, true, "path", "priority")
	if err != nil {
		return FileSpec{}, err
	}
	if size < 40<<10 {
		return FileSpec{}, fmt.Errorf("--file %q: a swap file needs at least 40 KiB", s)
	}
	prio, err := priority("--file", kv["priority"], DefaultFilePriority)
	if err != nil {
		return FileSpec{}, err
	}
	if p := kv["path"]; p != "" && !strings.HasPrefix(p, "/") {
		return FileSpec{}, fmt.Errorf("--file path=%q: want an absolute path", p)
	}
	return FileSpec{SizeBytes: size, Path: kv["path"], Priority: prio}, nil
}

// ParseZram parses --zram SIZE[,algorithm=A][,priority=N][,writeback=DEV].
func ParseZram(s string) (ZramSpec, error) {
	size, kv, err := options("--zram", s, true, "algorithm", "priority", "writeback")
	if err != nil {
		return ZramSpec{}, err
	}
	prio, err := priority("--zram", kv["priority"], DefaultZramPriority)
	if err != nil {
		return ZramSpec{}, err
	}
	return ZramSpec{SizeBytes: size, Algorithm: kv["algorithm"], Priority: prio, Writeback: kv["writeback"]}, nil
}

// ParseZswap parses --zswap[=max_pool_percent=N][,compressor=C] ("" for
// the bare flag).
func ParseZswap(s string) (ZswapSpec, error) {
	_, kv, err := options("--zswap", s, false, "max_pool_percent", "compressor")
	if err != nil {
		return ZswapSpec{}, err
	}
	z := ZswapSpec{Compressor: kv["compressor"]}
	if v := kv["max_pool_percent"]; v != "" {
		if z.MaxPoolPercent, err = maxPoolPercent("--zswap", v); err != nil {
			return ZswapSpec{}, err
		}
	}
	return z, nil
}

// maxPoolPercent parses zswap's max_pool_percent (the kernel takes 1..100).
func maxPoolPercent(flag, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("%s max_pool_percent=%q: want an integer in [1,100]", flag, v)
	}
	return n, nil
}
