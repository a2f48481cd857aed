package probe

import (
	"context"
	"os"
	"testing"
	"time"
)

// The probe does real direct I/O on the test's file system and cleans up.
func TestRunOnScratchFile(t *testing.T) {
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: 300 * time.Millisecond, Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReadIOPS <= 0 || r.WriteIOPS <= 0 || r.ReadLatencyUs <= 0 || r.Jobs != 2 {
		t.Fatalf("result %+v", r)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("scratch file left behind: %v", left)
	}
}

func TestRunRejectsTinyDevice(t *testing.T) {
	if _, err := Run(context.Background(), Options{Device: "/dev/null", DeviceBytes: 4096, Duration: time.Millisecond, Jobs: 1}); err == nil {
		t.Fatal("probed a one-page device")
	}
}
