package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A directory made in a watched one, or renamed into it, is reported; a
// file written there is not.
func TestWatchChildren(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	made := make(chan struct{}, 8)
	w, err := WatchChildren(ctx, func() { made <- struct{}{} }, func(err error) { t.Errorf("watch failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-made:
			if !want {
				t.Errorf("%s was reported", what)
			}
		case <-time.After(map[bool]time.Duration{true: 5 * time.Second, false: 200 * time.Millisecond}[want]):
			if want {
				t.Errorf("%s was not reported within 5 s", what)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("a file written", false)
	if err := os.Mkdir(filepath.Join(dir, "vm-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	expect("a group made", true)
	if err := os.Mkdir(filepath.Join(elsewhere, "vm-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(elsewhere, "vm-b"), filepath.Join(dir, "vm-b")); err != nil {
		t.Fatal(err)
	}
	expect("a group renamed into place", true)
}
