package kubevirt

import (
	"context"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// VMI phases as density records them (KubeVirt's phase names, lower case),
// in the order a VMI passes them; ready is the Ready condition turning
// true.
const (
	PhasePending    = "pending"
	PhaseScheduling = "scheduling"
	PhaseScheduled  = "scheduled"
	PhaseRunning    = "running"
	PhaseReady      = "ready"
	PhaseFailed     = "failed"
	PhaseSucceeded  = "succeeded"
)

// Phases are the phases a VMI passes on its way to ready, in order.
var Phases = []string{PhasePending, PhaseScheduling, PhaseScheduled, PhaseRunning, PhaseReady}

// Timeline is one object's life as density saw it.
type Timeline struct {
	Name string
	// Created is when its create request was sent; latencies count from it.
	Created time.Time
	// Phases holds when each phase (and ready) was first seen in a watch
	// event; a phase passed between two events is missing.
	Phases map[string]time.Time
	// Gone is when its deletion was seen.
	Gone time.Time
	// last is the newest version seen, for failure reasons.
	last *unstructured.Unstructured
}

// APIPhases are the phase transitions the VMI's status records
// (status.phaseTransitionTimestamps), in its newest version seen.
func (tl *Timeline) APIPhases() map[string]time.Time {
	out := map[string]time.Time{}
	if tl.last == nil {
		return out
	}
	list, _, _ := unstructured.NestedSlice(tl.last.Object, "status", "phaseTransitionTimestamps")
	for _, it := range list {
		m, _ := it.(map[string]any)
		phase, _ := m["phase"].(string)
		at, _ := m["phaseTransitionTimestamp"].(string)
		t, err := time.Parse(time.RFC3339Nano, at)
		if phase == "" || err != nil {
			continue
		}
		out[strings.ToLower(phase)] = t
	}
	return out
}

// Terminal reports whether the VMI has ended (Failed or Succeeded) and so
// will not reach Running.
func (tl *Timeline) Terminal() bool {
	_, f := tl.Phases[PhaseFailed]
	_, s := tl.Phases[PhaseSucceeded]
	return f || s
}

// Running reports whether the VMI reached Running.
func (tl *Timeline) Running() bool {
	_, ok := tl.Phases[PhaseRunning]
	return ok
}

// Tracker watches the run's VMIs (those a VM makes too) and timestamps
// every phase change as its watch event arrives.
type Tracker struct {
	mu      sync.Mutex
	objects map[string]*Timeline
	changed chan struct{}
	stop    chan struct{}
	done    chan struct{}
	now     func() time.Time
}

// NewTracker starts watching the objects of resource (VMIs, or VMs)
// labelled with runID in namespace. The client's rate limiter applies to
// its list and watch.
func NewTracker(ctx context.Context, client dynamic.Interface, resource schema.GroupVersionResource, namespace, runID string) (*Tracker, error) {
	t := &Tracker{objects: map[string]*Timeline{}, changed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), now: time.Now}
	// A plain informer over the dynamic client: client-go's dynamicinformer
	// links every built-in API type into the binary (it is also the
	// micro-VM guest's /init).
	rc := client.Resource(resource).Namespace(namespace)
	sel := LabelRun + "=" + runID
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return rc.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return rc.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	// Only the newest version of each object is needed; managed fields
	// are most of a VMI's size.
	inf.SetTransform(func(o any) (any, error) {
		if u, ok := o.(*unstructured.Unstructured); ok {
			u.SetManagedFields(nil)
		}
		return o, nil
	})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.observe(o, false) },
		UpdateFunc: func(_, o any) { t.observe(o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			t.observe(o, true)
		},
	})
	// An informer retries a refused list or watch for ever; the first
	// refusal is reported instead (RBAC, a missing CRD).
	listErr := make(chan error, 1)
	inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		select {
		case listErr <- err:
		default:
		}
	})
	go func() { inf.Run(t.stop); close(t.done) }()
	synced := make(chan bool, 1)
	go func() { synced <- cache.WaitForCacheSync(t.stop, inf.HasSynced) }()
	select {
	case ok := <-synced:
		if ok {
			return t, nil
		}
		t.Close()
		return nil, context.Cause(ctx)
	case err := <-listErr:
		t.Close()
		return nil, err
	case <-ctx.Done():
		t.Close()
		return nil, context.Cause(ctx)
	}
}

// Close stops the watch.
func (t *Tracker) Close() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}

// Created records that name was created by a request sent at when.
func (t *Tracker) Created(name string, when time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timeline(name).Created = when
}

func (t *Tracker) timeline(name string) *Timeline {
	tl := t.objects[name]
	if tl == nil {
		tl = &Timeline{Name: name, Phases: map[string]time.Time{}}
		t.objects[name] = tl
	}
	return tl
}

func (t *Tracker) observe(o any, deleted bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	now := t.now()
	t.mu.Lock()
	tl := t.timeline(u.GetName())
	if deleted {
		tl.Gone = now
	} else {
		tl.last = u
		for _, p := range observedPhases(u) {
			if _, seen := tl.Phases[p]; !seen {
				tl.Phases[p] = now
			}
		}
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// observedPhases are the phases an object's status shows: its phase and
// ready when the Ready condition is true.
func observedPhases(u *unstructured.Unstructured) []string {
	var out []string
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "" {
		out = append(out, strings.ToLower(phase))
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			out = append(out, PhaseReady)
		}
	}
	return out
}

// Snapshot copies the timelines of names (missing ones are empty).
func (t *Tracker) Snapshot(names []string) []Timeline {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Timeline, len(names))
	for i, n := range names {
		tl := t.timeline(n)
		out[i] = *tl
		out[i].Phases = make(map[string]time.Time, len(tl.Phases))
		for k, v := range tl.Phases {
			out[i].Phases[k] = v
		}
	}
	return out
}

// Last is the newest version of name seen (nil if none).
func (t *Tracker) Last(name string) *unstructured.Unstructured {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.objects[name]; tl != nil {
		return tl.last
	}
	return nil
}

// Counts reports how many of names have been created, are Running and
// have ended without running.
func (t *Tracker) Counts(names []string) (created, running, ended int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		tl := t.objects[n]
		if tl == nil {
			continue
		}
		if !tl.Created.IsZero() {
			created++
		}
		if tl.Running() {
			running++
		} else if tl.Terminal() {
			ended++
		}
	}
	return
}

// WaitRunning waits until every one of names is Running or has ended, or
// has waited timeout since its creation, or ctx ends. It returns the names
// that did not reach Running.
func (t *Tracker) WaitRunning(ctx context.Context, names []string, timeout time.Duration) []string {
	for {
		var pending, failed []string
		var nextDeadline time.Time
		now := t.now()
		t.mu.Lock()
		for _, n := range names {
			tl := t.timeline(n)
			switch {
			case tl.Running():
			case tl.Terminal():
				failed = append(failed, n)
			case tl.Created.IsZero():
				// Its create request failed.
				failed = append(failed, n)
			case now.Sub(tl.Created) >= timeout:
				failed = append(failed, n)
			default:
				pending = append(pending, n)
				if d := tl.Created.Add(timeout); nextDeadline.IsZero() || d.Before(nextDeadline) {
					nextDeadline = d
				}
			}
		}
		t.mu.Unlock()
		if len(pending) == 0 {
			return failed
		}
		timer := time.NewTimer(nextDeadline.Sub(now))
		select {
		case <-t.changed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return append(failed, pending...)
		}
		timer.Stop()
	}
}

// WaitGone waits until the deletion of every one of names has been seen
// (or ctx ends) and returns those still there.
func (t *Tracker) WaitGone(ctx context.Context, names []string) []string {
	for {
		var left []string
		t.mu.Lock()
		for _, n := range names {
			if tl := t.objects[n]; tl != nil && (tl.last != nil || !tl.Created.IsZero()) && tl.Gone.IsZero() {
				left = append(left, n)
			}
		}
		t.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-t.changed:
		case <-ctx.Done():
			return left
		}
	}
}
