package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

const densityLong = `The density benchmark: start 1, 2, 3 ... workers, all released together,
until the run fails; per step, record every worker's pages/s, creation-to-
ready latency and start offset, and the node's swap-in/out, major faults and
memory pressure.

Backends: cgroup (default) makes each worker a VM-sized memory cgroup
running headroom load; qemu makes each worker a micro-VM (see headroom vm)
whose QEMU runs in its own memory cgroup under the node, with headroom load
inside the guest. With qemu, each step also records every VM's start-up
phases (QEMU started, QMP ready, guest booted, command started, ready),
QEMU's CPU time to boot, its memory beyond the guest RAM (the host
overhead), and once a second the guest's own view of its memory. libvirt
makes each worker a domain booting the same guest (or --libvirt-template's)
in a libvirt resource partition of the run's own, limited to --node-memory
and the run's swap; its phases are defined, QEMU started, booted, command
started and ready. The run destroys and undefines every domain it defined,
also on Ctrl-C, and refuses a domain name it did not define.

A step fails when a worker fails to start, is OOM-killed, is evicted or goes
silent; with --stop-on-failure (default) the ramp stops there. A step whose
total request exceeds the node is refused, the way a scheduler would refuse
it (request = vm-memory × 100 / overcommit-percent + overhead).

--node-memory puts all workers under one parent cgroup with that limit (a
small node inside a big machine); --swap SIZE creates a swap file for the run
and removes it afterwards (--swap existing uses the machine's swap);
--swap-tier zram:SIZE (or zswap) adds a compressed tier in front; --agent runs headroom
agent on the node for the whole run, and --balloon has it drive the VMs'
balloons too. --guest-cache SIZE gives every guest that much clean page
cache beside its workload (memory a balloon reclaims without I/O, which host
swap must write out): run the same ramp with and without --balloon to see
what ballooning buys.

Backend kubevirt measures a cluster's KubeVirt control plane the way the
KubeVirt density test did, but exactly: each step creates that many
VirtualMachineInstances (--kubevirt-object vm: VirtualMachines) from the
built-in template or --template, at --qps/--burst, in a namespace it creates;
records when each object's watch events first show Pending, Scheduling,
Scheduled, Running and Ready (seconds after its create request was sent:
exact p50/p95/p99/max per phase, and VMIs Running per minute); fails the
step when one is not Running within --timeout, with the reason from its
conditions and warning events (Insufficient memory, Too many pods, a QEMU
timeout ...); then deletes the step's objects and waits until they are gone.
--burst-only runs just the largest count. The namespace is deleted at the
end, also on Ctrl-C. The ClusterRole it needs is
deploy/kubevirt-density/rbac.yaml; it does not need root.

Results go to --out (default ./results/<timestamp>-density): run.json,
steps.csv, timeline.jsonl, workers.jsonl (and agent.jsonl with --agent).
Draw them with headroom report. The cgroup and qemu backends need root
(cgroups, swap).`

type densityFlags struct {
	rampFlags
	backend    string
	repeat     int
	stopOnFail bool
	nodeMemory flagvalue.Bytes
	swap       string
	swapTier   string
	agent      bool
	balloon    bool
	balloonPol string
	guestCache flagvalue.Bytes
	pace       time.Duration
	out        string
	label      string
	seed       uint64
	json       bool
	image      imageFlags
	accel      string
	libvirtURI string
	libvirtTpl string
	tbCache    flagvalue.Bytes
	kubevirt   kubevirtFlags
}

func newDensityCommand() *cobra.Command {
	f := &densityFlags{backend: "cgroup", repeat: 1, stopOnFail: true, seed: 1, rampFlags: rampFlags{deployments: "1:8:1",
		vmMemory: 512 << 20, memorySize: 256 << 20, scan: flagvalue.Scan(memload.ScanSeq), writes: 1,
		content: flagvalue.Content(memload.Content{Kind: memload.ContentRandom}), runtime: 30 * time.Second, overcommit: 100,
		overhead: density.DefaultOverheadBytes},
		kubevirt: kubevirtFlags{qps: 20, burst: 20, timeout: 10 * time.Minute}}
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Ramp workers on a node until it fails; measure per-worker and aggregate pages/s",
		Long:  densityLong,
		Example: `  headroom density --node-memory 2Gi --swap 6Gi --vm-memory 320Mi --memory-size 256Mi --deployments 1:24:1 --memory-scan random
  headroom density --deployments 1,2,4,8,16 --vm-memory 1Gi --memory-size 768Mi --overcommit-percent 200 --swap existing --agent --node-memory 8Gi
  headroom density --backend kubevirt --deployments 50,100,200,300,400 --qps 20 --burst 20 --node-selector kubernetes.io/hostname=worker-1
  headroom density --backend kubevirt --deployments 400 --burst-only --template vmi.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDensity(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", f.backend, "a worker is a cgroup (cgroup), a micro-VM (qemu), a libvirt domain (libvirt) or a VMI (kubevirt)")
	f.rampFlags.register(fl, "worker", fmt.Sprintf("per-worker request overhead beyond its memory (cgroup %s, VMs %s, as measured)",
		units.FormatBytes(density.DefaultOverheadBytes), units.FormatBytes(density.DefaultVMOverheadBytes)))
	fl.IntVar(&f.repeat, "repeat", f.repeat, "runs of each step")
	fl.BoolVar(&f.stopOnFail, "stop-on-failure", f.stopOnFail, "stop the ramp at the first failed step")
	fl.Var(&f.nodeMemory, "node-memory", "put the workers in one node cgroup with this memory limit (default: the whole host)")
	fl.StringVar(&f.swap, "swap", "", "swap for the run: a size (a swap file created and removed), existing, or none")
	fl.StringVar(&f.swapTier, "swap-tier", "", "compressed tier in front of the swap: zram:SIZE[,algorithm=A,priority=N] or zswap[:max_pool_percent=N,compressor=C]")
	fl.BoolVar(&f.agent, "agent", false, "run headroom agent on the node for the whole run")
	fl.BoolVar(&f.balloon, "balloon", false, "qemu backend with --agent: the agent also drives the VMs' balloons")
	fl.StringVar(&f.balloonPol, "balloon-policy", "headroom", "with --balloon: headroom (memory states, guest-aware targets) or mom (oVirt MOM's rules)")
	fl.DurationVar(&f.pace, "pace", 0, "with --rate: how often each workload wakes to touch its next batch (default 10ms; 50ms saves CPU in TCG guests)")
	fl.Var(&f.guestCache, "guest-cache", "qemu backend: clean page cache each guest holds beside its workload (it reads this much of a disk at boot)")
	fl.StringVar(&f.out, "out", "", "results directory (default ./results/<timestamp>-density)")
	fl.StringVar(&f.label, "label", "", "name of this run in reports (default: scan and size)")
	fl.Uint64Var(&f.seed, "seed", f.seed, "base seed of the workers' random scans and contents")
	fl.BoolVar(&f.json, "json", false, "print run.json's content at the end instead of a table")
	fl.StringVar(&f.accel, "accel", string(microvm.AccelAuto), "qemu backend: accelerator auto (KVM where it works, else TCG), kvm or tcg")
	fl.StringVar(&f.libvirtURI, "libvirt-uri", density.DefaultLibvirtURI, "libvirt backend: libvirtd's connection")
	fl.StringVar(&f.libvirtTpl, "libvirt-template", "", "libvirt backend: domain XML file each domain starts from (default: headroom's guest booted directly)")
	f.tbCache = density.DefaultLibvirtTBCacheBytes
	fl.Var(&f.tbCache, "libvirt-tb-cache", "libvirt backend: TCG translation cache of each qemu-type domain (0: QEMU's default: faster, and larger)")
	f.image.register(cmd)
	f.kubevirt.register(cmd)
	return cmd
}

func runDensity(cmd *cobra.Command, f *densityFlags) error {
	if err := checkBackendFlags(cmd, f.backend); err != nil {
		return err
	}
	if f.backend == "kubevirt" {
		return runKubevirtDensity(cmd, f)
	}
	deployments, err := density.ParseDeployments(f.deployments)
	if err != nil {
		return usagef("--deployments: %v; want %s", err, density.DeploymentsForm)
	}
	swapMode, swapBytes, err := density.ParseSwap(f.swap)
	if err != nil {
		return usagef("--swap: %v", err)
	}
	zram, zswap, err := density.ParseSwapTier(f.swapTier)
	if err != nil {
		return usagef("--swap-tier: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	accel, err := microvm.ParseAccel(f.accel)
	if err != nil {
		return usagef("--accel: %v", err)
	}
	if (f.backend == "qemu" || f.backend == "libvirt") && !cmd.Flags().Changed("overhead") {
		f.overhead = density.DefaultVMOverheadBytes
	}
	balloon := ""
	if f.balloon {
		balloon = f.balloonPol
	} else if cmd.Flags().Changed("balloon-policy") {
		return usagef("--balloon-policy needs --balloon")
	}
	p := density.Params{
		Backend: f.backend, Deployments: deployments, VMMemoryBytes: uint64(f.vmMemory), MemorySizeBytes: uint64(f.memorySize),
		Scan: memload.Scan(f.scan), WriteFraction: float64(f.writes), RatePagesPerSec: float64(f.rate), Pace: f.pace,
		Content: memload.Content(f.content), WorkloadRuntime: f.runtime, OvercommitPercent: f.overcommit,
		OverheadBytes: uint64(f.overhead), Repeat: f.repeat, StopOnFailure: f.stopOnFail,
		NodeMemoryBytes: uint64(f.nodeMemory), Swap: swapMode, SwapFileBytes: swapBytes, Zram: zram, Zswap: zswap,
		Agent: f.agent, Balloon: balloon, GuestCacheBytes: uint64(f.guestCache), Out: f.out, Label: f.label, Seed: f.seed, Interval: time.Second, Executable: exe, Accel: accel,
	}
	if f.backend == "libvirt" {
		p.LibvirtURI, p.LibvirtTBCacheBytes = f.libvirtURI, uint64(f.tbCache)
		if f.libvirtTpl != "" {
			b, err := os.ReadFile(f.libvirtTpl)
			if err != nil {
				return usagef("--libvirt-template: %v", err)
			}
			if err := libvirt.CheckTemplate(string(b)); err != nil {
				return usagef("--libvirt-template %s: %v", f.libvirtTpl, err)
			}
			p.LibvirtTemplate = string(b)
		}
	}
	if err := p.Validate(); err != nil {
		return usageError{err}
	}
	if err := p.CheckMachine(); err != nil {
		return usageError{err}
	}
	if os.Geteuid() != 0 {
		return usagef("density needs root: it creates cgroups and swap")
	}
	if err := checkOutputDir("--out", f.out); err != nil {
		return err
	}
	if p.Backend == "qemu" || p.Backend == "libvirt" && p.LibvirtTemplate == "" {
		img, err := buildImage(cmd, &f.image)
		if err != nil {
			return err
		}
		p.Image = &img
	}
	rep := newDensityReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.json)
	// A second Ctrl-C must not leave a swap file on or cgroups behind.
	release := holdRestore(cmd.Context())
	dir, run, err := density.Run(cmd.Context(), p, rep)
	release()
	rep.clearStatus()
	if run != nil {
		rep.finish(dir, run)
	}
	if err != nil {
		return err
	}
	// Running until something fails, or until admission refuses a step, is
	// the benchmark's normal end; only an interrupted run is an error.
	if run.Interrupted {
		return fmt.Errorf("%s", run.StopReason)
	}
	return nil
}

// densityReporter prints progress: a status line on a terminal, step lines
// and a final summary.
type densityReporter struct {
	stepPrinter
}

func newDensityReporter(out, errw io.Writer, asJSON bool) *densityReporter {
	r := &densityReporter{}
	r.init(out, errw, asJSON)
	return r
}

func (r *densityReporter) Status(step, workers, ready int, elapsed time.Duration, pagesPerSec float64) {
	r.setStatus("step %d: %d workers, %d ready, %5.1fs, %s pages/s", step, workers, ready, elapsed.Seconds(), units.FormatRate(pagesPerSec))
}

func (r *densityReporter) StepDone(s results.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clearStatusLocked()
	if r.json {
		return
	}
	if !r.header {
		fmt.Fprintf(r.out, "%4s %7s %12s %12s %12s %10s %10s %9s %9s %8s %5s  %s\n", "step", "workers", "agg pages/s", "min/worker", "max/worker",
			"swapin/s", "majflt/s", "create95", "skew ms", "psi full", "cores", "status")
		r.header = true
	}
	lo, hi := 0.0, 0.0
	for i, w := range s.PerWorker {
		if i == 0 || w.PagesPerSec < lo {
			lo = w.PagesPerSec
		}
		hi = max(hi, w.PagesPerSec)
	}
	status := "ok"
	if s.Failed {
		status = "FAILED: " + s.FailReason
	}
	fmt.Fprintf(r.out, "%4d %7d %12s %12s %12s %10s %10s %8.2fs %9.3f %7.1f%% %5.2f  %s\n", s.Index, s.Workers, units.FormatRate(s.AggregatePagesPerSec),
		units.FormatRate(lo), units.FormatRate(hi), units.FormatRate(s.SwapInPagesPerSec), units.FormatRate(s.MajorFaultsPerSec), s.CreateP95Seconds,
		s.StartSkewSeconds*1e3, s.PSIFullPercent, s.CPUBusyCores, status)
}

func (r *densityReporter) finish(dir string, run *results.Run) {
	if r.json {
		json.NewEncoder(r.out).Encode(run)
		return
	}
	reg := run.Regimes()
	fmt.Fprintf(r.out, "stopped: %s\n", run.StopReason)
	fmt.Fprintf(r.out, "peak %s pages/s at %d workers; last step in RAM: %d workers", units.FormatRate(reg.PeakPagesPerSec), reg.PeakWorkers, reg.KneeWorkers)
	if reg.KneeEvidence != "" {
		fmt.Fprintf(r.out, " (%s)", reg.KneeEvidence)
	}
	if reg.PlateauStartWorkers > 0 {
		fmt.Fprintf(r.out, "; plateau %s pages/s from %d workers (%.0fx below the peak)", units.FormatRate(reg.PlateauPagesPerSec),
			reg.PlateauStartWorkers, reg.PeakPagesPerSec/reg.PlateauPagesPerSec)
	}
	fmt.Fprintln(r.out)
	if in := plateauPageIns(run, reg); in > 0 && run.Node.SwapReadIOPS > 0 {
		fmt.Fprintf(r.out, "plateau page-ins: %s pages/s = %.1f%% of the swap device's 4 KiB random-read rate (%s IOPS)\n",
			units.FormatRate(in), 100*in/run.Node.SwapReadIOPS, units.FormatRate(run.Node.SwapReadIOPS))
	}
	fmt.Fprintf(r.out, "results: %s (%s)\n", dir, units.FormatBytes(run.Node.MemoryBytes)+" node")
}

// plateauPageIns is the mean node swap-in rate over the plateau's steps.
func plateauPageIns(run *results.Run, reg results.Regimes) float64 {
	if reg.PlateauStartWorkers == 0 {
		return 0
	}
	var sum float64
	var n int
	for _, s := range run.Steps {
		if !s.Failed && s.Workers >= reg.PlateauStartWorkers {
			sum += s.SwapInPagesPerSec
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
