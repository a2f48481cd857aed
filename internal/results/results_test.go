package results

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
		ps = append(ps, Point{Workers: i + 1, PagesPerSec: r})
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
		{"repeats are averaged", []Point{{Workers: 1, PagesPerSec: 4e6}, {Workers: 1, PagesPerSec: 6e6}, {Workers: 2, PagesPerSec: 1e6},
			{Workers: 3, PagesPerSec: 1e4}, {Workers: 3, PagesPerSec: 3e4}, {Workers: 4, PagesPerSec: 2e4}},
			Regimes{PeakPagesPerSec: 5e6, PeakWorkers: 1, KneeWorkers: 1, PlateauStartWorkers: 3, PlateauPagesPerSec: 2e4}},
		{"empty", nil, Regimes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DetectRegimes(tt.pts, 0)
			got.KneeEvidence = ""
			if got != tt.want {
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
		// Bytes in threes: a rate, page-ins, and the slowest worker's share.
		paging := false
		for i := 0; i+2 < len(b); i += 3 {
			rate := math.Pow(1.2, float64(b[i]))
			p := Point{Workers: i/3%7 + 1, PagesPerSec: rate, PageInsPerSec: float64(b[i+1]) * 100}
			if b[i+2] > 0 {
				p.MaxWorkerPagesPerSec, p.MinWorkerPagesPerSec = rate/2, rate/2/float64(b[i+2])
			}
			paging = paging || p.PageInsPerSec > 0 || b[i+2] > 0
			pts = append(pts, p)
		}
		r := DetectRegimes(pts, 40000)
		if len(pts) == 0 {
			return
		}
		knee := r.KneeWorkers
		if knee < r.PeakWorkers && knee != 0 && !paging || (r.PlateauStartWorkers != 0 && r.PlateauStartWorkers <= knee) {
			t.Fatalf("inconsistent regimes %+v", r)
		}
		if last := Curve(pts)[len(Curve(pts))-1].Workers; knee != last && r.KneeEvidence == "" || knee == last && r.KneeEvidence != "" {
			t.Fatalf("knee %d of %d workers with evidence %q", knee, last, r.KneeEvidence)
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
			got := DetectRegimes(curve(tt.rates...), 0)
			got.KneeEvidence = ""
			if got != tt.want {
				t.Fatalf("DetectRegimes = %+v, want %+v", got, tt.want)
			}
			if got.PeakPagesPerSec/got.PlateauPagesPerSec < 10 {
				t.Fatalf("plateau only %.1fx below the peak", got.PeakPagesPerSec/got.PlateauPagesPerSec)
			}
		})
	}
}

// measuredStep is one row of a density table: workers, aggregate, the
// slowest and fastest worker, swap-ins/s and major faults/s.
type measuredStep struct {
	workers                    int
	aggregate, minW, maxW      float64
	swapInPerSec, majFltPerSec float64
}

func measuredRun(device float64, rows []measuredStep) *Run {
	r := &Run{Node: Node{SwapReadIOPS: device}}
	for i, m := range rows {
		s := Step{Index: i + 1, Workers: m.workers, AggregatePagesPerSec: m.aggregate, SwapInPagesPerSec: m.swapInPerSec, MajorFaultsPerSec: m.majFltPerSec}
		for w := 0; w < m.workers; w++ {
			rate := m.minW
			if w == m.workers-1 {
				rate = m.maxW
			}
			s.PerWorker = append(s.PerWorker, WorkerResult{Name: fmt.Sprintf("w%d", w), PagesPerSec: rate})
		}
		r.Steps = append(r.Steps, s)
	}
	return r
}

// The knee comes from paging evidence, the throughput fall second: make
// demo's measured run (docs/guide/density.md) was once called "in RAM" at 4 workers with
// 7.2k swap-ins/s and one worker at 120k pages/s against 28M for another;
// the micro-VM ramp's 4th step (519 swap-ins/s, 1.3% of its device, VMs
// within 1.4x of each other) is in RAM.
func TestKneeFromPagingEvidence(t *testing.T) {
	demo := measuredRun(34362, []measuredStep{
		{1, 72.24e6, 72.24e6, 72.24e6, 0, 0}, {2, 141.39e6, 66.16e6, 75.23e6, 0, 0}, {3, 125.59e6, 40.97e6, 42.76e6, 0, 0},
		{4, 77.38e6, 119.7e3, 28.23e6, 7232, 6043}, {5, 56.02e6, 13.9e3, 29.85e6, 18.2e3, 18.1e3}, {6, 14.07e6, 8869, 14.01e6, 26.1e3, 26.1e3},
		{7, 79.1e3, 7054, 20.5e3, 30.9e3, 30.9e3}, {8, 67.1e3, 6251, 10.6e3, 32.9e3, 32.9e3}, {9, 57.6e3, 4901, 8335, 31.5e3, 31.5e3},
		{10, 57.8e3, 4627, 7283, 34.5e3, 34.5e3}})
	vms := measuredRun(41123, []measuredStep{
		{1, 16.90e6, 16.90e6, 16.90e6, 0, 0}, {2, 28.42e6, 13.84e6, 14.58e6, 0, 0}, {3, 26.28e6, 7.80e6, 10.49e6, 0, 0},
		{4, 27.01e6, 5.69e6, 7.62e6, 519, 324}, {5, 9.66e6, 6708, 3.94e6, 13.3e3, 11.7e3}, {6, 90.7e3, 5252, 27.7e3, 23.2e3, 22.6e3}})
	for _, tt := range []struct {
		name         string
		run          *Run
		knee         int
		evidence     string
		plateauStart int
	}{
		{"make demo, 1 GiB node", demo, 3, "at 4 workers pages in 7232 pages/s, 21% of the swap device's random-read rate", 7},
		{"micro-VMs, 1.5 GiB node", vms, 4, "at 5 workers pages in 13300 pages/s, 32% of the swap device's random-read rate", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.run.Regimes()
			if r.KneeWorkers != tt.knee || r.KneeEvidence != tt.evidence || r.PlateauStartWorkers != tt.plateauStart {
				t.Fatalf("regimes %+v, want knee %d (%q), plateau from %d", r, tt.knee, tt.evidence, tt.plateauStart)
			}
		})
	}
	// Without paging figures the fall alone decides: the demo's old answer.
	if r := DetectRegimes(curve(72.24e6, 141.39e6, 125.59e6, 77.38e6, 56.02e6, 14.07e6, 79.1e3, 67.1e3, 57.6e3, 57.8e3), 0); r.KneeWorkers != 4 {
		t.Fatalf("rates only: knee %d, want 4", r.KneeWorkers)
	}
	// A spread alone (no device rate, few page-ins) is evidence too.
	spread := []Point{{Workers: 1, PagesPerSec: 1e7, MinWorkerPagesPerSec: 1e7, MaxWorkerPagesPerSec: 1e7},
		{Workers: 2, PagesPerSec: 1.9e7, MinWorkerPagesPerSec: 5e5, MaxWorkerPagesPerSec: 1.85e7, PageInsPerSec: 200}}
	if r := DetectRegimes(spread, 0); r.KneeWorkers != 1 || !strings.Contains(r.KneeEvidence, "37x slower") {
		t.Fatalf("spread: %+v", r)
	}
}

// The lucky workers of a measured transition (random, 256 MiB workers, a
// 2 GiB node, 2026-11-28): the step's rates per worker, in the order the
// workers were made, and how many ran at RAM speed.
func TestWorkersAtRAMSpeed(t *testing.T) {
	steps := []struct {
		rates []float64
		want  int
	}{
		{[]float64{3.67e6, 3.29e4, 2.28e6, 5.87e6, 4.81e6, 4.46e6, 3.75e6, 2.53e6}, 7},
		{[]float64{8.97e3, 1.23e4, 1.43e4, 7e6, 7.01e6, 1.79e4, 1.7e4, 3.58e4, 2.24e5}, 2},
		{[]float64{6.2e3, 6.56e3, 7.12e3, 2.07e4, 9.21e3, 8.93e3, 1.08e4, 6.8e5, 1.37e4, 8.05e6}, 1},
		{[]float64{4.94e3, 4.55e3, 5.92e3, 6.3e3, 9.21e3, 6.8e3, 8.84e3, 1.17e4, 1.79e6, 1.58e6, 3.59e6}, 3},
		{[]float64{4.83e3, 4.4e3, 4.92e3, 5.13e3, 5.43e3, 6.54e3, 1.14e4, 5.69e3, 1.09e4, 1.16e4, 1.12e4, 1.14e4}, 0},
	}
	r := &Run{}
	// A step in RAM (the knee's) and a failed one are not counted.
	r.Steps = append(r.Steps, Step{Workers: 7, PerWorker: []WorkerResult{{PagesPerSec: 6e6}}}, Step{Workers: 13, Failed: true})
	var want []AtRAMSpeed
	for _, s := range steps {
		st := Step{Workers: len(s.rates)}
		for _, rate := range s.rates {
			st.PerWorker = append(st.PerWorker, WorkerResult{PagesPerSec: rate})
		}
		r.Steps = append(r.Steps, st)
		want = append(want, AtRAMSpeed{Workers: len(s.rates), Count: s.want})
	}
	got := r.WorkersAtRAMSpeed(Regimes{PeakPagesPerSec: 68.5e6, KneeWorkers: 7})
	if !slices.Equal(got, want) {
		t.Fatalf("WorkersAtRAMSpeed = %v, want %v", got, want)
	}
}

// A step is refused where its requests exceed the node, and the figures
// say by how much even where one decimal would not.
func TestAdmissionRefused(t *testing.T) {
	for _, c := range []struct {
		workers                  int
		requestBytes, allocBytes uint64
		want                     string
	}{
		{3, 336 << 20, 1320 << 20, ""},
		{4, 330 << 20, 1320 << 20, ""},
		{4, 336 << 20, 1320 << 20, "admission refused at 4 workers: 4 × 336.0 MiB requested = 1.31 GiB exceeds the node's 1.29 GiB"},
		{12, 16 << 30, 184 << 30, "admission refused at 12 workers: 12 × 16.0 GiB requested = 192.0 GiB exceeds the node's 184.0 GiB"},
	} {
		if got := AdmissionRefused(c.workers, c.requestBytes, c.allocBytes); got != c.want {
			t.Errorf("%d × %d B on %d B: %q, want %q", c.workers, c.requestBytes, c.allocBytes, got, c.want)
		}
	}
}
