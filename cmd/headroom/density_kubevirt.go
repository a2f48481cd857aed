package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/kubevirt"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/units"
)

// kubevirtFlags are density's flags for --backend kubevirt.
type kubevirtFlags struct {
	kubeconfig    string
	namespace     string
	template      string
	object        string
	qps           float64
	burst         int
	timeout       time.Duration
	burstOnly     bool
	nodeSelector  string
	containerDisk string
	cpus          int
	controller    string
}

func (k *kubevirtFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "kubevirt backend: kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&k.namespace, "namespace", "", "kubevirt: namespace made for the run and deleted after (default headroom-density-<id>; must not exist)")
	fl.StringVar(&k.template, "template", "", "kubevirt: VMI or VM YAML every object is made from (default: built from --vm-memory, --cpus and the rest)")
	fl.StringVar(&k.object, "kubevirt-object", "vmi", "kubevirt, built-in template: vmi (VirtualMachineInstances) or vm (VirtualMachines)")
	fl.Float64Var(&k.qps, "qps", k.qps, "kubevirt backend: API requests per second (a token bucket, as client-go's)")
	fl.IntVar(&k.burst, "burst", k.burst, "kubevirt backend: requests allowed at once above --qps")
	fl.DurationVar(&k.timeout, "timeout", k.timeout, "kubevirt backend: an object not Running this long after its create request fails the step")
	fl.BoolVar(&k.burstOnly, "burst-only", false, "kubevirt backend: one step of the largest --deployments count, no ramp (the seed-002 burst)")
	fl.StringVar(&k.nodeSelector, "node-selector", "", "kubevirt backend, built-in template: key=value[,key=value] the VMIs' nodes must carry")
	fl.StringVar(&k.containerDisk, "container-disk", kubevirt.DefaultContainerDisk, "kubevirt: the guest's containerDisk image")
	fl.IntVar(&k.cpus, "cpus", 1, "kubevirt backend, built-in template: vCPUs per VMI")
	fl.StringVar(&k.controller, "controller-address", "", "kubevirt: host:port the guests reach this machine at, to run headroom load in each and measure it")
}

// kubevirtOnly are the flags that mean something only with --backend kubevirt.
var kubevirtOnly = []string{"kubeconfig", "namespace", "template", "kubevirt-object", "qps", "burst", "timeout", "burst-only", "node-selector", "container-disk", "cpus", "controller-address"}

// libvirtOnly are the flags that mean something only with --backend libvirt.
var libvirtOnly = []string{"libvirt-uri", "libvirt-template", "libvirt-tb-cache"}

// notWithKubevirt are density's flags the kubevirt backend does not use:
// the node is the cluster's, not this machine's.
var notWithKubevirt = []string{"swap", "swap-tier", "node-memory", "agent", "balloon", "balloon-policy", "guest-cache", "accel", "repeat",
	"overcommit-percent", "overhead", "kernel-package", "image"}

// workloadFlags shape the in-guest workload: with the kubevirt backend
// only beside --controller-address.
var workloadFlags = []string{"memory-size", "memory-scan", "writes", "rate", "pace", "content", "workload-runtime", "seed"}

// checkBackendFlags refuses flags that do not belong to the chosen backend.
func checkBackendFlags(cmd *cobra.Command, backend string) error {
	refuse := func(names []string, why string) error {
		for _, name := range names {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
				return usagef("--%s %s", name, why)
			}
		}
		return nil
	}
	if backend != "libvirt" {
		if err := refuse(libvirtOnly, "needs --backend libvirt"); err != nil {
			return err
		}
	}
	if backend != "kubevirt" {
		return refuse(kubevirtOnly, "needs --backend kubevirt")
	}
	if err := refuse(notWithKubevirt, "is not used by --backend kubevirt (the nodes are the cluster's)"); err != nil {
		return err
	}
	if !cmd.Flags().Changed("controller-address") {
		return refuse(workloadFlags, "shapes the in-guest workload: with --backend kubevirt it needs --controller-address")
	}
	return nil
}

func runKubevirtDensity(cmd *cobra.Command, f *densityFlags) error {
	k := &f.kubevirt
	deployments, err := density.ParseDeployments(f.deployments)
	if err != nil {
		return usagef("--deployments: %v; want %s", err, density.DeploymentsForm)
	}
	var work *kubevirt.Workload
	if k.controller != "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		if uint64(f.memorySize) >= uint64(f.vmMemory) {
			return usagef("--memory-size %s must be below --vm-memory %s (the guest's OS needs the rest)", f.memorySize.String(), f.vmMemory.String())
		}
		workload := density.Params{MemorySizeBytes: uint64(f.memorySize), Scan: memload.Scan(f.scan), WriteFraction: float64(f.writes),
			RatePagesPerSec: float64(f.rate), Pace: f.pace, WorkloadRuntime: f.runtime, Content: memload.Content(f.content), Seed: f.seed,
			Interval: time.Second}
		work, err = kubevirt.NewWorkload(k.controller, exe, workload.LoadParams())
		if err != nil {
			return usageError{err}
		}
	}
	var tmpl *unstructured.Unstructured
	if k.template != "" {
		for _, name := range []string{"kubevirt-object", "node-selector", "container-disk", "cpus", "vm-memory"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s shapes the built-in template; with --template, set it in the file", name)
			}
		}
		if tmpl, err = kubevirt.LoadTemplate(k.template); err != nil {
			return usagef("--template %s: %v", k.template, err)
		}
	} else {
		kind, err := kubevirt.ParseObjectKind(k.object)
		if err != nil {
			return usagef("--kubevirt-object: %v", err)
		}
		sel, err := parseSelector(k.nodeSelector)
		if err != nil {
			return usagef("--node-selector: %v", err)
		}
		if k.cpus < 1 {
			return usagef("--cpus %d: want at least 1", k.cpus)
		}
		guest := resource.NewQuantity(int64(f.vmMemory), resource.BinarySI).String()
		opts := kubevirt.TemplateOptions{Kind: kind, GuestMemory: guest, CPUs: k.cpus, ContainerDisk: k.containerDisk, NodeSelector: sel}
		if work != nil {
			if opts.UserData, err = work.UserData(); err != nil {
				return usageError{err}
			}
		}
		tmpl = kubevirt.BuiltinTemplate(opts)
	}
	p := kubevirt.Params{Deployments: deployments, BurstOnly: k.burstOnly, Template: tmpl, Namespace: k.namespace, QPS: k.qps, Burst: k.burst,
		Timeout: k.timeout, StopOnFailure: f.stopOnFail, Workload: work, Out: f.out, Label: f.label,
		Record: map[string]any{"deployments": f.deployments, "burst_only": k.burstOnly, "qps": k.qps, "burst": k.burst,
			"timeout_seconds": k.timeout.Seconds(), "template": k.template, "controller_address": k.controller}}
	if work != nil {
		p.Record["load_args"] = work.LoadArgs
	}
	if err := p.Validate(); err != nil {
		return usageError{err}
	}
	if err := checkOutputDir("--out", f.out); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return usagef("kubeconfig: %v", err)
	}
	rep := newKubevirtReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.json)
	// Deleting what the run created is not abandoned on a second Ctrl-C.
	release := holdRestore(cmd.Context())
	dir, run, err := kubevirt.Run(cmd.Context(), cfg, p, rep)
	release()
	rep.clearStatus()
	if run != nil && (err == nil || len(run.Steps) > 0) {
		rep.finish(dir, run)
	}
	if err != nil {
		return err
	}
	if run.Interrupted {
		return fmt.Errorf("%s", run.StopReason)
	}
	return nil
}

// parseSelector parses key=value[,key=value].
func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value[,key=value]", kv)
		}
		out[k] = v
	}
	return out, nil
}

// kubevirtReporter prints a KubeVirt density run: a status line on a
// terminal, a line per step and the stop reason.
type kubevirtReporter struct {
	stepPrinter
}

func newKubevirtReporter(out, errw io.Writer, asJSON bool) *kubevirtReporter {
	r := &kubevirtReporter{}
	r.init(out, errw, asJSON)
	return r
}

func (r *kubevirtReporter) Status(step, objects, created, running int, elapsed time.Duration) {
	r.setStatus("step %d: %d objects, %d created, %d running, %5.1fs", step, objects, created, running, elapsed.Seconds())
}

func (r *kubevirtReporter) StepDone(s results.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clearStatusLocked()
	if r.json {
		return
	}
	if !r.header {
		fmt.Fprintf(r.out, "%4s %7s %9s %9s %9s %9s %9s %11s %9s %12s  %s\n", "step", "objects", "sched95", "run p50", "run p95", "run p99", "run max",
			"created/min", "delete", "agg pages/s", "status")
		r.header = true
	}
	var sched95, runMax float64
	for _, q := range s.CreatePhases {
		switch q.Phase {
		case kubevirt.PhaseScheduled:
			sched95 = q.P95Seconds
		case kubevirt.PhaseRunning:
			runMax = q.MaxSeconds
		}
	}
	status := "ok"
	if s.Failed {
		status = "FAILED: " + s.FailReason
	}
	fmt.Fprintf(r.out, "%4d %7d %8.3fs %8.3fs %8.3fs %8.3fs %8.3fs %11.1f %8.2fs %12s  %s\n", s.Index, s.Workers, sched95, s.CreateP50Seconds,
		s.CreateP95Seconds, s.CreateP99Seconds, runMax, s.CreationRatePerMinute, s.DeleteSeconds, units.FormatRate(s.AggregatePagesPerSec), status)
}

func (r *kubevirtReporter) finish(dir string, run *results.Run) {
	if r.json {
		json.NewEncoder(r.out).Encode(run)
		return
	}
	fmt.Fprintf(r.out, "stopped: %s\n", run.StopReason)
	fmt.Fprintf(r.out, "results: %s (%s)\n", dir, run.FinishedAt.Sub(run.StartedAt).Round(time.Second))
}
