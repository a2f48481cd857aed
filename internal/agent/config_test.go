package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration file's mistakes are said in its own terms: its keys
// (with the one a typo away), YAML's values, its lines; never the JSON
// decoder's or Go's types.
func TestConfigFileErrorsSpeakItsTerms(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	for _, c := range []struct{ yaml, want string }{
		{"intervalSecond: 0.5\n", `agent.yaml: unknown key "intervalSecond" (did you mean intervalSeconds?)`},
		{"kubernetes:\n  cgroupRot: /\n", `unknown key "cgroupRot" (did you mean cgroupRoot?)`},
		{"frobnicate: 1\n", `unknown key "frobnicate" (headroom agent --print-config lists the keys)`},
		{"kubernetes:\n  evictionGraceSeconds: 3\n", `key "evictionGraceSeconds" is not one of its section's`},
		{"intervalSeconds: fast\n", "key intervalSeconds: want a number, got a string"},
		{"maxAverageSwapInPagesPerSecond: x\n", "key maxAverageSwapInPagesPerSecond: want a number, got a string"},
		{"ignoreCgroups: 5\n", "key ignoreCgroups: want a list of strings, got a number"},
		{"intervalSeconds: [1, 2]\n", "key intervalSeconds: want a number, got a list"},
		{"kubernetes: 3\n", "key kubernetes: want keys and values, got a number"},
		{"a: [1\n", "agent.yaml: line 1: did not find expected"},
	} {
		os.WriteFile(file, []byte(c.yaml), 0o644)
		cfg := DefaultConfig()
		err := cfg.LoadFile(file)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "JSON") || strings.Contains(err.Error(), "float64") {
			t.Errorf("%q: %v; want %q", c.yaml, err, c.want)
		}
	}
}
