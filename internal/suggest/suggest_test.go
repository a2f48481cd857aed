package suggest

import "testing"

func TestNearest(t *testing.T) {
	candidates := []string{"swap", "node-memory", "guest-memory", "seq-a", "seq-b", "intervalSeconds"}
	for name, want := range map[string]string{
		"swp": "swap", "swabb": "swap", "node-memroy": "node-memory", "uest-memory": "guest-memory",
		"intervalSecond": "intervalSeconds", "IntervalSeconds": "intervalSeconds",
		"seq-c": "", "vm-memory": "", "bogus": "", "x": "", "": "", "swap": "swap",
	} {
		if got := Nearest(name, candidates); got != want {
			t.Errorf("%q: %q, want %q", name, got, want)
		}
	}
	if got := Nearest("swp", []string{"swap", "swap"}); got != "swap" {
		t.Errorf("a candidate listed twice is no tie: %q", got)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"swap", "swp", 1}, {"ab", "ba", 2}} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// The distance is a metric: zero only between equal names, symmetric,
// never more than the longer name, and a suggestion is always a candidate
// within two edits.
func FuzzEditDistance(f *testing.F) {
	f.Add("node-memroy", "node-memory")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 64 || len(b) > 64 {
			return
		}
		d := editDistance(a, b)
		if d != editDistance(b, a) || (d == 0) != (a == b) || d > max(len(a), len(b)) || d < max(len(a), len(b))-min(len(a), len(b)) {
			t.Fatalf("editDistance(%q, %q) = %d", a, b, d)
		}
		if s := Nearest(a, []string{b}); s != "" && (s != b || d > 2) {
			t.Fatalf("Nearest(%q, [%q]) = %q at %d edits", a, b, s, d)
		}
	})
}
