package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// withTimelines gives a synthetic run the samples a measured one has: the
// node once a second and every worker's rate per interval, 8 s a step.
func withTimelines(t *testing.T, dir string) string {
	t.Helper()
	r, err := results.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := results.AppendLines(filepath.Join(dir, results.TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := results.AppendLines(filepath.Join(dir, results.WorkersFile))
	if err != nil {
		t.Fatal(err)
	}
	var in, some uint64
	t0 := time.Unix(1000, 0).UTC()
	for i := range r.Steps {
		st := &r.Steps[i]
		st.Started = t0.Add(time.Duration(i) * 10 * time.Second)
		for sec := 0; sec <= 8; sec++ {
			at := st.Started.Add(time.Duration(sec) * time.Second)
			in += uint64(st.SwapInPagesPerSec)
			some += uint64(st.PSISomePercent * 1e4)
			tl.Write(results.Sample{Time: at, Step: st.Index, PswpIn: in, PswpOut: in, PSISomeMicros: some, PSIFullMicros: some / 2})
			if sec == 0 {
				continue
			}
			for j, w := range st.PerWorker {
				ws.Write(results.WorkerInterval{Step: st.Index, Worker: fmt.Sprintf("%s%d", w.Name, j+1), Time: at, IntervalSeconds: 1, PagesPerSec: w.PagesPerSec})
			}
		}
	}
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	if err := results.WriteRun(dir, r); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReportInChromium opens the page from disk in headless Chromium and
// uses it as a reader would: hovering reads a value, a legend click hides a
// series, a drag zooms the worker axis, a click on a worker count opens
// that step's timelines, and nothing is fetched from anywhere.
func TestReportInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	testenv.Require(t, err == nil, "chromium (Debian's chromium package, which make deps installs) for the report's browser test")
	runs, err := Load([]string{withTimelines(t, syntheticRun(t, "seq-run", 1)), withTimelines(t, syntheticRun(t, "random-run", 1.5))})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.html")
	charts, err := Write(runs, out)
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		// Its singleton socket's directory goes in TMPDIR: the test's, or
		// every run leaves one in /tmp.
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()), chromedp.WindowSize(1200, 1000), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		// The network blocked: every request but the page's own goes to a
		// proxy that is not there.
		chromedp.ProxyServer("http://127.0.0.1:9"), chromedp.Flag("proxy-bypass-list", "<-loopback>"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	var mu sync.Mutex
	var fetched, thrown []string
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			fetched = append(fetched, e.Request.URL)
		case *runtime.EventExceptionThrown:
			thrown = append(thrown, fmt.Sprintf("%s (line %d)", e.ExceptionDetails.Text, e.ExceptionDetails.LineNumber))
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	run("open the page", chromedp.Navigate("file://"+out), chromedp.WaitVisible(chromedp.CSS("#chart-aggregate .uplot")))

	drawn := evalJS[int](t, bctx, "count the charts", `Object.keys(headroom.plots).length`)
	if drawn != len(charts) {
		t.Errorf("%d interactive charts, want one per chart (%d)", drawn, len(charts))
	}
	// Every chart has its series, each with points.
	bare := evalJS[[]string](t, bctx, "count the series", `Object.entries(headroom.plots).filter(([n, u]) => u.series.length < 2 ||
		u.data.slice(1).some(ys => !ys.some(v => v != null))).map(([n]) => n)`)
	if len(bare) > 0 {
		t.Errorf("charts without series or with an empty one: %q", bare)
	}
	axes := evalJS[string](t, bctx, "read the axes", `headroom.plots.aggregate.axes.map(a => a._values.join(' ')).join(' ')`)
	if !strings.Contains(axes, "M") || strings.Contains(axes, "e+") || strings.Contains(axes, "–") {
		t.Errorf("aggregate chart axes read %q: want SI numbers (100M), not 1e+08", axes)
	}
	xTicks := evalJS[int](t, bctx, "count the worker ticks", `headroom.plots.aggregate.axes[0]._splits.length`)
	if xTicks != 10 {
		t.Errorf("%d ticks on the aggregate chart's worker axis, want one at each of the 10 counts", xTicks)
	}

	// Hover over the seq-run curve at 3 workers: its legend reads the
	// step's aggregate rate, 80M.
	at := func(chart string, workers float64) (x, y float64) {
		xy := evalJS[[]float64](t, bctx, "find a point", fmt.Sprintf(`(() => { const u = headroom.plots[%q], r = u.over.getBoundingClientRect();
			return [r.left + u.valToPos(%g, 'x'), r.top + u.bbox.height / devicePixelRatio / 2]; })()`, chart, workers))
		return xy[0], xy[1]
	}
	x3, y := at("aggregate", 3)
	run("hover", chromedp.MouseEvent(chromedp.MouseMoved, x3, y))
	values := evalJS[[]string](t, bctx, "read the legend", `[...headroom.plots.aggregate.root.querySelectorAll('.u-legend .u-series .u-value')].map(v => v.textContent)`)
	labels := evalJS[[]string](t, bctx, "read the legend labels", `headroom.plots.aggregate.series.map(s => s.label)`)
	seq := indexOf(labels, "seq-run")
	if seq < 0 || len(values) != len(labels) || values[0] != "3" || values[seq] != "80M" {
		t.Errorf("legend at 3 workers: labels %q values %q, want x 3 and seq-run 80M", labels, values)
	}

	// A click on a legend entry hides its series, a second shows it.
	toggle := fmt.Sprintf(`#chart-aggregate .u-legend .u-series:nth-child(%d) .u-label`, seq+1)
	run("toggle", chromedp.Click(chromedp.CSS(toggle)))
	shown := evalJS[[]bool](t, bctx, "read the series", `headroom.plots.aggregate.series.map(s => s.show)`)
	if shown[seq] {
		t.Error("seq-run still shown after a click on its legend entry")
	}
	run("toggle back", chromedp.Click(chromedp.CSS(toggle)))
	shown = evalJS[[]bool](t, bctx, "read the series", `headroom.plots.aggregate.series.map(s => s.show)`)
	if !shown[seq] {
		t.Error("seq-run hidden after a second click on its legend entry")
	}

	// A drag from 2 to 5 workers zooms the axis to that span.
	x2, y := at("aggregate", 2) // the clicks may have scrolled the page
	x5, _ := at("aggregate", 5)
	held := func(p *input.DispatchMouseEventParams) { p.Button, p.Buttons = input.MouseButtonLeft, 1 }
	run("drag", chromedp.MouseEvent(chromedp.MouseMoved, x2, y), chromedp.MouseEvent(chromedp.MousePressed, x2, y, held, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, (x2+x5)/2, y, held), chromedp.MouseEvent(chromedp.MouseMoved, x5, y, held),
		chromedp.MouseEvent(chromedp.MouseReleased, x5, y, held, chromedp.ClickCount(1)))
	span := evalJS[[]float64](t, bctx, "read the zoom", `[headroom.plots.aggregate.scales.x.min, headroom.plots.aggregate.scales.x.max]`)
	if len(span) != 2 || span[0] < 1.8 || span[0] > 2.2 || span[1] < 4.8 || span[1] > 5.2 {
		t.Errorf("x axis after a drag from 2 to 5 workers: %v", span)
	}
	timelineHidden := evalJS[bool](t, bctx, "the timeline after a drag", `document.getElementById('timeline').hidden`)
	if !timelineHidden {
		t.Error("a drag (a zoom) opened a step's timelines")
	}

	// A click on 4 workers (on the zoomed axis) opens both runs' step 4.
	x4, y := at("aggregate", 4)
	run("click a step", chromedp.MouseClickXY(x4, y), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	title := evalJS[string](t, bctx, "read the timelines", `document.getElementById('timeline-title').textContent`)
	opened := evalJS[[]string](t, bctx, "list the timelines", `[...document.querySelectorAll('#timeline-charts .chart')].filter(c => c.querySelector('.uplot')).map(c => c.dataset.run + '/' + c.dataset.step + '/' + c.dataset.chart)`)
	want := []string{"0/4/pages", "0/4/swap", "0/4/psi", "1/4/pages", "1/4/swap", "1/4/psi"}
	if !strings.Contains(title, "seq-run, step 4 (4 workers)") || strings.Join(opened, " ") != strings.Join(want, " ") {
		t.Errorf("after a click on 4 workers: %q, charts %q, want %q", title, opened, want)
	}
	// Its per-worker chart holds the step's 4 workers' rates.
	series := evalJS[int](t, bctx, "count the workers", `headroom.timelinePlots[0].series.length - 1`)
	if series != 4 {
		t.Errorf("step 4's pages/s timeline has %d series, want its 4 workers", series)
	}

	// The steps table's button opens one run's step.
	run("open from the table", chromedp.Click(chromedp.CSS(`button.open-timeline[data-run="1"][data-step="7"]`)))
	title = evalJS[string](t, bctx, "read the timelines", `document.getElementById('timeline-title').textContent`)
	if !strings.HasPrefix(title, "Step timelines: random-run, step 7 (7 workers)") || strings.Contains(title, "seq-run") {
		t.Errorf("after the table's button for random-run step 7: %q", title)
	}

	// A screenshot for the eye, kept with the test's output.
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shotPath := filepath.Join(screenshotDir(t), "report-in-chromium.png")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d KiB)", shotPath, len(shot)>>10)

	mu.Lock()
	defer mu.Unlock()
	for _, u := range fetched {
		if !strings.HasPrefix(u, "file://") && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page fetched %s: it must open offline", u)
		}
	}
	if len(thrown) > 0 {
		t.Errorf("the page's scripts threw: %q", thrown)
	}
}

// screenshotDir is where the screenshot goes: $HEADROOM_SCREENSHOT_DIR, or
// the test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("HEADROOM_SCREENSHOT_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// evalJS evaluates a JavaScript expression in the page.
func evalJS[T any](t *testing.T, ctx context.Context, what, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
