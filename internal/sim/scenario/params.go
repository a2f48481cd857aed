package scenario

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/units"
)

// Params turns the values into the model's parameters, checking them
// against each other; an error names the flag. agentFile is the agent an
// --agent-config file gave (nil: none; the caller reads the file, with the
// agent's own loader).
func (v Values) Params(agentFile *sim.AgentParams) (sim.Params, error) {
	if err := v.Validate(agentFile != nil); err != nil {
		return sim.Params{}, err
	}
	deployments, err := density.ParseDeployments(v.Deployments)
	if err != nil {
		return sim.Params{}, fmt.Errorf("--deployments: %v; want %s", err, density.DeploymentsForm)
	}
	ratio, err := v.tierRatio()
	if err != nil {
		return sim.Params{}, err
	}
	node := sim.Node{RAMBytes: uint64(v.NodeMemory), SystemReserveBytes: uint64(v.SystemReserve), CPUs: v.CPUs,
		TouchTurnBlocks: v.TouchTurnBlocks, PopulateRatePerCore: v.PopulateRate, PageCluster: 3, KSMDCPUSeconds: v.KSMDCPU.Seconds(),
		Swap: sim.Device{SizeBytes: uint64(v.Swap), ReadIOPS: v.SwapReadIOPS, WriteIOPS: v.SwapWriteIOPS, LatencySeconds: v.SwapLatency.Seconds(),
			ReadBytesPerSec: float64(v.SwapReadBandwidth), WriteBytesPerSec: float64(v.SwapWriteBandwidth)}}
	// Each figure given in a grammar: parsed where given, none otherwise;
	// the model's parser says what is wrong, the error names the flag.
	forms := []struct {
		value *string
		parse func(string) error
	}{
		{&v.SwapDepths, func(s string) (err error) { node.Swap.Depths, err = sim.ParseDepths(s); return }},
		{&v.TouchRate, func(s string) (err error) { node.TouchRate, err = sim.ParseTouchRate(s); return }},
		{&v.SwapReadPages, func(s string) (err error) { node.ReadaheadPages, err = sim.ParseIOPages(s); return }},
		{&v.SwapWritePages, func(s string) (err error) { node.WritePages, err = sim.ParseIOPages(s); return }},
		{&v.PagingCPU, func(s string) (err error) { node.PagingCPU, err = sim.ParsePagingCPU(s); return }},
		{&v.RunQueueWait, func(s string) (err error) { node.RunQueueWait, err = sim.ParseRunQueueWait(s); return }},
		{&v.SwapTier, func(s string) (err error) { node.Tier, err = sim.ParseTier(s, ratio, node.RAMBytes); return }},
		{&v.SwapMixedCapacity, func(s string) (err error) { node.Swap.MixedCapacity, err = sim.ParseMixedCapacity(s); return }},
	}
	for _, f := range forms {
		if *f.value == "" {
			continue
		}
		if err := f.parse(*f.value); err != nil {
			return sim.Params{}, namingFlags(fmt.Errorf("--%s %w", v.flagOf(f.value), err))
		}
	}
	vm := v.vmSpec()
	if err := sim.Validate(node, vm); err != nil {
		return sim.Params{}, namingFlags(err)
	}
	// A node that admits not one VM is bad input, not an empty run.
	if allocatable := node.RAMBytes - node.SystemReserveBytes; vm.RequestBytes > allocatable {
		overheadFlag := v.flagOf(&v.Overhead)
		if v.RequestOverhead.Given {
			overheadFlag = v.flagOf(&v.RequestOverhead)
		}
		return sim.Params{}, fmt.Errorf("--%s %s requests %s a VM (--%s %g, --%s %s), more than the node's %s (--%s less --%s): not one VM is admitted",
			v.flagOf(&v.VMMemory), units.FormatBytes(vm.MemoryBytes), units.FormatBytes(vm.RequestBytes), v.flagOf(&v.Overcommit), v.Overcommit,
			overheadFlag, units.FormatBytes(v.RequestOverhead.Or(uint64(v.Overhead))), units.FormatBytes(allocatable), v.flagOf(&v.NodeMemory), v.flagOf(&v.SystemReserve))
	}
	p := sim.Params{Node: node, VM: vm, Deployments: deployments, RuntimeSeconds: v.Runtime.Seconds(), Seed: v.Seed,
		StopOnFailure: v.StopOnFailure, Label: fmt.Sprintf("sim %s %s", v.Scan, units.FormatBytes(uint64(v.MemorySize)))}
	switch {
	case agentFile != nil:
		p.Agent = agentFile
	case v.Agent:
		cfg := policy.DefaultConfig()
		cfg.MaxAverageSwapInPagesPerSecond, cfg.MaxAverageSwapOutPagesPerSecond = v.MaxSwapIn, v.MaxSwapOut
		if v.MaxSwapIn == -1 {
			cfg.MaxAverageSwapInPagesPerSecond = 0.5 * v.SwapReadIOPS
		}
		if v.MaxSwapOut == -1 {
			cfg.MaxAverageSwapOutPagesPerSecond = 0.5 * v.SwapWriteIOPS
		}
		if v.Balloon {
			cfg.Balloon, cfg.BalloonPolicy = true, v.BalloonPolicy
		}
		cfg.KSMMode = v.KSM
		a := sim.DefaultAgent()
		a.Policy = cfg
		p.Agent = &a
	}
	return p, nil
}

// vmSpec is the VM the values describe.
func (v Values) vmSpec() sim.VMSpec {
	return sim.VMSpec{Process: v.WorkerKind == "process", MemoryBytes: uint64(v.VMMemory), GuestOverheadBytes: uint64(v.GuestOverhead),
		HostOverheadBytes: uint64(v.Overhead), GuestCacheBytes: uint64(v.GuestCache),
		RequestBytes: density.RequestBytes(uint64(v.VMMemory), v.Overcommit, v.RequestOverhead.Or(uint64(v.Overhead))),
		Workload: sim.Workload{SizeBytes: uint64(v.MemorySize), Scan: memload.Scan(v.Scan), WriteFraction: float64(v.Writes),
			RatePagesPerSec: float64(v.Rate), DupFraction: sim.DupFraction(memload.Content(v.Content))}}
}

// CheckBeforeMeasuring is the part of Params' checks no measured figure
// changes (the flags against each other, the VM's parts): what is wrong
// there is said before minutes of --machine this, not after.
func (v Values) CheckBeforeMeasuring(withAgentFile bool) error {
	if err := v.Validate(withAgentFile); err != nil {
		return err
	}
	if err := sim.ValidateVM(v.vmSpec()); err != nil {
		return namingFlags(err)
	}
	return nil
}

// Validate checks the values against each other where the model cannot:
// the flags that only mean something beside another, and the agent's.
// withAgentFile: an --agent-config file gives the agent's keys.
func (v Values) Validate(withAgentFile bool) error {
	switch {
	case v.Overcommit < 100:
		return fmt.Errorf("--overcommit-percent must be at least 100, got %g", v.Overcommit)
	case v.Runtime <= 0:
		return fmt.Errorf("--workload-runtime must be positive")
	case v.WorkerKind != "vm" && v.WorkerKind != "process":
		return fmt.Errorf("--worker-kind %q: want vm or process", v.WorkerKind)
	case v.Balloon && !v.Agent:
		return fmt.Errorf("--balloon needs --agent")
	case v.Balloon && v.BalloonPolicy != policy.BalloonHeadroom && v.BalloonPolicy != policy.BalloonMOM:
		return fmt.Errorf("--balloon-policy %q: want headroom or mom", v.BalloonPolicy)
	case !v.Balloon && v.BalloonPolicy != policy.BalloonHeadroom:
		return fmt.Errorf("--balloon-policy needs --balloon")
	case v.KSM != policy.KSMOff && v.KSM != policy.KSMGovernor && v.KSM != policy.KSMAdvisor:
		return fmt.Errorf("--ksm %q: want off, governor or advisor", v.KSM)
	case v.KSMDCPU < 0:
		return fmt.Errorf("--ksmd-cpu %s: want a duration not negative", v.KSMDCPU)
	case v.KSM != policy.KSMOff && !v.Agent:
		return fmt.Errorf("--ksm needs --agent")
	case v.Balloon && v.WorkerKind != "vm":
		return fmt.Errorf("--balloon needs --worker-kind vm (a process has no guest)")
	case (v.MaxSwapIn < 0 && v.MaxSwapIn != -1) || (v.MaxSwapOut < 0 && v.MaxSwapOut != -1):
		return fmt.Errorf("--max-swap-in-pages-per-sec and --max-swap-out-pages-per-sec: want a rate, 0 (off) or -1 (half the device's)")
	case withAgentFile && (v.MaxSwapIn != -1 || v.MaxSwapOut != -1 || v.KSM != policy.KSMOff || v.Balloon):
		return fmt.Errorf("--agent-config %s: set the thresholds, ksmMode and balloon in the file, not with --max-swap-*, --ksm or --balloon", v.AgentConfig)
	}
	return nil
}

// namingFlags rewrites the model's field names in err (Node.X, VM.X) as
// the flags that set them.
func namingFlags(err error) error {
	msg := err.Error()
	ps := All()
	// Longest first: Node.Swap.MixedCapacity before Node.Swap.Mixed...
	sort.Slice(ps, func(i, j int) bool { return len(ps[i].Model) > len(ps[j].Model) })
	for _, p := range ps {
		if p.Model != "" {
			msg = strings.ReplaceAll(msg, p.Model, "--"+p.Flag)
		}
	}
	return errors.New(msg)
}
