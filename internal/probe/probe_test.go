package probe

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
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

// Rounds repeat the whole probe on one scratch file: the result has each
// depth once, and says how many rounds its medians are of.
func TestRunRounds(t *testing.T) {
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: 100 * time.Millisecond, Jobs: 1, Depths: []int{1, 2}, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds != 3 || len(r.Depths) != 2 || !(r.ReadIOPS > 0 && r.WriteIOPS > 0) {
		t.Fatalf("3 rounds at depths 1 and 2: %+v", r)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("scratch file left behind: %v", left)
	}
}

// Each figure is its own median over the rounds: a round high on one
// figure and low on another moves neither.
func TestMedianOfRounds(t *testing.T) {
	round := func(read, write, latency, largeRead, depth1Read, depth8Write float64) Result {
		return Result{Device: "d", Jobs: 4, ReadIOPS: read, WriteIOPS: write, ReadLatencyUs: latency, WriteLatencyUs: latency * 2,
			LargeBlockBytes: 128 << 10, LargeReadIOPS: largeRead, LargeWriteIOPS: largeRead / 2,
			Depths: []DepthRates{{QueueDepth: 1, ReadIOPS: depth1Read, WriteIOPS: 100}, {QueueDepth: 8, ReadIOPS: 900, WriteIOPS: depth8Write}}}
	}
	tests := []struct {
		name   string
		rounds []Result
		want   Result
	}{
		{"one round is itself", []Result{round(10, 20, 30, 40, 50, 60)}, func() Result { r := round(10, 20, 30, 40, 50, 60); r.Rounds = 1; return r }()},
		{"three rounds, each figure its median",
			[]Result{round(10, 90, 30, 4, 50, 600), round(30, 20, 10, 40, 5, 60), round(20, 50, 20, 400, 500, 6)},
			Result{Device: "d", Jobs: 4, Rounds: 3, ReadIOPS: 20, WriteIOPS: 50, ReadLatencyUs: 20, WriteLatencyUs: 40,
				LargeBlockBytes: 128 << 10, LargeReadIOPS: 40, LargeWriteIOPS: 20,
				Depths: []DepthRates{{QueueDepth: 1, ReadIOPS: 50, WriteIOPS: 100}, {QueueDepth: 8, ReadIOPS: 900, WriteIOPS: 60}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := slices.Clone(tt.rounds[0].Depths)
			got := medianOfRounds(tt.rounds)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if !slices.Equal(tt.rounds[0].Depths, first) {
				t.Errorf("the first round's depths were overwritten: %+v", tt.rounds[0].Depths)
			}
		})
	}
}

// A probe cut short (Ctrl-C) reports no figure: its read rate would be of
// part of the test and its write rate of none. The scratch file goes.
func TestRunInterruptedReportsNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	r, err := Run(ctx, Options{Dir: dir, ScratchBytes: 16 << 20, Duration: time.Minute, Jobs: 2})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted probe: err %v, result %+v", err, r)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("scratch file left behind: %v", left)
	}
}

// A long probe says what each round measures and for how long, as it
// starts.
func TestRunTellsEachRound(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	_, err := Run(context.Background(), Options{Dir: dir, ScratchBytes: 16 << 20, Duration: 20 * time.Millisecond, Jobs: 2, Depths: []int{1, 8},
		LargeBlockBytes: 64 << 10, Rounds: 2, Progress: func(l string) { lines = append(lines, l) }})
	if err != nil {
		t.Fatal(err)
	}
	// Each round: 4 KiB at depth 2, the large block, depths 1 and 8; reads and writes.
	if len(lines) != 2 || lines[0] != "probing a scratch file in "+dir+": 4 KiB random reads and writes at queue depths 1 to 8, about 160ms (round 1 of 2)" ||
		!strings.HasSuffix(lines[1], "(round 2 of 2)") {
		t.Errorf("progress: %q", lines)
	}
}
