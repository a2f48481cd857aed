package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// Swap modes: who sets a pod's swap limit.
const (
	// SwapAuto respects a limit the kubelet set (LimitedSwap, on cgroup v2)
	// and applies the LimitedSwap formula itself where it finds none.
	SwapAuto = "auto"
	// SwapAgent always applies the formula (the wasp-agent setup: swap on,
	// failSwapOn false, NodeSwap off).
	SwapAgent = "agent"
	// SwapKubelet never writes: the kubelet's limits are the allowances.
	SwapKubelet = "kubelet"
)

// missingCgroupGrace is how long a pod may be listed without its cgroup
// before that is reported: the kubelet creates it after the pod is bound.
const missingCgroupGrace = 5 * time.Second

// SourceConfig says which node and cgroups the source watches.
type SourceConfig struct {
	NodeName string
	Layout   Layout
	// Version and Mount are the memory cgroup hierarchy (cgroup.Find).
	Version    cgroup.Version
	Mount      string
	Protection Protection
	Swap       string
}

// Source is the agent's workload source on a Kubernetes node: the pods
// bound to it, from an informer (one list, then a watch), each with its
// cgroup.
type Source struct {
	cfg      SourceConfig
	log      *slog.Logger
	informer cache.SharedIndexInformer
	changed  chan struct{}
	cgroups  *cgroupWatch // nil without inotify

	mu sync.Mutex
	// found are the pods whose cgroup was found: not looked for again
	// (listing is then free of system calls, however many pods).
	found   map[types.UID]agent.Listed
	missing map[types.UID]time.Time // pods listed without a cgroup, since
	warned  map[types.UID]bool
	gone    map[types.UID]chan struct{} // closed when the pod leaves

	apiUp          prometheus.Gauge
	watchErrors    prometheus.Counter
	podsWatched    prometheus.Gauge
	cgroupsMissing prometheus.Gauge
}

// NewSource builds the informer; Start runs it.
func NewSource(client *Client, cfg SourceConfig, log *slog.Logger) (*Source, error) {
	switch cfg.Swap {
	case "":
		cfg.Swap = SwapAuto
	case SwapAuto, SwapAgent, SwapKubelet:
	default:
		return nil, fmt.Errorf("kubernetes swap mode %q: want auto, agent or kubelet", cfg.Swap)
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes: the node name is required (the DaemonSet passes spec.nodeName)")
	}
	onNode := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = onNode
			return client.ListPods(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = onNode
			return client.WatchPods(ctx, opts)
		},
	}
	s := &Source{
		cfg: cfg, log: log,
		informer: cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{}),
		changed:  make(chan struct{}, 1),
		found:    map[types.UID]agent.Listed{}, missing: map[types.UID]time.Time{}, warned: map[types.UID]bool{}, gone: map[types.UID]chan struct{}{},
		apiUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headroom_kube_api_up",
			Help: "1 while the pod watch is connected to the apiserver, 0 after it failed (the agent keeps the pods it knows)."}),
		watchErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "headroom_kube_watch_errors_total",
			Help: "Failed lists or watches of the node's pods."}),
		podsWatched: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headroom_kube_pods",
			Help: "Pods bound to the node, as the informer sees them."}),
		cgroupsMissing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headroom_kube_pods_without_cgroup",
			Help: "Pods bound to the node whose cgroup was not found for more than 5 s: not protected, never evicted."}),
	}
	// The agent keeps only what it reads: managed fields are most of a
	// pod's bytes.
	if err := s.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	if err := s.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		s.apiUp.Set(0)
		s.watchErrors.Inc()
		s.log.Warn("cannot watch the node's pods; keeping the pods known so far", "node", cfg.NodeName, "err", err)
	}); err != nil {
		return nil, err
	}
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.apiUp.Set(1); s.notify() },
		UpdateFunc: func(old, cur any) {
			s.apiUp.Set(1)
			if o, c := old.(*corev1.Pod), cur.(*corev1.Pod); Terminal(o) != Terminal(c) {
				s.notify()
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.podGone(p.UID)
			}
			s.notify()
		},
	})
	return s, err
}

// Collectors are the source's metrics.
func (s *Source) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.apiUp, s.watchErrors, s.podsWatched, s.cgroupsMissing}
}

// Start runs the informer and the cgroup watch until ctx ends, without
// waiting: the agent samples the node from its first round, and the pods
// join as soon as they are listed (Changed fires). A first list that has
// not come within warnAfter is logged; the informer keeps retrying.
func (s *Source) Start(ctx context.Context, warnAfter time.Duration) {
	go s.informer.Run(ctx.Done())
	s.cgroups = s.startCgroupWatch(ctx)
	go func() {
		synced, cancel := context.WithTimeout(ctx, warnAfter)
		defer cancel()
		if cache.WaitForCacheSync(synced.Done(), s.informer.HasSynced) {
			s.apiUp.Set(1)
			s.log.Info("watching the node's pods", "node", s.cfg.NodeName, "pods", len(s.informer.GetStore().ListKeys()))
			s.notify()
			return
		}
		if ctx.Err() == nil {
			s.log.Warn("the node's pods are not listed yet; protecting the node from what it can see until the apiserver answers",
				"node", s.cfg.NodeName, "waited", warnAfter)
		}
	}()
}

func (s *Source) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Changed fires when a pod was added or removed, or a pod cgroup appeared.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// List returns the node's pods that are not finished and whose cgroup
// exists, named namespace/name.
func (s *Source) List() ([]agent.Listed, error) {
	now := time.Now()
	s.cgroups.addMissing(s.cfg.Mount, s.cfg.Layout)
	pods := s.informer.GetStore().List()
	s.podsWatched.Set(float64(len(pods)))
	var out []agent.Listed
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[types.UID]bool{}
	missing := 0
	for _, obj := range pods {
		p := obj.(*corev1.Pod)
		if Terminal(p) {
			continue
		}
		seen[p.UID] = true
		if l, ok := s.found[p.UID]; ok {
			out = append(out, l)
			continue
		}
		dir := s.cfg.Layout.PodCgroup(QOSClass(p), p.UID)
		g, err := cgroup.OpenAt(s.cfg.Version, s.cfg.Mount, dir)
		if err != nil {
			since, ok := s.missing[p.UID]
			if !ok {
				s.missing[p.UID] = now
				since = now
			}
			if now.Sub(since) >= missingCgroupGrace {
				missing++
				if !s.warned[p.UID] {
					s.warned[p.UID] = true
					s.log.Warn("pod's cgroup not found: it is neither given swap nor evicted", "pod", WorkloadName(p),
						"qos", QOSClass(p), "cgroup", filepath.Join(s.cfg.Mount, dir), "listed_for", now.Sub(since).Round(time.Second))
				}
			}
			continue
		}
		if s.warned[p.UID] {
			s.log.Info("pod's cgroup found", "pod", WorkloadName(p), "cgroup", g.Path())
		}
		delete(s.missing, p.UID)
		delete(s.warned, p.UID)
		l := agent.Listed{Name: WorkloadName(p), Group: g}
		s.found[p.UID] = l
		out = append(out, l)
	}
	for uid := range s.missing {
		if !seen[uid] {
			delete(s.missing, uid)
			delete(s.warned, uid)
		}
	}
	for uid := range s.found {
		if !seen[uid] {
			delete(s.found, uid)
		}
	}
	s.cgroupsMissing.Set(float64(missing))
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Metadata is the pod's, with its swap rule from the swap mode.
func (s *Source) Metadata(name string) (workloadmeta.Metadata, error) {
	p := s.Pod(name)
	if p == nil {
		return workloadmeta.Metadata{Name: name}, fmt.Errorf("pod %s is no longer bound to the node", name)
	}
	md := Metadata(p, s.cfg.Protection)
	if s.cfg.Version == cgroup.V1 && !HasMemoryLimit(p) {
		// v1 limits swap only as memory + swap (memsw): a pod without a
		// memory limit cannot be limited. Its allowance is taken as none
		// (it ranks first once it swaps) and nothing is written.
		md.SwapRule, md.ExternalSwapBytes = policy.SwapExternal, 0
		return md, nil
	}
	if md.SwapRule == policy.SwapNone && s.cfg.Swap != SwapKubelet {
		return md, nil
	}
	if s.cfg.Swap == SwapAgent {
		return md, nil
	}
	n, set := kubeletSwapLimit(s.cfg.Version, filepath.Join(s.cfg.Mount, s.cfg.Layout.PodCgroup(QOSClass(p), p.UID)))
	if set || s.cfg.Swap == SwapKubelet {
		md.SwapRule, md.ExternalSwapBytes = policy.SwapExternal, n
	}
	return md, nil
}

// Pod returns the pod the agent names name (namespace/name), or nil.
func (s *Source) Pod(name string) *corev1.Pod {
	obj, ok, err := s.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}

// Gone returns a channel closed when the pod with this UID leaves the node
// (deleted from the API).
func (s *Source) Gone(name string, uid types.UID) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.gone[uid]
	if !ok {
		ch = make(chan struct{})
		s.gone[uid] = ch
	}
	if p := s.Pod(name); p == nil || p.UID != uid {
		close(ch)
		delete(s.gone, uid)
	}
	return ch
}

func (s *Source) podGone(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.gone[uid]; ok {
		close(ch)
		delete(s.gone, uid)
	}
}

// kubeletSwapLimit sums memory.swap.max over a pod's container cgroups
// (cgroup v2, where the kubelet's LimitedSwap and NoSwap write it); ok is
// false when no container has a finite limit (the kubelet does not manage
// swap, or cgroup v1, where it never does).
func kubeletSwapLimit(v cgroup.Version, podDir string) (total uint64, ok bool) {
	if v != cgroup.V2 {
		return 0, false
	}
	entries, err := os.ReadDir(podDir)
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(podDir, e.Name(), "memory.swap.max"))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			continue
		}
		var n uint64
		if _, err := fmt.Sscan(v, &n); err == nil {
			total += n
			ok = true
		}
	}
	return total, ok
}
