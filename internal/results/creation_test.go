package results

import (
	"math"
	"slices"
	"testing"
)

func workersAt(rates ...float64) []WorkerResult {
	var ws []WorkerResult
	for _, r := range rates {
		ws = append(ws, WorkerResult{PagesPerSec: r})
	}
	return ws
}

func TestRateCreationSlope(t *testing.T) {
	reversed := workersAt(3, 2, 1)
	for i := range reversed {
		reversed[i].CreateOffsetSeconds = 0.01 * float64(len(reversed)-1-i)
	}
	failed := workersAt(1, 5, 3)
	failed[1].Error = "exit status 1"
	killed := workersAt(1, 0, 3)
	killed[1].OOMKilled = true
	cases := []struct {
		name    string
		workers []WorkerResult
		want    float64
		ok      bool
	}{
		{"alike", workersAt(4, 4, 4, 4), 0, true},
		// Shares 0.5, 1, 1.5 at places −1, 0, 1: (−0.5 + 1.5) / 2.
		{"last made fastest", workersAt(1, 2, 3), 0.5, true},
		{"first made fastest", workersAt(3, 2, 1), -0.5, true},
		{"made in the reverse of the listed order", reversed, 0.5, true},
		// Left: 1 and 3 at places −1 and 1.
		{"a failed worker left out", failed, 0.5, true},
		{"an OOM-killed worker left out", killed, 0.5, true},
		{"one worker", workersAt(7), 0, false},
		{"no rate", workersAt(0, 0, 0), 0, false},
		{"none", nil, 0, false},
	}
	for _, c := range cases {
		got, ok := RateCreationSlope(c.workers)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: RateCreationSlope = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// A measured random plateau (run aj, 2026-11-29: ten workers of 256 MiB
// on a 1 GiB node, 8 s a step), rates in the order the workers were
// made, and a simulated one whose workers are alike.
func TestCreationSlopesOnAPlateau(t *testing.T) {
	r := &Run{}
	// Before the plateau, and a failed step: not counted.
	r.Steps = append(r.Steps, Step{Workers: 4, PerWorker: workersAt(1, 6e6, 8e6, 9e6)}, Step{Workers: 9, Failed: true, PerWorker: workersAt(1, 2)})
	r.Steps = append(r.Steps, Step{Workers: 10, PerWorker: workersAt(1359, 1348, 1337, 1445, 1531, 1439, 1623, 1673, 1987, 1990)})
	r.Steps = append(r.Steps, Step{Workers: 11, PerWorker: workersAt(1300, 1300, 1300, 1300, 1300, 1300, 1300, 1300, 1300, 1300, 1300)})
	got := r.CreationSlopes(Regimes{KneeWorkers: 3, PlateauStartWorkers: 6})
	if len(got) != 2 || got[0].Workers != 10 || got[1].Workers != 11 {
		t.Fatalf("CreationSlopes = %v, want steps 10 and 11", got)
	}
	if got[0].Slope < 0.15 || got[0].Slope > 0.3 || math.Abs(got[1].Slope) > 1e-12 {
		t.Errorf("slopes %v, want the measured step's about 0.2 and the alike step's 0", got)
	}
	if mean := MeanCreationSlope(got); math.Abs(mean-(got[0].Slope+got[1].Slope)/2) > 1e-12 {
		t.Errorf("MeanCreationSlope = %v", mean)
	}
	if got := r.CreationSlopes(Regimes{KneeWorkers: 3}); got != nil {
		t.Errorf("no plateau: CreationSlopes = %v, want none", got)
	}
	if MeanCreationSlope(nil) != 0 {
		t.Error("the mean of no slopes is not 0")
	}
}

func FuzzRateCreationSlope(f *testing.F) {
	f.Add([]byte{1, 2, 3})
	f.Add([]byte{0, 0, 255, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ws := workersAt()
		for _, x := range b {
			ws = append(ws, WorkerResult{PagesPerSec: math.Pow(1.1, float64(x)) - 1})
		}
		slope, ok := RateCreationSlope(ws)
		if !ok {
			return
		}
		// All of the rate on the last made: Σ place over Σ place², which
		// is 3(n−1)/(n+1), below 3.
		if math.IsNaN(slope) || math.Abs(slope) > 3 {
			t.Fatalf("slope %v of %d workers", slope, len(ws))
		}
		back := slices.Clone(ws)
		slices.Reverse(back)
		if reversed, _ := RateCreationSlope(back); math.Abs(reversed+slope) > 1e-9*max(1, math.Abs(slope)) {
			t.Fatalf("reversed order: slope %v, want %v", reversed, -slope)
		}
	})
}
