package report

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// syntheticRun writes a run with the three regimes: in RAM to 4 workers,
// a fall, a plateau from 7 (swap-in 20k pages/s on a 40k IOPS device).
func syntheticRun(t *testing.T, label string, scale float64) string {
	t.Helper()
	dir := t.TempDir()
	aggregate := []float64{6e7, 8e7, 8e7, 7.5e7, 5e6, 6e5, 2.1e5, 2e5, 1.9e5, 2e5}
	r := &results.Run{Kind: "density", Label: label, StartedAt: time.Unix(0, 0).UTC(),
		Node: results.Node{MemoryBytes: 2 << 30, SwapBytes: 6 << 30, SwapReadIOPS: 40000, RequestBytes: 80 << 20}, StopReason: "completed"}
	for i, a := range aggregate {
		n := i + 1
		swapIn := 0.0 // nothing pages in RAM
		if n > 4 {
			swapIn = 20000
		}
		s := results.Step{Index: n, Workers: n, AggregatePagesPerSec: a * scale, SwapInPagesPerSec: swapIn,
			SwapOutPagesPerSec: swapIn, MajorFaultsPerSec: swapIn * 0.75, PSISomePercent: float64(n) * 5, PSIFullPercent: float64(n) * 3,
			CreateP50Seconds: 0.1 * float64(n), CreateP95Seconds: 0.2 * float64(n), CreateP99Seconds: 0.3 * float64(n),
			CPUBusyCores: math.Min(float64(n), 2) * 0.9 * scale}
		for w := 1; w <= n; w++ {
			s.PerWorker = append(s.PerWorker, results.WorkerResult{Name: "w", PagesPerSec: a * scale / float64(n) * (0.5 + float64(w)/float64(n))})
		}
		r.Steps = append(r.Steps, s)
	}
	r.Steps = append(r.Steps, results.Step{Index: 11, Workers: 11, Failed: true, FailReason: "worker w3 OOM-killed", OOMKills: 1})
	r.StopReason = "step 11 (11 workers): worker w3 OOM-killed"
	if err := results.WriteRun(dir, r); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSummarize(t *testing.T) {
	runs, err := Load([]string{syntheticRun(t, "seq", 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(runs)[0]
	if s.PeakPagesPerSec != 8e7 || s.KneeWorkers != 4 || s.PlateauStartWorkers != 7 || s.PlateauPagesPerSec != 2e5 ||
		s.FailedSteps != 1 || !strings.Contains(s.StopReason, "OOM-killed") {
		t.Fatalf("summary %+v", s)
	}
	if math.Abs(s.PlateauPageInFraction-0.5) > 1e-9 || math.Abs(s.PlateauRatio-400) > 1e-9 {
		t.Fatalf("plateau page-in fraction %g, ratio %g", s.PlateauPageInFraction, s.PlateauRatio)
	}
	// Past the knee every worker of the synthetic run shares the fall
	// evenly: none at RAM speed, steps 5 to 10 counted.
	if len(s.AtRAMSpeed) != 6 || s.AtRAMSpeed[0] != (results.AtRAMSpeed{Workers: 5}) || s.AtRAMSpeed[5] != (results.AtRAMSpeed{Workers: 10}) {
		t.Fatalf("workers at RAM speed %+v, want none in steps 5 to 10", s.AtRAMSpeed)
	}
	// Its worker w of n runs at 0.5 + w/n of an even share: on the
	// plateau (7 to 10) a slope of (n − 1)/(2n + 1) against creation.
	if len(s.CreationSlopes) != 4 || s.PlateauCreationSlope == nil {
		t.Fatalf("creation slopes %+v, mean %v; want steps 7 to 10", s.CreationSlopes, s.PlateauCreationSlope)
	}
	var sum float64
	for i, c := range s.CreationSlopes {
		n := 7 + i
		if want := float64(n-1) / float64(2*n+1); c.Workers != n || math.Abs(c.Slope-want) > 1e-9 {
			t.Errorf("creation slope %+v, want %d workers at %.4f", c, n, want)
		}
		sum += c.Slope
	}
	if math.Abs(*s.PlateauCreationSlope-sum/4) > 1e-12 {
		t.Errorf("plateau creation slope %v, want the steps' mean %v", *s.PlateauCreationSlope, sum/4)
	}
}

func TestWriteHTMLAndPNGs(t *testing.T) {
	runs, err := Load([]string{syntheticRun(t, "seq-run", 1), syntheticRun(t, "random-run", 1.5)})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "report.html")
	charts, err := Write(runs, out)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(out)
	page := string(html)
	for _, want := range []string{"uPlot", `id="chart-aggregate"`, `id="chart-per-worker"`, `id="chart-swap"`, `id="chart-psi"`,
		`id="chart-cpu"`, "2.70", `id="chart-latency"`, "seq-run", "random-run", "worker w3 OOM-killed",
		`id="headroom-summary"`, "80.00M", "50.0%", "&#43;0.42"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Offline: nothing the page loads comes from elsewhere (the browser
	// test watches its requests).
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import`).FindString(page); m != "" {
		t.Errorf("report refers to an outside resource (%q); it must open offline", m)
	}
	var data pageCharts
	if err := json.Unmarshal([]byte(embedded(t, page, "headroom-charts")), &data); err != nil {
		t.Fatalf("embedded chart data: %v", err)
	}
	// The interactive aggregate chart holds the same points as the PNG:
	// each run's aggregate rate at each worker count.
	agg := data.Charts[0]
	if agg.Name != "aggregate" || !agg.WorkersX || !agg.LogY || len(agg.Xs) != 10 || agg.Xs[0] != 1 || agg.Xs[9] != 10 {
		t.Fatalf("aggregate chart spec %+v", agg)
	}
	found := false
	for _, se := range agg.Series {
		if se.Label == "seq-run" {
			found = true
			for _, st := range runs[0].Steps {
				var y *float64
				if st.Workers <= len(se.Ys) {
					y = se.Ys[st.Workers-1]
				}
				if st.Failed != (y == nil) || y != nil && math.Abs(*y-st.AggregatePagesPerSec) > 1e-3*st.AggregatePagesPerSec {
					t.Errorf("seq-run at %d workers: chart %v, step %v (failed %v)", st.Workers, y, st.AggregatePagesPerSec, st.Failed)
				}
			}
		}
	}
	if !found {
		t.Error("no seq-run series on the interactive aggregate chart")
	}
	if len(data.Timelines) != 2 {
		t.Errorf("%d runs' timelines, want one per run", len(data.Timelines))
	}
	var summary []Summary
	if err := json.Unmarshal([]byte(embedded(t, page, "headroom-summary")), &summary); err != nil || len(summary) != 2 {
		t.Fatalf("embedded summary: %v", err)
	}
	if len(charts) != 6 {
		t.Fatalf("%d charts", len(charts))
	}
	for _, c := range charts {
		b, err := os.ReadFile(c.PNG)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() < 500 {
			t.Fatalf("%s: %v", c.PNG, err)
		}
	}
}

// embedded is the text of the page's script element with that id.
func embedded(t *testing.T, page, id string) string {
	t.Helper()
	open := `id="` + id + `">`
	i := strings.Index(page, open)
	if i < 0 {
		t.Fatalf("no #%s in the page", id)
	}
	j := strings.Index(page[i:], "</script>")
	return page[i+len(open) : i+j]
}

// distinctColors counts colours in an image, to tell a drawn page from a
// blank one.
func distinctColors(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

// The page renders in a real browser, offline.
func TestReportRendersInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	testenv.Require(t, err == nil, "chromium (apt-get install chromium)")
	runs, err := Load([]string{syntheticRun(t, "seq-run", 1)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	if _, err := Write(runs, out); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1200,1600", "--screenshot="+shot, "file://"+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v: %s", err, b)
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if n := distinctColors(img); n < 20 {
		t.Fatalf("the rendered page has %d colours: blank or broken", n)
	}
}

// bandPixels counts pixels showing a memory state's band over white.
func bandPixels(img image.Image, c color.NRGBA) int {
	a := float64(c.A) / 255
	want := [3]float64{255 - (255-float64(c.R))*a, 255 - (255-float64(c.G))*a, 255 - (255-float64(c.B))*a}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]float64{float64(r >> 8), float64(g >> 8), float64(bl >> 8)}
			if math.Abs(got[0]-want[0]) <= 2 && math.Abs(got[1]-want[1]) <= 2 && math.Abs(got[2]-want[2]) <= 2 {
				n++
			}
		}
	}
	return n
}

// The seed's Figure 7: a run whose agent drove balloons gets a chart of
// each VM's granted memory and target over the node's memory states, drawn
// from the agent's decision lines and the timeline; every run with guest
// stats gets the guests' page-ins.
func TestBalloonChartFromAgentLines(t *testing.T) {
	dir := syntheticRun(t, "balloon-run", 1)
	t0 := time.Unix(1000, 0).UTC()
	timeline, err := results.AppendLines(filepath.Join(dir, results.TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 20; s++ {
		granted := uint64(512 << 20)
		if s >= 7 && s < 15 {
			granted = 300 << 20
		}
		timeline.Write(results.Sample{Time: t0.Add(time.Duration(s) * time.Second), Step: 2, Workers: []results.WorkerSample{
			{Name: "w0", Guest: &results.GuestView{MajorFaults: int64(100 * s), BalloonActualBytes: granted}},
			{Name: "w1", Guest: &results.GuestView{MajorFaults: int64(10 * s), BalloonActualBytes: 512 << 20}},
		}})
	}
	if err := timeline.Close(); err != nil {
		t.Fatal(err)
	}
	agent, err := results.AppendLines(filepath.Join(dir, results.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, d := range []policy.Decision{
		{Time: at(0), Action: policy.ActionMemoryState, MemoryState: &policy.MemoryStateChange{To: policy.MemClear}},
		{Time: at(5), Action: policy.ActionMemoryState, MemoryState: &policy.MemoryStateChange{From: policy.MemClear, To: policy.MemSoft}},
		{Time: at(6), Action: policy.ActionSetBalloon, Workload: "w0", Balloon: &policy.BalloonSetting{TargetBytes: 300 << 20, MaxBytes: 512 << 20}},
		{Time: at(14), Action: policy.ActionMemoryState, MemoryState: &policy.MemoryStateChange{From: policy.MemSoft, To: policy.MemHigh}},
		{Time: at(14), Action: policy.ActionSetBalloon, Workload: "w0", Balloon: &policy.BalloonSetting{TargetBytes: 512 << 20, MaxBytes: 512 << 20}},
	} {
		agent.Write(d)
	}
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
	// Beside it, runs whose guests do not report major faults or never
	// fault (nothing, or a flat line at the floor, on a log axis).
	quiet := syntheticRun(t, "quiet-run", 1)
	l, err := results.AppendLines(filepath.Join(quiet, results.TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 3; s++ {
		l.Write(results.Sample{Time: t0.Add(time.Duration(s) * time.Second), Workers: []results.WorkerSample{{Name: "w0", Guest: &results.GuestView{MajorFaults: -1, BalloonActualBytes: 512 << 20}}}})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	flat := syntheticRun(t, "flat-run", 1)
	if l, err = results.AppendLines(filepath.Join(flat, results.TimelineFile)); err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 3; s++ {
		l.Write(results.Sample{Time: t0.Add(time.Duration(s) * time.Second), Workers: []results.WorkerSample{{Name: "w0", Guest: &results.GuestView{BalloonActualBytes: 512 << 20}}}})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	runs, err := Load([]string{dir, quiet})
	if err != nil {
		t.Fatal(err)
	}
	charts, err := Write(runs, filepath.Join(t.TempDir(), "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, alone := range []string{quiet, flat} {
		r, err := Load([]string{alone})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(r, filepath.Join(t.TempDir(), "alone.html")); err != nil {
			t.Fatal(err)
		}
	}
	found := map[string]string{}
	for _, c := range charts {
		found[c.Name] = c.PNG
	}
	if found["balloon-1"] == "" || found["guest-page-ins"] == "" {
		t.Fatalf("charts %v: want balloon-1 and guest-page-ins", found)
	}
	b, _ := os.ReadFile(found["balloon-1"])
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	soft := memStateColors[policy.MemSoft].(color.NRGBA)
	low := memStateColors[policy.MemLow].(color.NRGBA)
	// The soft band spans 9 of the 20 s: a large share of the plot area.
	if n, all := bandPixels(img, soft), img.Bounds().Dx()*img.Bounds().Dy(); n < all/10 {
		t.Errorf("soft band covers %d of %d pixels", n, all)
	}
	if n := bandPixels(img, low); n > 0 {
		t.Errorf("a low band (%d pixels) in a run that never was low", n)
	}
}

// A simulated run overlays a measured one: dashed beside solid.
func TestSimulatedRunsAreDashed(t *testing.T) {
	if runDashes(Run{Run: &results.Run{Kind: "sim"}}) == nil || runDashes(Run{Run: &results.Run{Kind: "density"}}) != nil {
		t.Fatal("want simulated runs dashed and measured ones solid")
	}
}

// A KubeVirt density run measured the control plane: its report draws
// latency by phase and the creation rate, not empty pages/s and swap charts.
func TestKubevirtRunChartsLatencyByPhase(t *testing.T) {
	run := &results.Run{Schema: results.SchemaVersion, Kind: "density", Label: "kubevirt VirtualMachineInstance", Params: map[string]any{"backend": "kubevirt"}}
	for i, n := range []int{10, 20, 30} {
		run.Steps = append(run.Steps, results.Step{Index: i + 1, Workers: n, CreateP50Seconds: 1, CreateP95Seconds: 1.6, CreateP99Seconds: 1.7,
			CreationRatePerMinute: float64(300 * n / 10),
			CreatePhases: []results.PhaseQuantiles{{Phase: "pending", P95Seconds: 0.1}, {Phase: "scheduling", P95Seconds: 0.3},
				{Phase: "scheduled", P95Seconds: 0.6}, {Phase: "running", P95Seconds: 1.6}, {Phase: "ready", P95Seconds: 1.6}}})
	}
	charts, err := Write([]Run{{Dir: "kv", Run: run}}, filepath.Join(t.TempDir(), "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range charts {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "latency,vm-phases,creation-rate" {
		t.Errorf("charts %s, want latency,vm-phases,creation-rate", got)
	}
	if got := strings.Join(phaseNames([]Run{{Dir: "kv", Run: run}}), ","); got != "pending,scheduling,scheduled,running,ready" {
		t.Errorf("latency by phase draws %s", got)
	}
	// With the in-guest workload measured, the pages/s charts are back.
	run.Steps[0].AggregatePagesPerSec = 1e6
	if controlPlaneOnly([]Run{{Dir: "kv", Run: run}}) {
		t.Errorf("a run with pages/s drawn as control plane only")
	}
}

func TestSINumber(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0"}, {1, "1"}, {0.25, "0.25"}, {950, "950"}, {1000, "1k"}, {2500, "2.5k"}, {61600, "61.6k"},
		{1e8, "100M"}, {84.08e6, "84.1M"}, {1.5e9, "1.5G"}, {-2e6, "-2M"}, {999.6, "1k"}, {3e12, "3T"}} {
		if got := siNumber(c.v); got != c.want {
			t.Errorf("siNumber(%g) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestWorkerTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		every    bool // a labelled tick at every count
	}{{1, 10, true}, {0.5, 20.5, true}, {1, 20, true}, {1, 21, false}, {1, 100, false}} {
		ticks := workerTicks{}.Ticks(c.min, c.max)
		labelled := 0
		for _, tk := range ticks {
			if tk.Label != "" {
				labelled++
			}
		}
		n := int(math.Floor(c.max) - math.Ceil(c.min) + 1)
		if got := labelled == n; got != c.every {
			t.Errorf("axis %g..%g: %d labelled ticks for %d counts, want every count %v", c.min, c.max, labelled, n, c.every)
		}
	}
}
