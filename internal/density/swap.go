package density

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// swapSetup is the swap a run added; undo removes it.
type swapSetup struct {
	dir      string // holds the swap file
	file     string
	zramDev  string // /dev/zramN
	zramSys  string // /sys/block/zramN
	hotAdded bool
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SwapDirPrefix starts the name of the directory holding a run's swap file.
const SwapDirPrefix = "headroom-density-swap-"

// addSwapFile creates and enables a swap file of sizeBytes under parent.
func (s *swapSetup) addSwapFile(parent string, sizeBytes uint64) error {
	dir, err := os.MkdirTemp(parent, SwapDirPrefix)
	if err != nil {
		return fmt.Errorf("create swap file: %w", err)
	}
	s.dir = dir
	path := filepath.Join(dir, "swapfile")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create swap file: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, int64(sizeBytes))
	f.Close()
	if err != nil {
		return fmt.Errorf("allocate %d bytes for the swap file in %s: %w", sizeBytes, parent, err)
	}
	if err := runCmd("mkswap", path); err != nil {
		return err
	}
	if err := runCmd("swapon", "-p", "-1", path); err != nil {
		return err
	}
	s.file = path
	return nil
}

// addZram puts a zram swap device of sizeBytes in front (higher priority)
// of the other swap devices, using a free device or hot-adding one.
func (s *swapSetup) addZram(sizeBytes uint64) error {
	dev := ""
	for i := 0; i < 16; i++ {
		sys := fmt.Sprintf("/sys/block/zram%d", i)
		b, err := os.ReadFile(filepath.Join(sys, "disksize"))
		if err != nil {
			break
		}
		if strings.TrimSpace(string(b)) == "0" {
			dev = fmt.Sprintf("zram%d", i)
			break
		}
	}
	if dev == "" {
		b, err := os.ReadFile("/sys/class/zram-control/hot_add")
		if err != nil {
			return fmt.Errorf("no free zram device and cannot hot-add one: %w", err)
		}
		dev = "zram" + strings.TrimSpace(string(b))
		s.hotAdded = true
	}
	s.zramSys, s.zramDev = "/sys/block/"+dev, "/dev/"+dev
	if err := os.WriteFile(filepath.Join(s.zramSys, "disksize"), []byte(strconv.FormatUint(sizeBytes, 10)), 0o644); err != nil {
		return fmt.Errorf("size %s: %w", dev, err)
	}
	if err := runCmd("mkswap", s.zramDev); err != nil {
		return err
	}
	return runCmd("swapon", "-p", "100", s.zramDev)
}

// undo disables and removes everything added, returning the first error.
func (s *swapSetup) undo() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if s.zramDev != "" {
		if isActiveSwap(s.zramDev) {
			keep(runCmd("swapoff", s.zramDev))
		}
		keep(os.WriteFile(filepath.Join(s.zramSys, "reset"), []byte("1"), 0o644))
		if s.hotAdded {
			id := strings.TrimPrefix(filepath.Base(s.zramSys), "zram")
			keep(os.WriteFile("/sys/class/zram-control/hot_remove", []byte(id), 0o644))
		}
	}
	if s.file != "" && isActiveSwap(s.file) {
		keep(runCmd("swapoff", s.file))
	}
	if s.dir != "" {
		keep(os.RemoveAll(s.dir))
	}
	return first
}

func isActiveSwap(path string) bool {
	b, _ := os.ReadFile("/proc/swaps")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == path {
			return true
		}
	}
	return false
}
