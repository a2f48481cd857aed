//go:build system

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// requireSavedMachineReplays: the scenario --save-machine wrote, given to
// sim with the same ramp and no --machine, gives the first run's figures
// and its steps exactly (measuring takes minutes; the file saves them).
func requireSavedMachineReplays(t *testing.T, saved, measuredDir string, ramp []string) {
	first, err := results.ReadRun(measuredDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := runHeadroom(t, append([]string{"sim", "--scenario", saved, "--out", dir}, ramp...)...)
	if r.code != 0 {
		t.Fatalf("sim --scenario %s: exit %d: %s", saved, r.code, r.stderr)
	}
	again, err := results.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"touch_rate", "paging_cpu", "run_queue_wait", "swap_depths", "swap_read_iops", "fill_out", "reclaim_burst", "swap_tier_ratio", "node_memory_bytes", "cpus"} {
		if fmt.Sprint(first.Params[key]) != fmt.Sprint(again.Params[key]) {
			t.Errorf("%s: %v measured, %v from the saved scenario", key, first.Params[key], again.Params[key])
		}
	}
	if len(first.Steps) != len(again.Steps) || len(again.Steps) == 0 || first.Steps[0].AggregatePagesPerSec != again.Steps[0].AggregatePagesPerSec {
		t.Errorf("steps %+v from the saved scenario, %+v measured: want the same", again.Steps, first.Steps)
	}
}

// sim paging, for real: four random workers, half of each out over a
// swap file, each read in the order made; the CPU and wait a page within
// reason; its cgroups and swap file gone after.
func TestSystemSimPaging(t *testing.T) {
	testenv.RequireNoSwap(t)
	r := runHeadroom(t, "sim", "paging", "--workers", "4", "--memory-scan", "random", "--window", "2s", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got struct {
		CPU               float64   `json:"cpu_seconds_per_page"`
		Wait              float64   `json:"run_queue_seconds_per_page_in"`
		PagesIn           float64   `json:"pages_in_per_sec"`
		WorkerBytes       uint64    `json:"worker_bytes"`
		WorkerPagesPerSec []float64 `json:"worker_pages_per_sec"`
		WorkerMajorFaults []float64 `json:"worker_major_faults_per_sec"`
		CreationSlope     *float64  `json:"creation_slope"`
		ReadaheadOrder    *float64  `json:"readahead_order"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	t.Logf("%s", r.stdout)
	switch {
	case !(got.CPU > 1e-6 && got.CPU < 1e-3):
		t.Errorf("CPU %.1f µs a page, want 1 µs to 1 ms", got.CPU*1e6)
	case !(got.Wait >= 0 && got.Wait < 10e-3):
		t.Errorf("wait %.1f µs a page in, want under 10 ms", got.Wait*1e6)
	case !(got.PagesIn > 1000):
		t.Errorf("%.0f pages in a second: the workers did not page", got.PagesIn)
	case got.WorkerBytes < 64<<20:
		t.Errorf("worker block %d bytes, want at least 64 MiB", got.WorkerBytes)
	case len(got.WorkerPagesPerSec) != 4 || slices.Min(got.WorkerPagesPerSec) <= 0:
		t.Errorf("workers' rates %v: want four, each touching", got.WorkerPagesPerSec)
	case len(got.WorkerMajorFaults) != 4 || slices.Min(got.WorkerMajorFaults) <= 0:
		t.Errorf("workers' major faults a second %v: want four, each paging in", got.WorkerMajorFaults)
	case got.CreationSlope == nil || !(*got.CreationSlope > -2 && *got.CreationSlope < 2):
		t.Errorf("creation slope %v: want one, within ±2", got.CreationSlope)
	case got.ReadaheadOrder == nil || !(math.Abs(*got.ReadaheadOrder) < 2):
		t.Errorf("readahead order %v: want one (every worker faulted), within ±2", got.ReadaheadOrder)
	}
	testenv.RequireProbeCleanedUp(t, "headroom-sim-*")
}

// A 512 MiB block in a 256 MiB memory cgroup with a swap file must page:
// the run sees major faults, the process has swap, the cgroup never exceeds
// its limit, and the touch rate is far below the resident rate.
func TestSystemSwapInMemoryCgroup(t *testing.T) {
	testenv.SwapFile(t, 1<<30)
	const limit = 256 << 20
	cg := testenv.NewMemoryCgroup(t, limit)
	cmd := cg.Command(os.Args[0], "load", "--size", "512Mi", "--scan", "seq", "--duration", "4s", "--json")
	cmd.Env = append(os.Environ(), "HEADROOM_TEST_MAIN=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("load in cgroup: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var s memload.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("under swap: %.0f pages/s, %.0f major faults/s, swap %d MiB, cpu user %.2fs sys %.2fs of %.2fs",
		s.PagesPerSec, s.MajorFaultsPerSec, s.SwapBytes>>20, s.UserCPUSeconds, s.SystemCPUSeconds, s.Seconds)
	if s.MajorFaults == 0 || s.SwapBytes == 0 {
		t.Fatalf("no paging observed: %+v", s)
	}
	// Resident, a seq scan runs at tens of millions of pages/s here.
	if s.PagesPerSec > 5e6 {
		t.Fatalf("%.0f pages/s: not bound by paging", s.PagesPerSec)
	}
	// The kernel may force-charge a few pages past the limit (seen: one
	// page); what matters is that the 512 MiB block stayed capped near it.
	const overshootSlack = 2 << 20
	maxUsage, err := cg.ReadInt("memory.max_usage_in_bytes")
	if err != nil || maxUsage > limit+overshootSlack {
		t.Fatalf("cgroup max usage %d (limit %d): %v", maxUsage, limit, err)
	}
	maxMemsw, err := cg.ReadInt("memory.memsw.max_usage_in_bytes")
	if err != nil || maxMemsw <= limit {
		t.Fatalf("cgroup memory+swap peak %d, want above the %d limit (swap in use): %v", maxMemsw, limit, err)
	}
}

// calibrate measures the real swap file's file system and writes thresholds
// the agent then loads.
func TestSystemCalibrate(t *testing.T) {
	testenv.SwapFile(t, 512<<20)
	cfg := t.TempDir() + "/agent.yaml"
	r := runHeadroom(t, "agent", "calibrate", "--duration", "500ms", "--rounds", "2", "--json", "--write-config", cfg)
	if r.code != 0 {
		t.Fatalf("calibrate: exit %d: %s", r.code, r.stderr)
	}
	var res struct {
		ReadIOPS      float64            `json:"read_iops"`
		WriteIOPS     float64            `json:"write_iops"`
		ReadLatencyUs float64            `json:"read_latency_us"`
		Rounds        int                `json:"rounds"`
		Thresholds    map[string]float64 `json:"thresholds"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("4 KiB random read %.0f IOPS (%.0f µs), write %.0f IOPS", res.ReadIOPS, res.ReadLatencyUs, res.WriteIOPS)
	// Device I/O takes microseconds; a few hundred nanoseconds would mean
	// the reads never reached the device.
	if res.ReadIOPS <= 0 || res.WriteIOPS <= 0 || res.ReadLatencyUs < 5 || res.Rounds != 2 {
		t.Fatalf("implausible probe: %+v", res)
	}
	p := runHeadroom(t, "agent", "--config", cfg, "--print-config")
	in := strconv.FormatFloat(res.Thresholds["maxAverageSwapInPagesPerSecond"], 'f', -1, 64)
	if p.code != 0 || !strings.Contains(p.stdout, "maxAverageSwapInPagesPerSecond: "+in) {
		t.Fatalf("agent does not load the calibrated threshold %s:\n%s%s", in, p.stdout, p.stderr)
	}
}

// timeout(1) signals density and then its whole process group (workers
// included), so density may get SIGTERM twice. It must still tear
// everything down and keep its results: an earlier version exited at a
// second signal, once leaving the node cgroup behind and no run.json.
// (Which repeat exits and which waits is TestSignalHandler's job.)
func TestSystemDensityGroupSignalRestores(t *testing.T) {
	testenv.RequireRoot(t)
	out := t.TempDir()
	cmd := headroom("density", "--node-memory", "384Mi", "--swap", "512Mi", "--vm-memory", "96Mi", "--memory-size", "64Mi",
		"--deployments", "1,2", "--workload-runtime", "30s", "--out", out)
	sc, stderr, pid := startGroup(t, cmd)
	// The swap file is on and the node cgroup exists once the device is probed.
	waitForLine(t, sc, "swap device:")
	// The second delivery comes a little later, as from timeout(1), so
	// the kernel does not merge it with the first.
	syscall.Kill(pid, syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	syscall.Kill(-pid, syscall.SIGTERM)
	for sc.Scan() {
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("interrupted density: %v, want exit status 1; stderr: %s", err, stderr.String())
	}
	node, err := density.NodeCgroupPath(pid)
	if err != nil {
		t.Fatal(err)
	}
	testenv.AssertRestored(t, density.SwapDirPrefix, node)
	run, err := results.ReadRun(out)
	if err != nil {
		t.Fatalf("no results kept: %v", err)
	}
	if !run.Interrupted || !strings.Contains(run.StopReason, "terminated") {
		t.Errorf("run.json after SIGTERM: interrupted %v, stop reason %q", run.Interrupted, run.StopReason)
	}
}

// vm run: the guest command's output and exit status come through
// unchanged; Ctrl-C (twice, as a terminal delivers it to the group and
// then the user insists) powers the guest down after the command printed
// its summary, and nothing is left behind.
func TestSystemVMRun(t *testing.T) {
	bin := testenv.HeadroomBinary(t)
	testenv.GuestImage(t)
	out, err := exec.Command(bin, "vm", "run", "--memory", "256Mi", "--", "/bin/sh", "-c", "echo hello from the guest; exit 7").Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || string(out) != "hello from the guest\n" {
		t.Fatalf("exit %v, stdout %q", err, out)
	}

	before := leftovers(t)
	cmd := exec.Command(bin, "vm", "run", "--memory", "384Mi", "--", "load", "--size", "64Mi", "--duration", "300s", "--json")
	sc, stderr, pid := startGroup(t, cmd)
	first := waitForLine(t, sc, `"type":"interval"`)
	var rec memload.Record
	if err := json.Unmarshal([]byte(first), &rec); err != nil {
		t.Fatalf("guest output is not the command's JSON: %q", first)
	}
	syscall.Kill(-pid, syscall.SIGINT)
	time.Sleep(1500 * time.Millisecond) // past the duplicate window: the user insists
	syscall.Kill(-pid, syscall.SIGINT)
	summary := waitForLine(t, sc, `"type":"summary"`)
	for sc.Scan() {
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(summary, `"stop_reason":"signal: terminated"`) {
		t.Fatalf("interrupted vm run: %v, summary %s, stderr %s", err, summary, stderr.String())
	}
	if after := leftovers(t); after != before {
		t.Fatalf("left behind: %s (before: %s)", after, before)
	}
}

// startGroup starts cmd in a process group of its own (killed when the test
// ends), to signal it as a terminal or timeout(1) would.
func startGroup(t *testing.T, cmd *exec.Cmd) (stdout *bufio.Scanner, stderr *strings.Builder, pid int) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	return bufio.NewScanner(out), stderr, pid
}

// leftovers lists QEMU processes and VM directories on the machine.
func leftovers(t *testing.T) string {
	t.Helper()
	q, _ := exec.Command("pgrep", "-x", "qemu-system-x86").Output()
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "headroom-vm-*"))
	return "qemu " + strings.Join(strings.Fields(string(q)), ",") + "; dirs " + strings.Join(dirs, ",")
}

// sim --machine this measures this machine: its RAM, cores, touch rate and
// the active swap file, which fill the node's figures unless given. One
// round of each figure (--machine-rounds 1): three take three times as
// long, and the medians are unit-tested.
func TestSystemSimMachineThis(t *testing.T) {
	swap := testenv.SwapFile(t, 512<<20)
	dir := t.TempDir()
	var ksmd host.KsmdCPU
	ksmdBefore, err := ksmd.Seconds()
	if err != nil {
		t.Fatal(err)
	}
	ramp := []string{"--cpus", "3", "--vm-memory", "320Mi", "--memory-size", "256Mi",
		"--guest-overhead", "0", "--system-reserve", "0", "--deployments", "1", "--workload-runtime", "2s", "--json",
		"--swap-tier", "zswap:64Mi", "--content", "compress=2"}
	saved := filepath.Join(t.TempDir(), "machine.yaml")
	r := runHeadroom(t, append([]string{"sim", "--machine", "this", "--machine-rounds", "1", "--save-machine", saved, "--out", dir}, ramp...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	t.Run("saved figures replay as a scenario", func(t *testing.T) { requireSavedMachineReplays(t, saved, dir, ramp) })
	if !strings.Contains(r.stderr, "this machine: ") || !strings.Contains(r.stderr, swap+", one probe:") {
		t.Fatalf("figures line %q: want the swap file %s probed once (--machine-rounds 1)", r.stderr, swap)
	}
	run, err := results.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var memTotal uint64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		memTotal = kb << 10
	}
	p := run.Params
	// /proc/swaps leaves out the swap header's page.
	if run.Node.MemoryBytes != memTotal || run.Node.SwapBytes < 511<<20 || run.Node.SwapBytes > 512<<20 || run.Node.SwapReadIOPS <= 0 || p["cpus"] != 3.0 {
		t.Fatalf("node %+v, params %v: want this machine's RAM (%d B), the 512 MiB swap file, a measured device, and the given 3 CPUs",
			run.Node, p, memTotal)
	}
	// ksmd's CPU since boot, which the kernel's advisor counts into its
	// first scan.
	ksmdAfter, _ := ksmd.Seconds()
	if got, _ := p["ksmd_cpu_seconds"].(float64); got < ksmdBefore-1e-3 || got > ksmdAfter+1e-3 || !strings.Contains(r.stderr, "ksmd has used") {
		t.Errorf("ksmd_cpu_seconds %v, figures %q: want ksmd's CPU time, %.2f-%.2f s", p["ksmd_cpu_seconds"], r.stderr, ksmdBefore, ksmdAfter)
	}
	// The touch rate by the block one worker a core cycles through: 64
	// MiB, 256 MiB and, where it fits in a quarter of RAM, 1 GiB.
	touch, _ := p["touch_rate"].(string)
	rates, err := sim.ParseTouchRate(touch)
	if err != nil || len(rates) < 2 || rates[0].BytesPerCore != 64<<20 || rates[1].BytesPerCore != 256<<20 || !strings.Contains(r.stderr, "pages/s a core touches") {
		t.Errorf("touch_rate %q (%v), figures %q: want rates measured over 64 MiB and 256 MiB a core", touch, err, r.stderr)
	}
	for _, rt := range rates {
		if rt.PagesPerSec < 1e6 {
			t.Errorf("touch_rate %q: %.0f pages/s over %.0f B a core; want over a million, as headroom load touches in RAM", touch, rt.PagesPerSec, rt.BytesPerCore)
		}
	}
	// Two and four workers a core taking turns over a quarter of the
	// largest block, where 1 GiB a core was measured: the blocks' worth of
	// memory they touched as, 1 to 4 (a correction, applied as measured),
	// where the curve falls from 256 MiB to 1 GiB so it can tell; none
	// where it does not (a cold run's parallel build once had 1 GiB
	// faster than 256 MiB), and the line says so.
	blocks, _ := p["touch_turn_blocks"].(float64)
	switch {
	case len(rates) < 3:
	case !strings.Contains(r.stderr, "2 and 4 workers a core taking turns over 256.0 MiB each"):
		t.Errorf("figures %q: want the turns measured with 2 and 4 workers a core of 256 MiB", r.stderr)
	case rates[2].PagesPerSec < rates[1].PagesPerSec && (blocks < 1 || blocks > 4):
		t.Errorf("touch_turn_blocks %v, figures %q: want 1 to 4 where the curve falls", blocks, r.stderr)
	case rates[2].PagesPerSec >= rates[1].PagesPerSec && (blocks != 0 || !strings.Contains(r.stderr, "which the curve cannot place")):
		t.Errorf("touch_turn_blocks %v, figures %q: want none, said, where the curve does not fall", blocks, r.stderr)
	}
	// zswap's compressor on the workers' content (pages built to compress
	// 2:1; lzo stores them at 1.83:1 here, with zsmalloc's overhead).
	if ratio, _ := p["swap_tier_ratio"].(float64); !(ratio >= 1.3 && ratio <= 2.2) || !strings.Contains(r.stderr, "the tier's compressor") {
		t.Errorf("swap_tier_ratio %v, figures %q: want zswap's compressor measured on compress=2 content, 1.3-2.2", p["swap_tier_ratio"], r.stderr)
	}
	// The device at queue depths 1 to 16, reads and writes (a scratch
	// file beside the swap file), is the model's device.
	depths, _ := p["swap_depths"].(string)
	if ds, err := sim.ParseDepths(depths); err != nil || len(ds) != 5 || ds[0].QueueDepth != 1 || ds[4].QueueDepth != 16 {
		t.Errorf("swap_depths %q (%v): want the device's rates at depths 1, 2, 4, 8 and 16", depths, err)
	}
	// The CPU per page paged, measured over the same swap file with one,
	// four and eight workers a core: some 10 to 200 µs here; a
	// microsecond to a millisecond anywhere.
	cpu, _ := p["paging_cpu"].(string)
	cs, err := sim.ParsePagingCPU(cpu)
	if err != nil || len(cs) != 3 || cs[0].Tasks != float64(runtime.NumCPU()) || cs[1].Tasks != float64(4*runtime.NumCPU()) || cs[2].Tasks != float64(8*runtime.NumCPU()) ||
		cs[0].SecondsPerPage < 1e-6 || cs[2].SecondsPerPage > 1e-3 || !strings.Contains(r.stderr, "CPU per page paged in and out") {
		t.Errorf("paging_cpu %q (%v), figures %q: want the CPU per page paged measured with one, four and eight workers a core", cpu, err, r.stderr)
	}
	// One run each: no spread printed (with more rounds, each figure is
	// their median with its spread: TestMachineFiguresRounds).
	if strings.Contains(r.stderr, "median of") || !strings.Contains(r.stderr, "(headroom load, a worker a core, one run") {
		t.Errorf("figures %q: want one run of each figure and no medians (--machine-rounds 1)", r.stderr)
	}
	// The same runs' swap I/O sizes, at the same worker counts: a seq
	// scan's readahead read (at most 2^vm.page-cluster pages) and a write
	// of reclaim's (2-8 pages here).
	cluster, err := os.ReadFile("/proc/sys/vm/page-cluster")
	if err != nil {
		t.Fatal(err)
	}
	window, _ := strconv.Atoi(strings.TrimSpace(string(cluster)))
	for _, c := range []struct {
		key, line string
		most      float64
	}{{"swap_read_pages", "pages a swap read carried", math.Pow(2, float64(window))}, {"swap_write_pages", "pages a swap write carried", 1024}} {
		v, _ := p[c.key].(string)
		ps, err := sim.ParseIOPages(v)
		if err != nil || len(ps) != len(cs) || !strings.Contains(r.stderr, c.line) {
			t.Errorf("%s %q (%v), figures %q: want the pages an I/O carried at each paging CPU figure's worker count", c.key, v, err, r.stderr)
			continue
		}
		for i, pg := range ps {
			if pg.Tasks != cs[i].Tasks || pg.Pages < 1 || pg.Pages > c.most+0.01 {
				t.Errorf("%s %q: %g pages with %g workers; want 1 to %g, at the paging CPU's counts", c.key, v, pg.Pages, pg.Tasks, c.most)
			}
		}
	}
	// The same runs' wait for a core a page paged in: four workers a core
	// wait longer than one a core (here 1-2 µs against 30-40).
	wait, _ := p["run_queue_wait"].(string)
	ws, err := sim.ParseRunQueueWait(wait)
	if err != nil || len(ws) != len(cs) || ws[0].Tasks != cs[0].Tasks || ws[1].Tasks != cs[1].Tasks ||
		!(ws[1].SecondsPerPage > ws[0].SecondsPerPage) || ws[1].SecondsPerPage > 10e-3 || !strings.Contains(r.stderr, "wait for a core per page paged in") {
		t.Errorf("run_queue_wait %q (%v), figures %q: want the wait at the paging CPU's counts, longer with more workers a core", wait, err, r.stderr)
	}
	// The scratch file's transfer rates, from 128 KiB I/Os against 4 KiB
	// ones: 1-3 GB/s here; 10 MB/s to 100 GB/s anywhere.
	for _, key := range []string{"swap_read_bandwidth", "swap_write_bandwidth"} {
		if b, _ := p[key].(float64); b < 10e6 || b > 100e9 || !strings.Contains(r.stderr, "beyond its first page move at") {
			t.Errorf("%s %v, figures %q: want the device's transfer rate, 10 MB/s to 100 GB/s", key, p[key], r.stderr)
		}
	}
}

// headroom swap as a user runs it, with --json: up makes a swap file with
// zram in front, status shows both as headroom's, down removes exactly
// them, and a second down finds nothing. A failing test still takes down
// what up made.
func TestSystemSwapCommandUpStatusDown(t *testing.T) {
	testenv.RequireNoSwap(t)
	state := filepath.Join(t.TempDir(), "swap.json")
	t.Cleanup(func() { runHeadroom(t, "swap", "down", "--state", state) })
	active := func() map[string]bool {
		swaps, err := host.ReadSwaps()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, s := range swaps {
			out[s.Path] = true
		}
		return out
	}
	decode := func(r result, v any) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("--json printed no JSON (%v): %q", err, r.stdout)
		}
	}

	var up swapChange
	decode(runHeadroom(t, "swap", "up", "--file", "64Mi", "--zram", "32Mi", "--json", "--state", state), &up)
	var kinds []string
	for _, m := range up.Made {
		kinds = append(kinds, m.Kind)
		if !active()[m.Device] {
			t.Errorf("up reported %s %s, which /proc/swaps does not hold", m.Kind, m.Device)
		}
	}
	if !slices.Equal(kinds, []string{host.TierDisk, host.TierZram}) || up.State != state {
		t.Fatalf("up made %v recorded in %s, want a disk then zram recorded in %s", kinds, up.State, state)
	}

	var st struct {
		Tiers []struct {
			Device         string `json:"device"`
			MadeByHeadroom bool   `json:"made_by_headroom"`
		} `json:"tiers"`
	}
	decode(runHeadroom(t, "swap", "status", "--json", "--state", state), &st)
	ours := 0
	for _, tier := range st.Tiers {
		if tier.MadeByHeadroom {
			ours++
		}
	}
	if ours != 2 || len(st.Tiers) != 2 {
		t.Errorf("status shows %+v: want the two tiers up made, both headroom's", st.Tiers)
	}

	var down swapChange
	decode(runHeadroom(t, "swap", "down", "--json", "--state", state), &down)
	if len(down.Removed) != 2 || down.Removed[0].Device != up.Made[1].Device || down.Removed[1].Device != up.Made[0].Device {
		t.Errorf("down removed %+v, want what up made in the reverse order: %+v", down.Removed, up.Made)
	}
	if left := active(); len(left) != 0 {
		t.Errorf("swap areas active after down: %v", left)
	}
	if _, err := os.Stat(up.Made[0].Device); !os.IsNotExist(err) {
		t.Errorf("the swap file %s is still there after down (%v)", up.Made[0].Device, err)
	}
	decode(runHeadroom(t, "swap", "down", "--json", "--state", state), &down)
	if len(down.Removed) != 0 {
		t.Errorf("a second down removed %+v, want nothing", down.Removed)
	}
}
