// Package kube puts the agent on a Kubernetes node: the node's pods from a
// pod informer are its workloads (identity, priority, request, protection,
// cgroup), evictions go through the Eviction API, and memory pressure is
// shown on the Node as a taint and a condition. client-go stays in this
// package; the agent sees only its Source, Evictor and PressureReporter.
package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/headroom-dev/headroom/internal/podrequest"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// SystemCriticalPriority is the lowest priority of the system-*-critical
// priority classes (scheduling.SystemCriticalPriority).
const SystemCriticalPriority = 2_000_000_000

// Protection says which pods are never evicted and get no swap.
type Protection struct {
	// Namespace is the agent's own.
	Namespace string
	// Selector matches protected pods by label (nil: none).
	Selector labels.Selector
}

// WorkloadName is the agent's name for a pod: namespace/name.
func WorkloadName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// Metadata is what the agent's policy needs to know of a pod. swap is the
// node's swap mode for pods (SwapAgent, SwapKubelet, SwapOff).
func Metadata(p *corev1.Pod, prot Protection) workloadmeta.Metadata {
	md := workloadmeta.Metadata{
		Name:               WorkloadName(p),
		MemoryRequestBytes: PodMemoryRequestBytes(p),
		Protected:          Protected(p, prot),
	}
	if p.Spec.Priority != nil {
		md.Priority = int(*p.Spec.Priority)
	}
	if !SwapEligible(p) || md.Protected {
		md.SwapRule = policy.SwapNone
	}
	return md
}

// Protected: critical pods (by class or priority), pods in the agent's
// namespace, and pods the selector matches.
func Protected(p *corev1.Pod, prot Protection) bool {
	switch {
	case p.Spec.PriorityClassName == "system-node-critical", p.Spec.PriorityClassName == "system-cluster-critical":
		return true
	case p.Spec.Priority != nil && *p.Spec.Priority >= SystemCriticalPriority:
		return true
	case prot.Namespace != "" && p.Namespace == prot.Namespace:
		return true
	case prot.Selector != nil && !prot.Selector.Empty() && prot.Selector.Matches(labels.Set(p.Labels)):
		return true
	}
	return false
}

// PodMemoryRequestBytes is the pod's memory request as the kubelet and the
// scheduler count it: the larger of the sum over its containers (sidecar
// init containers included) and the largest regular init container, plus
// the pod overhead.
func PodMemoryRequestBytes(p *corev1.Pod) uint64 {
	containers := make([]uint64, len(p.Spec.Containers))
	for i, c := range p.Spec.Containers {
		containers[i] = memoryRequest(c)
	}
	inits := make([]podrequest.InitContainer, len(p.Spec.InitContainers))
	for i, c := range p.Spec.InitContainers {
		inits[i] = podrequest.InitContainer{RequestBytes: memoryRequest(c),
			Sidecar: c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways}
	}
	var overhead uint64
	if q, ok := p.Spec.Overhead[corev1.ResourceMemory]; ok {
		overhead = uint64(q.Value())
	}
	return podrequest.MemoryBytes(containers, inits, overhead)
}

// memoryRequest is a container's memory request; without one, a limit is
// the request (as API defaulting sets it).
func memoryRequest(c corev1.Container) uint64 {
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		return uint64(q.Value())
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		return uint64(q.Value())
	}
	return 0
}

// QOSClass is the pod's QoS class: status.qosClass as the apiserver set it,
// computed from the containers' resources when empty.
func QOSClass(p *corev1.Pod) corev1.PodQOSClass {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass
	}
	all := append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...)
	anyResources, guaranteed := false, true
	for _, c := range all {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				anyResources = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !anyResources:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// SwapEligible follows the kubelet's LimitedSwap: only Burstable pods get
// swap, and only for containers whose memory request is below their limit
// (or that have no limit).
func SwapEligible(p *corev1.Pod) bool {
	if QOSClass(p) != corev1.PodQOSBurstable {
		return false
	}
	for _, c := range p.Spec.Containers {
		req, hasReq := c.Resources.Requests[corev1.ResourceMemory]
		lim, hasLim := c.Resources.Limits[corev1.ResourceMemory]
		if hasReq && (!hasLim || req.Cmp(lim) < 0) {
			return true
		}
	}
	return false
}

// HasMemoryLimit: every container has a memory limit, so the pod's cgroup
// has one.
func HasMemoryLimit(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			return false
		}
	}
	return len(p.Spec.Containers) > 0
}

// Terminal pods hold no memory and are not workloads.
func Terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
