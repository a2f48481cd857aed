package loadctl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
)

func listen(t *testing.T) *Controller {
	t.Helper()
	c, err := Listen("unix:" + filepath.Join(t.TempDir(), "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dial(t *testing.T, c *Controller, name string) *Session {
	t.Helper()
	s, err := Dial(context.Background(), c.Addr(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runWorker plays a well-behaved worker: ready, start, records, summary.
func runWorker(s *Session, records int) error {
	if err := s.Ready(memload.PopulateStats{Pages: 10}); err != nil {
		return err
	}
	began, err := s.AwaitStart(context.Background())
	if err != nil {
		return err
	}
	if err := s.Started(began); err != nil {
		return err
	}
	for i := range records {
		if err := s.Record(memload.Record{Type: TypeInterval, Pages: uint64(i + 1)}); err != nil {
			return err
		}
	}
	return s.Summary(memload.Summary{Type: TypeSummary, Pages: 42, StopReason: memload.StopDuration})
}

func TestProtocolReadyStartRecordsSummary(t *testing.T) {
	c := listen(t)
	const workers = 5
	errs := make(chan error, workers)
	for i := range workers {
		s := dial(t, c, fmt.Sprintf("w%d", i))
		go func() { errs <- runWorker(s, 3) }()
	}
	if err := c.AwaitReady(ctxTimeout(t), workers); err != nil {
		t.Fatal(err)
	}
	at := c.Start(20 * time.Millisecond)
	var records int
	results := c.Collect(ctxTimeout(t), CollectOptions{StopGrace: time.Second, OnRecord: func(r memload.Record) {
		if !strings.HasPrefix(r.Worker, "w") {
			t.Errorf("record without its worker's name: %+v", r)
		}
		records++
	}})
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(results) != workers || records != 3*workers {
		t.Fatalf("%d results, %d records; want %d, %d", len(results), records, workers, 3*workers)
	}
	for _, r := range results {
		if r.Failed() || r.Summary.Pages != 42 || r.Populate == nil || r.Populate.Pages != 10 {
			t.Fatalf("result %+v", r)
		}
		if r.StartedAt.Before(at) {
			t.Fatalf("worker %s began %v before the start time", r.Worker, at.Sub(r.StartedAt))
		}
	}
	if skew := StartSkew(results); skew <= 0 || skew > 200*time.Millisecond {
		t.Fatalf("start skew %v", skew)
	}
}

// A worker whose clock is off (a guest set from its RTC) still starts at the
// controller's instant and reports its times on the controller's clock.
func TestWorkerWithSkewedClock(t *testing.T) {
	c := listen(t)
	const skew = 3 * time.Second
	s, err := dialClock(context.Background(), c.Addr(), "ahead", func() time.Time { return time.Now().Add(skew) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sync := s.Clock()
	if off := time.Duration(sync.OffsetNanos); (off+skew).Abs() > time.Duration(sync.RTTNanos) || sync.RTTNanos <= 0 {
		t.Fatalf("offset %v (rtt %v), want -%v", off, time.Duration(sync.RTTNanos), skew)
	}
	errs := make(chan error, 1)
	go func() {
		if err := s.Ready(memload.PopulateStats{}); err != nil {
			errs <- err
			return
		}
		began, err := s.AwaitStart(context.Background())
		if err == nil {
			err = s.Started(began)
		}
		if err == nil {
			err = s.Record(memload.Record{Type: TypeInterval, Time: began.Add(time.Second)})
		}
		if err == nil {
			err = s.Summary(memload.Summary{Type: TypeSummary, StartUnixNano: began.UnixNano(), StopReason: memload.StopDuration})
		}
		errs <- err
	}()
	if err := c.AwaitReady(ctxTimeout(t), 1); err != nil {
		t.Fatal(err)
	}
	at := c.Start(50 * time.Millisecond)
	var record memload.Record
	results := c.Collect(ctxTimeout(t), CollectOptions{StopGrace: time.Second, OnRecord: func(r memload.Record) { record = r }})
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	r := results[0]
	if r.Clock == nil || r.Clock.OffsetNanos != sync.OffsetNanos {
		t.Errorf("controller's view of the clock: %+v", r.Clock)
	}
	if d := r.StartedAt.Sub(at); d < 0 || d > 500*time.Millisecond {
		t.Errorf("worker began %v after the start instant (controller clock), want within 0..500ms", d)
	}
	if d := record.Time.Sub(r.StartedAt); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("record at %v after the start, want 1s on the controller's clock", d)
	}
}

func TestWorkerDyingMidRunIsReportedFailed(t *testing.T) {
	c := listen(t)
	good, bad := dial(t, c, "good"), dial(t, c, "bad")
	go runWorker(good, 1)
	go func() {
		bad.Ready(memload.PopulateStats{})
		bad.AwaitStart(context.Background())
		bad.Record(memload.Record{Type: TypeInterval, Pages: 1})
		bad.Close() // dies: no summary
	}()
	if err := c.AwaitReady(ctxTimeout(t), 2); err != nil {
		t.Fatal(err)
	}
	c.Start(5 * time.Millisecond)
	results := c.Collect(ctxTimeout(t), CollectOptions{StopGrace: time.Second})
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Worker] = r
	}
	if byName["good"].Failed() {
		t.Fatalf("good worker failed: %+v", byName["good"])
	}
	if r := byName["bad"]; !r.Failed() || !strings.Contains(r.Err, "connection lost before summary") {
		t.Fatalf("dead worker not reported as failed: %+v", r)
	}
}

func TestWorkerDyingBeforeReadyFailsAwaitReady(t *testing.T) {
	c := listen(t)
	s := dial(t, c, "early")
	s.Fail(errors.New("map 1 TiB: cannot allocate memory"))
	err := c.AwaitReady(ctxTimeout(t), 1)
	if err == nil || !strings.Contains(err.Error(), "early") || !strings.Contains(err.Error(), "cannot allocate") {
		t.Fatalf("AwaitReady = %v, want the worker's failure", err)
	}
}

func TestAwaitReadyReportsCause(t *testing.T) {
	c := listen(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("worker w3 exited: exit status 2"))
	if err := c.AwaitReady(ctx, 1); err == nil || !strings.Contains(err.Error(), "w3 exited") {
		t.Fatalf("AwaitReady = %v", err)
	}
}

func TestControllerGoingAwayStopsWorker(t *testing.T) {
	c := listen(t)
	s := dial(t, c, "orphan")
	s.Ready(memload.PopulateStats{})
	if err := c.AwaitReady(ctxTimeout(t), 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not notice its controller went away")
	}
	if !errors.Is(s.Err(), ErrControllerLost) {
		t.Fatalf("Err = %v, want ErrControllerLost", s.Err())
	}
	if _, err := s.AwaitStart(context.Background()); err == nil {
		t.Fatal("AwaitStart succeeded without a controller")
	}
}

func TestCollectStopsWorkersWhenCanceled(t *testing.T) {
	c := listen(t)
	s := dial(t, c, "long")
	go func() {
		s.Ready(memload.PopulateStats{})
		s.AwaitStart(context.Background())
		<-s.Stopped() // runs until told to stop, then reports
		s.Summary(memload.Summary{Type: TypeSummary, Pages: 7, StopReason: s.Err().Error()})
	}()
	if err := c.AwaitReady(ctxTimeout(t), 1); err != nil {
		t.Fatal(err)
	}
	c.Start(time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results := c.Collect(ctx, CollectOptions{StopGrace: 5 * time.Second})
	if len(results) != 1 || results[0].Failed() || results[0].Summary.StopReason != "stopped by controller" {
		t.Fatalf("results %+v", results)
	}
}

func TestDuplicateWorkerNameIsRefused(t *testing.T) {
	c := listen(t)
	dial(t, c, "same")
	dial(t, c, "same")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.AwaitReady(ctx, 2); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("AwaitReady = %v", err)
	}
}

func TestUnreachableController(t *testing.T) {
	_, err := Dial(context.Background(), "unix:"+filepath.Join(t.TempDir(), "nobody.sock"), "w")
	if err == nil || !strings.Contains(err.Error(), "connect to controller") {
		t.Fatalf("Dial = %v", err)
	}
}

func TestTCPController(t *testing.T) {
	c, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := dial(t, c, "net")
	go runWorker(s, 1)
	if err := c.AwaitReady(ctxTimeout(t), 1); err != nil {
		t.Fatal(err)
	}
	c.Start(time.Millisecond)
	if r := c.Collect(ctxTimeout(t), CollectOptions{StopGrace: time.Second}); len(r) != 1 || r[0].Failed() {
		t.Fatalf("results %+v", r)
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in, network, address string
		ok                   bool
	}{
		{"unix:/run/x.sock", "unix", "/run/x.sock", true},
		{"tcp:127.0.0.1:7000", "tcp", "127.0.0.1:7000", true},
		{"tcp:[::1]:7000", "tcp", "[::1]:7000", true},
		{"tcp:localhost", "", "", false},
		{"udp:1.2.3.4:5", "", "", false},
		{"/run/x.sock", "", "", false},
		{"unix:", "", "", false},
		{"serial:/dev/virtio-ports/org.headroom.controller", "serial", "/dev/virtio-ports/org.headroom.controller", true},
	}
	for _, tt := range tests {
		n, a, err := ParseAddr(tt.in)
		if (err == nil) != tt.ok || n != tt.network || a != tt.address {
			t.Errorf("ParseAddr(%q) = %q, %q, %v", tt.in, n, a, err)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","protocol":1,"worker":"w1","pid":5}`,
		`{"type":"interval","pages":3,"pages_per_sec":2.5}`,
		`{"type":"summary","pages":1,"params":{"scan":"seq"}}`,
		`{"type":"start","at_unix_nano":123}`,
		`{"type":"clock","at_unix_nano":9}`,
		`{"type":"ready","clock":{"offset_nanos":-3,"rtt_nanos":40}}`,
		`{"type":"nope"}`, `{`, `[]`, `{"type":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := DecodeMessage(line)
		if err != nil {
			return
		}
		if (m.Type == TypeInterval) != (m.Record != nil) || (m.Type == TypeSummary) != (m.Summary != nil) {
			t.Fatalf("type %q decoded with record %v, summary %v", m.Type, m.Record != nil, m.Summary != nil)
		}
		b, err := encodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMessage(b)
		if err != nil || again.Type != m.Type {
			t.Fatalf("re-encoded %q does not decode: %v", b, err)
		}
	})
}

func TestSilentWorkerIsReportedFailed(t *testing.T) {
	c := listen(t)
	quiet := dial(t, c, "quiet")
	quiet.Ready(memload.PopulateStats{})
	go func() { quiet.AwaitStart(context.Background()) }() // then says nothing, connection open
	if err := c.AwaitReady(ctxTimeout(t), 1); err != nil {
		t.Fatal(err)
	}
	c.Start(time.Millisecond)
	results := c.Collect(ctxTimeout(t), CollectOptions{StopGrace: time.Second, Silence: 300 * time.Millisecond})
	if len(results) != 1 || !strings.HasPrefix(results[0].Err, "silent for") {
		t.Fatalf("results %+v", results)
	}
}
