// Package podrequest is a pod's memory request as the kubelet and the
// scheduler count it, from its containers' requests: the arithmetic
// alone, free of the Kubernetes API types (internal/kube reads them into
// it), so that it is fuzzed without building client-go.
package podrequest

// InitContainer is an init container's memory request and whether it is
// a sidecar (restartPolicy Always: it keeps running beside the pod's
// containers).
type InitContainer struct {
	RequestBytes uint64
	Sidecar      bool
}

// MemoryBytes is the pod's memory request: the larger of the sum over its
// containers and sidecars and the largest regular init container with
// the sidecars started before it running beside it, plus the pod's
// overhead.
func MemoryBytes(containerBytes []uint64, initContainers []InitContainer, overheadBytes uint64) uint64 {
	var sum, sidecars, initMax uint64
	for _, b := range containerBytes {
		sum += b
	}
	for _, c := range initContainers {
		if c.Sidecar {
			sidecars += c.RequestBytes
			continue
		}
		initMax = max(initMax, c.RequestBytes+sidecars)
	}
	return max(sum+sidecars, initMax) + overheadBytes
}
