//go:build system

package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/kube/kubetest"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The capabilities the DaemonSet adds (deploy/daemonset.yaml), by number.
const (
	capIPCLock     = 14
	capSysResource = 24
)

// realCluster is a control plane with one node run by a real kubelet
// under containerd and runc, the headroom image imported.
func realCluster(t testing.TB, opts kubetest.RealNodeOptions) (*kubetest.ControlPlane, *kubetest.RealNode) {
	t.Helper()
	cp := kubetest.StartWith(t, kubetest.Options{RealNodes: true})
	img := kubetest.HeadroomImage(testenv.HeadroomBinary(t))
	img.Files["/bin/sleep"] = "/bin/busybox" // for a preStop hook that takes its time
	opts.Images = append(opts.Images, img)
	node := kubetest.StartRealNode(t, cp, "real-node-0", opts)
	t.Logf("node %s Ready %.1f s after containerd started; pods' cgroup %d MiB of the machine's %d MiB",
		node.Name, node.ReadySeconds, node.PodsMemoryBytes>>20, node.CapacityBytes>>20)
	return cp, node
}

// boundingCaps is this process's capability bounding set: a container can
// be given no capability outside it.
func boundingCaps(t testing.TB) uint64 {
	t.Helper()
	return statusCaps(t, os.Getpid(), "CapBnd")
}

// statusCaps reads a capability set of a process from /proc/PID/status.
func statusCaps(t testing.TB, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// deployAgent applies deploy/ as users do (kustomize), with extraConfig
// added to the agent's configuration (deploy/agent.yaml) and three
// changes: the image, which is local here; the eviction journal's host
// directory, the test's own (deploy/'s, /run/headroom/agent, is the one a
// node agent on this host would resume from); and, on a machine whose
// bounding set lacks CAP_SYS_RESOURCE (this one), that capability, which
// no container can be given there (runc: "unable to apply caps: operation
// not permitted"). It returns the capabilities the agent's container must end
// up with, and when deploy/ was applied.
func deployAgent(t testing.TB, cp *kubetest.ControlPlane, extraConfig string) (wantCaps uint64, applied time.Time) {
	t.Helper()
	cp.InstallServiceMonitorCRD(t)
	name, tag, _ := strings.Cut(kubetest.HeadroomImageRef, ":")
	overlay := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../deploy
images:
  - name: ghcr.io/headroom-dev/headroom
    newName: %s
    newTag: %s
patches:
  - target: {kind: DaemonSet, name: headroom-agent}
    patch: |-
      - op: test
        path: /spec/template/spec/volumes/4/name
        value: state
      - op: replace
        path: /spec/template/spec/volumes/4/hostPath/path
        value: %s
`, name, tag, t.TempDir())
	wantCaps = 1<<capIPCLock | 1<<capSysResource
	if boundingCaps(t)&(1<<capSysResource) == 0 {
		t.Logf("this machine's capability bounding set lacks CAP_SYS_RESOURCE: the agent's container runs without it")
		wantCaps = 1 << capIPCLock
		overlay += `  - target: {kind: DaemonSet, name: headroom-agent}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/securityContext/capabilities/add
        value: ["IPC_LOCK"]
`
	}
	// kustomize takes no absolute base: deploy/ is copied beside the overlay.
	dir := t.TempDir()
	src := filepath.Join(testenv.ModuleRoot(t), "deploy")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, dirs := range []string{"deploy", "overlay"} {
		if err := os.Mkdir(filepath.Join(dir, dirs), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == "agent.yaml" {
				b = append(b, extraConfig...)
			}
			if err := os.WriteFile(filepath.Join(dir, "deploy", e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "overlay", "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	applied = time.Now()
	if out, err := cp.Kubectl(t, "", "apply", "-k", filepath.Join(dir, "overlay")); err != nil {
		t.Fatalf("kubectl apply -k (deploy/ with the local image): %v\n%s", err, out)
	}
	return wantCaps, applied
}

// The DaemonSet from deploy/ runs under a real kubelet with what users
// get: scheduled, Ready, its liveness endpoint answering, and exactly the
// capabilities, read-only root and mounts of its securityContext.
func TestSystemRealKubeletRunsTheDaemonSet(t *testing.T) {
	cp, node := realCluster(t, kubetest.RealNodeOptions{})
	if node.ReadySeconds >= 30 {
		t.Errorf("node Ready %.1f s after containerd started (target < 30 s)", node.ReadySeconds)
	}
	core := cp.Clientset(t).CoreV1()
	wantCaps, applied := deployAgent(t, cp, "")
	pod := kubetest.WaitPod(t, core, agentNS, "app.kubernetes.io/name=headroom-agent", 90*time.Second, "Ready", kubetest.PodReady)
	readyAfter := time.Since(applied)
	t.Logf("agent pod %s Ready %.1f s after kubectl apply (target < 10 s)", pod.Name, readyAfter.Seconds())
	if readyAfter >= 10*time.Second {
		t.Errorf("agent pod Ready %.1f s after kubectl apply (target < 10 s)", readyAfter.Seconds())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", lastLines(node.PodLog(t, pod, "agent"), 20))
		}
	})
	if pod.Spec.NodeName != node.Name {
		t.Errorf("agent pod on node %q, want %q", pod.Spec.NodeName, node.Name)
	}

	// The endpoint the kubelet's liveness probe asks, asked from the host
	// at the pod's address (through the pods' network).
	resp, err := http.Get("http://" + pod.Status.PodIP + ":9731/healthz")
	if err != nil {
		t.Fatalf("the agent's /healthz at its pod address: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s %s", resp.Status, body)
	}

	// The agent process as the kubelet and runc made it.
	procs, err := os.ReadFile(filepath.Join(node.ContainerCgroup(t, pod, "agent"), "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(procs))
	if len(fields) == 0 {
		t.Fatal("the agent's container cgroup has no process")
	}
	pid, _ := strconv.Atoi(fields[0])
	if eff := statusCaps(t, pid, "CapEff"); eff != wantCaps {
		t.Errorf("agent's effective capabilities %#x, want %#x (IPC_LOCK, SYS_RESOURCE where the machine allows it)", eff, wantCaps)
	}
	mounts, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	var rootRO bool
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			rootRO = strings.Split(f[5], ",")[0] == "ro"
		}
	}
	if !rootRO {
		t.Errorf("the agent's root filesystem is not read-only")
	}
	for _, want := range []string{"/sys/fs/cgroup", "/run/headroom/agent", "/etc/headroom"} {
		if !strings.Contains(string(mounts), " "+want+" ") {
			t.Errorf("the agent has no mount at %s", want)
		}
	}

	// It reaches the API in-cluster (by the kubernetes service, which
	// kube-proxy routes) and stays up.
	metrics := "http://" + pod.Status.PodIP + ":9731/metrics"
	testenv.Eventually(t, 30*time.Second, func() bool { v, _ := scrape(metrics, "headroom_kube_api_up"); return v == 1 })
	got, err := core.Pods(agentNS).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("agent container restarted %d times: %+v", s.RestartCount, s.LastTerminationState)
		}
	}
}

// scrape reads one series from a Prometheus endpoint.
func scrape(url, series string) (float64, bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return kubetest.MetricValue(b, series)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// podRecords are the agent's decisions in a container log in the CRI
// format (time, stream, tag, line).
func podRecords(log string) []agent.Record {
	var out []agent.Record
	for _, line := range strings.Split(log, "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 4 || f[1] != "stdout" {
			continue
		}
		var r agent.Record
		if json.Unmarshal([]byte(f[3]), &r) == nil && r.Action != "" {
			out = append(out, r)
		}
	}
	return out
}

// loadPod is a Burstable pod on the real node running `headroom load`.
func loadPod(ns, name, class string, requestMi, limitMi int64, grace int64, load ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{PriorityClassName: class, TerminationGracePeriodSeconds: ptr.To(grace), RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "load", Image: kubetest.HeadroomImageRef, Args: append([]string{"load", "--json"}, load...),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(requestMi*mi, resource.BinarySI)},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(limitMi*mi, resource.BinarySI)}}}}},
	}
}

// populated reports whether a load pod has filled its block: its first
// interval record is in its log.
func populated(node *kubetest.RealNode, t testing.TB, p *corev1.Pod) bool {
	return strings.Contains(node.PodLog(t, p, "load"), `"pages_per_sec"`)
}

// followLog opens a container's log as soon as it exists (polled: no
// event announces it) and returns a function that reads it whole: the
// open file outlives the kubelet's removal of the logs of a deleted pod.
func followLog(t testing.TB, node *kubetest.RealNode, p *corev1.Pod, container string) func() string {
	t.Helper()
	path := filepath.Join(node.Dir, "pod-logs", p.Namespace+"_"+p.Name+"_"+string(p.UID), container, "0.log")
	var f *os.File
	for deadline := time.Now().Add(30 * time.Second); f == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		f, _ = os.Open(path)
	}
	if f == nil {
		// A pod that ended and went before its log was opened.
		t.Logf("%s/%s: no log to follow at %s", p.Name, container, path)
		return func() string { return "" }
	}
	t.Cleanup(func() { f.Close() })
	return func() string {
		b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
		return string(b)
	}
}

// followedPod is a pod's latest state, from a watch, and when the watch
// first saw it marked for eviction, with the machine's swap in use then.
type followedPod struct {
	mu            sync.Mutex
	last          *corev1.Pod
	markedAt      time.Time
	swapAtMarkMiB int64
}

func (f *followedPod) get() *corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *followedPod) marked() (time.Time, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.markedAt, f.swapAtMarkMiB
}

// follow watches a pod from its creation until the test ends.
func follow(t testing.TB, core corev1client.CoreV1Interface, p *corev1.Pod) *followedPod {
	t.Helper()
	w, err := core.Pods(p.Namespace).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name, ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	f := &followedPod{last: p}
	go func() {
		for ev := range w.ResultChan() {
			q, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			f.mu.Lock()
			f.last = q
			if f.markedAt.IsZero() && evictionMarked(q) {
				f.markedAt, f.swapAtMarkMiB = time.Now(), swapUsedBytes(t)>>20
			}
			f.mu.Unlock()
		}
	}()
	return f
}

// podsOOMKills is the kernel's OOM kill count in the pods' cgroup.
func podsOOMKills(t testing.TB) int {
	t.Helper()
	g, err := cgroup.OpenAt(cgroup.V1, cgroup.V1Mount, "kubepods")
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.Memory()
	if err != nil {
		t.Fatal(err)
	}
	return int(m.OOMKills)
}

// burstSetup is one configuration of the node for the memory burst.
type burstSetup struct {
	name string
	// evictionHard is the kubelet's (nil: its defaults).
	evictionHard map[string]string
	// agent deploys headroom's DaemonSet.
	agent bool
	// tuneWatermarks applies the node tuning OpenShift ships in place of
	// wasp-agent (virt-platform-autopilot's 90-worker-swap-online): the low
	// watermark at least max(256 MiB, 1% of RAM) above the kubelet's
	// eviction threshold.
	tuneWatermarks bool
	// agentConfig is added to deploy/agent.yaml.
	agentConfig string
	// slowVictim gives the burst pod a preStop hook of 8 s, and
	// restartAgent deletes the agent's pod while that eviction is in
	// progress: the DaemonSet's next agent must not choose a second victim.
	slowVictim, restartAgent bool
	// lowSizeMi is the burst pod's size (0: burstSizeMi).
	lowSizeMi int
	// pdbOn names a pod a PodDisruptionBudget allows no disruption of.
	pdbOn string
}

// The three configurations of the head-to-head.
var (
	kubeletAlone = burstSetup{name: "kubelet-alone"}
	kubeletTuned = burstSetup{name: "kubelet-tuned", tuneWatermarks: true}
	// The kubelet's hard memory eviction off ("0%" drops the threshold):
	// with enforceNodeAllocatable its allocatable signal fires once the
	// pods' RAM is full, however much swap is free.
	kubeletHeadroom = burstSetup{name: "kubelet-headroom", evictionHard: map[string]string{"memory.available": "0%"}, agent: true}
	// The same with the agent's PSI signal on: a second eviction once the
	// survivors stall ("full") for 10% of the window.
	kubeletHeadroomPSI = burstSetup{name: "kubelet-headroom-psi", evictionHard: kubeletHeadroom.evictionHard, agent: true,
		agentConfig: "psiFullPercent: 10\n"}
)

// burstResult is what one burst did.
type burstResult struct {
	oomKills int
	// evictedBy lists the pods each component evicted: "kubelet", "agent".
	evictedBy map[string][]string
	// firstEvictionSeconds is from the burst pod's start to the first pod
	// marked for eviction (negative: before the burst), if evicted.
	firstEvictionSeconds float64
	evicted              bool
	// swapUsedAtFirstEvictionBytes is the machine's swap in use then.
	swapUsedAtFirstEvictionBytes int64
	// fullStallSeconds is the node's memory "full" stall (PSI) from the
	// burst's start to the survivors' end: all tasks stalled at once.
	fullStallSeconds float64
	// phases are the pods' last phases (Succeeded, Failed, gone).
	phases map[string]string
	// agentRecords are the agent's decisions (with agent).
	agentRecords []agent.Record
	// usageWakeups is how many rounds the kernel's usage-threshold event
	// woke in the first agent (-1: not read).
	usageWakeups float64
	// lowExit is the burst pod's container exit code (-1: not seen), and
	// lowLog its log.
	lowExit int32
	lowLog  string
	// ends are the pods whose workload exited non-zero, and how.
	ends []string
	// swapAfterCgroup is, per pod, from the kubelet making its cgroup to
	// the agent's first swap limit written on it (with agent).
	swapAfterCgroup map[string]time.Duration
}

// burstPods: RAM 1.5 GiB + swap 2 GiB = 3.5 GiB, the kernel's OOM point
// for the pods' cgroup; the agent's threshold (deploy/agent.yaml's factor
// 0.9 of the pods' swap allowances) at about 2.85 GiB. Two pods of 1200
// MiB, then the burst: 1200 MiB more, of the lowest priority.
const (
	burstSwapBytes = 2 << 30
	burstSizeMi    = 1200
	burstGrace     = 10
)

// runBurst runs the burst on a fresh real node set up as s.
func runBurst(t testing.TB, s burstSetup) burstResult {
	t.Helper()
	testenv.SwapFile(t, burstSwapBytes)
	if s.tuneWatermarks {
		// The kubelet's default hard threshold: memory.available<100Mi.
		tuneWatermarks(t, 100<<20)
	}
	cp, node := realCluster(t, kubetest.RealNodeOptions{EvictionHard: s.evictionHard})
	core := cp.Clientset(t).CoreV1()
	res := burstResult{evictedBy: map[string][]string{}, phases: map[string]string{}, lowExit: -1}
	var agentPod *corev1.Pod
	if s.agent {
		deployAgent(t, cp, s.agentConfig)
		agentPod = kubetest.WaitPod(t, core, agentNS, "app.kubernetes.io/name=headroom-agent", 90*time.Second, "Ready", kubetest.PodReady)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("agent log:\n%s", lastLines(node.PodLog(t, agentPod, "agent"), 30))
			}
		})
	}
	classes := ""
	for name, v := range map[string]int{"test-low": 100, "test-mid": 200, "test-high": 1000} {
		classes += fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: %s\nvalue: %d\n---\n", name, v)
	}
	if out, err := cp.Kubectl(t, classes, "apply", "-f", "-"); err != nil {
		t.Fatalf("priority classes: %v\n%s", err, out)
	}
	kubetest.Namespace(t, core, "apps")
	if s.pdbOn != "" {
		pdb := fmt.Sprintf("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: %[1]s, namespace: apps}\nspec:\n  maxUnavailable: 0\n  selector: {matchLabels: {app: %[1]s}}\n", s.pdbOn)
		if out, err := cp.Kubectl(t, pdb, "apply", "-f", "-"); err != nil {
			t.Fatalf("PDB: %v\n%s", err, out)
		}
	}
	ooms := podsOOMKills(t)
	cgroupMade := watchCreated(t, "/sys/fs/cgroup/memory/kubepods/burstable")

	load := []string{"--size", fmt.Sprintf("%dMi", burstSizeMi), "--scan", "random", "--duration", "45s"}
	last := map[string]*followedPod{}
	for _, p := range []*corev1.Pod{loadPod("apps", "high", "test-high", 384, 2048, burstGrace, load...),
		loadPod("apps", "mid", "test-mid", 384, 2048, burstGrace, load...)} {
		created, err := core.Pods("apps").Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last[p.Name] = follow(t, core, created)
		running := kubetest.WaitPod(t, core, "apps", "app="+p.Name, 60*time.Second, "Running",
			func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		testenv.Eventually(t, 120*time.Second, func() bool { return populated(node, t, running) })
	}
	lowLoad := slices.Clone(load)
	if s.lowSizeMi > 0 {
		lowLoad[1] = fmt.Sprintf("%dMi", s.lowSizeMi)
	}
	lowSpec := loadPod("apps", "low", "test-low", 384, 2048, burstGrace, lowLoad...)
	if s.slowVictim {
		lowSpec.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/bin/sleep", "8"}}}}
	}
	created, err := core.Pods("apps").Create(context.Background(), lowSpec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last["low"] = follow(t, core, created)
	// Running, or already ended: the kubelet may evict it before it is
	// ever seen running.
	low := kubetest.WaitPod(t, core, "apps", "app=low", 60*time.Second, "started", func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending })
	burstStart := time.Now()
	stallBefore := fullStallMicros(t)
	lowLog := followLog(t, node, low, "load")

	// Until every pod has ended or gone: the first eviction is the first
	// pod marked for deletion (the API's eviction) or for termination by
	// the kubelet (its DisruptionTarget condition; such a pod whose
	// workload exits 0 on SIGTERM ends Succeeded, not Failed).
	var firstAgentLog func() string
	if agentPod != nil {
		firstAgentLog = followLog(t, node, agentPod, "agent")
	}
	restarted := false
	deadline := time.Now().Add(150 * time.Second)
	for time.Now().Before(deadline) {
		done := 0
		for name, f := range last {
			p := f.get()
			if s.restartAgent && !restarted && !p.DeletionTimestamp.IsZero() {
				restarted = true
				if err := core.Pods(agentNS).Delete(context.Background(), agentPod.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Logf("agent pod %s deleted while %s is being evicted", agentPod.Name, name)
			}
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil && gone(core, name) {
				done++
			}
		}
		if done == len(last) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.fullStallSeconds = float64(fullStallMicros(t)-stallBefore) / 1e6
	// The kernel's kills of the pods' workloads, as containerd reported
	// them (v1's oom_control in kubepods counts only kills for its own
	// limit), plus those of kubepods' limit.
	res.oomKills = podsOOMKills(t) - ooms
	// The first eviction: the first pod the watches saw marked, from the
	// burst's start (negative: before it, when the kubelet acted on the two
	// pods that came first).
	var first time.Time
	for _, f := range last {
		if at, swapMiB := f.marked(); !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first, res.swapUsedAtFirstEvictionBytes = at, swapMiB<<20
			res.firstEvictionSeconds, res.evicted = at.Sub(burstStart).Seconds(), true
		}
	}
	for name, f := range last {
		p := f.get()
		res.phases[name] = string(p.Status.Phase)
		if p.DeletionTimestamp != nil && gone(core, name) {
			res.phases[name] = "gone"
		}
		if st := p.Status.ContainerStatuses; len(st) == 1 && st[0].State.Terminated != nil {
			term := st[0].State.Terminated
			if name == "low" {
				res.lowExit = term.ExitCode
			}
			if term.ExitCode != 0 {
				res.ends = append(res.ends, fmt.Sprintf("%s exited %d (%s)", name, term.ExitCode, term.Reason))
			}
			if term.Reason == "OOMKilled" {
				res.oomKills++
			}
		}
	}
	res.lowLog = lowLog()
	evs, err := core.Events("apps").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		switch {
		case e.Reason == "Evicted" && e.Source.Component == "kubelet":
			res.evictedBy["kubelet"] = append(res.evictedBy["kubelet"], e.InvolvedObject.Name)
		case e.Reason == "Evicting" && e.Source.Component == "headroom-agent":
			res.evictedBy["agent"] = append(res.evictedBy["agent"], e.InvolvedObject.Name)
		}
	}
	res.usageWakeups = -1
	if agentPod != nil && !restarted {
		if v, ok := scrape("http://"+agentPod.Status.PodIP+":9731/metrics", "headroom_agent_usage_wakeups_total"); ok {
			res.usageWakeups = v
		}
	}
	if agentPod != nil {
		res.agentRecords = podRecords(firstAgentLog())
		if restarted {
			next := kubetest.WaitPod(t, core, agentNS, "app.kubernetes.io/name=headroom-agent", 90*time.Second, "the next agent Ready",
				func(q *corev1.Pod) bool { return q.Name != agentPod.Name && kubetest.PodReady(q) })
			res.agentRecords = append(res.agentRecords, podRecords(node.PodLog(t, next, "agent"))...)
		}
		res.swapAfterCgroup = map[string]time.Duration{}
		made := cgroupMade()
		for name, f := range last {
			at, ok := made["pod"+string(f.get().UID)]
			for _, r := range res.agentRecords {
				if ok && r.Action == policy.ActionSetSwap && r.Workload == "apps/"+name && r.Error == "" {
					res.swapAfterCgroup[name] = r.Time.Sub(at)
					break
				}
			}
		}
	}
	t.Logf("%s: OOM kills %d, evicted by %v, first eviction %.1f s after the burst started (swap used %d MiB of %d), full stall %.1f s, pods %v, swap limits after the cgroups %v, failed workloads %v",
		s.name, res.oomKills, res.evictedBy, res.firstEvictionSeconds, res.swapUsedAtFirstEvictionBytes>>20, burstSwapBytes>>20, res.fullStallSeconds, res.phases, res.swapAfterCgroup, res.ends)
	return res
}

// watchCreated records when each directory is made in dir (inotify: the
// kernel's event, not a poll of the tree) until the test ends.
func watchCreated(t testing.TB, dir string) func() map[string]time.Time {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	var mu sync.Mutex
	made := map[string]time.Time{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100); n <= 0 {
				continue
			}
			now := time.Now()
			n, err := unix.Read(fd, buf)
			for off := 0; err == nil && off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				mu.Lock()
				made[name] = now
				mu.Unlock()
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done; unix.Close(fd) })
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(made)
	}
}

// evictionMarked reports whether a pod is being evicted: deleted through
// the API, or marked by the kubelet's eviction manager.
func evictionMarked(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Reason == "Evicted" {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// swapUsedBytes is the machine's swap in use.
func swapUsedBytes(t testing.TB) int64 {
	t.Helper()
	m, err := host.ReadMemory()
	if err != nil {
		t.Fatal(err)
	}
	return int64(m.SwapTotalBytes - m.SwapFreeBytes)
}

func gone(core corev1client.CoreV1Interface, name string) bool {
	_, err := core.Pods("apps").Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// fullStallMicros is the node's memory "full" stall so far (PSI, µs).
func fullStallMicros(t testing.TB) int64 {
	t.Helper()
	psi, err := host.ReadMemoryPSI()
	if err != nil {
		t.Fatal(err)
	}
	return int64(psi.FullMicros)
}

// tuneWatermarks sets vm.watermark_scale_factor as the node tuning does
// (restored when the test ends): the low watermark at least the kubelet's
// hard memory threshold plus max(256 MiB, 1% of RAM) above the minimum,
// in ten-thousandths of RAM, clamped to 10-1000.
func tuneWatermarks(t testing.TB, thresholdBytes int64) {
	t.Helper()
	const path = "/proc/sys/vm/watermark_scale_factor"
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := host.ReadMemory()
	if err != nil {
		t.Fatal(err)
	}
	ram := int64(mem.TotalBytes)
	factor := int64(math.Ceil(float64(thresholdBytes+max(256<<20, ram/100)) / float64(ram) * 10000))
	factor = min(max(factor, 10), 1000)
	if err := os.WriteFile(path, []byte(strconv.FormatInt(factor, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(path, before, 0o644) })
	t.Logf("vm.watermark_scale_factor %s -> %d", strings.TrimSpace(string(before)), factor)
}

// A memory burst on a real node with swap: two pods fill the node's RAM
// and part of its swap, then a third, of the lowest priority, pushes it
// past the agent's swap threshold towards the kernel's OOM point. The
// agent evicts that pod through the Eviction API; the real kubelet
// terminates it within its grace period (the workload prints its
// summary); the kernel kills nothing, and the other two finish.
func TestSystemRealKubeletAgentEvictsTheBurst(t *testing.T) {
	res := runBurst(t, kubeletHeadroom)
	var evict, evicted *agent.Record
	for _, r := range res.agentRecords {
		switch {
		case r.Action == policy.ActionEvict && evict == nil:
			evict = &r
		case r.Action == policy.ActionEvicted && evicted == nil:
			evicted = &r
		}
	}
	if evict == nil || evicted == nil {
		t.Fatalf("no eviction by the agent (chosen %v, ended %v)", evict, evicted)
	}
	t.Logf("agent chose %s (%s %.0f > %.0f %s); crossing to Eviction call %.3f s from the kernel's threshold event (<= %.2f s from the round before); ended %s after %.2f s",
		evict.Workload, evict.Trigger.Signal, evict.Trigger.Value, evict.Trigger.Threshold, evict.Trigger.Unit,
		evict.ThresholdEventSeconds, evict.LatencyBoundSeconds, evicted.Outcome.Result, evicted.Outcome.Seconds)
	if evict.Workload != "apps/low" {
		t.Errorf("agent evicted %s, want apps/low (the lowest priority)", evict.Workload)
	}
	// On cgroup v1 the kernel's usage-threshold event on kubepods wakes
	// the agent at the crossing: the evicting round must be that one, or
	// a timed one that sampled the crossing before the event was due (the
	// three pods charging). How long it took (the target, <= 0.5 s) is
	// logged above and kept in docs/validation/kubernetes.md: on two busy
	// cores it moved from 0.095 to 0.378 s between runs, no pass/fail for
	// a system test.
	if res.usageWakeups <= 0 {
		t.Errorf("the kernel's usage-threshold event woke no round of the agent (headroom_agent_usage_wakeups_total %g; -1: not read)", res.usageWakeups)
	}
	overshoot := evict.Trigger.Value - evict.Trigger.Threshold
	if onTime, lag := testenv.ThresholdRoundOnTime(evict.ThresholdEventSeconds, overshoot, 3); !onTime {
		t.Errorf("the eviction's round was not the one the kernel's threshold event woke (threshold_event_seconds %.3f), and sampled %.2f MiB past the threshold (the event is due within %.0f KiB)",
			evict.ThresholdEventSeconds, overshoot/(1<<20), lag/1024)
	}
	if evicted.Outcome.Result != policy.EvictedGracefully || evicted.Outcome.Seconds > burstGrace {
		t.Errorf("eviction ended %s after %.1f s, want graceful within the pod's grace period (%d s)", evicted.Outcome.Result, evicted.Outcome.Seconds, burstGrace)
	}
	// Its end as the kubelet saw it: SIGTERM handled, exit 0 (SIGKILL's is 137).
	if res.lowExit != 0 {
		t.Errorf("the evicted workload's exit code %d, want 0 after SIGTERM", res.lowExit)
	}
	if !strings.Contains(res.lowLog, `"type":"summary"`) {
		t.Errorf("the evicted workload printed no summary (not terminated gracefully):\n%s", lastLines(res.lowLog, 5))
	}
	for _, name := range []string{"high", "mid"} {
		if res.phases[name] != string(corev1.PodSucceeded) {
			t.Errorf("%s ended %s, want Succeeded", name, res.phases[name])
		}
	}
	if res.oomKills != 0 {
		t.Errorf("the kernel OOM-killed %d processes in the pods' cgroup", res.oomKills)
	}
	if len(res.evictedBy["kubelet"]) > 0 {
		t.Errorf("the kubelet evicted %v", res.evictedBy["kubelet"])
	}
	// Swap limits on the pods the real kubelet made, within 1 s of each
	// pod's cgroup (v1: the kubelet limits no swap; the agent's formula).
	for _, name := range []string{"high", "mid", "low"} {
		d, ok := res.swapAfterCgroup[name]
		if !ok || d > time.Second {
			t.Errorf("%s: swap limit %v after its cgroup appeared (set: %v), want within 1 s", name, d, ok)
		}
	}
}

// The agent's pod deleted while its victim takes 8 s to go (a preStop
// hook): the stopping agent forces nothing, the DaemonSet's next agent
// finds the eviction in the journal on the node, and no second pod is
// evicted for the same pressure.
func TestSystemRealKubeletAgentRestartMidEviction(t *testing.T) {
	s := kubeletHeadroom
	// A burst that crosses the agent's threshold but stops 130 MiB short
	// of the OOM point: the victim holds its memory through its 8 s
	// preStop hook, and the agent rightly chooses nobody else meanwhile.
	s.slowVictim, s.restartAgent, s.lowSizeMi = true, true, 1000
	res := runBurst(t, s)
	if got := res.evictedBy["agent"]; len(got) != 1 || got[0] != "low" {
		t.Errorf("agent evictions %v, want exactly low", got)
	}
	for _, r := range res.agentRecords {
		if r.Action == policy.ActionEvicted {
			t.Logf("%s: %s after %.1f s %s", r.Workload, r.Outcome.Result, r.Outcome.Seconds, r.Outcome.Err)
			if r.Outcome.Result == policy.EvictedForcibly {
				t.Errorf("%s was forced: %+v", r.Workload, r.Outcome)
			}
		}
	}
	if res.oomKills != 0 || res.phases["high"] != string(corev1.PodSucceeded) || res.phases["mid"] != string(corev1.PodSucceeded) {
		t.Errorf("OOM kills %d, pods %v", res.oomKills, res.phases)
	}
}

// A PodDisruptionBudget that allows no disruption of the burst pod: the
// agent's eviction of it is refused, the next candidate goes at once, and
// the protected pod runs to its end.
func TestSystemRealKubeletPDBMovesToTheNext(t *testing.T) {
	s := kubeletHeadroom
	s.pdbOn = "low"
	res := runBurst(t, s)
	var refused, next *agent.Record
	for _, r := range res.agentRecords {
		switch {
		case r.Action == policy.ActionEvicted && r.Workload == "apps/low" && refused == nil:
			refused = &r
		case r.Action == policy.ActionEvict && r.Workload != "apps/low" && next == nil:
			next = &r
		}
	}
	if refused == nil || refused.Outcome == nil || refused.Outcome.Result != policy.EvictionRefused || !strings.Contains(refused.Outcome.Err, "PodDisruptionBudget") {
		t.Fatalf("apps/low's eviction %+v, want refused by its PodDisruptionBudget", refused)
	}
	if next == nil {
		t.Fatal("no next candidate chosen after the refusal")
	}
	gap := next.Time.Sub(refused.Time)
	t.Logf("apps/low refused by its budget; %s chosen %.0f ms later", next.Workload, gap.Seconds()*1000)
	if next.Workload != "apps/mid" {
		t.Errorf("next candidate %s, want apps/mid (the next lowest priority)", next.Workload)
	}
	if gap > time.Second {
		t.Errorf("the next candidate went %s after the refusal, want within the next rounds (< 1 s)", gap)
	}
	if res.phases["low"] != string(corev1.PodSucceeded) || res.phases["high"] != string(corev1.PodSucceeded) {
		t.Errorf("pods %v: the budget's pod and the high-priority one must finish", res.phases)
	}
	if res.oomKills != 0 {
		t.Errorf("the kernel OOM-killed %d processes in the pods' cgroup", res.oomKills)
	}
}

// BenchmarkSystemRealKubeletHeadToHead runs the burst once per iteration
// under each configuration and reports what it did (bench/kubelet-head-to-head.sh
// runs it three times and writes the table).
func BenchmarkSystemRealKubeletHeadToHead(b *testing.B) {
	for _, s := range []burstSetup{kubeletAlone, kubeletTuned, kubeletHeadroom, kubeletHeadroomPSI} {
		b.Run(s.name, func(b *testing.B) {
			for range b.N {
				res := runBurst(b, s)
				// Lost: evicted by either, or not run to its end.
				lost := 0.0
				if res.phases["high"] != string(corev1.PodSucceeded) || slices.Contains(res.evictedBy["kubelet"], "high") || slices.Contains(res.evictedBy["agent"], "high") {
					lost = 1
				}
				b.ReportMetric(float64(res.oomKills), "oom_kills")
				b.ReportMetric(float64(len(res.evictedBy["kubelet"])), "kubelet_evictions")
				b.ReportMetric(float64(len(res.evictedBy["agent"])), "agent_evictions")
				if res.evicted {
					b.ReportMetric(res.firstEvictionSeconds, "first_eviction_s")
				}
				b.ReportMetric(res.fullStallSeconds, "full_stall_s")
				b.ReportMetric(float64(res.swapUsedAtFirstEvictionBytes>>20), "swap_used_at_first_eviction_MiB")
				b.ReportMetric(lost, "high_priority_lost")
				b.Logf("evicted: %v; pods: %v", res.evictedBy, res.phases)
			}
		})
	}
}

// The agent's pod, deleted, is replaced by the DaemonSet: a pod created
// meanwhile has no swap limit until the new agent writes one; that window
// is measured (from the pod's cgroup appearing to its limit) and bounded.
func TestSystemRealKubeletAgentReplacedByTheDaemonSet(t *testing.T) {
	testenv.SwapFile(t, burstSwapBytes)
	cp, node := realCluster(t, kubetest.RealNodeOptions{EvictionHard: kubeletHeadroom.evictionHard})
	core := cp.Clientset(t).CoreV1()
	deployAgent(t, cp, "")
	sel := "app.kubernetes.io/name=headroom-agent"
	first := kubetest.WaitPod(t, core, agentNS, sel, 90*time.Second, "Ready", kubetest.PodReady)
	kubetest.Namespace(t, core, "apps")
	cgroupMade := watchCreated(t, "/sys/fs/cgroup/memory/kubepods/burstable")

	deleted := time.Now()
	if err := core.Pods(agentNS).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := core.Pods("apps").Create(context.Background(), loadPod("apps", "newcomer", "", 128, 512, 2, "--size", "64Mi", "--duration", "60s"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second := kubetest.WaitPod(t, core, agentNS, sel, 90*time.Second, "a new agent Ready", func(q *corev1.Pod) bool {
		return q.Name != first.Name && kubetest.PodReady(q)
	})
	t.Logf("new agent pod %s Ready %.1f s after the old one was deleted", second.Name, time.Since(deleted).Seconds())
	var set *agent.Record
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, r := range podRecords(node.PodLog(t, second, "agent")) {
			if r.Action == policy.ActionSetSwap && r.Workload == "apps/newcomer" && r.Error == "" {
				set = &r
				return true
			}
		}
		return false
	})
	made, ok := cgroupMade()["pod"+string(p.UID)]
	if !ok {
		t.Fatal("the newcomer's cgroup was never seen made")
	}
	window := set.Time.Sub(made)
	t.Logf("the newcomer's cgroup was made %.2f s after the agent's deletion; its swap limit came %.2f s later (the window without one)",
		made.Sub(deleted).Seconds(), window.Seconds())
	// The old agent stops at once (nothing in progress); the new one
	// starts with the pod's image present: the window is its start.
	if window > 10*time.Second {
		t.Errorf("the newcomer went %.1f s without a swap limit, want < 10 s", window.Seconds())
	}
	for _, r := range podRecords(node.PodLog(t, second, "agent")) {
		if r.Action == policy.ActionEvict {
			t.Errorf("the new agent evicted %s with no pressure", r.Workload)
		}
	}
}
