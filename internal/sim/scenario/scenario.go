// Package scenario declares every parameter of `headroom sim` once, as a
// field of Values whose tags give its flag (also its key in a scenario
// file), its key in run.json, its unit and its one-line help. The flags,
// the scenario file's keys, run.json's params and the reference table are
// generated from those tags; Params turns the values into the model's
// sim.Params, checking them against each other.
package scenario

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/sim"
)

// Values are the simulator's parameters. Tags: flag (the flag and the
// scenario key), model (the model's field it sets, which sim.Validate's
// errors name), key (run.json), unit (what the value counts; "form"
// where a grammar gives it, named in the help), group (the reference
// table's section) and help (one line: what it is, where a default
// needs saying, what the default means).
type Values struct {
	// The ramp and the workload, as headroom density takes them.
	Deployments string             `flag:"deployments" key:"deployments" unit:"form" group:"ramp" help:"VM counts: start:end:step or a list such as 1,2,4,8"`
	VMMemory    flagvalue.Bytes    `flag:"vm-memory" model:"VM.MemoryBytes" key:"vm_memory_bytes" unit:"bytes" group:"ramp" help:"declared memory of each VM"`
	MemorySize  flagvalue.Bytes    `flag:"memory-size" model:"VM.Workload.SizeBytes" key:"memory_size_bytes" unit:"bytes" group:"ramp" help:"each workload's block (at most --vm-memory less --guest-overhead)"`
	Scan        flagvalue.Scan     `flag:"memory-scan" model:"VM.Workload.Scan" key:"memory_scan" unit:"none|seq|random" group:"ramp" help:"the workload's access pattern"`
	Writes      flagvalue.Fraction `flag:"writes" model:"VM.Workload.WriteFraction" key:"writes" unit:"share" group:"ramp" help:"share of touches that write, 0 to 1"`
	Rate        flagvalue.Rate     `flag:"rate" key:"rate_pages_per_sec" unit:"pages/s" group:"ramp" help:"per-VM cap on the workload's pages/s (0: as fast as possible)"`
	Content     flagvalue.Content  `flag:"content" key:"content" unit:"form" group:"ramp" help:"page content: random, zero, dup=F (mergeable by KSM), compress=R (a tier's ratio)"`
	Runtime     time.Duration      `flag:"workload-runtime" key:"workload_runtime_seconds" unit:"seconds" group:"ramp" help:"measured phase of each step"`
	Overcommit  float64            `flag:"overcommit-percent" key:"overcommit_percent" unit:"percent" group:"ramp" help:"memory overcommit: request = vm-memory × 100 / percent (+ overhead)"`
	Overhead    flagvalue.Bytes    `flag:"overhead" key:"overhead_bytes" unit:"bytes" group:"ramp" help:"host memory per VM beyond its guest RAM (QEMU); also its request's overhead unless --request-overhead"`
	// A request's overhead is declared and need not be what the host holds:
	// density's cgroup workers request 16 MiB beyond their memory and hold 3.
	RequestOverhead flagvalue.MaybeBytes `flag:"request-overhead" key:"request_overhead_bytes" unit:"bytes" group:"ramp" help:"what a request adds to vm-memory × 100 / overcommit-percent (none: --overhead; unused by --find overcommit-percent)"`
	Seed            uint64               `flag:"seed" key:"seed" unit:"count" group:"ramp" help:"seed of the VMs' start times"`
	StopOnFailure   bool                 `flag:"stop-on-failure" key:"stop_on_failure" unit:"bool" group:"ramp" help:"stop the ramp at the first failed step (an OOM kill or eviction)"`

	// The VM.
	WorkerKind    string          `flag:"worker-kind" model:"VM.Process" key:"worker_kind" unit:"vm|process" group:"vm" help:"vm: a guest (reads ahead page by page); process: density's cgroup backend (one read a window, no boot)"`
	GuestOverhead flagvalue.Bytes `flag:"guest-overhead" model:"VM.GuestOverheadBytes" key:"guest_overhead_bytes" unit:"bytes" group:"vm" help:"guest memory besides the workload that stays resident (kernel, caches); none for --worker-kind process unless given"`
	GuestCache    flagvalue.Bytes `flag:"guest-cache" model:"VM.GuestCacheBytes" key:"guest_cache_bytes" unit:"bytes" group:"vm" help:"idle page cache each guest fills at boot: host reclaim swaps it first, a balloon takes it back free"`

	// The node.
	NodeMemory    flagvalue.Bytes `flag:"node-memory" model:"Node.RAMBytes" key:"node_memory_bytes" unit:"bytes" group:"node" help:"the node's RAM"`
	SystemReserve flagvalue.Bytes `flag:"system-reserve" model:"Node.SystemReserveBytes" key:"system_reserve_bytes" unit:"bytes" group:"node" help:"RAM the VMs never get: host kernel, daemons, reservations (none when --node-memory is given)"`
	CPUs          float64         `flag:"cpus" model:"Node.CPUs" key:"cpus" unit:"cores" group:"node" help:"the node's cores"`
	TouchRate     string          `flag:"touch-rate" model:"Node.TouchRate" key:"touch_rate" unit:"form" group:"node" help:"pages/s one core touches in RAM, by memory touched a core: PAGES_PER_SEC or SIZE:PAGES_PER_SEC,..."`
	PopulateRate  float64         `flag:"populate-rate" key:"populate_rate" unit:"pages/s" group:"node" help:"pages/s one core fills a new block at (0: a quarter of --touch-rate at its smallest size)"`
	KSMDCPU       time.Duration   `flag:"ksmd-cpu" key:"ksmd_cpu_seconds" unit:"seconds" group:"node" help:"CPU ksmd has used before the run: the kernel's advisor counts it into its first scan"`

	// The swap device and how the kernel pages to it.
	Swap               flagvalue.Bytes `flag:"swap" model:"Node.Swap.SizeBytes" key:"swap_bytes" unit:"bytes" group:"swap" help:"swap device size (0: none)"`
	SwapReadIOPS       float64         `flag:"swap-read-iops" model:"Node.Swap.ReadIOPS" key:"swap_read_iops" unit:"IOPS" group:"swap" help:"the device's 4 KiB random-read rate"`
	SwapWriteIOPS      float64         `flag:"swap-write-iops" model:"Node.Swap.WriteIOPS" key:"swap_write_iops" unit:"IOPS" group:"swap" help:"the device's 4 KiB random-write rate"`
	SwapLatency        time.Duration   `flag:"swap-latency" model:"Node.Swap.LatencySeconds" key:"swap_latency_seconds" unit:"seconds" group:"swap" help:"one 4 KiB read's latency at queue depth 1"`
	SwapDepths         string          `flag:"swap-depths" model:"Node.Swap.Depths" key:"swap_depths" unit:"form" group:"swap" help:"the device's rates by queue depth, DEPTH:READ/WRITE,...; replaces --swap-read-iops and --swap-write-iops"`
	SwapReadBandwidth  flagvalue.Bytes `flag:"swap-read-bandwidth" key:"swap_read_bandwidth" unit:"bytes/s" group:"swap" help:"rate a read's bytes beyond its first page move at (0: an I/O costs the same whatever its size)"`
	SwapWriteBandwidth flagvalue.Bytes `flag:"swap-write-bandwidth" key:"swap_write_bandwidth" unit:"bytes/s" group:"swap" help:"rate a write's bytes beyond its first page move at (0: an I/O costs the same whatever its size)"`
	SwapReadPages      string          `flag:"swap-read-pages" key:"swap_read_pages" unit:"form" group:"swap" help:"pages a sequential fault's readahead reads, PAGES or TASKS:PAGES,... (none: 8, vm.page-cluster 3)"`
	SwapWritePages     string          `flag:"swap-write-pages" key:"swap_write_pages" unit:"form" group:"swap" help:"pages one write to the device carries, PAGES or TASKS:PAGES,... (none: 8)"`
	PagingCPU          string          `flag:"paging-cpu" key:"paging_cpu" unit:"form" group:"swap" help:"CPU to page one page in and another out, DURATION or TASKS:DURATION,..."`
	RunQueueWait       string          `flag:"run-queue-wait" key:"run_queue_wait" unit:"form" group:"swap" help:"a faulting VM's wait for a core a page read, DURATION or TASKS:DURATION,... (none: only when oversubscribed)"`
	SwapTier           string          `flag:"swap-tier" model:"Node.Tier" key:"swap_tier" unit:"form" group:"swap" help:"a compressed tier in front of the device: zram:SIZE[,...] or zswap:POOL_SIZE[,...] (docs/guide/swap-tiers.md)"`
	SwapTierRatio      float64         `flag:"swap-tier-ratio" key:"swap_tier_ratio" unit:"ratio" group:"swap" help:"bytes of the workload's pages the tier stores a byte of RAM, at least 1 (0: --content's ratio)"`

	// Corrections: terms fitted to a host, off unless given (or measured
	// by --machine this); docs/sim.md keeps the evidence for each.
	SwapMixedCapacity string  `flag:"swap-mixed-capacity" model:"Node.Swap.MixedCapacity" key:"swap_mixed_capacity" unit:"form" group:"correction" help:"times its separate rates' sum the device serves reads and writes mixed, TIMES or TASKS:TIMES,... (none: 1)"`
	TouchTurnBlocks   float64 `flag:"touch-turn-blocks" model:"Node.TouchTurnBlocks" key:"touch_turn_blocks" unit:"blocks" group:"correction" help:"blocks' worth of memory a VM touches as while taking turns on a core, 1 to 64 (0: off; --machine this measures it)"`

	// The agent.
	Agent         bool    `flag:"agent" key:"agent" unit:"bool" group:"agent" help:"run the agent's policy on the node (swap-rate thresholds half the device's rates)"`
	AgentConfig   string  `flag:"agent-config" key:"agent_config" unit:"path" group:"agent" help:"run the agent with this agent.yaml (thresholds, intervals, KSM and balloon keys); implies --agent"`
	Balloon       bool    `flag:"balloon" key:"balloon_on" unit:"bool" group:"agent" help:"with --agent: the agent also drives the guests' balloons"`
	BalloonPolicy string  `flag:"balloon-policy" key:"balloon" unit:"headroom|mom" group:"agent" help:"with --balloon: headroom (memory states, guest-aware targets) or mom (oVirt MOM's rules)"`
	KSM           string  `flag:"ksm" key:"ksm" unit:"off|governor|advisor" group:"agent" help:"with --agent: who paces ksmd: nobody, the agent (profit per CPU-second) or the kernel's advisor"`
	MaxSwapIn     float64 `flag:"max-swap-in-pages-per-sec" key:"max_swap_in_pages_per_sec" unit:"pages/s" group:"agent" help:"with --agent: swap-in rate threshold (-1: half --swap-read-iops; 0: off)"`
	MaxSwapOut    float64 `flag:"max-swap-out-pages-per-sec" key:"max_swap_out_pages_per_sec" unit:"pages/s" group:"agent" help:"with --agent: swap-out rate threshold (-1: half --swap-write-iops; 0: off)"`
}

// Default are the parameters where nothing sets them: the paper's node (a
// 192 GiB host with 64 cores and an NVMe drive) and 16 GiB VMs.
func Default() Values {
	return Values{
		Deployments: "1:20:1", VMMemory: 16 << 30, MemorySize: 14 << 30, Scan: flagvalue.Scan(memload.ScanSeq), Writes: 1,
		Content: flagvalue.Content(memload.Content{Kind: memload.ContentRandom}), Runtime: 180 * time.Second, Overcommit: 100,
		Overhead: 256 << 20, Seed: 1, StopOnFailure: true,
		WorkerKind: "vm", GuestOverhead: 1 << 30,
		NodeMemory: 192 << 30, SystemReserve: defaultNodeReserve, CPUs: 64, TouchRate: "20M",
		SwapReadIOPS: 1.3e6, SwapWriteIOPS: 215e3, SwapLatency: 80 * time.Microsecond,
		PagingCPU:     "5us",
		BalloonPolicy: policy.BalloonHeadroom, KSM: policy.KSMOff, MaxSwapIn: -1, MaxSwapOut: -1,
	}
}

// defaultNodeReserve is the default node's system reserve. A node sized
// by --node-memory (or measured by --machine this) gets none unless one is
// given: a reserve is a figure of the host it was read on.
const defaultNodeReserve = 8 << 30

// Param is one parameter as its tags declare it.
type Param struct {
	Flag, Model, Key, Unit, Group, Help string
	// Default is the flag's default as the command line reads it.
	Default string
	field   int
}

// All lists the parameters in declaration order.
func All() []Param {
	t := reflect.TypeOf(Values{})
	d := Default()
	dv := reflect.ValueOf(&d).Elem()
	ps := make([]Param, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		p := Param{Flag: f.Tag.Get("flag"), Model: f.Tag.Get("model"), Key: f.Tag.Get("key"), Unit: f.Tag.Get("unit"), Group: f.Tag.Get("group"),
			Help: f.Tag.Get("help"), field: i}
		p.Default = format(dv.Field(i))
		ps = append(ps, p)
	}
	return ps
}

// flagOf is the flag its tag declares for the field of v that field
// points to ("" if it points to none).
func (v *Values) flagOf(field any) string {
	rv, want := reflect.ValueOf(v).Elem(), reflect.ValueOf(field).Pointer()
	for i := range rv.NumField() {
		if rv.Field(i).Addr().Pointer() == want {
			return rv.Type().Field(i).Tag.Get("flag")
		}
	}
	return ""
}

// format is a value as its flag reads it.
func format(v reflect.Value) string {
	switch x := v.Addr().Interface().(type) {
	case pflag.Value:
		return x.String()
	case *time.Duration:
		return x.String()
	}
	return fmt.Sprint(v.Interface())
}

// Register adds every parameter to fl as a flag bound to its field in v,
// v's values as the defaults.
func (v *Values) Register(fl *pflag.FlagSet) {
	rv := reflect.ValueOf(v).Elem()
	for _, p := range All() {
		flagvalue.Bind(fl, rv.Field(p.field).Addr().Interface(), p.Flag, p.Help)
	}
}

// Record is v for run.json: each parameter under its key, sizes in bytes,
// durations in seconds.
func (v Values) Record() map[string]any {
	rv := reflect.ValueOf(v)
	m := map[string]any{}
	for _, p := range All() {
		f := rv.Field(p.field)
		switch x := f.Interface().(type) {
		case flagvalue.Bytes:
			m[p.Key] = uint64(x)
		case flagvalue.MaybeBytes:
			if x.Given {
				m[p.Key] = x.Bytes
			} else {
				m[p.Key] = nil
			}
		case flagvalue.Rate:
			m[p.Key] = float64(x)
		case flagvalue.Fraction:
			m[p.Key] = float64(x)
		case flagvalue.Scan:
			m[p.Key] = string(x)
		case flagvalue.Content:
			m[p.Key] = memload.Content(x).String()
		case time.Duration:
			m[p.Key] = x.Seconds()
		default:
			m[p.Key] = x
		}
	}
	// The balloon's key holds the policy in force, as density records it.
	if !v.Balloon {
		m["balloon"] = ""
	}
	m["agent"] = v.Agent || v.AgentConfig != ""
	return m
}

// Lookup is the parameter whose flag is name (ok false: none).
func Lookup(name string) (Param, bool) {
	for _, p := range All() {
		if p.Flag == name {
			return p, true
		}
	}
	return Param{}, false
}

// Table is the reference table of the parameters: flag, unit, default
// and meaning, by group.
func Table() string {
	var b strings.Builder
	group := ""
	for _, p := range All() {
		if p.Group != group {
			group = p.Group
			fmt.Fprintf(&b, "\n### %s\n\n| flag (scenario key) | run.json key | unit | default | meaning |\n|---|---|---|---|---|\n", groupTitles[group])
		}
		def := p.Default
		if def == "" {
			def = "none"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | `%s` | %s |\n", p.Flag, p.Key, strings.ReplaceAll(p.Unit, "|", "\\|"), def, strings.ReplaceAll(p.Help, "|", "\\|"))
	}
	return b.String()
}

var groupTitles = map[string]string{"ramp": "The ramp and the workload", "vm": "The VM", "node": "The node",
	"swap": "The swap device and paging", "correction": "Corrections: fitted to a host, off unless given (docs/sim.md)",
	"agent": "The agent"}

// tierRatio is the ratio the tier's compressor gets: --swap-tier-ratio,
// or --content's.
func (v Values) tierRatio() (float64, error) {
	switch {
	case v.SwapTierRatio != 0 && !(v.SwapTierRatio >= 1):
		return 0, fmt.Errorf("--swap-tier-ratio %g: want a ratio of at least 1", v.SwapTierRatio)
	case v.SwapTierRatio != 0:
		return v.SwapTierRatio, nil
	}
	return sim.ContentRatio(memload.Content(v.Content)), nil
}
