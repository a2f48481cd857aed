// Package kubevirt is density's KubeVirt backend: it creates
// VirtualMachineInstances (or VirtualMachines) from a template at a chosen
// request rate, times each one's phases (Pending, Scheduling, Scheduled,
// Running, ready) from watch events, explains those that never run from
// their conditions and events, and deletes everything it created.
package kubevirt

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// KubeVirt's API group, version and the resources density creates.
var (
	VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	VMResource  = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}
)

// Object kinds density creates.
const (
	KindVMI = "VirtualMachineInstance"
	KindVM  = "VirtualMachine"
)

// Labels density puts on every object it creates (and on the VMI a
// VirtualMachine's template makes).
const (
	// LabelRun identifies one density run; the watch and cleanup select on it.
	LabelRun = "headroom.io/density-run"
	// LabelStep is the step that created the object.
	LabelStep = "headroom.io/step"
	// LabelIndex is the object's number within its step, from 1.
	LabelIndex = "headroom.io/index"
)

// ParseObjectKind maps --kubevirt-object (vmi or vm) to a kind.
func ParseObjectKind(s string) (string, error) {
	switch strings.ToLower(s) {
	case "vmi", "virtualmachineinstance":
		return KindVMI, nil
	case "vm", "virtualmachine":
		return KindVM, nil
	}
	return "", fmt.Errorf("%q is not an object kind; want vmi or vm", s)
}

// TemplateOptions shape the built-in template.
type TemplateOptions struct {
	Kind          string // KindVMI or KindVM
	GuestMemory   string // a Kubernetes quantity, e.g. 512Mi
	CPUs          int
	ContainerDisk string
	NodeSelector  map[string]string
	// UserData is cloud-init user data (the workload); "" for none.
	UserData string
}

// DefaultContainerDisk is the built-in template's guest: KubeVirt's own
// small demo disk, as in the project's density tests.
const DefaultContainerDisk = "quay.io/kubevirt/cirros-container-disk-demo:v1.6.0"

// BuiltinTemplate is the object density creates when no --template is
// given: a VMI (or a VM that runs one) with the guest memory, CPUs, a
// containerDisk, the node selector and, when set, cloud-init user data.
func BuiltinTemplate(o TemplateOptions) *unstructured.Unstructured {
	spec := map[string]any{
		"domain": map[string]any{
			"cpu":       map[string]any{"cores": int64(max(o.CPUs, 1))},
			"memory":    map[string]any{"guest": o.GuestMemory},
			"resources": map[string]any{},
			"devices": map[string]any{
				"disks": []any{map[string]any{"name": "containerdisk", "disk": map[string]any{"bus": "virtio"}}},
			},
		},
		"terminationGracePeriodSeconds": int64(0),
		"volumes":                       []any{map[string]any{"name": "containerdisk", "containerDisk": map[string]any{"image": o.ContainerDisk}}},
	}
	if len(o.NodeSelector) > 0 {
		sel := map[string]any{}
		for k, v := range o.NodeSelector {
			sel[k] = v
		}
		spec["nodeSelector"] = sel
	}
	if o.UserData != "" {
		devices := spec["domain"].(map[string]any)["devices"].(map[string]any)
		devices["disks"] = append(devices["disks"].([]any), map[string]any{"name": "cloudinit", "disk": map[string]any{"bus": "virtio"}})
		spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": "cloudinit", "cloudInitNoCloud": map[string]any{"userData": o.UserData}})
	}
	obj := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": KindVMI, "metadata": map[string]any{}, "spec": spec}
	if o.Kind == KindVM {
		obj = map[string]any{"apiVersion": "kubevirt.io/v1", "kind": KindVM, "metadata": map[string]any{},
			"spec": map[string]any{"runStrategy": "Always", "template": map[string]any{"metadata": map[string]any{}, "spec": spec}}}
	}
	return &unstructured.Unstructured{Object: obj}
}

// LoadTemplate reads a VirtualMachineInstance or VirtualMachine from a
// YAML or JSON file.
func LoadTemplate(path string) (*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTemplate(b)
}

// ParseTemplate checks that b is one kubevirt.io/v1 VirtualMachineInstance
// or VirtualMachine (a VM's spec.template must be there).
func ParseTemplate(b []byte) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %v", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("empty template")
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetAPIVersion() != "kubevirt.io/v1" || (u.GetKind() != KindVMI && u.GetKind() != KindVM) {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion kubevirt.io/v1 and kind %s or %s", u.GetAPIVersion(), u.GetKind(), KindVMI, KindVM)
	}
	if _, ok := obj["spec"].(map[string]any); !ok {
		return nil, fmt.Errorf("%s without a spec", u.GetKind())
	}
	if u.GetKind() == KindVM {
		if _, ok, _ := unstructured.NestedMap(obj, "spec", "template", "spec"); !ok {
			return nil, fmt.Errorf("VirtualMachine without spec.template.spec")
		}
	}
	// Instantiate writes names and labels into these: an empty one
	// ("metadata:" alone) is dropped, anything but a mapping refused.
	for _, path := range [][]string{{"metadata", "labels"}, {"metadata"}, {"spec", "template", "metadata", "labels"}, {"spec", "template", "metadata"}} {
		v, found, _ := unstructured.NestedFieldNoCopy(obj, path...)
		switch _, isMap := v.(map[string]any); {
		case !found || isMap:
		case v == nil:
			unstructured.RemoveNestedField(obj, path...)
		default:
			return nil, fmt.Errorf("%s is %v: want a mapping", strings.Join(path, "."), v)
		}
	}
	return u, nil
}

// Instantiate is the template as object index of step in namespace: its
// name, namespace and density's labels set (on a VM also on the VMI it
// makes), anything identifying another object cleared.
func Instantiate(tmpl *unstructured.Unstructured, namespace, runID string, step, index int) *unstructured.Unstructured {
	u := tmpl.DeepCopy()
	name := ObjectName(runID, step, index)
	u.SetName(name)
	u.SetGenerateName("")
	u.SetNamespace(namespace)
	u.SetResourceVersion("")
	u.SetUID("")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	fillUserData(u, name, index)
	labels := map[string]string{LabelRun: runID, LabelStep: strconv.Itoa(step), LabelIndex: strconv.Itoa(index)}
	u.SetLabels(merge(u.GetLabels(), labels))
	if u.GetKind() == KindVM {
		tl, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
		unstructured.SetNestedStringMap(u.Object, merge(tl, labels), "spec", "template", "metadata", "labels")
	}
	return u
}

// fillUserData replaces the workload placeholders in the object's
// cloud-init user data with its name and index.
func fillUserData(u *unstructured.Unstructured, name string, index int) {
	path := []string{"spec", "volumes"}
	if u.GetKind() == KindVM {
		path = []string{"spec", "template", "spec", "volumes"}
	}
	vols, ok, _ := unstructured.NestedSlice(u.Object, path...)
	if !ok {
		return
	}
	r := strings.NewReplacer(WorkerPlaceholder, name, IndexPlaceholder, strconv.Itoa(index))
	for _, v := range vols {
		vol, _ := v.(map[string]any)
		for _, src := range []string{"cloudInitNoCloud", "cloudInitConfigDrive"} {
			if ci, ok := vol[src].(map[string]any); ok {
				if ud, ok := ci["userData"].(string); ok {
					ci["userData"] = r.Replace(ud)
				}
			}
		}
	}
	unstructured.SetNestedSlice(u.Object, vols, path...)
}

// ObjectName names object index of step; the VMI of a VM has the same name.
func ObjectName(runID string, step, index int) string {
	return fmt.Sprintf("density-%s-%d-%d", runID, step, index)
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
