package kube

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
)

// Resolve turns the agent's Kubernetes settings into the source's: the
// memory hierarchy, the kubelet's cgroup layout (its driver detected when
// not given) and the protection rules. Nothing is contacted.
func Resolve(kc agent.KubernetesConfig, h cgroup.Hierarchy) (SourceConfig, error) {
	v, mount := h.Version, h.Mount
	var err error
	root := path.Clean("/" + kc.CgroupRoot)
	driver := kc.CgroupDriver
	if driver == "" {
		if driver, err = DetectDriver(mount, root); err != nil {
			return SourceConfig{}, err
		}
	}
	sel := labels.Nothing()
	if kc.ProtectedSelector != "" {
		if sel, err = labels.Parse(kc.ProtectedSelector); err != nil {
			return SourceConfig{}, fmt.Errorf("kubernetes.protectedSelector: %w", err)
		}
	}
	return SourceConfig{NodeName: kc.NodeName, Layout: Layout{Root: root, Driver: driver}, Version: v, Mount: mount,
		Protection: Protection{Namespace: kc.Namespace, Selector: sel}, Swap: kc.Swap}, nil
}

// Scope is the agent's scope on the node: the kubepods cgroup when the
// configuration left it at the host ("/"), else what it names.
func (sc SourceConfig) Scope(configured string) string {
	if path.Clean("/"+configured) == "/" {
		return sc.Layout.Kubepods()
	}
	return configured
}

// Attach makes a's workloads the node's pods, its evictions Eviction API
// requests and its pressure a node taint and condition, and starts
// watching (the agent runs from the start; pods join once listed).
// Everything stops with ctx; the returned wait blocks until the node's
// marks are cleared (a few seconds at most).
func Attach(ctx context.Context, a *agent.Agent, kc agent.KubernetesConfig, sc SourceConfig, log *slog.Logger) (wait func(), err error) {
	rc, err := RESTConfig(kc.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := NewClient(rc)
	if err != nil {
		return nil, err
	}
	src, err := NewSource(client, sc, log)
	if err != nil {
		return nil, err
	}
	if err := a.RegisterCollectors(src.Collectors()...); err != nil {
		return nil, err
	}
	events := NewEvents(ctx, client, sc.NodeName, log)
	pressure := NewNodePressure(ctx, client, sc.NodeName, log)
	a.SetSource(src)
	a.SetEvictor(NewEvictor(client, src, events, log))
	a.SetPressureReporter(pressure)
	src.Start(ctx, 10*time.Second)
	return func() { <-pressure.Stopped() }, nil
}
