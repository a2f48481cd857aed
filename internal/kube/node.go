package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-dev/headroom/internal/policy"
)

// The node's marks while a signal fires.
const (
	TaintKey      = "headroom.io/memory-pressure"
	ConditionType = "MemoryPressureSwap"
)

// Pressure is what the node shows: whether a signal fires and the numbers.
type Pressure struct {
	Firing  bool
	Message string
}

// NodePressure shows memory pressure on the Node: the taint
// headroom.io/memory-pressure:NoSchedule (no new pods while the node
// sheds memory) and the MemoryPressureSwap condition with the numbers,
// both removed when the signals clear. It is an agent.PressureReporter:
// Report only records the wanted state; a goroutine writes it, retrying
// while the apiserver fails.
type NodePressure struct {
	client *Client
	node   string
	log    *slog.Logger
	want   chan Pressure
	done   chan struct{} // closed when the writer has stopped
}

// NewNodePressure starts the writer; it stops with ctx, clearing the marks
// apiTimeout bounds one call that marks the node: an unreachable
// apiserver is retried, never waited on.
const apiTimeout = 2 * time.Second

// it set (best effort, within a few seconds).
func NewNodePressure(ctx context.Context, c *Client, node string, log *slog.Logger) *NodePressure {
	n := &NodePressure{client: c, node: node, log: log, want: make(chan Pressure, 1), done: make(chan struct{})}
	go n.run(ctx)
	return n
}

// PressureOf summarizes evaluated signals: the firing ones, with value and
// threshold, in the order the policy evaluates them.
func PressureOf(signals []policy.Signal) Pressure {
	var parts []string
	for _, s := range signals {
		if s.Firing {
			op := ">"
			if s.Below {
				op = "<"
			}
			parts = append(parts, fmt.Sprintf("%s %.4g %s %s threshold %.4g", s.Name, s.Value, s.Unit, op, s.Threshold))
		}
	}
	if len(parts) == 0 {
		return Pressure{}
	}
	return Pressure{Firing: true, Message: strings.Join(parts, "; ")}
}

// Report implements agent.PressureReporter.
func (n *NodePressure) Report(_ time.Time, signals []policy.Signal) {
	p := PressureOf(signals)
	select {
	case <-n.want: // replace the one not yet taken
	default:
	}
	n.want <- p
}

// Stopped is closed once the writer stopped (after ctx ended and the marks
// it set were cleared).
func (n *NodePressure) Stopped() <-chan struct{} { return n.done }

func (n *NodePressure) run(ctx context.Context) {
	defer close(n.done)
	var applied *Pressure // nil: unknown, write the first state seen
	var pending Pressure
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			if applied != nil && applied.Firing {
				c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if err := n.apply(c, Pressure{}); err != nil {
					n.log.Warn("cannot clear the node's memory pressure marks on exit", "node", n.node, "err", err)
				}
				cancel()
			}
			return
		case pending = <-n.want:
			// Only the firing state changes the marks; the message is
			// refreshed with it.
			if applied != nil && applied.Firing == pending.Firing {
				continue
			}
		case <-retry.C:
		}
		c, cancel := context.WithTimeout(ctx, apiTimeout)
		err := n.apply(c, pending)
		cancel()
		if err != nil {
			n.log.Warn("cannot mark the node's memory pressure; retrying", "node", n.node, "firing", pending.Firing, "err", err)
			retry.Reset(time.Second)
			continue
		}
		p := pending
		applied = &p
		n.log.Info("node memory pressure marks", "node", n.node, "firing", p.Firing, "signals", p.Message)
	}
}

// apply sets or clears the condition, then the taint.
func (n *NodePressure) apply(ctx context.Context, p Pressure) error {
	if err := n.applyCondition(ctx, p); err != nil {
		return fmt.Errorf("condition: %w", err)
	}
	if err := n.applyTaint(ctx, p.Firing); err != nil {
		return fmt.Errorf("taint: %w", err)
	}
	return nil
}

// applyCondition patches status.conditions (a strategic merge on the
// condition's type): set while firing, deleted when clear.
func (n *NodePressure) applyCondition(ctx context.Context, p Pressure) error {
	var cond map[string]any
	if p.Firing {
		now := metav1.Now().UTC().Format(time.RFC3339)
		cond = map[string]any{"type": ConditionType, "status": string(corev1.ConditionTrue), "reason": "SwapMemoryPressure",
			"message": "headroom: " + p.Message, "lastHeartbeatTime": now, "lastTransitionTime": now}
	} else {
		cond = map[string]any{"$patch": "delete", "type": ConditionType}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	return n.client.PatchNode(ctx, n.node, types.StrategicMergePatchType, patch, "status")
}

// applyTaint adds or removes the taint with a merge patch of the whole
// taint list, made conditional on the node's resourceVersion so a
// concurrent change (the node lifecycle controller's taints) is not lost;
// a conflict is retried by the caller.
func (n *NodePressure) applyTaint(ctx context.Context, firing bool) error {
	node, err := n.client.GetNode(ctx, n.node)
	if err != nil {
		return err
	}
	has := slices.ContainsFunc(node.Spec.Taints, isOurTaint)
	if has == firing {
		return nil
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isOurTaint)
	if firing {
		now := metav1.Now()
		taints = append(taints, corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
	}
	if taints == nil {
		taints = []corev1.Taint{}
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	return n.client.PatchNode(ctx, n.node, types.MergePatchType, patch)
}

func isOurTaint(t corev1.Taint) bool {
	return t.Key == TaintKey && t.Effect == corev1.TaintEffectNoSchedule
}
