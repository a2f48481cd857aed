package pseudofile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A file larger than the pooled buffer is read whole, and so is every
// read after it (the grown buffer is not kept).
func TestParseReadsWholeFiles(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 4097, 100 << 10, 3} {
		want := bytes.Repeat([]byte("0123456789\n"), size/11+1)[:size]
		p := filepath.Join(dir, fmt.Sprint(size))
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Parse(p, func(b []byte) ([]byte, error) { return bytes.Clone(b), nil })
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Parse of %d bytes: got %d bytes, %v", size, len(got), err)
		}
	}
	if got, err := ReadString("/proc/sys/kernel/ostype"); err != nil || got != "Linux\n" {
		t.Errorf("ReadString(/proc/sys/kernel/ostype) = %q, %v", got, err)
	}
}

// A missing file is os.ErrNotExist, its path named, as os.ReadFile says.
func TestParseMissingFile(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, OpenDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_, err = ParseAt(fd, dir, "gone", func(b []byte) (int, error) { return len(b), nil })
	var pathErr *os.PathError
	if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &pathErr) || pathErr.Path != filepath.Join(dir, "gone") {
		t.Errorf("ParseAt(gone) = %v, want a does-not-exist error naming %s", err, filepath.Join(dir, "gone"))
	}
	parseErr := errors.New("bad content")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAt(fd, dir, "f", func([]byte) (int, error) { return 0, parseErr }); err != parseErr {
		t.Errorf("ParseAt returned %v, want parse's own error", err)
	}
}

// Only directories are listed, however many entries take more than one
// getdents call; a symbolic link to a directory is not one.
func TestAppendSubdirs(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 400 {
		name := fmt.Sprintf("entry-with-a-long-name-%03d", i)
		var err error
		if i%4 == 0 {
			want = append(want, name)
			err = os.Mkdir(filepath.Join(dir, name), 0o755)
		} else {
			err = os.WriteFile(filepath.Join(dir, name), nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, want[0]), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, OpenDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got, err := AppendSubdirs([]string{"kept"}, fd, dir)
	slices.Sort(got[1:])
	if err != nil || got[0] != "kept" || !slices.Equal(got[1:], want) {
		t.Errorf("AppendSubdirs = %d names (first %q), %v; want kept and the %d directories", len(got), got[0], err, len(want))
	}
}
