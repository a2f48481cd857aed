package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client makes the agent's few API calls: list and watch pods, create
// Evictions and Events, read and patch its Node. It is a REST client over
// a scheme of core/v1 and policy/v1 only: client-go's typed clientset
// registers every API group, which would more than double the binary
// (it is also the micro-VM guest's /init) and the agent's heap.
type Client struct {
	rest   *rest.RESTClient
	params runtime.ParameterCodec
}

// RESTConfig is the in-cluster configuration (the DaemonSet's service
// account) when kubeconfig is "", else the file's current context.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: not in a pod (%v); give a kubeconfig file (--kubeconfig, kubernetes.kubeconfig)", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// NewClient builds the client for c, identifying as headroom-agent.
func NewClient(c *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := policyv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c = rest.CopyConfig(c)
	c.UserAgent = "headroom-agent"
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	// Protobuf costs a fraction of JSON to decode: the pod watch is most
	// of the agent's API work on a busy node.
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c.ContentType = "application/json"
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &Client{rest: rc, params: runtime.NewParameterCodec(scheme)}, nil
}

// ListPods lists pods in every namespace.
func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	var l corev1.PodList
	err := c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Do(ctx).Into(&l)
	return &l, err
}

// WatchPods watches pods in every namespace.
func (c *Client) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Watch(ctx)
}

// Evict creates the pod's Eviction (policy/v1, the pods/eviction
// subresource).
func (c *Client) Evict(ctx context.Context, ev *policyv1.Eviction) error {
	ev.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.rest.Post().Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

// CreateEvent records an event.
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	ev.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.rest.Post().Namespace(ev.Namespace).Resource("events").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

// GetNode reads a node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	err := c.rest.Get().Resource("nodes").Name(name).Do(ctx).Into(&n)
	return &n, err
}

// PatchNode patches a node ("status" as subresource for its status).
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresource ...string) error {
	return c.rest.Patch(pt).Resource("nodes").Name(name).SubResource(subresource...).Body(data).Do(ctx).Error()
}
