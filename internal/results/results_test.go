package results

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRunRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := &Run{Kind: "density", Label: "seq", StartedAt: time.Date(2026, 11, 21, 1, 2, 3, 0, time.UTC),
		Params:  map[string]any{"vm_memory": "256Mi", "deployments": "1:4:1"},
		Machine: Machine{Hostname: "h", Kernel: "6.18", CPUs: 2, MemTotalBytes: 24 << 30, SwapDevices: []SwapDevice{{Path: "/var/tmp/s", Type: "file", SizeBytes: 1 << 30, Priority: -2}}},
		Node:    Node{Scope: "/headroom-density-x", MemoryBytes: 2 << 30, SwapBytes: 6 << 30, SwapReadIOPS: 33000, RequestBytes: 128 << 20},
		Steps: []Step{{Index: 1, Workers: 1, AggregatePagesPerSec: 3e7, CreateP50Seconds: 0.2,
			PerWorker: []WorkerResult{{Name: "w1", PagesPerSec: 3e7, CreateToReadySeconds: 0.2}}},
			{Index: 2, Workers: 2, Failed: true, FailReason: "worker w2 OOM-killed", OOMKills: 1}},
		StopReason: "worker w2 OOM-killed"}
	if err := WriteRun(dir, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	csv, _ := os.ReadFile(filepath.Join(dir, StepsCSV))
	if lines := strings.Split(strings.TrimSpace(string(csv)), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "OOM-killed") {
		t.Fatalf("steps.csv:\n%s", csv)
	}
	os.WriteFile(filepath.Join(dir, RunFile), []byte(`{"schema":"other/v9"}`), 0o644)
	if _, err := ReadRun(dir); err == nil {
		t.Fatal("foreign schema accepted")
	}
}

func TestTimelineRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := AppendLines(filepath.Join(dir, TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{{Time: time.Unix(10, 0).UTC(), Step: 1, PswpIn: 5}, {Time: time.Unix(11, 0).UTC(), Step: 1, PswpIn: 9}}
	for _, s := range want {
		l.Write(s)
	}
	l.Close()
	got, err := ReadTimeline(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("timeline %+v, %v", got, err)
	}
}

func curve(rates ...float64) []Point {
	var ps []Point
	for i, r := range rates {
		ps = append(ps, Point{i + 1, r})
	}
	return ps
}

func TestDetectRegimes(t *testing.T) {
	tests := []struct {
		name string
		pts  []Point
		want Regimes
	}{
		{"the users' figure: linear in RAM, sharp fall, level",
			curve(1e6, 2e6, 3e6, 4e6, 5e6, 1.5e6, 3e5, 1e5, 1.1e5, 0.9e5, 1e5),
			Regimes{PeakPagesPerSec: 5e6, PeakWorkers: 5, KneeWorkers: 5, PlateauStartWorkers: 8, PlateauPagesPerSec: 1e5}},
		{"CPU-bound in RAM (flat), then a fall and a plateau",
			curve(5e7, 6e7, 6e7, 5.8e7, 2e6, 4e5, 3.5e5, 3e5),
			Regimes{PeakPagesPerSec: 6e7, PeakWorkers: 2, KneeWorkers: 4, PlateauStartWorkers: 6, PlateauPagesPerSec: 3.5e5}},
		{"never leaves RAM", curve(1e6, 2e6, 3e6),
			Regimes{PeakPagesPerSec: 3e6, PeakWorkers: 3, KneeWorkers: 3}},
		{"falls on the last step: no plateau yet", curve(1e6, 2e6, 1e4),
			Regimes{PeakPagesPerSec: 2e6, PeakWorkers: 2, KneeWorkers: 2}},
		{"repeats are averaged", []Point{{1, 4e6}, {1, 6e6}, {2, 1e6}, {3, 1e4}, {3, 3e4}, {4, 2e4}},
			Regimes{PeakPagesPerSec: 5e6, PeakWorkers: 1, KneeWorkers: 1, PlateauStartWorkers: 3, PlateauPagesPerSec: 2e4}},
		{"empty", nil, Regimes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectRegimes(tt.pts); got != tt.want {
				t.Fatalf("DetectRegimes = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzDetectRegimes(f *testing.F) {
	f.Add([]byte{10, 20, 30, 2, 1, 1})
	f.Add([]byte{255, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var pts []Point
		for i, x := range b {
			pts = append(pts, Point{i%7 + 1, math.Pow(1.2, float64(x))})
		}
		r := DetectRegimes(pts)
		if len(pts) == 0 {
			return
		}
		if r.KneeWorkers < r.PeakWorkers && r.KneeWorkers != 0 || (r.PlateauStartWorkers != 0 && r.PlateauStartWorkers <= r.KneeWorkers) {
			t.Fatalf("inconsistent regimes %+v", r)
		}
		if r.PlateauPagesPerSec > r.PeakPagesPerSec {
			t.Fatalf("plateau above peak: %+v", r)
		}
	})
}

func TestQuantileIsExact(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for q, want := range map[float64]float64{0.5: 5, 0.95: 10, 0.99: 10, 0.1: 1, 0.2: 2} {
		if got := Quantile(xs, q); got != want {
			t.Errorf("Quantile(%g) = %g, want %g", q, got, want)
		}
	}
}

// Curves measured on the development machine (2 vCPUs, kernel 6.18) with
// headroom density: a 2 GiB node with 6 GiB of swap and 256 MiB workers
// (seq and random), and make demo's 1 GiB node with random access.
func TestDetectRegimesOnMeasuredCurves(t *testing.T) {
	tests := []struct {
		name  string
		rates []float64
		want  Regimes
	}{
		{"seq, 2 GiB node", []float64{81899825, 120456348, 112741224, 87569971, 98503467, 119325359, 127396765, 90902229, 50317299,
			60821, 66243, 62998, 53745, 57301, 56365, 54762, 53299, 53259, 55033, 50974, 43148},
			Regimes{PeakPagesPerSec: 127396765, PeakWorkers: 7, KneeWorkers: 8, PlateauStartWorkers: 10, PlateauPagesPerSec: 54897.5}},
		{"random, 2 GiB node", []float64{68130040, 128749956, 120470658, 109563174, 110932128, 111045839, 112526325, 85752652, 45616044,
			33978462, 8721767, 129291, 118141, 97559, 85630, 67462, 65598, 69678, 60112, 60965, 62963},
			Regimes{PeakPagesPerSec: 128749956, PeakWorkers: 2, KneeWorkers: 8, PlateauStartWorkers: 12, PlateauPagesPerSec: 68570}},
		{"random, make demo's 1 GiB node", []float64{72243514, 141387121, 125586653, 77380809, 56017270, 14073849, 79098, 67086, 57622, 57817},
			Regimes{PeakPagesPerSec: 141387121, PeakWorkers: 2, KneeWorkers: 4, PlateauStartWorkers: 7, PlateauPagesPerSec: 62451.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DetectRegimes(curve(tt.rates...))
			if got != tt.want {
				t.Fatalf("DetectRegimes = %+v, want %+v", got, tt.want)
			}
			if got.PeakPagesPerSec/got.PlateauPagesPerSec < 10 {
				t.Fatalf("plateau only %.1fx below the peak", got.PeakPagesPerSec/got.PlateauPagesPerSec)
			}
		})
	}
}
