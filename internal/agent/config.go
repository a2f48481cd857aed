// Package agent is `headroom agent`: the observe → decide → act loop that
// gives each workload its swap allowance and evicts, gracefully and in
// priority order, before the node thrashes or the kernel OOM-kills. It
// serves its decisions, snapshot and Prometheus metrics over HTTP.
package agent

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/suggest"
)

// Config is the agent's configuration: the policy's thresholds plus how the
// agent observes and acts. JSON names are the YAML keys.
type Config struct {
	policy.Config `json:",inline"`
	// Scope is the cgroup subtree the agent protects: "/" is the host.
	Scope string `json:"scope"`
	// WorkloadsDir holds one <child-cgroup-name>.json metadata file per workload.
	WorkloadsDir string `json:"workloadsDir"`
	// Listen is the HTTP address for /metrics, /v1/* and /healthz ("" disables).
	Listen string `json:"listen"`
	// IntervalSeconds is how often the scope and counters are sampled.
	IntervalSeconds float64 `json:"intervalSeconds"`
	// DiscoverySeconds is how often the scope's child cgroups are listed;
	// a new workload's stats are read and its allowance applied at once.
	DiscoverySeconds float64 `json:"discoverySeconds"`
	// WorkloadStatsSeconds is how often every workload's stats are re-read;
	// they are also re-read whenever an eviction is about to be decided.
	WorkloadStatsSeconds float64 `json:"workloadStatsSeconds"`
	// EvictionGraceSeconds is the time between the graceful request
	// (SIGTERM, a VM's power-down) and the forced one (QMP quit, SIGKILL).
	EvictionGraceSeconds float64 `json:"evictionGraceSeconds"`
	// DryRun logs decisions without acting.
	DryRun bool `json:"dryRun"`
	// OOMScoreAdj is written to the agent's own /proc/self/oom_score_adj.
	OOMScoreAdj int `json:"oomScoreAdj"`
	// Mlock locks the agent's memory (mlockall) so it is never swapped out.
	Mlock bool `json:"mlock"`
	// IgnoreCgroups are child cgroups of the scope that are the host's own
	// infrastructure, not workloads: never ranked, evicted or given a swap
	// allowance (their memory still counts in the scope's). The cgroup the
	// agent runs in is always ignored.
	IgnoreCgroups []string `json:"ignoreCgroups"`
	// PSITriggerStallMillis wakes the agent at once when memory "some"
	// stall exceeds this many ms in a 1 s window (0 disables the trigger).
	PSITriggerStallMillis int `json:"psiTriggerStallMillis"`
	// ShutdownGraceSeconds is how long a stopping agent (SIGTERM, SIGINT)
	// waits for evictions in progress to end on their own; it never
	// forces them, and those still running are left to finish and resumed
	// by the next agent from its journal. A second signal exits at once.
	ShutdownGraceSeconds float64 `json:"shutdownGraceSeconds"`
	// StateDir holds the eviction journal, which a restarted agent reads
	// to resume evictions in progress ("": none kept). It should outlive
	// the agent's process, not the boot: a tmpfs such as /run. One agent
	// holds it at a time (a second one on it exits with status 2).
	StateDir string `json:"stateDir"`
	// ProcRoot and SysRoot are where /proc and /sys are read; CgroupMount
	// is the memory cgroup hierarchy's mount ("": found under SysRoot).
	// Tests point them at fixture trees.
	ProcRoot    string `json:"procRoot"`
	SysRoot     string `json:"sysRoot"`
	CgroupMount string `json:"cgroupMount"`
	// Kubernetes, with a node name, makes the node's pods the workloads.
	Kubernetes KubernetesConfig `json:"kubernetes"`
	// Libvirt, with a URI, makes a libvirt host's running domains the
	// workloads (internal/libvirt).
	Libvirt LibvirtConfig `json:"libvirt"`
}

// LibvirtConfig puts the agent on a libvirt host: the domains libvirtd
// runs are the workloads, each in its QEMU's cgroup, their metadata in the
// domain XML; evictions go through libvirt.
type LibvirtConfig struct {
	// URI turns the mode on: libvirt's connection URI, e.g. qemu:///system.
	URI string `json:"uri"`
}

// KubernetesConfig puts the agent on a Kubernetes node (internal/kube):
// the node's pods, from the API, are the workloads; evictions go through
// the Eviction API; the node is tainted while a signal fires.
type KubernetesConfig struct {
	// NodeName turns the mode on: the node whose pods are watched.
	NodeName string `json:"nodeName"`
	// Kubeconfig is a kubeconfig file ("": the pod's service account).
	Kubeconfig string `json:"kubeconfig"`
	// CgroupRoot is the kubelet's --cgroup-root.
	CgroupRoot string `json:"cgroupRoot"`
	// CgroupDriver is the kubelet's: systemd, cgroupfs, or "" to detect.
	CgroupDriver string `json:"cgroupDriver"`
	// Namespace is the agent's own: its pods are protected.
	Namespace string `json:"namespace"`
	// ProtectedSelector is a label selector of pods never evicted.
	ProtectedSelector string `json:"protectedSelector"`
	// Swap says who sets pods' swap limits: auto (the kubelet's where it
	// set them, the agent's LimitedSwap formula elsewhere), agent, kubelet.
	Swap string `json:"swap"`
}

// DefaultConfig is the agent's configuration without a file, env or flags.
func DefaultConfig() Config {
	return Config{
		Config:                policy.DefaultConfig(),
		Scope:                 "/",
		WorkloadsDir:          "/run/headroom/workloads",
		Listen:                "127.0.0.1:9731",
		IntervalSeconds:       0.25,
		DiscoverySeconds:      1,
		WorkloadStatsSeconds:  10,
		EvictionGraceSeconds:  10,
		OOMScoreAdj:           -1000,
		Mlock:                 true,
		PSITriggerStallMillis: 150,
		ShutdownGraceSeconds:  30,
		StateDir:              "/run/headroom/agent",
		ProcRoot:              "/proc",
		SysRoot:               "/sys",
		// systemd's slices: with scope "/" they hold every system service
		// and login session.
		IgnoreCgroups: []string{"init.scope", "system.slice", "user.slice"},
		Kubernetes:    KubernetesConfig{CgroupRoot: "/", Swap: "auto"},
	}
}

// LoadFile overlays a YAML file onto c; unknown keys are errors.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return fmt.Errorf("%s: %s", path, configFileError(err))
	}
	return nil
}

var (
	unknownKey = regexp.MustCompile(`unknown field "([^"]+)"`)
	wrongType  = regexp.MustCompile(`cannot unmarshal (\w+) into Go struct field (\S+) of type (\S+)`)
)

// configFileError says what is wrong with a configuration file in its own
// terms, its keys and YAML's values, where the decoder speaks of JSON and
// Go types.
func configFileError(err error) string {
	msg := err.Error()
	if m := unknownKey.FindStringSubmatch(msg); m != nil {
		switch near := suggest.Nearest(m[1], configKeys(reflect.TypeOf(Config{}))); near {
		case "":
			return fmt.Sprintf("unknown key %q (headroom agent --print-config lists the keys)", m[1])
		case m[1]:
			return fmt.Sprintf("key %q is not one of its section's (headroom agent --print-config shows where it goes)", m[1])
		default:
			return fmt.Sprintf("unknown key %q (did you mean %s?)", m[1], near)
		}
	}
	if m := wrongType.FindStringSubmatch(msg); m != nil {
		want, got := yamlValue(m[3], goValues), yamlValue(m[1], jsonValues)
		// The field's path names the Go types it passes through (Config,
		// an embedded policy.Config); the keys are the rest.
		key := strings.Join(slices.DeleteFunc(strings.Split(m[2], "."), func(s string) bool { return s == "" || unicode.IsUpper(rune(s[0])) }), ".")
		return fmt.Sprintf("key %s: want %s, got %s", key, want, got)
	}
	for _, decoder := range []string{"error converting YAML to JSON: yaml: ", "error unmarshaling JSON: while decoding JSON: json: "} {
		msg = strings.TrimPrefix(msg, decoder)
	}
	return msg
}

// What a Go field holds and what the decoder found, as YAML's values.
var (
	goValues   = map[string]string{"float64": "a number", "int": "a whole number", "string": "a string", "bool": "true or false", "[]string": "a list of strings"}
	jsonValues = map[string]string{"number": "a number", "string": "a string", "bool": "true or false", "array": "a list", "object": "keys and values"}
)

func yamlValue(kind string, names map[string]string) string {
	if name, ok := names[kind]; ok {
		return name
	}
	if strings.Contains(kind, ".") { // a section: a struct of the package
		return "keys and values"
	}
	return kind
}

// configKeys are the keys of a configuration of type t, at every depth.
func configKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name != "" {
			keys = append(keys, name)
		}
		if f.Type.Kind() == reflect.Struct {
			keys = append(keys, configKeys(f.Type)...)
		}
	}
	return keys
}

// WaspEnv maps wasp-agent's environment variables to config keys.
var WaspEnv = []struct {
	Name string
	Key  string
	set  func(*Config, float64)
}{
	{"SWAP_UTILIZATION_THRESHOLD_FACTOR", "swapUtilizationThresholdFactor", func(c *Config, v float64) { c.SwapUtilizationThresholdFactor = v }},
	{"MAX_AVERAGE_SWAP_IN_PAGES_PER_SECOND", "maxAverageSwapInPagesPerSecond", func(c *Config, v float64) { c.MaxAverageSwapInPagesPerSecond = v }},
	{"MAX_AVERAGE_SWAP_OUT_PAGES_PER_SECOND", "maxAverageSwapOutPagesPerSecond", func(c *Config, v float64) { c.MaxAverageSwapOutPagesPerSecond = v }},
	{"AVERAGE_WINDOW_SIZE_SECONDS", "averageWindowSizeSeconds", func(c *Config, v float64) { c.AverageWindowSizeSeconds = v }},
}

// LoadEnv overlays wasp-agent's environment variables (lookup is os.LookupEnv
// in production).
func (c *Config) LoadEnv(lookup func(string) (string, bool)) error {
	for _, e := range WaspEnv {
		s, ok := lookup(e.Name)
		if !ok || s == "" {
			continue
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("environment %s=%q: not a number", e.Name, s)
		}
		e.set(c, v)
	}
	return nil
}

// Validate checks the whole configuration, naming the bad key.
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Scope == "":
		return fmt.Errorf("scope must be a cgroup path such as / or machine.slice")
	case !(c.IntervalSeconds >= 0.01 && c.IntervalSeconds <= 10):
		return fmt.Errorf("intervalSeconds must be in [0.01,10], got %g", c.IntervalSeconds)
	case !(c.DiscoverySeconds >= c.IntervalSeconds && c.DiscoverySeconds <= 60):
		return fmt.Errorf("discoverySeconds must be in [intervalSeconds,60], got %g", c.DiscoverySeconds)
	case !(c.WorkloadStatsSeconds >= c.IntervalSeconds && c.WorkloadStatsSeconds <= 300):
		return fmt.Errorf("workloadStatsSeconds must be in [intervalSeconds,300], got %g", c.WorkloadStatsSeconds)
	case !(c.EvictionGraceSeconds >= 0 && c.EvictionGraceSeconds <= 3600):
		return fmt.Errorf("evictionGraceSeconds must be in [0,3600], got %g", c.EvictionGraceSeconds)
	case c.EvictionDeadlineSeconds < c.EvictionGraceSeconds+5:
		return fmt.Errorf("evictionDeadlineSeconds (%g) must leave at least 5 s after evictionGraceSeconds (%g) to force a victim out",
			c.EvictionDeadlineSeconds, c.EvictionGraceSeconds)
	case c.OOMScoreAdj < -1000 || c.OOMScoreAdj > 1000:
		return fmt.Errorf("oomScoreAdj must be in [-1000,1000], got %d", c.OOMScoreAdj)
	case c.PSITriggerStallMillis < 0 || c.PSITriggerStallMillis > 1000:
		return fmt.Errorf("psiTriggerStallMillis must be in [0,1000], got %d", c.PSITriggerStallMillis)
	case !(c.ShutdownGraceSeconds >= 0 && c.ShutdownGraceSeconds <= 3600):
		return fmt.Errorf("shutdownGraceSeconds must be in [0,3600], got %g", c.ShutdownGraceSeconds)
	case c.ProcRoot == "" || c.SysRoot == "":
		return fmt.Errorf("procRoot and sysRoot must be directories such as /proc and /sys")
	}
	switch k := c.Kubernetes; {
	case k.CgroupDriver != "" && k.CgroupDriver != "systemd" && k.CgroupDriver != "cgroupfs":
		return fmt.Errorf("kubernetes.cgroupDriver must be systemd, cgroupfs or empty (detect), got %q", k.CgroupDriver)
	case k.Swap != "auto" && k.Swap != "agent" && k.Swap != "kubelet":
		return fmt.Errorf("kubernetes.swap must be auto, agent or kubelet, got %q", k.Swap)
	case k.NodeName == "" && (k.Kubeconfig != "" || k.ProtectedSelector != "" || k.Namespace != ""):
		return fmt.Errorf("kubernetes settings given without kubernetes.nodeName (--kubernetes-node)")
	case c.ResumeParked && c.Libvirt.URI == "":
		return fmt.Errorf("resumeParked (--libvirt-resume) needs libvirt.uri (--libvirt-uri): only libvirt domains are parked")
	case c.Libvirt.URI != "" && k.NodeName != "":
		return fmt.Errorf("libvirt.uri (--libvirt-uri) and kubernetes.nodeName (--kubernetes-node) name two sources of workloads; give one")
	}
	for _, name := range c.IgnoreCgroups {
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("ignoreCgroups: %q is not a child cgroup name", name)
		}
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// MergeConfigFile sets keys in a YAML configuration file, keeping its
// other keys (the file is created if missing).
func MergeConfigFile(path string, values map[string]float64) error {
	doc := map[string]any{}
	if b, err := os.ReadFile(path); err == nil {
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	for k, v := range values {
		doc[k] = v
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
