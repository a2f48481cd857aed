package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Events records Kubernetes Events about pods and the node, from its own
// goroutine: a slow apiserver never holds the caller.
type Events struct {
	client *Client
	node   string
	log    *slog.Logger
	queue  chan *corev1.Event
}

// NewEvents starts the sender; it stops with ctx.
func NewEvents(ctx context.Context, c *Client, node string, log *slog.Logger) *Events {
	e := &Events{client: c, node: node, log: log, queue: make(chan *corev1.Event, 64)}
	go e.run(ctx)
	return e
}

// Pod records an event on a pod.
func (e *Events) Pod(p *corev1.Pod, kind, reason, message string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Reason: reason, Message: message, Type: kind,
		Source:         corev1.EventSource{Component: "headroom-agent", Host: e.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "headroom.io/agent", ReportingInstance: "headroom-agent-" + e.node,
	}
	select {
	case e.queue <- ev:
	default:
		e.log.Warn("event dropped: the apiserver is not keeping up", "pod", WorkloadName(p), "reason", reason)
	}
}

func (e *Events) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := e.client.CreateEvent(c, ev)
			cancel()
			if err != nil {
				e.log.Warn("cannot record event", "object", fmt.Sprintf("%s/%s", ev.Namespace, ev.InvolvedObject.Name), "reason", ev.Reason, "err", err)
			}
		}
	}
}
