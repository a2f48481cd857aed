package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The HTTP server's bounds: it serves reads only, and no client, slow or
// greedy, holds more than these. The loop never waits on it.
const (
	maxHTTPConnections = 64
	maxHeaderBytes     = 16 << 10
	httpReadTimeout    = 5 * time.Second
	httpWriteTimeout   = 10 * time.Second
	httpIdleTimeout    = 30 * time.Second
)

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: maxHeaderBytes}
}

// limitConnections accepts at most n connections at once; the rest wait
// in the kernel's backlog.
func limitConnections(ln net.Listener, n int) net.Listener { return netutil.LimitListener(ln, n) }

// Handler serves GET /v1/decisions, /v1/snapshot, /metrics and /healthz;
// any other method is refused (405): the API only reads.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/decisions", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.Decisions()) })
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.Snapshot()) })
	mux.Handle("GET /metrics", a.metrics.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		ticked := a.ticked
		a.mu.Unlock()
		age := a.clock.Now().Sub(ticked)
		if ticked.IsZero() || age > 5*seconds(a.cfg.IntervalSeconds)+time.Second {
			http.Error(w, fmt.Sprintf("no sample for %s", age.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // a client gone mid-response is its own loss
}
