package scenario

import (
	"fmt"
	"strings"

	"github.com/headroom-dev/headroom/internal/results"
)

// processOverheadBytes is what a `headroom load` process holds resident
// beside its block: the Go runtime's anonymous memory (RssAnon less the
// block, 3.0 MiB measured here; the binary's text is page cache the
// workers share).
const processOverheadBytes = 3 << 20

// headroomGuestOverheadBytes is what a guest booting headroom's image (a
// micro-VM, or a libvirt domain without a template) holds resident beside
// its workload: its kernel and /init (measured here,
// scenarios/this-machine.yaml).
const headroomGuestOverheadBytes = 40 << 20

// Like is a measured density run's parameters as the simulator's, by flag:
// its ramp, workload, node, swap and agent, and its backend's worker kind
// and overheads, so that `headroom sim --like RUN_DIR` models the same
// ramp. The run's --overhead is its request's; what its workers hold
// beyond their memory is the backend's. What the run does not record (the
// device's rates, the touch rate) is left to --machine this, a scenario
// or the flags. What the run does not say and no default stands in for (a
// backend's overheads it does not know, a compressed tier's set-up) is
// returned as Unsaid: the flags the user gives beside --like.
func Like(run *results.Run) (map[string]string, []Unsaid, error) {
	if run.Kind != "density" {
		return nil, nil, fmt.Errorf("a %q run: --like takes a measured one (kind density)", run.Kind)
	}
	p := run.Params
	str := func(key string) string {
		if v, ok := p[key]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	num := func(key string) string {
		if f, ok := p[key].(float64); ok {
			return fmt.Sprintf("%.0f", f)
		}
		return ""
	}
	var counts []string
	if ds, ok := p["deployments"].([]any); ok {
		for _, d := range ds {
			counts = append(counts, fmt.Sprint(d))
		}
	}
	m := map[string]string{
		"deployments": strings.Join(counts, ","), "vm-memory": num("vm_memory_bytes"), "memory-size": num("memory_size_bytes"),
		"memory-scan": str("memory_scan"), "writes": str("writes"), "rate": str("rate_pages_per_sec"), "content": str("content"),
		"overcommit-percent": str("overcommit_percent"),
		"overhead":           num("overhead_bytes"), "request-overhead": num("overhead_bytes"), "seed": str("seed"), "guest-cache": num("guest_cache_bytes"),
		"node-memory": fmt.Sprint(run.Node.MemoryBytes), "swap": fmt.Sprint(run.Node.SwapBytes), "system-reserve": "0",
	}
	if rt := str("workload_runtime_seconds"); rt != "" {
		m["workload-runtime"] = rt + "s"
	}
	if run.Machine.CPUs > 0 {
		m["cpus"] = fmt.Sprint(run.Machine.CPUs)
	}
	var unsaid []Unsaid
	guestUnknown := []string{"guest-overhead", "overhead"}
	switch b := str("backend"); b {
	case "cgroup":
		m["worker-kind"], m["guest-overhead"], m["overhead"] = "process", "0", fmt.Sprint(processOverheadBytes)
		delete(m, "guest-cache")
	case "qemu":
		m["worker-kind"], m["guest-overhead"] = "vm", fmt.Sprint(headroomGuestOverheadBytes)
	case "libvirt":
		m["worker-kind"], m["guest-overhead"] = "vm", fmt.Sprint(headroomGuestOverheadBytes)
		if tmpl := str("libvirt_template"); tmpl != "" {
			unsaid = append(unsaid, Unsaid{Flags: guestUnknown,
				Why: fmt.Sprintf("a libvirt run of the template %s: its guest's resident memory and its QEMU's beyond guest RAM are the template's own", tmpl)})
		}
	case "kubevirt":
		m["worker-kind"] = "vm"
		unsaid = append(unsaid, Unsaid{Flags: guestUnknown,
			Why: "a kubevirt run: its guests are the cluster's images, and what their virt-launcher pods hold beyond guest RAM is the cluster's"})
	default:
		unsaid = append(unsaid, Unsaid{Flags: append([]string{"worker-kind"}, guestUnknown...),
			Why: fmt.Sprintf("backend %q: --like knows the cgroup, qemu and libvirt backends' overheads", b)})
	}
	if p["zram"] != nil || p["zswap"] != nil {
		unsaid = append(unsaid, Unsaid{Flags: []string{"swap-tier"}, Why: "the run had a compressed tier: give it as it was set up"})
	}
	for _, u := range unsaid {
		for _, name := range u.Flags {
			delete(m, name) // the user's to give
		}
	}
	if a, _ := p["agent"].(bool); a {
		// density's agent runs with the swap-rate thresholds off.
		m["agent"], m["max-swap-in-pages-per-sec"], m["max-swap-out-pages-per-sec"] = "true", "0", "0"
		if bp := str("balloon"); bp != "" {
			m["balloon"], m["balloon-policy"] = "true", bp
		}
	}
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m, unsaid, nil
}

// Unsaid is what a run does not say that its simulation needs: the flags
// (by name) the user gives beside --like, and why.
type Unsaid struct {
	Flags []string
	Why   string
}
