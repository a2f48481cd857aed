package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
)

// Evictor evicts pods through the Eviction API (policy/v1), so
// PodDisruptionBudgets hold and KubeVirt can turn an eviction into a live
// migration. It never deletes a pod or touches its finalizers: a pod that
// does not leave within the eviction deadline is given up on and the next
// candidate is chosen.
type Evictor struct {
	client *Client
	source *Source
	events *Events
	log    *slog.Logger
}

// NewEvictor evicts the source's pods.
func NewEvictor(c *Client, s *Source, ev *Events, log *slog.Logger) *Evictor {
	return &Evictor{client: c, source: s, events: ev, log: log}
}

// Begin creates the Eviction, within ctx (the agent runs it beside its
// loop, with a timeout). Accepted (201) and "in progress" (429 from an
// admission webhook such as KubeVirt's, which migrates the VM instead)
// both return nil: Finish waits for the pod to leave. A refusal by a
// PodDisruptionBudget, a pod already replaced, an unreachable apiserver or
// any other error is a refusal: the pod is backed off and the agent
// chooses the next candidate at once.
func (e *Evictor) Begin(ctx context.Context, t agent.Target) (string, error) {
	p := e.source.Pod(t.Name)
	if p == nil {
		return "", nil // already gone: Finish reports it
	}
	uid := p.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	err := e.client.Evict(ctx, ev)
	switch {
	case err == nil:
		e.events.Pod(p, corev1.EventTypeWarning, "Evicting", "headroom evicts the pod to relieve the node's memory: "+t.Reason)
		return "", nil
	case apierrors.IsNotFound(err):
		return "", nil
	case apierrors.IsTooManyRequests(err) && DisruptionBudgetRefusal(err):
		e.events.Pod(p, corev1.EventTypeWarning, "EvictionBlocked", "headroom's eviction was refused by a PodDisruptionBudget: "+err.Error())
		return "", fmt.Errorf("refused by a PodDisruptionBudget: %w", err)
	case apierrors.IsTooManyRequests(err):
		// An admission webhook (KubeVirt's evacuation) took the request
		// and works on it: in progress, not a failure.
		e.events.Pod(p, corev1.EventTypeNormal, "EvictionInProgress", "headroom asked the pod to leave; the eviction is in progress: "+err.Error())
		e.log.Info("eviction in progress", "pod", t.Name, "answer", err.Error())
		return "eviction in progress: " + err.Error(), nil
	case mayHaveArrived(err):
		// The apiserver may have taken the request and not answered (it
		// hangs, or answers after the timeout): as a refusal the next
		// candidate would go too, and both pods would leave. Wait for this
		// one as if accepted; the deadline bounds it.
		e.log.Warn("eviction unanswered; waiting for the pod as if it was accepted", "pod", t.Name, "err", err)
		return "eviction request unanswered (" + err.Error() + "): waited for as if accepted", nil
	}
	return "", fmt.Errorf("create eviction for %s: %w", t.Name, err)
}

// mayHaveArrived: err (from creating an Eviction) leaves open whether the
// apiserver took the request: a timeout or a connection lost mid-request,
// not an answer of the API's, nor a connection never made.
func mayHaveArrived(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) || errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.As(err, &netErr) && netErr.Timeout()
}

// DisruptionBudgetRefusal tells a 429 that refuses the eviction (a
// PodDisruptionBudget allows no disruption now) from one that accepted it
// as in progress.
func DisruptionBudgetRefusal(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	st := status.Status()
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				return true
			}
		}
	}
	return strings.Contains(st.Message, "disruption budget")
}

// Finish waits until the pod is gone from the API and its cgroup holds no
// process, or ctx (the eviction deadline, or the agent's stop) ends. It
// forces nothing: the kubelet does, after the pod's grace period.
func (e *Evictor) Finish(ctx context.Context, t agent.Target) policy.EvictionOutcome {
	out := func(result, note string) policy.EvictionOutcome {
		return policy.EvictionOutcome{Workload: t.Name, Result: result, Seconds: time.Since(t.SignaledAt).Seconds(), Err: note}
	}
	ended := func(note string) policy.EvictionOutcome {
		if agent.Interrupted(ctx) {
			return out(policy.EvictionInterrupted, note)
		}
		return out(policy.EvictionFailed, note)
	}
	if p := e.source.Pod(t.Name); p != nil {
		select {
		case <-e.source.Gone(t.Name, p.UID):
		case <-ctx.Done():
			return ended(fmt.Sprintf("pod still bound to the node after %.0f s (a disruption budget, a migration or a finalizer holds it); it was not deleted",
				time.Since(t.SignaledAt).Seconds()))
		}
	}
	if t.Group == nil || cgroup.WaitEmpty(ctx, t.Group, 50*time.Millisecond) {
		return out(policy.EvictedGracefully, "")
	}
	n, _ := cgroup.CountProcesses(t.Group)
	return ended(fmt.Sprintf("pod deleted but %d processes are left in its cgroup", n))
}
