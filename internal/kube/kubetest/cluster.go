package kubetest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/testenv"
)

// AddNode creates a Node kwok keeps Ready, with this memory and room for
// maxPods pods.
func AddNode(t testing.TB, core corev1client.CoreV1Interface, name string, memoryBytes int64, maxPods int64) *corev1.Node {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: *resource.NewQuantity(memoryBytes, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
	n, err := core.Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	return n
}

// Namespace creates a namespace and waits for its default service account
// (pods are admitted only once it exists).
func Namespace(t testing.TB, core corev1client.CoreV1Interface, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	w, err := core.ServiceAccounts(name).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := core.ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
		return
	}
	select {
	case <-w.ResultChan():
	case <-time.After(30 * time.Second):
		t.Fatalf("namespace %s: no default service account after 30 s (is the controller manager running?)", name)
	}
}

// Kubectl runs the control plane's kubectl as the admin; stdin may be "".
func (cp *ControlPlane) Kubectl(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := cp.kubectl(args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl is the control plane's kubectl as the admin, with args.
func (cp *ControlPlane) kubectl(args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(cp.Bin, "kubectl"), append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
}

// waitEstablished waits until every CRD that kubectl get's args name is
// Established. kubectl wait does not wait on a CRD created a moment ago
// whose status has no conditions yet: it fails at once (".status.conditions
// accessor error: <nil> is of the type <nil>").
func (cp *ControlPlane) waitEstablished(t testing.TB, timeout time.Duration, args ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// stdout alone: a warning on stderr is not JSON.
		out, err := cp.kubectl(append([]string{"get", "-o", "json"}, args...)...).Output()
		pending := strings.Join(args, " ")
		if err == nil {
			pending = notEstablished(out)
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRDs not established within %s: %s (last error: %v)", timeout, pending, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// notEstablished names the CRDs in kubectl get's JSON (one object or a
// List) without an Established condition that is True; "" when there are
// none such, and the output itself when it is not such JSON.
func notEstablished(getJSON []byte) string {
	type crd struct {
		Metadata struct{ Name string }
		Status   struct {
			Conditions []struct{ Type, Status string }
		}
	}
	var got struct {
		Kind  string
		Items []crd
		crd
	}
	if err := json.Unmarshal(getJSON, &got); err != nil {
		return "unreadable: " + err.Error()
	}
	crds := []crd{got.crd}
	if got.Kind == "List" {
		crds = got.Items
	}
	var pending []string
	for _, c := range crds {
		established := false
		for _, cond := range c.Status.Conditions {
			established = established || cond.Type == "Established" && cond.Status == "True"
		}
		if !established {
			pending = append(pending, c.Metadata.Name)
		}
	}
	return strings.Join(pending, ", ")
}

// Documents splits a multi-document YAML stream into its objects.
func Documents(t testing.TB, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, doc := range strings.Split(stream, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("parse YAML document: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
	return out
}

// InstallServiceMonitorCRD creates the Prometheus operator's ServiceMonitor
// CRD and returns once kubectl can map the kind: the apiserver publishes
// a new group in its discovery a moment after the CRD is established, and
// a kubectl apply of a ServiceMonitor in that moment fails ("ensure CRDs
// are installed first").
func (cp *ControlPlane) InstallServiceMonitorCRD(t testing.TB) {
	t.Helper()
	if out, err := cp.Kubectl(t, ServiceMonitorCRD(t), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("ServiceMonitor CRD: %v\n%s", err, out)
	}
	cp.waitEstablished(t, 30*time.Second, "crd/servicemonitors.monitoring.coreos.com")
	testenv.Eventually(t, 30*time.Second, func() bool {
		out, err := cp.Kubectl(t, "", "api-resources", "--api-group", "monitoring.coreos.com", "-o", "name")
		return err == nil && strings.Contains(out, "servicemonitors.monitoring.coreos.com")
	})
}

// ServiceMonitorCRD returns the Prometheus operator's own ServiceMonitor
// CRD (from its Go module, fetched through the module proxy).
func ServiceMonitorCRD(t testing.TB) string {
	t.Helper()
	const mod = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", mod, err)
	}
	var info struct{ Dir string }
	if err := yaml.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: no directory in %s", mod, out)
	}
	b, err := os.ReadFile(filepath.Join(info.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
