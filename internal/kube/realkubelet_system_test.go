//go:build system

package kube_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-dev/headroom/internal/kube/kubetest"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The capabilities the DaemonSet adds (deploy/daemonset.yaml), by number.
const (
	capIPCLock     = 14
	capSysResource = 24
)

// realCluster is a control plane with one node run by a real kubelet
// under containerd and runc, the headroom image imported.
func realCluster(t *testing.T, opts kubetest.RealNodeOptions) (*kubetest.ControlPlane, *kubetest.RealNode) {
	t.Helper()
	cp := kubetest.StartWith(t, kubetest.Options{RealNodes: true})
	opts.Images = append(opts.Images, kubetest.HeadroomImage(testenv.HeadroomBinary(t)))
	node := kubetest.StartRealNode(t, cp, "real-node-0", opts)
	t.Logf("node %s Ready %.1f s after containerd started; pods' cgroup %d MiB of the machine's %d MiB",
		node.Name, node.ReadySeconds, node.PodsMemoryBytes>>20, node.CapacityBytes>>20)
	return cp, node
}

// boundingCaps is this process's capability bounding set: a container can
// be given no capability outside it.
func boundingCaps(t *testing.T) uint64 {
	t.Helper()
	return statusCaps(t, os.Getpid(), "CapBnd")
}

// statusCaps reads a capability set of a process from /proc/PID/status.
func statusCaps(t *testing.T, pid int, field string) uint64 {
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

// deployAgent applies deploy/ as users do (kustomize), with two changes:
// the image, which is local here, and, on a machine whose bounding set
// lacks CAP_SYS_RESOURCE (this one), that capability, which no container
// can be given there (runc: "unable to apply caps: operation not
// permitted"). It returns the capabilities the agent's container must end
// up with.
func deployAgent(t *testing.T, cp *kubetest.ControlPlane) (wantCaps uint64) {
	t.Helper()
	crd := kubetest.ServiceMonitorCRD(t)
	if out, err := cp.Kubectl(t, crd, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("ServiceMonitor CRD: %v\n%s", err, out)
	}
	if out, err := cp.Kubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/servicemonitors.monitoring.coreos.com"); err != nil {
		t.Fatalf("CRD not established: %v\n%s", err, out)
	}
	name, tag, _ := strings.Cut(kubetest.HeadroomImageRef, ":")
	overlay := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../deploy
images:
  - name: ghcr.io/headroom-dev/headroom
    newName: %s
    newTag: %s
`, name, tag)
	wantCaps = 1<<capIPCLock | 1<<capSysResource
	if boundingCaps(t)&(1<<capSysResource) == 0 {
		t.Logf("this machine's capability bounding set lacks CAP_SYS_RESOURCE: the agent's container runs without it")
		wantCaps = 1 << capIPCLock
		overlay += `patches:
  - target: {kind: DaemonSet, name: headroom-agent}
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
			if err := os.WriteFile(filepath.Join(dir, "deploy", e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "overlay", "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(t, "", "apply", "-k", filepath.Join(dir, "overlay")); err != nil {
		t.Fatalf("kubectl apply -k (deploy/ with the local image): %v\n%s", err, out)
	}
	return wantCaps
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
	applied := time.Now()
	wantCaps := deployAgent(t, cp)
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
