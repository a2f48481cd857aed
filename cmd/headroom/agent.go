package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/kube"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/probe"
	"github.com/headroom-dev/headroom/internal/units"
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

On a libvirt host (--libvirt-uri qemu:///system): the workloads are the
running domains, each in its QEMU's memory cgroup, with priority, request,
protection and eviction mode from headroom's element in the domain's
<metadata> (namespace https://headroom.dev/xmlns/workload/1, set with virsh
metadata; without it: priority 0, the current memory as the request); the
scope "/" means libvirt's machine partition. Evictions are an ACPI shutdown
then destroy, or a managed save (eviction="managedsave"). See
docs/guide/libvirt.md.

On a Kubernetes node (--kubernetes-node NAME, from the DaemonSet in
deploy/): the workloads are the node's pods from the API (a pod watch on
spec.nodeName), named namespace/name, each in its kubelet cgroup (v1 or v2,
systemd or cgroupfs driver, under --kubernetes-cgroup-root); the scope "/"
means the kubepods cgroup. Priority is the pod's, the request the pod's
memory request, and critical pods, the agent's namespace and
--kubernetes-protected-selector are protected. A swap limit the kubelet set
(LimitedSwap, cgroup v2) is read; elsewhere the LimitedSwap formula is
applied to Burstable pods when their cgroup appears. Evictions are
policy/v1 Evictions (PodDisruptionBudgets hold; a budget's refusal moves on
to the next candidate; any other 429, such as KubeVirt's evacuation, is
waited for); no pod is ever deleted. While a signal fires the node has the
taint headroom.io/memory-pressure:NoSchedule and the condition
MemoryPressureSwap. See docs/guide/kubernetes.md.

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

// configFlag binds one agent flag to one configuration key; the flag's
// value is the key's field in a Config, so the flag, its key and its unit
// are named once. Keys in seconds take durations ("250ms", "30s") or plain
// seconds.
type configFlag struct {
	name  string
	usage string
	field func(*agent.Config) any // pointer to the key's field
}

func agentConfigFlags() []configFlag {
	return []configFlag{
		{"scope", `cgroup subtree to protect: "/" (the host), machine.slice, kubepods.slice, ...`, func(c *agent.Config) any { return &c.Scope }},
		{"workloads-dir", "directory of <child-cgroup-name>.json workload metadata", func(c *agent.Config) any { return &c.WorkloadsDir }},
		{"listen", `HTTP address for metrics and the API ("" disables)`, func(c *agent.Config) any { return &c.Listen }},
		{"interval", "sampling interval", func(c *agent.Config) any { return (*secondsValue)(&c.IntervalSeconds) }},
		{"dry-run", "log decisions without acting", func(c *agent.Config) any { return &c.DryRun }},
		{"swap-utilization-threshold-factor", "evict when working set + swap used > RAM + factor × swap", func(c *agent.Config) any { return &c.SwapUtilizationThresholdFactor }},
		{"max-swap-in-pages-per-sec", "swap-in rate threshold over the window (0: off; see calibrate)", func(c *agent.Config) any { return &c.MaxAverageSwapInPagesPerSecond }},
		{"max-swap-out-pages-per-sec", "swap-out rate threshold over the window (0: off; see calibrate)", func(c *agent.Config) any { return &c.MaxAverageSwapOutPagesPerSecond }},
		{"window", "sliding window for rates, PSI and trends", func(c *agent.Config) any { return (*secondsValue)(&c.AverageWindowSizeSeconds) }},
		{"psi-full-percent", "memory full-stall share of the window that triggers eviction (0: off)", func(c *agent.Config) any { return &c.PSIFullPercent }},
		{"psi-some-percent", "memory some-stall share of the window that triggers eviction (0: off)", func(c *agent.Config) any { return &c.PSISomePercent }},
		{"exhaustion-horizon", "evict when RAM + swap would be exhausted within this time (0: off)", func(c *agent.Config) any { return (*secondsValue)(&c.ExhaustionHorizonSeconds) }},
		{"cooldown", "time between evictions", func(c *agent.Config) any { return (*secondsValue)(&c.CooldownSeconds) }},
		{"eviction-grace", "from the graceful request (SIGTERM, power-down) to the forced one (QMP quit, SIGKILL)", func(c *agent.Config) any { return (*secondsValue)(&c.EvictionGraceSeconds) }},
		{"eviction-deadline", "time after which a victim still present is given up on and the next candidate may be evicted", func(c *agent.Config) any { return (*secondsValue)(&c.EvictionDeadlineSeconds) }},
		{"abandon-retry", "time a victim given up on is not chosen again", func(c *agent.Config) any { return (*secondsValue)(&c.AbandonRetrySeconds) }},
		{"refusal-backoff-max", "cap of a refused workload's back-off (1 s, doubling); the next candidate goes at once", func(c *agent.Config) any { return (*secondsValue)(&c.RefusalBackoffMaxSeconds) }},
		{"shutdown-grace", "on SIGTERM/SIGINT, wait this long for evictions in progress (never forced; a 2nd signal exits)", func(c *agent.Config) any { return (*secondsValue)(&c.ShutdownGraceSeconds) }},
		{"state-dir", `directory of the eviction journal a restarted agent resumes from, one agent's at a time ("": none)`, func(c *agent.Config) any { return &c.StateDir }},
		{"proc-root", "where /proc is read (a fixture tree in tests)", func(c *agent.Config) any { return &c.ProcRoot }},
		{"sys-root", "where /sys is read (a fixture tree in tests)", func(c *agent.Config) any { return &c.SysRoot }},
		{"cgroup-mount", `mount point of the memory cgroup hierarchy ("": found under --sys-root)`, func(c *agent.Config) any { return &c.CgroupMount }},
		{"oom-score-adj", "the agent's own oom_score_adj", func(c *agent.Config) any { return &c.OOMScoreAdj }},
		{"mlock", "lock the agent's memory so it is never swapped", func(c *agent.Config) any { return &c.Mlock }},
		{"ignore-cgroups", "child cgroups that are not workloads (and the agent's own)", func(c *agent.Config) any { return &c.IgnoreCgroups }},
		{"ksm", "off (as is), advisor (kernel-paced) or governor (paced by profit per ksmd CPU-second)", func(c *agent.Config) any { return &c.KSMMode }},
		{"ksm-max-cpu-percent", "KSM governor: share of a core ksmd may use while there is much to gain", func(c *agent.Config) any { return &c.KSMMaxCPUPercent }},
		{"ksm-idle-cpu-percent", "KSM governor: share of a core ksmd uses once a full scan no longer pays (0: stopped)", func(c *agent.Config) any { return &c.KSMIdleCPUPercent }},
		{"ksm-min-profit", "KSM governor: a burst ends when a full scan saves less than this per ksmd CPU-second", func(c *agent.Config) any { return (*bytesFloatValue)(&c.KSMMinProfitBytesPerCPUSecond) }},
		{"ksm-ram-need", "KSM governor: burst only when the scope's working set and swap reach this fraction of its RAM", func(c *agent.Config) any { return &c.KSMRAMNeedFraction }},
		{"balloon", "balloon controller for VMs: those whose metadata names a QMP socket, or libvirt domains with a virtio balloon", func(c *agent.Config) any { return &c.Balloon }},
		{"balloon-policy", "headroom (memory states, targets from guest stats) or mom (oVirt MOM's balloon.rules)", func(c *agent.Config) any { return &c.BalloonPolicy }},
		{"balloon-min-free", "the scope's minFree, unit of the memory states (0: VMware's 899 MiB a 28 GiB + 1% of the rest)", func(c *agent.Config) any { return (*bytesFloatValue)(&c.BalloonMinFreeBytes) }},
		{"balloon-guest-margin", "a guest is never ballooned below its active memory plus this (or the fraction, if more)", func(c *agent.Config) any { return (*bytesFloatValue)(&c.BalloonGuestMarginBytes) }},
		{"balloon-guest-margin-fraction", "the guest margin as a fraction of its RAM", func(c *agent.Config) any { return &c.BalloonGuestMarginFraction }},
		{"libvirt-uri", "a libvirt host: its running domains are the workloads, evicted through libvirt (e.g. qemu:///system)", func(c *agent.Config) any { return &c.Libvirt.URI }},
		{"libvirt-resume", "libvirt: start parked (managed-saved) domains again, highest priority first, once one fits", func(c *agent.Config) any { return &c.ResumeParked }},
		{"resume-margin", "room a parked domain needs above its memory, under the eviction threshold, to be resumed", func(c *agent.Config) any { return (*bytesFloatValue)(&c.ResumeMarginBytes) }},
		{"resume-hold", "time that room must last before a parked domain is resumed", func(c *agent.Config) any { return (*secondsValue)(&c.ResumeHoldSeconds) }},
		{"kubernetes-node", "a Kubernetes node: its pods are the workloads, evicted through the Eviction API; tainted under pressure", func(c *agent.Config) any { return &c.Kubernetes.NodeName }},
		{"kubeconfig", `Kubernetes: kubeconfig file ("": the pod's service account)`, func(c *agent.Config) any { return &c.Kubernetes.Kubeconfig }},
		{"kubernetes-cgroup-root", "Kubernetes: the kubelet's --cgroup-root", func(c *agent.Config) any { return &c.Kubernetes.CgroupRoot }},
		{"kubernetes-cgroup-driver", `Kubernetes: the kubelet's cgroup driver, systemd or cgroupfs ("": detect)`, func(c *agent.Config) any { return &c.Kubernetes.CgroupDriver }},
		{"kubernetes-namespace", "Kubernetes: the agent's own namespace (its pods are protected)", func(c *agent.Config) any { return &c.Kubernetes.Namespace }},
		{"kubernetes-protected-selector", "Kubernetes: label selector of pods never evicted (e.g. tier=control)", func(c *agent.Config) any { return &c.Kubernetes.ProtectedSelector }},
		{"kubernetes-swap", "who sets pods' swap limits: auto (the kubelet where it did, else the agent), agent or kubelet", func(c *agent.Config) any { return &c.Kubernetes.Swap }},
		{"balloon-start", "a new guest's floor keeps start room for its workload this long (0: off)", func(c *agent.Config) any { return (*secondsValue)(&c.BalloonStartSeconds) }},
		{"balloon-mom-interval", "MOM policy: interval between balloon changes", func(c *agent.Config) any { return (*secondsValue)(&c.BalloonMOMIntervalSeconds) }},
	}
}

// register defines the flag on fl, bound to its field in c.
func (f configFlag) register(fl *pflag.FlagSet, c *agent.Config) {
	flagvalue.Bind(fl, f.field(c), f.name, f.usage)
}

// copy sets the flag's key in dst to its value in src.
func (f configFlag) copy(dst, src *agent.Config) {
	switch d := f.field(dst).(type) {
	case *string:
		*d = *f.field(src).(*string)
	case *bool:
		*d = *f.field(src).(*bool)
	case *int:
		*d = *f.field(src).(*int)
	case *float64:
		*d = *f.field(src).(*float64)
	case *[]string:
		*d = *f.field(src).(*[]string)
	case *secondsValue:
		*d = *f.field(src).(*secondsValue)
	case *bytesFloatValue:
		*d = *f.field(src).(*bytesFloatValue)
	}
}

// bytesFloatValue is a configuration key in bytes, set as a size ("16Mi").
type bytesFloatValue float64

func (v *bytesFloatValue) String() string {
	b := flagvalue.Bytes(*v)
	return b.String()
}
func (v *bytesFloatValue) Type() string { return "size" }
func (v *bytesFloatValue) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, units.SizeForm)
	}
	*v = bytesFloatValue(n)
	return nil
}

// secondsValue is a configuration key in seconds, set as a duration
// ("250ms", "30s") or a plain number of seconds.
type secondsValue float64

func (v *secondsValue) String() string {
	return time.Duration(float64(*v) * float64(time.Second)).String()
}
func (v *secondsValue) Type() string { return "duration" }
func (v *secondsValue) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		*v = secondsValue(d.Seconds())
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want e.g. 250ms, 30s, or a number of seconds", s)
	}
	*v = secondsValue(f)
	return nil
}

func newAgentCommand() *cobra.Command {
	f := &agentFlags{}
	cfg := agent.DefaultConfig()
	flags := agentConfigFlags()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: swap allowances and eviction before thrashing or OOM",
		Long:  agentLong,
		Example: `  headroom agent --scope machine.slice --dry-run
  headroom agent --config /etc/headroom/agent.yaml
  SWAP_UTILIZATION_THRESHOLD_FACTOR=0.99 headroom agent --scope kubepods.slice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			final, err := resolveAgentConfig(cmd.Flags(), f, flags, cfg)
			if err != nil {
				return usageError{err}
			}
			if f.printConfig {
				b, _ := yaml.Marshal(final)
				cmd.OutOrStdout().Write(b)
				return nil
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			var onNode *kube.SourceConfig
			if final.Kubernetes.NodeName != "" {
				h, err := agent.Hierarchy(final)
				if err != nil {
					return usageError{err}
				}
				sc, err := kube.Resolve(final.Kubernetes, h)
				if err != nil {
					return usageError{err}
				}
				final.Scope = sc.Scope(final.Scope)
				onNode = &sc
			}
			var hierarchy cgroup.Hierarchy
			if final.Libvirt.URI != "" {
				if hierarchy, err = agent.Hierarchy(final); err != nil {
					return usageError{err}
				}
				final.Scope = libvirt.Scope(hierarchy, final.Scope)
			}
			a, err := agent.New(final, log, cmd.OutOrStdout())
			if err != nil {
				return usageError{err}
			}
			if final.Libvirt.URI != "" {
				// Like the pod watch: libvirtd is followed while the agent
				// stops, so evictions in progress are seen to their end.
				attached, detach := context.WithCancel(context.WithoutCancel(cmd.Context()))
				defer detach()
				if _, err := libvirt.Attach(attached, a, libvirt.Config{URI: final.Libvirt.URI, Hierarchy: hierarchy, ProcRoot: final.ProcRoot,
					Resync: time.Duration(final.WorkloadStatsSeconds * float64(time.Second)), Balloon: final.Balloon},
					time.Duration(final.EvictionGraceSeconds*float64(time.Second)), log); err != nil {
					return usageError{err}
				}
			}
			if onNode != nil {
				// The pod watch outlives the stop signal: evictions in
				// progress are followed to their end while the agent stops.
				attached, detach := context.WithCancel(context.WithoutCancel(cmd.Context()))
				detached, err := kube.Attach(attached, a, final.Kubernetes, *onNode, log)
				if err != nil {
					detach()
					return usageError{err}
				}
				defer func() { detach(); detached() }()
			}
			return a.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML configuration file")
	fl.BoolVar(&f.printConfig, "print-config", false, "print the resolved configuration as YAML and exit")
	for _, cf := range flags {
		cf.register(fl, &cfg)
	}
	cmd.AddCommand(newCalibrateCommand())
	return cmd
}

// resolveAgentConfig layers defaults, the YAML file, wasp's environment and
// the flags that were set, then validates.
func resolveAgentConfig(fl *pflag.FlagSet, f *agentFlags, flags []configFlag, fromFlags agent.Config) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	if f.config != "" {
		if err := cfg.LoadFile(f.config); err != nil {
			return cfg, fmt.Errorf("--config: %w", err)
		}
	}
	if err := cfg.LoadEnv(os.LookupEnv); err != nil {
		return cfg, err
	}
	// Flags win, but only those given.
	for _, cf := range flags {
		if fl.Changed(cf.name) {
			cf.copy(&cfg, &fromFlags)
		}
	}
	if err := cfg.Validate(); err != nil {
		// The check names configuration keys; a user who typed flags is
		// told which of them set the keys it names.
		var given []string
		for _, cf := range flags {
			if fl.Changed(cf.name) && namesKey(err.Error(), cf.key()) && !strings.Contains(err.Error(), "--"+cf.name) {
				given = append(given, "--"+cf.name)
			}
		}
		if len(given) > 0 {
			err = fmt.Errorf("%w (set by %s)", err, strings.Join(given, ", "))
		}
		return cfg, err
	}
	return cfg, nil
}

// key is the configuration key the flag sets, as --print-config names it
// (dotted within a section: kubernetes.nodeName), found from the address
// of the field the flag binds.
func (f configFlag) key() string {
	var c agent.Config
	return fieldKey(reflect.ValueOf(&c).Elem(), reflect.ValueOf(f.field(&c)).Pointer(), "")
}

func fieldKey(v reflect.Value, addr uintptr, prefix string) string {
	for i := 0; i < v.NumField(); i++ {
		field, name := v.Field(i), strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0]
		if field.Kind() == reflect.Struct {
			section := prefix
			if name != "" { // an inline struct's keys are at its parent's level
				section += name + "."
			}
			if k := fieldKey(field, addr, section); k != "" {
				return k
			}
		} else if field.Addr().Pointer() == addr {
			return prefix + name
		}
	}
	return ""
}

// namesKey tells whether msg names key as a word (not inside a longer key).
func namesKey(msg, key string) bool {
	word := func(r byte) bool {
		return r == '_' || r == '.' || 'a' <= r|0x20 && r|0x20 <= 'z' || '0' <= r && r <= '9'
	}
	for i := 0; ; i++ {
		j := strings.Index(msg[i:], key)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(key)
		if (start == 0 || !word(msg[start-1])) && (end == len(msg) || !word(msg[end])) {
			return true
		}
		i = start
	}
}

type calibrateFlags struct {
	probe.CalibrateOptions
	device      string
	writeConfig string
	json        bool
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
	fl.DurationVar(&f.Duration, "duration", 5*time.Second, "length of each of the read and write tests")
	fl.IntVar(&f.Jobs, "jobs", 4, "concurrent I/Os (queue depth)")
	fl.IntVar(&f.Rounds, "rounds", 1, "repeat the read and write tests this many times, keeping the median rate (a shared disk's rate moves)")
	fl.Float64Var(&f.Fraction, "fraction", 0.5, "share of the device's measured rate to allow before evicting, in (0,1]")
	fl.StringVar(&f.writeConfig, "write-config", "", "YAML config file to create or update with the thresholds")
	fl.StringVar(&f.WriteTestDir, "write-test-dir", "", "directory on the swap device for the write test (default: beside a swap file; none for a partition)")
	fl.BoolVar(&f.json, "json", false, "print the result as JSON")
	return cmd
}

func runCalibrate(cmd *cobra.Command, f *calibrateFlags) error {
	if err := f.Validate(); err != nil {
		return usageError{err}
	}
	dev, err := probe.PickSwapDevice(f.device)
	if err != nil {
		return usageError{err}
	}
	opts := f.CalibrateOptions
	opts.Progress = progressTo(cmd.ErrOrStderr())
	c, err := probe.Calibrate(cmd.Context(), dev, opts)
	if err != nil {
		return err
	}
	if f.writeConfig != "" {
		if err := agent.MergeConfigFile(f.writeConfig, c.Thresholds); err != nil {
			return fmt.Errorf("--write-config: %w", err)
		}
	}
	out := cmd.OutOrStdout()
	if f.json {
		return json.NewEncoder(out).Encode(struct {
			probe.Result
			Fraction   float64            `json:"fraction"`
			Thresholds map[string]float64 `json:"thresholds"`
		}{c.Probe, c.Fraction, c.Thresholds})
	}
	res := c.Probe
	fmt.Fprintf(out, "%s (probed on %s): 4 KiB random read %.0f IOPS (%.0f µs at queue depth %d)", dev.Path, res.ReadPath, res.ReadIOPS, res.ReadLatencyUs, res.Jobs)
	if res.WriteIOPS > 0 {
		fmt.Fprintf(out, ", random write %.0f IOPS (%.0f µs)", res.WriteIOPS, res.WriteLatencyUs)
	}
	fmt.Fprintln(out)
	keys := make([]string, 0, len(c.Thresholds))
	for k := range c.Thresholds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "%s: %.0f  (%g of the device)\n", k, c.Thresholds[k], c.Fraction)
	}
	if f.writeConfig != "" {
		fmt.Fprintf(out, "written to %s\n", f.writeConfig)
	}
	return nil
}
