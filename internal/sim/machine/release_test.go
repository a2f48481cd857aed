package machine

import (
	"math"
	"testing"
)

func TestFillOutPace(t *testing.T) {
	r := func(pairs ...float64) []swapOutReading {
		var out []swapOutReading
		for i := 0; i+1 < len(pairs); i += 2 {
			out = append(out, swapOutReading{Seconds: pairs[i], Pages: pairs[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name     string
		readings []swapOutReading
		want     float64
	}{
		{"none", nil, 0},
		{"one", r(0, 5), 0},
		{"nothing out", r(0, 5, 1, 5, 2, 5), 0},
		// From the reading before the first rise (at 1 s, 100) to the
		// last rise (at 3 s, 900): 800 pages in 2 s.
		{"out between the still readings", r(0, 100, 1, 100, 2, 700, 3, 900, 4, 900), 400},
		{"out to the last reading", r(0, 0, 0.5, 1500, 1, 2000), 2000},
		{"too short to tell", r(0, 0, 0.1, 1000, 0.15, 1000), 0},
	} {
		if got := fillOutPace(c.readings); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: fillOutPace = %v, want %v", c.name, got, c.want)
		}
	}
}
