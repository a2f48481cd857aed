package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

	mu sync.Mutex
	// unanswered are the pods whose Eviction went unanswered (it may or
	// may not have arrived): Finish sends it again while the pod is not
	// terminating.
	unanswered map[string]bool
}

// resendEvery is how often an unanswered Eviction is checked on and, while
// the pod is not terminating, sent again.
const resendEvery = 2 * time.Second

// NewEvictor evicts the source's pods.
func NewEvictor(c *Client, s *Source, ev *Events, log *slog.Logger) *Evictor {
	return &Evictor{client: c, source: s, events: ev, log: log, unanswered: map[string]bool{}}
}

// evict creates p's Eviction, for p's UID only.
func (e *Evictor) evict(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	return e.client.Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
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
	err := e.evict(ctx, p)
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
		// one as if accepted, and send it again once the API answers and
		// the pod is not terminating (Finish); the deadline bounds it.
		e.log.Warn("eviction unanswered; waiting for the pod as if it was accepted, sending it again while it is not terminating",
			"pod", t.Name, "err", err)
		e.mu.Lock()
		e.unanswered[t.Name] = true
		e.mu.Unlock()
		return "eviction request unanswered (" + err.Error() + "): waited for as if accepted", nil
	}
	return "", fmt.Errorf("create eviction for %s: %w", t.Name, err)
}

// resend checks on an Eviction that went unanswered: done once the pod is
// terminating, gone or replaced (the Eviction, or another, arrived) or the
// Eviction sent again was accepted; an error when it was refused by a
// PodDisruptionBudget now. Any other failure is tried again.
func (e *Evictor) resend(ctx context.Context, name string, uid types.UID) (done bool, err error) {
	p := e.source.Pod(name)
	if p == nil || p.UID != uid || p.DeletionTimestamp != nil {
		return true, nil
	}
	c, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	switch err := e.evict(c, p); {
	case err == nil, apierrors.IsNotFound(err):
		e.log.Info("eviction sent again and accepted", "pod", name)
		return true, nil
	case apierrors.IsTooManyRequests(err) && DisruptionBudgetRefusal(err):
		return false, fmt.Errorf("sent again after going unanswered, refused by a PodDisruptionBudget: %w", err)
	case apierrors.IsTooManyRequests(err):
		e.log.Info("eviction sent again; in progress", "pod", name, "answer", err.Error())
		return true, nil
	default:
		e.log.Info("eviction still unanswered; trying again", "pod", name, "err", err)
		return false, nil
	}
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
	e.mu.Lock()
	unanswered := e.unanswered[t.Name]
	delete(e.unanswered, t.Name)
	e.mu.Unlock()
	if p := e.source.Pod(t.Name); p != nil {
		gone := e.source.Gone(t.Name, p.UID)
		var resend <-chan time.Time
		if unanswered {
			tick := time.NewTicker(resendEvery)
			defer tick.Stop()
			resend = tick.C
		}
		for waiting := true; waiting; {
			select {
			case <-gone:
				waiting = false
			case <-ctx.Done():
				return ended(fmt.Sprintf("pod still bound to the node after %.0f s (a disruption budget, a migration or a finalizer holds it); it was not deleted",
					time.Since(t.SignaledAt).Seconds()))
			case <-resend:
				switch done, err := e.resend(ctx, t.Name, p.UID); {
				case err != nil:
					return out(policy.EvictionRefused, err.Error())
				case done:
					resend = nil
				}
			}
		}
	}
	if t.Group == nil || cgroup.WaitEmpty(ctx, t.Group, 50*time.Millisecond) {
		return out(policy.EvictedGracefully, "")
	}
	n, _ := cgroup.CountProcesses(t.Group)
	return ended(fmt.Sprintf("pod deleted but %d processes are left in its cgroup", n))
}
