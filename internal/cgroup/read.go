package cgroup

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The agent reads a few control files of every workload, and walks every
// workload's tree, at each refresh: hundreds of pods on a node. The reads
// here use plain system calls into reused buffers. os.ReadFile would also
// stat each file and register it with the runtime's poller, os.ReadDir
// would allocate an entry for each of the dozens of control files in a
// cgroup directory, and a fresh buffer per read was most of the agent's
// garbage.

// readBuffers hold control-file contents and directory listings while they
// are parsed.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBytes: a buffer grown past this (a cgroup.procs of thousands of
// processes) goes to the garbage collector rather than back to the pool.
const maxPooledBytes = 64 << 10

func borrowBuffer() *[]byte { return readBuffers.Get().(*[]byte) }

func returnBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBytes {
		readBuffers.Put(b)
	}
}

// parseControlFile reads the file name in the directory dir, open as dirfd
// (or not open: unix.AT_FDCWD), and returns what parse makes of its
// content. parse must not keep the slice.
func parseControlFile[T any](dirfd int, dir, name string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	if dirfd == unix.AT_FDCWD && dir != "" {
		name, dir = filepath.Join(dir, name), ""
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return zero, &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
	}
	defer unix.Close(fd)
	b := borrowBuffer()
	defer returnBuffer(b)
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

// readFile parses the control file at path.
func readFile[T any](path string, parse func([]byte) (T, error)) (T, error) {
	return parseControlFile(unix.AT_FDCWD, "", path, parse)
}

// readUint reads a one-number file; "max" (v2) is Unlimited.
func readUint(path string) (uint64, error) { return readFile(path, ParseLimit) }

func readKeyValues(path string) (map[string]uint64, error) {
	return readFile(path, func(b []byte) (map[string]uint64, error) {
		kv, err := ParseKeyValues(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return kv, nil
	})
}

// appendProcs appends the PIDs of the group open as dirfd (at dir) to pids.
func appendProcs(pids []int, dirfd int, dir string) ([]int, error) {
	return parseControlFile(dirfd, dir, "cgroup.procs", func(b []byte) ([]int, error) {
		err := scanPIDs(b, dir, func(pid int) { pids = append(pids, pid) })
		return pids, err
	})
}

func readProcs(dir string) ([]int, error) {
	return appendProcs(nil, unix.AT_FDCWD, dir)
}

// countProcs counts the PIDs of the group open as dirfd without keeping
// them.
func countProcs(dirfd int, dir string) (int, error) {
	return parseControlFile(dirfd, dir, "cgroup.procs", func(b []byte) (int, error) {
		n := 0
		err := scanPIDs(b, dir, func(int) { n++ })
		return n, err
	})
}

// scanPIDs calls found for each PID of a cgroup.procs content: decimal
// numbers separated by white space (one a line).
func scanPIDs(b []byte, dir string, found func(pid int)) error {
	pid, digits := 0, 0
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			pid, digits = pid*10+int(c-'0'), digits+1
		case c == '\n' || c == ' ' || c == '\t':
			if digits > 0 {
				found(pid)
			}
			pid, digits = 0, 0
		default:
			return fmt.Errorf("parse %s/cgroup.procs: %q at byte %d", dir, c, i)
		}
	}
	if digits > 0 {
		found(pid)
	}
	return nil
}

// direntName, direntType and direntReclen locate a linux_dirent64's fields.
var (
	direntReclen = unsafe.Offsetof(unix.Dirent{}.Reclen)
	direntType   = unsafe.Offsetof(unix.Dirent{}.Type)
	direntName   = unsafe.Offsetof(unix.Dirent{}.Name)
)

// appendSubgroups appends the names of the subdirectories of the directory
// open as fd (at dir) to names. Only directories get a string: the type
// comes with each entry from getdents (a stat for a file system that gives
// none).
func appendSubgroups(names []string, fd int, dir string) ([]string, error) {
	b := borrowBuffer()
	defer returnBuffer(b)
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

const openDir = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW

// walkGroups calls visit for dir and every group below it, parents first,
// with the group's directory open as dirfd. It goes on past a directory it
// cannot open or list (a container removed meanwhile) and returns the
// first such error.
func walkGroups(dir string, visit func(dirfd int, dir string)) error {
	fd, err := unix.Open(dir, openDir, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return walkGroupsAt(fd, dir, visit)
}

// walkGroupsAt walks the group open as fd, and closes fd.
func walkGroupsAt(fd int, dir string, visit func(dirfd int, dir string)) error {
	defer unix.Close(fd)
	visit(fd, dir)
	names, err := appendSubgroups(nil, fd, dir)
	for _, name := range names {
		child, cerr := unix.Openat(fd, name, openDir, 0)
		if cerr != nil {
			err = cmp.Or(err, error(&os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: cerr}))
			continue
		}
		err = cmp.Or(err, walkGroupsAt(child, filepath.Join(dir, name), visit))
	}
	return err
}

// childDirs lists the paths of dir's subdirectories, sorted.
func childDirs(dir string) ([]string, error) {
	fd, err := unix.Open(dir, openDir, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	names, err := appendSubgroups(nil, fd, dir)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for i, name := range names {
		names[i] = filepath.Join(dir, name)
	}
	return names, nil
}

// CountProcesses counts the processes in g and all its descendant groups:
// libvirt on cgroup v2 keeps QEMU in machine-qemu-N.scope/libvirt/emulator
// and vcpuN, KubeVirt pods in container scopes, so a workload's own
// cgroup.procs is often empty.
func CountProcesses(g Group) (int, error) {
	total := 0
	var firstErr error
	err := walkGroups(g.Path(), func(dirfd int, dir string) {
		n, err := countProcs(dirfd, dir)
		total += n
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			firstErr = cmp.Or(firstErr, err)
		}
	})
	return total, cmp.Or(firstErr, err)
}

// TreeProcs lists the processes in g and all its descendant groups.
func TreeProcs(g Group) ([]int, error) {
	var all []int
	var firstErr error
	err := walkGroups(g.Path(), func(dirfd int, dir string) {
		var err error
		all, err = appendProcs(all, dirfd, dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			firstErr = cmp.Or(firstErr, err)
		}
	})
	return all, cmp.Or(firstErr, err)
}
