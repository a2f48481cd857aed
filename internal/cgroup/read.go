package cgroup

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/pseudofile"
)

// readUint reads a one-number file; "max" (v2) is Unlimited.
func readUint(path string) (uint64, error) { return pseudofile.Parse(path, ParseLimit) }

func readKeyValues(path string) (map[string]uint64, error) {
	return pseudofile.Parse(path, func(b []byte) (map[string]uint64, error) {
		kv, err := ParseKeyValues(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return kv, nil
	})
}

// scanProcs calls found for each PID in the group open as dirfd (at dir).
func scanProcs(dirfd int, dir string, found func(pid int)) error {
	_, err := pseudofile.ParseAt(dirfd, dir, "cgroup.procs", func(b []byte) (struct{}, error) {
		return struct{}{}, scanPIDs(b, dir, found)
	})
	return err
}

// appendProcs appends the PIDs of the group open as dirfd (at dir) to pids.
func appendProcs(pids []int, dirfd int, dir string) ([]int, error) {
	err := scanProcs(dirfd, dir, func(pid int) { pids = append(pids, pid) })
	return pids, err
}

func readProcs(dir string) ([]int, error) {
	return appendProcs(nil, unix.AT_FDCWD, dir)
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

// walkGroups calls visit for dir and every group below it, parents first,
// with the group's directory open as dirfd. It goes on past a directory it
// cannot open or list (a container removed meanwhile) and returns the
// first such error.
func walkGroups(dir string, visit func(dirfd int, dir string)) error {
	fd, err := unix.Open(dir, pseudofile.OpenDir, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return walkGroupsAt(fd, dir, visit)
}

// walkGroupsAt walks the group open as fd, and closes fd.
func walkGroupsAt(fd int, dir string, visit func(dirfd int, dir string)) error {
	defer unix.Close(fd)
	visit(fd, dir)
	names, err := pseudofile.AppendSubdirs(nil, fd, dir)
	for _, name := range names {
		child, cerr := unix.Openat(fd, name, pseudofile.OpenDir, 0)
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
	fd, err := unix.Open(dir, pseudofile.OpenDir, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	names, err := pseudofile.AppendSubdirs(nil, fd, dir)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for i, name := range names {
		names[i] = filepath.Join(dir, name)
	}
	return names, nil
}

// scanTree calls found for each PID in g and all its descendant groups; a
// group removed meanwhile is no error.
func scanTree(g Group, found func(pid int)) error {
	var firstErr error
	err := walkGroups(g.Path(), func(dirfd int, dir string) {
		if err := scanProcs(dirfd, dir, found); err != nil && !errors.Is(err, os.ErrNotExist) {
			firstErr = cmp.Or(firstErr, err)
		}
	})
	return cmp.Or(firstErr, err)
}

// CountProcesses counts the processes in g and all its descendant groups
// without keeping their PIDs: libvirt on cgroup v2 keeps QEMU in
// machine-qemu-N.scope/libvirt/emulator and vcpuN, KubeVirt pods in
// container scopes, so a workload's own cgroup.procs is often empty.
func CountProcesses(g Group) (int, error) {
	n := 0
	err := scanTree(g, func(int) { n++ })
	return n, err
}

// TreeProcs lists the processes in g and all its descendant groups.
func TreeProcs(g Group) ([]int, error) {
	var all []int
	err := scanTree(g, func(pid int) { all = append(all, pid) })
	return all, err
}
