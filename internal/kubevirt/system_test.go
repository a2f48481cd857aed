//go:build system

package kubevirt_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/kube/kubetest"
	"github.com/headroom-dev/headroom/internal/kubevirt"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The stage delays kwok applies to every VMI (milliseconds after it saw
// the previous phase): Pending, Scheduling, Scheduled, then Running (and
// Ready), longer for the "slow" indexes.
const (
	pendingMs     = 100
	schedulingMs  = 200
	scheduledMs   = 300
	runningMs     = 400
	runningSlowMs = 1000
)

// launcherRunningMs is the delay after which kwok runs a virt-launcher pod
// (the stand-in virt-controller creates one per VMI, on the VMI's node).
const launcherRunningMs = 250

// What a watch's delivery of a change may take here (from the apiserver's
// answer to the event in density): its median and p99 over a run, and one
// delivery delayed by a scheduling stall on two busy cores. A poll or a
// missed event recovered by a resync takes far longer.
const (
	watchMedianSeconds = 0.010
	watchP99Seconds    = 0.050
	watchStallSeconds  = 0.250
)

// slowIndexes are the objects (by index within a step) that take
// runningSlowMs to run: one in ten, so p50 and p95 differ.
func slowIndex(i int) bool { return i%10 == 0 && i <= 100 }

// Fates a template can give its objects (label headroom.test/fate).
const (
	fateUnschedulable = "unschedulable" // stays Scheduling: the pod does not fit
	fateQEMUTimeout   = "qemu-timeout"  // fails after Scheduled: virt-launcher's QEMU timed out
)

const (
	fateKey     = `.metadata.labels["headroom.test/fate"]`
	indexKey    = `.metadata.labels["headroom.io/index"]`
	nodeName    = "kv-node"
	tooManyPods = "0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	qemuTimeout = "server error. command SyncVMI failed: \"LibvirtError(Code=1, Domain=10, Message='internal error: QEMU monitor: timed out')\""
)

// stage is one kwok Stage for VMIs: from phase (none: just created) after
// delayMs to phase, with more status fields, extra selector expressions
// and an optional event. Like KubeVirt, it appends the transition to
// status.phaseTransitionTimestamps, with kwok's clock at the patch (to the
// nanosecond: the truth the test compares density's watch with).
func stage(name, from string, delayMs int, extra, phase, status, event string) string {
	sel := "    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}\n"
	if from == "" {
		sel += "    - {key: '.status.phase', operator: DoesNotExist}\n"
	} else {
		sel += fmt.Sprintf("    - {key: '.status.phase', operator: In, values: [%s]}\n", from)
	}
	sel += extra
	ev := ""
	if event != "" {
		ev = "    event:\n" + event
	}
	next := "phase: " + phase + "\n" + status + "phaseTransitionTimestamps:\n" +
		"{{ with .status }}{{ range .phaseTransitionTimestamps }}\n- phase: {{ .phase }}\n  phaseTransitionTimestamp: {{ .phaseTransitionTimestamp | Quote }}\n{{ end }}{{ end }}\n" +
		"- phase: " + phase + "\n  phaseTransitionTimestamp: {{ Now | Quote }}\n"
	return kwokStage(name, "{apiGroup: kubevirt.io/v1, kind: VirtualMachineInstance}", sel, delayMs,
		"    statusSubresource: \"\"\n"+ev+"    statusTemplate: |\n"+indent(next, "      "))
}

// kwokStage is one kwok Stage: after delayMs, objects of resourceRef that
// match the selector's expressions get next. The selector's lines and
// next's come indented for their place under spec.
func kwokStage(name, resourceRef, selector string, delayMs int, next string) string {
	return fmt.Sprintf(`---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef: %s
  selector:
    matchExpressions:
%s  delay: {durationMilliseconds: %d}
  next:
%s`, name, resourceRef, selector, delayMs, next)
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}

// vmiStages moves VMIs through KubeVirt's phases with the delays above.
func vmiStages() string {
	var slow, fast []string
	for i := 1; i <= 400; i++ {
		if slowIndex(i) {
			slow = append(slow, strconv.Quote(strconv.Itoa(i)))
		} else {
			fast = append(fast, strconv.Quote(strconv.Itoa(i)))
		}
	}
	notFate := func(f string) string {
		return fmt.Sprintf("    - {key: '%s', operator: NotIn, values: [%s]}\n", fateKey, f)
	}
	isFate := func(f string) string {
		return fmt.Sprintf("    - {key: '%s', operator: In, values: [%s]}\n", fateKey, f)
	}
	index := func(vals []string) string {
		return fmt.Sprintf("    - {key: '%s', operator: In, values: [%s]}\n", indexKey, strings.Join(vals, ","))
	}
	node := "nodeName: " + nodeName + "\n"
	ready := node + "conditions:\n- type: Ready\n  status: \"True\"\n  lastProbeTime: null\n  lastTransitionTime: {{ Now | Quote }}\n"
	unschedulable := "conditions:\n- type: PodScheduled\n  status: \"False\"\n  reason: Unschedulable\n  message: " + strconv.Quote(tooManyPods) +
		"\n  lastProbeTime: null\n  lastTransitionTime: {{ Now | Quote }}\n"
	return stage("vmi-pending", "", pendingMs, "", "Pending", "", "") +
		stage("vmi-scheduling", "Pending", schedulingMs, notFate(fateUnschedulable), "Scheduling", "", "") +
		stage("vmi-unschedulable", "Pending", schedulingMs, isFate(fateUnschedulable), "Scheduling", unschedulable,
			"      type: Warning\n      reason: FailedScheduling\n      message: "+strconv.Quote(tooManyPods)+"\n") +
		stage("vmi-scheduled", "Scheduling", scheduledMs, notFate(fateUnschedulable), "Scheduled", node, "") +
		stage("vmi-running", "Scheduled", runningMs, notFate(fateQEMUTimeout)+index(fast), "Running", ready, "") +
		stage("vmi-running-slow", "Scheduled", runningSlowMs, notFate(fateQEMUTimeout)+index(slow), "Running", ready, "") +
		stage("vmi-qemu-timeout", "Scheduled", runningMs, isFate(fateQEMUTimeout), "Failed", node,
			"      type: Warning\n      reason: SyncFailed\n      message: "+strconv.Quote(qemuTimeout)+"\n")
}

// launcherStages replace kwok's default pod stages: a virt-launcher pod
// runs launcherRunningMs after kwok sees it, and a deleted pod goes at once.
func launcherStages() string {
	const pod = "{apiGroup: v1, kind: Pod}"
	running := `    statusTemplate: |
      phase: Running
      hostIP: 10.0.0.1
      podIP: 10.244.0.2
      startTime: {{ Now | Quote }}
      conditions:
      {{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
      - type: {{ . }}
        status: "True"
        lastProbeTime: null
        lastTransitionTime: {{ Now | Quote }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name }}
        image: {{ .image }}
        imageID: ""
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ Now | Quote }}
      {{ end }}
`
	return kwokStage("launcher-running", pod, `    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.spec.nodeName', operator: Exists}
    - {key: '.status.phase', operator: NotIn, values: [Running]}
`, launcherRunningMs, running) +
		kwokStage("launcher-deleted", pod, "    - {key: '.metadata.deletionTimestamp', operator: Exists}\n", 0,
			"    finalizers: {empty: true}\n    delete: true\n")
}

// env is a control plane with KubeVirt's CRDs, kwok moving VMIs through
// their phases, one kwok node and a service account bound to the
// ClusterRole deploy/kubevirt-density/rbac.yaml documents.
type env struct {
	cp         *kubetest.ControlPlane
	cs         *kubernetes.Clientset
	dyn        dynamic.Interface
	kubeconfig string
	user       string
	bin        string
	virt       *kubetest.VirtController
}

func newEnv(t *testing.T) *env {
	testenv.RequireRoot(t)
	cp := kubetest.StartWith(t, kubetest.Options{CRDFiles: []string{kubetest.KubeVirtCRDs(t)}, KwokStages: vmiStages() + launcherStages()})
	e := &env{cp: cp, cs: cp.Clientset(t), bin: testenv.HeadroomBinary(t)}
	var err error
	if e.dyn, err = dynamic.NewForConfig(cp.RESTConfig(t)); err != nil {
		t.Fatal(err)
	}
	kubetest.AddNode(t, e.cs.CoreV1(), nodeName, 256<<30, 1000)
	e.virt = kubetest.StartVirtController(t, cp)
	ctx := context.Background()
	if out, err := cp.Kubectl(t, "", "apply", "-f", filepath.Join(testenv.ModuleRoot(t), "deploy", "kubevirt-density", "rbac.yaml")); err != nil {
		t.Fatalf("apply rbac: %v\n%s", err, out)
	}
	kubetest.Namespace(t, e.cs.CoreV1(), "bench")
	if _, err := e.cs.CoreV1().ServiceAccounts("bench").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "density"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "density"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "headroom-density"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "density", Namespace: "bench"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts("bench").CreateToken(ctx, "density",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = cp.WriteKubeconfig(t, "density", tr.Status.Token)
	e.user = "system:serviceaccount:bench:density"
	return e
}

// density runs `headroom density --backend kubevirt` with args and returns
// its results, output and peak RSS.
type densityRun struct {
	run    *results.Run
	out    string
	err    error
	maxRSS int64 // bytes
	dir    string
	wall   time.Duration
}

func (e *env) density(t *testing.T, args ...string) densityRun {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(e.bin, append([]string{"density", "--backend", "kubevirt", "--kubeconfig", e.kubeconfig, "--out", dir}, args...)...)
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r := densityRun{out: out.String(), err: err, dir: dir, wall: time.Since(start)}
	if cmd.ProcessState != nil {
		r.maxRSS = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	}
	r.run, _ = results.ReadRun(dir)
	t.Logf("headroom density %s:\n%s", strings.Join(args, " "), r.out)
	return r
}

// template writes a VMI template whose objects get fate.
func template(t *testing.T, fate string) string {
	p := filepath.Join(t.TempDir(), "vmi.yaml")
	doc := fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  labels:
    headroom.test/fate: %s
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  domain:
    memory: {guest: 128Mi}
    devices:
      disks:
      - name: containerdisk
        disk: {bus: virtio}
  volumes:
  - name: containerdisk
    containerDisk: {image: %s}
`, fate, nodeName, kubevirt.DefaultContainerDisk)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// watchLaunchers watches virt-launcher pods from now on; the function it
// returns stops the watch and gives, per pod seen Running, the seconds
// from when it was seen created to when it was seen Running.
func (e *env) watchLaunchers(t *testing.T) func() map[string]float64 {
	t.Helper()
	w, err := e.cs.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
	if err != nil {
		t.Fatal(err)
	}
	created, ran := map[string]time.Time{}, map[string]float64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			key := pod.Namespace + "/" + pod.Name
			if _, seen := created[key]; !seen {
				created[key] = now
			}
			if _, seen := ran[key]; !seen && pod.Status.Phase == corev1.PodRunning {
				ran[key] = now.Sub(created[key]).Seconds()
			}
		}
	}()
	return func() map[string]float64 {
		w.Stop()
		<-done
		return ran
	}
}

// assertNothingLeft checks that no namespace and no VMI of a density run
// remain.
func (e *env) assertNothingLeft(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	nss, err := e.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: kubevirt.LabelRun})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		t.Errorf("namespace %s (%s) left behind", ns.Name, ns.Status.Phase)
	}
	vmis, err := e.dyn.Resource(kubevirt.VMIResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmis.Items {
		t.Errorf("VMI %s/%s left behind", v.GetNamespace(), v.GetName())
	}
	vms, err := e.dyn.Resource(kubevirt.VMResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms.Items {
		t.Errorf("VM %s/%s left behind", v.GetNamespace(), v.GetName())
	}
	pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("virt-launcher pod %s/%s left behind", p.Namespace, p.Name)
	}
}

// expectedSeconds is when kwok's stages put object index in phase,
// counted from its creation.
func expectedSeconds(phase string, index int) float64 {
	ms := map[string]int{kubevirt.PhasePending: pendingMs}
	ms[kubevirt.PhaseScheduling] = ms[kubevirt.PhasePending] + schedulingMs
	ms[kubevirt.PhaseScheduled] = ms[kubevirt.PhaseScheduling] + scheduledMs
	run := runningMs
	if slowIndex(index) {
		run = runningSlowMs
	}
	ms[kubevirt.PhaseRunning] = ms[kubevirt.PhaseScheduled] + run
	ms[kubevirt.PhaseReady] = ms[kubevirt.PhaseRunning]
	return float64(ms[phase]) / 1e3
}

func TestSystemKubevirtDensity(t *testing.T) {
	e := newEnv(t)

	t.Run("ramp 10 to 100 with exact quantiles", func(t *testing.T) {
		launchers := e.watchLaunchers(t)
		// --qps 20 --burst 20: the seed's setting.
		r := e.density(t, "--deployments", "10:100:10", "--qps", "20", "--burst", "20", "--timeout", "30s",
			"--node-selector", "kubernetes.io/hostname="+nodeName, "--vm-memory", "128Mi")
		if r.err != nil || r.run == nil {
			t.Fatalf("density: %v", r.err)
		}
		if len(r.run.Steps) != 10 || r.run.StopReason != "completed" {
			t.Fatalf("%d steps, stop reason %q; want 10, completed", len(r.run.Steps), r.run.StopReason)
		}
		// Per object and phase, density's time (from its watch) against the
		// truth: kwok writes each phase's time into the VMI
		// (status.phaseTransitionTimestamps, kwok's clock just before its
		// patch), and the apiserver's audit log has when that patch arrived
		// and when its response was written (microseconds). So seen −
		// written splits into kwok sending the patch, the apiserver handling
		// it, and the watch delivering it to density: the watch's own
		// latency. A watch delivers in about a millisecond; a poll or a
		// missed event shows as a median or a tail far above that. Single
		// deliveries on two shared cores running etcd, the apiserver, kwok
		// and density stall up to ~50 ms (CI saw 52 ms once), so the
		// bounds are on the distribution and the worst case is a stall, not
		// a resync. kwok plays custom-resource stages one patch at a time,
		// so under load phases come later than the stage delays: the
		// simulator's backlog, reported apart.
		patches := map[string][]kubetest.AuditEvent{}
		for _, ev := range e.cp.Audit(t, "admin") {
			if ev.Verb == "patch" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "virtualmachineinstances" {
				patches[ev.ObjectRef.Name] = append(patches[ev.ObjectRef.Name], ev)
			}
		}
		var seenLag, sendLag, handleLag, deliverLag, kwokLag []float64
		for _, s := range r.run.Steps {
			if s.Failed || len(s.PerWorker) != s.Workers {
				t.Fatalf("step %d: failed %v (%s), %d objects recorded of %d", s.Index, s.Failed, s.FailReason, len(s.PerWorker), s.Workers)
			}
			var receivedRunning, answeredRunning []float64
			var runningDeliver float64
			for _, w := range s.PerWorker {
				index, _ := strconv.Atoi(w.Name[strings.LastIndex(w.Name, "-")+1:])
				ps := patches[w.Name]
				sort.Slice(ps, func(i, j int) bool { return ps[i].RequestReceivedTimestamp.Before(ps[j].RequestReceivedTimestamp) })
				order := []string{kubevirt.PhasePending, kubevirt.PhaseScheduling, kubevirt.PhaseScheduled, kubevirt.PhaseRunning}
				if len(ps) != len(order) {
					t.Errorf("step %d %s: %d patches by kwok in the audit log, want %d", s.Index, w.Name, len(ps), len(order))
					continue
				}
				for k, phase := range order {
					got, ok := w.VM.Phases[phase]
					api, apiOK := w.VM.APIPhases[phase]
					if !ok || !apiOK {
						t.Errorf("step %d %s: %s seen %v, in its status %v", s.Index, w.Name, phase, ok, apiOK)
						continue
					}
					at := func(secs float64) time.Time { return w.VM.CreatedAt.Add(time.Duration(secs * float64(time.Second))) }
					seen, written := at(got), at(api)
					received, done := ps[k].RequestReceivedTimestamp, ps[k].StageTimestamp
					seenLag = append(seenLag, seen.Sub(written).Seconds())
					sendLag = append(sendLag, received.Sub(written).Seconds())
					handleLag = append(handleLag, done.Sub(received).Seconds())
					deliver := seen.Sub(done).Seconds()
					deliverLag = append(deliverLag, deliver)
					kwokLag = append(kwokLag, api-expectedSeconds(phase, index))
					if deliver > watchStallSeconds || seen.Before(written) {
						t.Errorf("step %d %s: %s written %s, patch received %s, answered %s, seen %s: the watch took %.1f ms",
							s.Index, w.Name, phase, written.Format("15:04:05.000000"), received.Format("15:04:05.000000"),
							done.Format("15:04:05.000000"), seen.Format("15:04:05.000000"), deliver*1e3)
					}
					if api < expectedSeconds(phase, index) {
						t.Errorf("step %d %s: %s written at %.4f s, before its stage delays (%.3f s): the clocks disagree", s.Index, w.Name, phase, api, expectedSeconds(phase, index))
					}
				}
				if ready, running := w.VM.Phases[kubevirt.PhaseReady], w.VM.Phases[kubevirt.PhaseRunning]; ready != running {
					t.Errorf("step %d %s: ready at %.4f s, Running at %.4f s; the stage sets both at once", s.Index, w.Name, ready, running)
				}
				// The Running patch arrived, then was answered: the truth is
				// in between (the watch event may leave before the answer).
				receivedRunning = append(receivedRunning, ps[len(ps)-1].RequestReceivedTimestamp.Sub(w.VM.CreatedAt).Seconds())
				answeredRunning = append(answeredRunning, ps[len(ps)-1].StageTimestamp.Sub(w.VM.CreatedAt).Seconds())
				runningDeliver = max(runningDeliver, deliverLag[len(deliverLag)-1])
			}
			// The step's exact quantiles are those of the true times (the
			// Running patches answered), late by at most the step's slowest
			// delivery of a Running phase: each object is, so every quantile is.
			for _, c := range []struct {
				name string
				got  float64
				q    float64
			}{{"p50", s.CreateP50Seconds, 0.5}, {"p95", s.CreateP95Seconds, 0.95}, {"p99", s.CreateP99Seconds, 0.99}} {
				// 1 µs of slack: when the quantile's object is also the
				// step's slowest delivery, got and hi are one time taken
				// two ways (float seconds and a time.Duration truncated to
				// the nanosecond), and CI saw got above hi by that rounding.
				lo, hi := results.Quantile(receivedRunning, c.q), results.Quantile(answeredRunning, c.q)+runningDeliver
				if c.got < lo-1e-6 || c.got > hi+1e-6 {
					t.Errorf("step %d: running %s %.9f s; the audit log puts it in [%.9f, %.9f] s", s.Index, c.name, c.got, lo, hi)
				}
			}
		}
		report := func(what string, xs []float64) {
			t.Logf("%s over %d phase changes: median %.1f ms, p99 %.1f ms, max %.1f ms", what, len(xs),
				1e3*results.Quantile(xs, 0.5), 1e3*results.Quantile(xs, 0.99), 1e3*results.Quantile(xs, 1))
		}
		report("seen − written", seenLag)
		report("  kwok sending its patch", sendLag)
		report("  the apiserver handling it", handleLag)
		report("  the watch delivering it to density", deliverLag)
		report("kwok's backlog (written − stage delays)", kwokLag)
		if median, p99 := results.Quantile(deliverLag, 0.5), results.Quantile(deliverLag, 0.99); median > watchMedianSeconds || p99 > watchP99Seconds {
			t.Errorf("the watch delivered phase changes in median %.1f ms, p99 %.1f ms; a watch takes under %.0f ms, %.0f ms",
				median*1e3, p99*1e3, watchMedianSeconds*1e3, watchP99Seconds*1e3)
		}

		// Every VMI got its virt-launcher pod, with KubeVirt's request.
		var objects int
		for _, s := range r.run.Steps {
			objects += s.Workers
		}
		pods := e.virt.Pods()
		if len(pods) != objects {
			t.Errorf("%d virt-launcher pods for %d VMIs", len(pods), objects)
		}
		want, _ := calc.Compute(calc.Versions["v1.6"], calc.Shape{GuestMemoryBytes: 128 << 20, CPUs: 1, OvercommitPercent: 100})
		for _, p := range pods {
			if got := p.Spec.Containers[0].Resources.Requests.Memory().Value(); got != want.PodMemoryRequestBytes || p.Spec.NodeName != nodeName {
				t.Errorf("pod %s: request %d on %q, want %d on %s", p.Name, got, p.Spec.NodeName, want.PodMemoryRequestBytes, nodeName)
				break
			}
		}
		// kwok's launcher stage ran each pod after its delay: seen Running
		// by this test's watch no sooner than the delay after it was seen
		// created (less the watch's jitter), and every pod ran.
		ran := launchers()
		if len(ran) != objects {
			t.Errorf("%d virt-launcher pods seen Running, want %d", len(ran), objects)
		}
		for name, sec := range ran {
			if sec < launcherRunningMs/1e3-watchP99Seconds {
				t.Errorf("pod %s Running %.3f s after its creation, before its stage delay (%d ms)", name, sec, launcherRunningMs)
			}
		}
		report("virt-launcher pods: created → Running (stage delay 0.25 s)", slices.Collect(maps.Values(ran)))
		// The report draws latency by phase from these results.
		html := filepath.Join(r.dir, "report.html")
		if out, err := exec.Command(e.bin, "report", r.dir, "-o", html).CombinedOutput(); err != nil {
			t.Errorf("headroom report: %v\n%s", err, out)
		} else if _, err := os.Stat(filepath.Join(r.dir, "report-vm-phases.png")); err != nil {
			t.Errorf("no latency-by-phase chart: %v", err)
		}
		if keep := os.Getenv("HEADROOM_KEEP_RESULTS"); keep != "" {
			exec.Command("cp", "-r", r.dir, keep).Run()
		}
		first := r.run.Steps[0]
		t.Logf("10 objects: running p50 %.3f s p95 %.3f s (stage delays: 1.000 s, and 1.600 s for one in ten)", first.CreateP50Seconds, first.CreateP95Seconds)
		last := r.run.Steps[len(r.run.Steps)-1]
		t.Logf("100 objects: p50 %.3f s p95 %.3f s p99 %.3f s, %.0f Running/min, deleted in %.2f s", last.CreateP50Seconds,
			last.CreateP95Seconds, last.CreateP99Seconds, last.CreationRatePerMinute, last.DeleteSeconds)
		e.assertNothingLeft(t)
	})

	t.Run("VirtualMachines", func(t *testing.T) {
		r := e.density(t, "--kubevirt-object", "vm", "--deployments", "5,10", "--qps", "50", "--burst", "10", "--timeout", "30s",
			"--node-selector", "kubernetes.io/hostname="+nodeName)
		if r.err != nil || r.run == nil || len(r.run.Steps) != 2 {
			t.Fatalf("density: %v", r.err)
		}
		for _, s := range r.run.Steps {
			if s.Failed {
				t.Errorf("step %d: %s", s.Index, s.FailReason)
			}
			// A VM's VMI comes from the controller: its phases lag the VM's
			// create by that, never precede the stage delays.
			if s.CreateP50Seconds < expectedSeconds(kubevirt.PhaseRunning, 1) {
				t.Errorf("step %d: Running p50 %.3f s, before the stage delays", s.Index, s.CreateP50Seconds)
			}
		}
		if r.run.Params["object"] != kubevirt.KindVM {
			t.Errorf("run.json object %v", r.run.Params["object"])
		}
		e.assertNothingLeft(t)
	})

	t.Run("the workload in every guest, joined to the controller", func(t *testing.T) {
		// The stand-in guest runs the VMI's cloud-init user data on this
		// machine: it fetches headroom from density and runs headroom load.
		before := e.virt.GuestsRun()
		port := kubetest.FreePortPair(t) // port+1 serves the binary
		r := e.density(t, "--deployments", "2,4", "--controller-address", fmt.Sprintf("127.0.0.1:%d", port), "--vm-memory", "256Mi",
			"--memory-size", "16Mi", "--workload-runtime", "3s", "--memory-scan", "random", "--timeout", "60s",
			"--node-selector", "kubernetes.io/hostname="+nodeName)
		if r.err != nil || r.run == nil || len(r.run.Steps) != 2 {
			t.Fatalf("density: %v", r.err)
		}
		for _, s := range r.run.Steps {
			if s.Failed || s.AggregatePagesPerSec <= 0 {
				t.Errorf("step %d: failed %v (%s), %.0f pages/s", s.Index, s.Failed, s.FailReason, s.AggregatePagesPerSec)
			}
			for _, w := range s.PerWorker {
				if w.PagesPerSec <= 0 || w.Error != "" || w.PopulateSeconds <= 0 {
					t.Errorf("step %d %s: %.0f pages/s, populated in %.2f s, error %q", s.Index, w.Name, w.PagesPerSec, w.PopulateSeconds, w.Error)
				}
			}
		}
		if got := e.virt.GuestsRun() - before; got != 6 {
			t.Errorf("%d guests ran, want 6", got)
		}
		if left := e.virt.GuestsLeft(); left != 0 {
			t.Errorf("%d guests still run after their VMIs were deleted", left)
		}
		e.assertNothingLeft(t)
	})

	t.Run("burst of 400", func(t *testing.T) {
		r := e.density(t, "--deployments", "10:400:10", "--burst-only", "--qps", "400", "--burst", "400", "--timeout", "60s",
			"--node-selector", "kubernetes.io/hostname="+nodeName)
		if r.err != nil || r.run == nil || len(r.run.Steps) != 1 {
			t.Fatalf("density: %v, %+v", r.err, r.run)
		}
		s := r.run.Steps[0]
		if s.Workers != 400 || s.Failed {
			t.Fatalf("burst step: %d objects, failed %v (%s)", s.Workers, s.Failed, s.FailReason)
		}
		// Harness overhead: the command's whole run (namespace, creates,
		// watch, deletes, namespace deletion) beyond the time the VMIs
		// themselves took to run, by their own status timestamps.
		var slowest float64
		for _, w := range s.PerWorker {
			slowest = max(slowest, w.VM.APIPhases[kubevirt.PhaseRunning])
		}
		overhead := r.wall.Seconds() - slowest
		var lag []float64
		for _, w := range s.PerWorker {
			for phase, api := range w.VM.APIPhases {
				lag = append(lag, w.VM.Phases[phase]-api)
			}
		}
		t.Logf("watch latency at 400 (seen − written): median %.1f ms, p99 %.1f ms, max %.1f ms",
			1e3*results.Quantile(lag, 0.5), 1e3*results.Quantile(lag, 0.99), 1e3*results.Quantile(lag, 1))
		t.Logf("400 VMIs: command %.2f s, slowest VMI Running %.2f s after its create (kwok's serial patching), harness overhead %.2f s; running p50 %.3f p99 %.3f max %.3f s; %.0f Running/min; deleted in %.2f s; peak RSS %.1f MiB",
			r.wall.Seconds(), slowest, overhead, s.CreateP50Seconds, s.CreateP99Seconds, maxPhase(s, kubevirt.PhaseRunning), s.CreationRatePerMinute, s.DeleteSeconds, float64(r.maxRSS)/(1<<20))
		if overhead > 120 {
			t.Errorf("harness overhead %.1f s for 400 VMIs; target under 2 minutes", overhead)
		}
		if r.maxRSS > 100<<20 {
			t.Errorf("peak RSS %.1f MiB at 400 objects; target under 100 MiB", float64(r.maxRSS)/(1<<20))
		}
		e.assertNothingLeft(t)
	})

	t.Run("unschedulable VMIs fail the step with the scheduler's reason", func(t *testing.T) {
		r := e.density(t, "--deployments", "3", "--template", template(t, fateUnschedulable), "--timeout", "3s")
		if r.err != nil || r.run == nil || len(r.run.Steps) != 1 {
			t.Fatalf("density: %v", r.err)
		}
		s := r.run.Steps[0]
		for _, want := range []string{"3 of 3 not Running within 3s", "Scheduling", "PodScheduled Unschedulable", "Too many pods", "event FailedScheduling"} {
			if !strings.Contains(s.FailReason, want) {
				t.Errorf("fail reason %q lacks %q", s.FailReason, want)
			}
		}
		if !strings.Contains(r.out, "Too many pods") {
			t.Errorf("output does not show the reason")
		}
		e.assertNothingLeft(t)
	})

	t.Run("a VMI that fails ends the step before the timeout", func(t *testing.T) {
		start := time.Now()
		r := e.density(t, "--deployments", "2,4", "--template", template(t, fateQEMUTimeout), "--timeout", "5m")
		if r.err != nil || r.run == nil {
			t.Fatalf("density: %v", r.err)
		}
		if len(r.run.Steps) != 1 || !r.run.Steps[0].Failed {
			t.Fatalf("want one failed step (stop on failure), got %d steps", len(r.run.Steps))
		}
		for _, want := range []string{"2 of 2", "Failed", "event SyncFailed", "QEMU monitor: timed out"} {
			if !strings.Contains(r.run.Steps[0].FailReason, want) {
				t.Errorf("fail reason %q lacks %q", r.run.Steps[0].FailReason, want)
			}
		}
		if el := time.Since(start); el > time.Minute {
			t.Errorf("took %s: a Failed VMI should end the wait, not the 5m timeout", el)
		}
		e.assertNothingLeft(t)
	})

	t.Run("qps is respected", func(t *testing.T) {
		const qps, burst, n = 20.0, 5, 60
		before := len(e.cp.Audit(t, e.user))
		r := e.density(t, "--deployments", strconv.Itoa(n), "--qps", "20", "--burst", strconv.Itoa(burst), "--timeout", "30s",
			"--node-selector", "kubernetes.io/hostname="+nodeName)
		if r.err != nil || r.run == nil || r.run.Steps[0].Failed {
			t.Fatalf("density: %v", r.err)
		}
		all := e.cp.Audit(t, e.user)[before:]
		var creates []time.Time
		every := slices.Clone(all)
		for _, ev := range all {
			if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "virtualmachineinstances" {
				creates = append(creates, ev.RequestReceivedTimestamp)
			}
		}
		sort.Slice(creates, func(i, j int) bool { return creates[i].Before(creates[j]) })
		sort.SliceStable(every, func(i, j int) bool {
			return every[i].RequestReceivedTimestamp.Before(every[j].RequestReceivedTimestamp)
		})
		if len(creates) != n {
			t.Fatalf("%d VMI creates in the audit log, want %d", len(creates), n)
		}
		// After the burst, creates come at the token rate.
		rate := float64(n-burst) / creates[n-1].Sub(creates[burst-1]).Seconds()
		t.Logf("%d requests in all (%d creates); creates after the burst at %.2f/s (--qps %g --burst %d)", len(all), n, rate, qps, burst)
		if math.Abs(rate-qps)/qps > 0.1 {
			t.Errorf("creates at %.2f/s, want %g ±10%%", rate, qps)
		}
		// No stretch of the run exceeds the bucket: requests in any window
		// of w seconds are at most burst + qps·w (+1 for rounding). The
		// apiserver sees arrivals, not tokens: a request that opened the
		// connection took its token a TLS handshake before it arrived (seen:
		// 9 requests within 0.145 s, the first the run's first), so the
		// window is widened by that much.
		const connectSlackSeconds = 0.1
		for i := range every {
			for j := i; j < len(every); j++ {
				w := every[j].RequestReceivedTimestamp.Sub(every[i].RequestReceivedTimestamp).Seconds()
				if float64(j-i+1) > float64(burst)+qps*(w+connectSlackSeconds)+1 {
					var reqs []string
					for _, ev := range every[i : j+1] {
						reqs = append(reqs, fmt.Sprintf("%+.3fs %s %s", ev.RequestReceivedTimestamp.Sub(every[i].RequestReceivedTimestamp).Seconds(), ev.Verb, ev.RequestURI))
					}
					t.Fatalf("%d requests within %.3f s: above --qps %g --burst %d:\n%s", j-i+1, w, qps, burst, strings.Join(reqs, "\n"))
				}
			}
		}
		e.assertNothingLeft(t)
	})

	t.Run("Ctrl-C deletes what was created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(e.bin, "density", "--backend", "kubevirt", "--kubeconfig", e.kubeconfig, "--out", dir,
			"--deployments", "20", "--template", template(t, fateUnschedulable), "--timeout", "5m")
		var out testenv.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Interrupt once all 20 exist: watch for them.
		w, err := e.dyn.Resource(kubevirt.VMIResource).Watch(context.Background(), metav1.ListOptions{LabelSelector: kubevirt.LabelRun})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		timeout := time.After(60 * time.Second)
		for len(seen) < 20 {
			select {
			case ev := <-w.ResultChan():
				if o, ok := ev.Object.(metav1.Object); ok {
					seen[o.GetName()] = true
				}
			case <-timeout:
				t.Fatalf("only %d VMIs created in 60 s", len(seen))
			}
		}
		w.Stop()
		cmd.Process.Signal(syscall.SIGINT)
		err = cmd.Wait()
		t.Logf("interrupted run:\n%s", out.String())
		if err == nil {
			t.Errorf("an interrupted run exited 0")
		}
		if run, rerr := results.ReadRun(dir); rerr != nil || !run.Interrupted {
			t.Errorf("results of the interrupted run: %v, interrupted %v", rerr, run != nil && run.Interrupted)
		}
		e.assertNothingLeft(t)
	})

	t.Run("bad access fails at once in one line", func(t *testing.T) {
		ctx := context.Background()
		if _, err := e.cs.CoreV1().ServiceAccounts("bench").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := e.cs.CoreV1().ServiceAccounts("bench").CreateToken(ctx, "nobody",
			&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, kubeconfig, want string
		}{
			{"no RBAC", e.cp.WriteKubeconfig(t, "nobody", tr.Status.Token), "forbidden"},
			{"unreachable apiserver", e.cp.WriteKubeconfigAt(t, "unreachable", fmt.Sprintf("https://127.0.0.1:%d", kubetest.FreePort(t)), kubetest.AdminToken), "connection refused"},
		} {
			start := time.Now()
			cmd := exec.Command(e.bin, "density", "--backend", "kubevirt", "--kubeconfig", c.kubeconfig, "--out", filepath.Join(t.TempDir(), "out"), "--deployments", "1")
			out, err := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("%s: want exit 1 and one line with %q, got %v:\n%s", c.name, c.want, err, out)
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("%s: took %s to fail", c.name, el)
			}
		}
		e.assertNothingLeft(t)
	})

	t.Run("an existing namespace is refused", func(t *testing.T) {
		r := e.density(t, "--deployments", "1", "--namespace", "bench")
		if ee, ok := r.err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(r.out, "namespace bench exists") {
			t.Errorf("want a one-line refusal, got %v:\n%s", r.err, r.out)
		}
		if _, err := e.cs.CoreV1().Namespaces().Get(context.Background(), "bench", metav1.GetOptions{}); err != nil {
			t.Errorf("namespace bench: %v (density must not delete what it did not create)", err)
		}
	})
}

func maxPhase(s results.Step, phase string) float64 {
	for _, q := range s.CreatePhases {
		if q.Phase == phase {
			return q.MaxSeconds
		}
	}
	return 0
}
