package swaptier

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

// Setup is what Up made, in the order it made it; Down undoes it in
// reverse. With a state file it survives the process that made it.
type Setup struct {
	Made []Made `json:"made"`
	// statePath, when set, is rewritten after every change.
	statePath string
}

// Made is one thing Up created or changed.
type Made struct {
	Kind string `json:"kind"` // host.TierDisk, host.TierZram, host.TierZswap
	// Device is the swap area (a file or /dev/zramN).
	Device string `json:"device,omitempty"`
	// Dir is a directory made for the swap file.
	Dir string `json:"dir,omitempty"`
	// HotAdded: the zram device was added and is removed again.
	HotAdded bool `json:"hot_added,omitempty"`
	// ZswapBefore is zswap's configuration before Up changed it.
	ZswapBefore *host.Zswap `json:"zswap_before,omitempty"`
}

// DefaultStatePath is where `headroom swap up` records what it made.
const DefaultStatePath = "/run/headroom/swap.json"

// LoadState reads a state file; (nil, nil) if there is none.
func LoadState(path string) (*Setup, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &Setup{statePath: path}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// save records the setup in its state file (removed once nothing is left).
func (s *Setup) save() error {
	if s.statePath == "" {
		return nil
	}
	if len(s.Made) == 0 {
		if err := os.Remove(s.statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.statePath), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := s.statePath + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.statePath)
}

func (s *Setup) add(m Made) error {
	s.Made = append(s.Made, m)
	return s.save()
}

// Up checks the spec against the machine and sets it up: the swap file,
// then zram, then zswap. statePath "" keeps the record in memory only (a
// density run undoes its own swap). If a step fails, what was made is
// undone and the error returned.
func Up(spec tierspec.Spec, statePath string) (*Setup, error) {
	// What this machine cannot take is said to anyone; only then root,
	// which the record (root's) and every change need.
	m, err := ThisMachine()
	if err != nil {
		return nil, err
	}
	if err := Check(spec, m); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, inputErrorf("swap up needs root: it turns swap devices and zswap on")
	}
	if statePath != "" {
		if prev, err := LoadState(statePath); err != nil {
			return nil, err
		} else if prev != nil && len(prev.Made) > 0 {
			return nil, inputErrorf("headroom already set up swap (%s): `headroom swap down` first", statePath)
		}
	}
	s := &Setup{statePath: statePath}
	fail := func(err error) (*Setup, error) {
		if uerr := s.Down(); uerr != nil {
			err = fmt.Errorf("%w (and undoing: %v)", err, uerr)
		}
		return nil, err
	}
	if spec.File != nil {
		if err := s.upFile(*spec.File); err != nil {
			return fail(err)
		}
	}
	if spec.Zram != nil {
		if err := s.upZram(*spec.Zram); err != nil {
			return fail(err)
		}
	}
	if spec.Zswap != nil {
		if err := s.upZswap(*spec.Zswap); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if name == "swapoff" && strings.Contains(msg, "Cannot allocate memory") {
			msg += " (its pages do not fit back in RAM or in their cgroups' limits: stop what uses them, or free memory, and run down again)"
		}
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, msg)
	}
	return nil
}

func (s *Setup) upFile(f tierspec.FileSpec) error {
	path, dir := f.Path, ""
	if path == "" {
		d, err := os.MkdirTemp(tierspec.DefaultFileDir, tierspec.DirPrefix)
		if err != nil {
			return fmt.Errorf("create the swap file's directory: %w", err)
		}
		dir, path = d, filepath.Join(d, "swapfile")
	}
	// O_EXCL: never take over a file that appeared since the check.
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if dir != "" {
			os.Remove(dir)
		}
		return fmt.Errorf("create swap file: %w", err)
	}
	made := Made{Kind: host.TierDisk, Device: path, Dir: dir}
	if err := s.add(made); err != nil {
		fd.Close()
		return err
	}
	// fallocate gives swapon a file without holes.
	err = unix.Fallocate(int(fd.Fd()), 0, 0, int64(f.SizeBytes))
	fd.Close()
	if err != nil {
		return fmt.Errorf("allocate %d bytes for the swap file %s: %w", f.SizeBytes, path, err)
	}
	if err := run("mkswap", path); err != nil {
		return err
	}
	return run("swapon", "-p", strconv.Itoa(f.Priority), path)
}

func (s *Setup) upZram(z tierspec.ZramSpec) error {
	dev, hot, err := freeZram()
	if err != nil {
		return err
	}
	if err := s.add(Made{Kind: host.TierZram, Device: "/dev/" + dev, HotAdded: hot}); err != nil {
		return err
	}
	sys := "/sys/block/" + dev
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(sys, file), []byte(value), 0o644); err != nil {
			return fmt.Errorf("zram %s: set %s to %s: %w", dev, file, value, err)
		}
		return nil
	}
	// The algorithm and backing device are set before the size.
	if z.Algorithm != "" {
		if err := write("comp_algorithm", z.Algorithm); err != nil {
			return InputError{err.Error()}
		}
	}
	if z.Writeback != "" {
		if err := write("backing_dev", z.Writeback); err != nil {
			return InputError{err.Error()}
		}
	}
	if err := write("disksize", strconv.FormatUint(z.SizeBytes, 10)); err != nil {
		return err
	}
	if err := run("mkswap", "/dev/"+dev); err != nil {
		return err
	}
	return run("swapon", "-p", strconv.Itoa(z.Priority), "/dev/"+dev)
}

// freeZram finds an unused zram device (disksize 0) or hot-adds one.
func freeZram() (dev string, hotAdded bool, err error) {
	for i := 0; ; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/sys/block/zram%d/disksize", i))
		if err != nil {
			break
		}
		if strings.TrimSpace(string(b)) == "0" {
			return fmt.Sprintf("zram%d", i), false, nil
		}
	}
	b, err := os.ReadFile("/sys/class/zram-control/hot_add")
	if err != nil {
		return "", false, fmt.Errorf("no free zram device and none can be added: %w", err)
	}
	return "zram" + strings.TrimSpace(string(b)), true, nil
}

func (s *Setup) upZswap(z tierspec.ZswapSpec) error {
	before, err := host.ReadZswapParams()
	if err != nil {
		return fmt.Errorf("read zswap's parameters: %w", err)
	}
	if err := s.add(Made{Kind: host.TierZswap, Device: "zswap", ZswapBefore: &before}); err != nil {
		return err
	}
	if z.Compressor != "" {
		if err := writeZswap("compressor", z.Compressor); err != nil {
			return InputError{fmt.Sprintf("zswap compressor=%s: the kernel refused it (%v); /proc/crypto lists what it has", z.Compressor, err)}
		}
	}
	if z.MaxPoolPercent > 0 {
		if err := writeZswap("max_pool_percent", strconv.FormatUint(z.MaxPoolPercent, 10)); err != nil {
			return err
		}
	}
	if err := writeZswap("enabled", "Y"); err != nil {
		return err
	}
	// Before zswap's first use the kernel takes any name and falls back
	// to its default compressor when it starts: read back what it uses.
	if z.Compressor != "" {
		now, err := host.ReadZswapParams()
		if err == nil && now.Compressor != z.Compressor {
			return InputError{fmt.Sprintf("zswap compressor=%s: not available in this kernel (it uses %s); /proc/crypto lists what it has", z.Compressor, now.Compressor)}
		}
	}
	return nil
}

func writeZswap(param, value string) error {
	if err := os.WriteFile(filepath.Join(host.ZswapDir, param), []byte(value), 0o644); err != nil {
		return fmt.Errorf("zswap %s=%s: %w", param, value, err)
	}
	return nil
}

// Down undoes what Up made, last first, and forgets each part once it is
// undone; what could not be undone stays recorded (and in the error).
func (s *Setup) Down() error {
	var errs []error
	for i := len(s.Made) - 1; i >= 0; i-- {
		if err := undo(s.Made[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		s.Made = append(s.Made[:i], s.Made[i+1:]...)
		if err := s.save(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func undo(m Made) error {
	switch m.Kind {
	case host.TierZswap:
		b := m.ZswapBefore
		if b == nil {
			return nil
		}
		enabled := "N"
		if b.Enabled {
			enabled = "Y"
		}
		// Off first: pages already in the pool stay readable.
		return errors.Join(writeZswap("enabled", "N"),
			writeZswap("max_pool_percent", strconv.FormatUint(b.MaxPoolPercent, 10)),
			writeZswap("compressor", b.Compressor), writeZswap("enabled", enabled))
	case host.TierZram:
		dev := filepath.Base(m.Device)
		if isActive(m.Device) {
			if err := run("swapoff", m.Device); err != nil {
				return err
			}
		}
		if err := os.WriteFile("/sys/block/"+dev+"/reset", []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reset %s: %w", dev, err)
		}
		if m.HotAdded {
			if err := os.WriteFile("/sys/class/zram-control/hot_remove", []byte(strings.TrimPrefix(dev, "zram")), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", dev, err)
			}
		}
		return nil
	case host.TierDisk:
		if isActive(m.Device) {
			if err := run("swapoff", m.Device); err != nil {
				return err
			}
		}
		if err := os.Remove(m.Device); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if m.Dir != "" {
			return os.RemoveAll(m.Dir)
		}
		return nil
	}
	return fmt.Errorf("unknown swap tier kind %q in the record", m.Kind)
}

// isActive reports whether a swap area is on (exact path in /proc/swaps).
func isActive(path string) bool {
	swaps, _ := host.ReadSwaps()
	for _, d := range swaps {
		if d.Path == path {
			return true
		}
	}
	return false
}

// Device returns the first made device of a kind ("" if none).
func (s *Setup) Device(kind string) string {
	for _, m := range s.Made {
		if m.Kind == kind {
			return m.Device
		}
	}
	return ""
}
