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

// Further queue depths are each measured, reads and writes, in order.
func TestRunAtQueueDepths(t *testing.T) {
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: 200 * time.Millisecond, Jobs: 1, Depths: []int{1, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Depths) != 2 || r.Depths[0].QueueDepth != 1 || r.Depths[1].QueueDepth != 4 {
		t.Fatalf("depths %+v, want 1 and 4", r.Depths)
	}
	for _, d := range r.Depths {
		if d.ReadIOPS <= 0 || d.WriteIOPS <= 0 {
			t.Errorf("depth %d: %+v", d.QueueDepth, d)
		}
	}
	if _, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: time.Millisecond, Jobs: 1, Depths: []int{0}}); err == nil {
		t.Error("queue depth 0 was accepted")
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

// A large block is measured beside the 4 KiB one, at the same depth: it
// moves more bytes an I/O, and so fewer I/Os a second.
func TestRunLargeBlocks(t *testing.T) {
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: 300 * time.Millisecond, Jobs: 2, LargeBlockBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.LargeBlockBytes != 256<<10 || !(r.LargeReadIOPS > 0 && r.LargeReadIOPS < r.ReadIOPS) || !(r.LargeWriteIOPS > 0 && r.LargeWriteIOPS < r.WriteIOPS) {
		t.Errorf("256 KiB at %.0f/%.0f IOPS (read/write), 4 KiB at %.0f/%.0f: want fewer, not none", r.LargeReadIOPS, r.LargeWriteIOPS, r.ReadIOPS, r.WriteIOPS)
	}
	if _, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: time.Millisecond, Jobs: 1, LargeBlockBytes: 5000}); err == nil {
		t.Error("a large block of 5000 bytes was accepted")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("scratch file left behind: %v", left)
	}
}
