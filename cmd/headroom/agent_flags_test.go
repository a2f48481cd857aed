package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/agent"
)

// Every agent flag finds the configuration key it sets, and that key is
// one --print-config prints.
func TestAgentFlagsKnowTheirKeys(t *testing.T) {
	b, err := yaml.Marshal(agent.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for k, v := range doc {
		keys[k] = true
		if section, ok := v.(map[string]any); ok {
			for sub := range section {
				keys[k+"."+sub] = true
			}
		}
	}
	seen := map[string]string{}
	for _, cf := range agentConfigFlags() {
		k := cf.key()
		if !keys[k] {
			t.Errorf("--%s: key %q is not a configuration key", cf.name, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("--%s and --%s both set %q", cf.name, other, k)
		}
		seen[k] = cf.name
	}
}

func TestNamesKey(t *testing.T) {
	tests := []struct {
		msg, key string
		want     bool
	}{
		{"intervalSeconds must be in [0.01,10], got 0", "intervalSeconds", true},
		{"ksmIdleCPUPercent must be in [0,ksmMaxCPUPercent], got 80", "ksmMaxCPUPercent", true},
		{"discoverySeconds must be in [intervalSeconds,60], got 0.1", "intervalSeconds", true},
		{"balloonPolicy must be headroom or mom", "balloon", false},
		{"kubernetes.swap must be auto", "swap", false},
		{"kubernetes.swap must be auto", "kubernetes.swap", true},
		{"scope must be a cgroup path", "scope", true},
		{"", "scope", false},
	}
	for _, tt := range tests {
		if got := namesKey(tt.msg, tt.key); got != tt.want {
			t.Errorf("namesKey(%q, %q) = %v, want %v", tt.msg, tt.key, got, tt.want)
		}
	}
}

// A bad value typed as a flag is refused naming the flag; the same value
// from a configuration file names the key alone.
func TestAgentBadValueNamesTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "0"}, "intervalSeconds must be in [0.01,10], got 0 (set by --interval)"},
		{[]string{"--eviction-grace", "40s"}, "after evictionGraceSeconds (40) to force a victim out (set by --eviction-grace)"},
		{[]string{"--kubernetes-swap", "never"}, `got "never" (set by --kubernetes-swap)`},
		{[]string{"--libvirt-resume"}, "needs libvirt.uri (--libvirt-uri): only libvirt domains are parked"},
	}
	for _, tt := range tests {
		r := runHeadroom(t, append([]string{"agent"}, tt.args...)...)
		if r.code != 2 || !strings.HasSuffix(strings.TrimSpace(r.stderr), tt.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and one line ending %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("intervalSeconds: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runHeadroom(t, "agent", "--config", file, "--dry-run")
	if r.code != 2 || strings.Contains(r.stderr, "set by") || !strings.Contains(r.stderr, "intervalSeconds must be") {
		t.Errorf("from --config: exit %d, stderr %q", r.code, r.stderr)
	}
}
