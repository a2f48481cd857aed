package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestScanPIDs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "\n", want: nil},
		{in: "1\n", want: []int{1}},
		{in: "101\n102\n", want: []int{101, 102}},
		{in: "7", want: []int{7}},
		{in: "3 4\t5\n\n6\n", want: []int{3, 4, 5, 6}},
		{in: "12x\n", wantErr: true},
		{in: "-1\n", wantErr: true},
	} {
		var got []int
		err := scanPIDs([]byte(tc.in), "g", func(pid int) { got = append(got, pid) })
		if (err != nil) != tc.wantErr || (!tc.wantErr && !slices.Equal(got, tc.want)) {
			t.Errorf("scanPIDs(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// FuzzScanPIDs checks the hand-written scanner against fields and Atoi.
func FuzzScanPIDs(f *testing.F) {
	f.Add([]byte("101\n102\n"))
	f.Add([]byte("1 2\t3"))
	f.Add([]byte("9x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []int
		err := scanPIDs(b, "g", func(pid int) { got = append(got, pid) })
		var want []int
		for _, field := range strings.FieldsFunc(string(b), func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }) {
			if strings.Trim(field, "0123456789") != "" {
				if err == nil {
					t.Fatalf("scanPIDs(%q) accepted %q", b, field)
				}
				return
			}
			n, perr := strconv.Atoi(field)
			if perr != nil {
				return // beyond int: no PID is
			}
			want = append(want, n)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("scanPIDs(%q) = %v, %v; want %v", b, got, err, want)
		}
	})
}

// pidLines is a cgroup.procs content of PIDs first to first+n-1.
func pidLines(first, n int) string {
	var b strings.Builder
	for pid := first; pid < first+n; pid++ {
		fmt.Fprintf(&b, "%d\n", pid)
	}
	return b.String()
}

// A tree as a pod's on cgroup v1: processes only in the leaves, dozens of
// control files beside each group, and a group with more processes than
// a pooled buffer keeps. Each part is larger than one read or one getdents
// call takes.
func TestWalkGroupsFixture(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"pod/cgroup.procs":          "",
		"pod/a/cgroup.procs":        "10\n11\n",
		"pod/a/deep/cgroup.procs":   "12\n",
		"pod/b/cgroup.procs":        pidLines(1000, 15000), // 90 KB
		"pod/empty/cgroup.procs":    "",
		"pod/b/memory.stat":         "",
		"pod/a/deep/memory.current": "0\n",
	}
	for i := range 300 {
		files[fmt.Sprintf("pod/memory.control_file_%03d", i)] = ""
	}
	writeTree(t, root, files)
	if err := os.Symlink(filepath.Join(root, "pod/a"), filepath.Join(root, "pod/link-to-a")); err != nil {
		t.Fatal(err)
	}
	g := &v1Group{path: filepath.Join(root, "pod")}

	var visited []string
	if err := walkGroups(g.path, func(_ int, dir string) { visited = append(visited, strings.TrimPrefix(dir, root+"/")) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(visited)
	if want := []string{"pod", "pod/a", "pod/a/deep", "pod/b", "pod/empty"}; !slices.Equal(visited, want) {
		t.Errorf("walked %v, want %v (groups only, no symlink)", visited, want)
	}
	if n, err := CountProcesses(g); n != 15003 || err != nil {
		t.Errorf("CountProcesses = %d, %v; want 15003", n, err)
	}
	pids, err := TreeProcs(g)
	slices.Sort(pids)
	if err != nil || len(pids) != 15003 || pids[0] != 10 || pids[2] != 12 || pids[3] != 1000 || pids[len(pids)-1] != 15999 {
		t.Errorf("TreeProcs = %d PIDs, %v", len(pids), err)
	}
	kids, err := g.Children()
	var names []string
	for _, k := range kids {
		names = append(names, filepath.Base(k.Path()))
	}
	if want := []string{"a", "b", "empty"}; err != nil || !slices.Equal(names, want) {
		t.Errorf("Children = %v, %v; want %v", names, err, want)
	}
}

// A group removed meanwhile has no processes and says so.
func TestCountProcessesOfAGroupGone(t *testing.T) {
	n, err := CountProcesses(&v1Group{path: filepath.Join(t.TempDir(), "gone")})
	if n != 0 || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CountProcesses = %d, %v; want 0 and a does-not-exist error", n, err)
	}
}

// BenchmarkCountProcesses counts a pod-like tree (as on cgroup v1: 30
// control files a group, a pause and an application container) with the
// package's walk and, as the reference in the same run, with the standard
// library's (filepath.WalkDir and os.ReadFile). Compare the two lines'
// ns/op and allocs/op.
func BenchmarkCountProcesses(b *testing.B) {
	root := b.TempDir()
	files := map[string]string{}
	for _, group := range []string{"pod", "pod/pause", "pod/app"} {
		for i := range 30 {
			files[fmt.Sprintf("%s/memory.file_%02d", group, i)] = "0\n"
		}
		files[group+"/cgroup.procs"] = ""
	}
	files["pod/pause/cgroup.procs"], files["pod/app/cgroup.procs"] = "100\n", "200\n201\n"
	writeTree(b, root, files)
	g := &v1Group{path: filepath.Join(root, "pod")}
	b.Run("walkGroups", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if n, err := CountProcesses(g); n != 3 || err != nil {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("reference-WalkDir", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			filepath.WalkDir(g.path, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					content, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
					n += len(strings.Fields(string(content)))
				}
				return nil
			})
			if n != 3 {
				b.Fatal(n)
			}
		}
	})
}
