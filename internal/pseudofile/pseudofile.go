// Package pseudofile reads the kernel's pseudo files (procfs, sysfs,
// cgroupfs) the agent reads every round: /proc/vmstat, /proc/swaps, PSI,
// zswap's parameters, and a few files and the directory of every workload's
// cgroup, hundreds on a Kubernetes node.
//
// It reads with plain system calls into buffers it reuses. os.ReadFile
// would also stat each file, create an os.File with a finalizer and try to
// register it with the runtime's poller; os.ReadDir would allocate an entry
// for each of the dozens of control files in a cgroup directory; and a
// fresh buffer per read was most of the agent's garbage.
package pseudofile

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// buffers hold file contents and directory listings while they are parsed.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBytes: a buffer grown past this (a cgroup.procs of thousands of
// processes) goes to the garbage collector rather than back to the pool.
const maxPooledBytes = 64 << 10

func borrow() *[]byte { return buffers.Get().(*[]byte) }

func giveBack(b *[]byte) {
	if cap(*b) <= maxPooledBytes {
		buffers.Put(b)
	}
}

// Parse reads the file at path and returns what parse makes of its
// content. parse must not keep the slice. Errors are *os.PathError, as
// os.ReadFile's.
func Parse[T any](path string, parse func([]byte) (T, error)) (T, error) {
	return ParseAt(unix.AT_FDCWD, "", path, parse)
}

// ParseAt is Parse for the file name in the directory dir, open as dirfd
// (or not open: unix.AT_FDCWD).
func ParseAt[T any](dirfd int, dir, name string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	if dirfd == unix.AT_FDCWD && dir != "" {
		name, dir = filepath.Join(dir, name), ""
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return zero, &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
	}
	defer unix.Close(fd)
	b := borrow()
	defer giveBack(b)
	buf := (*b)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
			*b = buf
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return zero, &os.PathError{Op: "read", Path: filepath.Join(dir, name), Err: err}
		}
		if n == 0 {
			return parse(buf)
		}
		buf = buf[:len(buf)+n]
	}
}

// ReadString reads a small file whole, as a string.
func ReadString(path string) (string, error) {
	return Parse(path, func(b []byte) (string, error) { return string(b), nil })
}

// The fields of a linux_dirent64, as getdents64 writes them.
var (
	direntReclen = unsafe.Offsetof(unix.Dirent{}.Reclen)
	direntType   = unsafe.Offsetof(unix.Dirent{}.Type)
	direntName   = unsafe.Offsetof(unix.Dirent{}.Name)
)

// OpenDir is how a directory to list is opened: a symbolic link is not
// followed.
const OpenDir = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW

// AppendSubdirs appends the names of the subdirectories of the directory
// open as fd (at dir, for messages) to names. Only directories get a
// string: the type comes with each entry from getdents (a stat for a file
// system that gives none).
func AppendSubdirs(names []string, fd int, dir string) ([]string, error) {
	b := borrow()
	defer giveBack(b)
	buf := (*b)[:cap(*b)]
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, &os.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		for rec := buf[:n]; len(rec) > int(direntName); {
			reclen := int(binary.NativeEndian.Uint16(rec[direntReclen:]))
			if reclen <= int(direntName) || reclen > len(rec) {
				return names, fmt.Errorf("getdents %s: malformed entry", dir)
			}
			name := rec[direntName:reclen]
			name = name[:max(0, slices.Index(name, 0))]
			typ := rec[direntType]
			rec = rec[reclen:]
			if len(name) == 0 || string(name) == "." || string(name) == ".." {
				continue
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					typ = unix.DT_DIR
				}
			}
			if typ == unix.DT_DIR {
				names = append(names, string(name))
			}
		}
	}
}
