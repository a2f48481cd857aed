package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/probe"
)

const agentLong = `The node agent: swap-based memory overcommit that never lets the node
thrash or OOM.

Every interval it samples the scope (a cgroup subtree: "/" for the host, or
e.g. machine.slice) and the node's swap and pressure counters; gives every
workload (a child cgroup of the scope) swap in proportion to its memory
request (request / scope RAM × scope swap; none for protected workloads);
and when a signal crosses its threshold, evicts the workload ranked first
(over its swap allowance, over its request, lowest priority, most memory
above request counting swap): SIGTERM to its processes, SIGKILL after the
grace period; a VM (metadata "qmp") is powered down through QMP, then quit,
then killed. A victim still present after the eviction deadline is given
up on and the next candidate may be evicted. Protected workloads are never
evicted; nothing is done on data that could not be read.

Signals, over a sliding window from raw counter differences:
  swap_utilization   working set + swap used > RAM + factor × swap
  swap_in_rate       swap-ins/s averaged over the window (0: off)
  swap_out_rate      swap-outs/s averaged over the window (0: off)
  psi_memory_full    memory "full" stall share of the window, percent (0: off)
  psi_memory_some    memory "some" stall share of the window, percent (0: off)
  swap_exhaustion    seconds until the trend reaches RAM + swap (0: off)

Workload metadata: <workloads-dir>/<child-cgroup-name>.json, e.g.
  {"name": "vm-db", "priority": 100, "memoryRequest": "4Gi", "protected": false,
   "qmp": "/run/vms/db/qmp.sock"}
A workload without a file has priority 0, request 0 (no swap), unprotected.
With "qmp", the agent reads the guest's memory statistics through the VM's
balloon (into /v1/snapshot and /metrics) and evicts it with a power-down.

Configuration, each overriding the one before: defaults, --config YAML (keys
as in the JSON names of --print-config), wasp-agent's environment variables
(SWAP_UTILIZATION_THRESHOLD_FACTOR, MAX_AVERAGE_SWAP_IN_PAGES_PER_SECOND,
MAX_AVERAGE_SWAP_OUT_PAGES_PER_SECOND, AVERAGE_WINDOW_SIZE_SECONDS), flags.

Decisions are JSON lines on stdout; logs go to stderr. HTTP (default
127.0.0.1:9731): GET /v1/decisions, /v1/snapshot, /metrics, /healthz.

Exit status: 0 after SIGINT/SIGTERM, 1 on a runtime failure, 2 on invalid
configuration (nothing on the machine is touched then).`

type agentFlags struct {
	config      string
	printConfig bool
}

func newAgentCommand() *cobra.Command {
	f := &agentFlags{}
	cfg := agent.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: swap allowances and eviction before thrashing or OOM",
		Long:  agentLong,
		Example: `  headroom agent --scope machine.slice --dry-run
  headroom agent --config /etc/headroom/agent.yaml
  SWAP_UTILIZATION_THRESHOLD_FACTOR=0.99 headroom agent --scope kubepods.slice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			final, err := resolveAgentConfig(cmd.Flags(), f, cfg)
			if err != nil {
				return usageError{err}
			}
			if f.printConfig {
				b, _ := yaml.Marshal(final)
				cmd.OutOrStdout().Write(b)
				return nil
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			a, err := agent.New(final, log, cmd.OutOrStdout())
			if err != nil {
				return usageError{err}
			}
			return a.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML configuration file")
	fl.BoolVar(&f.printConfig, "print-config", false, "print the resolved configuration as YAML and exit")
	fl.StringVar(&cfg.Scope, "scope", cfg.Scope, `cgroup subtree to protect: "/" (the host), machine.slice, kubepods.slice, ...`)
	fl.StringVar(&cfg.WorkloadsDir, "workloads-dir", cfg.WorkloadsDir, "directory of <child-cgroup-name>.json workload metadata")
	fl.StringVar(&cfg.Listen, "listen", cfg.Listen, `HTTP address for metrics and the API ("" disables)`)
	fl.Float64Var(&cfg.IntervalSeconds, "interval", cfg.IntervalSeconds, "sampling interval, seconds")
	fl.BoolVar(&cfg.DryRun, "dry-run", cfg.DryRun, "log decisions without acting")
	fl.Float64Var(&cfg.SwapUtilizationThresholdFactor, "swap-utilization-threshold-factor", cfg.SwapUtilizationThresholdFactor, "evict when working set + swap used > RAM + factor × swap")
	fl.Float64Var(&cfg.MaxAverageSwapInPagesPerSecond, "max-swap-in-pages-per-sec", cfg.MaxAverageSwapInPagesPerSecond, "swap-in rate threshold over the window (0: off; see calibrate)")
	fl.Float64Var(&cfg.MaxAverageSwapOutPagesPerSecond, "max-swap-out-pages-per-sec", cfg.MaxAverageSwapOutPagesPerSecond, "swap-out rate threshold over the window (0: off; see calibrate)")
	fl.Float64Var(&cfg.AverageWindowSizeSeconds, "window", cfg.AverageWindowSizeSeconds, "sliding window for rates, PSI and trends, seconds")
	fl.Float64Var(&cfg.PSIFullPercent, "psi-full-percent", cfg.PSIFullPercent, "memory full-stall share of the window that triggers eviction (0: off)")
	fl.Float64Var(&cfg.PSISomePercent, "psi-some-percent", cfg.PSISomePercent, "memory some-stall share of the window that triggers eviction (0: off)")
	fl.Float64Var(&cfg.ExhaustionHorizonSeconds, "exhaustion-horizon", cfg.ExhaustionHorizonSeconds, "evict when RAM + swap would be exhausted within this many seconds (0: off)")
	fl.Float64Var(&cfg.CooldownSeconds, "cooldown", cfg.CooldownSeconds, "seconds between evictions")
	fl.Float64Var(&cfg.EvictionGraceSeconds, "eviction-grace", cfg.EvictionGraceSeconds, "seconds from the graceful request (SIGTERM, a VM's power-down) to the forced one (QMP quit, SIGKILL)")
	fl.Float64Var(&cfg.EvictionDeadlineSeconds, "eviction-deadline", cfg.EvictionDeadlineSeconds, "seconds after which a victim still present is given up on and the next candidate may be evicted")
	fl.IntVar(&cfg.OOMScoreAdj, "oom-score-adj", cfg.OOMScoreAdj, "the agent's own oom_score_adj")
	fl.BoolVar(&cfg.Mlock, "mlock", cfg.Mlock, "lock the agent's memory so it is never swapped")
	fl.StringSliceVar(&cfg.IgnoreCgroups, "ignore-cgroups", cfg.IgnoreCgroups, "child cgroups of the scope that are not workloads (never evicted, no swap allowance); the agent's own is always ignored")
	cmd.AddCommand(newCalibrateCommand())
	return cmd
}

// resolveAgentConfig layers defaults, the YAML file, wasp's environment and
// the flags that were set, then validates.
func resolveAgentConfig(fl *pflag.FlagSet, f *agentFlags, fromFlags agent.Config) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	if f.config != "" {
		if err := cfg.LoadFile(f.config); err != nil {
			return cfg, fmt.Errorf("--config: %w", err)
		}
	}
	if err := cfg.LoadEnv(os.LookupEnv); err != nil {
		return cfg, err
	}
	// Flags win, but only those given: copy each changed flag's value.
	set := map[string]func(){
		"scope":                             func() { cfg.Scope = fromFlags.Scope },
		"ignore-cgroups":                    func() { cfg.IgnoreCgroups = fromFlags.IgnoreCgroups },
		"workloads-dir":                     func() { cfg.WorkloadsDir = fromFlags.WorkloadsDir },
		"listen":                            func() { cfg.Listen = fromFlags.Listen },
		"interval":                          func() { cfg.IntervalSeconds = fromFlags.IntervalSeconds },
		"dry-run":                           func() { cfg.DryRun = fromFlags.DryRun },
		"swap-utilization-threshold-factor": func() { cfg.SwapUtilizationThresholdFactor = fromFlags.SwapUtilizationThresholdFactor },
		"max-swap-in-pages-per-sec":         func() { cfg.MaxAverageSwapInPagesPerSecond = fromFlags.MaxAverageSwapInPagesPerSecond },
		"max-swap-out-pages-per-sec":        func() { cfg.MaxAverageSwapOutPagesPerSecond = fromFlags.MaxAverageSwapOutPagesPerSecond },
		"window":                            func() { cfg.AverageWindowSizeSeconds = fromFlags.AverageWindowSizeSeconds },
		"psi-full-percent":                  func() { cfg.PSIFullPercent = fromFlags.PSIFullPercent },
		"psi-some-percent":                  func() { cfg.PSISomePercent = fromFlags.PSISomePercent },
		"exhaustion-horizon":                func() { cfg.ExhaustionHorizonSeconds = fromFlags.ExhaustionHorizonSeconds },
		"cooldown":                          func() { cfg.CooldownSeconds = fromFlags.CooldownSeconds },
		"eviction-grace":                    func() { cfg.EvictionGraceSeconds = fromFlags.EvictionGraceSeconds },
		"eviction-deadline":                 func() { cfg.EvictionDeadlineSeconds = fromFlags.EvictionDeadlineSeconds },
		"oom-score-adj":                     func() { cfg.OOMScoreAdj = fromFlags.OOMScoreAdj },
		"mlock":                             func() { cfg.Mlock = fromFlags.Mlock },
	}
	fl.Visit(func(fl *pflag.Flag) {
		if apply, ok := set[fl.Name]; ok {
			apply()
		}
	})
	return cfg, cfg.Validate()
}

type calibrateFlags struct {
	device       string
	seconds      time.Duration
	jobs         int
	fraction     float64
	writeConfig  string
	writeTestDir string
	json         bool
}

func newCalibrateCommand() *cobra.Command {
	f := &calibrateFlags{}
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure the swap device and derive swap rate thresholds from it",
		Long: `Measures the swap device's 4 KiB random-read and random-write rates with
direct I/O (like fio --rw=randread/randwrite --bs=4k --direct=1) and sets
maxAverageSwapInPagesPerSecond and maxAverageSwapOutPagesPerSecond to
--fraction of them: thresholds that mean something for this device, instead
of a fixed default. For a swap file, both tests use a scratch file written
full beside it (a swap file's unwritten blocks would be answered without
device I/O); for a partition, reads go to the partition (never written) and
writes are measured only with --write-test-dir on the same device.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCalibrate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.device, "device", "", "swap file or partition to probe (default: the highest-priority swap area that is not zram)")
	fl.DurationVar(&f.seconds, "duration", 5*time.Second, "length of each of the read and write tests")
	fl.IntVar(&f.jobs, "jobs", 4, "concurrent I/Os (queue depth)")
	fl.Float64Var(&f.fraction, "fraction", 0.5, "share of the device's measured rate to allow before evicting, in (0,1]")
	fl.StringVar(&f.writeConfig, "write-config", "", "YAML config file to create or update with the thresholds")
	fl.StringVar(&f.writeTestDir, "write-test-dir", "", "directory on the swap device for the write test (default: beside a swap file; none for a partition)")
	fl.BoolVar(&f.json, "json", false, "print the result as JSON")
	return cmd
}

func runCalibrate(cmd *cobra.Command, f *calibrateFlags) error {
	switch {
	case !(f.fraction > 0 && f.fraction <= 1):
		return usagef("--fraction must be in (0,1], got %g", f.fraction)
	case f.jobs < 1 || f.jobs > 256:
		return usagef("--jobs must be in [1,256], got %d", f.jobs)
	case f.seconds < 100*time.Millisecond:
		return usagef("--duration must be at least 100ms")
	}
	dev, err := pickSwapDevice(f.device)
	if err != nil {
		return usageError{err}
	}
	opts := probe.Options{Duration: f.seconds, Jobs: f.jobs, ScratchBytes: min(dev.SizeBytes, 256<<20)}
	switch {
	case f.writeTestDir != "":
		opts.Dir = f.writeTestDir
	case dev.Type == "file":
		opts.Dir = filepath.Dir(dev.Path)
	default:
		opts.Device, opts.DeviceBytes = dev.Path, dev.SizeBytes
	}
	res, err := probe.Run(cmd.Context(), opts)
	if err != nil {
		return err
	}
	thresholds := map[string]float64{"maxAverageSwapInPagesPerSecond": f.fraction * res.ReadIOPS}
	if res.WriteIOPS > 0 {
		thresholds["maxAverageSwapOutPagesPerSecond"] = f.fraction * res.WriteIOPS
	}
	if f.writeConfig != "" {
		if err := mergeYAML(f.writeConfig, thresholds); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	if f.json {
		return json.NewEncoder(out).Encode(struct {
			probe.Result
			Fraction   float64            `json:"fraction"`
			Thresholds map[string]float64 `json:"thresholds"`
		}{res, f.fraction, thresholds})
	}
	fmt.Fprintf(out, "%s (probed on %s): 4 KiB random read %.0f IOPS (%.0f µs at queue depth %d)", dev.Path, res.ReadPath, res.ReadIOPS, res.ReadLatencyUs, res.Jobs)
	if res.WriteIOPS > 0 {
		fmt.Fprintf(out, ", random write %.0f IOPS (%.0f µs)", res.WriteIOPS, res.WriteLatencyUs)
	}
	fmt.Fprintln(out)
	keys := make([]string, 0, len(thresholds))
	for k := range thresholds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "%s: %.0f  (%g of the device)\n", k, thresholds[k], f.fraction)
	}
	if f.writeConfig != "" {
		fmt.Fprintf(out, "written to %s\n", f.writeConfig)
	}
	return nil
}

func pickSwapDevice(path string) (host.SwapDevice, error) {
	swaps, err := host.ReadSwaps()
	if err != nil {
		return host.SwapDevice{}, err
	}
	var best *host.SwapDevice
	for i, s := range swaps {
		if path != "" && s.Path == path {
			return s, nil
		}
		if path == "" && !strings.Contains(s.Path, "zram") && (best == nil || s.Priority > best.Priority) {
			best = &swaps[i]
		}
	}
	if path != "" {
		return host.SwapDevice{}, fmt.Errorf("--device %s is not an active swap area (see /proc/swaps)", path)
	}
	if best == nil {
		return host.SwapDevice{}, fmt.Errorf("no active swap area to calibrate (zram is not probed); enable swap or pass --device")
	}
	return *best, nil
}

// mergeYAML sets keys in a YAML file, keeping its other keys.
func mergeYAML(path string, values map[string]float64) error {
	doc := map[string]any{}
	if b, err := os.ReadFile(path); err == nil {
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("--write-config %s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	for k, v := range values {
		doc[k] = v
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
