package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/headroom-dev/headroom/internal/host"
)

// metrics follows node_exporter's habits: raw counters and gauges named
// headroom_<subsystem>_<name>_<unit>; rates are left to PromQL.
type metrics struct {
	agent           *Agent
	registry        *prometheus.Registry
	ticks           prometheus.Counter
	psiWakeups      prometheus.Counter
	usageWakeups    prometheus.Counter
	decisions       *prometheus.CounterVec
	evictions       *prometheus.CounterVec
	readErrors      *prometheus.CounterVec
	evictionLatency prometheus.Histogram
	evictionResults *prometheus.CounterVec
	evictionSeconds prometheus.Histogram
	evictedBytes    prometheus.Counter
	lostLines       prometheus.Counter
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		agent:    a,
		registry: prometheus.NewRegistry(),
		ticks: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_agent_samples_total",
			Help: "Observe-decide-act rounds run."}),
		psiWakeups: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_agent_psi_wakeups_total",
			Help: "Rounds started early by a memory pressure (PSI) trigger."}),
		usageWakeups: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_agent_usage_wakeups_total",
			Help: "Rounds started early by the scope's usage crossing a threshold (cgroup v1)."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headroom_agent_decisions_total",
			Help: "Decisions made, by action (set_swap, evict, none)."}, []string{"action"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headroom_agent_evictions_total",
			Help: "Evictions decided, by the signal that fired."}, []string{"signal"}),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headroom_agent_read_errors_total",
			Help: "Failed reads, by source; the agent does not act on unreadable data."}, []string{"source"}),
		evictionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "headroom_agent_eviction_latency_seconds",
			Help:    "Upper bound of the time from a threshold crossing to the eviction signal.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5}}),
		evictionResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headroom_agent_eviction_results_total",
			Help: "Evictions ended, by result: graceful (left after SIGTERM or power-down), forced (killed), failed (could not be removed), refused (the request was refused), interrupted (the agent stopped first), abandoned (past the eviction deadline)."},
			[]string{"result"}),
		evictionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "headroom_agent_eviction_duration_seconds",
			Help:    "Time from the eviction signal until the victim was gone.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60}}),
		evictedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_agent_evicted_bytes_total",
			Help: "Memory (working set and swap) freed by evictions."}),
		lostLines: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_agent_decision_log_lost_lines_total",
			Help: "Decision log lines that could not be written (a full disk, a closed pipe); the agent decided and acted on them."}),
	}
	m.registry.MustRegister(m.collectors()...)
	// The Go runtime's and the process's own (goroutines, RSS, open
	// files): what shows a leak in the agent itself.
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ticks, m.psiWakeups, m.usageWakeups, m.decisions, m.evictions, m.readErrors, m.evictionLatency,
		m.evictionResults, m.evictionSeconds, m.evictedBytes, m.lostLines, viewCollector{m.agent}}
}

// MetricCollectors are the collectors of every metric the agent itself
// serves (the generated reference lists them).
func MetricCollectors() []prometheus.Collector { return newMetrics(&Agent{}).collectors() }

// RegisterCollectors adds metrics of the parts wired in from outside (the
// Kubernetes source) to the agent's /metrics.
func (a *Agent) RegisterCollectors(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := a.metrics.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

var (
	descScopeRAM     = prometheus.NewDesc("headroom_scope_ram_bytes", "RAM of the agent's scope (its memory limit, or the host's RAM).", nil, nil)
	descScopeSwap    = prometheus.NewDesc("headroom_scope_swap_bytes", "Swap the scope may use.", nil, nil)
	descScopeWS      = prometheus.NewDesc("headroom_scope_working_set_bytes", "Working set of the scope.", nil, nil)
	descScopeSwapUse = prometheus.NewDesc("headroom_scope_swap_used_bytes", "Swap used by the scope.", nil, nil)
	descScopeCompRAM = prometheus.NewDesc("headroom_scope_compressed_ram_bytes", "RAM compressed swap tiers hold for the scope's swapped pages beyond its own usage (counted in swap_utilization).", nil, nil)
	descTierSize     = prometheus.NewDesc("headroom_swap_tier_size_bytes", "Size of a swap tier (zswap: its pool limit).", []string{"kind", "device"}, nil)
	descTierUsed     = prometheus.NewDesc("headroom_swap_tier_used_bytes", "Swap space in use in a tier (zswap: the original size it holds).", []string{"kind", "device"}, nil)
	descTierStored   = prometheus.NewDesc("headroom_swap_tier_stored_bytes", "Original size of the pages a compressed tier holds.", []string{"kind", "device"}, nil)
	descTierRAM      = prometheus.NewDesc("headroom_swap_tier_ram_bytes", "RAM a compressed tier takes for what it holds.", []string{"kind", "device"}, nil)
	descSwapIn       = prometheus.NewDesc("headroom_node_swap_in_pages_total", "Pages swapped in (/proc/vmstat pswpin).", nil, nil)
	descSwapOut      = prometheus.NewDesc("headroom_node_swap_out_pages_total", "Pages swapped out (/proc/vmstat pswpout).", nil, nil)
	descPSI          = prometheus.NewDesc("headroom_memory_pressure_stall_seconds_total", "Memory stall time (PSI) of the scope, by kind (some, full).", []string{"kind"}, nil)
	descSignal       = prometheus.NewDesc("headroom_signal_value", "Current value of an eviction signal, in its unit.", []string{"signal", "unit"}, nil)
	descThreshold    = prometheus.NewDesc("headroom_signal_threshold", "Threshold of an eviction signal, in its unit.", []string{"signal", "unit"}, nil)
	descFiring       = prometheus.NewDesc("headroom_signal_firing", "1 if the signal is past its threshold.", []string{"signal"}, nil)
	descWorkloads    = prometheus.NewDesc("headroom_workloads", "Workloads (child cgroups) in the scope.", nil, nil)
	descWorkloadWS   = prometheus.NewDesc("headroom_workload_working_set_bytes", "Working set of a workload.", []string{"workload"}, nil)
	descWorkloadSwap = prometheus.NewDesc("headroom_workload_swap_bytes", "Swap used by a workload.", []string{"workload"}, nil)
	descAllowance    = prometheus.NewDesc("headroom_workload_swap_allowance_bytes", "Swap allowance applied to a workload.", []string{"workload"}, nil)
	descPriority     = prometheus.NewDesc("headroom_workload_priority", "Priority of a workload (higher is more important).", []string{"workload"}, nil)
	descGuestMemory  = prometheus.NewDesc("headroom_workload_guest_memory_bytes", "A VM's memory as its guest has it: its RAM minus the balloon.", []string{"workload"}, nil)
	descGuestAvail   = prometheus.NewDesc("headroom_workload_guest_available_bytes", "Memory available inside a VM's guest (its MemAvailable).", []string{"workload"}, nil)
	descGuestMajflt  = prometheus.NewDesc("headroom_workload_guest_major_faults_total", "Major page faults inside a VM's guest.", []string{"workload"}, nil)
	descGuestSwapIn  = prometheus.NewDesc("headroom_workload_guest_swap_in_bytes_total", "Bytes a VM's guest swapped in from its own swap.", []string{"workload"}, nil)
	descGuestMax     = prometheus.NewDesc("headroom_workload_guest_max_bytes", "A VM's configured RAM (the balloon's limit).", []string{"workload"}, nil)
	descGuestFree    = prometheus.NewDesc("headroom_workload_guest_free_bytes", "Free memory inside a VM's guest (its MemFree).", []string{"workload"}, nil)
	descBalloonTgt   = prometheus.NewDesc("headroom_balloon_target_bytes", "The balloon target the controller set for a VM (its memory after the balloon).", []string{"workload"}, nil)
	descMemState     = prometheus.NewDesc("headroom_balloon_memory_state", "1 for the scope's current memory state (high, clear, soft, hard, low).", []string{"state"}, nil)
	descMinFree      = prometheus.NewDesc("headroom_balloon_min_free_bytes", "The scope's minFree, the unit of the memory states' bounds.", nil, nil)
	descGuestSwapOut = prometheus.NewDesc("headroom_workload_guest_swap_out_bytes_total", "Bytes a VM's guest swapped out to its own swap.", []string{"workload"}, nil)

	descKSMSharing   = prometheus.NewDesc("headroom_ksm_pages_sharing", "Pages KSM saves: mappings of merged pages beyond the first (pages_sharing).", nil, nil)
	descKSMShared    = prometheus.NewDesc("headroom_ksm_pages_shared", "Merged pages KSM keeps (pages_shared).", nil, nil)
	descKSMProfit    = prometheus.NewDesc("headroom_ksm_profit_bytes", "What merging saves after KSM's own metadata (general_profit).", nil, nil)
	descKSMMergeable = prometheus.NewDesc("headroom_ksm_mergeable_bytes", "Memory the scope's processes offer for merging (MADV_MERGEABLE).", nil, nil)
	descKSMScanned   = prometheus.NewDesc("headroom_ksm_pages_scanned_total", "Pages ksmd scanned.", nil, nil)
	descKSMScans     = prometheus.NewDesc("headroom_ksm_full_scans_total", "Full scans ksmd completed.", nil, nil)
	descKSMCPU       = prometheus.NewDesc("headroom_ksm_ksmd_cpu_seconds_total", "CPU time ksmd used.", nil, nil)
	descKSMCow       = prometheus.NewDesc("headroom_ksm_cow_breaks_total", "Writes that broke a merged page (cow_ksm).", nil, nil)
	descKSMBatch     = prometheus.NewDesc("headroom_ksm_pages_to_scan", "Pages ksmd scans per batch (pages_to_scan).", nil, nil)
	descKSMSleep     = prometheus.NewDesc("headroom_ksm_sleep_seconds", "ksmd's pause between batches (sleep_millisecs).", nil, nil)
	descKSMRunning   = prometheus.NewDesc("headroom_ksm_running", "1 if ksmd scans (run=1).", nil, nil)
	descKSMPhase     = prometheus.NewDesc("headroom_ksm_phase", "1 for the KSM governor's current phase (standby, burst, steady, advisor).", []string{"phase"}, nil)
)

// viewCollector exports the agent's latest view.
type viewCollector struct{ a *Agent }

func (c viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descScopeRAM, descScopeSwap, descScopeWS, descScopeSwapUse, descScopeCompRAM,
		descTierSize, descTierUsed, descTierStored, descTierRAM, descSwapIn, descSwapOut,
		descPSI, descSignal, descThreshold, descFiring, descWorkloads, descWorkloadWS, descWorkloadSwap, descAllowance, descPriority,
		descGuestMemory, descGuestAvail, descGuestMajflt, descGuestSwapIn, descGuestSwapOut,
		descGuestMax, descGuestFree, descBalloonTgt, descMemState, descMinFree,
		descKSMSharing, descKSMShared, descKSMProfit, descKSMMergeable, descKSMScanned, descKSMScans, descKSMCPU, descKSMCow,
		descKSMBatch, descKSMSleep, descKSMRunning, descKSMPhase} {
		ch <- d
	}
}

func (c viewCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.a.Snapshot()
	if v.Time.IsZero() {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, labels...)
	}
	counter := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x, labels...)
	}
	s := v.Sample
	if s.ScopeErr == "" {
		gauge(descScopeRAM, float64(s.Scope.RAMBytes))
		gauge(descScopeSwap, float64(s.Scope.SwapBytes))
		gauge(descScopeWS, float64(s.Scope.WorkingSetBytes))
		gauge(descScopeSwapUse, float64(s.Scope.SwapUsedBytes))
		gauge(descScopeCompRAM, float64(s.Scope.CompressedRAMBytes))
	}
	for _, t := range v.SwapTiers {
		gauge(descTierSize, float64(t.SizeBytes), t.Kind, t.Device)
		gauge(descTierUsed, float64(t.UsedBytes), t.Kind, t.Device)
		if t.Kind != host.TierDisk {
			gauge(descTierStored, float64(t.StoredBytes), t.Kind, t.Device)
			gauge(descTierRAM, float64(t.RAMBytes), t.Kind, t.Device)
		}
	}
	if s.VMStatErr == "" {
		counter(descSwapIn, float64(s.PswpIn))
		counter(descSwapOut, float64(s.PswpOut))
	}
	if s.PSIErr == "" {
		counter(descPSI, float64(s.PSISomeMicros)/1e6, "some")
		counter(descPSI, float64(s.PSIFullMicros)/1e6, "full")
	}
	for _, sig := range v.Signals {
		gauge(descSignal, sig.Value, sig.Name, sig.Unit)
		gauge(descThreshold, sig.Threshold, sig.Name, sig.Unit)
		firing := 0.0
		if sig.Firing {
			firing = 1
		}
		gauge(descFiring, firing, sig.Name)
	}
	if k := s.KSM; k != nil {
		gauge(descKSMSharing, float64(k.PagesSharing))
		gauge(descKSMShared, float64(k.PagesShared))
		gauge(descKSMProfit, float64(k.GeneralProfitBytes))
		gauge(descKSMMergeable, float64(k.MergeableBytes))
		counter(descKSMScanned, float64(k.PagesScanned))
		counter(descKSMScans, float64(k.FullScans))
		counter(descKSMCPU, k.KsmdCPUSeconds)
		counter(descKSMCow, float64(k.CowKSM))
		gauge(descKSMBatch, float64(k.PagesToScan))
		gauge(descKSMSleep, float64(k.SleepMillisecs)/1000)
		running := 0.0
		if k.Run == 1 {
			running = 1
		}
		gauge(descKSMRunning, running)
	}
	if v.KSM != nil && v.KSM.Phase != "" {
		gauge(descKSMPhase, 1, v.KSM.Phase)
	}
	if b := v.Balloon; b != nil && b.HostState != "" {
		gauge(descMemState, 1, b.HostState)
		gauge(descMinFree, float64(b.MinFreeBytes))
		for name, t := range b.Targets {
			gauge(descBalloonTgt, float64(t), name)
		}
	}
	gauge(descWorkloads, float64(len(v.Workloads)))
	for _, w := range v.Workloads {
		if w.Err == "" {
			gauge(descWorkloadWS, float64(w.WorkingSetBytes), w.Name)
			gauge(descWorkloadSwap, float64(w.SwapBytes), w.Name)
		}
		gauge(descAllowance, float64(w.SwapAllowanceBytes), w.Name)
		gauge(descPriority, float64(w.Priority), w.Name)
		if g := w.Guest; g != nil {
			gauge(descGuestMemory, float64(g.MemoryBytes), w.Name)
			if g.MaxBytes > 0 {
				gauge(descGuestMax, float64(g.MaxBytes), w.Name)
			}
			if g.FreeBytes >= 0 {
				gauge(descGuestFree, float64(g.FreeBytes), w.Name)
			}
			if g.AvailableBytes >= 0 {
				gauge(descGuestAvail, float64(g.AvailableBytes), w.Name)
			}
			if g.MajorFaults >= 0 {
				counter(descGuestMajflt, float64(g.MajorFaults), w.Name)
			}
			if g.SwapInBytes >= 0 {
				counter(descGuestSwapIn, float64(g.SwapInBytes), w.Name)
			}
			if g.SwapOutBytes >= 0 {
				counter(descGuestSwapOut, float64(g.SwapOutBytes), w.Name)
			}
		}
	}
}
