package kubevirt

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Event is the part of a core/v1 Event a failure reason needs.
type Event struct {
	Object  string // involvedObject.name
	Type    string // Normal or Warning
	Reason  string
	Message string
	Last    time.Time
}

// EventsFrom picks the events out of an unstructured EventList.
func EventsFrom(list *unstructured.UnstructuredList) []Event {
	var out []Event
	for _, it := range list.Items {
		o := it.Object
		name, _, _ := unstructured.NestedString(o, "involvedObject", "name")
		e := Event{Object: name}
		e.Type, _, _ = unstructured.NestedString(o, "type")
		e.Reason, _, _ = unstructured.NestedString(o, "reason")
		e.Message, _, _ = unstructured.NestedString(o, "message")
		for _, f := range []string{"lastTimestamp", "eventTime", "firstTimestamp"} {
			if s, _, _ := unstructured.NestedString(o, f); s != "" {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					e.Last = t
					break
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// FailureReason explains why a VMI did not reach Running: its phase, the
// first false condition that says why (PodScheduled: the scheduler's
// "Insufficient memory" or "Too many pods"; Synchronized: virt-handler's
// errors) and its newest warning event (a QEMU timeout in virt-launcher,
// say). createErr is the create request's error, if it failed.
func FailureReason(vmi *unstructured.Unstructured, events []Event, createErr string) string {
	if createErr != "" {
		return "create failed: " + createErr
	}
	if vmi == nil {
		return "never seen in a watch event"
	}
	phase, _, _ := unstructured.NestedString(vmi.Object, "status", "phase")
	if phase == "" {
		phase = "no phase"
	}
	parts := []string{phase}
	if c := blockingCondition(vmi); c != "" {
		parts = append(parts, c)
	}
	var newest *Event
	for i := range events {
		e := &events[i]
		if e.Object != vmi.GetName() || e.Type != "Warning" {
			continue
		}
		if newest == nil || !e.Last.Before(newest.Last) {
			newest = e
		}
	}
	if newest != nil {
		if strings.Contains(strings.Join(parts, " "), newest.Message) {
			// The condition already says it (the scheduler's message is both).
			parts = append(parts, "event "+newest.Reason)
		} else {
			parts = append(parts, fmt.Sprintf("event %s: %s", newest.Reason, newest.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// blockingCondition is the first condition that reports a problem, as
// "Type Reason: message".
func blockingCondition(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		// Ready false says nothing of why; the others name a cause.
		if status != "False" || typ == "Ready" || (reason == "" && msg == "") {
			continue
		}
		return strings.TrimSpace(fmt.Sprintf("%s %s: %s", typ, reason, msg))
	}
	return ""
}

// SummarizeReasons groups failure reasons by count, most frequent first:
// "3 of 10 not Running within 5m0s: 2× Scheduling; PodScheduled ...".
func SummarizeReasons(reasons []string, total int, timeout time.Duration) string {
	count := map[string]int{}
	for _, r := range reasons {
		count[r]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if count[keys[i]] != count[keys[j]] {
			return count[keys[i]] > count[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d not Running within %s:", len(reasons), total, timeout)
	for i, k := range keys {
		if i == 3 {
			fmt.Fprintf(&b, " (and %d other reasons)", len(keys)-3)
			break
		}
		if i > 0 {
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %d× %s", count[k], k)
	}
	return b.String()
}
