package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/units"
)

const calcLong = `KubeVirt sizing before any VM exists: the virt-launcher pod's memory
request as KubeVirt computes it, the VMs a node holds by request, and the
swap the node then needs.

The request is the guest's share — guest memory × 100 / --overcommit-percent
(KubeVirt's memoryOvercommit), or the VM's own --vmi-request — plus the
overhead: page tables (the VMI's request / 512; from v1.7 only when the VM
sets its own request, since the overhead is computed before the request is
derived), the fixed per-pod components (virt-launcher-monitor 25 MiB,
virt-launcher 100 MiB, virtlogd 25 MiB, virtqemud 40 MiB, QEMU 30 MiB),
8 MiB per vCPU, 8 MiB for the IOThread, 32 MiB of video (unless
--no-graphics), and the optional parts (arm64 pflash, VFIO 1 GiB, downward
metrics, exec probes, SEV, TPM, dedicated CPUs, v1.8's reserved overhead),
scaled by --additional-overhead-ratio. The figures are KubeVirt's source
for each version (--kubevirt-version; the source is printed).

With --node-memory (what pods may request): the VMs that fit by request
(and --max-pods), wasp-agent's swap rule RAM × (percent/100 − 1), and the
swap those VMs need if they touch all their memory: VMs × (guest +
overhead) − RAM. --shapes FILE.yaml computes a list of shapes: each entry
holds these flags' names and values, over the command line's.`

// calcShape is one VM shape's flags.
type calcShape struct {
	name                                    string
	guest, vmiRequest, reserved             flagvalue.Bytes
	cpus, overcommit, execProbes            int
	noGraphics, vfio, downward, sev, sevVar bool
	tpm, dedicated, guestOverheadOutside    bool
	arch                                    string
	ratio                                   float64
}

func (s *calcShape) register(fl *pflag.FlagSet) {
	fl.StringVar(&s.name, "name", s.name, "the shape's name (in --shapes files)")
	fl.Var(&s.guest, "guest-memory", "the VM's memory (memory.guest), e.g. 16Gi")
	fl.IntVar(&s.cpus, "cpus", s.cpus, "vCPUs (sockets × cores × threads)")
	fl.IntVar(&s.overcommit, "overcommit-percent", s.overcommit, "KubeVirt's memoryOvercommit, percent (100: none)")
	fl.Var(&s.vmiRequest, "vmi-request", "the VM's own resources.requests.memory, if it sets one")
	fl.BoolVar(&s.noGraphics, "no-graphics", s.noGraphics, "autoattachGraphicsDevice: false (no 32 MiB of video)")
	fl.StringVar(&s.arch, "arch", s.arch, "amd64 or arm64 (arm64 adds 128 MiB of UEFI pflash)")
	fl.BoolVar(&s.vfio, "vfio", s.vfio, "host devices, GPUs or SR-IOV (1 GiB)")
	fl.BoolVar(&s.downward, "downward-metrics", s.downward, "a downward metrics volume (1 MiB)")
	fl.IntVar(&s.execProbes, "exec-probes", s.execProbes, "liveness and readiness exec probes, 0..2 (10 MiB each + 100 MiB)")
	fl.BoolVar(&s.sev, "sev", s.sev, "AMD SEV (256 MiB)")
	fl.BoolVar(&s.sevVar, "sev-variant", s.sevVar, "AMD SEV-SNP or SEV-ES (256 MiB from v1.7)")
	fl.BoolVar(&s.tpm, "tpm", s.tpm, "a TPM device (swtpm, 53 MiB)")
	fl.BoolVar(&s.dedicated, "dedicated-cpu", s.dedicated, "dedicatedCpuPlacement or Guaranteed QoS (100 MiB)")
	fl.Var(&s.reserved, "reserved-overhead", "memory.reservedOverhead.addedOverhead (v1.8)")
	fl.BoolVar(&s.guestOverheadOutside, "overcommit-guest-overhead", s.guestOverheadOutside, "resources.overcommitGuestOverhead: the overhead is not requested")
	fl.Float64Var(&s.ratio, "additional-overhead-ratio", s.ratio, "the KubeVirt CR's additionalGuestMemoryOverheadRatio (e.g. 1.5; 0: not set)")
}

func (s calcShape) shape() calc.Shape {
	return calc.Shape{Name: s.name, GuestMemoryBytes: uint64(s.guest), CPUs: s.cpus, OvercommitPercent: s.overcommit,
		VMIRequestBytes: uint64(s.vmiRequest), NoGraphics: s.noGraphics, Arch: s.arch, VFIO: s.vfio, DownwardMetrics: s.downward,
		ExecProbes: s.execProbes, SEV: s.sev, SEVVariant: s.sevVar, TPM: s.tpm, Dedicated: s.dedicated,
		ReservedOverheadBytes: uint64(s.reserved), OvercommitGuestOverhead: s.guestOverheadOutside, AdditionalOverheadRatio: s.ratio}
}

type calcFlags struct {
	shape   calcShape
	version string
	node    flagvalue.Bytes
	maxPods int
	shapes  string
	json    bool
}

func newCalcCommand() *cobra.Command {
	f := &calcFlags{shape: calcShape{cpus: 1, overcommit: 100, arch: "amd64"}}
	cmd := &cobra.Command{
		Use:   "calc",
		Short: "KubeVirt sizing: the virt-launcher pod's memory request, VMs per node, the swap needed",
		Long:  calcLong,
		Example: `  headroom calc --guest-memory 16Gi --cpus 1 --overcommit-percent 150 --node-memory 192Gi
  headroom calc --shapes shapes.yaml --node-memory 192Gi --kubevirt-version v1.6 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCalc(cmd, f) },
	}
	fl := cmd.Flags()
	f.shape.register(fl)
	fl.StringVar(&f.version, "kubevirt-version", calc.DefaultVersion, "KubeVirt release line: "+strings.Join(calc.VersionNames(), ", "))
	fl.Var(&f.node, "node-memory", "the node's memory pods may request (allocatable), e.g. 192Gi: adds the fit and the swap")
	fl.IntVar(&f.maxPods, "max-pods", 110, "the kubelet's maxPods")
	fl.StringVar(&f.shapes, "shapes", "", "YAML list of shapes (keys: this command's shape flags, e.g. guest-memory, cpus), each over the command line's")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func runCalc(cmd *cobra.Command, f *calcFlags) error {
	v, ok := calc.Versions[f.version]
	if !ok {
		return usagef("--kubevirt-version %q: want one of %s", f.version, strings.Join(calc.VersionNames(), ", "))
	}
	if f.maxPods < 1 {
		return usagef("--max-pods must be >= 1, got %d", f.maxPods)
	}
	shapes := []calcShape{f.shape}
	if f.shapes != "" {
		var err error
		if shapes, err = readShapes(f.shapes, f.shape); err != nil {
			return err
		}
	} else if f.shape.guest == 0 {
		return usagef("--guest-memory is required (or --shapes FILE)")
	}
	var results []calc.Fit
	for i, s := range shapes {
		r, err := calc.Compute(v, s.shape())
		if err != nil {
			if f.shapes != "" {
				return usagef("--shapes %s: entry %d: %v", f.shapes, i+1, err)
			}
			return usagef("%v", err)
		}
		fit := calc.Fit{Request: r}
		if f.node > 0 {
			if fit, err = calc.FitOnNode(r, calc.Node{MemoryBytes: uint64(f.node), MaxPods: f.maxPods}); err != nil {
				return usagef("%v", err)
			}
		}
		results = append(results, fit)
	}
	out := cmd.OutOrStdout()
	if f.json {
		if f.shapes == "" {
			return printJSON(cmd, results[0])
		}
		return printJSON(cmd, results)
	}
	printCalc(out, v, results, f.node > 0)
	return nil
}

// readShapes reads a YAML list of shapes, each entry's keys being shape
// flags set over the command line's shape.
func readShapes(path string, base calcShape) ([]calcShape, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--shapes: %v", err)
	}
	var entries []map[string]any
	if err := yaml.UnmarshalStrict(b, &entries); err != nil { // a key twice is an error
		return nil, usagef("--shapes %s: want a YAML list of shapes: %v", path, err)
	}
	if len(entries) == 0 {
		return nil, usagef("--shapes %s: no shapes", path)
	}
	var out []calcShape
	for i, e := range entries {
		s := base
		fs := pflag.NewFlagSet("shape", pflag.ContinueOnError)
		s.register(fs)
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if fs.Lookup(k) == nil {
				return nil, usagef("--shapes %s: entry %d: %s", path, i+1, unknownKey(k, flagNames(fs)))
			}
			if err := fs.Set(k, fmt.Sprint(e[k])); err != nil {
				return nil, usagef("--shapes %s: entry %d: %s: %v", path, i+1, k, err)
			}
		}
		if s.name == "" {
			s.name = fmt.Sprintf("shape %d", i+1)
		}
		out = append(out, s)
	}
	return out, nil
}

func printCalc(out io.Writer, v calc.Version, results []calc.Fit, withNode bool) {
	fmt.Fprintf(out, "KubeVirt %s (%s)\n", v.Name, v.Source)
	for _, f := range results {
		s := f.Shape
		fmt.Fprintln(out)
		if s.Name != "" {
			fmt.Fprintf(out, "%s: ", s.Name)
		}
		fmt.Fprintf(out, "guest %s, %d vCPU, overcommit %d%%\n", units.FormatBytes(s.GuestMemoryBytes), s.CPUs, s.OvercommitPercent)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		row := func(name string, b int64) {
			fmt.Fprintf(tw, "  %s\t%d B\t%s\t\n", name, b, units.FormatBytes(uint64(b)))
		}
		row("VMI memory request", f.VMIMemoryRequestBytes)
		for _, p := range f.OverheadParts {
			row("+ "+strings.ReplaceAll(p.Name, "_", " "), p.Bytes)
		}
		row("= overhead", f.OverheadBytes)
		row("pod memory request", f.PodMemoryRequestBytes)
		tw.Flush()
		if withNode {
			fmt.Fprintf(out, "  node %s: %d VMs fit by request (limited by %s)\n", units.FormatBytes(f.Node.MemoryBytes), f.VMsFit, strings.ReplaceAll(f.LimitedBy, "_", " "))
			fmt.Fprintf(out, "  node swap: %s by wasp-agent's rule (RAM × (%d/100 − 1)); %s needed by the %d VMs touching all their memory\n",
				units.FormatBytes(f.NodeSwapBytes), s.OvercommitPercent, units.FormatBytes(f.NodeSwapNeededBytes), f.VMsFit)
		}
	}
}
