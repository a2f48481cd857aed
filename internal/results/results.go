// Package results is the result schema shared by `headroom density` and
// `headroom sim` and read by `headroom report`: one directory per
// run with run.json (parameters, machine, steps, stop reason), steps.csv,
// timeline.jsonl (node samples) and workers.jsonl (every worker's interval
// records).
package results

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/units"
)

// SchemaVersion names the layout; readers refuse other versions.
const SchemaVersion = "headroom.results/v1"

// File names inside a run directory.
const (
	RunFile      = "run.json"
	StepsCSV     = "steps.csv"
	TimelineFile = "timeline.jsonl"
	// AgentFile holds the agent's decision lines (runs with --agent).
	AgentFile   = "agent.jsonl"
	WorkersFile = "workers.jsonl"
)

// Run is run.json.
type Run struct {
	Schema     string    `json:"schema"`      // the layout's version; readers refuse others
	Kind       string    `json:"kind"`        // "density" (measured) or "sim" (modelled)
	Label      string    `json:"label"`       // the run's name in reports (--label)
	StartedAt  time.Time `json:"started_at"`  // when the run began
	FinishedAt time.Time `json:"finished_at"` // when it ended
	// Params are the command's parameters as given.
	Params  map[string]any `json:"params"`
	Machine Machine        `json:"machine"` // where it ran
	Node    Node           `json:"node"`    // the node the workers ran in
	Steps   []Step         `json:"steps"`   // the ramp's steps, in order
	// StopReason says why the ramp ended: "completed", a failure, an
	// admission refusal or an interruption.
	StopReason string `json:"stop_reason"`
	// Interrupted is set when the run was cut short (Ctrl-C); the steps
	// recorded so far are kept.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	Hostname      string       `json:"hostname"`        // the machine's host name
	Kernel        string       `json:"kernel"`          // its kernel release
	CPUs          int          `json:"cpus"`            // its CPUs
	MemTotalBytes uint64       `json:"mem_total_bytes"` // its RAM (MemTotal)
	SwapDevices   []SwapDevice `json:"swap_devices"`    // its active swap areas
}

// SwapDevice is one active swap area during the run.
type SwapDevice struct {
	Path      string `json:"path"`       // the swap file or device
	Type      string `json:"type"`       // file or partition
	SizeBytes uint64 `json:"size_bytes"` // its size
	Priority  int    `json:"priority"`   // its swap priority
}

// Node is the (possibly small) node the workers ran in.
type Node struct {
	Scope       string `json:"scope"`               // the node's cgroup (or the modelled node's name)
	MemoryBytes uint64 `json:"memory_bytes"`        // the node's RAM
	SwapBytes   uint64 `json:"swap_bytes"`          // the swap it may use
	SwapTier    string `json:"swap_tier,omitempty"` // a compressed tier in front of the swap (--swap-tier), if any
	// SwapReadIOPS is the swap device's measured 4 KiB random-read rate:
	// the physical limit of page-ins. 0 if not measured.
	SwapReadIOPS float64 `json:"swap_read_iops,omitempty"`
	// RequestBytes is what the scheduler reserves per worker.
	RequestBytes uint64 `json:"request_bytes"`
}

// AdmissionRefused is why a step of workers, each requesting requestBytes,
// is not admitted to a node of allocatableBytes, as a scheduler would
// refuse it ("" if it fits): density and the simulator end their ramps
// there.
func AdmissionRefused(workers int, requestBytes, allocatableBytes uint64) string {
	total := uint64(workers) * requestBytes
	if total <= allocatableBytes {
		return ""
	}
	totalText, allocatableText := units.FormatBytesApart(total, allocatableBytes)
	return fmt.Sprintf("admission refused at %d workers: %d × %s requested = %s exceeds the node's %s",
		workers, workers, units.FormatBytes(requestBytes), totalText, allocatableText)
}

// Step is one ramp step: a number of workers run together.
type Step struct {
	Index   int       `json:"index"`   // the step's place in the ramp, from 0
	Workers int       `json:"workers"` // workers (VMs) run together
	Repeat  int       `json:"repeat"`  // which repetition of this count (--repeat), from 0
	Started time.Time `json:"started"` // when the workers were released
	Seconds float64   `json:"seconds"` // the measured phase's length
	Failed  bool      `json:"failed"`  // a worker failed (FailReason says how)
	// FailReason names what failed (a worker OOM-killed, evicted, silent,
	// not started).
	FailReason string `json:"fail_reason,omitempty"`
	// AggregatePagesPerSec sums the workers' rates.
	AggregatePagesPerSec float64 `json:"aggregate_pages_per_sec"`
	// StartSkewSeconds is the spread of the workers' starts.
	StartSkewSeconds float64 `json:"start_skew_seconds"`
	// Node rates over the measured phase, from /proc/vmstat and PSI.
	SwapInPagesPerSec  float64 `json:"swap_in_pages_per_sec"`
	SwapOutPagesPerSec float64 `json:"swap_out_pages_per_sec"`
	MajorFaultsPerSec  float64 `json:"major_faults_per_sec"`
	PSISomePercent     float64 `json:"psi_some_percent"`
	PSIFullPercent     float64 `json:"psi_full_percent"`
	// CPUBusyCores is the node's CPUs kept busy over the measured phase,
	// from /proc/stat (0: not recorded).
	CPUBusyCores float64 `json:"cpu_busy_cores,omitempty"`
	// SwapUsedBytes is the node's swap in use at the end of the measured
	// phase, as free(1) counts it: the slots swapped-in pages keep
	// (SwapCached) included (0: not recorded).
	SwapUsedBytes uint64 `json:"swap_used_bytes,omitempty"`
	// NodeCountersProblem names node rates left at zero because a read
	// failed or a counter went backwards.
	NodeCountersProblem string `json:"node_counters_problem,omitempty"`
	// Creation-to-ready latency quantiles over this step's workers (exact).
	CreateP50Seconds float64 `json:"create_p50_seconds"`
	CreateP95Seconds float64 `json:"create_p95_seconds"`
	CreateP99Seconds float64 `json:"create_p99_seconds"`
	// CreatePhases are exact quantiles of each start-up phase of a VM
	// (qemu backend), in seconds after its creation.
	CreatePhases []PhaseQuantiles `json:"create_phases,omitempty"`
	// CreationRatePerMinute is how many workers became ready per minute,
	// from the first creation to the last ready.
	CreationRatePerMinute float64 `json:"creation_rate_per_minute,omitempty"`
	// DeleteSeconds is how long deleting the step's objects took, from
	// the request to the last deletion seen (kubevirt backend).
	DeleteSeconds float64        `json:"delete_seconds,omitempty"`
	Evictions     int            `json:"evictions"`  // workers evicted by the agent
	OOMKills      int            `json:"oom_kills"`  // workers OOM-killed by the kernel
	PerWorker     []WorkerResult `json:"per_worker"` // every worker's own figures
}

// Start-up phases of a VM, in order.
const (
	PhaseDefined        = "defined" // libvirt: the domain was defined
	PhaseQEMUStarted    = "qemu_started"
	PhaseQMPReady       = "qmp_ready"
	PhaseBooted         = "booted"
	PhaseCommandStarted = "command_started"
	PhaseReady          = "ready"
)

// PhaseQuantiles summarises one start-up phase over a step's workers.
type PhaseQuantiles struct {
	Phase      string  `json:"phase"`       // defined, qemu_started, qmp_ready, booted, command_started or ready
	P50Seconds float64 `json:"p50_seconds"` // exact quantiles over the step's VMs, seconds after creation
	P95Seconds float64 `json:"p95_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
}

// WorkerResult is one worker's outcome in a step.
type WorkerResult struct {
	Name                 string  `json:"name"`                    // the worker (its cgroup, VM or VMI)
	PagesPerSec          float64 `json:"pages_per_sec"`           // its touches a second over the measured phase
	MajorFaultsPerSec    float64 `json:"major_faults_per_sec"`    // its major faults a second
	CreateToReadySeconds float64 `json:"create_to_ready_seconds"` // from its creation to its workload ready (populated)
	PopulateSeconds      float64 `json:"populate_seconds"`        // its workload's populate time
	StartOffsetSeconds   float64 `json:"start_offset_seconds"`    // its start after the step's first worker's
	// CreateOffsetSeconds is when the worker was created, in seconds after
	// the step's first: the harness creates them one after another.
	CreateOffsetSeconds float64 `json:"create_offset_seconds,omitempty"`
	OOMKilled           bool    `json:"oom_killed,omitempty"` // the kernel OOM-killed it
	Evicted             bool    `json:"evicted,omitempty"`    // the agent evicted it
	Error               string  `json:"error,omitempty"`      // how it failed
	// ClockOffsetSeconds is the worker's clock minus the controller's (a
	// guest's clock is set from its RTC).
	ClockOffsetSeconds float64 `json:"clock_offset_seconds,omitempty"`
	// VM is set for VM workers (qemu backend).
	VM *VMResult `json:"vm,omitempty"`
}

// VMResult is what a step learned about one VM: its start-up and what it
// cost the host.
type VMResult struct {
	// Phases: seconds from creation to each start-up phase.
	Phases map[string]float64 `json:"phases_seconds"`
	// APIPhases (kubevirt backend): seconds from the create request to
	// each phase as the VMI's own status.phaseTransitionTimestamps records
	// it (KubeVirt writes whole seconds), beside Phases from watch events.
	APIPhases map[string]float64 `json:"api_phases_seconds,omitempty"`
	// CreatedAt is when the VMI's create request was sent (kubevirt
	// backend): the zero of Phases and APIPhases, to line them up with the
	// cluster's logs and metrics.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// BootCPUSeconds is QEMU's CPU time from its start to the guest
	// command running.
	BootCPUSeconds float64 `json:"boot_cpu_seconds"`
	// Accelerator is kvm or tcg.
	Accelerator string `json:"accelerator"`
	// Host is the last host-side sample of the measured phase.
	Host *WorkerSample `json:"host,omitempty"`
	// ConsoleTail is the end of the guest console of a VM that failed.
	ConsoleTail string `json:"console_tail,omitempty"`
}

// WorkerSample is one worker seen from the host once a second: its
// cgroup and, for a VM, QEMU's memory and the guest's own view.
type WorkerSample struct {
	Name             string `json:"name"`               // the worker
	CgroupUsageBytes uint64 `json:"cgroup_usage_bytes"` // its cgroup's memory usage
	CgroupSwapBytes  uint64 `json:"cgroup_swap_bytes"`  // its cgroup's swap use
	// CPUSeconds is the CPU time its processes used so far (for a VM,
	// QEMU's: vCPUs, devices, the balloon's work on the host side).
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// QEMURSSBytes is QEMU's resident memory; GuestRAMBytes the resident
	// part of the guest RAM it backs; OverheadBytes its anonymous memory
	// beyond that (heap, translation cache, device buffers).
	QEMURSSBytes  uint64     `json:"qemu_rss_bytes,omitempty"`
	GuestRAMBytes uint64     `json:"guest_ram_bytes,omitempty"`
	OverheadBytes uint64     `json:"overhead_bytes,omitempty"`
	Guest         *GuestView `json:"guest,omitempty"`
}

// GuestView is a guest's own view of its memory, from its balloon driver;
// -1 where the guest does not report a value.
type GuestView struct {
	TotalBytes     int64 `json:"total_bytes"`
	AvailableBytes int64 `json:"available_bytes"`
	FreeBytes      int64 `json:"free_bytes"`
	MajorFaults    int64 `json:"major_faults"`
	SwapInBytes    int64 `json:"swap_in_bytes"`
	SwapOutBytes   int64 `json:"swap_out_bytes"`
	// BalloonActualBytes is the guest's memory minus the balloon.
	BalloonActualBytes uint64 `json:"balloon_actual_bytes"`
}

// Sample is one line of timeline.jsonl: the node once a second.
type Sample struct {
	Time              time.Time `json:"time"`                // when it was read
	Step              int       `json:"step"`                // the step running then
	PswpIn            uint64    `json:"pswpin"`              // /proc/vmstat pswpin (cumulative: use differences)
	PswpOut           uint64    `json:"pswpout"`             // /proc/vmstat pswpout
	PgMajFault        uint64    `json:"pgmajfault"`          // /proc/vmstat pgmajfault
	PSISomeMicros     uint64    `json:"psi_some_micros"`     // memory "some" stall time, cumulative
	PSIFullMicros     uint64    `json:"psi_full_micros"`     // memory "full" stall time, cumulative
	MemAvailableBytes uint64    `json:"mem_available_bytes"` // the host's MemAvailable
	ScopeUsageBytes   uint64    `json:"scope_usage_bytes"`   // the node cgroup's memory usage
	ScopeSwapBytes    uint64    `json:"scope_swap_bytes"`    // the node cgroup's swap use
	// CPUBusySeconds is all the node's CPUs' busy time since boot
	// (host.BusyCPUSeconds): its difference over a second is busy cores.
	CPUBusySeconds float64 `json:"cpu_busy_seconds,omitempty"`
	// Workers are the step's workers at this moment.
	Workers []WorkerSample `json:"workers,omitempty"`
}

// WriteRun writes run.json and steps.csv into dir (atomically, so an
// interrupted run never leaves a torn file).
func WriteRun(dir string, r *Run) error {
	r.Schema = SchemaVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, RunFile), append(b, '\n')); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, StepsCSV), stepsCSV(r))
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func stepsCSV(r *Run) []byte {
	var buf bytesBuffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"step", "workers", "repeat", "failed", "fail_reason", "aggregate_pages_per_sec", "start_skew_seconds",
		"swap_in_pages_per_sec", "swap_out_pages_per_sec", "major_faults_per_sec", "psi_some_percent", "psi_full_percent",
		"create_p50_seconds", "create_p95_seconds", "create_p99_seconds", "evictions", "oom_kills", "cpu_busy_cores"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }
	for _, s := range r.Steps {
		w.Write([]string{strconv.Itoa(s.Index), strconv.Itoa(s.Workers), strconv.Itoa(s.Repeat), strconv.FormatBool(s.Failed), s.FailReason,
			f(s.AggregatePagesPerSec), f(s.StartSkewSeconds), f(s.SwapInPagesPerSec), f(s.SwapOutPagesPerSec), f(s.MajorFaultsPerSec),
			f(s.PSISomePercent), f(s.PSIFullPercent), f(s.CreateP50Seconds), f(s.CreateP95Seconds), f(s.CreateP99Seconds),
			strconv.Itoa(s.Evictions), strconv.Itoa(s.OOMKills), f(s.CPUBusyCores)})
	}
	w.Flush()
	return buf.b
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// ReadRun reads a run directory's run.json.
func ReadRun(dir string) (*Run, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%s is a file: give the run's directory (%s)", dir, filepath.Dir(dir))
	} else if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such directory", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no %s: not the results of a run", dir, RunFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read results %s: %w", dir, err)
	}
	if r.Schema != SchemaVersion {
		return nil, fmt.Errorf("read results %s: schema %q, want %q", dir, r.Schema, SchemaVersion)
	}
	return &r, nil
}

// JSONLines appends JSON lines to a file in a run directory.
type JSONLines struct {
	f *os.File
	w *bufio.Writer
}

// AppendLines opens (creating) a JSON-lines file.
func AppendLines(path string) (*JSONLines, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &JSONLines{f: f, w: bufio.NewWriter(f)}, nil
}

// Write appends v as one line.
func (l *JSONLines) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.w.Write(b)
	return l.w.WriteByte('\n')
}

// Close flushes and closes the file.
func (l *JSONLines) Close() error {
	if err := l.w.Flush(); err != nil {
		l.f.Close()
		return err
	}
	return l.f.Close()
}

// ReadTimeline reads timeline.jsonl (missing file: no samples).
func ReadTimeline(dir string) ([]Sample, error) {
	return readLines[Sample](filepath.Join(dir, TimelineFile), nil)
}

// WorkerInterval is what the report reads of a workers.jsonl line: one
// worker's touches over one interval of a step (the line holds the whole
// memload record).
type WorkerInterval struct {
	Step            int       `json:"step"`             // the step it ran in
	Repeat          int       `json:"repeat"`           // that step's repetition
	Worker          string    `json:"worker"`           // the worker
	Time            time.Time `json:"time"`             // the interval's end
	IntervalSeconds float64   `json:"interval_seconds"` // its length
	PagesPerSec     float64   `json:"pages_per_sec"`    // the worker's touches a second over it
}

// ReadWorkerIntervals reads workers.jsonl (missing file: none). Lines
// that are not intervals (a truncated last line) end the list.
func ReadWorkerIntervals(dir string) ([]WorkerInterval, error) {
	return readLines(filepath.Join(dir, WorkersFile), func(w WorkerInterval) bool { return w.Worker != "" && !w.Time.IsZero() })
}

// ReadDecisions reads the agent's decision lines (missing file: none).
// Lines that are not decisions (a truncated last line of an interrupted
// run) end the list.
func ReadDecisions(dir string) ([]policy.Decision, error) {
	return readLines(filepath.Join(dir, AgentFile), func(d policy.Decision) bool { return d.Action != "" })
}

// readLines reads a JSON-lines file (missing: none). With valid nil a
// line that does not decode is an error; otherwise a line that does not
// decode or is not valid ends the list.
func readLines[T any](path string, valid func(T) bool) ([]T, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // a sample of many workers is a long line
	for sc.Scan() {
		var v T
		err := json.Unmarshal(sc.Bytes(), &v)
		switch {
		case valid == nil && err != nil:
			return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
		case valid != nil && (err != nil || !valid(v)):
			return out, nil
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
