package main

import (
	"fmt"
	"math"
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
	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/machine"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
	"github.com/headroom-dev/headroom/internal/units"
)

const simLong = `Simulate a density ramp on a node this machine cannot be: RAM, cores and
a swap device (and a compressed tier in front) shared by VMs that run the
workload of headroom load, started 1, 2, 3 ... at a time like headroom
density. The model keeps page counts per VM (resident, compressed, on the
device), a second-chance LRU across VMs, swap readahead for sequential
faults, and the device as a queue: see docs/sim.md for what it
approximates and ignores. --agent runs the agent's real policy on
simulated snapshots; its decisions (swap allowances, evictions, with
--balloon the guests' balloons, with --ksm governor ksmd's pace; with
--ksm advisor the kernel's advisor sets it, as mm/ksm.c computes) change
the simulation. --guest-cache gives every guest idle page cache, which host
reclaim swaps out first and a balloon takes back without I/O.

It takes density's flags plus the node's and device's figures; --scenario
FILE.yaml holds the same keys (flag names without the dashes), and flags
given on the command line override it. Results use density's schema (kind
sim): headroom report draws a simulated and a measured run on one chart.

--find max-vms answers the planner's question directly: the largest VM
count whose mean per-VM rate stays at least --min-per-vm-fraction of the
one-VM rate (and, with --max-swap-utilization, whose swap use stays under
that share of the swap).

--machine this measures this machine first — its RAM, cores, the touch
rate of one headroom load worker a core over blocks of 64 MiB, 256 MiB
and 1 GiB (a core touches fewer pages/s the more memory it cycles
through) and of one worker alone (faster: no neighbour in the shared
caches), each the median of three rounds (--machine-rounds), the active swap device as
headroom agent calibrate probes it
(or, with no swap active, the file system where density --swap SIZE puts
its swap file) at queue depths 1 to 16, and, as
root, the kernel's CPU per page paged (one headroom load worker in a memory
cgroup smaller than it, over that swap) and, with --swap-tier, the ratio
the tier's compressor gets on the workload's content (a scratch zram
device) — prints the figures, and uses them where neither the command line
nor the scenario gave a value. Reclaim's batch and order while workers
fill past their limit are measured and printed but not used: the model's
lucky VMs would outlast the measured ones (docs/sim.md).`

type simFlags struct {
	rampFlags
	guestOverhead, guestCache             bytesValue
	balloon                               bool
	balloonPol                            string
	maxSwapIn, maxSwapOut                 float64
	ksm                                   string
	nodeMemory, systemReserve, swap       bytesValue
	readBandwidth, writeBandwidth         bytesValue
	cpus, populateRate                    float64
	touchTurnBlocks                       float64
	touchRate, touchAloneSpeedup          string
	readIOPS, writeIOPS                   float64
	latency, ksmdCPU, balloonCPU          time.Duration
	startCPUFactor                        float64
	startCPUDuration                      time.Duration
	swapTier                              string
	tierRatio                             float64
	agent                                 bool
	agentConfig                           string
	out, label, scenario, find            string
	swapDepths, workerKind, swapReadahead string
	pagingCPU, runQueueWait               string
	touchBesidePaging                     string
	reclaimBatch, reclaimOrder            float64
	readaheadOrder, steadyReclaimOrder    float64
	reclaimBurst, fillOut                 float64
	pagingSteal                           time.Duration
	readPages, writePages, mixedCapacity  string
	readaheadUsed                         string
	halfFullWritePages, halfFullCapacity  string
	machine, saveMachine                  string
	machineRounds                         int
	minPerVM, maxSwapUtil                 float64
	seed                                  uint64
	json, stopOnFail                      bool
}

func newSimCommand() *cobra.Command {
	f := &simFlags{guestOverhead: 1 << 30, nodeMemory: 192 << 30, systemReserve: 8 << 30, cpus: 64, touchRate: "20M",
		readIOPS: 1.3e6, writeIOPS: 215e3, latency: 80 * time.Microsecond, pagingCPU: "5us", minPerVM: 0.5, seed: 1,
		maxSwapIn: -1, maxSwapOut: -1, ksm: policy.KSMOff,
		rampFlags: rampFlags{deployments: "1:20:1", vmMemory: 16 << 30, memorySize: 14 << 30, scan: scanValue(memload.ScanSeq),
			writes: 1, content: contentValue(memload.Content{Kind: memload.ContentRandom}), runtime: 180 * time.Second,
			overcommit: 100, overhead: 256 << 20}}
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
	fl.StringVar(&f.scenario, "scenario", "", "YAML file of these flags' values (keys: flag names); flags given override it")
	fl.StringVar(&f.machine, "machine", "", "this: measure this machine's RAM, cores, touch rate and swap device for the node's figures (flags and the scenario override them)")
	fl.StringVar(&f.saveMachine, "save-machine", "", "with --machine this: also write the measured figures to this file as a scenario (reuse them with --scenario FILE; the flags given still win)")
	fl.IntVar(&f.machineRounds, "machine-rounds", machine.DefaultRounds, "with --machine this: how often each figure is measured, the median kept (1: a third of the time, noisier on a shared machine)")
	f.rampFlags.register(fl, "VM", "host memory per VM beyond its guest RAM (QEMU), also added to its request")
	fl.Var(&f.guestOverhead, "guest-overhead", "guest memory besides the workload that stays resident (kernel, caches)")
	fl.Var(&f.nodeMemory, "node-memory", "the node's RAM")
	fl.Var(&f.systemReserve, "system-reserve", "RAM the VMs never get (host kernel, daemons, reservations)")
	fl.Float64Var(&f.cpus, "cpus", f.cpus, "the node's cores")
	fl.StringVar(&f.touchRate, "touch-rate", f.touchRate, "pages/s one core touches in RAM (headroom load's rate in a VM), "+sim.TouchRateForm)
	fl.StringVar(&f.touchAloneSpeedup, "touch-alone-speedup", "0", "how much faster one core touches while it is the only busy one than --touch-rate (measured with every core busy), "+sim.TouchAloneSpeedupForm+"; in between, in proportion to the idle cores (--machine this measures it)")
	fl.Float64Var(&f.touchTurnBlocks, "touch-turn-blocks", sim.DefaultTouchTurnBlocks, fmt.Sprintf("how many blocks' worth of memory a worker touches as while it takes turns on a core with others, whatever their number: 1 (no loss) to %d; between one and two workers a core, in proportion (--machine this measures it)", sim.MaxTouchTurnBlocks))
	fl.Float64Var(&f.populateRate, "populate-rate", 0, "pages/s one core fills a new block at (0: a quarter of --touch-rate, at its smallest size)")
	fl.Var(&f.swap, "swap", "swap device size (0: none)")
	fl.Float64Var(&f.readIOPS, "swap-read-iops", f.readIOPS, "the swap device's 4 KiB random-read rate")
	fl.Float64Var(&f.writeIOPS, "swap-write-iops", f.writeIOPS, "the swap device's 4 KiB random-write rate")
	fl.Var(&f.readBandwidth, "swap-read-bandwidth", "bytes/s a swap read's bytes beyond its first page move at (a readahead window is one read; 0: an I/O costs the same whatever its size)")
	fl.Var(&f.writeBandwidth, "swap-write-bandwidth", "bytes/s a swap write's bytes beyond its first page move at (merged pages are one write; 0: an I/O costs the same whatever its size)")
	fl.StringVar(&f.mixedCapacity, "swap-mixed-capacity", "", "how many times the sum of reads' and writes' shares of the device's rates it serves when they mix, "+sim.MixedCapacityForm+" (default none: the sum is its capacity; --machine this measures what swap's own I/O got in its paging runs)")
	fl.DurationVar(&f.latency, "swap-latency", f.latency, "one 4 KiB read's latency at queue depth 1")
	fl.StringVar(&f.pagingCPU, "paging-cpu", f.pagingCPU, "CPU to page one page in from the swap device and another out (fault, reclaim, I/O), "+sim.PagingCPUForm+"; bounds paging on few cores")
	fl.Float64Var(&f.reclaimBatch, "reclaim-batch", 0, "the share of a VM's pages in RAM one visit of reclaim to its cgroup takes when reclaim falls behind (asked to free pages faster than the swap device writes them, as while VMs fill), 0 to 1 (default 0: SWAP_CLUSTER_MAX pages, an even spread; --machine this measures it, workers filling together past their cgroup's limit, but leaves it at 0: applied beside the order, it moved the model's lucky VMs no closer to the measured ones)")
	fl.Float64Var(&f.reclaimOrder, "reclaim-order", 0, "how much more readily reclaim takes from the VMs created first where it falls behind (as a fill past RAM waits for it), 0 to below 1: the first VM's pages 1 + this times as readily as the average, the last's 1 − this, for the first 10.7% of the step's workloads it takes, as much as the order is measured over (default 0: alike; --machine this measures and applies it)")
	fl.Float64Var(&f.steadyReclaimOrder, "reclaim-order-steady", 0, "the same where reclaim keeps up, as on a plateau, -0.9 to 0.9 (default 0: alike; --machine this measures it from its random paging workers' shares in RAM by the order they were made)")
	fl.Float64Var(&f.reclaimBurst, "reclaim-burst", 0, "the pages one visit of reclaim to a VM's cgroup takes while reclaim keeps up: how unevenly the VMs paging lose pages second by second, which lets one with few out reach RAM speed by chance (default 0: SWAP_CLUSTER_MAX, 32; --machine this measures it: the variance over the mean of what each paging worker lost in two seconds)")
	fl.Float64Var(&f.fillOut, "fill-out", 0, "the pages a second reclaim swaps out for VMs filling past RAM, where below the swap device's writes: a fill past RAM waits for it (default 0: the device's writes; --machine this measures it: workers filling together past their cgroup's limit)")
	fl.DurationVar(&f.pagingSteal, "paging-steal", 0, "where the node is itself a VM: the CPU time its host takes from it (steal) per page paged in from the swap device, e.g. 20us (default 0: bare metal; --machine this measures it with the cores busy)")
	fl.StringVar(&f.touchBesidePaging, "touch-beside-paging", "0", "how fast a core touches while the swap device pages, as a share of --touch-rate: "+sim.TouchBesidePagingForm+" (--machine this measures it: a worker in RAM beside paging workers)")
	fl.StringVar(&f.runQueueWait, "run-queue-wait", "", "a faulting VM's wait for a core per page paged in from the swap device (woken by its read, it queues for a core), "+sim.RunQueueWaitForm+"; read as the fair share's stretch at that count plus what it exceeds it by, the excess interpolated between counts (default none: it waits only when the cores are oversubscribed)")
	fl.StringVar(&f.readPages, "swap-read-pages", "", "pages a sequential fault's swap readahead reads in one go, "+sim.IOPagesForm+" (default 8: vm.page-cluster 3; the kernel reads less when readahead goes unused)")
	fl.StringVar(&f.readaheadUsed, "readahead-used", "", "the share of the pages a sequential fault's swap readahead reads that the scans touch before reclaim takes them back, "+sim.ReadaheadUsedForm+" (default 1: all; each page read costs the paging CPU and its read whether used or not, and the unused are read again; --machine this measures it from its seq paging workers' pages touched against the pages swapped in)")
	fl.StringVar(&f.writePages, "swap-write-pages", "", "pages one write to the swap device carries, "+sim.IOPagesForm+" (default 8: reclaim's batches merged; fewer when many cgroups reclaim at once)")
	fl.StringVar(&f.halfFullWritePages, "swap-write-pages-half-full", "", "pages one write carries once half the swap is in use, where the kernel frees slots as pages come in, "+sim.IOPagesForm+" (default: as --swap-write-pages; --machine this measures it: a page a write for a random scan on kernel 6.18 with a swap file)")
	fl.StringVar(&f.halfFullCapacity, "swap-mixed-capacity-half-full", "", "--swap-mixed-capacity once half the swap is in use, "+sim.MixedCapacityForm+" (default: as --swap-mixed-capacity; --machine this measures it)")
	fl.StringVar(&f.swapDepths, "swap-depths", "", "the swap device's rates by queue depth, "+sim.DepthsForm+"; replaces --swap-read-iops and --swap-write-iops as its capacity")
	fl.StringVar(&f.swapTier, "swap-tier", "", "compressed tier in front of the device: "+tierspec.Form+" (ratio: --swap-tier-ratio unless given)")
	fl.Float64Var(&f.tierRatio, "swap-tier-ratio", 0, "how many bytes of the workload's pages the tier stores in a byte of RAM, at least 1 (default: the ratio --content names; --machine this measures it with the tier's compressor)")
	fl.StringVar(&f.swapReadahead, "swap-readahead", "address", "how the kernel reads swap ahead for a sequential fault: address (the faulting VM's neighbouring pages: the kernel's way on SSDs) or offset (the neighbouring swap slots, as while any rotational swap is active: a VM gets as many of its own pages a read as reclaim took from it a visit, more for the VMs made first, by --readahead-order); --machine this reads which from the kernel")
	fl.Float64Var(&f.readaheadOrder, "readahead-order", 0, "with --swap-readahead offset, how many more of its own pages a sequential fault brings the VM made first, -0.9 to 0.9: 1 + this times --swap-read-pages for the first, 1 − this for the last (default 0: alike; --machine this measures it from its paging workers' pages a major fault by the order they were made)")
	fl.StringVar(&f.workerKind, "worker-kind", "vm", "what runs each workload: vm (a guest: its pages are scattered in the host's address space, so each page of a sequential readahead window is its own read) or process (as density's cgroup backend runs it: a window is one read, and no boot: the workers fill together)")
	fl.BoolVar(&f.agent, "agent", false, "run the agent's policy on the node (calibrated to half the device's rates)")
	fl.StringVar(&f.agentConfig, "agent-config", "", "run the agent with this agent.yaml (its thresholds, intervals, KSM and balloon keys); implies --agent")
	fl.BoolVar(&f.balloon, "balloon", false, "with --agent: the agent also drives the guests' balloons")
	fl.StringVar(&f.ksm, "ksm", f.ksm, "with --agent: off, governor (the agent paces ksmd by the profit per ksmd CPU-second) or advisor (the kernel's scan-time advisor paces it); --content dup=F gives the mergeable pages")
	fl.DurationVar(&f.ksmdCPU, "ksmd-cpu", 0, "CPU time ksmd has used before the run: the kernel's advisor counts it into its first scan, so on a host whose ksmd has run before it starts slow (--machine this reads it)")
	fl.Float64Var(&f.maxSwapIn, "max-swap-in-pages-per-sec", f.maxSwapIn, "with --agent: its swap-in rate threshold (-1: half --swap-read-iops, as calibrate sets it; 0: off, as density's --agent runs)")
	fl.Float64Var(&f.maxSwapOut, "max-swap-out-pages-per-sec", f.maxSwapOut, "with --agent: its swap-out rate threshold (-1: half --swap-write-iops; 0: off)")
	fl.StringVar(&f.balloonPol, "balloon-policy", "headroom", "with --balloon: headroom (memory states, guest-aware targets) or mom (oVirt MOM's rules)")
	fl.DurationVar(&f.balloonCPU, "balloon-cpu", 0, "with --balloon: the guest's vCPU time a page its balloon moves costs, inflating or deflating (free page reporting included); its workload waits meanwhile (about 5us under TCG here; 0: free)")
	fl.Float64Var(&f.startCPUFactor, "start-cpu-factor", 0, "how many times its steady CPU a guest's touch costs as its workload starts, falling to once over --start-cpu-duration (about 6 under TCG here; 0 or 1: no difference)")
	fl.DurationVar(&f.startCPUDuration, "start-cpu-duration", 4*time.Second, "with --start-cpu-factor: how long a guest's touches take to get back to their steady CPU")
	fl.Var(&f.guestCache, "guest-cache", "clean page cache each guest fills at boot beside its workload and never touches again (memory a balloon reclaims without I/O)")
	fl.StringVar(&f.find, "find", "", "max-vms: print the largest VM count that keeps --min-per-vm-fraction (and --max-swap-utilization)")
	fl.Float64Var(&f.minPerVM, "min-per-vm-fraction", f.minPerVM, "with --find: the least mean per-VM rate, as a fraction of the one-VM rate")
	fl.Float64Var(&f.maxSwapUtil, "max-swap-utilization", 0, "with --find: the most swap in use at the end of a step, as a fraction of the swap (0: any)")
	fl.BoolVar(&f.stopOnFail, "stop-on-failure", true, "stop the ramp at the first failed step (an OOM kill or eviction)")
	fl.StringVar(&f.out, "out", "", "results directory (default ./results/<timestamp>-sim)")
	fl.StringVar(&f.label, "label", "", "name of this run in reports (default: sim, scan and size)")
	fl.Uint64Var(&f.seed, "seed", f.seed, "seed of the VMs' start times")
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
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return usagef("--scenario %s: %v", path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		flag := fl.Lookup(k)
		if flag == nil || k == "scenario" {
			var known []string
			fl.VisitAll(func(f *pflag.Flag) {
				if f.Name != "scenario" && f.Name != "help" {
					known = append(known, f.Name)
				}
			})
			return usagef("--scenario %s: key %q does not exist; keys are the flags' names: %s", path, k, strings.Join(known, ", "))
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

// applyMachine measures this machine and fills the node's figures the
// command line and the scenario left unset.
func applyMachine(cmd *cobra.Command, f *simFlags) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The tier's compression is measured unless its ratio was given.
	tier := sim.TierKindOf(f.swapTier)
	if cmd.Flags().Changed("swap-tier-ratio") {
		tier = ""
	}
	fig, err := machine.Measure(cmd.Context(), machine.Options{Headroom: exe, Scan: memload.Scan(f.scan),
		SwapFileDir: tierspec.DefaultFileDir, Duration: 2 * time.Second, Tier: tier, Content: memload.Content(f.content), Rounds: f.machineRounds})
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.ErrOrStderr(), fig)
	fl := cmd.Flags()
	measured := map[string]string{}
	set := func(name, value string) {
		measured[name] = value
		if !fl.Changed(name) {
			fl.Set(name, value)
		}
	}
	set("node-memory", fmt.Sprint(fig.RAMBytes))
	set("cpus", fmt.Sprint(fig.CPUs))
	set("touch-rate", sim.FormatTouchRate(fig.TouchRate))
	set("populate-rate", fmt.Sprint(fig.PopulateRatePerCore))
	if len(fig.TouchAloneSpeedup) > 0 {
		set("touch-alone-speedup", sim.FormatTouchAloneSpeedup(fig.TouchAloneSpeedup))
	}
	if fig.TouchTurnBlocks > 0 {
		set("touch-turn-blocks", fmt.Sprint(fig.TouchTurnBlocks))
	}
	set("swap-read-iops", fmt.Sprint(fig.ReadIOPS))
	set("swap-write-iops", fmt.Sprint(fig.WriteIOPS))
	set("swap-latency", time.Duration(fig.LatencySeconds*float64(time.Second)).String())
	if fig.ReadBytesPerSec > 0 {
		set("swap-read-bandwidth", fmt.Sprint(uint64(math.Round(fig.ReadBytesPerSec))))
	}
	if fig.WriteBytesPerSec > 0 {
		set("swap-write-bandwidth", fmt.Sprint(uint64(math.Round(fig.WriteBytesPerSec))))
	}
	if len(fig.MixedCapacity) > 0 {
		set("swap-mixed-capacity", sim.FormatMixedCapacity(fig.MixedCapacity))
	}
	if len(fig.Depths) > 0 {
		set("swap-depths", sim.FormatDepths(fig.Depths))
	}
	if len(fig.PagingCPU) > 0 {
		set("paging-cpu", sim.FormatPagingSeconds(fig.PagingCPU))
	}
	if len(fig.RunQueueWait) > 0 {
		set("run-queue-wait", sim.FormatPagingSeconds(fig.RunQueueWait))
	}
	if fig.ReclaimBurstPages > 0 {
		set("reclaim-burst", fmt.Sprint(fig.ReclaimBurstPages))
	}
	if fig.ReclaimOrderSlope > 0 {
		set("reclaim-order", fmt.Sprint(fig.ReclaimOrderSlope))
	}
	set("swap-readahead", fig.SwapReadahead())
	if fig.ReadaheadOrderSlope != 0 {
		set("readahead-order", fmt.Sprint(fig.ReadaheadOrderSlope))
	}
	if fig.SteadyReclaimOrderSlope != 0 {
		set("reclaim-order-steady", fmt.Sprint(fig.SteadyReclaimOrderSlope))
	}
	if fig.FillOutPagesPerSec > 0 {
		set("fill-out", fmt.Sprint(fig.FillOutPagesPerSec))
	}
	if fig.PagingStealSeconds > 0 {
		set("paging-steal", time.Duration(fig.PagingStealSeconds*float64(time.Second)).String())
	}
	if b := fig.TouchBesidePaging(); b != (sim.TouchBesidePaging{}) {
		set("touch-beside-paging", b.String())
	}
	if len(fig.ReadaheadUsed) > 0 {
		set("readahead-used", sim.FormatReadaheadUsed(fig.ReadaheadUsed))
	}
	if len(fig.ReadaheadPages) > 0 {
		set("swap-read-pages", sim.FormatIOPages(fig.ReadaheadPages))
	}
	if len(fig.WritePages) > 0 {
		set("swap-write-pages", sim.FormatIOPages(fig.WritePages))
	}
	if len(fig.HalfFullWritePages) > 0 {
		set("swap-write-pages-half-full", sim.FormatIOPages(fig.HalfFullWritePages))
	}
	if len(fig.HalfFullMixedCapacity) > 0 {
		set("swap-mixed-capacity-half-full", sim.FormatMixedCapacity(fig.HalfFullMixedCapacity))
	}
	if fig.SwapSizeBytes > 0 {
		set("swap", fmt.Sprint(fig.SwapSizeBytes))
	}
	set("ksmd-cpu", (time.Duration(math.Round(fig.KSMDCPUSeconds*1e3)) * time.Millisecond).String())
	if r := fig.TierRatio(); r > 0 {
		set("swap-tier-ratio", fmt.Sprint(r))
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

// simParams turns the flags into the model's parameters.
func simParams(f *simFlags) (sim.Params, error) {
	deployments, err := density.ParseDeployments(f.deployments)
	if err != nil {
		return sim.Params{}, usagef("--deployments: %v; want %s", err, density.DeploymentsForm)
	}
	if f.overcommit < 100 {
		return sim.Params{}, usagef("--overcommit-percent must be at least 100, got %g", f.overcommit)
	}
	if f.runtime <= 0 {
		return sim.Params{}, usagef("--workload-runtime must be positive")
	}
	content := memload.Content(f.content)
	ratio := sim.ContentRatio(content)
	switch {
	case f.tierRatio != 0 && !(f.tierRatio >= 1):
		return sim.Params{}, usagef("--swap-tier-ratio %g: want a ratio of at least 1", f.tierRatio)
	case f.tierRatio != 0:
		ratio = f.tierRatio
	}
	node := sim.Node{RAMBytes: uint64(f.nodeMemory), SystemReserveBytes: uint64(f.systemReserve), CPUs: f.cpus,
		TouchTurnBlocks: f.touchTurnBlocks, PopulateRatePerCore: f.populateRate, PageCluster: 3, KSMDCPUSeconds: f.ksmdCPU.Seconds(),
		Swap: sim.Device{SizeBytes: uint64(f.swap), ReadIOPS: f.readIOPS, WriteIOPS: f.writeIOPS, LatencySeconds: f.latency.Seconds(),
			ReadBytesPerSec: float64(f.readBandwidth), WriteBytesPerSec: float64(f.writeBandwidth)}}
	if f.swapDepths != "" {
		if node.Swap.Depths, err = sim.ParseDepths(f.swapDepths); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if node.TouchAloneSpeedup, err = sim.ParseTouchAloneSpeedup(f.touchAloneSpeedup); err != nil {
		return sim.Params{}, usageError{err}
	}
	if node.TouchRate, err = sim.ParseTouchRate(f.touchRate); err != nil {
		return sim.Params{}, usageError{err}
	}
	if f.readaheadUsed != "" {
		if node.ReadaheadUsed, err = sim.ParseReadaheadUsed(f.readaheadUsed); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.readPages != "" {
		if node.ReadaheadPages, err = sim.ParseIOPages("swap-read-pages", f.readPages); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.writePages != "" {
		if node.WritePages, err = sim.ParseIOPages("swap-write-pages", f.writePages); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.mixedCapacity != "" {
		if node.Swap.MixedCapacity, err = sim.ParseMixedCapacity("swap-mixed-capacity", f.mixedCapacity); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.halfFullWritePages != "" {
		if node.HalfFullWritePages, err = sim.ParseIOPages("swap-write-pages-half-full", f.halfFullWritePages); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.halfFullCapacity != "" {
		if node.Swap.HalfFullMixedCapacity, err = sim.ParseMixedCapacity("swap-mixed-capacity-half-full", f.halfFullCapacity); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if node.PagingCPU, err = sim.ParsePagingCPU(f.pagingCPU); err != nil {
		return sim.Params{}, usageError{err}
	}
	if node.TouchBesidePaging, err = sim.ParseTouchBesidePaging(f.touchBesidePaging); err != nil {
		return sim.Params{}, usageError{err}
	}
	node.PagingStealSeconds = f.pagingSteal.Seconds()
	node.ReclaimBatchShare, node.ReclaimOrderSlope, node.ReclaimBurstPages = f.reclaimBatch, f.reclaimOrder, f.reclaimBurst
	node.SteadyReclaimOrderSlope = f.steadyReclaimOrder
	node.FillOutPagesPerSec = f.fillOut
	if f.runQueueWait != "" {
		if node.RunQueueWait, err = sim.ParseRunQueueWait(f.runQueueWait); err != nil {
			return sim.Params{}, usageError{err}
		}
	}
	if f.swapTier != "" {
		tier, err := sim.ParseTier(f.swapTier, ratio, node.RAMBytes)
		if err != nil {
			return sim.Params{}, usageError{err}
		}
		node.Tier = tier
	}
	if f.swapReadahead != "address" && f.swapReadahead != "offset" {
		return sim.Params{}, usagef("--swap-readahead %q: want address or offset", f.swapReadahead)
	}
	node.ReadaheadByOffset, node.ReadaheadOrderSlope = f.swapReadahead == "offset", f.readaheadOrder
	if f.workerKind != "vm" && f.workerKind != "process" {
		return sim.Params{}, usagef("--worker-kind %q: want vm or process", f.workerKind)
	}
	vm := sim.VMSpec{Process: f.workerKind == "process", MemoryBytes: uint64(f.vmMemory), GuestOverheadBytes: uint64(f.guestOverhead), HostOverheadBytes: uint64(f.overhead),
		GuestCacheBytes: uint64(f.guestCache), BalloonCPUSecondsPerPage: f.balloonCPU.Seconds(),
		StartCPUFactor: f.startCPUFactor, StartCPUSeconds: f.startCPUDuration.Seconds(),
		RequestBytes: density.RequestBytes(uint64(f.vmMemory), f.overcommit, uint64(f.overhead)),
		Workload: sim.Workload{SizeBytes: uint64(f.memorySize), Scan: memload.Scan(f.scan), WriteFraction: float64(f.writes),
			RatePagesPerSec: float64(f.rate), DupFraction: sim.DupFraction(memload.Content(f.content))}}
	if err := sim.Validate(node, vm); err != nil {
		return sim.Params{}, usageError{err}
	}
	label := f.label
	if label == "" {
		label = fmt.Sprintf("sim %s %s", f.scan, units.FormatBytes(uint64(f.memorySize)))
	}
	p := sim.Params{Node: node, VM: vm, Deployments: deployments, RuntimeSeconds: f.runtime.Seconds(), Seed: f.seed,
		StopOnFailure: f.stopOnFail, Label: label}
	switch {
	case f.balloon && !f.agent:
		return sim.Params{}, usagef("--balloon needs --agent")
	case f.balloon && f.balloonPol != policy.BalloonHeadroom && f.balloonPol != policy.BalloonMOM:
		return sim.Params{}, usagef("--balloon-policy %q: want headroom or mom", f.balloonPol)
	case !f.balloon && f.balloonPol != policy.BalloonHeadroom:
		return sim.Params{}, usagef("--balloon-policy needs --balloon")
	case f.ksm != policy.KSMOff && f.ksm != policy.KSMGovernor && f.ksm != policy.KSMAdvisor:
		return sim.Params{}, usagef("--ksm %q: want off, governor or advisor", f.ksm)
	case f.balloonCPU < 0:
		return sim.Params{}, usagef("--balloon-cpu %s: want a duration not negative", f.balloonCPU)
	case f.startCPUFactor != 0 && !(f.startCPUFactor >= 1 && f.startCPUFactor <= 100):
		return sim.Params{}, usagef("--start-cpu-factor %g: want 0 (none) or a factor in [1,100]", f.startCPUFactor)
	case f.startCPUDuration <= 0 || f.startCPUDuration > 10*time.Minute:
		return sim.Params{}, usagef("--start-cpu-duration %s: want a duration in (0,10m]", f.startCPUDuration)
	case f.balloonCPU > 0 && !f.balloon:
		return sim.Params{}, usagef("--balloon-cpu needs --balloon")
	case f.ksmdCPU < 0:
		return sim.Params{}, usagef("--ksmd-cpu %s: want a duration not negative", f.ksmdCPU)
	case f.ksm != policy.KSMOff && !f.agent:
		return sim.Params{}, usagef("--ksm needs --agent")
	case f.balloon && f.workerKind != "vm":
		return sim.Params{}, usagef("--balloon needs --worker-kind vm (a process has no guest)")
	}
	if (f.maxSwapIn < 0 && f.maxSwapIn != -1) || (f.maxSwapOut < 0 && f.maxSwapOut != -1) {
		return sim.Params{}, usagef("--max-swap-in-pages-per-sec and --max-swap-out-pages-per-sec: want a rate, 0 (off) or -1 (half the device's)")
	}
	if f.agentConfig != "" {
		a, err := agentConfigForSim(f)
		if err != nil {
			return sim.Params{}, err
		}
		p.Agent = a
	} else if f.agent {
		cfg := policy.DefaultConfig()
		cfg.MaxAverageSwapInPagesPerSecond, cfg.MaxAverageSwapOutPagesPerSecond = f.maxSwapIn, f.maxSwapOut
		if f.maxSwapIn == -1 {
			cfg.MaxAverageSwapInPagesPerSecond = 0.5 * f.readIOPS
		}
		if f.maxSwapOut == -1 {
			cfg.MaxAverageSwapOutPagesPerSecond = 0.5 * f.writeIOPS
		}
		if f.balloon {
			cfg.Balloon, cfg.BalloonPolicy = true, f.balloonPol
		}
		cfg.KSMMode = f.ksm
		a := sim.DefaultAgent()
		a.Policy = cfg
		p.Agent = &a
	}
	return p, nil
}

// agentConfigForSim reads an operator's agent.yaml into the agent the
// simulated node runs; the flags that set the same keys are refused with it.
func agentConfigForSim(f *simFlags) (*sim.AgentParams, error) {
	if f.maxSwapIn != -1 || f.maxSwapOut != -1 || f.ksm != policy.KSMOff || f.balloon {
		return nil, usagef("--agent-config %s: set the thresholds, ksmMode and balloon in the file, not with --max-swap-*, --ksm or --balloon", f.agentConfig)
	}
	cfg := agent.DefaultConfig()
	if err := cfg.LoadFile(f.agentConfig); err != nil {
		return nil, usagef("--agent-config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, usagef("--agent-config %s: %v", f.agentConfig, err)
	}
	if cfg.Balloon && f.workerKind != "vm" {
		return nil, usagef("--agent-config %s: balloon needs --worker-kind vm (a process has no guest)", f.agentConfig)
	}
	return &sim.AgentParams{Policy: cfg.Config, IntervalSeconds: cfg.IntervalSeconds,
		DiscoverySeconds: cfg.DiscoverySeconds, WorkloadStatsSeconds: cfg.WorkloadStatsSeconds}, nil
}

func runSim(cmd *cobra.Command, f *simFlags) error {
	if f.scenario != "" {
		if err := applyScenario(cmd.Flags(), f.scenario); err != nil {
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
	switch f.machine {
	case "":
	case "this":
		if f.machineRounds < 1 {
			return usagef("--machine-rounds %d: want a count of at least 1", f.machineRounds)
		}
		if err := applyMachine(cmd, f); err != nil {
			return err
		}
	default:
		return usagef("--machine %q: want this", f.machine)
	}
	if f.find != "" && f.find != "max-vms" {
		return usagef("--find %q: want max-vms", f.find)
	}
	if !(f.minPerVM > 0 && f.minPerVM <= 1) || f.maxSwapUtil < 0 || f.maxSwapUtil > 1 {
		return usagef("--min-per-vm-fraction must be in (0,1] and --max-swap-utilization in [0,1]")
	}
	p, err := simParams(f)
	if err != nil {
		return err
	}
	if f.find != "" {
		p.StopOnFailure = false
	}
	dir := f.out
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405")+"-sim")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rep := newDensityReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.json)
	began := time.Now()
	run, decisions, err := sim.Run(cmd.Context(), p, rep.StepDone)
	if err != nil {
		return usageError{err}
	}
	run.Params = simParamsMap(f)
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
	if f.find != "" {
		fmt.Fprintln(cmd.OutOrStdout(), sim.FindMaxVMs(run, f.minPerVM, f.maxSwapUtil))
	}
	return nil
}

// simParamsMap records the flags as given, for run.json.
func simParamsMap(f *simFlags) map[string]any {
	return map[string]any{"deployments": f.deployments, "vm_memory_bytes": uint64(f.vmMemory), "memory_size_bytes": uint64(f.memorySize),
		"memory_scan": string(f.scan), "writes": float64(f.writes), "rate_pages_per_sec": float64(f.rate),
		"content": memload.Content(f.content).String(), "workload_runtime_seconds": f.runtime.Seconds(), "overcommit_percent": f.overcommit,
		"overhead_bytes": uint64(f.overhead), "guest_overhead_bytes": uint64(f.guestOverhead), "node_memory_bytes": uint64(f.nodeMemory),
		"system_reserve_bytes": uint64(f.systemReserve), "cpus": f.cpus, "touch_rate": f.touchRate, "touch_alone_speedup": f.touchAloneSpeedup, "touch_turn_blocks": f.touchTurnBlocks, "populate_rate": f.populateRate, "swap_bytes": uint64(f.swap),
		"swap_read_iops": f.readIOPS, "swap_write_iops": f.writeIOPS, "swap_latency_seconds": f.latency.Seconds(), "swap_read_bandwidth": uint64(f.readBandwidth), "swap_write_bandwidth": uint64(f.writeBandwidth), "swap_mixed_capacity": f.mixedCapacity, "swap_depths": f.swapDepths, "paging_cpu": f.pagingCPU, "run_queue_wait": f.runQueueWait, "paging_steal_seconds": f.pagingSteal.Seconds(), "reclaim_batch": f.reclaimBatch, "reclaim_order": f.reclaimOrder, "reclaim_order_steady": f.steadyReclaimOrder, "reclaim_burst": f.reclaimBurst, "fill_out": f.fillOut, "touch_beside_paging": f.touchBesidePaging, "swap_read_pages": f.readPages, "readahead_used": f.readaheadUsed, "swap_write_pages": f.writePages, "swap_write_pages_half_full": f.halfFullWritePages, "swap_mixed_capacity_half_full": f.halfFullCapacity, "worker_kind": f.workerKind, "swap_readahead": f.swapReadahead, "readahead_order": f.readaheadOrder,
		"swap_tier": f.swapTier, "swap_tier_ratio": f.tierRatio, "agent": f.agent || f.agentConfig != "", "agent_config": f.agentConfig, "max_swap_in_pages_per_sec": f.maxSwapIn, "max_swap_out_pages_per_sec": f.maxSwapOut, "ksm": f.ksm, "ksmd_cpu_seconds": f.ksmdCPU.Seconds(), "balloon": balloonParam(f.balloon, f.balloonPol), "guest_cache_bytes": uint64(f.guestCache), "balloon_cpu_seconds_per_page": f.balloonCPU.Seconds(), "start_cpu_factor": f.startCPUFactor, "start_cpu_seconds": f.startCPUDuration.Seconds(), "seed": f.seed, "scenario": f.scenario, "machine": f.machine}
}

// balloonParam is the balloon policy in force ("" with none), as density
// records it.
func balloonParam(on bool, policyName string) string {
	if on {
		return policyName
	}
	return ""
}

// peakRSSBytes is this process's peak resident set.
func peakRSSBytes() uint64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return uint64(ru.Maxrss) << 10 // kB on Linux
}
