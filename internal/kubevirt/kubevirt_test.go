package kubevirt

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/headroom-dev/headroom/internal/memload"
)

func TestParseTemplate(t *testing.T) {
	for _, c := range []struct {
		name, doc, err string
	}{
		{"vmi", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nspec: {domain: {}}\n", ""},
		{"vm", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {template: {spec: {domain: {}}}}\n", ""},
		{"json", `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","spec":{}}`, ""},
		{"pod", "apiVersion: v1\nkind: Pod\nspec: {}\n", "want apiVersion kubevirt.io/v1"},
		{"old version", "apiVersion: kubevirt.io/v1alpha3\nkind: VirtualMachineInstance\nspec: {}\n", "want apiVersion kubevirt.io/v1"},
		{"no spec", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n", "without a spec"},
		{"vm without template", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {running: true}\n", "spec.template.spec"},
		{"empty", "", "empty template"},
		{"empty metadata", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\nspec: {}\n", ""},
		{"metadata a string", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: x\nspec: {}\n", "metadata is x: want a mapping"},
		{"VM template labels a list", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {template: {metadata: {labels: [a]}, spec: {}}}\n", "spec.template.metadata.labels"},
		{"not yaml", "{{{", "not YAML"},
		{"a list", "- a\n- b\n", "not YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(c.doc))
			if c.err == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

func FuzzParseTemplate(f *testing.F) {
	f.Add([]byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {template: {spec: {domain: {}}}}\n"))
	f.Add([]byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: x, labels: {a: b}}\nspec: {}\n"))
	f.Add([]byte("kind: VirtualMachine\napiVersion: kubevirt.io/v1\nspec: {template: 3}\n"))
	f.Add([]byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {template: {metadata: , spec: {}}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseTemplate(b)
		if err != nil {
			return
		}
		// Whatever parses can be instantiated and carries density's labels.
		o := Instantiate(u, "ns", "abc", 2, 7)
		if o.GetName() != "density-abc-2-7" || o.GetNamespace() != "ns" || o.GetLabels()[LabelIndex] != "7" {
			t.Fatalf("instantiated %s/%s labels %v", o.GetNamespace(), o.GetName(), o.GetLabels())
		}
		if o.GetKind() == KindVM {
			if l, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels"); l[LabelIndex] != "7" {
				t.Fatalf("the VM's VMI template labels %v", l)
			}
		}
	})
}

func TestInstantiate(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(`apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: from-the-file
  generateName: gen-
  uid: 1234
  resourceVersion: "99"
  creationTimestamp: "2025-01-01T00:00:00Z"
  labels: {app: bench}
spec:
  runStrategy: Always
  template:
    metadata: {labels: {tier: vm}}
    spec: {domain: {}}
status: {ready: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	o := Instantiate(tmpl, "bench-ns", "r1", 3, 12)
	if o.GetName() != "density-r1-3-12" || o.GetNamespace() != "bench-ns" || o.GetGenerateName() != "" || o.GetUID() != "" || o.GetResourceVersion() != "" {
		t.Errorf("identity not replaced: %v", o.Object["metadata"])
	}
	if _, ok := o.Object["status"]; ok {
		t.Errorf("status kept")
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "metadata", "creationTimestamp"); ok {
		t.Errorf("creationTimestamp kept")
	}
	want := map[string]string{"app": "bench", LabelRun: "r1", LabelStep: "3", LabelIndex: "12"}
	for k, v := range want {
		if o.GetLabels()[k] != v {
			t.Errorf("label %s = %q, want %q", k, o.GetLabels()[k], v)
		}
	}
	tl, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
	if tl["tier"] != "vm" || tl[LabelRun] != "r1" || tl[LabelIndex] != "12" {
		t.Errorf("the VM's VMI template labels %v lack density's", tl)
	}
	if tmpl.GetName() != "from-the-file" || tmpl.GetLabels()[LabelRun] != "" {
		t.Errorf("the template itself was changed")
	}
}

func TestBuiltinTemplate(t *testing.T) {
	vmi := BuiltinTemplate(TemplateOptions{Kind: KindVMI, GuestMemory: "512Mi", CPUs: 2, ContainerDisk: "img", NodeSelector: map[string]string{"k": "v"}, UserData: "#cloud-config\n"})
	if _, err := ParseTemplate(mustJSON(t, vmi)); err != nil {
		t.Fatalf("built-in VMI does not parse: %v", err)
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"spec", "domain", "memory", "guest"}, "512Mi"},
		{[]string{"spec", "domain", "cpu", "cores"}, int64(2)},
		{[]string{"spec", "nodeSelector", "k"}, "v"},
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(vmi.Object, c.path...)
		if got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
	vols, _, _ := unstructured.NestedSlice(vmi.Object, "spec", "volumes")
	disks, _, _ := unstructured.NestedSlice(vmi.Object, "spec", "domain", "devices", "disks")
	if len(vols) != 2 || len(disks) != 2 {
		t.Errorf("%d volumes, %d disks; want containerDisk and cloud-init", len(vols), len(disks))
	}
	vm := BuiltinTemplate(TemplateOptions{Kind: KindVM, GuestMemory: "1Gi", CPUs: 1, ContainerDisk: "img"})
	if _, err := ParseTemplate(mustJSON(t, vm)); err != nil {
		t.Fatalf("built-in VM does not parse: %v", err)
	}
	if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Always" {
		t.Errorf("VM runStrategy %q", rs)
	}
}

func mustJSON(t *testing.T, u *unstructured.Unstructured) []byte {
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vmi(phase string, conds ...map[string]any) *unstructured.Unstructured {
	var cs []any
	for _, c := range conds {
		cs = append(cs, c)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "v1"}, "status": map[string]any{"conditions": cs}}}
	if phase != "" {
		unstructured.SetNestedField(u.Object, phase, "status", "phase")
	}
	return u
}

func TestFailureReason(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	unsched := map[string]any{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient memory."}
	notReady := map[string]any{"type": "Ready", "status": "False", "reason": "GuestNotRunning", "message": "Guest VM is not reported as running"}
	for _, c := range []struct {
		name      string
		vmi       *unstructured.Unstructured
		events    []Event
		createErr string
		want      string
	}{
		{"create refused", nil, nil, "admission webhook denied", "create failed: admission webhook denied"},
		{"never seen", nil, nil, "", "never seen in a watch event"},
		{"no phase yet", vmi(""), nil, "", "no phase"},
		{"unschedulable: condition, event with the same message named only", vmi("Scheduling", notReady, unsched),
			[]Event{{Object: "v1", Type: "Warning", Reason: "FailedScheduling", Message: "0/1 nodes are available: 1 Insufficient memory."}}, "",
			"Scheduling; PodScheduled Unschedulable: 0/1 nodes are available: 1 Insufficient memory.; event FailedScheduling"},
		{"failed: newest warning of this object only", vmi("Failed"), []Event{
			{Object: "v1", Type: "Warning", Reason: "SyncFailed", Message: "old", Last: t0},
			{Object: "v1", Type: "Warning", Reason: "SyncFailed", Message: "QEMU monitor: timed out", Last: t0.Add(time.Second)},
			{Object: "v1", Type: "Normal", Reason: "Created", Message: "newer but normal", Last: t0.Add(2 * time.Second)},
			{Object: "v2", Type: "Warning", Reason: "Other", Message: "another VMI", Last: t0.Add(3 * time.Second)},
		}, "", "Failed; event SyncFailed: QEMU monitor: timed out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FailureReason(c.vmi, c.events, c.createErr); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestSummarizeReasons(t *testing.T) {
	got := SummarizeReasons([]string{"b", "a", "b", "c", "d", "b", "a"}, 10, 5*time.Minute)
	want := "7 of 10 not Running within 5m0s: 3× b | 2× a | 1× c (and 1 other reasons)"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestParamsSteps(t *testing.T) {
	p := Params{Deployments: []int{50, 100, 400, 200}}
	if got := p.Steps(); len(got) != 4 {
		t.Errorf("ramp steps %v", got)
	}
	p.BurstOnly = true
	if got := p.Steps(); len(got) != 1 || got[0] != 400 {
		t.Errorf("burst-only steps %v, want [400]", got)
	}
}

func TestParamsValidate(t *testing.T) {
	tmpl := BuiltinTemplate(TemplateOptions{Kind: KindVMI, GuestMemory: "1Gi", ContainerDisk: "x"})
	ok := Params{Deployments: []int{1}, Template: tmpl, QPS: 20, Burst: 20, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(*Params)
		want string
	}{
		{func(p *Params) { p.QPS = 0 }, "--qps"},
		{func(p *Params) { p.Burst = 0 }, "--burst"},
		{func(p *Params) { p.Timeout = 0 }, "--timeout"},
		{func(p *Params) { p.Deployments = nil }, "no steps"},
		{func(p *Params) { p.Deployments = []int{3, 0} }, "at least 1"},
		{func(p *Params) { p.Template = nil }, "template"},
	} {
		p := ok
		c.mod(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

func TestParseObjectKind(t *testing.T) {
	for in, want := range map[string]string{"vmi": KindVMI, "VM": KindVM, "VirtualMachineInstance": KindVMI, "pod": ""} {
		got, err := ParseObjectKind(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%q: %q, %v", in, got, err)
		}
	}
}

func TestWorkloadUserData(t *testing.T) {
	w, err := NewWorkload("10.0.0.5:9400", "/bin/true", memload.Params{SizeBytes: 64 << 20, Scan: memload.ScanRandom, StrideBytes: 4096,
		WriteFraction: 0.5, Duration: 30 * time.Second, Content: memload.Content{Kind: memload.ContentRandom}, Seed: 7,
		HugePages: memload.HugePagesNever, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range w.LoadArgs {
		if a == "--seed" {
			t.Errorf("load args carry a fixed seed: %v", w.LoadArgs)
		}
	}
	ud, err := w.UserData()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"curl -fsS -o \"$bin\" http://10.0.0.5:9401/headroom", "'--size' '67108864'", "'--scan' 'random'",
		"--seed $((7 + ${HEADROOM_INDEX}))", "--controller tcp:10.0.0.5:9400", "--worker-id ${HEADROOM_WORKER}"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user data lacks %q:\n%s", want, ud)
		}
	}
	// Per object, the placeholders become its name and index, in a VMI and
	// in a VM's template.
	for _, kind := range []string{KindVMI, KindVM} {
		o := Instantiate(BuiltinTemplate(TemplateOptions{Kind: kind, GuestMemory: "1Gi", ContainerDisk: "x", UserData: ud}), "ns", "r", 2, 5)
		b, _ := o.MarshalJSON()
		if s := string(b); strings.Contains(s, "HEADROOM_") || !strings.Contains(s, "--worker-id density-r-2-5") || !strings.Contains(s, "$((7 + 5))") {
			t.Errorf("%s: placeholders not filled: %s", kind, s)
		}
	}
	for _, bad := range []string{"nohost", ":9400", "h:0", "h:65535", "h:x"} {
		if _, err := NewWorkload(bad, "/bin/true", memload.Params{SizeBytes: 1 << 20, Scan: memload.ScanSeq, StrideBytes: 4096, Duration: time.Second,
			HugePages: memload.HugePagesNever, Interval: time.Second}); err == nil {
			t.Errorf("address %q accepted", bad)
		}
	}
}
