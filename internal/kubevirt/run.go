package kubevirt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/headroom-dev/headroom/internal/density"
	"github.com/headroom-dev/headroom/internal/results"
)

var (
	namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	events     = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// Params are a KubeVirt density run's parameters.
type Params struct {
	// Deployments are the steps' object counts; BurstOnly runs only the
	// largest, once (the seed-002 burst).
	Deployments []int
	BurstOnly   bool
	// Template is the VirtualMachineInstance or VirtualMachine every object
	// is made from.
	Template *unstructured.Unstructured
	// Namespace is created for the run and deleted after it; "" names one.
	Namespace string
	// QPS and Burst shape every request density makes (a token bucket, as
	// client-go's and the seed's tool's).
	QPS   float64
	Burst int
	// Timeout is how long an object may take from its create request to
	// Running; a step fails on the first one that takes longer.
	Timeout       time.Duration
	StopOnFailure bool
	// Workload, when set, runs `headroom load` in every guest (the
	// template's cloud-init user data) and measures it once all of a
	// step's VMIs run.
	Workload *Workload
	Out      string
	Label    string
	// Record is what run.json's params show (the command's flags).
	Record map[string]any
}

// Validate checks the parameters (one message per problem).
func (p Params) Validate() error {
	switch {
	case len(p.Deployments) == 0:
		return fmt.Errorf("no steps")
	case p.Template == nil:
		return fmt.Errorf("no template")
	case p.QPS <= 0:
		return fmt.Errorf("--qps must be above 0")
	case p.Burst < 1:
		return fmt.Errorf("--burst must be at least 1")
	case p.Timeout <= 0:
		return fmt.Errorf("--timeout must be above 0")
	}
	for _, n := range p.Deployments {
		if n < 1 {
			return fmt.Errorf("step of %d objects; want at least 1", n)
		}
	}
	return nil
}

// Steps are the object counts the run creates, in order.
func (p Params) Steps() []int {
	if !p.BurstOnly {
		return p.Deployments
	}
	m := 0
	for _, n := range p.Deployments {
		m = max(m, n)
	}
	return []int{m}
}

// Reporter receives progress; the command prints it.
type Reporter interface {
	Status(step, objects, created, running int, elapsed time.Duration)
	StepDone(s results.Step)
	Note(format string, args ...any)
}

// cleanupTimeout bounds deleting what the run created after it was
// interrupted.
const cleanupTimeout = 3 * time.Minute

type runner struct {
	p       Params
	rep     Reporter
	limiter flowcontrol.RateLimiter
	// limited makes requests through the limiter; direct makes the creates,
	// which wait on the limiter themselves so that an object's latency
	// counts from when its request was sent, not from when it was queued.
	limited, direct dynamic.Interface
	runID           string
	namespace       string
	vmis, vms       *Tracker
	createErrs      sync.Map // object name → create error
	work            *workloadServer
}

// Run creates the namespace, runs the steps and deletes everything it
// created (also when ctx ends: Ctrl-C), waiting for the deletions. Partial
// results are written after every step.
func Run(ctx context.Context, cfg *rest.Config, p Params, rep Reporter) (dir string, run *results.Run, err error) {
	if err := p.Validate(); err != nil {
		return "", nil, err
	}
	dir = p.Out
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405")+"-density")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("results directory: %w", err)
	}
	r := &runner{p: p, rep: rep, runID: newRunID()}
	r.limiter = flowcontrol.NewTokenBucketRateLimiter(float32(p.QPS), p.Burst)
	limitedCfg, directCfg := rest.CopyConfig(cfg), rest.CopyConfig(cfg)
	limitedCfg.RateLimiter = r.limiter
	directCfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	for _, c := range []*rest.Config{limitedCfg, directCfg} {
		c.UserAgent = "headroom-density"
	}
	if r.limited, err = dynamic.NewForConfig(limitedCfg); err != nil {
		return "", nil, err
	}
	if r.direct, err = dynamic.NewForConfig(directCfg); err != nil {
		return "", nil, err
	}
	r.namespace = p.Namespace
	if r.namespace == "" {
		r.namespace = "headroom-density-" + r.runID
	}

	record := map[string]any{"backend": "kubevirt", "namespace": r.namespace, "server": cfg.Host, "object": p.Template.GetKind()}
	for k, v := range p.Record {
		record[k] = v
	}
	run = &results.Run{Kind: "density", Label: p.Label, StartedAt: time.Now().UTC(), Params: record}
	if run.Label == "" {
		run.Label = fmt.Sprintf("kubevirt %s", p.Template.GetKind())
	}
	run.Node.Scope = "namespace/" + r.namespace
	defer func() {
		if err != nil && run.StopReason == "" {
			run.StopReason = "failed: " + err.Error()
		}
		run.FinishedAt = time.Now().UTC()
		if werr := results.WriteRun(dir, run); werr != nil && err == nil {
			err = werr
		}
	}()

	if err := checkKubeVirt(ctx, cfg, r.limiter); err != nil {
		return dir, run, err
	}
	if p.Workload != nil {
		if r.work, err = startWorkload(*p.Workload); err != nil {
			return dir, run, err
		}
		defer r.work.close()
	}
	if err := r.createNamespace(ctx); err != nil {
		return dir, run, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		start := time.Now()
		if derr := r.deleteNamespace(cctx); derr != nil {
			rep.Note("cleanup: %v", derr)
			if err == nil {
				err = derr
			}
		} else {
			rep.Note("namespace %s deleted in %.1f s", r.namespace, time.Since(start).Seconds())
		}
	}()
	if r.vmis, err = NewTracker(ctx, r.limited, VMIResource, r.namespace, r.runID); err != nil {
		return dir, run, fmt.Errorf("watch VirtualMachineInstances: %w", err)
	}
	defer r.vmis.Close()
	if p.Template.GetKind() == KindVM {
		if r.vms, err = NewTracker(ctx, r.limited, VMResource, r.namespace, r.runID); err != nil {
			return dir, run, fmt.Errorf("watch VirtualMachines: %w", err)
		}
		defer r.vms.Close()
	}

	for i, n := range p.Steps() {
		if ctx.Err() != nil {
			break
		}
		s, derr := r.runStep(ctx, i+1, n)
		run.Steps = append(run.Steps, s)
		rep.StepDone(s)
		if werr := results.WriteRun(dir, run); werr != nil {
			return dir, run, werr
		}
		if derr != nil {
			return dir, run, derr
		}
		if s.Failed && p.StopOnFailure {
			run.StopReason = fmt.Sprintf("step %d (%d objects): %s", s.Index, n, s.FailReason)
			break
		}
	}
	switch {
	case ctx.Err() != nil:
		run.Interrupted = true
		run.StopReason = "interrupted: " + context.Cause(ctx).Error()
	case run.StopReason == "":
		run.StopReason = "completed"
	}
	return dir, run, nil
}

// checkKubeVirt fails early, in one line, when the cluster does not serve
// KubeVirt's API (or cannot be reached), before anything is created. It
// reads the group's discovery document itself: client-go's discovery
// client links every built-in API type into the binary. Its request, like
// every other, waits for a token.
func checkKubeVirt(ctx context.Context, cfg *rest.Config, limiter flowcontrol.RateLimiter) error {
	if err := limiter.Wait(ctx); err != nil {
		return err
	}
	c := rest.CopyConfig(cfg)
	c.Timeout = 30 * time.Second
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(c.Host, "/") + "/apis/" + VMIResource.GroupVersion().String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("kubernetes API at %s: %w", cfg.Host, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s does not serve kubevirt.io/v1: is KubeVirt installed?", cfg.Host)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("kubernetes API at %s: GET %s: %s", cfg.Host, url, resp.Status)
	}
	var list metav1.APIResourceList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("kubernetes API at %s: %s: %w", cfg.Host, url, err)
	}
	for _, res := range list.APIResources {
		if res.Name == VMIResource.Resource {
			return nil
		}
	}
	return fmt.Errorf("%s serves kubevirt.io/v1 without virtualmachineinstances", cfg.Host)
}

func newRunID() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// createNamespace creates the run's namespace; one that exists already is
// refused: the run deletes its namespace at the end.
func (r *runner) createNamespace(ctx context.Context) error {
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": r.namespace, "labels": map[string]any{LabelRun: r.runID}}}}
	_, err := r.limited.Resource(namespaces).Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s exists; density creates and deletes its own, name one that does not exist", r.namespace)
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", r.namespace, err)
	}
	return nil
}

// deleteNamespace deletes the run's namespace and waits until it is gone
// (its objects deleted with it).
func (r *runner) deleteNamespace(ctx context.Context) error {
	nsClient := r.limited.Resource(namespaces)
	err := nsClient.Delete(ctx, r.namespace, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", r.namespace, err)
	}
	return waitDeleted(ctx, nsClient, r.namespace)
}

// waitDeleted waits for the object name of a (cluster-scoped or
// namespaced) resource client to be gone, from a watch.
func waitDeleted(ctx context.Context, rc dynamic.ResourceInterface, name string) error {
	for {
		cur, err := rc.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s still there: %w", name, err)
		}
		w, err := rc.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: cur.GetResourceVersion()})
		if err != nil {
			return fmt.Errorf("%s still there: %w", name, err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return fmt.Errorf("%s still there after %s", name, cleanupTimeout)
		}
	}
}

// runStep creates n objects, waits for them to run (or fail, or time
// out), summarises their phases, then deletes them and waits until they
// are gone. The error is for objects that could not be deleted.
func (r *runner) runStep(ctx context.Context, index, n int) (results.Step, error) {
	step := results.Step{Index: index, Workers: n, Repeat: 1, Started: time.Now().UTC()}
	start := time.Now()
	names := make([]string, n)
	for i := range names {
		names[i] = ObjectName(r.runID, index, i+1)
	}
	if r.work != nil && index > 1 {
		// A fresh controller: its workers are one step's.
		_, port, _, _ := r.p.Workload.Ports()
		r.work.ctl.Close()
		if err := r.work.listen(port); err != nil {
			step.Failed, step.FailReason = true, err.Error()
			return step, nil
		}
	}
	var created atomic.Int64
	stopProgress := r.progress(index, names, start)
	r.create(ctx, index, names, &created)
	failed := r.vmis.WaitRunning(ctx, names, r.p.Timeout)
	stopProgress()
	r.summarize(ctx, &step, names, failed)
	if r.work != nil && !step.Failed && ctx.Err() == nil {
		if err := r.measure(ctx, &step, names); err != nil {
			step.Failed, step.FailReason = true, "workload: "+err.Error()
		}
	}

	deleteStart := time.Now()
	derr := r.deleteStep(ctx, index, names)
	step.DeleteSeconds = time.Since(deleteStart).Seconds()
	if ctx.Err() != nil {
		step.Failed, step.FailReason = true, "interrupted: "+context.Cause(ctx).Error()
	}
	step.Seconds = time.Since(start).Seconds()
	return step, derr
}

// create sends the step's create requests, at most the limiter's rate, from
// enough goroutines that the apiserver's latency does not lower it.
func (r *runner) create(ctx context.Context, index int, names []string, created *atomic.Int64) {
	resource := VMIResource
	if r.p.Template.GetKind() == KindVM {
		resource = VMResource
	}
	client := r.direct.Resource(resource).Namespace(r.namespace)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(names), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				obj := Instantiate(r.p.Template, r.namespace, r.runID, index, i+1)
				if err := r.limiter.Wait(ctx); err != nil {
					r.createErrs.Store(names[i], "interrupted")
					continue
				}
				sent := time.Now()
				if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					r.createErrs.Store(names[i], err.Error())
					continue
				}
				r.vmis.Created(names[i], sent)
				if r.vms != nil {
					r.vms.Created(names[i], sent)
				}
				created.Add(1)
			}
		}()
	}
	for i := range names {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// progress reports the step's counts every 500 ms until stopped.
func (r *runner) progress(index int, names []string, start time.Time) (stop func()) {
	return density.Every(500*time.Millisecond, func() {
		c, running, _ := r.vmis.Counts(names)
		r.rep.Status(index, len(names), c, running, time.Since(start))
	})
}

// summarize fills the step from the objects' timelines: per object, the
// seconds from its create request to each phase; per phase, exact
// quantiles; the creation rate; and for objects that did not run, why.
func (r *runner) summarize(ctx context.Context, step *results.Step, names []string, failed []string) {
	timelines := r.vmis.Snapshot(names)
	var running []float64
	perPhase := map[string][]float64{}
	var first, last time.Time
	for _, tl := range timelines {
		w := results.WorkerResult{Name: tl.Name, VM: &results.VMResult{Phases: map[string]float64{}}}
		if !tl.Created.IsZero() {
			w.VM.CreatedAt = tl.Created.UTC()
			if first.IsZero() || tl.Created.Before(first) {
				first = tl.Created
			}
			for phase, at := range tl.Phases {
				secs := at.Sub(tl.Created).Seconds()
				w.VM.Phases[phase] = secs
				perPhase[phase] = append(perPhase[phase], secs)
			}
			if api := tl.APIPhases(); len(api) > 0 {
				w.VM.APIPhases = map[string]float64{}
				for phase, at := range api {
					w.VM.APIPhases[phase] = at.Sub(tl.Created).Seconds()
				}
			}
			if at, ok := tl.Phases[PhaseRunning]; ok {
				w.CreateToReadySeconds = at.Sub(tl.Created).Seconds()
				running = append(running, w.CreateToReadySeconds)
				if at.After(last) {
					last = at
				}
			}
		}
		step.PerWorker = append(step.PerWorker, w)
	}
	step.CreateP50Seconds = results.Quantile(running, 0.50)
	step.CreateP95Seconds = results.Quantile(running, 0.95)
	step.CreateP99Seconds = results.Quantile(running, 0.99)
	for _, phase := range Phases {
		xs := perPhase[phase]
		if len(xs) == 0 {
			continue
		}
		step.CreatePhases = append(step.CreatePhases, results.PhaseQuantiles{Phase: phase, P50Seconds: results.Quantile(xs, 0.5),
			P95Seconds: results.Quantile(xs, 0.95), P99Seconds: results.Quantile(xs, 0.99), MaxSeconds: results.Quantile(xs, 1)})
	}
	if len(running) > 0 && last.After(first) {
		step.CreationRatePerMinute = float64(len(running)) / last.Sub(first).Minutes()
	}
	if len(failed) == 0 {
		return
	}
	var evs []Event
	if list, err := r.limited.Resource(events).Namespace(r.namespace).List(ctx, metav1.ListOptions{}); err == nil {
		evs = EventsFrom(list)
	}
	failedSet := map[string]bool{}
	var reasons []string
	for _, name := range failed {
		failedSet[name] = true
		createErr := ""
		if v, ok := r.createErrs.Load(name); ok {
			createErr = v.(string)
		}
		reason := FailureReason(r.vmis.Last(name), evs, createErr)
		reasons = append(reasons, reason)
		for i := range step.PerWorker {
			if step.PerWorker[i].Name == name {
				step.PerWorker[i].Error = reason
			}
		}
	}
	step.Failed = true
	step.FailReason = SummarizeReasons(reasons, len(names), r.p.Timeout)
}

// deleteStep deletes the step's objects with one request and waits until
// every one (and for VMs, their VMIs) is gone.
func (r *runner) deleteStep(ctx context.Context, index int, names []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.p.Timeout, time.Minute))
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: LabelRun + "=" + r.runID + "," + LabelStep + "=" + strconv.Itoa(index)}
	resources := []schema.GroupVersionResource{VMIResource}
	trackers := []*Tracker{r.vmis}
	if r.vms != nil {
		resources = []schema.GroupVersionResource{VMResource, VMIResource}
		trackers = append(trackers, r.vms)
	}
	for _, res := range resources {
		err := r.limited.Resource(res).Namespace(r.namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete step %d's %s: %w", index, res.Resource, err)
		}
	}
	var errs []error
	for _, t := range trackers {
		if left := t.WaitGone(ctx, names); len(left) > 0 {
			errs = append(errs, fmt.Errorf("%d objects of step %d still there after deletion (e.g. %s)", len(left), index, left[0]))
		}
	}
	return errors.Join(errs...)
}
