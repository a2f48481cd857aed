package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-dev/headroom/internal/testenv"
)

// KubeVirtCRDs returns a file with KubeVirt's own VirtualMachineInstance
// and VirtualMachine CRDs, as its virt-operator generates them, at the
// version hack/kubevirt-crds.sh pins (built once into the cache).
func KubeVirtCRDs(t testing.TB) string {
	t.Helper()
	if f := os.Getenv("HEADROOM_KUBEVIRT_CRDS"); f != "" {
		return f
	}
	cmd := exec.Command(filepath.Join(testenv.ModuleRoot(t), "hack", "kubevirt-crds.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/kubevirt-crds.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}
