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
func Resolve(kc agent.KubernetesConfig) (SourceConfig, error) {
	v, mount, err := cgroup.Find()
	if err != nil {
		return SourceConfig{}, err
	}
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

// Attach makes a's workloads the node's pods, its evictions Eviction API
// requests and its pressure a node taint and condition, and starts
// watching (the agent runs from the start; pods join once listed).
// Everything stops with ctx.
func Attach(ctx context.Context, a *agent.Agent, kc agent.KubernetesConfig, sc SourceConfig, log *slog.Logger) error {
	rc, err := RESTConfig(kc.Kubeconfig)
	if err != nil {
		return err
	}
	clients, err := NewClient(rc)
	if err != nil {
		return err
	}
	src, err := NewSource(clients, sc, log)
	if err != nil {
		return err
	}
	if err := a.RegisterCollectors(src.Collectors()...); err != nil {
		return err
	}
	events := NewEvents(ctx, clients, sc.NodeName, log)
	a.SetSource(src)
	a.SetEvictor(NewEvictor(clients, src, events, log))
	a.SetPressureReporter(NewNodePressure(ctx, clients, sc.NodeName, log))
	src.Start(ctx, 10*time.Second)
	return nil
}
