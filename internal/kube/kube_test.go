package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

func res(req, lim string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if req != "" {
		r.Requests[corev1.ResourceMemory] = resource.MustParse(req)
	}
	if lim != "" {
		r.Limits[corev1.ResourceMemory] = resource.MustParse(lim)
	}
	return r
}

func ctr(req, lim string) corev1.Container {
	return corev1.Container{Name: "c", Resources: res(req, lim)}
}

func TestPodMemoryRequestBytes(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := func(req string) corev1.Container {
		c := ctr(req, "")
		c.RestartPolicy = &always
		return c
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want uint64
	}{
		{"sum of containers", corev1.PodSpec{Containers: []corev1.Container{ctr("1Gi", ""), ctr("512Mi", "1Gi")}}, 1536 << 20},
		{"a limit alone is the request", corev1.PodSpec{Containers: []corev1.Container{ctr("", "256Mi")}}, 256 << 20},
		{"nothing requested", corev1.PodSpec{Containers: []corev1.Container{ctr("", "")}}, 0},
		{"a larger init container wins", corev1.PodSpec{InitContainers: []corev1.Container{ctr("2Gi", "")},
			Containers: []corev1.Container{ctr("1Gi", "")}}, 2 << 30},
		{"sidecars add to the containers", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("128Mi")},
			Containers: []corev1.Container{ctr("1Gi", "")}}, 1152 << 20},
		{"an init container after a sidecar runs beside it", corev1.PodSpec{
			InitContainers: []corev1.Container{sidecar("512Mi"), ctr("1Gi", "")},
			Containers:     []corev1.Container{ctr("256Mi", "")}}, 1536 << 20},
		{"pod overhead", corev1.PodSpec{Containers: []corev1.Container{ctr("1Gi", "")},
			Overhead: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}}, 1124 << 20},
	}
	for _, tt := range tests {
		if got := PodMemoryRequestBytes(&corev1.Pod{Spec: tt.spec}); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestQOSAndSwapEligibility(t *testing.T) {
	tests := []struct {
		name     string
		status   corev1.PodQOSClass
		ctrs     []corev1.Container
		qos      corev1.PodQOSClass
		eligible bool
	}{
		{"no resources", "", []corev1.Container{ctr("", "")}, corev1.PodQOSBestEffort, false},
		{"request below limit", "", []corev1.Container{ctr("256Mi", "1Gi")}, corev1.PodQOSBurstable, true},
		{"request without limit", "", []corev1.Container{ctr("256Mi", "")}, corev1.PodQOSBurstable, true},
		// Memory and CPU both set to equal requests and limits.
		{"guaranteed", "", []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceCPU: resource.MustParse("1")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceCPU: resource.MustParse("1")}}}},
			corev1.PodQOSGuaranteed, false},
		// Burstable by CPU, but memory request == limit: LimitedSwap gives none.
		{"burstable, memory request = limit", "", []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceCPU: resource.MustParse("1")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
			corev1.PodQOSBurstable, false},
		{"status wins", corev1.PodQOSBurstable, []corev1.Container{ctr("", "")}, corev1.PodQOSBurstable, false},
	}
	for _, tt := range tests {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: tt.ctrs}, Status: corev1.PodStatus{QOSClass: tt.status}}
		if got := QOSClass(p); got != tt.qos {
			t.Errorf("%s: QoS %s, want %s", tt.name, got, tt.qos)
		}
		if got := SwapEligible(p); got != tt.eligible {
			t.Errorf("%s: swap eligible %v, want %v", tt.name, got, tt.eligible)
		}
	}
}

func TestProtectedAndMetadata(t *testing.T) {
	sel, err := labels.Parse("tier=control")
	if err != nil {
		t.Fatal(err)
	}
	prot := Protection{Namespace: "headroom-system", Selector: sel}
	base := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", Labels: map[string]string{"tier": "web"}},
			Spec: corev1.PodSpec{Priority: ptr.To[int32](1000), Containers: []corev1.Container{ctr("256Mi", "1Gi")}}}
	}
	tests := []struct {
		name      string
		edit      func(*corev1.Pod)
		protected bool
	}{
		{"ordinary", func(*corev1.Pod) {}, false},
		{"system-node-critical", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }, true},
		{"system-cluster-critical", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-cluster-critical" }, true},
		{"critical priority", func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](SystemCriticalPriority) }, true},
		{"the agent's namespace", func(p *corev1.Pod) { p.Namespace = "headroom-system" }, true},
		{"selected by label", func(p *corev1.Pod) { p.Labels["tier"] = "control" }, true},
	}
	for _, tt := range tests {
		p := base()
		tt.edit(p)
		md := Metadata(p, prot)
		if md.Protected != tt.protected {
			t.Errorf("%s: protected %v, want %v", tt.name, md.Protected, tt.protected)
		}
		if tt.protected && md.SwapRule != policy.SwapNone {
			t.Errorf("%s: a protected pod's swap rule %q, want none", tt.name, md.SwapRule)
		}
	}
	md := Metadata(base(), prot)
	if md.Name != "apps/web" || md.Priority != 1000 || md.MemoryRequestBytes != 256<<20 || md.SwapRule != policy.SwapByRequest {
		t.Errorf("metadata %+v", md)
	}
	if Protected(base(), Protection{Selector: labels.Nothing()}) {
		t.Error("an empty selector protects every pod")
	}
}

func TestPodCgroupLayout(t *testing.T) {
	tests := []struct {
		layout Layout
		qos    corev1.PodQOSClass
		want   string
	}{
		{Layout{"/", DriverCgroupfs}, corev1.PodQOSBurstable, "/kubepods/burstable/pod1f2e-3d4c"},
		{Layout{"/", DriverCgroupfs}, corev1.PodQOSBestEffort, "/kubepods/besteffort/pod1f2e-3d4c"},
		{Layout{"/", DriverCgroupfs}, corev1.PodQOSGuaranteed, "/kubepods/pod1f2e-3d4c"},
		{Layout{"/", DriverSystemd}, corev1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e_3d4c.slice"},
		{Layout{"/", DriverSystemd}, corev1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1f2e_3d4c.slice"},
		{Layout{"/", DriverSystemd}, corev1.PodQOSGuaranteed, "/kubepods.slice/kubepods-pod1f2e_3d4c.slice"},
		{Layout{"/custom", DriverCgroupfs}, corev1.PodQOSBurstable, "/custom/kubepods/burstable/pod1f2e-3d4c"},
	}
	for _, tt := range tests {
		if got := tt.layout.PodCgroup(tt.qos, "1f2e-3d4c"); got != tt.want {
			t.Errorf("%+v %s: %s, want %s", tt.layout, tt.qos, got, tt.want)
		}
	}
}

func TestDetectDriver(t *testing.T) {
	mount := t.TempDir()
	if _, err := DetectDriver(mount, "/"); err == nil {
		t.Error("no kubepods cgroup, no error")
	}
	os.MkdirAll(filepath.Join(mount, "kubepods"), 0o755)
	if d, err := DetectDriver(mount, "/"); err != nil || d != DriverCgroupfs {
		t.Errorf("cgroupfs tree: %q %v", d, err)
	}
	os.MkdirAll(filepath.Join(mount, "kubepods.slice"), 0o755)
	if d, err := DetectDriver(mount, "/"); err != nil || d != DriverSystemd {
		t.Errorf("systemd tree: %q %v", d, err)
	}
}

// On cgroup v2 the kubelet's LimitedSwap (and NoSwap) write memory.swap.max
// on the containers' cgroups: found, it is the pod's allowance.
func TestKubeletSwapLimit(t *testing.T) {
	pod := t.TempDir()
	write := func(ctr, v string) {
		os.MkdirAll(filepath.Join(pod, ctr), 0o755)
		os.WriteFile(filepath.Join(pod, ctr, "memory.swap.max"), []byte(v+"\n"), 0o644)
	}
	if _, ok := kubeletSwapLimit(cgroup.V2, pod); ok {
		t.Error("no containers, yet a limit")
	}
	write("sandbox", "max")
	if _, ok := kubeletSwapLimit(cgroup.V2, pod); ok {
		t.Error("unlimited containers read as a kubelet limit")
	}
	write("app", "268435456")
	write("sidecar", "0")
	if n, ok := kubeletSwapLimit(cgroup.V2, pod); !ok || n != 256<<20 {
		t.Errorf("limit %d %v, want 256 MiB", n, ok)
	}
	if _, ok := kubeletSwapLimit(cgroup.V1, pod); ok {
		t.Error("cgroup v1: the kubelet never limits swap")
	}
}

func TestPressureOf(t *testing.T) {
	if p := PressureOf([]policy.Signal{{Name: "swap_utilization", Value: 1, Threshold: 2}}); p.Firing {
		t.Errorf("nothing fires, got %+v", p)
	}
	p := PressureOf([]policy.Signal{
		{Name: "swap_utilization", Value: 3e9, Threshold: 2e9, Unit: "bytes", Firing: true},
		{Name: "psi_memory_some", Value: 1, Threshold: 10},
		{Name: "swap_exhaustion", Value: 4, Threshold: 30, Unit: "seconds", Below: true, Firing: true},
	})
	want := "swap_utilization 3e+09 bytes > threshold 2e+09; swap_exhaustion 4 seconds < threshold 30"
	if !p.Firing || p.Message != want {
		t.Errorf("pressure %+v, want message %q", p, want)
	}
}

// A 429 refusing the eviction (a PodDisruptionBudget) is told apart from a
// 429 that accepted it as in progress (KubeVirt's evacuation webhook).
func TestDisruptionBudgetRefusal(t *testing.T) {
	pdb := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	pdb.ErrStatus.Details.Causes = append(pdb.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 1 healthy pods"})
	webhook := apierrors.NewTooManyRequests(`admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: Eviction triggered evacuation of VMI "vms/vm-1"`, 0)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web", errors.New("no"))
	for _, tt := range []struct {
		err  error
		want bool
	}{{pdb, true}, {webhook, false}, {forbidden, false}, {errors.New("plain"), false}} {
		if got := DisruptionBudgetRefusal(tt.err); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.err, got, tt.want)
		}
	}
}

// An eviction request that may have reached the apiserver (a timeout, a
// connection lost mid-request) is waited for, not taken as a refusal; an
// answer of the API's or a connection never made is definite.
func TestEvictionMayHaveArrived(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	reset := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", fmt.Errorf("create: %w", context.DeadlineExceeded), true},
		{"reset mid-request", reset, true},
		{"EOF", &url.Error{Op: "Post", URL: "https://x", Err: io.EOF}, true},
		{"connection refused", refused, false},
		{"an API answer", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web", errors.New("no")), false},
		{"an API timeout answer", apierrors.NewTimeoutError("slow", 1), false},
		{"anything else", errors.New("plain"), false},
	} {
		if got := mayHaveArrived(tt.err); got != tt.want {
			t.Errorf("%s (%v): %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// Outside a pod and without a kubeconfig, the error names the flag and
// the key that give one.
func TestRESTConfigOutsideAPodNamesTheKubeconfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := RESTConfig("")
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") || !strings.Contains(err.Error(), "kubernetes.kubeconfig") {
		t.Fatalf("got %v; want one naming --kubeconfig and kubernetes.kubeconfig", err)
	}
}
