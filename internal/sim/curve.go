package sim

import "math"

// alongLog2 is y at x on a curve through points ascending in x (one
// point at least): linear in log2 of x between points — the model's
// figures (queue depth, tasks faulting, memory touched) act by doubling —
// and beyond them the nearest point's y or, with extend, the nearest
// segment's line. One point holds for any x.
func alongLog2[P any](ps []P, at float64, x, y func(P) float64, extend bool) float64 {
	last := len(ps) - 1
	if last == 0 {
		return y(ps[0])
	}
	if !extend {
		switch {
		case at <= x(ps[0]):
			return y(ps[0])
		case at >= x(ps[last]):
			return y(ps[last])
		}
	}
	i := 1
	for i < last && at > x(ps[i]) {
		i++
	}
	lo, hi := ps[i-1], ps[i]
	f := math.Log2(at/x(lo)) / math.Log2(x(hi)/x(lo))
	return y(lo) + f*(y(hi)-y(lo))
}
