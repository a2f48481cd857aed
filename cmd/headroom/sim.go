package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/machine"
	"github.com/headroom-dev/headroom/internal/sim/scenario"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

const simLong = `Simulate a density ramp on a node this machine cannot be: RAM, cores and
a swap device (and a compressed tier in front) shared by VMs that run the
workload of headroom load, started 1, 2, 3 ... at a time like headroom
density. The model keeps page counts per VM (resident, compressed, on the
device), a second-chance LRU across VMs, swap readahead for sequential
faults, and the device as a queue: docs/sim.md says what it represents,
what it leaves out, and how to measure each figure on your host. --agent
runs the agent's own loop on simulated snapshots (--agent-config takes an
agent.yaml); its decisions (swap allowances, evictions, balloons, ksmd's
pace) change the simulation.

Every parameter is a flag and, under the same name, a key of a --scenario
file; flags given on the command line override it. --like RUN_DIR takes a
measured density run's ramp, node, swap, agent and backend. Results use
density's schema (kind sim): headroom report draws a simulated and a
measured run on one chart.

--find max-vms prints the largest VM count whose mean per-VM rate stays at
least --min-per-vm-fraction of the one-VM rate (and, with
--max-swap-utilization, whose swap use stays under that share of the
swap); --find overcommit-percent the largest KubeVirt memoryOvercommit
whose admitted VM count (the virt-launcher's own request) does. Its ramp
admits every count, each step's VMs holding the request that count's
overcommit gives them (what --agent's swap allowances follow).

--machine this measures this machine first: its RAM, cores, the touch rate
of one headroom load worker a core over blocks of 64 MiB, 256 MiB and 1
GiB and of two and four a core taking turns (the one correction,
touch-turn-blocks), the active swap device as headroom agent calibrate probes it (or the
file system where density puts its swap file) at queue depths 1 to 16,
and, as root, the CPU and the wait for a core per page paged and the pages
a swap I/O carries; each the median of --machine-rounds rounds. It prints
them and uses them where neither the command line nor the scenario gave a
value; --save-machine keeps them as a scenario.`

type simFlags struct {
	scenario.Values
	label, scenarioFile, out, find string
	like, kubevirtVersion          string
	machine, saveMachine           string
	machineRounds                  int
	minPerVM, maxSwapUtil          float64
	json                           bool
}

func newSimCommand() *cobra.Command {
	f := &simFlags{Values: scenario.Default(), minPerVM: 0.5}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a density ramp on a modelled node (RAM, cores, swap devices, the agent's policy)",
		Long:  simLong,
		Example: `  headroom sim --scenario scenarios/paper-192g-nvme.yaml --memory-scan random
  headroom sim --node-memory 192Gi --swap 1Ti --vm-memory 16Gi --memory-size 14Gi --deployments 1:100:1 --find max-vms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, f) },
	}
	cmd.AddCommand(newSimPagingCommand())
	fl := cmd.Flags()
	fl.StringVar(&f.scenarioFile, "scenario", "", "YAML file of these flags' values (keys: flag names); flags given override it")
	fl.StringVar(&f.like, "like", "", "a density run's directory: simulate its ramp, workload, node, swap, agent and backend (flags and --scenario win)")
	fl.StringVar(&f.machine, "machine", "", "this: measure this machine's RAM, cores, touch rate and swap device (flags and --scenario override them)")
	fl.StringVar(&f.saveMachine, "save-machine", "", "with --machine this: also write the measured figures to this file as a scenario (use with --scenario FILE)")
	fl.IntVar(&f.machineRounds, "machine-rounds", machine.DefaultRounds, "with --machine this: how often each figure is measured, the median kept (1: a third of the time, noisier)")
	f.Values.Register(fl)
	fl.StringVar(&f.find, "find", "", "max-vms: the most VMs above --min-per-vm-fraction; overcommit-percent: the largest overcommit admitting no more")
	fl.StringVar(&f.kubevirtVersion, "kubevirt-version", calc.DefaultVersion, "with --find overcommit-percent: the KubeVirt release of the virt-launcher request: "+strings.Join(calc.VersionNames(), ", "))
	fl.Float64Var(&f.minPerVM, "min-per-vm-fraction", f.minPerVM, "with --find: the least mean per-VM rate, as a fraction of the one-VM rate")
	fl.Float64Var(&f.maxSwapUtil, "max-swap-utilization", 0, "with --find: the most swap in use at the end of a step, as a fraction of the swap (0: any)")
	fl.StringVar(&f.out, "out", "", "results directory (default ./results/<timestamp>-sim)")
	fl.StringVar(&f.label, "label", "", "name of this run in reports (default: sim, scan and size)")
	fl.BoolVar(&f.json, "json", false, "print run.json's content at the end instead of a table")
	return cmd
}

// applyScenario sets every flag the scenario names that the command line
// did not; an unknown key is an error naming it and the accepted keys.
func applyScenario(fl *pflag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usagef("--scenario: %v", err)
	}
	// Strict: a key given twice is an error, not the last one silently.
	var doc any
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		return usagef("--scenario %s: %v", path, err)
	}
	m, ok := doc.(map[string]any)
	if !ok && doc != nil {
		return usagef("--scenario %s: want keys and their values (node-memory: 8Gi), one a line", path)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		flag := fl.Lookup(k)
		if flag == nil || k == "scenario" {
			return usagef("--scenario %s: %s", path, unknownKey(k, flagNames(fl, "scenario", "help")))
		}
		if flag.Changed {
			continue
		}
		v := fmt.Sprint(m[k])
		// Set through the flag set: the value counts as given, so
		// --machine does not measure over it.
		if err := fl.Set(k, v); err != nil {
			return usagef("--scenario %s: %s: %v (want the form of --%s: %s)", path, k, err, k, flag.Usage)
		}
	}
	return nil
}

// applyLike sets the flags a density run's parameters give that neither
// the command line nor the scenario set.
func applyLike(fl *pflag.FlagSet, dir string) error {
	run, err := results.ReadRun(dir)
	if err != nil {
		return usagef("--like: %v", err)
	}
	values, unsaid, err := scenario.Like(run)
	if err != nil {
		return usagef("--like %s: %v", dir, err)
	}
	for _, u := range unsaid {
		var missing []string
		for _, name := range u.Flags {
			if !fl.Changed(name) {
				missing = append(missing, "--"+name)
			}
		}
		if len(missing) > 0 {
			return usagef("--like %s: %s; pass %s", dir, u.Why, strings.Join(missing, ", "))
		}
	}
	for name, value := range values {
		if fl.Changed(name) {
			continue
		}
		if err := fl.Set(name, value); err != nil {
			return usagef("--like %s: --%s %s: %v", dir, name, value, err)
		}
	}
	return nil
}

// applyMachine measures this machine and fills the node's figures the
// command line and the scenario left unset.
func applyMachine(cmd *cobra.Command, f *simFlags) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The tier's compression is measured unless its ratio was given.
	tier := sim.TierKindOf(f.SwapTier)
	if cmd.Flags().Changed("swap-tier-ratio") {
		tier = ""
	}
	fig, err := machine.Measure(cmd.Context(), machine.Options{Headroom: exe, Scan: memload.Scan(f.Scan),
		SwapFileDir: tierspec.DefaultFileDir, Duration: 2 * time.Second, Tier: tier, Content: memload.Content(f.Content), Rounds: f.machineRounds,
		Progress: progressTo(cmd.ErrOrStderr())})
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.ErrOrStderr(), fig)
	fl := cmd.Flags()
	measured := scenario.Measured(fig)
	for name, value := range measured {
		if !fl.Changed(name) {
			if err := fl.Set(name, value); err != nil {
				return fmt.Errorf("--machine this measured --%s %s: %w", name, value, err)
			}
		}
	}
	if f.saveMachine != "" {
		return saveMachineScenario(f.saveMachine, fig, measured)
	}
	return nil
}

// saveMachineScenario writes the figures --machine this measured as a
// scenario: measuring takes minutes, and --scenario FILE reuses them.
func saveMachineScenario(path string, fig machine.Figures, measured map[string]string) error {
	body, err := yaml.Marshal(measured)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# headroom sim --machine this, %s (use: headroom sim --scenario %s):\n# %s\n",
		time.Now().Format(time.RFC3339), filepath.Base(path), fig)
	if err := os.WriteFile(path, append([]byte(header), body...), 0o644); err != nil {
		return fmt.Errorf("--save-machine: %w", err)
	}
	return nil
}

// agentConfigForSim reads an operator's agent.yaml into the agent the
// simulated node runs; the flags that set the same keys are refused with it.
func agentConfigForSim(f *simFlags) (*sim.AgentParams, error) {
	cfg := agent.DefaultConfig()
	if err := cfg.LoadFile(f.AgentConfig); err != nil {
		return nil, usagef("--agent-config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, usagef("--agent-config %s: %v", f.AgentConfig, err)
	}
	if cfg.Balloon && f.WorkerKind != "vm" {
		return nil, usagef("--agent-config %s: balloon needs --worker-kind vm (a process has no guest)", f.AgentConfig)
	}
	return &sim.AgentParams{Policy: cfg.Config, IntervalSeconds: cfg.IntervalSeconds,
		DiscoverySeconds: cfg.DiscoverySeconds, WorkloadStatsSeconds: cfg.WorkloadStatsSeconds}, nil
}

func runSim(cmd *cobra.Command, f *simFlags) error {
	kubevirt, ok := calc.Versions[f.kubevirtVersion]
	switch {
	case f.find != "" && f.find != findMaxVMs && f.find != findOvercommit:
		return usagef("--find %q: want %s or %s", f.find, findMaxVMs, findOvercommit)
	case !ok:
		return usagef("--kubevirt-version %q: want one of %s", f.kubevirtVersion, strings.Join(calc.VersionNames(), ", "))
	}
	if !(f.minPerVM > 0 && f.minPerVM <= 1) || f.maxSwapUtil < 0 || f.maxSwapUtil > 1 {
		return usagef("--min-per-vm-fraction must be in (0,1] and --max-swap-utilization in [0,1]")
	}
	// What the user typed, before a scenario or --like fills flags: the
	// search sets the overcommit itself and admits by KubeVirt's request.
	if f.find == findOvercommit {
		for _, name := range []string{"overcommit-percent", "request-overhead"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s is not used by --find %s: it searches the overcommit, and KubeVirt's request (headroom calc) admits; leave --%[1]s out", name, findOvercommit)
			}
		}
	}
	if f.scenarioFile != "" {
		if err := applyScenario(cmd.Flags(), f.scenarioFile); err != nil {
			return err
		}
	}
	if f.like != "" {
		if err := applyLike(cmd.Flags(), f.like); err != nil {
			return err
		}
	}
	if f.saveMachine != "" {
		if f.machine != "this" {
			return usagef("--save-machine %s: only with --machine this (it saves what that measures)", f.saveMachine)
		}
		if st, err := os.Stat(filepath.Dir(f.saveMachine)); err != nil || !st.IsDir() {
			return usagef("--save-machine %s: its directory does not exist", f.saveMachine)
		}
	}
	fl := cmd.Flags()
	// A process has no guest: no guest memory beside its block unless given.
	if f.WorkerKind == "process" && !fl.Changed("guest-overhead") {
		f.GuestOverhead = 0
	}
	switch f.machine {
	case "":
	case "this":
		if f.machineRounds < 1 {
			return usagef("--machine-rounds %d: want a count of at least 1", f.machineRounds)
		}
		if err := f.Values.CheckBeforeMeasuring(f.AgentConfig != ""); err != nil {
			return usageError{err}
		}
		if err := applyMachine(cmd, f); err != nil {
			return err
		}
	default:
		return usagef("--machine %q: want this", f.machine)
	}
	// A reserve is a figure of the host it was read on: a node sized on
	// the command line, in the scenario or by --machine this gets none
	// unless one is given.
	if fl.Changed("node-memory") && !fl.Changed("system-reserve") {
		f.SystemReserve = 0
	}
	var agentFile *sim.AgentParams
	if f.AgentConfig != "" {
		if err := f.Validate(true); err != nil {
			return usageError{err}
		}
		a, err := agentConfigForSim(f)
		if err != nil {
			return err
		}
		agentFile = a
	}
	p, err := f.Values.Params(agentFile)
	if err != nil {
		return usageError{err}
	}
	if f.label != "" {
		p.Label = f.label
	}
	if f.find != "" {
		p.StopOnFailure = false
	}
	// The VM KubeVirt sizes for --find overcommit-percent.
	kubevirtVM := calc.Shape{GuestMemoryBytes: p.VM.MemoryBytes, CPUs: 1}
	allocatable := p.Node.RAMBytes - p.Node.SystemReserveBytes
	if f.find == findOvercommit {
		// Every count runs: KubeVirt's request, not the ramp's, admits,
		// and each count's VMs hold the request that admits them.
		p.VM.RequestBytes = 0
		if p.StepRequestBytes, err = sim.KubeVirtRequests(kubevirt, kubevirtVM, allocatable, p.Deployments); err != nil {
			return usageError{err}
		}
	}
	dir := f.out
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405")+"-sim")
	}
	if err := makeOutputDir("--out", dir); err != nil {
		return err
	}
	rep := newDensityReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.json)
	began := time.Now()
	run, decisions, err := sim.Run(cmd.Context(), p, rep.StepDone)
	if err != nil {
		return usageError{err}
	}
	run.Params = f.Record()
	run.Params["scenario"], run.Params["machine"], run.Params["like"] = f.scenarioFile, f.machine, f.like
	if err := results.WriteRun(dir, run); err != nil {
		return err
	}
	if len(decisions) > 0 {
		l, err := results.AppendLines(filepath.Join(dir, results.AgentFile))
		if err != nil {
			return err
		}
		for _, d := range decisions {
			l.Write(d)
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	rep.finish(dir, run)
	if !f.json {
		var simulated float64
		for _, s := range run.Steps {
			simulated += s.Seconds
		}
		wall := time.Since(began).Seconds()
		fmt.Fprintf(cmd.OutOrStdout(), "simulated %.0f s in %.2f s of wall time (%.0f simulated s per s); peak RSS %s\n",
			simulated, wall, simulated/max(wall, 1e-9), units.FormatBytes(peakRSSBytes()))
	}
	switch f.find {
	case findMaxVMs:
		fmt.Fprintln(cmd.OutOrStdout(), sim.FindMaxVMs(run, f.minPerVM, f.maxSwapUtil))
	case findOvercommit:
		answer, err := sim.FindOvercommit(run, f.minPerVM, f.maxSwapUtil, kubevirt, kubevirtVM, allocatable)
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintln(cmd.OutOrStdout(), answer)
	}
	return nil
}

// The planner's questions --find answers.
const (
	findMaxVMs     = "max-vms"
	findOvercommit = "overcommit-percent"
)

// peakRSSBytes is this process's peak resident set.
func peakRSSBytes() uint64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return uint64(ru.Maxrss) << 10 // kB on Linux
}
