// Package units parses and formats the quantities operators type on the
// command line: byte sizes ("14Gi", "512Mi", "1G", "4096") and plain
// non-negative numbers with optional SI suffixes for rates ("1M", "250k").
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SizeForm describes the accepted size syntax, for error messages.
const SizeForm = `a byte count with an optional unit: Ki, Mi, Gi, Ti (powers of 1024), K, M, G, T (powers of 1000), optionally followed by "B" (e.g. 512Mi, 14Gi, 1G, 4096)`

var sizeUnits = []struct {
	suffix     string
	multiplier uint64
}{
	// Longest suffixes first so "Ki" is not read as "K" followed by "i".
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40}, {"pi", 1 << 50},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12}, {"p", 1e15},
}

// ParseBytes parses a byte size such as "14Gi", "1.5GiB", "1G" or "4096".
// Binary suffixes (Ki, Mi, Gi, Ti, Pi) are powers of 1024 and decimal ones
// (K, M, G, T, P) powers of 1000, as in Kubernetes quantities; a trailing "B"
// is allowed. Fractions are allowed but the result must be a whole number of
// bytes after rounding down.
func ParseBytes(s string) (uint64, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty size")
	}
	lower := strings.ToLower(s)
	lower = strings.TrimSuffix(lower, "b")
	multiplier := uint64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			multiplier = u.multiplier
			lower = strings.TrimSuffix(lower, u.suffix)
			break
		}
	}
	lower = strings.TrimSpace(lower)
	if lower == "" || strings.ContainsAny(lower, "+-eEnNxX_") {
		// Reject signs, exponents, hex, underscores, "inf" and "nan": sizes are
		// plain decimal numbers.
		return 0, fmt.Errorf("invalid size %q", orig)
	}
	if !strings.Contains(lower, ".") {
		n, err := strconv.ParseUint(lower, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q", orig)
		}
		if n != 0 && multiplier > math.MaxUint64/n {
			return 0, fmt.Errorf("size %q is too large", orig)
		}
		return n * multiplier, nil
	}
	f, err := strconv.ParseFloat(lower, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q", orig)
	}
	v := f * float64(multiplier)
	if v >= math.MaxUint64 {
		return 0, fmt.Errorf("size %q is too large", orig)
	}
	return uint64(v), nil
}

// FormatBytes renders n with a binary unit and up to one decimal: "14.0 GiB".
func FormatBytes(n uint64) string {
	return formatBytesIn(n, n, 1)
}

// formatBytesIn renders n in the binary unit FormatBytes gives scale, with
// digits decimals.
func formatBytesIn(n, scale uint64, digits int) string {
	const unit = 1024
	if scale < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := scale / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.*f %ciB", digits, float64(n)/float64(div), "KMGTP"[exp])
}

// FormatBytesApart renders a and b in one unit with as many decimals as
// tell them apart, so that a comparison never reads "1.3 GiB exceeds
// 1.3 GiB"; sizes one decimal already tells apart read as FormatBytes's.
func FormatBytesApart(a, b uint64) (string, string) {
	fa, fb := FormatBytes(a), FormatBytes(b)
	if fa != fb || a == b {
		return fa, fb
	}
	scale := max(a, b)
	for digits := 2; digits <= 3; digits++ { // one is FormatBytes's, equal
		if fa, fb = formatBytesIn(a, scale, digits), formatBytesIn(b, scale, digits); fa != fb {
			return fa, fb
		}
	}
	return fmt.Sprintf("%d B", a), fmt.Sprintf("%d B", b)
}

// RateForm describes the accepted rate syntax, for error messages.
const RateForm = `a non-negative number with an optional k, M or G suffix (e.g. 0, 5000, 250k, 1M)`

// ParseRate parses a non-negative count per second such as "5000", "250k"
// or "1.5M". Suffixes are decimal (k = 1000).
func ParseRate(s string) (float64, error) {
	orig := s
	s = strings.TrimSpace(s)
	multiplier := 1.0
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		multiplier, s = 1e3, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		multiplier, s = 1e6, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		multiplier, s = 1e9, s[:len(s)-1]
	}
	if s == "" || strings.ContainsAny(s, "+-eEnNxXiI_") {
		return 0, fmt.Errorf("invalid rate %q", orig)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid rate %q", orig)
	}
	return f * multiplier, nil
}

// ParseFraction parses a number in [0,1]: "0.8", "1", "0".
func ParseFraction(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("invalid fraction %q", s)
	}
	return f, nil
}

// FormatRate renders a per-second rate compactly with a k, M or G suffix:
// "84.08M", "61.6k", "950".
func FormatRate(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
