package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/host"
)

// KSM requires the kernel's same-page merging and gives the test ksmd
// stopped with nothing merged. When the test ends every merged page is
// unmerged and the settings found are put back.
func KSM(t testing.TB) host.KSM {
	t.Helper()
	RequireRoot(t)
	saved, err := host.ReadKSM()
	Require(t, err == nil, "KSM ("+host.KSMDir+")")
	t.Cleanup(func() {
		if err := unmergeKSM(); err != nil {
			t.Errorf("restore KSM: %v", err)
		}
		if err := writeKSM(saved); err != nil {
			t.Errorf("restore KSM: %v", err)
		}
	})
	if err := unmergeKSM(); err != nil {
		t.Fatal(err)
	}
	return saved
}

// unmergeKSM unmerges every page (run=2), waits for it and stops ksmd.
// The advisor refuses manual settings while it is on, so it goes first.
func unmergeKSM() error {
	if _, err := os.Stat(filepath.Join(host.KSMDir, "advisor_mode")); err == nil {
		if err := writeKSMFile("advisor_mode", "none"); err != nil {
			return err
		}
	}
	if err := writeKSMFile("run", "2"); err != nil {
		return err
	}
	// Writing run=2 returns once unmerging is done; the loop covers pages
	// a still-running scan merged meanwhile.
	deadline := time.Now().Add(30 * time.Second)
	for {
		k, err := host.ReadKSM()
		if err != nil {
			return err
		}
		if k.PagesSharing == 0 && k.PagesShared == 0 {
			break
		}
		if time.Now().After(deadline) {
			return os.ErrDeadlineExceeded
		}
		time.Sleep(100 * time.Millisecond)
	}
	return writeKSMFile("run", "0")
}

func writeKSM(k host.KSM) error {
	for _, w := range []struct{ name, value string }{
		{"pages_to_scan", strconv.FormatUint(k.PagesToScan, 10)},
		{"sleep_millisecs", strconv.FormatUint(k.SleepMillisecs, 10)},
		{"advisor_mode", k.AdvisorMode},
		{"run", strconv.Itoa(k.Run)},
	} {
		if w.value == "" {
			continue
		}
		if err := writeKSMFile(w.name, w.value); err != nil {
			return err
		}
	}
	return nil
}

func writeKSMFile(name, value string) error {
	return os.WriteFile(filepath.Join(host.KSMDir, name), []byte(value), 0o644)
}
