// Package report turns result directories (from `headroom density` and
// `headroom sim`) into one self-contained HTML page with interactive
// charts (uPlot, embedded with the page's script from assets/), PNG files
// of the same charts (gonum/plot), and a JSON summary. Each chart is built
// once as points (charts.go, balloon.go, timeline.go) and drawn both ways;
// several runs overlay on the same axes.
package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// Summary is the computed summary of one run (report --json).
type Summary struct {
	Dir                 string  `json:"dir"`
	Label               string  `json:"label"`
	Kind                string  `json:"kind"`
	PeakPagesPerSec     float64 `json:"peak_pages_per_sec"`
	PeakWorkers         int     `json:"peak_workers"`
	PlateauPagesPerSec  float64 `json:"plateau_pages_per_sec"`
	PlateauStartWorkers int     `json:"plateau_start_workers"`
	KneeWorkers         int     `json:"knee_workers"`
	// KneeEvidence says why the step after the knee is not in RAM.
	KneeEvidence string `json:"knee_evidence,omitempty"`
	StopReason   string `json:"stop_reason"`
	Steps        int    `json:"steps"`
	FailedSteps  int    `json:"failed_steps"`
	// PlateauPageInsPerSec is the node's mean swap-in rate over the
	// plateau, and PlateauPageInFraction that rate over the swap device's
	// measured 4 KiB random-read rate (how close to the hardware it is).
	PlateauPageInsPerSec  float64 `json:"plateau_page_ins_per_sec,omitempty"`
	SwapReadIOPS          float64 `json:"swap_read_iops,omitempty"`
	PlateauPageInFraction float64 `json:"plateau_page_in_fraction,omitempty"`
	// PlateauRatio is peak / plateau.
	PlateauRatio float64 `json:"plateau_ratio,omitempty"`
	// AtRAMSpeed is, per step past the knee, how many workers still ran
	// at RAM speed (the lucky ones of the transition; none on the
	// plateau).
	AtRAMSpeed []results.AtRAMSpeed `json:"workers_at_ram_speed,omitempty"`
	// CreationSlopes is, per plateau step, how the workers' rates ran
	// with the order they were made (positive: the last made fastest),
	// and PlateauCreationSlope their mean (nil: no plateau step had one).
	CreationSlopes       []results.CreationSlope `json:"creation_slopes,omitempty"`
	PlateauCreationSlope *float64                `json:"plateau_creation_slope,omitempty"`
}

// Run is a loaded result directory.
type Run struct {
	Dir string
	*results.Run
	Regimes results.Regimes
	// Timeline is the node once a second; Decisions the agent's lines
	// (both empty where the run has none).
	Timeline  []results.Sample
	Decisions []policy.Decision
	// Intervals are the workers' own rates per interval (workers.jsonl).
	Intervals []results.WorkerInterval
}

// Load reads result directories.
func Load(dirs []string) ([]Run, error) {
	var out []Run
	seen := map[string]string{}
	for _, d := range dirs {
		// One run drawn twice would hide under itself on every chart.
		if abs, err := filepath.Abs(d); err == nil {
			if first, ok := seen[abs]; ok {
				return nil, fmt.Errorf("%s is %s again: give each run once", d, first)
			}
			seen[abs] = d
		}
		r, err := results.ReadRun(d)
		if err != nil {
			return nil, err
		}
		timeline, err := results.ReadTimeline(d)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		decisions, err := results.ReadDecisions(d)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		intervals, err := results.ReadWorkerIntervals(d)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		out = append(out, Run{Dir: d, Run: r, Regimes: r.Regimes(), Timeline: timeline, Decisions: decisions, Intervals: intervals})
	}
	return out, nil
}

// Summarize computes each run's summary.
func Summarize(runs []Run) []Summary {
	var out []Summary
	for _, r := range runs {
		s := Summary{Dir: r.Dir, Label: r.Label, Kind: r.Kind, PeakPagesPerSec: r.Regimes.PeakPagesPerSec, PeakWorkers: r.Regimes.PeakWorkers,
			PlateauPagesPerSec: r.Regimes.PlateauPagesPerSec, PlateauStartWorkers: r.Regimes.PlateauStartWorkers,
			KneeWorkers: r.Regimes.KneeWorkers, KneeEvidence: r.Regimes.KneeEvidence, StopReason: r.StopReason, Steps: len(r.Steps), SwapReadIOPS: r.Node.SwapReadIOPS}
		var in float64
		var n int
		for _, st := range r.Steps {
			if st.Failed {
				s.FailedSteps++
				continue
			}
			if s.PlateauStartWorkers > 0 && st.Workers >= s.PlateauStartWorkers {
				in += st.SwapInPagesPerSec
				n++
			}
		}
		if n > 0 {
			s.PlateauPageInsPerSec = in / float64(n)
			if s.SwapReadIOPS > 0 {
				s.PlateauPageInFraction = s.PlateauPageInsPerSec / s.SwapReadIOPS
			}
		}
		if s.PlateauPagesPerSec > 0 {
			s.PlateauRatio = s.PeakPagesPerSec / s.PlateauPagesPerSec
		}
		s.AtRAMSpeed = r.WorkersAtRAMSpeed(r.Regimes)
		if s.CreationSlopes = r.CreationSlopes(r.Regimes); len(s.CreationSlopes) > 0 {
			mean := results.MeanCreationSlope(s.CreationSlopes)
			s.PlateauCreationSlope = &mean
		}
		out = append(out, s)
	}
	return out
}

// Chart is one rendered chart.
type Chart struct {
	Name  string // file stem: aggregate, per-worker, ...
	Title string
	PNG   string // path of the PNG file
}

// Write renders the HTML page at htmlPath and the PNGs beside it, and
// returns the charts. The page draws the same data as interactive charts
// (hover to read a value, click a legend entry to toggle a series, drag to
// zoom the x axis, a click on a worker count to open that step's
// timelines) with the chart library embedded in it: it opens from disk
// with no network.
func Write(runs []Run, htmlPath string) ([]Chart, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs to report")
	}
	dir := filepath.Dir(htmlPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	stem := strings.TrimSuffix(filepath.Base(htmlPath), filepath.Ext(htmlPath))
	charts, err := drawCharts(runs)
	if err != nil {
		return nil, err
	}
	var out []Chart
	var specs []spec
	for _, c := range charts {
		png, err := c.render("png")
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, stem+"-"+c.name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			return nil, err
		}
		out = append(out, Chart{Name: c.name, Title: c.title, PNG: path})
		c.f.s.Name = c.name
		c.f.s.align()
		specs = append(specs, c.f.s)
	}
	chartData, err := specsJSON(pageCharts{Charts: specs, Timelines: timelines(runs)})
	if err != nil {
		return nil, err
	}
	summaries := Summarize(runs)
	summaryJSON, err := json.MarshalIndent(summaries, "", "  ")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = page.Execute(&buf, pageData{Runs: runs, Summaries: summaries, Charts: out, SummaryJSON: template.JS(summaryJSON),
		ChartJSON: template.JS(chartData), Library: template.JS(uplotJS), LibraryCSS: template.CSS(uplotCSS), Script: template.JS(reportJS)})
	if err != nil {
		return nil, err
	}
	return out, os.WriteFile(htmlPath, buf.Bytes(), 0o644)
}

// pageCharts is the page's chart data (#headroom-charts).
type pageCharts struct {
	Charts    []spec         `json:"charts"`
	Timelines []runTimelines `json:"timelines"`
}

// The chart library (uPlot, MIT: assets/uplot/LICENSE) and the page's own
// script, inlined into every page.
var (
	//go:embed assets/uplot/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uplot/uPlot.min.css
	uplotCSS string
	//go:embed assets/report.js
	reportJS string
)

type pageData struct {
	Runs        []Run
	Summaries   []Summary
	Charts      []Chart
	SummaryJSON template.JS
	ChartJSON   template.JS
	Library     template.JS
	LibraryCSS  template.CSS
	Script      template.JS
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"rate": units.FormatRate,
	"pct":  func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"slope": func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%+.2f", *v)
	},
	"f2":   func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f3":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"ms":   func(v float64) string { return fmt.Sprintf("%.3f", v*1e3) },
	"gib":  func(v uint64) string { return fmt.Sprintf("%.2f GiB", float64(v)/(1<<30)) },
	"base": filepath.Base,
}).Parse(pageTemplate))

const pageTemplate = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>headroom density report</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.6em} h2{font-size:1.25em;margin-top:2em} table{border-collapse:collapse;margin:1em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right} th{background:#f3f3f3} td.l,th.l{text-align:left}
.chart{min-height:380px;max-width:1000px} .failed{color:#b00} p.png{font-size:.8em;margin:.2em 0 0}
.u-legend{text-align:left;font-size:.85em;max-height:12em;overflow-y:auto} .u-legend .u-series{display:inline-block;margin-right:.6em}
#timeline{border-top:2px solid #ccc;margin-top:2em} #timeline .chart{min-height:260px} button.open-timeline{font-size:.8em}
.hint{color:#555;font-size:.9em}
{{.LibraryCSS}}
</style></head><body>
<h1>headroom density report</h1>
<p>Aggregate and per-worker pages/second as the number of workers grows: everything in RAM, a sharp fall as swap
takes over, then a level plateau. A step has left RAM when it pages (page-ins at 5% of the swap device's
random-read rate, or its slowest worker 10× slower than its fastest) or its aggregate fell below half the peak; the
evidence shows on the knee's cell. Regime boundaries are marked on the aggregate chart; the dotted line is the swap
device's measured 4 KiB random-read rate, the physical limit of page-ins.</p>
<table id="summary"><tr><th class="l">run</th><th>peak pages/s</th><th>at workers</th><th>last step in RAM</th>
<th>plateau pages/s</th><th>from workers</th><th>peak / plateau</th><th>plateau page-ins / device read rate</th>
<th title="the slope of the plateau workers' rates against the order they were made: + where the last made ran fastest">plateau rate by creation order</th><th class="l">stopped</th></tr>
{{range .Summaries}}<tr><td class="l">{{.Label}} ({{.Kind}})</td><td>{{rate .PeakPagesPerSec}}</td><td>{{.PeakWorkers}}</td><td title="{{.KneeEvidence}}">{{.KneeWorkers}}</td>
<td>{{if .PlateauStartWorkers}}{{rate .PlateauPagesPerSec}}{{else}}–{{end}}</td><td>{{if .PlateauStartWorkers}}{{.PlateauStartWorkers}}{{else}}–{{end}}</td>
<td>{{if .PlateauRatio}}{{f1 .PlateauRatio}}×{{else}}–{{end}}</td>
<td>{{if .PlateauPageInFraction}}{{rate .PlateauPageInsPerSec}} / {{rate .SwapReadIOPS}} = {{pct .PlateauPageInFraction}}{{else}}–{{end}}</td>
<td>{{slope .PlateauCreationSlope}}</td><td class="l">{{.StopReason}}</td></tr>
{{end}}</table>
<p class="hint">Point at a chart to read its values; click a legend entry to hide or show its series; drag across a chart to
zoom its x axis, double-click to zoom out; click a worker count to open that step's timelines (or use a step's button below).</p>
{{range .Charts}}<h2>{{.Title}}</h2><div class="chart" id="chart-{{.Name}}"></div><p class="png"><a href="{{base .PNG}}">PNG</a></p>
{{end}}
<div id="timeline" hidden><h2 id="timeline-title">Step timelines</h2><div id="timeline-charts"></div></div>
{{range $run, $r := .Runs}}<h2>Steps: {{.Label}}</h2>
<p>{{.Machine.Hostname}}, kernel {{.Machine.Kernel}}, {{.Machine.CPUs}} CPUs; node {{gib .Node.MemoryBytes}} RAM, {{gib .Node.SwapBytes}} swap{{if .Node.SwapTier}} ({{.Node.SwapTier}} tier){{end}};
request per worker {{gib .Node.RequestBytes}}; {{.Node.Scope}}</p>
<table class="steps"><tr><th>step</th><th>workers</th><th>aggregate pages/s</th><th>swap-in/s</th><th>swap-out/s</th><th>major faults/s</th>
<th>PSI some</th><th>PSI full</th><th>CPU cores busy</th><th>create p50 s</th><th>p95</th><th>p99</th><th>start skew ms</th><th class="l">status</th><th class="l">over time</th></tr>
{{range .Steps}}<tr><td>{{.Index}}</td><td>{{.Workers}}</td><td>{{rate .AggregatePagesPerSec}}</td><td>{{rate .SwapInPagesPerSec}}</td><td>{{rate .SwapOutPagesPerSec}}</td>
<td>{{rate .MajorFaultsPerSec}}</td><td>{{f1 .PSISomePercent}}%</td><td>{{f1 .PSIFullPercent}}%</td><td>{{if .CPUBusyCores}}{{f2 .CPUBusyCores}}{{else}}–{{end}}</td><td>{{f3 .CreateP50Seconds}}</td><td>{{f3 .CreateP95Seconds}}</td>
<td>{{f3 .CreateP99Seconds}}</td><td>{{ms .StartSkewSeconds}}</td><td class="l{{if .Failed}} failed{{end}}">{{if .Failed}}failed: {{.FailReason}}{{else}}ok{{end}}</td><td class="l"><button class="open-timeline" data-run="{{$run}}" data-step="{{.Index}}" hidden>timeline</button></td></tr>
{{end}}</table>
<p>Stopped: {{.StopReason}}</p>
{{end}}
<script type="application/json" id="headroom-summary">{{.SummaryJSON}}</script>
<script type="application/json" id="headroom-charts">{{.ChartJSON}}</script>
<script>{{.Library}}</script>
<script>{{.Script}}</script>
</body></html>
`
