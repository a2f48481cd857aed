package loadctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
)

// Result is what the controller learned about one worker.
type Result struct {
	Worker   string                 `json:"worker"`
	PID      int                    `json:"pid"`
	Populate *memload.PopulateStats `json:"populate,omitempty"`
	// ReadyAt is when the worker reported ready (populated).
	ReadyAt time.Time `json:"ready_at"`
	// StartedAt is when the worker says it began its measured phase.
	StartedAt time.Time `json:"started_at"`
	// Clock is the worker's clock offset from the controller's.
	Clock   *ClockSync       `json:"clock,omitempty"`
	Summary *memload.Summary `json:"summary,omitempty"`
	// Err is set when the worker failed: it reported an error, or its
	// connection closed before it sent a summary.
	Err string `json:"error,omitempty"`
}

// Failed reports whether the worker did not finish with a summary.
func (r Result) Failed() bool { return r.Err != "" || r.Summary == nil }

// Controller accepts workers and drives them through ready, start, collect.
type Controller struct {
	ln     net.Listener
	addr   string
	events chan event

	quit chan struct{} // closed by Close: connection readers stop forwarding

	mu      sync.Mutex
	workers map[string]*workerConn
	order   []string
	closed  bool
}

type workerConn struct {
	conn      net.Conn
	writeMu   sync.Mutex
	result    Result
	done      bool // summary received or connection lost
	ready     bool
	lastHeard time.Time
}

type event struct {
	w   *workerConn
	msg Message
	err error // set when the connection ended
}

// Listen starts a controller on addr ("unix:/path" or "tcp:host:port"; a tcp
// port of 0 picks a free one, see Addr).
func Listen(addr string) (*Controller, error) {
	network, address, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		// A stale socket from a crashed run would make Listen fail.
		if fi, err := os.Lstat(address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(address)
		}
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("controller listen on %s: %w", addr, err)
	}
	c := &Controller{ln: ln, events: make(chan event, 1024), quit: make(chan struct{}), workers: map[string]*workerConn{}}
	c.addr = network + ":" + ln.Addr().String()
	go c.accept()
	return c, nil
}

// Addr is the address workers should dial.
func (c *Controller) Addr() string { return c.addr }

func (c *Controller) accept() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.serve(conn)
	}
}

// serve reads one worker's messages and forwards them as events.
func (c *Controller) serve(conn net.Conn) {
	w := &workerConn{conn: conn}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	for sc.Scan() {
		m, err := DecodeMessage(sc.Bytes())
		if err != nil {
			c.forward(event{w: w, err: fmt.Errorf("protocol error: %v", err)})
			conn.Close()
			return
		}
		if m.Type == TypeClock {
			// Answered here, at once: the reply's delay is the error.
			w.send(Message{Type: TypeClock, AtUnixNano: time.Now().UnixNano()})
			continue
		}
		if !c.forward(event{w: w, msg: m}) {
			return
		}
	}
	err := sc.Err()
	if err == nil {
		err = errors.New("connection closed")
	}
	c.forward(event{w: w, err: err})
}

// forward hands an event to the consumer unless the controller is closed.
func (c *Controller) forward(ev event) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.quit:
		return false
	}
}

// handle applies one event to the worker table; it returns the worker's
// name for messages that matter to the caller.
func (c *Controller) handle(ev event) (*workerConn, error) {
	w := ev.w
	if ev.err != nil {
		if w.result.Worker == "" || w.done {
			return nil, nil // never introduced itself, or already finished
		}
		w.done = true
		if w.result.Err == "" {
			w.result.Err = "connection lost before summary: " + ev.err.Error()
		}
		return w, nil
	}
	m := ev.msg
	w.lastHeard = time.Now()
	switch m.Type {
	case TypeHello:
		if m.Protocol != ProtocolVersion {
			w.conn.Close()
			return nil, fmt.Errorf("worker %q speaks protocol %d, want %d", m.Worker, m.Protocol, ProtocolVersion)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, dup := c.workers[m.Worker]; dup || m.Worker == "" {
			w.conn.Close()
			return nil, fmt.Errorf("worker name %q is empty or already in use", m.Worker)
		}
		w.result.Worker, w.result.PID = m.Worker, m.PID
		c.workers[m.Worker] = w
		c.order = append(c.order, m.Worker)
	case TypeReady:
		c.mu.Lock()
		w.ready = true
		c.mu.Unlock()
		w.result.ReadyAt = time.Now()
		w.result.Populate = m.Populate
		w.result.Clock = m.Clock
	case TypeStarted:
		w.result.StartedAt = unixNano(m.StartedUnixNano)
	case TypeSummary:
		w.result.Summary = m.Summary
		if m.Summary.StartUnixNano != 0 {
			// The measured phase's own start is when the worker really
			// began touching, a little after it woke for the start signal.
			w.result.StartedAt = unixNano(m.Summary.StartUnixNano)
		}
		w.done = true
	case TypeError:
		w.result.Err = m.Error
		w.done = true
	}
	return w, nil
}

// AwaitReady waits until n workers have reported ready. It fails if a worker
// fails first or ctx ends (use context.WithCancelCause to say why, e.g. a
// worker process exited).
func (c *Controller) AwaitReady(ctx context.Context, n int) error {
	for {
		if c.countReady() >= n {
			return nil
		}
		select {
		case ev := <-c.events:
			w, err := c.handle(ev)
			if err != nil {
				return err
			}
			if w != nil && w.done && w.result.Failed() {
				return fmt.Errorf("worker %s failed before ready: %s", w.result.Worker, w.result.Err)
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d workers to be ready (%d are): %w", n, c.countReady(), context.Cause(ctx))
		}
	}
}

// ReadyCount is how many workers have reported ready (safe to call from
// any goroutine, e.g. for progress).
func (c *Controller) ReadyCount() int { return c.countReady() }

func (c *Controller) countReady() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.workers {
		if w.ready {
			n++
		}
	}
	return n
}

// Start tells every ready worker to begin at now+lead and returns that time.
// A lead long enough to deliver every message (about 10 ms plus 0.2 ms per
// worker locally) lets all workers begin within the scheduler's wake-up
// jitter of each other instead of one message-delivery apart.
func (c *Controller) Start(lead time.Duration) time.Time {
	at := time.Now().Add(lead)
	c.broadcast(Message{Type: TypeStart, AtUnixNano: at.UnixNano()})
	return at
}

// Stop asks every worker to end its run and send its summary.
func (c *Controller) Stop() { c.broadcast(Message{Type: TypeStop}) }

func (c *Controller) broadcast(m Message) {
	b, _ := encodeMessage(m)
	c.mu.Lock()
	ws := make([]*workerConn, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	for _, w := range ws {
		w.write(b) // a dead worker shows up as a lost connection
	}
}

func (w *workerConn) send(m Message) {
	if b, err := encodeMessage(m); err == nil {
		w.write(b)
	}
}

func (w *workerConn) write(b []byte) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	w.conn.Write(b)
}

// CollectOptions tune Collect.
type CollectOptions struct {
	// StopGrace is how long workers get to send summaries after being
	// asked to stop (when Collect's context ends).
	StopGrace time.Duration
	// Silence marks a worker failed when it has sent nothing for this long
	// (0: never). Workers send a record every interval, so a few intervals
	// of silence mean a hung or frozen worker.
	Silence time.Duration
	// OnRecord, if set, sees each interval record as it arrives.
	OnRecord func(memload.Record)
}

// Collect receives records and summaries until every introduced worker has
// finished (summary, error, lost connection or silence) or ctx ends; then
// the workers are asked to stop and given StopGrace to send summaries.
func (c *Controller) Collect(ctx context.Context, o CollectOptions) []Result {
	stopping := ctx.Done()
	var grace <-chan time.Time
	var silenceCheck <-chan time.Time
	if o.Silence > 0 {
		t := time.NewTicker(o.Silence / 4)
		defer t.Stop()
		silenceCheck = t.C
	}
	for !c.allDone() {
		select {
		case ev := <-c.events:
			w, _ := c.handle(ev)
			if w != nil && ev.msg.Record != nil && o.OnRecord != nil {
				o.OnRecord(*ev.msg.Record)
			}
		case now := <-silenceCheck:
			c.markSilent(now, o.Silence)
		case <-stopping:
			c.Stop()
			stopping = nil
			grace = time.After(o.StopGrace)
		case <-grace:
			c.markUnfinished("no summary within the stop grace period")
			return c.Results()
		}
	}
	return c.Results()
}

// markSilent fails workers that have sent nothing for longer than silence.
func (c *Controller) markSilent(now time.Time, silence time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if !w.done && now.Sub(w.lastHeard) > silence {
			w.done = true
			w.result.Err = fmt.Sprintf("silent for %s", now.Sub(w.lastHeard).Round(time.Millisecond))
		}
	}
}

func (c *Controller) allDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if !w.done {
			return false
		}
	}
	return true
}

func (c *Controller) markUnfinished(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if !w.done {
			w.done = true
			w.result.Err = why
		}
	}
}

// Results returns every introduced worker's result, in arrival order.
func (c *Controller) Results() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Result, 0, len(c.order))
	for _, name := range c.order {
		out = append(out, c.workers[name].result)
	}
	return out
}

// Close stops listening and closes every worker connection.
func (c *Controller) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.quit)
	for _, w := range c.workers {
		w.conn.Close()
	}
	c.mu.Unlock()
	return c.ln.Close()
}

// StartSkew is the spread between the first and the last worker to begin
// the measured phase; workers that never began are left out.
func StartSkew(results []Result) time.Duration {
	var starts []time.Time
	for _, r := range results {
		if !r.StartedAt.IsZero() {
			starts = append(starts, r.StartedAt)
		}
	}
	if len(starts) < 2 {
		return 0
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	return starts[len(starts)-1].Sub(starts[0])
}
