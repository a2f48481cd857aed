//go:build system

package kube_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	admissionv1 "k8s.io/api/admission/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/kube"
	"github.com/headroom-dev/headroom/internal/kube/kubetest"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

const (
	nodeName = "kwok-node-0"
	agentNS  = "headroom-system"
	mi       = 1 << 20
)

// cluster is a control plane with one kwok node whose pods' memory is
// real: a v1 memory cgroup tree in the kubelet's cgroupfs layout under a
// test root, the node's RAM being the kubepods cgroup's limit.
type cluster struct {
	cp       *kubetest.ControlPlane
	core     corev1client.CoreV1Interface
	root     *testenv.MemoryCgroup // the kubelet's --cgroup-root
	kubepods *testenv.MemoryCgroup
	layout   kube.Layout
	kubelet  *kubetest.Kubelet
}

func newCluster(t testing.TB, ramBytes, swapBytes int64) *cluster {
	t.Helper()
	return newClusterWithDriver(t, ramBytes, swapBytes, kube.DriverCgroupfs)
}

// newClusterWithDriver lays the pods' cgroups out as the kubelet's cgroup
// driver (systemd or cgroupfs) does.
func newClusterWithDriver(t testing.TB, ramBytes, swapBytes int64, driver string) *cluster {
	t.Helper()
	testenv.RequireRoot(t)
	if swapBytes > 0 {
		testenv.SwapFile(t, swapBytes)
	}
	c := &cluster{cp: kubetest.Start(t)}
	c.core = c.cp.Clientset(t).CoreV1()
	c.root = testenv.NewMemoryCgroup(t, ramBytes+256*mi)
	c.layout = kube.Layout{Root: strings.TrimPrefix(c.root.Path, testenv.CgroupV1MemoryRoot), Driver: driver}
	qos := c.layout.QOSDirs() // kubepods, then its burstable and besteffort children
	c.kubepods = c.root.Child(t, filepath.Base(qos[0]), ramBytes)
	if err := c.kubepods.Write("memory.memsw.limit_in_bytes", strconv.FormatInt(ramBytes+swapBytes, 10)); err != nil {
		t.Fatal(err)
	}
	c.kubepods.Child(t, filepath.Base(qos[1]), 1<<62)
	c.kubepods.Child(t, filepath.Base(qos[2]), 1<<62)
	kubetest.AddNode(t, c.core, nodeName, ramBytes, 1000)
	c.kubelet = kubetest.StartKubelet(t, c.core, nodeName, c.layout, testenv.CgroupV1MemoryRoot, testenv.HeadroomBinary(t))
	return c
}

// deployRBAC applies the ServiceAccount and RBAC as deploy/ renders them
// and returns a kubeconfig with that service account's token: the agent
// runs with exactly the deployed permissions.
func (c *cluster) deployRBAC(t testing.TB) string {
	t.Helper()
	rendered, err := c.cp.Kubectl(t, "", "kustomize", filepath.Join(testenv.ModuleRoot(t), "deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/: %v\n%s", err, rendered)
	}
	var keep []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		for _, kind := range []string{"kind: Namespace", "kind: ServiceAccount", "kind: ClusterRole\n", "kind: ClusterRoleBinding"} {
			if strings.Contains(doc+"\n", "\n"+kind) || strings.HasPrefix(doc, kind) {
				keep = append(keep, doc)
				break
			}
		}
	}
	if len(keep) != 4 {
		t.Fatalf("deploy/ renders %d of Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding", len(keep))
	}
	if out, err := c.cp.Kubectl(t, strings.Join(keep, "\n---\n"), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("apply deploy RBAC: %v\n%s", err, out)
	}
	tr, err := c.core.ServiceAccounts(agentNS).CreateToken(context.Background(), "headroom-agent",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for headroom-agent: %v", err)
	}
	return c.cp.WriteKubeconfig(t, "headroom-agent", tr.Status.Token)
}

// checkRBACUse compares what the agent asked of the apiserver (its audit
// log) with what deploy/ grants it: every request allowed (a 429 is an
// answer, not a refusal) and every grant used.
func (c *cluster) checkRBACUse(t *testing.T) {
	t.Helper()
	const user = "system:serviceaccount:" + agentNS + ":headroom-agent"
	used := map[string]int{}
	for _, e := range c.cp.Audit(t, user) {
		if e.ObjectRef == nil {
			continue
		}
		key := e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		used[key]++
		if e.ResponseStatus != nil && (e.ResponseStatus.Code == http.StatusForbidden || e.ResponseStatus.Code == http.StatusUnauthorized) {
			t.Errorf("the agent was refused %s %s: %d", e.Verb, e.RequestURI, e.ResponseStatus.Code)
		}
	}
	rendered, err := c.cp.Kubectl(t, "", "kustomize", filepath.Join(testenv.ModuleRoot(t), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	for _, obj := range kubetest.Documents(t, rendered) {
		if obj["kind"] != "ClusterRole" {
			continue
		}
		for _, r := range obj["rules"].([]any) {
			rule := r.(map[string]any)
			for _, res := range rule["resources"].([]any) {
				for _, v := range rule["verbs"].([]any) {
					granted[v.(string)+" "+res.(string)] = true
				}
			}
		}
	}
	for g := range granted {
		if used[g] == 0 {
			t.Errorf("deploy/ grants %q, which the agent never used", g)
		}
	}
	for u, n := range used {
		if !granted[u] {
			t.Errorf("the agent used %q (%d times) without a grant", u, n)
		}
	}
	t.Logf("the agent's requests by kind: %v", used)
}

func (c *cluster) priorityClasses(t *testing.T, values map[string]int) {
	t.Helper()
	var docs []string
	for name, v := range values {
		docs = append(docs, fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: %s\nvalue: %d\n", name, v))
	}
	if out, err := c.cp.Kubectl(t, strings.Join(docs, "---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("priority classes: %v\n%s", err, out)
	}
}

// pod is a pod bound to the kwok node running `headroom load` with load's
// arguments ("" runs nothing).
func pod(ns, name, class string, requestMi, limitMi int64, load string) *corev1.Pod {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if requestMi > 0 {
		res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(requestMi*mi, resource.BinarySI)
	}
	if limitMi > 0 {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(limitMi*mi, resource.BinarySI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name},
			Annotations: map[string]string{kubetest.LoadAnnotation: load}},
		Spec: corev1.PodSpec{NodeName: nodeName, PriorityClassName: class, TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{Name: "main", Image: "headroom", Resources: res}}},
	}
}

func (c *cluster) createPod(t testing.TB, p *corev1.Pod) time.Time {
	t.Helper()
	at := time.Now()
	if _, err := c.core.Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	return at
}

// runningAgent is `headroom agent` in Kubernetes mode, its decisions
// collected from stdout.
type runningAgent struct {
	cmd      *exec.Cmd
	listen   string
	stateDir string // its eviction journal's
	stderr   *testenv.Buffer
	mu       sync.Mutex
	recs     []agent.Record
	event    chan agent.Record
	done     chan struct{}
}

func (c *cluster) startAgent(t testing.TB, kubeconfig string, extra ...string) *runningAgent {
	t.Helper()
	port := strconv.Itoa(kubetest.FreePort(t))
	// The deployed configuration (deploy/agent.yaml), the test's node and
	// shorter eviction times.
	stateDir := t.TempDir()
	args := append([]string{"agent", "--config", filepath.Join(testenv.ModuleRoot(t), "deploy", "agent.yaml"),
		"--kubernetes-node", nodeName, "--kubeconfig", kubeconfig, "--state-dir", stateDir,
		"--kubernetes-cgroup-root", c.layout.Root, "--kubernetes-namespace", agentNS,
		"--listen", "127.0.0.1:" + port, "--mlock=false", "--eviction-grace", "2s", "--eviction-deadline", "20s"}, extra...)
	a := &runningAgent{listen: "127.0.0.1:" + port, stateDir: stateDir, stderr: &testenv.Buffer{}, event: make(chan agent.Record, 1024), done: make(chan struct{})}
	a.cmd = exec.Command(testenv.HeadroomBinary(t), args...)
	a.cmd.Stderr = a.stderr
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go a.read(out)
	t.Cleanup(func() {
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			a.cmd.Process.Kill()
			<-a.done
		}
		a.cmd.Wait()
		if t.Failed() {
			log := a.stderr.String()
			if len(log) > 6000 {
				log = "…" + log[len(log)-6000:]
			}
			t.Logf("agent stderr:\n%s", log)
		}
	})
	return a
}

func (a *runningAgent) read(r io.Reader) {
	defer close(a.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec agent.Record
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		a.mu.Lock()
		a.recs = append(a.recs, rec)
		a.mu.Unlock()
		select {
		case a.event <- rec:
		default:
		}
	}
}

func (a *runningAgent) records() []agent.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.recs)
}

// waitFor returns the first decision (seen so far or to come) that match
// accepts, failing after timeout.
func (a *runningAgent) waitFor(t testing.TB, what string, timeout time.Duration, match func(agent.Record) bool) agent.Record {
	t.Helper()
	for _, r := range a.records() {
		if match(r) {
			return r
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case r := <-a.event:
			if match(r) {
				return r
			}
		case <-a.done:
			t.Fatalf("agent exited waiting for %s; stderr:\n%s", what, a.stderr.String())
		case <-deadline:
			t.Fatalf("no %s within %s; decisions so far: %s", what, timeout, summarize(a.records()))
		}
	}
}

func summarize(recs []agent.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\n  %s %s %s %s", r.Time.Format("15:04:05.000"), r.Action, r.Workload, r.Error)
	}
	return b.String()
}

// nodeMarks follows the node's taint and condition.
type nodeMarks struct {
	mu                       sync.Mutex
	taintSeen, conditionSeen bool
	tainted, conditioned     bool
	conditionMessage         string
}

func (c *cluster) watchNode(t *testing.T) *nodeMarks {
	t.Helper()
	m := &nodeMarks{}
	w, err := c.core.Nodes().Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			m.mu.Lock()
			m.tainted = slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool {
				return x.Key == kube.TaintKey && x.Effect == corev1.TaintEffectNoSchedule
			})
			m.conditioned = false
			for _, cond := range n.Status.Conditions {
				if cond.Type == kube.ConditionType && cond.Status == corev1.ConditionTrue {
					m.conditioned, m.conditionMessage = true, cond.Message
				}
			}
			m.taintSeen = m.taintSeen || m.tainted
			m.conditionSeen = m.conditionSeen || m.conditioned
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *nodeMarks) state() (taintSeen, conditionSeen, tainted, conditioned bool, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.taintSeen, m.conditionSeen, m.tainted, m.conditioned, m.conditionMessage
}

// The agent on a kwok node with real pod memory: new pods get their
// LimitedSwap allowance within 1 s; when the pods outgrow RAM + swap the
// lowest-ranked pod is evicted through the Eviction API — first one whose
// PodDisruptionBudget allows no disruption (refused: the agent moves on),
// then the next; the critical pod is never chosen; the node is tainted and
// carries the condition while the signal fires, and both clear; the kernel
// kills nothing. The agent runs with the deployed service account's token.
func TestSystemKubeAgentEvictsThroughTheAPI(t *testing.T) {
	const ram, swap = 1024 * mi, 1024 * mi
	c := newCluster(t, ram, swap)
	kubeconfig := c.deployRBAC(t)
	c.priorityClasses(t, map[string]int{"test-batch-low": 100, "test-batch": 200, "test-web": 1000})
	kubetest.Namespace(t, c.core, "apps")
	kubetest.Namespace(t, c.core, "kube-system")
	marks := c.watchNode(t)
	a := c.startAgent(t, kubeconfig, "--swap-utilization-threshold-factor", "0.8")

	// A budget that allows no disruption of batch-pdb.
	pdb := `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: batch-pdb, namespace: apps}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: batch-pdb}}
`
	if out, err := c.cp.Kubectl(t, pdb, "apply", "-f", "-"); err != nil {
		t.Fatalf("PDB: %v\n%s", err, out)
	}

	// Three pods of 600 MiB and one of 150 MiB: over the swap utilization
	// threshold (1 GiB RAM + 0.8 × 1 GiB swap) by about 120 MiB, under
	// the kernel's OOM point (RAM + swap) by about 80 MiB.
	load := "--size 600Mi --scan random --seed 3"
	created := map[string]time.Time{}
	// One pod's memory limit is written 200 ms after its cgroup is made:
	// the agent's first write may find none (v1 refuses a swap limit
	// then) and is retried within the second.
	late := pod("apps", "batch-pdb", "test-batch-low", 256, 1024, load)
	late.Annotations[kubetest.LimitDelayAnnotation] = "200ms"
	for _, p := range []*corev1.Pod{
		pod("kube-system", "critical", "system-node-critical", 128, 512, "--size 150Mi --scan random"),
		pod("apps", "web", "test-web", 600, 1024, load),
		late,
	} {
		created[kube.WorkloadName(p)] = c.createPod(t, p)
	}
	// Every pod's allowance is in force before the last one pushes the
	// node over: its cgroup's memsw limit is written within 1 s of the pod
	// being created.
	for name := range created {
		rec := a.waitFor(t, "set_swap for "+name, 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == name && r.Error == ""
		})
		lat := rec.Time.Sub(created[name])
		cg, _ := c.kubelet.Created(name)
		refused := 0
		for _, r := range a.records() {
			if r.Action == policy.ActionSetSwap && r.Workload == name && r.Error != "" && r.Time.Before(rec.Time) {
				refused++
			}
		}
		t.Logf("%s: swap %d MiB applied %.0f ms after the pod was created (%.0f ms after its cgroup; %d write(s) refused before)", name,
			rec.Swap.SwapBytes/mi, lat.Seconds()*1000, rec.Time.Sub(cg).Seconds()*1000, refused)
		if lat > time.Second {
			t.Errorf("%s: swap limit applied %.2f s after the pod was created, want <= 1 s", name, lat.Seconds())
		}
		if name == "kube-system/critical" && rec.Swap.SwapBytes != 0 {
			t.Errorf("critical pod given %d B of swap", rec.Swap.SwapBytes)
		}
	}
	created["apps/batch"] = c.createPod(t, pod("apps", "batch", "test-batch", 256, 1024, load))

	blocked := a.waitFor(t, "a refused eviction of batch-pdb", 60*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == "apps/batch-pdb"
	})
	if blocked.Outcome == nil || blocked.Outcome.Result != policy.EvictionRefused || !strings.Contains(blocked.Outcome.Err, "PodDisruptionBudget") {
		t.Fatalf("batch-pdb outcome %+v, want refused by a PodDisruptionBudget", blocked.Outcome)
	}
	evicted := a.waitFor(t, "the eviction of batch", 60*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvict && r.Workload == "apps/batch"
	})
	// A refusal freed nothing: the next candidate goes within one round
	// (0.25 s), not after the cool-down.
	gap := evicted.Time.Sub(blocked.Time)
	t.Logf("batch-pdb refused by its budget; batch chosen %.0f ms later", gap.Seconds()*1000)
	if gap > 250*time.Millisecond {
		t.Errorf("the next candidate went %s after the refusal, want within one round (250ms)", gap)
	}
	gone := a.waitFor(t, "batch gone", 30*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == "apps/batch"
	})
	if gone.Outcome.Result != policy.EvictedGracefully {
		t.Errorf("batch: %+v", gone.Outcome)
	}
	t.Logf("batch evicted through the API: chosen %s, gone %.2f s later; crossing to eviction <= %.2f s",
		evicted.Time.Format("15:04:05.000"), gone.Outcome.Seconds, evicted.LatencyBoundSeconds)
	if evicted.LatencyBoundSeconds > 1 {
		t.Errorf("threshold crossing to Eviction bounded by %.2f s, want <= 1 s", evicted.LatencyBoundSeconds)
	}
	if _, err := c.core.Pods("apps").Get(context.Background(), "batch-pdb", metav1.GetOptions{}); err != nil {
		t.Errorf("batch-pdb, protected by its budget, is gone: %v", err)
	}

	// The signal clears: the marks go.
	deadline := time.Now().Add(30 * time.Second)
	for {
		taintSeen, condSeen, tainted, conditioned, msg := marks.state()
		if taintSeen && condSeen && !tainted && !conditioned {
			t.Logf("node tainted and conditioned while the signal fired (%q), both cleared", msg)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node marks: taint seen %v, condition seen %v, still tainted %v, still conditioned %v", taintSeen, condSeen, tainted, conditioned)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, r := range a.records() {
		if r.Action == policy.ActionEvict && r.Workload == "kube-system/critical" {
			t.Errorf("the critical pod was chosen: %+v", r)
		}
		if strings.Contains(r.Error, "forbidden") {
			t.Errorf("the deployed RBAC is not enough: %s", r.Error)
		}
	}
	if strings.Contains(a.stderr.String(), "forbidden") {
		t.Errorf("the deployed RBAC is not enough; agent log:\n%s", a.stderr.String())
	}
	if n, err := c.kubepods.OOMKills(); err != nil || n != 0 {
		t.Errorf("kernel OOM kills in kubepods: %d (%v)", n, err)
	}
	c.checkRBACUse(t)
	evs, err := c.core.Events("apps").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, e := range evs.Items {
		if e.Source.Component == "headroom-agent" {
			reasons[e.InvolvedObject.Name] = e.Reason
		}
	}
	if reasons["batch"] != "Evicting" || reasons["batch-pdb"] != "EvictionBlocked" {
		t.Errorf("events by pod: %v, want batch Evicting and batch-pdb EvictionBlocked", reasons)
	}
}

// evacuationWebhook answers every Eviction of the pod named vm like
// KubeVirt's virt-api does for a VMI with evictionStrategy LiveMigrate:
// 429 "Eviction triggered evacuation", then, after migrate, the source
// pod goes (here: deleted, as virt-controller does once the migration
// completed). Other evictions are allowed.
type evacuationWebhook struct {
	url, caPEM string
	mu         sync.Mutex
	asked      []time.Time
}

func startEvacuationWebhook(t *testing.T, core corev1client.CoreV1Interface, vm string, migrate time.Duration) *evacuationWebhook {
	t.Helper()
	certPEM, keyPEM := selfSignedLoopbackCert(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	wh := &evacuationWebhook{caPEM: string(certPEM)}
	mux := http.NewServeMux()
	mux.HandleFunc("/evict", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		req := review.Request
		resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		if req.Name == vm {
			wh.mu.Lock()
			first := len(wh.asked) == 0
			wh.asked = append(wh.asked, time.Now())
			wh.mu.Unlock()
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
				Message: "Eviction triggered evacuation of VMI " + req.Namespace + "/" + vm}
			if first {
				ns := req.Namespace
				time.AfterFunc(migrate, func() {
					core.Pods(ns).Delete(context.Background(), vm, metav1.DeleteOptions{})
				})
			}
		}
		review.Response = resp
		json.NewEncoder(w).Encode(review)
	})
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	wh.url = "https://" + l.Addr().String() + "/evict"
	return wh
}

func (wh *evacuationWebhook) requests() []time.Time {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return slices.Clone(wh.asked)
}

func selfSignedLoopbackCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "evacuation-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// A 429 that means "evacuation in progress" (KubeVirt's answer for a VM
// it live-migrates away) is waited for: the agent chooses no other victim
// while the pod is still there, and reports the eviction as graceful once
// the pod left.
func TestSystemKubeEvictionInProgressIsWaitedFor(t *testing.T) {
	const ram, swap = 1024 * mi, 1024 * mi
	const migrate = 4 * time.Second
	c := newCluster(t, ram, swap)
	kubeconfig := c.deployRBAC(t)
	c.priorityClasses(t, map[string]int{"test-vm": 100, "test-batch": 200, "test-web": 1000})
	kubetest.Namespace(t, c.core, "vms")
	wh := startEvacuationWebhook(t, c.core, "virt-launcher-vm-1", migrate)
	cfg := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: test-evacuation}
webhooks:
- name: evacuation.test.headroom.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig:
    url: %q
    caBundle: %s
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods/eviction]
`, wh.url, base64.StdEncoding.EncodeToString([]byte(wh.caPEM)))
	if out, err := c.cp.Kubectl(t, cfg, "apply", "-f", "-"); err != nil {
		t.Fatalf("webhook: %v\n%s", err, out)
	}
	a := c.startAgent(t, kubeconfig, "--swap-utilization-threshold-factor", "0.8")
	// 3 × 650 MiB: over the threshold (1843 MiB) by about 110 MiB, under
	// RAM + swap by about 100 MiB.
	load := "--size 650Mi --scan random --seed 5"
	for _, p := range []*corev1.Pod{
		pod("vms", "virt-launcher-vm-1", "test-vm", 256, 1024, load),
		pod("vms", "web", "test-web", 700, 1024, load),
	} {
		c.createPod(t, p)
	}
	for _, name := range []string{"vms/virt-launcher-vm-1", "vms/web"} {
		a.waitFor(t, "set_swap for "+name, 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == name && r.Error == ""
		})
	}
	c.createPod(t, pod("vms", "batch", "test-batch", 256, 1024, load))

	ev := a.waitFor(t, "the eviction of the VM", 60*time.Second, func(r agent.Record) bool { return r.Action == policy.ActionEvict })
	if ev.Workload != "vms/virt-launcher-vm-1" {
		t.Fatalf("first victim %s, want the VM's pod (lowest priority)", ev.Workload)
	}
	done := a.waitFor(t, "the VM's eviction to end", 30*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == ev.Workload
	})
	if done.Outcome.Result != policy.EvictedGracefully {
		t.Fatalf("VM pod outcome %+v, want graceful (the 429 meant in progress)", done.Outcome)
	}
	if done.Outcome.Seconds < migrate.Seconds()-0.5 {
		t.Errorf("the eviction ended %.1f s after it began, before the %s migration did", done.Outcome.Seconds, migrate)
	}
	asked := wh.requests()
	if len(asked) == 0 {
		t.Fatal("the webhook saw no eviction")
	}
	for _, r := range a.records() {
		if r.Time.After(ev.Time) && r.Time.Before(done.Time) && (r.Action == policy.ActionEvict || r.Action == policy.ActionAbandon) {
			t.Errorf("while the VM migrated: %s %s (%s)", r.Action, r.Workload, r.Reason)
		}
	}
	t.Logf("VM pod: eviction answered 429 (%d request(s)), waited %.1f s for the migration, then gone; nothing else chosen meanwhile",
		len(asked), done.Outcome.Seconds)
	if n, err := c.kubepods.OOMKills(); err != nil || n != 0 {
		t.Errorf("kernel OOM kills in kubepods: %d (%v)", n, err)
	}
}

// deploy/ renders with kustomize and every object it renders is accepted
// by the real apiserver (server-side dry-run), the ServiceMonitor against
// the Prometheus operator's own CRD.
func TestSystemKubeDeployRendersAndDryRuns(t *testing.T) {
	cp := kubetest.Start(t)
	cp.InstallServiceMonitorCRD(t)
	rendered, err := cp.Kubectl(t, "", "kustomize", filepath.Join(testenv.ModuleRoot(t), "deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/: %v\n%s", err, rendered)
	}
	kinds := map[string]bool{}
	for _, obj := range kubetest.Documents(t, rendered) {
		kinds[obj["kind"].(string)] = true
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"} {
		if !kinds[k] {
			t.Errorf("deploy/ renders no %s", k)
		}
	}
	// The namespace first (namespaced objects are checked in it), then all.
	if out, err := cp.Kubectl(t, "", "create", "namespace", agentNS); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := cp.Kubectl(t, rendered, "apply", "--dry-run=server", "--server-side", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry-run of deploy/: %v\n%s", err, out)
	}
	t.Logf("server-side dry-run:\n%s", out)

	// The agent's configuration in the ConfigMap is valid for the agent.
	for _, obj := range kubetest.Documents(t, rendered) {
		if obj["kind"] != "ConfigMap" {
			continue
		}
		data := obj["data"].(map[string]any)
		path := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(path, []byte(data["agent.yaml"].(string)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(testenv.HeadroomBinary(t), "agent", "--config", path, "--print-config")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the ConfigMap's agent.yaml is refused: %v\n%s", err, b)
		}
	}
}

// waitRunning waits until n pods of the namespace are Running, following
// a watch.
func (c *cluster) waitRunning(t testing.TB, ns string, n int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	list, err := c.core.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, p := range list.Items {
		running[p.Name] = p.Status.Phase == corev1.PodRunning
	}
	count := func() (k int) {
		for _, r := range running {
			if r {
				k++
			}
		}
		return k
	}
	w, err := c.core.Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for count() < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended with %d of %d pods Running", count(), n)
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				running[p.Name] = p.Status.Phase == corev1.PodRunning
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d pods Running after %s", count(), n, timeout)
		}
	}
}

// manyPods is the node of the scale test and benchmark: 500 pods.
const manyPods = 500

// agentWithManyPods starts the agent and creates manyPods pods on the
// node, returning once every pod has its swap limit and runs.
func agentWithManyPods(tb testing.TB) (*cluster, *runningAgent) {
	c := newCluster(tb, 4<<30, 1<<30)
	kubeconfig := c.deployRBAC(tb)
	kubetest.Namespace(tb, c.core, "many")
	a := c.startAgent(tb, kubeconfig)
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c.createPod(tb, pod("many", fmt.Sprintf("p-%03d", i), "", 64, 128, ""))
			}
		}()
	}
	for i := 0; i < manyPods; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	created := time.Since(start)
	applied := map[string]bool{}
	a.waitFor(tb, "swap limits for all pods", 120*time.Second, func(r agent.Record) bool {
		if r.Action == policy.ActionSetSwap && r.Error == "" && strings.HasPrefix(r.Workload, "many/") {
			applied[r.Workload] = true
		}
		return len(applied) == manyPods
	})
	tb.Logf("%d pods created in %.1f s; all swap limits applied %.1f s after the first creation", manyPods, created.Seconds(), time.Since(start).Seconds())
	c.waitRunning(tb, "many", manyPods, 120*time.Second)
	tb.Logf("all %d pods Running (kwok) %.1f s after the first creation", manyPods, time.Since(start).Seconds())
	return c, a
}

// agentUsage is the agent's CPU and memory over a steady-state window,
// beside the floor measured in the same window: an idle Go process waking
// as often as the agent (testenv.IdleGo).
type agentUsage struct {
	cpuPercentOfCore   float64
	floorPercentOfCore float64
	rssMiB, peakMiB    float64
	rounds             float64
}

// ownPercentOfCore is the agent's CPU above the floor: what its work costs.
func (u agentUsage) ownPercentOfCore() float64 { return u.cpuPercentOfCore - u.floorPercentOfCore }

// deployedInterval is the round interval of deploy/agent.yaml, which the
// tests' agent runs with.
func deployedInterval(tb testing.TB) time.Duration {
	tb.Helper()
	cfg := agent.DefaultConfig()
	if err := cfg.LoadFile(filepath.Join(testenv.ModuleRoot(tb), "deploy", "agent.yaml")); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(cfg.IntervalSeconds * float64(time.Second))
}

// measureAgent samples the agent process, and the floor beside it, for
// window (a steady state: nothing to wait for but time).
func measureAgent(tb testing.TB, a *runningAgent, window time.Duration) agentUsage {
	tb.Helper()
	rounds0 := a.metric(tb, "headroom_agent_samples_total")
	shares := testenv.CPUShares(tb, window, a.cmd.Process.Pid, testenv.IdleGo(tb, deployedInterval(tb)))
	proc, err := procfs.NewProc(a.cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	status, err := proc.NewStatus()
	if err != nil {
		tb.Fatal(err)
	}
	return agentUsage{cpuPercentOfCore: 100 * shares[0], floorPercentOfCore: 100 * shares[1],
		rssMiB: float64(status.VmRSS) / (1 << 20), peakMiB: float64(status.VmHWM) / (1 << 20),
		rounds: a.metric(tb, "headroom_agent_samples_total") - rounds0}
}

// With 500 pods on the node the agent handles every pod (its swap limit
// written) and its informer puts one list and a watch on the apiserver:
// no polling in steady state. Its CPU and memory targets are measured by
// BenchmarkSystemKubeAgentWith500Pods (`make bench`); here they are logged.
func TestSystemKubeAgentWith500Pods(t *testing.T) {
	c, a := agentWithManyPods(t)
	const window = 30 * time.Second
	auditBefore := len(c.cp.Audit(t, "system:serviceaccount:"+agentNS+":headroom-agent"))
	u := measureAgent(t, a, window)
	t.Logf("with %d pods: %.0f rounds, %.2f%% of a core over %s (an idle Go process waking as often: %.2f%%), RSS %.1f MiB (peak %.1f MiB)",
		manyPods, u.rounds, u.cpuPercentOfCore, window, u.floorPercentOfCore, u.rssMiB, u.peakMiB)
	events := c.cp.Audit(t, "system:serviceaccount:"+agentNS+":headroom-agent")
	lists, watches := 0, 0
	for _, e := range events {
		if e.ObjectRef != nil && e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "" {
			switch e.Verb {
			case "list":
				lists++
			case "watch":
				watches++
			}
		}
	}
	// The apiserver ends a watch whose client falls behind a burst (its
	// watch cache cannot hold the events): 500 creations, and kwok's status
	// writes, on a loaded CI machine. The informer then watches again from
	// where it was, without a list: a renewed watch is fine, a list is not.
	terminated := c.cp.Metric(t, `apiserver_terminated_watchers_total{group="",resource="pods"}`)
	t.Logf("the agent's pod requests in all: %d list, %d watch; %d requests during the %s window; the apiserver ended %.0f slow pod watchers (any client's)",
		lists, watches, len(events)-auditBefore, window, terminated)
	if lists != 1 || watches < 1 || float64(watches) > 2+terminated {
		t.Errorf("pod lists %d, watches %d with %.0f pod watchers ended by the apiserver: want one list and a watch (renewed once, and once for each slow watcher ended)", lists, watches, terminated)
	}
	if n := len(events) - auditBefore; n > 1 {
		t.Errorf("%d requests to the apiserver during %s of steady state, want none beyond a watch renewal", n, window)
	}
	if u.rounds < window.Seconds() {
		t.Errorf("%.0f rounds in %s: the agent stopped sampling", u.rounds, window)
	}
}

// The agent watching 500 pods uses under 1% of a core and under 60 MiB:
//
//	make bench, or
//	go test -tags system -run '^$' -bench KubeAgentWith500Pods -benchtime 1x ./internal/kube/
func BenchmarkSystemKubeAgentWith500Pods(b *testing.B) {
	_, a := agentWithManyPods(b)
	const window = 60 * time.Second
	var u agentUsage
	b.ResetTimer()
	for range b.N {
		u = measureAgent(b, a, window)
	}
	b.ReportMetric(u.cpuPercentOfCore, "%core")
	b.ReportMetric(u.floorPercentOfCore, "%core-idle-go")
	b.ReportMetric(u.rssMiB, "MiB-RSS")
	b.ReportMetric(u.peakMiB, "MiB-peak")
	b.Logf("with %d pods: %.2f%% of a core over %s; an idle Go process waking as often %.2f%%; the agent's own %.2f%% (target < 1%%); RSS %.1f MiB, peak %.1f MiB (target < 60 MiB)",
		manyPods, u.cpuPercentOfCore, window, u.floorPercentOfCore, u.ownPercentOfCore(), u.rssMiB, u.peakMiB)
	if u.ownPercentOfCore() >= 1 {
		b.Errorf("agent CPU %.2f%% of a core with %d pods, %.2f%% above an idle Go process's; want < 1%%", u.cpuPercentOfCore, manyPods, u.ownPercentOfCore())
	}
	if u.rssMiB >= 60 {
		b.Errorf("agent RSS %.1f MiB with %d pods, want < 60 MiB", u.rssMiB, manyPods)
	}
}

// waitLog waits until the agent's log holds want.
func (a *runningAgent) waitLog(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(a.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("agent log has no %q after %s:\n%s", want, timeout, a.stderr.String())
		}
		select {
		case <-a.done:
			t.Fatalf("agent exited; log:\n%s", a.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metric returns a sample's value from the agent's /metrics.
func (a *runningAgent) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	v, ok := kubetest.MetricValue(b, name)
	if !ok {
		t.Fatalf("no %s in /metrics", name)
	}
	return v
}

func (a *runningAgent) healthy(t *testing.T) {
	t.Helper()
	resp, err := http.Get("http://" + a.listen + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
}

// Bad input never stops the agent nor makes it evict: an unreachable
// apiserver and a service account without RBAC are logged and counted
// while the agent keeps sampling the node; a pod whose cgroup does not
// exist is logged and counted, gets no swap and is never chosen.
func TestSystemKubeAgentBadInput(t *testing.T) {
	c := newCluster(t, 1024*mi, 0)
	kubeconfig := c.deployRBAC(t)
	kubetest.Namespace(t, c.core, "apps")

	t.Run("unreachable apiserver", func(t *testing.T) {
		dead := c.cp.WriteKubeconfigAt(t, "dead", "https://127.0.0.1:"+strconv.Itoa(kubetest.FreePort(t)), "token")
		a := c.startAgent(t, dead)
		a.waitLog(t, "cannot watch the node's pods", 30*time.Second)
		if up := a.metric(t, "headroom_kube_api_up"); up != 0 {
			t.Errorf("headroom_kube_api_up %g with the apiserver unreachable", up)
		}
		if n := a.metric(t, "headroom_kube_watch_errors_total"); n < 1 {
			t.Errorf("headroom_kube_watch_errors_total %g", n)
		}
		a.healthy(t)
	})
	t.Run("no RBAC", func(t *testing.T) {
		if _, err := c.core.ServiceAccounts("apps").Create(context.Background(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := c.core.ServiceAccounts("apps").CreateToken(context.Background(), "nobody",
			&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := c.startAgent(t, c.cp.WriteKubeconfig(t, "nobody", tr.Status.Token))
		a.waitLog(t, "forbidden", 30*time.Second)
		if up := a.metric(t, "headroom_kube_api_up"); up != 0 {
			t.Errorf("headroom_kube_api_up %g without RBAC", up)
		}
		a.healthy(t)
	})
	t.Run("pod without a cgroup", func(t *testing.T) {
		a := c.startAgent(t, kubeconfig)
		lost := pod("apps", "lost", "", 64, 128, "")
		lost.Annotations[kubetest.NoCgroupAnnotation] = "true"
		c.createPod(t, lost)
		c.createPod(t, pod("apps", "found", "", 64, 128, ""))
		a.waitFor(t, "set_swap for the pod with a cgroup", 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == "apps/found"
		})
		a.waitLog(t, "pod's cgroup not found", 30*time.Second)
		if n := a.metric(t, "headroom_kube_pods_without_cgroup"); n != 1 {
			t.Errorf("headroom_kube_pods_without_cgroup %g, want 1", n)
		}
		for _, r := range a.records() {
			if r.Workload == "apps/lost" {
				t.Errorf("acted on the pod without a cgroup: %+v", r)
			}
		}
		a.healthy(t)
	})
}

// The systemd driver's layout, found without being told (the agent
// detects kubepods.slice), with a pod of each QoS class: the Burstable pod
// gets the LimitedSwap formula, the Guaranteed pod none (written: memsw =
// its limit), and the BestEffort pod — which cgroup v1 cannot limit, it
// has no memory limit — is watched with no write and no error.
func TestSystemKubeSystemdLayoutAndQoSClasses(t *testing.T) {
	c := newClusterWithDriver(t, 1024*mi, 1024*mi, kube.DriverSystemd)
	kubeconfig := c.deployRBAC(t)
	kubetest.Namespace(t, c.core, "apps")
	// The Burstable pod is there before the agent starts: it is handled
	// from the first list, within a second of the agent's start.
	c.createPod(t, pod("apps", "burstable", "", 256, 512, "--size 32Mi --scan none"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := c.kubelet.Created("apps/burstable"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in kubelet made no cgroup for the first pod")
		}
	}
	started := time.Now()
	a := c.startAgent(t, kubeconfig)
	first := a.waitFor(t, "set_swap for the pod present at start", 10*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionSetSwap && r.Workload == "apps/burstable"
	})
	t.Logf("pod present at start: swap limit written %.0f ms after the agent was started", first.Time.Sub(started).Seconds()*1000)
	if first.Time.Sub(started) > time.Second {
		t.Errorf("the pod present at start was handled %.2f s after the agent started, want <= 1 s", first.Time.Sub(started).Seconds())
	}
	guaranteed := pod("apps", "guaranteed", "", 128, 128, "--size 32Mi --scan none")
	cpu := resource.MustParse("100m")
	guaranteed.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = cpu
	guaranteed.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = cpu
	for _, p := range []*corev1.Pod{guaranteed, pod("apps", "besteffort", "", 0, 0, "--size 32Mi --scan none")} {
		c.createPod(t, p)
	}
	want := map[string]uint64{"apps/guaranteed": 0, "apps/burstable": 256 * mi}
	for name, bytes := range want {
		// The first write may come between the kubelet's mkdir and its
		// memory limit (v1 refuses a swap limit without one) and is
		// retried in the next round.
		r := a.waitFor(t, "set_swap for "+name, 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == name && r.Error == ""
		})
		// The formula: request / scope RAM x scope swap (1 GiB each).
		if diff := int64(r.Swap.SwapBytes) - int64(bytes); diff < -mi || diff > mi {
			t.Errorf("%s: set_swap %d B, want %d B", name, r.Swap.SwapBytes, bytes)
		}
	}
	// Every pod is a workload in its systemd-named cgroup; the BestEffort
	// one too, though nothing is written for it.
	for name, dir := range map[string]string{"apps/guaranteed": "/kubepods.slice/kubepods-pod",
		"apps/burstable":  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
		"apps/besteffort": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"} {
		cg := ""
		for deadline := time.Now().Add(10 * time.Second); cg == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			cg = c.cgroupOf(t, a, name) // the snapshot is published at the end of a round
		}
		if !strings.Contains(cg, dir) {
			t.Errorf("%s: cgroup %q, want the systemd layout (%s...)", name, cg, dir)
		}
	}
	for _, r := range a.records() {
		if r.Workload == "apps/besteffort" {
			t.Errorf("acted on the BestEffort pod: %+v", r)
		}
	}
}

// cgroupOf returns the display of a workload in the agent's snapshot (its
// name and cgroup path as the agent logged them), or "" if absent.
func (c *cluster) cgroupOf(t *testing.T, a *runningAgent, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.listen + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v agent.View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Workloads {
		if w.Name == name {
			return w.Cgroup
		}
	}
	return ""
}

// The apiserver stops answering for 30 s (SIGSTOP) right after it accepted
// an eviction: the agent's loop goes on (its /healthz answers), it chooses
// no second victim, records the eviction's outcome once the API is back,
// and its informer resyncs (a pod made afterwards gets its allowance).
// Then the agent is stopped (SIGTERM) in the middle of a second eviction:
// the eviction is recorded as interrupted, nothing is forced, and the pod
// leaves in its own grace period.
func TestSystemKubeAPIServerPausedAndAgentStoppedMidEviction(t *testing.T) {
	const ram, swap = 1024 * mi, 1024 * mi
	const podGrace = 6 // s: each pod's load takes 4 s to stop
	c := newCluster(t, ram, swap)
	kubeconfig := c.deployRBAC(t)
	c.priorityClasses(t, map[string]int{"test-vm": 100, "test-batch": 200, "test-web": 1000})
	kubetest.Namespace(t, c.core, "vms")
	a := c.startAgent(t, kubeconfig, "--swap-utilization-threshold-factor", "0.8", "--eviction-deadline", "90s",
		"--shutdown-grace", "1s")
	// 3 × 650 MiB: over the threshold (1843 MiB) by about 110 MiB, under
	// RAM + swap by about 100 MiB.
	load := "--size 650Mi --scan random --seed 5 --stop-delay 4s"
	mk := func(name, class string) *corev1.Pod {
		p := pod("vms", name, class, 256, 1024, load)
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](podGrace)
		return p
	}
	for _, p := range []*corev1.Pod{mk("vm-1", "test-vm"), mk("web", "test-web")} {
		c.createPod(t, p)
	}
	for _, name := range []string{"vms/vm-1", "vms/web"} {
		a.waitFor(t, "set_swap for "+name, 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == name && r.Error == ""
		})
	}
	c.createPod(t, mk("batch", "test-batch"))
	ev := a.waitFor(t, "the first eviction", 60*time.Second, func(r agent.Record) bool { return r.Action == policy.ActionEvict })
	if ev.Workload != "vms/vm-1" {
		t.Fatalf("first victim %s, want vms/vm-1 (lowest priority)", ev.Workload)
	}
	// The Eviction was accepted: the pod is terminating, or already gone
	// (kwok's default pod-delete stage deletes it from a second on, and a
	// cold make test once polled too late; the stand-in kubelet still
	// stops its processes over the pod's grace).
	testenv.Eventually(t, 10*time.Second, func() bool {
		p, err := c.core.Pods("vms").Get(context.Background(), "vm-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	})

	resume := c.cp.Pause(t, "kube-apiserver")
	paused := time.Now()
	for _, at := range []time.Duration{5 * time.Second, 25 * time.Second} {
		time.Sleep(time.Until(paused.Add(at)))
		resp, err := http.Get("http://" + a.listen + "/healthz")
		if err != nil {
			t.Fatalf("the agent's /healthz %s into the apiserver's pause: %v", at, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("the agent's /healthz %s into the apiserver's pause: %d (its loop waits on the API)", at, resp.StatusCode)
		}
	}
	time.Sleep(time.Until(paused.Add(30 * time.Second)))
	resume()
	done := a.waitFor(t, "vm-1's outcome after the pause", 30*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == ev.Workload
	})
	t.Logf("apiserver paused 30 s mid-eviction: outcome %s after %.1f s, recorded %.1f s after the API came back",
		done.Outcome.Result, done.Outcome.Seconds, done.Time.Sub(paused.Add(30*time.Second)).Seconds())
	if done.Outcome.Result != policy.EvictedGracefully {
		t.Errorf("vm-1's outcome %+v, want graceful", done.Outcome)
	}
	c.createPod(t, mk("late", "test-vm"))
	a.waitFor(t, "set_swap for the pod made after the pause", 15*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionSetSwap && r.Workload == "vms/late" && r.Error == ""
	})
	for _, r := range a.records() {
		if r.Action == policy.ActionEvict && r.Workload != ev.Workload {
			t.Fatalf("a second victim while the first was leaving: %s (%s)", r.Workload, r.Reason)
		}
	}

	// web, batch and late outgrow the threshold again: late (test-vm) goes,
	// and the agent is stopped while its 4 s shutdown runs.
	second := a.waitFor(t, "the second eviction", 60*time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvict && r.Workload != ev.Workload
	})
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not exit within 15 s of SIGTERM")
	}
	stopped := a.waitFor(t, "the second eviction's outcome at the stop", time.Second, func(r agent.Record) bool {
		return r.Action == policy.ActionEvicted && r.Workload == second.Workload
	})
	if r := stopped.Outcome.Result; r != policy.EvictionInterrupted && r != policy.EvictedGracefully {
		t.Errorf("the stop ended %s's eviction as %s, want interrupted (or graceful)", second.Workload, r)
	}
	// An interrupted eviction stays in the journal for the next agent:
	// the test's own (--state-dir), never the node agent's default.
	if stopped.Outcome.Result == policy.EvictionInterrupted {
		journal, err := os.ReadFile(filepath.Join(a.stateDir, "evictions.json"))
		if err != nil || !strings.Contains(string(journal), `"workload":"`+second.Workload+`"`) {
			t.Errorf("the journal in --state-dir after the stop: %q (%v), want %s in it", journal, err, second.Workload)
		}
	}
	for _, r := range a.records() {
		if r.Outcome != nil && r.Outcome.Result == policy.EvictedForcibly {
			t.Errorf("forced: %s", r.Workload)
		}
	}
	ns, name, _ := strings.Cut(second.Workload, "/")
	p, err := c.core.Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err == nil && (p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != podGrace) {
		t.Errorf("%s is being deleted with grace %v, want its own %d s", second.Workload, p.DeletionGracePeriodSeconds, podGrace)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := c.core.Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	t.Logf("agent stopped mid-eviction: %s recorded %s, the pod left on its own", second.Workload, stopped.Outcome.Result)
	if n, err := c.kubepods.OOMKills(); err != nil || n != 0 {
		t.Errorf("kernel OOM kills in kubepods: %d (%v)", n, err)
	}
}

// The apiserver stops answering just as the agent sends an Eviction: the
// pressure comes from a process outside any pod while the apiserver is
// paused, so the agent's request hangs until its timeout. Whether it
// arrived is unknown: the agent waits for that victim as if the Eviction
// was accepted, and chooses no second one (taken as a refusal, the next
// candidate would go too, and both pods could leave once the API is back);
// once the API answers and the pod is not terminating, it sends the
// Eviction again, and the pod leaves.
func TestSystemKubeEvictionUnansweredIsWaitedFor(t *testing.T) {
	const ram, swap = 1024 * mi, 1024 * mi
	c := newCluster(t, ram, swap)
	kubeconfig := c.deployRBAC(t)
	c.priorityClasses(t, map[string]int{"test-vm": 100, "test-web": 1000})
	kubetest.Namespace(t, c.core, "vms")
	a := c.startAgent(t, kubeconfig, "--swap-utilization-threshold-factor", "0.8", "--eviction-deadline", "90s")
	load := "--size 650Mi --scan random --seed 5"
	// Requests of half the RAM: their allowances add up to the whole swap,
	// so the OOM point is RAM + swap.
	for _, p := range []*corev1.Pod{pod("vms", "vm-1", "test-vm", 512, 1024, load), pod("vms", "web", "test-web", 512, 1024, load)} {
		c.createPod(t, p)
	}
	for _, name := range []string{"vms/vm-1", "vms/web"} {
		a.waitFor(t, "set_swap for "+name, 10*time.Second, func(r agent.Record) bool {
			return r.Action == policy.ActionSetSwap && r.Workload == name && r.Error == ""
		})
	}
	// Two 650 MiB pods and 600 MiB outside any pod: over the threshold
	// (RAM + 0.8 × swap, 1843 MiB) by about 70 MiB, under the OOM point
	// (2048 MiB) by over 100 MiB, where the policy would take a second
	// victim beside one still leaving.
	resume := c.cp.Pause(t, "kube-apiserver")
	paused := time.Now()
	c.kubepods.Child(t, "not-a-pod", 1<<62).StartLoad(t, "--size", "600Mi", "--scan", "random", "--seed", "6")
	ev := a.waitFor(t, "the eviction, sent to a paused apiserver", 60*time.Second, func(r agent.Record) bool { return r.Action == policy.ActionEvict })
	t.Logf("%s chosen %.1f s into the apiserver's pause", ev.Workload, ev.Time.Sub(paused).Seconds())
	if ev.Workload != "vms/vm-1" {
		t.Fatalf("victim %s, want vms/vm-1 (lowest priority)", ev.Workload)
	}
	// Well past the request's timeout (10 s), still paused.
	time.Sleep(time.Until(paused.Add(25 * time.Second)))
	resume()
	resumed := time.Now()
	// After the API is back vm-1 leaves (the Eviction arrived, or was sent
	// again), and there was no second victim meanwhile.
	ended := func() *agent.Record {
		for _, r := range a.records() {
			if r.Action == policy.ActionEvicted && r.Workload == ev.Workload {
				return &r
			}
		}
		return nil
	}
	deadline := time.After(20 * time.Second)
	outcome := ended()
	for waiting := true; outcome == nil && waiting; outcome = ended() {
		select {
		case <-a.event:
		case <-deadline:
			waiting = false
		}
	}
	for _, r := range a.records() {
		if r.Action == policy.ActionEvict && r.Workload != ev.Workload {
			t.Fatalf("a second victim while the first one's Eviction went unanswered: %s (%s); decisions: %s", r.Workload, r.Reason, summarize(a.records()))
		}
		if r.Action == policy.ActionEvicted && r.Outcome != nil && r.Outcome.Result == policy.EvictionRefused {
			t.Fatalf("an unanswered Eviction taken as a refusal: %+v", r.Outcome)
		}
	}
	if outcome == nil || outcome.Outcome.Result != policy.EvictedGracefully {
		t.Fatalf("%s's eviction did not end gracefully within 20 s of the API coming back: %+v; agent log:\n%s", ev.Workload, outcome, a.stderr.String())
	}
	resent := strings.Contains(a.stderr.String(), "eviction sent again and accepted")
	t.Logf("%s left %.1f s after the API came back (%s after %.1f s); the Eviction sent again: %v", ev.Workload,
		outcome.Time.Sub(resumed).Seconds(), outcome.Outcome.Result, outcome.Outcome.Seconds, resent)
}
