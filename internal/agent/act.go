package agent

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/headroom-dev/headroom/internal/policy"
)

const recentDecisions = 512

// recorder writes every decision record as a JSON line, counts it in the
// metrics and keeps the most recent for /v1/decisions. Records come from
// the loop and from evictions beside it. A line the writer refuses (a
// full disk) is counted as lost; the agent decides and acts regardless.
type recorder struct {
	w       io.Writer
	metrics *metrics

	mu     sync.Mutex
	recent []Record
}

// Record logs and counts one record.
func (r *recorder) Record(rec Record) {
	r.count(rec)
	b, err := json.Marshal(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		_, err = r.w.Write(append(b, '\n'))
	}
	if err != nil {
		r.metrics.lostLines.Inc()
	}
	r.recent = append(r.recent, rec)
	if len(r.recent) > recentDecisions {
		r.recent = r.recent[len(r.recent)-recentDecisions:]
	}
}

func (r *recorder) recentRecords() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recent...)
}

// count updates the metrics for a record.
func (r *recorder) count(rec Record) {
	m, d := r.metrics, rec.Decision
	m.decisions.WithLabelValues(d.Action).Inc()
	switch d.Action {
	case policy.ActionEvict:
		m.evictions.WithLabelValues(d.Trigger.Signal).Inc()
		if rec.SignaledAt != nil && rec.LatencyBoundSeconds > 0 {
			m.evictionLatency.Observe(rec.LatencyBoundSeconds)
		}
	case policy.ActionEvicted:
		o := d.Outcome
		m.evictionResults.WithLabelValues(o.Result).Inc()
		if o.Result == policy.EvictedGracefully || o.Result == policy.EvictedForcibly || o.Result == policy.EvictedSaved {
			m.evictionSeconds.Observe(o.Seconds)
			m.evictedBytes.Add(float64(o.FreedBytes))
		}
	case policy.ActionAbandon:
		m.evictionResults.WithLabelValues("abandoned").Inc()
	}
}
