package microvm

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// cpioEntry is one file of an initramfs.
type cpioEntry struct {
	Name string // without a leading slash: "init", "bin/busybox"
	Mode uint32 // permission bits
	Type uint32 // cpioFile, cpioDir, cpioSymlink or cpioCharDev
	// Data is a file's content or a symlink's target.
	Data []byte
	// Open streams a large file's content instead of Data; Size is its length.
	Open func() (io.ReadCloser, error)
	Size int64
	// Major and Minor are a device node's numbers.
	Major, Minor uint32
}

// File types in the newc mode field.
const (
	cpioFile    = 0o100000
	cpioDir     = 0o040000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

// writeCPIO writes entries as a newc ("070701") archive the kernel unpacks
// into its rootfs. The output depends only on the entries: they are sorted
// by name, and owners, times and inode numbers are fixed, so the same
// inputs give the same bytes (a reproducible image).
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	sorted := append([]cpioEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	bw := bufio.NewWriterSize(w, 1<<20)
	var off int64
	write := func(b []byte) error {
		n, err := bw.Write(b)
		off += int64(n)
		return err
	}
	pad := func() error {
		if r := off % 4; r != 0 {
			return write(make([]byte, 4-r))
		}
		return nil
	}
	for i, e := range sorted {
		name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
		if name == "" {
			return fmt.Errorf("cpio: empty name")
		}
		size := int64(len(e.Data))
		if e.Open != nil {
			size = e.Size
		}
		if e.Type == cpioDir || e.Type == cpioCharDev {
			size = 0
		}
		nlink := 1
		if e.Type == cpioDir {
			nlink = 2
		}
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			i+1, e.Type|e.Mode&0o7777, 0, 0, nlink, 0, size, 0, 0, e.Major, e.Minor, len(name)+1, 0)
		if err := write([]byte(hdr + name + "\x00")); err != nil {
			return err
		}
		if err := pad(); err != nil {
			return err
		}
		if size > 0 {
			if err := writeContent(e, size, write); err != nil {
				return fmt.Errorf("cpio: %s: %w", name, err)
			}
			if err := pad(); err != nil {
				return err
			}
		}
	}
	trailer := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len("TRAILER!!!")+1, 0)
	if err := write([]byte(trailer + "TRAILER!!!\x00")); err != nil {
		return err
	}
	if err := pad(); err != nil {
		return err
	}
	return bw.Flush()
}

func writeContent(e cpioEntry, size int64, write func([]byte) error) error {
	if e.Open == nil {
		return write(e.Data)
	}
	r, err := e.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			n += int64(k)
			if n > size {
				return fmt.Errorf("grew while being archived")
			}
			if werr := write(buf[:k]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if n != size {
		return fmt.Errorf("%d bytes, expected %d", n, size)
	}
	return nil
}
