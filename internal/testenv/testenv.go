// Package testenv gives system tests real machine facilities (swap files,
// memory cgroups) that are restored when the test ends, pass or fail, and
// makes a missing facility a failure in CI instead of a silent skip.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/microvm"
)

// InCI reports whether the tests run under CI (CI=true), where a missing
// facility fails the test rather than skipping it.
func InCI() bool { return os.Getenv("CI") != "" }

// Require fails (in CI) or skips (elsewhere) the test when ok is false.
func Require(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("missing facility: %s", what)
	}
	t.Skipf("missing facility: %s", what)
}

// RequireRoot requires running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "root (system tests change swap and cgroups)")
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SwapFile creates a swap file of sizeBytes on the test's temporary
// directory's file system and enables it; it is disabled and removed when
// the test ends.
func SwapFile(t testing.TB, sizeBytes int64) string {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"mkswap", "swapon", "swapoff"} {
		_, err := exec.LookPath(tool)
		Require(t, err == nil, tool+" (util-linux)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "headroom-swap-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "swapfile")
	t.Cleanup(func() {
		if err := run("swapoff", path); err != nil && swapActive(path) {
			t.Errorf("restore: %v", err)
		}
		os.RemoveAll(dir)
	})
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// fallocate gives swapon a file without holes.
	err = syscall.Fallocate(int(f.Fd()), 0, 0, sizeBytes)
	f.Close()
	if err != nil {
		t.Fatalf("fallocate swap file: %v", err)
	}
	if err := run("mkswap", path); err != nil {
		t.Fatal(err)
	}
	if err := run("swapon", path); err != nil {
		t.Fatal(err)
	}
	return path
}

func swapActive(path string) bool {
	b, _ := os.ReadFile("/proc/swaps")
	return strings.Contains(string(b), path)
}

// CgroupV1MemoryRoot is where this machine's v1 memory controller is mounted.
const CgroupV1MemoryRoot = "/sys/fs/cgroup/memory"

// ThresholdRoundOnTime reports whether an agent round that decided on a
// v1 usage threshold was the one the kernel's event woke (eventSeconds
// above 0), or a timed round that sampled the crossing before the event
// was due: the kernel checks thresholds once a group has charged or
// uncharged 128 pages on a CPU (THRESHOLDS_EVENTS_TARGET), so with groups
// charging beneath the threshold's cgroup the usage can be lagBytes past
// it before the event comes.
func ThresholdRoundOnTime(eventSeconds, overshootBytes float64, groups int) (onTime bool, lagBytes float64) {
	lagBytes = float64(128 * os.Getpagesize() * runtime.NumCPU() * groups)
	return eventSeconds > 0 || overshootBytes < lagBytes, lagBytes
}

// MemoryCgroup is a v1 memory cgroup made for one test.
type MemoryCgroup struct {
	Path string
}

// NewMemoryCgroup creates a memory cgroup with the given limit (memsw
// unlimited, so it may swap) and removes it when the test ends, after
// killing anything left in it.
func NewMemoryCgroup(t testing.TB, limitBytes int64) *MemoryCgroup {
	t.Helper()
	RequireRoot(t)
	_, err := os.Stat(filepath.Join(CgroupV1MemoryRoot, "memory.memsw.limit_in_bytes"))
	Require(t, err == nil, "cgroup v1 memory controller with swap accounting at "+CgroupV1MemoryRoot)
	var suffix [4]byte
	rand.Read(suffix[:])
	cg := &MemoryCgroup{Path: filepath.Join(CgroupV1MemoryRoot, "headroom-test-"+hex.EncodeToString(suffix[:]))}
	if err := os.Mkdir(cg.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.remove(); err != nil {
			t.Errorf("restore: %v", err)
		}
	})
	if err := cg.Write("memory.limit_in_bytes", strconv.FormatInt(limitBytes, 10)); err != nil {
		t.Fatal(err)
	}
	return cg
}

// Write sets one control file.
func (cg *MemoryCgroup) Write(file, value string) error {
	if err := os.WriteFile(filepath.Join(cg.Path, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s to %s: %w", value, file, err)
	}
	return nil
}

// ReadInt reads one numeric control file.
func (cg *MemoryCgroup) ReadInt(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(cg.Path, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Command returns a command that joins the cgroup before it execs, so the
// program's first allocation is already charged to the cgroup.
func (cg *MemoryCgroup) Command(name string, args ...string) *exec.Cmd {
	return CommandIn(cg.Path, name, args...)
}

// CommandIn returns a command that joins the cgroup directory dir (v1 or
// v2) before it execs name.
func CommandIn(dir, name string, args ...string) *exec.Cmd { return cgroup.Command(dir, name, args...) }

// binary is a program the tests build once per test process.
type binary struct {
	pkg, name string // ./cmd/headroom, headroom
	once      sync.Once
	path      string
	err       error
}

var (
	headroomBinary = &binary{pkg: "./cmd/headroom", name: "headroom"}
	idleGoBinary   = &binary{pkg: "./internal/testenv/idlego", name: "idlego"}
)

// HeadroomBinary builds cmd/headroom once per test process and returns
// its path, for system tests that run real workloads. It is built as
// `make build` builds it: static (it is also a micro-VM's /init) and
// stripped.
func HeadroomBinary(t testing.TB) string {
	t.Helper()
	return headroomBinary.build(t)
}

func (b *binary) build(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		var root string
		root, b.err = moduleRoot()
		if b.err != nil {
			return
		}
		// One place, replaced by every build (a rename: a test process
		// still running the previous binary keeps it), so test runs do
		// not leave a binary each behind.
		dir := filepath.Join(os.TempDir(), "headroom-test-bin")
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		tmp, err := os.CreateTemp(dir, ".build-")
		if err != nil {
			b.err = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp.Name(), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		b.path = filepath.Join(dir, b.name)
		b.err = os.Rename(tmp.Name(), b.path)
	})
	if b.err != nil {
		t.Fatalf("build %s: %v", b.name, b.err)
	}
	return b.path
}

// IdleGo starts a Go process that does nothing but wake every interval
// (internal/testenv/idlego) and returns its PID; it is stopped when the
// test ends. Its CPU over a window, beside an agent waking as often, is
// the floor of this machine and the Go runtime in that window: the
// reference the agent's CPU figures are read against.
func IdleGo(t testing.TB, interval time.Duration) int {
	t.Helper()
	cmd := exec.Command(idleGoBinary.build(t), "-interval", interval.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Its start-up is not the floor: measure from its first line on.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("idlego did not start: %v", err)
	}
	return cmd.Process.Pid
}

// remove kills what is left in the cgroup and its children and removes
// them all.
func (cg *MemoryCgroup) remove() error {
	g, err := cg.group()
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	return cgroup.Remove(g, 10*time.Second)
}

// group opens the test cgroup with the cgroup package.
func (cg *MemoryCgroup) group() (cgroup.Group, error) {
	if _, err := os.Stat(cg.Path); err != nil {
		return nil, err
	}
	return cgroup.OpenAt(cgroup.V1, CgroupV1MemoryRoot, strings.TrimPrefix(cg.Path, CgroupV1MemoryRoot))
}

// Child creates a child cgroup with the given memory limit (removed with
// its parent).
func (cg *MemoryCgroup) Child(t testing.TB, name string, limitBytes int64) *MemoryCgroup {
	t.Helper()
	c := &MemoryCgroup{Path: filepath.Join(cg.Path, name)}
	if err := os.Mkdir(c.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Write("memory.limit_in_bytes", strconv.FormatInt(limitBytes, 10)); err != nil {
		t.Fatal(err)
	}
	return c
}

// OOMKills sums the kernel's OOM kills in the cgroup and its children.
func (cg *MemoryCgroup) OOMKills() (uint64, error) {
	g, err := cg.group()
	if err != nil {
		return 0, err
	}
	var total uint64
	for groups := []cgroup.Group{g}; len(groups) > 0; groups = groups[1:] {
		m, err := groups[0].Memory()
		if err != nil {
			return 0, err
		}
		total += m.OOMKills
		kids, err := groups[0].Children()
		if err != nil {
			return 0, err
		}
		groups = append(groups, kids...)
	}
	return total, nil
}

// AssertRestored fails the test if a swap area whose path contains
// swapPathPart is still on, or a cgroup directory in cgroupDirs is left.
func AssertRestored(t testing.TB, swapPathPart string, cgroupDirs ...string) {
	t.Helper()
	swaps, _ := os.ReadFile("/proc/swaps")
	if strings.Contains(string(swaps), swapPathPart) {
		t.Errorf("swap left on:\n%s", swaps)
	}
	for _, dir := range cgroupDirs {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cgroup %s left behind", dir)
		}
	}
}

// moduleRoot is the directory of this module's go.mod.
// ModuleRoot is the repository's root (where go.mod is).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// TestBinary compiles a package's tests (go test -c) with the given build
// tags into a static binary, for running inside a micro-VM guest.
func TestBinary(t testing.TB, pkg, tags string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg)+".test")
	cmd := exec.Command("go", "test", "-c", "-tags", tags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v: %s", pkg, err, b)
	}
	return out
}

var (
	imageOnce sync.Once
	image     microvm.Image
	imageErr  error
)

// GuestImage returns the micro-VM guest image, built once per test process
// (from the shared cache) around HeadroomBinary; it requires QEMU.
func GuestImage(t testing.TB) microvm.Image {
	t.Helper()
	RequireRoot(t)
	_, err := exec.LookPath("qemu-system-x86_64")
	Require(t, err == nil, "qemu-system-x86_64 (apt-get install --no-install-recommends qemu-system-x86)")
	_, err = exec.LookPath("busybox")
	Require(t, err == nil, "busybox (apt-get install busybox-static)")
	bin := HeadroomBinary(t)
	imageOnce.Do(func() {
		image, imageErr = microvm.BuildImage(context.Background(), microvm.ImageOptions{Headroom: bin})
	})
	if imageErr != nil {
		t.Fatalf("guest image: %v", imageErr)
	}
	return image
}

// Buffer is a bytes.Buffer that a process's output goroutine and the test
// may use at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitVM waits up to d for a VM to end and returns how it ended.
func WaitVM(t testing.TB, vm *microvm.VM, d time.Duration) microvm.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e, err := vm.Wait(ctx)
	if err != nil {
		t.Fatalf("VM still running after %s; %s; console:\n%s", d, qemuState(vm), vm.ConsoleTail(20))
	}
	return e
}

// qemuState describes a QEMU that has not exited: what QMP says of the
// guest and where each of its threads waits in the host kernel.
func qemuState(vm *microvm.VM) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	status := "QMP status: "
	if st, err := vm.QMP().QueryStatus(ctx); err != nil {
		status += err.Error()
	} else {
		status += fmt.Sprintf("%+v", st)
	}
	dir := fmt.Sprintf("/proc/%d/task", vm.PID())
	tasks, _ := os.ReadDir(dir)
	var threads []string
	for _, task := range tasks {
		stat, _ := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		wchan, _ := os.ReadFile(filepath.Join(dir, task.Name(), "wchan"))
		// stat: "pid (name) state ..."; the name may hold spaces.
		name, state := "?", "?"
		if open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')'); open >= 0 && end > open {
			name = string(stat[open+1 : end])
			if fields := strings.Fields(string(stat[end+1:])); len(fields) > 0 {
				state = fields[0]
			}
		}
		threads = append(threads, fmt.Sprintf("%s %s %s", name, state, wchan))
	}
	return fmt.Sprintf("%s; QEMU threads (name state wchan): %s", status, strings.Join(threads, ", "))
}

// StartLoad runs `headroom load ARGS...` in the cgroup and returns once it
// has populated its memory; stop (also run at the test's end) kills it.
func (cg *MemoryCgroup) StartLoad(t testing.TB, args ...string) (stop func()) {
	t.Helper()
	cmd := cg.Command(HeadroomBinary(t), append([]string{"load"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	t.Cleanup(stop)
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "populated") {
	}
	go func() {
		for sc.Scan() { // keep the pipe drained
		}
	}()
	return stop
}

// Eventually polls cond every 10 ms until it holds, and fails the test
// when timeout passes first. It is for conditions no event announces (a
// cgroup emptying on v1, a file another process writes); where an event
// exists, wait on it instead.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Lines follows a process's output of JSON lines: every line that decodes
// as a T is kept, and waiters are woken as lines come.
type Lines[T any] struct {
	mu    sync.Mutex
	lines []T
	more  chan struct{}
	done  chan struct{}
}

// FollowLines reads r to its end in a goroutine of its own.
func FollowLines[T any](r io.Reader) *Lines[T] {
	l := &Lines[T]{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var v T
			if json.Unmarshal(sc.Bytes(), &v) != nil {
				continue
			}
			l.mu.Lock()
			l.lines = append(l.lines, v)
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

// All returns the lines so far.
func (l *Lines[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// Done is closed once the output has ended.
func (l *Lines[T]) Done() <-chan struct{} { return l.done }

// WaitFor waits up to d for a line past the first `from` that match
// accepts and returns its index + 1. It fails the test when d passes or
// the output ends first, with what and explain() (the process's log, say).
func (l *Lines[T]) WaitFor(t testing.TB, what string, from int, d time.Duration, match func(T) bool, explain func() string) int {
	t.Helper()
	timeout := time.After(d)
	for {
		lines := l.All()
		for i := from; i < len(lines); i++ {
			if match(lines[i]) {
				return i + 1
			}
		}
		select {
		case <-l.more:
		case <-l.done:
			if len(l.All()) == len(lines) {
				t.Fatalf("the output ended before %s; %s", what, explain())
			}
		case <-timeout:
			t.Fatalf("no %s within %s; %s", what, d, explain())
		}
	}
}

// CopyLines copies r's lines into b in a goroutine of its own and sends,
// once, what follows marker on the first line that holds it (a logged
// address, say).
func CopyLines(r io.Reader, b *Buffer, marker string) <-chan string {
	found := make(chan string, 1)
	go func() {
		sent := false
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			b.Write([]byte(sc.Text() + "\n"))
			if _, after, ok := strings.Cut(sc.Text(), marker); ok && !sent {
				found <- after
				sent = true
			}
		}
	}()
	return found
}

// ProcessStatus is a process's resident memory and open files.
func ProcessStatus(t testing.TB, pid int) (rssBytes uint64, fds int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rssBytes = kb << 10
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return rssBytes, len(ents)
}

// CPUShares measures, over the same span, the CPU each process uses as a
// share of one core (user and system time). It sleeps for span: the
// measurement's own length, nothing to wait for.
func CPUShares(t testing.TB, span time.Duration, pids ...int) []float64 {
	t.Helper()
	cpu := func() []time.Duration {
		out := make([]time.Duration, len(pids))
		for i, pid := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				t.Fatal(err)
			}
			// The fields after the command's name, which may hold spaces.
			f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
			utime, _ := strconv.ParseUint(f[11], 10, 64)
			stime, _ := strconv.ParseUint(f[12], 10, 64)
			out[i] = time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ 100
		}
		return out
	}
	c0, t0 := cpu(), time.Now()
	time.Sleep(span)
	c1, elapsed := cpu(), time.Since(t0)
	shares := make([]float64, len(pids))
	for i := range pids {
		shares[i] = float64(c1[i]-c0[i]) / float64(elapsed)
	}
	return shares
}
