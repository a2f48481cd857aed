package kubetest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/kube"
)

// LoadAnnotation holds a pod's `headroom load` arguments (space
// separated): the stand-in kubelet runs them in the pod's cgroup.
const LoadAnnotation = "headroom.test/load"

// NoCgroupAnnotation, set to "true", makes the stand-in kubelet leave the
// pod without a cgroup (a pod the agent cannot find).
const NoCgroupAnnotation = "headroom.test/no-cgroup"

// LimitDelayAnnotation, a duration, makes the stand-in kubelet write the
// pod cgroup's memory limit that long after making the cgroup: a real
// kubelet makes it, then sets it, and an agent may come in between.
const LimitDelayAnnotation = "headroom.test/limit-delay"

// Kubelet stands in for the kubelet of a kwok node, for memory only: for
// each pod bound to the node it creates the pod's cgroup in the kubelet's
// layout (memory limit = the pod's), runs the pod's `headroom load` in it,
// and when the pod is deleted (or marked for deletion) stops the
// processes and removes the cgroup. kwok runs the pods' API lifecycle.
type Kubelet struct {
	Layout kube.Layout
	mount  string
	bin    string
	core   corev1client.CoreV1Interface
	t      testing.TB

	mu      sync.Mutex
	running map[types.UID]*podProc
	created map[string]time.Time // when each pod's cgroup was made
}

type podProc struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartKubelet runs the stand-in for node until the test ends; pods' cgroups
// go under layout in the v1 memory hierarchy at mount.
func StartKubelet(t testing.TB, core corev1client.CoreV1Interface, node string, layout kube.Layout, mount, headroomBin string) *Kubelet {
	k := &Kubelet{Layout: layout, mount: mount, bin: headroomBin, core: core, t: t,
		running: map[types.UID]*podProc{}, created: map[string]time.Time{}}
	lw := cache.NewListWatchFromClient(core.RESTClient(), "pods", corev1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.sync(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) {
			k.sync(obj.(*corev1.Pod))
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				go k.stop(p, false)
			}
		},
	})
	stop := make(chan struct{})
	go inf.Run(stop)
	t.Cleanup(func() {
		close(stop)
		k.mu.Lock()
		procs := make([]*podProc, 0, len(k.running))
		for _, p := range k.running {
			procs = append(procs, p)
		}
		k.mu.Unlock()
		for _, p := range procs {
			k.kill(p, 2*time.Second)
		}
	})
	cache.WaitForCacheSync(stop, inf.HasSynced)
	return k
}

func (k *Kubelet) sync(p *corev1.Pod) {
	if p.DeletionTimestamp != nil || kube.Terminal(p) {
		go k.stop(p, true)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.running[p.UID]; ok || p.Annotations[NoCgroupAnnotation] == "true" {
		return
	}
	dir := filepath.Join(k.mount, k.Layout.PodCgroup(kube.QOSClass(p), p.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		k.t.Errorf("kubelet: pod %s: %v", p.Name, err)
		return
	}
	k.created[kube.WorkloadName(p)] = time.Now()
	var limit int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			limit += q.Value()
		} else {
			limit = 0
			break
		}
	}
	if limit > 0 {
		if d, err := time.ParseDuration(p.Annotations[LimitDelayAnnotation]); err == nil {
			time.Sleep(d) // the gap between mkdir and the limit, on purpose
		}
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			k.t.Errorf("kubelet: pod %s memory limit: %v", p.Name, err)
		}
	}
	pp := &podProc{dir: dir, done: make(chan struct{})}
	k.running[p.UID] = pp
	args := strings.Fields(p.Annotations[LoadAnnotation])
	if len(args) == 0 {
		close(pp.done)
		return
	}
	cmd := cgroup.Command(dir, k.bin, append([]string{"load"}, args...)...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		k.t.Errorf("kubelet: pod %s: start load: %v", p.Name, err)
		close(pp.done)
		return
	}
	pp.cmd = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
		cmd.Wait()
		close(pp.done)
	}()
}

// stop ends a pod's processes (SIGTERM, SIGKILL after the deletion's
// grace period, 2 s if it has none), removes its cgroup and, when the pod
// was only marked for deletion, finishes the deletion as the kubelet does.
func (k *Kubelet) stop(p *corev1.Pod, finalize bool) {
	k.mu.Lock()
	pp, ok := k.running[p.UID]
	delete(k.running, p.UID)
	k.mu.Unlock()
	grace := 2 * time.Second
	if g := p.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		grace = time.Duration(*g) * time.Second
	}
	if ok {
		k.kill(pp, grace)
	}
	if finalize {
		zero := int64(0)
		k.core.Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &p.UID}})
	}
}

func (k *Kubelet) kill(pp *podProc, grace time.Duration) {
	if pp.cmd != nil {
		pp.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pp.done:
		case <-time.After(grace):
			pp.cmd.Process.Kill()
			<-pp.done
		}
	}
	if g, err := cgroup.OpenAt(cgroup.V1, k.mount, strings.TrimPrefix(pp.dir, k.mount)); err == nil {
		cgroup.Remove(g, time.Second)
	}
}

// Created returns when a pod's cgroup was made.
func (k *Kubelet) Created(name string) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.created[name]
	return at, ok
}
