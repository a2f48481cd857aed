package flagvalue

import "testing"

// A size left unset falls back to another's; "none" unsets one given.
func TestMaybeBytes(t *testing.T) {
	for _, c := range []struct {
		sets   []string
		want   uint64
		shown  string
		hasErr bool
	}{
		{nil, 7, "", false},
		{[]string{"16Mi"}, 16 << 20, "16.0 MiB", false},
		{[]string{"0"}, 0, "0 B", false},
		{[]string{"16Mi", "none"}, 7, "", false},
		{[]string{"lots"}, 7, "", true},
	} {
		var v MaybeBytes
		var err error
		for _, s := range c.sets {
			if err = v.Set(s); err != nil {
				break
			}
		}
		if (err != nil) != c.hasErr || v.Or(7) != c.want || v.String() != c.shown {
			t.Errorf("set %q: %d %q (err %v), want %d %q", c.sets, v.Or(7), v.String(), err, c.want, c.shown)
		}
	}
}
