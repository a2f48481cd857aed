package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree creates files from a map of relative path to content.
func writeTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A v2 fixture tree: the file-level code is tested here; the kernel's v2
// behaviour is tested for real inside a guest once the micro-VM backend lands.
func TestV2FixtureTree(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"machine.slice/memory.current":             "1000000\n",
		"machine.slice/vm-a/memory.current":        "600000\n",
		"machine.slice/vm-a/memory.swap.current":   "4096\n",
		"machine.slice/vm-a/memory.stat":           "anon 500000\ninactive_file 100000\nactive_file 0\n",
		"machine.slice/vm-a/memory.max":            "1073741824\n",
		"machine.slice/vm-a/memory.swap.max":       "max\n",
		"machine.slice/vm-a/memory.events":         "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
		"machine.slice/vm-a/memory.pressure":       "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"machine.slice/vm-a/cgroup.procs":          "101\n102\n",
		"machine.slice/vm-a/cgroup.kill":           "",
		"machine.slice/vm-b/memory.current":        "1\n",
		"machine.slice/vm-b/memory.swap.current":   "0\n",
		"machine.slice/vm-b/memory.stat":           "garbage line here\n",
		"machine.slice/vm-b/memory.max":            "max\n",
		"machine.slice/vm-b/memory.swap.max":       "0\n",
		"machine.slice/vm-b/memory.events":         "oom_kill 0\n",
		"machine.slice/vm-b/cgroup.procs":          "",
		"machine.slice/not-a-group.txt":            "",
		"machine.slice/vm-a/nested/cgroup.procs":   "",
		"machine.slice/vm-a/nested/memory.current": "0\n",
	})
	scope, err := OpenAt(V2, root, "machine.slice")
	if err != nil {
		t.Fatal(err)
	}
	kids, err := scope.Children()
	if err != nil || len(kids) != 2 {
		t.Fatalf("Children = %d, %v", len(kids), err)
	}
	a := kids[0]
	m, err := a.Memory()
	want := Memory{UsageBytes: 600000, WorkingSetBytes: 500000, SwapBytes: 4096, LimitBytes: 1 << 30, SwapLimitBytes: Unlimited, OOMKills: 1}
	if err != nil || m != want {
		t.Fatalf("vm-a Memory = %+v, %v; want %+v", m, err, want)
	}
	if err := a.SetSwapLimit(256 << 20); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Path(), "memory.swap.max")); string(b) != "268435456" {
		t.Fatalf("memory.swap.max = %q", b)
	}
	if pids, err := a.Procs(); err != nil || len(pids) != 2 || pids[0] != 101 {
		t.Fatalf("Procs = %v, %v", pids, err)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Path(), "cgroup.kill")); string(b) != "1" {
		t.Fatalf("cgroup.kill = %q", b)
	}
	if !strings.HasSuffix(a.PressureFile(), "vm-a/memory.pressure") {
		t.Fatalf("PressureFile = %q", a.PressureFile())
	}
	if _, err := kids[1].Memory(); err == nil {
		t.Fatal("vm-b's malformed memory.stat was accepted")
	}
	if _, err := OpenAt(V2, root, "no.slice"); err == nil {
		t.Fatal("missing scope accepted")
	}
}

func TestParseLimit(t *testing.T) {
	tests := map[string]uint64{"max\n": Unlimited, "0": 0, "1073741824\n": 1 << 30, "9223372036854771712": Unlimited}
	for in, want := range tests {
		if got, err := ParseLimit([]byte(in)); err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "lots", "1 2"} {
		if _, err := ParseLimit([]byte(bad)); err == nil {
			t.Errorf("ParseLimit(%q) accepted", bad)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"max", "0", "123\n", "9223372036854771712", "-1", " max "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseLimit(b)
		if err == nil && n >= 1<<62 && n != Unlimited {
			t.Fatalf("huge limit %d not mapped to Unlimited", n)
		}
	})
}

func FuzzParseKeyValues(f *testing.F) {
	for _, s := range []string{"oom_kill 1\nunder_oom 0\n", "cache 4096\nrss 0", "a b c", "x -1", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := ParseKeyValues(b)
		if err != nil {
			return
		}
		for k := range kv {
			if strings.ContainsAny(k, " \t\n") || k == "" {
				t.Fatalf("bad key %q", k)
			}
		}
	})
}

func TestStatValue(t *testing.T) {
	b := []byte("cache 10\ntotal_inactive_file 4096\ninactive_file 7\n")
	for key, want := range map[string]uint64{"total_inactive_file": 4096, "inactive_file": 7, "cache": 10} {
		if got, err := StatValue(b, key); err != nil || got != want {
			t.Errorf("StatValue(%s) = %d, %v", key, got, err)
		}
	}
	for _, bad := range []string{"inactive", "missing_key"} {
		if _, err := StatValue(b, bad); err == nil {
			t.Errorf("StatValue(%s) found a value", bad)
		}
	}
	if _, err := StatValue([]byte("inactive_file x\n"), "inactive_file"); err == nil {
		t.Error("non-numeric value accepted")
	}
}

func FuzzStatValue(f *testing.F) {
	f.Add([]byte("inactive_file 5\n"), "inactive_file")
	f.Add([]byte("a 1\nb"), "b")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if _, err := StatValue(b, key); err == nil && !strings.Contains(string(b), key+" ") {
			t.Fatalf("found %q in %q", key, b)
		}
	})
}
