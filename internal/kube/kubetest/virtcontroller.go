package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/headroom-dev/headroom/internal/calc"
	"github.com/headroom-dev/headroom/internal/kubevirt"
)

// VirtController stands in for KubeVirt's virt-controller, for the API
// objects: a VirtualMachine with runStrategy Always gets its
// VirtualMachineInstance, and every VMI its virt-launcher pod on the node
// its nodeSelector names, with the memory request KubeVirt v1.6 computes
// (internal/calc). Both are owned (the garbage collector deletes them with
// their owner). The VMIs' phases are kwok's stages' business; kwok runs
// the pods. And it stands in for the guest: once a VMI is Running, its
// cloud-init user data runs as a shell script on this machine until the
// VMI is deleted.
type VirtController struct {
	dyn     dynamic.Interface
	cs      kubernetes.Interface
	mu      sync.Mutex
	started map[types.UID]bool // VMIs with a pod, VMs with a VMI
	errs    []string
	pods    []*corev1.Pod
	guests  map[types.UID]*exec.Cmd
	logDir  string
	ran     int
}

// GuestsRun is how many guests' user data it ran; GuestsLeft how many
// still run.
func (vc *VirtController) GuestsRun() int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return vc.ran
}

// GuestsLeft is how many guests still run.
func (vc *VirtController) GuestsLeft() int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return len(vc.guests)
}

// Pods are the virt-launcher pods it created, in order.
func (vc *VirtController) Pods() []*corev1.Pod {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return append([]*corev1.Pod(nil), vc.pods...)
}

// retry forgets uid, so the object's next update event tries again (a new
// namespace's default service account, which pods need, comes a moment
// after the namespace).
func (vc *VirtController) retry(uid types.UID) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	delete(vc.started, uid)
}

// StartVirtController runs the stand-in until the test ends.
func StartVirtController(t testing.TB, cp *ControlPlane) *VirtController {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.RESTConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	vc := &VirtController{dyn: dyn, cs: cp.Clientset(t), started: map[types.UID]bool{}, guests: map[types.UID]*exec.Cmd{}, logDir: t.TempDir()}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	ctx, cancel := context.WithCancel(context.Background())
	handle := func(f func(context.Context, *unstructured.Unstructured) error) cache.ResourceEventHandlerFuncs {
		do := func(o any) {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil {
				if err := f(ctx, u); err != nil && ctx.Err() == nil {
					vc.mu.Lock()
					vc.errs = append(vc.errs, err.Error())
					vc.mu.Unlock()
				}
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: do, UpdateFunc: func(_, o any) { do(o) }}
	}
	factory.ForResource(kubevirt.VMResource).Informer().AddEventHandler(handle(vc.syncVM))
	factory.ForResource(kubevirt.VMIResource).Informer().AddEventHandler(handle(vc.syncVMI))
	factory.ForResource(kubevirt.VMIResource).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o any) {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil {
				vc.startGuest(u)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if u, ok := o.(*unstructured.Unstructured); ok {
				vc.stopGuest(u.GetUID())
			}
		},
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		vc.mu.Lock()
		uids := make([]types.UID, 0, len(vc.guests))
		for uid := range vc.guests {
			uids = append(uids, uid)
		}
		vc.mu.Unlock()
		for _, uid := range uids {
			vc.stopGuest(uid)
		}
		vc.mu.Lock()
		defer vc.mu.Unlock()
		for _, e := range vc.errs {
			t.Errorf("stand-in virt-controller: %s", e)
		}
	})
	return vc
}

// first reports whether uid is seen for the first time (and marks it).
func (vc *VirtController) first(uid types.UID) bool {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.started[uid] {
		return false
	}
	vc.started[uid] = true
	return true
}

func owner(u *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// startGuest runs a Running VMI's cloud-init user data, once.
func (vc *VirtController) startGuest(vmi *unstructured.Unstructured) {
	if phase, _, _ := unstructured.NestedString(vmi.Object, "status", "phase"); phase != "Running" {
		return
	}
	vols, _, _ := unstructured.NestedSlice(vmi.Object, "spec", "volumes")
	userData := ""
	for _, v := range vols {
		if ud, ok, _ := unstructured.NestedString(v.(map[string]any), "cloudInitNoCloud", "userData"); ok {
			userData = ud
		}
	}
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if userData == "" || vc.guests[vmi.GetUID()] != nil || vc.started["guest-"+vmi.GetUID()] {
		return
	}
	vc.started["guest-"+vmi.GetUID()] = true
	log, err := os.Create(filepath.Join(vc.logDir, vmi.GetName()+".log"))
	if err != nil {
		vc.errs = append(vc.errs, err.Error())
		return
	}
	tmp, err := os.MkdirTemp(vc.logDir, vmi.GetName()+"-tmp-")
	if err != nil {
		vc.errs = append(vc.errs, err.Error())
		log.Close()
		return
	}
	cmd := exec.Command("sh", "-c", userData)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own /tmp, as a guest has: what the script leaves goes with the test.
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		vc.errs = append(vc.errs, fmt.Sprintf("guest %s: %v", vmi.GetName(), err))
		return
	}
	vc.guests[vmi.GetUID()] = cmd
	vc.ran++
	uid := vmi.GetUID()
	go func() {
		cmd.Wait()
		log.Close()
		vc.mu.Lock()
		if vc.guests[uid] == cmd {
			delete(vc.guests, uid)
		}
		vc.mu.Unlock()
	}()
}

// stopGuest ends a deleted VMI's guest (its whole process group).
func (vc *VirtController) stopGuest(uid types.UID) {
	vc.mu.Lock()
	cmd := vc.guests[uid]
	delete(vc.guests, uid)
	vc.mu.Unlock()
	if cmd != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// syncVM creates a running VM's VMI from its template, as virt-controller.
func (vc *VirtController) syncVM(ctx context.Context, vm *unstructured.Unstructured) error {
	if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Always" || !vc.first(vm.GetUID()) {
		return nil
	}
	tmpl, _, _ := unstructured.NestedMap(vm.Object, "spec", "template")
	vmi := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{}, "spec": tmpl["spec"]}}
	vmi.SetName(vm.GetName())
	vmi.SetNamespace(vm.GetNamespace())
	labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
	labels["vm.kubevirt.io/name"] = vm.GetName()
	vmi.SetLabels(labels)
	vmi.SetOwnerReferences([]metav1.OwnerReference{owner(vm)})
	_, err := vc.dyn.Resource(kubevirt.VMIResource).Namespace(vm.GetNamespace()).Create(ctx, vmi, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) { // its namespace is going
		return nil
	}
	return err
}

// syncVMI creates a VMI's virt-launcher pod, as virt-controller.
func (vc *VirtController) syncVMI(ctx context.Context, vmi *unstructured.Unstructured) error {
	if !vc.first(vmi.GetUID()) {
		return nil
	}
	guest, _, _ := unstructured.NestedString(vmi.Object, "spec", "domain", "memory", "guest")
	q, err := resource.ParseQuantity(guest)
	if err != nil {
		return fmt.Errorf("VMI %s: memory.guest %q: %v", vmi.GetName(), guest, err)
	}
	cores, _, _ := unstructured.NestedInt64(vmi.Object, "spec", "domain", "cpu", "cores")
	req, err := calc.Compute(calc.Versions["v1.6"], calc.Shape{GuestMemoryBytes: uint64(q.Value()), CPUs: int(max(cores, 1)), OvercommitPercent: 100})
	if err != nil {
		return fmt.Errorf("VMI %s: %v", vmi.GetName(), err)
	}
	node, _, _ := unstructured.NestedString(vmi.Object, "spec", "nodeSelector", "kubernetes.io/hostname")
	suffix := make([]byte, 3)
	rand.Read(suffix)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + vmi.GetName() + "-" + strings.ToLower(hex.EncodeToString(suffix)), Namespace: vmi.GetNamespace(),
			Labels:          map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": string(vmi.GetUID())},
			OwnerReferences: []metav1.OwnerReference{owner(vmi)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher:v1.6.0",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceMemory: *resource.NewQuantity(req.PodMemoryRequestBytes, resource.BinarySI)}}}}},
	}
	created, err := vc.cs.CoreV1().Pods(vmi.GetNamespace()).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		vc.retry(vmi.GetUID())
		return nil
	}
	if err != nil {
		return err
	}
	vc.mu.Lock()
	vc.pods = append(vc.pods, created)
	vc.mu.Unlock()
	return nil
}
