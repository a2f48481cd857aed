package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/sim/scenario"
)

// The test binary doubles as the headroom binary: with HEADROOM_TEST_MAIN
// set it runs main, so tests (and --workers, which re-executes its own
// binary) exercise the real command line.
func TestMain(m *testing.M) {
	if os.Getenv("HEADROOM_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func headroom(args ...string) *exec.Cmd { return headroomAt(os.Args[0], args...) }

// headroomAt runs headroom from the test binary at path (a copy).
func headroomAt(path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "HEADROOM_TEST_MAIN=1")
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

func runHeadroom(t *testing.T, args ...string) result {
	t.Helper()
	cmd := headroom(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func TestBadInputIsOneLineAndExitTwo(t *testing.T) {
	tests := []struct {
		args []string
		want string // part of the message: the flag and the accepted form
	}{
		{[]string{"load", "--size", "12 apples"}, `"--size"`},
		{[]string{"load", "--size", "-1Gi"}, "Gi"},
		{[]string{"load", "--size", "1"}, "--size must be at least one page"},
		{[]string{"load", "--rate", "-5"}, `"--rate"`},
		{[]string{"load", "--rate", "fast"}, "250k"},
		{[]string{"load", "--writes", "1.5"}, `"--writes"`},
		{[]string{"load", "--scan", "zigzag"}, "none, seq or random"},
		{[]string{"load", "--content", "dup=2"}, "dup=F"},
		{[]string{"load", "--content", "compress=0"}, "compress=R"},
		{[]string{"load", "--hugepages", "always"}, "never or madvise"},
		{[]string{"load", "--stride", "0"}, "--stride"},
		{[]string{"load", "--interval", "1ms"}, "--interval"},
		{[]string{"load", "--duration", "soon"}, `"--duration"`},
		{[]string{"load", "--workers", "-1"}, "--workers"},
		{[]string{"load", "--controller", "carrier-pigeon"}, "unix:/path"},
		{[]string{"load", "--controller", "unix:/x", "--workers", "2"}, "cannot be combined"},
		{[]string{"load", "--size", "1Pi"}, "larger than this machine's RAM + swap"},
		{[]string{"load", "--size", "4Gi", "--workers", "4096"}, "--workers 4096"},
		{[]string{"load", "extra"}, "unknown command"},
		{[]string{"load", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"density", "--node-memroy", "1Gi"}, "unknown flag: --node-memroy (did you mean --node-memory?)"},
		{[]string{"sim", "--swap-read-iop", "5"}, "(did you mean --swap-read-iops?)"},
		{[]string{"agent", "--intervall", "1s"}, "(did you mean --interval?)"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"swap", "frobnicate"}, `unknown command "frobnicate" for "headroom swap"`},
		{[]string{"vm", "build"}, `unknown command "build" for "headroom vm"`},
		{[]string{"completion", "tcsh"}, "unknown command"},
		{[]string{"density", "--deployments", "0:5"}, "--deployments"},
		{[]string{"density", "--vm-memory", "512Mi", "--memory-size", "1Gi"}, "--memory-size"},
		{[]string{"density", "--backend", "kubevirt", "--swap", "1Gi"}, "--swap is not used by --backend kubevirt"},
		{[]string{"density", "--backend", "kubevirt", "--memory-size", "1Gi"}, "--memory-size shapes the in-guest workload: with --backend kubevirt it needs --controller-address"},
		{[]string{"density", "--backend", "kubevirt", "--controller-address", "guests-reach-me"}, "want host:port"},
		{[]string{"density", "--backend", "kubevirt", "--controller-address", "10.0.0.1:65535"}, "port from 1 to 65534"},
		{[]string{"density", "--backend", "kubevirt", "--controller-address", "10.0.0.1:9000", "--vm-memory", "256Mi", "--memory-size", "256Mi"}, "must be below --vm-memory"},
		{[]string{"density", "--qps", "5"}, "--qps needs --backend kubevirt"},
		{[]string{"density", "--pace", "100ms"}, "--pace needs --rate"},
		{[]string{"density", "--rate", "1M", "--pace", "2s"}, "--pace must be between 1ms and 1s"},
		{[]string{"load", "--rate", "1M", "--pace", "0.5ms"}, "--pace must be between 1ms and 1s"},
		{[]string{"density", "--backend", "kubevirt", "--qps", "0"}, "--qps must be above 0"},
		{[]string{"density", "--backend", "kubevirt", "--burst", "0"}, "--burst must be at least 1"},
		{[]string{"density", "--backend", "kubevirt", "--timeout", "0s"}, "--timeout must be above 0"},
		{[]string{"density", "--backend", "kubevirt", "--kubevirt-object", "pod"}, "want vmi or vm"},
		{[]string{"density", "--backend", "kubevirt", "--node-selector", "zone"}, "key=value"},
		{[]string{"density", "--backend", "kubevirt", "--cpus", "0"}, "--cpus 0"},
		{[]string{"density", "--backend", "kubevirt", "--template", "testdata/kubevirt-not-a-vmi.yaml"}, "want apiVersion kubevirt.io/v1"},
		{[]string{"density", "--backend", "kubevirt", "--template", "testdata/no-such.yaml"}, "no such file"},
		{[]string{"density", "--backend", "kubevirt", "--template", "testdata/kubevirt-vmi.yaml", "--cpus", "2"}, "--cpus shapes the built-in template"},
		{[]string{"density", "--backend", "kubevirt", "--kubeconfig", "testdata/no-such.kubeconfig"}, "kubeconfig"},
		{[]string{"density", "--backend", "podman"}, "--backend"},
		{[]string{"density", "--libvirt-uri", "qemu:///system"}, "--libvirt-uri needs --backend libvirt"},
		{[]string{"density", "--backend", "qemu", "--libvirt-template", "testdata/libvirt-no-type.xml"}, "--libvirt-template needs --backend libvirt"},
		{[]string{"density", "--backend", "libvirt", "--libvirt-template", "testdata/no-such.xml"}, "no such file"},
		{[]string{"density", "--backend", "libvirt", "--libvirt-template", "testdata/libvirt-no-type.xml"}, "the domain has no type"},
		{[]string{"density", "--backend", "libvirt", "--libvirt-template", "testdata/kubevirt-vmi.yaml"}, "not a libvirt domain XML"},
		{[]string{"density", "--backend", "libvirt", "--vm-memory", "384Mi", "--memory-size", "320Mi"}, "leaves the guest too little"},
		{[]string{"density", "--backend", "qemu", "--vm-memory", "128Mi", "--memory-size", "64Mi"}, "too small to boot"},
		{[]string{"density", "--backend", "qemu", "--vm-memory", "384Mi", "--memory-size", "320Mi"}, "leaves the guest too little"},
		{[]string{"density", "--backend", "qemu", "--accel", "hvf"}, "--accel"},
		{[]string{"vm", "run", "--memory", "64Mi"}, "the minimum is 160.0 MiB"},
		{[]string{"vm", "run", "--", "frobnicate"}, "unknown guest command"},
		{[]string{"vm", "run", "--cgroup", "no/such/group"}, "--cgroup"},
		{[]string{"vm", "run", "--guest-swap", "lots"}, "--guest-swap"},
		{[]string{"vm", "run", "--guest-swap", "1Gi,backing=nfs"}, "backing=file or backing=tmpfs"},
		{[]string{"vm", "run", "--accel", "hvf"}, "--accel"},
		{[]string{"vm", "run", "--cpus", "0"}, "--cpus"},
		{[]string{"density", "--swap", "lots"}, "--swap"},
		{[]string{"density", "--swap", "1Gi", "--swap-tier", "zswap:1G"}, "--swap-tier"},
		{[]string{"density", "--overcommit-percent", "50"}, "--overcommit-percent"},
		{[]string{"density", "--agent"}, "--node-memory"},
		{[]string{"density", "--node-memory", "1Pi"}, "larger than this machine's RAM"},
		{[]string{"density", "--node-memory", "256Mi"}, "--vm-memory 512.0 MiB requests 528.0 MiB a worker (--overcommit-percent 100, --overhead 16.0 MiB), more than --node-memory 256.0 MiB: not one worker is admitted"},
		{[]string{"density", "--swap", "1Pi"}, "does not fit in /var/tmp"},
		{[]string{"density", "--swap", "1Gi", "--swap-tier", "zram:1Pi"}, "twice this machine's RAM"},
		{[]string{"density", "--swap", "1Gi", "--swap-tier", "zswap:compressor="}, "--swap-tier"},
		{[]string{"swap", "up"}, "nothing to set up"},
		{[]string{"swap", "up", "--file", "lots"}, "--file"},
		{[]string{"swap", "up", "--zram", "1Pi"}, "twice this machine's RAM"},
		{[]string{"swap", "up", "--zram", "1Gi,algorithm=nope"}, "zram offers"},
		{[]string{"swap", "up", "--zram", "1Gi", "--zswap"}, "twice"},
		{[]string{"swap", "up", "--zswap=pool=3"}, "--zswap"},
		{[]string{"swap", "up", "--file", "1Pi"}, "does not fit"},
		{[]string{"report"}, "report needs a result directory: headroom report RUN_DIR..."},
		{[]string{"report", "/nonexistent-run"}, "/nonexistent-run: no such directory"},
		{[]string{"report", "testdata"}, "testdata holds no run.json: not the results of a run"},
		{[]string{"report", "testdata/sim-unknown-key.yaml"}, "testdata/sim-unknown-key.yaml is a file: give the run's directory (testdata)"},
		{[]string{"sim", "--like", "testdata"}, "--like: testdata holds no run.json"},
		{[]string{"sim", "--deployments", "1:2:1", "--out", "/dev/null"}, "--out /dev/null: not a directory"},
		{[]string{"density", "--out", "/dev/null"}, "--out /dev/null: not a directory"},
		{[]string{"density", "--out", "/dev/null/run"}, "--out /dev/null/run: /dev/null is not a directory"},
		{[]string{"density", "--backend", "kubevirt", "--out", "/dev/null"}, "--out /dev/null: not a directory"},
		{[]string{"agent", "--window", "0"}, "averageWindowSizeSeconds"},
		{[]string{"agent", "--cooldown", "soon"}, `"--cooldown"`},
		{[]string{"agent", "calibrate", "--fraction", "2"}, "--fraction"},
		{[]string{"agent", "calibrate", "--rounds", "0"}, "--rounds"},
		{[]string{"sim", "--memory-size", "20Gi"}, "larger than --vm-memory"},
		{[]string{"sim", "--node-memory", "1280Mi"}, "--vm-memory 16.0 GiB requests 16.2 GiB a VM (--overcommit-percent 100, --overhead 256.0 MiB), more than the node's 1.2 GiB (--node-memory less --system-reserve): not one VM is admitted"},
		{[]string{"sim", "--swap", "1Ti", "--swap-read-iops", "0"}, "--swap-read-iops"},
		{[]string{"sim", "--swap-tier", "zcache:1Gi"}, `--swap-tier "zcache:1Gi": unknown tier "zcache"`},
		{[]string{"density", "--swap", "1Gi", "--swap-tier", "zram:1Gi,ratio=3"}, "ratio= describes a modelled tier (headroom sim)"},
		{[]string{"sim", "--swap-tier", "zram:1Gi", "--swap-tier-ratio", "0.5"}, "--swap-tier-ratio 0.5: want a ratio of at least 1"},
		{[]string{"sim", "--swap-tier", "zswap:1Gi"}, "zswap needs a swap device (--swap)"},
		{[]string{"sim", "--save-machine", "/tmp/m.yaml"}, "only with --machine this"},
		{[]string{"sim", "--machine", "this", "--save-machine", "/nonexistent/m.yaml"}, "its directory does not exist"},
		{[]string{"sim", "paging", "--workers", "0"}, "--workers 0: want a count of at least 1"},
		{[]string{"sim", "paging", "--memory-scan", "none"}, "want seq or random"},
		{[]string{"sim", "paging", "--window", "10ms"}, "--window 10ms: want at least 1s"},
		{[]string{"sim", "paging", "extra"}, "unknown command"},
		{[]string{"sim", "--swap-depths", "4:1/1,2:1/1"}, "--swap-depths"},
		{[]string{"sim", "--find", "min-cost"}, "--find"},
		{[]string{"sim", "--find", "overcommit-percent", "--kubevirt-version", "v9"}, "--kubevirt-version \"v9\": want one of v1.6, v1.7, v1.8"},
		{[]string{"sim", "--find", "overcommit-percent", "--overcommit-percent", "200"}, "--overcommit-percent is not used by --find overcommit-percent"},
		{[]string{"sim", "--find", "overcommit-percent", "--request-overhead", "1Gi"}, "--request-overhead is not used by --find overcommit-percent"},
		{[]string{"sim", "--like", "/nonexistent"}, "--like"},
		{[]string{"sim", "--machine", "this", "--machine-rounds", "0"}, "--machine-rounds 0: want a count of at least 1"},
		{[]string{"sim", "--balloon"}, "--balloon needs --agent"},
		{[]string{"sim", "--agent", "--balloon", "--balloon-policy", "esx"}, "--balloon-policy"},
		{[]string{"sim", "--balloon-policy", "mom"}, "--balloon-policy needs --balloon"},
		{[]string{"sim", "--guest-cache", "2Gi"}, "--guest-cache"},
		{[]string{"sim", "--agent", "--max-swap-out-pages-per-sec", "-5"}, "--max-swap-out-pages-per-sec"},
		{[]string{"sim", "--agent", "--ksm", "advisor", "--ksmd-cpu", "-1s"}, "--ksmd-cpu"},
		{[]string{"sim", "--ksm", "governor"}, "--ksm needs --agent"},
		{[]string{"sim", "--agent", "--ksm", "fast"}, "want off, governor or advisor"},
		{[]string{"sim", "--scenario", "testdata/sim-unknown-key.yaml"}, `key "swap-iops" does not exist; keys are the flags' names: `},
		// Said before --machine this measures for minutes (one line: no progress).
		{[]string{"sim", "--machine", "this", "--vm-memory", "320Mi", "--memory-size", "512Mi"}, "--memory-size 512.0 MiB plus --guest-overhead 1.0 GiB is larger than --vm-memory 320.0 MiB"},
		{[]string{"sim", "--machine", "this", "--balloon"}, "--balloon needs --agent"},
		{[]string{"sim", "--scenario", "testdata/sim-misspelt-key.yaml"}, `key "vm-memroy" does not exist (did you mean vm-memory?)`},
		{[]string{"sim", "--scenario", "testdata/sim-bad-value.yaml"}, "node-memory"},
		{[]string{"sim", "--scenario", "/nonexistent.yaml"}, "--scenario"},
		{[]string{"sim", "--scenario", "testdata/sim-duplicate-key.yaml"}, `"node-memory" already set`},
		{[]string{"sim", "--scenario", "testdata/sim-not-a-mapping.yaml"}, "want keys and their values (node-memory: 8Gi)"},
		{[]string{"calc"}, "--guest-memory is required"},
		{[]string{"calc", "--guest-memory", "1Gi", "--overcommit-percent", "50"}, "overcommit percent must be >= 100"},
		{[]string{"calc", "--guest-memory", "1Gi", "--kubevirt-version", "v0.59"}, "v1.6, v1.7, v1.8"},
		{[]string{"calc", "--guest-memory", "lots"}, "--guest-memory"},
		{[]string{"calc", "--shapes", "testdata/calc-unknown-key.yaml"}, `key "memory" does not exist`},
		{[]string{"calc", "--shapes", "testdata/calc-misspelt-key.yaml"}, `entry 1: key "guest-memroy" does not exist (did you mean guest-memory?)`},
		{[]string{"calc", "--shapes", "testdata/calc-duplicate-key.yaml"}, `"guest-memory" already set`},
		{[]string{"agent", "--kubernetes-swap", "sometimes"}, "kubernetes.swap"},
		{[]string{"agent", "--kubeconfig", "/x"}, "--kubernetes-node"},
	}
	for _, tt := range tests {
		r := runHeadroom(t, tt.args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code != 2 || len(lines) != 1 || !strings.Contains(r.stderr, tt.want) || !strings.HasPrefix(r.stderr, "headroom: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", tt.args, r.code, r.stderr, tt.want)
		}
		if strings.Contains(r.stderr, "goroutine") || r.stdout != "" {
			t.Errorf("%v: stack trace or output on bad input: %q %q", tt.args, r.stdout, r.stderr)
		}
	}
}

// calc's JSON for a shapes file: one result per shape, the keys scripts
// use, the seed's node answered (17 VMs of 16 GiB at 150% on 192 GiB with
// KubeVirt v1.6's figures).
func TestCalcShapesJSON(t *testing.T) {
	r := runHeadroom(t, "calc", "--shapes", "testdata/calc-shapes.yaml", "--overcommit-percent", "150",
		"--node-memory", "192Gi", "--kubevirt-version", "v1.6", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out) != 2 {
		t.Fatalf("want a list of 2 results: %v\n%s", err, r.stdout)
	}
	for _, k := range []string{"pod_memory_request_bytes", "overhead_bytes", "overhead_parts", "vms_fit", "node_swap_bytes", "node_swap_needed_bytes"} {
		if _, ok := out[0][k]; !ok {
			t.Errorf("no %q in %v", k, out[0])
		}
	}
	if out[0]["pod_memory_request_bytes"].(float64) != 11756634113 || out[0]["vms_fit"].(float64) != 17 {
		t.Errorf("large shape: request %v, fit %v; want 11756634113 and 17", out[0]["pod_memory_request_bytes"], out[0]["vms_fit"])
	}
	if out[1]["shape"].(map[string]any)["name"] != "small" || out[1]["shape"].(map[string]any)["no_graphics"] != true {
		t.Errorf("second shape %v", out[1]["shape"])
	}
}

// Agent flags in seconds take durations or plain seconds, and land in
// their configuration key.
func TestAgentDurationFlags(t *testing.T) {
	for _, v := range []string{"500ms", "0.5"} {
		r := runHeadroom(t, "agent", "--interval", v, "--eviction-deadline", "2m", "--print-config")
		if r.code != 0 || !strings.Contains(r.stdout, "intervalSeconds: 0.5\n") || !strings.Contains(r.stdout, "evictionDeadlineSeconds: 120\n") {
			t.Errorf("--interval %s: exit %d, config:\n%s%s", v, r.code, r.stdout, r.stderr)
		}
	}
}

func TestUnreachableControllerExitsTwo(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nobody.sock")
	r := runHeadroom(t, "load", "--size", "4Mi", "--controller", "unix:"+sock)
	if r.code != 2 || !strings.Contains(r.stderr, "--controller") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestHelpExplainsFlags(t *testing.T) {
	r := runHeadroom(t, "load", "--help")
	for _, want := range []string{"--size", "--scan", "--rate", "--content", "dup=F", "--controller", "--workers", "Exit status"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("load --help lacks %q", want)
		}
	}
}

// The flags a harness renders for a worker parse back to the same parameters.
func TestWorkerArgsRoundTrip(t *testing.T) {
	want := memload.Params{
		SizeBytes: 3 << 30, Scan: memload.ScanRandom, StrideBytes: 64, WriteFraction: 0.25,
		RatePagesPerSec: 12345.5, Duration: 90 * time.Second, Iterations: 7,
		Content: memload.Content{Kind: memload.ContentDup, DupFraction: 0.8}, Seed: 99,
		Mergeable: true, HugePages: memload.HugePagesMadvise, Interval: 250 * time.Millisecond, Pace: 40 * time.Millisecond,
	}
	want.Normalize()
	f := newLoadFlags(uint64(os.Getpagesize()))
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(loadrun.Args(want)); err != nil {
		t.Fatal(err)
	}
	got := f.params()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func lastJSON(t *testing.T, stdout string, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
}

func TestStandaloneJSON(t *testing.T) {
	r := runHeadroom(t, "load", "--size", "8Mi", "--iterations", "3", "--json", "--content", "compress=2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var s memload.Summary
	lastJSON(t, r.stdout, &s)
	pages := uint64(8<<20) / uint64(os.Getpagesize())
	if s.Type != "summary" || s.Pages != 3*pages || s.StopReason != memload.StopIterations ||
		s.Populate.Pages != pages || s.PopulateSeconds <= 0 || s.Params.ContentName != "compress=2" {
		t.Fatalf("summary %+v", s)
	}
	if !strings.HasPrefix(r.stdout, `{"type":"populate"`) {
		t.Fatalf("first line is not the populate record: %q", r.stdout[:min(80, len(r.stdout))])
	}
}

func TestTableOutput(t *testing.T) {
	r := runHeadroom(t, "load", "--size", "8Mi", "--duration", "300ms", "--interval", "100ms")
	for _, want := range []string{"populated 2048 pages", "pages/s", "majflt/s", "summary:", "stopped: duration"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("exit %d, output lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}

// waitForLine reads stdout until a line containing want appears.
func waitForLine(t *testing.T, sc *bufio.Scanner, want string) string {
	t.Helper()
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return sc.Text()
		}
	}
	t.Fatalf("output ended without a line containing %q", want)
	return ""
}

// Ctrl-C in a terminal, timeout(1) and systemd signal the whole process
// group, so a process may get the same signal twice at once: that must
// still end the run cleanly, with the summary.
func TestInterruptStillPrintsSummary(t *testing.T) {
	for _, deliveries := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d deliveries", deliveries), func(t *testing.T) {
			cmd := headroom("load", "--size", "8Mi", "--json", "--interval", "50ms")
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			waitForLine(t, sc, `"type":"interval"`)
			for range deliveries {
				cmd.Process.Signal(syscall.SIGINT)
			}
			line := waitForLine(t, sc, `"type":"summary"`)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("interrupted run: %v", err)
			}
			var s memload.Summary
			json.Unmarshal([]byte(line), &s)
			if s.Pages == 0 || !strings.Contains(s.StopReason, "interrupt") {
				t.Fatalf("summary after SIGINT: %+v", s)
			}
		})
	}
}

func TestFleetAggregatesWorkers(t *testing.T) {
	r := runHeadroom(t, "load", "--workers", "4", "--size", "16Mi", "--duration", "1s", "--json", "--scan", "random")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var agg loadrun.FleetSummary
	lastJSON(t, r.stdout, &agg)
	var sum float64
	workers := map[string]bool{}
	for _, line := range strings.Split(r.stdout, "\n") {
		var s memload.Summary
		if json.Unmarshal([]byte(line), &s) == nil && s.Type == "summary" && s.Worker != "" {
			sum += s.PagesPerSec
			workers[s.Worker] = true
			if s.Params.Seed < 2 || s.Params.Seed > 5 {
				t.Errorf("worker %s seed %d, want distinct seeds 2..5", s.Worker, s.Params.Seed)
			}
		}
	}
	if agg.Workers != 4 || agg.Failed != 0 || len(workers) != 4 || agg.PagesPerSec != sum || sum == 0 {
		t.Fatalf("aggregate %+v from %d worker summaries (sum %.0f)", agg, len(workers), sum)
	}
	if agg.StartSkewSeconds <= 0 || agg.StartSkewSeconds > 0.5 {
		t.Fatalf("start skew %.6f s", agg.StartSkewSeconds)
	}
}

// childPIDs lists pid's child processes (of any of its threads).
func childPIDs(t *testing.T, pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, file := range files {
		b, _ := os.ReadFile(file)
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	return pids
}

func TestFleetReportsKilledWorker(t *testing.T) {
	cmd := headroom("load", "--workers", "3", "--size", "16Mi", "--json", "--interval", "100ms")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	waitForLine(t, sc, `"type":"interval"`) // workers are running
	kids := childPIDs(t, cmd.Process.Pid)
	if len(kids) != 3 {
		t.Fatalf("%d worker processes, want 3", len(kids))
	}
	syscall.Kill(kids[0], syscall.SIGKILL)
	cmd.Process.Signal(syscall.SIGTERM) // end the others' run
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	err := cmd.Wait()
	var agg loadrun.FleetSummary
	json.Unmarshal([]byte(last), &agg)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || agg.Failed != 1 || agg.Workers != 3 || agg.Pages == 0 {
		t.Fatalf("exit %v, aggregate %+v", err, agg)
	}
	for _, pid := range kids {
		if syscall.Kill(pid, 0) == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z") {
				t.Errorf("worker %d still running after the fleet exited", pid)
			}
		}
	}
}

func TestWorkerExitsWhenControllerGoesAway(t *testing.T) {
	ctl, err := loadctl.Listen("unix:" + filepath.Join(t.TempDir(), "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := headroom("load", "--size", "8Mi", "--controller", ctl.Addr(), "--worker-id", "orphan", "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ctl.AwaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ctl.Start(time.Millisecond)
	ctl.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "controller went away") {
			t.Fatalf("exit %v, stderr %q", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker kept running without its controller")
	}
}

// docs/sim.md names every figure of the model (the node's, the swap
// device's and the VM's), where it says how to measure each; the
// generated reference lists every flag.
func TestSimModelFiguresDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sim.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range scenario.All() {
		switch p.Group {
		case "node", "swap", "vm", "correction":
			n++
			if !strings.Contains(string(doc), "`"+p.Flag+"`") && !strings.Contains(string(doc), "`--"+p.Flag) {
				t.Errorf("sim --%s (%s) is not in docs/sim.md", p.Flag, p.Group)
			}
		}
	}
	if n < 20 {
		t.Errorf("%d model figures: the groups were renamed", n)
	}
}

// A scenario sets the flags it names; flags on the command line win; the
// shipped scenarios load.
func TestSimScenario(t *testing.T) {
	dir := t.TempDir()
	scenario := filepath.Join(dir, "s.yaml")
	os.WriteFile(scenario, []byte("node-memory: 8Gi\nsystem-reserve: 0\ncpus: 4\nswap: 8Gi\nvm-memory: 2Gi\nmemory-size: 1536Mi\n"+
		"guest-overhead: 256Mi\ndeployments: \"1,2\"\nworkload-runtime: 5s\n"), 0o644)
	r := runHeadroom(t, "sim", "--scenario", scenario, "--deployments", "3", "--json", "--out", filepath.Join(dir, "out"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var run struct {
		Kind string `json:"kind"`
		Node struct {
			MemoryBytes uint64 `json:"memory_bytes"`
		} `json:"node"`
		Steps []struct{ Workers int } `json:"steps"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if run.Kind != "sim" || run.Node.MemoryBytes != 8<<30 || len(run.Steps) != 1 || run.Steps[0].Workers != 3 {
		t.Fatalf("run %+v: want the scenario's 8 GiB node and the command line's 3 VMs", run)
	}
	for _, s := range []string{"../../scenarios/paper-192g-nvme.yaml", "../../scenarios/this-machine.yaml"} {
		if r := runHeadroom(t, "sim", "--scenario", s, "--deployments", "1,2", "--workload-runtime", "5s", "--out", filepath.Join(dir, filepath.Base(s))); r.code != 0 {
			t.Errorf("%s: exit %d: %s", s, r.code, r.stderr)
		}
	}
	// The planner's question on the paper's node: everything in RAM up to
	// its knee at 11 VMs, the 12th pages.
	r = runHeadroom(t, "sim", "--scenario", "../../scenarios/paper-192g-nvme.yaml", "--memory-scan", "random", "--deployments", "10,11,12,13",
		"--workload-runtime", "5s", "--find", "max-vms", "--min-per-vm-fraction", "0.5", "--max-swap-utilization", "0.5", "--out", filepath.Join(dir, "find"))
	if want := "max-vms: 11 VMs keep a mean per-VM rate of at least 50%"; r.code != 0 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "; 11 also keep swap use within 50%") {
		t.Errorf("--find max-vms: exit %d, %q: want %q and 11 within the swap bound", r.code, r.stdout, want)
	}
	// The same node's largest KubeVirt overcommit: the one admitting the
	// 11 VMs that keep their rate.
	r = runHeadroom(t, "sim", "--scenario", "../../scenarios/paper-192g-nvme.yaml", "--memory-scan", "random", "--deployments", "10,11,12,13",
		"--workload-runtime", "5s", "--find", "overcommit-percent", "--out", filepath.Join(dir, "overcommit"))
	if want := "% admits 11 VMs of 16.0 GiB (KubeVirt v1.8:"; r.code != 0 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "; 11 keep a mean per-VM rate") {
		t.Errorf("--find overcommit-percent: exit %d, %q: want %q", r.code, r.stdout, want)
	}
}

// simLever runs headroom sim --json with a lever's flags into a fresh
// directory, checks it ran one step and that the agent decided action at
// least once, and returns run.json's params and the step's evictions.
func simLever(t *testing.T, action string, args ...string) (map[string]any, int) {
	t.Helper()
	dir := t.TempDir()
	r := runHeadroom(t, append(append([]string{"sim"}, args...), "--system-reserve", "0", "--cpus", "2", "--touch-rate", "10M",
		"--swap-read-iops", "20000", "--swap-write-iops", "20000", "--swap-latency", "200us", "--memory-scan", "random", "--agent",
		"--max-swap-in-pages-per-sec", "0", "--max-swap-out-pages-per-sec", "0", "--json", "--out", dir)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var run struct {
		Params map[string]any `json:"params"`
		Steps  []struct{ Evictions int }
	}
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if len(run.Steps) != 1 {
		t.Fatalf("steps %+v: want one", run.Steps)
	}
	decisions, err := os.ReadFile(filepath.Join(dir, "agent.jsonl"))
	if err != nil || !strings.Contains(string(decisions), `"action":"`+action+`"`) {
		t.Fatalf("agent.jsonl (%v) has no %s: %.300s", err, action, decisions)
	}
	return run.Params, run.Steps[0].Evictions
}

// With --balloon the simulated agent drives the guests' balloons: the
// seven VMs of density-balloon's node run without an eviction, and
// run.json records the policy and the guests' cache.
func TestSimBalloon(t *testing.T) {
	params, evictions := simLever(t, "set_balloon", "--node-memory", "1536Mi", "--populate-rate", "10000", "--swap", "2Gi", "--vm-memory", "512Mi",
		"--memory-size", "32Mi", "--guest-overhead", "100Mi", "--overhead", "40Mi", "--guest-cache", "288Mi", "--overcommit-percent", "400",
		"--deployments", "7", "--workload-runtime", "20s", "--rate", "1M", "--balloon")
	if params["balloon"] != "headroom" || params["guest_cache_bytes"] != float64(288<<20) || evictions != 0 {
		t.Fatalf("params %v, %d evictions; want none", params, evictions)
	}
}

// With --ksm governor the simulated agent paces ksmd: ten VMs of
// duplicate pages that overflow the node without merging run without an
// eviction. With --ksm advisor it hands ksmd to the kernel's advisor,
// whose first scan (500 pages a batch) chases the VMs' memory as they
// fill it, merging nothing, so the node pages and a VM is evicted, even
// with a fresh ksmd.
func TestSimKSM(t *testing.T) {
	for mode, wantEvicted := range map[string]bool{"governor": false, "advisor": true} {
		params, evictions := simLever(t, "set_ksm", "--node-memory", "3Gi", "--populate-rate", "50000", "--swap", "4Gi", "--vm-memory", "640Mi",
			"--memory-size", "512Mi", "--guest-overhead", "64Mi", "--overhead", "40Mi", "--content", "dup=0.8", "--writes", "0",
			"--overcommit-percent", "400", "--deployments", "10", "--workload-runtime", "60s", "--rate", "100k", "--ksm", mode, "--ksmd-cpu", "0s")
		if params["ksm"] != mode || params["ksmd_cpu_seconds"] != 0.0 || (evictions > 0) != wantEvicted {
			t.Errorf("--ksm %s: params %v, %d evictions", mode, params, evictions)
		}
	}
}

// The binary is also the micro-VM guest's /init: its size is guest RAM. The
// Kubernetes code must not link client-go's scheme of every built-in API
// type (dynamicinformer and the discovery client do: +17 MB, and a 384 MiB
// guest could no longer hold its 256 MiB workload).
func TestBinaryLinksNoBuiltinAPIScheme(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/api/apps/") || strings.HasPrefix(pkg, "github.com/google/gnostic-models/") ||
			pkg == "k8s.io/client-go/kubernetes/scheme" {
			t.Errorf("headroom links %s", pkg)
		}
	}
}

// A node sized on the command line gets no system reserve unless one is
// given (the default 8 GiB is the default node's), as density's own flags
// size it; the default node keeps its reserve.
func TestSimSizedNodeHasNoDefaultReserve(t *testing.T) {
	dir := t.TempDir()
	node := []string{"sim", "--node-memory", "1280Mi", "--cpus", "2", "--vm-memory", "256Mi", "--memory-size", "128Mi",
		"--guest-overhead", "16Mi", "--overhead", "3Mi", "--deployments", "1", "--workload-runtime", "2s", "--json"}
	reserveOf := func(r result) float64 {
		t.Helper()
		var run struct {
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
			t.Fatalf("%v: %q", err, r.stdout)
		}
		return run.Params["system_reserve_bytes"].(float64)
	}
	r := runHeadroom(t, append(node, "--out", filepath.Join(dir, "sized"))...)
	if r.code != 0 || reserveOf(r) != 0 {
		t.Fatalf("a sized node: exit %d, %s: want it to run with no reserve", r.code, r.stderr)
	}
	r = runHeadroom(t, append(node, "--system-reserve", "2Gi", "--out", filepath.Join(dir, "given"))...)
	if want := "--system-reserve 2.0 GiB leaves nothing of --node-memory 1.2 GiB"; r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("a reserve given: exit %d, %q: want exit 2 and %q", r.code, r.stderr, want)
	}
	r = runHeadroom(t, "sim", "--deployments", "1", "--workload-runtime", "2s", "--json", "--out", filepath.Join(dir, "default"))
	if r.code != 0 || reserveOf(r) != 8<<30 {
		t.Errorf("the default node: exit %d, %s: want its 8 GiB reserve", r.code, r.stderr)
	}
}

// A process has no guest: --worker-kind process holds no guest memory
// beside its block unless --guest-overhead is given.
func TestSimProcessHasNoGuestOverhead(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sim", "--worker-kind", "process", "--node-memory", "2Gi", "--vm-memory", "320Mi", "--memory-size", "256Mi", "--deployments", "1", "--json"}
	r := runHeadroom(t, append(args, "--out", filepath.Join(dir, "a"))...)
	if r.code != 0 || !strings.Contains(r.stdout, `"guest_overhead_bytes":0,`) {
		t.Fatalf("exit %d: %s%.300s", r.code, r.stderr, r.stdout)
	}
	r = runHeadroom(t, append(args, "--guest-overhead", "32Mi", "--out", filepath.Join(dir, "b"))...)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf(`"guest_overhead_bytes":%d,`, 32<<20)) {
		t.Fatalf("given: exit %d: %s%.300s", r.code, r.stderr, r.stdout)
	}
}

// sim --like RUN_DIR models a density run in one command: its ramp, node
// and backend's worker kind, with the flags given winning.
func TestSimLikeADensityRun(t *testing.T) {
	dir := t.TempDir()
	measured := filepath.Join(dir, "measured")
	p := density.Params{Backend: "cgroup", Deployments: []int{1, 2, 3}, VMMemoryBytes: 256 << 20, MemorySizeBytes: 200 << 20,
		Scan: memload.ScanRandom, WriteFraction: 1, Content: memload.Content{Kind: memload.ContentRandom}, WorkloadRuntime: 5 * time.Second,
		OvercommitPercent: 100, NodeMemoryBytes: 1 << 30}
	os.MkdirAll(measured, 0o755)
	if err := results.WriteRun(measured, &results.Run{Schema: results.SchemaVersion, Kind: "density", Params: p.AsMap(),
		Machine: results.Machine{CPUs: 2}, Node: results.Node{MemoryBytes: 1 << 30, SwapBytes: 3 << 30}}); err != nil {
		t.Fatal(err)
	}
	r := runHeadroom(t, "sim", "--like", measured, "--deployments", "1,2", "--json", "--out", filepath.Join(dir, "sim"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var run struct {
		Params map[string]any `json:"params"`
		Node   struct {
			MemoryBytes uint64 `json:"memory_bytes"`
		} `json:"node"`
		Steps []struct{ Workers int } `json:"steps"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if run.Node.MemoryBytes != 1<<30 || len(run.Steps) != 2 || run.Params["worker_kind"] != "process" || run.Params["like"] != measured {
		t.Errorf("want the run's 1 GiB node of processes and the command line's two steps: %+v", run)
	}
	if r := runHeadroom(t, "sim", "--like", filepath.Join(dir, "none")); r.code != 2 || !strings.Contains(r.stderr, "--like") {
		t.Errorf("a missing run: exit %d, %q", r.code, r.stderr)
	}
	// A KubeVirt run does not say its guests' overheads: --like names the
	// flags it needs, and runs once they are given.
	kubevirt := filepath.Join(dir, "kubevirt")
	p.Backend = "kubevirt"
	os.MkdirAll(kubevirt, 0o755)
	if err := results.WriteRun(kubevirt, &results.Run{Schema: results.SchemaVersion, Kind: "density", Params: p.AsMap(),
		Machine: results.Machine{CPUs: 2}, Node: results.Node{MemoryBytes: 1 << 30, SwapBytes: 3 << 30}}); err != nil {
		t.Fatal(err)
	}
	r = runHeadroom(t, "sim", "--like", kubevirt, "--guest-overhead", "40Mi", "--out", filepath.Join(dir, "sim-kubevirt-half"))
	if want := "pass --overhead\n"; r.code != 2 || !strings.HasSuffix(r.stderr, want) {
		t.Errorf("a kubevirt run given --guest-overhead alone: exit %d, %q; want 2 and %q", r.code, r.stderr, want)
	}
	r = runHeadroom(t, "sim", "--like", kubevirt, "--guest-overhead", "40Mi", "--overhead", "200Mi", "--deployments", "1", "--json", "--out", filepath.Join(dir, "sim-kubevirt"))
	if r.code != 0 || !strings.Contains(r.stdout, `"worker_kind":"vm"`) {
		t.Errorf("a kubevirt run given its overheads: exit %d, %s; want a run of VMs", r.code, r.stderr)
	}
}

// An output path that cannot be written is refused before the report is
// drawn, naming the flag.
func TestReportUnwritableOutputExitsTwo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if r := runHeadroom(t, "sim", "--deployments", "1:2:1", "--out", dir); r.code != 0 {
		t.Fatalf("sim: exit %d: %s", r.code, r.stderr)
	}
	r := runHeadroom(t, "report", dir, "-o", "/dev/null/report.html")
	if r.code != 2 || r.stderr != "headroom: -o /dev/null: not a directory\n" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// The commands that change the machine need root, and say so in one line
// before they touch anything or promise a run (as nobody when the test
// runs as root).
func TestRootCommandsRefuseAUser(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "swap.json")
	self := os.Args[0]
	if os.Geteuid() == 0 {
		// nobody runs a copy of this binary where it may read it.
		self = filepath.Join(dir, "headroom.test")
		b, err := os.ReadFile(os.Args[0])
		if err != nil || os.WriteFile(self, b, 0o755) != nil || os.Chmod(filepath.Dir(dir), 0o755) != nil {
			t.Fatalf("copy the test binary for nobody: %v", err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"swap", "up", "--file", "64Mi", "--state", state}, "headroom: swap up needs root"},
		// What the machine cannot take is said before root is asked for.
		{[]string{"swap", "up", "--zram", "1Pi", "--state", state}, "headroom: zram of 1.0 PiB is more than twice this machine's RAM"},
		{[]string{"swap", "down", "--state", state}, "headroom: swap down needs root"},
		{[]string{"sim", "paging", "--workers", "2"}, "headroom: sim paging needs root"},
		{[]string{"density", "--deployments", "1", "--out", filepath.Join(dir, "run")}, "headroom: density needs root"},
	} {
		cmd := headroomAt(self, c.args...)
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.HasPrefix(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v as a user: %v, %q; want exit 2 and one line %q", c.args, err, stderr.String(), c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "headroom.test" {
			t.Errorf("a refused command left %s in %s", e.Name(), dir)
		}
	}
}

// report --json alone prints the summary and writes no page into the
// working directory; with -o it writes the page as well.
func TestReportJSONWritesThePageOnlyWithOutput(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := runHeadroom(t, "sim", "--deployments", "1:2:1", "--out", run); r.code != 0 {
		t.Fatalf("sim: exit %d: %s", r.code, r.stderr)
	}
	cwd := filepath.Join(dir, "cwd")
	os.Mkdir(cwd, 0o755)
	cmd := headroom("report", run, "--json")
	cmd.Dir = cwd
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"knee_workers"`) {
		t.Fatalf("report --json: %v, %s", err, out)
	}
	if left, _ := os.ReadDir(cwd); len(left) != 0 {
		t.Errorf("report --json wrote %d files into the working directory, first %s", len(left), left[0].Name())
	}
	page := filepath.Join(dir, "page", "r.html")
	if r := runHeadroom(t, "report", run, "--json", "-o", page); r.code != 0 || !strings.Contains(r.stdout, `"knee_workers"`) {
		t.Fatalf("report --json -o: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(page); err != nil {
		t.Errorf("report --json -o %s: %v", page, err)
	}
	// One run given twice is refused: it would hide under itself.
	if r := runHeadroom(t, "report", run, run+"/", "--json"); r.code != 2 || !strings.Contains(r.stderr, "give each run once") {
		t.Errorf("report RUN RUN/: exit %d, %q; want 2 and the run named", r.code, r.stderr)
	}
}

// density's --out is checked before the run sets anything up, and not
// made: a run that fails before its start (libvirtd down) leaves none.
func TestCheckOutputDirMakesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results", "run")
	if err := checkOutputDir("--out", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Fatalf("checking --out made %s (%v)", filepath.Dir(dir), err)
	}
}

// An unknown flag is answered with the one flag a typo away, never with a
// guess between two or with a hidden flag.
func TestNearestFlag(t *testing.T) {
	fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, name := range []string{"swap", "swab", "node-memory", "guest-memory", "seq-a", "seq-b"} {
		fl.String(name, "", "")
	}
	fl.MarkHidden("swab")
	for name, want := range map[string]string{"swp": "swap", "swabb": "swap", "node-memroy": "node-memory", "uest-memory": "guest-memory",
		"seq-c": "", "vm-memory": "", "bogus": "", "x": ""} {
		if got := nearestFlag(fl, name); got != want {
			t.Errorf("--%s: %q, want %q", name, got, want)
		}
	}
}
