package report

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		s := results.Step{Index: n, Workers: n, AggregatePagesPerSec: a * scale, SwapInPagesPerSec: 20000,
			SwapOutPagesPerSec: 21000, MajorFaultsPerSec: 15000, PSISomePercent: float64(n) * 5, PSIFullPercent: float64(n) * 3,
			CreateP50Seconds: 0.1 * float64(n), CreateP95Seconds: 0.2 * float64(n), CreateP99Seconds: 0.3 * float64(n)}
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
	for _, want := range []string{"data:image/png;base64,", `id="chart-aggregate"`, `id="chart-per-worker"`, `id="chart-swap"`, `id="chart-psi"`,
		`id="chart-latency"`, "seq-run", "random-run", "worker w3 OOM-killed",
		`id="headroom-summary"`, "80.00M", "50.0%"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, "http://www.w3.org") || strings.Contains(page, "https://") {
		t.Error("report refers to an outside resource; it must open offline")
	}
	i := strings.Index(page, `id="headroom-summary">`)
	j := strings.Index(page[i:], "</script>")
	var summary []Summary
	if err := json.Unmarshal([]byte(page[i+len(`id="headroom-summary">`):i+j]), &summary); err != nil || len(summary) != 2 {
		t.Fatalf("embedded summary: %v", err)
	}
	if len(charts) != 5 {
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
