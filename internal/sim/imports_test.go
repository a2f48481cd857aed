package sim

import (
	"os/exec"
	"strings"
	"testing"
)

// machinePackages are headroom's packages that read or change the machine
// (cgroups, /proc, swap areas, devices, processes, VMs, clusters). The
// model runs anywhere, on any figures: it reaches none of them, directly or
// through what it imports. Measuring lives in internal/sim/machine.
var machinePackages = []string{"agent", "cgroup", "host", "probe", "loadrun", "loadctl", "swaptier",
	"microvm", "qmp", "libvirt", "kube", "kubevirt", "density", "testenv", "sim/machine", "memload"}

func TestModelImportsNothingThatTouchesTheMachine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/headroom-dev/headroom/internal/"
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list named %d packages (%q): the check would pass on nothing", len(deps), deps)
	}
	for _, d := range deps {
		for _, m := range machinePackages {
			if d == module+m {
				t.Errorf("the model imports %s, which touches the machine", d)
			}
		}
	}
}
