package report

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"slices"
	"sort"
)

// spec is one chart's data for the page's interactive charts (uPlot, in
// assets/report.js): the same points the PNG draws, every series on one
// shared x axis.
type spec struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	X     string `json:"x_label"`
	Y     string `json:"y_label"`
	LogY  bool   `json:"log_y"`
	// WorkersX marks an axis of worker counts: a tick at every count up
	// to 20, and a click on a count opens that step's timelines.
	WorkersX bool `json:"workers_x"`
	// Xs is the union of the series' x values, ascending; each series
	// has a y per x, null where it has no point.
	Xs     []float64    `json:"xs"`
	Series []specSeries `json:"series"`
	// Marks are vertical lines (regime boundaries), Bands shaded x spans
	// (the node's memory states).
	Marks []specMark `json:"marks,omitempty"`
	Bands []specBand `json:"bands,omitempty"`
}

type specSeries struct {
	Label string     `json:"label"`
	Color string     `json:"color"`
	Dash  []float64  `json:"dash,omitempty"`  // line dashes, CSS pixels
	Line  bool       `json:"line"`            // joined by a line
	Dots  bool       `json:"dots"`            // each point marked
	Ys    []*float64 `json:"ys"`              // aligned with spec.Xs; null: no point there, the line goes on
	Gaps  []int      `json:"gaps,omitempty"`  // indices in Xs where the line breaks
	Width float64    `json:"width,omitempty"` // line width, CSS pixels (default 1.5)
	pts   [][2]float64
}

type specMark struct {
	X     float64 `json:"x"`
	Label string  `json:"label"`
	Color string  `json:"color"`
}

type specBand struct {
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Label string  `json:"label"`
	Color string  `json:"color"` // CSS rgba(), translucent
}

// add appends a series; a point with a NaN y breaks the line at its x.
func (s *spec) add(label string, c color.Color, dashes []float64, line, dots bool, pts [][2]float64) *specSeries {
	s.Series = append(s.Series, specSeries{Label: label, Color: cssColor(c), Dash: dashes, Line: line, Dots: dots, pts: pts})
	return &s.Series[len(s.Series)-1]
}

// align fills Xs and each series' Ys. Points of one series at the same x
// (repeats of a step) are averaged; a gap (NaN) is kept as a null.
func (s *spec) align() {
	xs := map[float64]bool{}
	for _, se := range s.Series {
		for _, p := range se.pts {
			if !math.IsNaN(p[0]) {
				xs[p[0]] = true
			}
		}
	}
	s.Xs = s.Xs[:0]
	for x := range xs {
		s.Xs = append(s.Xs, x)
	}
	sort.Float64s(s.Xs)
	if len(s.Series) > 0 && len(s.Xs) == 0 {
		s.Xs = []float64{}
	}
	for i := range s.Series {
		se := &s.Series[i]
		sum := make([]float64, len(s.Xs))
		n := make([]int, len(s.Xs))
		gap := make([]bool, len(s.Xs))
		for _, p := range se.pts {
			if math.IsNaN(p[0]) || math.IsInf(p[1], 0) {
				continue
			}
			j, _ := slices.BinarySearch(s.Xs, p[0])
			if math.IsNaN(p[1]) {
				gap[j] = true
				continue
			}
			sum[j] += p[1]
			n[j]++
		}
		se.Ys, se.Gaps = make([]*float64, len(s.Xs)), nil
		for j := range s.Xs {
			switch {
			case n[j] > 0:
				v := round4(sum[j] / float64(n[j]))
				se.Ys[j] = &v
			case gap[j]:
				se.Gaps = append(se.Gaps, j)
			}
		}
	}
}

// round4 keeps four significant digits: the page's data stays small and
// no figure is read finer than that.
func round4(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	return roundSignificant(v, 4)
}

// spread turns a scatter (many points per x: every worker of a step) into
// the series a pointer can read: the slowest, the median and the fastest
// per x.
func spread(pts [][2]float64) (lo, mid, hi [][2]float64) {
	byX := map[float64][]float64{}
	var xs []float64
	for _, p := range pts {
		if _, ok := byX[p[0]]; !ok {
			xs = append(xs, p[0])
		}
		byX[p[0]] = append(byX[p[0]], p[1])
	}
	sort.Float64s(xs)
	for _, x := range xs {
		ys := byX[x]
		sort.Float64s(ys)
		med := ys[len(ys)/2]
		if len(ys)%2 == 0 {
			med = (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
		}
		lo, mid, hi = append(lo, [2]float64{x, ys[0]}), append(mid, [2]float64{x, med}), append(hi, [2]float64{x, ys[len(ys)-1]})
	}
	return lo, mid, hi
}

func cssColor(c color.Color) string {
	r, g, b, a := c.RGBA()
	if a == 0xffff {
		return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
	}
	if a == 0 {
		return "rgba(0,0,0,0)"
	}
	// RGBA() is alpha-premultiplied.
	return fmt.Sprintf("rgba(%d,%d,%d,%.2f)", r*0xff/a, g*0xff/a, b*0xff/a, float64(a)/0xffff)
}

// specsJSON is the page's chart data.
func specsJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("chart data: %w", err)
	}
	return string(b), nil
}
