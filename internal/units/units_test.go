package units

import (
	"math"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"4096", 4096, false},
		{"512Mi", 512 << 20, false},
		{"14Gi", 14 << 30, false},
		{"14GiB", 14 << 30, false},
		{"1G", 1e9, false},
		{"1g", 1e9, false},
		{"1.5Gi", 3 << 29, false},
		{"2Ki", 2048, false},
		{"1k", 1000, false},
		{"0", 0, false},
		{"7B", 7, false},
		{" 8Mi ", 8 << 20, false},
		{"", 0, true},
		{"Gi", 0, true},
		{"-1Gi", 0, true},
		{"1e9", 0, true},
		{"0x10", 0, true},
		{"12 apples", 0, true},
		{"1Xi", 0, true},
		{"NaN", 0, true},
		{"inf", 0, true},
		{"99999999999999999999", 0, true},
		{"16384Pi", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 14 << 30: "14.0 GiB", 1536 << 20: "1.5 GiB"}
	for in, want := range tests {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatBytesApart(t *testing.T) {
	for _, c := range []struct {
		a, b         uint64
		wantA, wantB string
	}{
		{4 * 336 << 20, 1320 << 20, "1.31 GiB", "1.29 GiB"},
		{3 << 30, 1 << 30, "3.0 GiB", "1.0 GiB"},
		{1 << 30, 1 << 30, "1.0 GiB", "1.0 GiB"},
		{1 << 30, 1000 << 20, "1.0 GiB", "1000.0 MiB"},
		{1<<30 + 1, 1 << 30, "1073741825 B", "1073741824 B"},
	} {
		if a, b := FormatBytesApart(c.a, c.b); a != c.wantA || b != c.wantB {
			t.Errorf("FormatBytesApart(%d, %d) = %q, %q; want %q, %q", c.a, c.b, a, b, c.wantA, c.wantB)
		}
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"0", 0, false}, {"5000", 5000, false}, {"250k", 250e3, false}, {"1M", 1e6, false},
		{"1.5M", 1.5e6, false}, {"2G", 2e9, false}, {"-5", 0, true}, {"", 0, true},
		{"1e3", 0, true}, {"fast", 0, true}, {"Inf", 0, true}, {"1m", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRate(%q) = %g, %v; want %g, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseFraction(t *testing.T) {
	for _, ok := range []string{"0", "1", "0.25", "1.0"} {
		if _, err := ParseFraction(ok); err != nil {
			t.Errorf("ParseFraction(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"-0.1", "1.01", "NaN", "", "half"} {
		if _, err := ParseFraction(bad); err == nil {
			t.Errorf("ParseFraction(%q) accepted", bad)
		}
	}
}

// FuzzParseBytes checks that any accepted size round-trips through its
// plain decimal form and that errors quote the input.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"14Gi", "512Mi", "1G", "4096", "1.5Ti", "-1", "0x1", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if !strings.Contains(err.Error(), "size") {
				t.Fatalf("error %q does not say what was parsed", err)
			}
			return
		}
		back, err := ParseBytes(formatUint(n))
		if err != nil || back != n {
			t.Fatalf("ParseBytes(%q) = %d, but its decimal form parses to %d, %v", s, n, back, err)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"0", "1M", "250k", "1.5", "-2", "NaN", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err == nil && (r < 0 || math.IsNaN(r) || math.IsInf(r, 0)) {
			t.Fatalf("ParseRate(%q) = %g accepted", s, r)
		}
	})
}

func formatUint(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestFormatRate(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 950: "950", 61600: "61.6k", 84.08e6: "84.08M", 2.5e9: "2.50G"} {
		if got := FormatRate(in); got != want {
			t.Errorf("FormatRate(%g) = %q, want %q", in, got, want)
		}
	}
}
