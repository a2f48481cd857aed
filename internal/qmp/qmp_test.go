package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestDecodeMessage(t *testing.T) {
	cases := []struct {
		line    string
		kind    Kind
		id      string
		version string
		event   string
		errSub  string
	}{
		{line: `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}`,
			kind: KindGreeting, version: "7.2.22"},
		{line: `{"return": {}, "id": "hr-1"}`, kind: KindReturn, id: "hr-1"},
		{line: `{"return": {"actual": 536870912}, "id": 7}`, kind: KindReturn, id: "7"},
		{line: `{"return": [], "id": "x"}`, kind: KindReturn, id: "x"},
		{line: `{"error": {"class": "GenericError", "desc": "No balloon device has been activated"}, "id": "hr-3"}`, kind: KindError, id: "hr-3"},
		{line: `{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "SHUTDOWN", "data": {"guest": true, "reason": "guest-shutdown"}}`,
			kind: KindEvent, event: "SHUTDOWN"},
		{line: `{"event": "STOP"}`, kind: KindEvent, event: "STOP"},
		{line: `{"foo": 1}`, errSub: "neither"},
		{line: `not json`, errSub: "decode"},
		{line: `{"return": {}, "id": {"a": 1}}`, errSub: "id"},
	}
	for _, c := range cases {
		m, err := DecodeMessage([]byte(c.line))
		if c.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSub) {
				t.Errorf("%s: err = %v, want one containing %q", c.line, err, c.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		if m.Kind != c.kind || m.ID != c.id || m.Version != c.version || m.Event.Name != c.event {
			t.Errorf("%s: got kind %d id %q version %q event %q", c.line, m.Kind, m.ID, m.Version, m.Event.Name)
		}
	}
	m, _ := DecodeMessage([]byte(`{"timestamp": {"seconds": 1700000000, "microseconds": 250000}, "event": "BALLOON_CHANGE", "data": {"actual": 268435456}}`))
	if want := time.Unix(1700000000, 250000000); !m.Event.Time.Equal(want) {
		t.Errorf("event time %v, want %v", m.Event.Time, want)
	}
	if n, err := BalloonActualBytes(m.Event); err != nil || n != 256<<20 {
		t.Errorf("BalloonActualBytes = %d, %v", n, err)
	}
	m, _ = DecodeMessage([]byte(`{"error": {"class": "CommandNotFound", "desc": "The command foo has not been found"}, "id": "hr-9"}`))
	if m.Err == nil || m.Err.Class != "CommandNotFound" {
		t.Errorf("error not decoded: %+v", m)
	}
}

func FuzzDecodeQMPMessage(f *testing.F) {
	for _, s := range []string{
		`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}`,
		`{"return": {}, "id": "hr-1"}`,
		`{"return": {"actual": 1}, "id": 2.5}`,
		`{"error": {"class": "GenericError", "desc": "x"}, "id": "a"}`,
		`{"event": "SHUTDOWN", "data": {}, "timestamp": {"seconds": -1, "microseconds": 9999999}}`,
		`{"event": "BALLOON_CHANGE", "data": {"actual": 1073741824}}`,
		`{"return": {"stats": {"stat-swap-in": -1}, "last-update": 0}}`,
		`[]`, `null`, `{"id": null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := DecodeMessage(line)
		if err != nil {
			return
		}
		switch m.Kind {
		case KindGreeting:
		case KindReturn:
			if m.Return == nil {
				t.Fatalf("return without a value: %q", line)
			}
		case KindError:
			if m.Err == nil {
				t.Fatalf("error without an error: %q", line)
			}
		case KindEvent:
			if m.Event.Name == "" {
				t.Fatalf("event without a name: %q", line)
			}
			if !m.Event.Time.IsZero() && m.Event.Time.Before(time.Unix(0, 0)) {
				t.Fatalf("event time before 1970: %v", m.Event.Time)
			}
			BalloonActualBytes(m.Event)
		default:
			t.Fatalf("kind %d for %q", m.Kind, line)
		}
		if m.Kind == KindReturn {
			ParseGuestStats(m.Return)
		}
	})
}

func TestParseGuestStats(t *testing.T) {
	s, err := ParseGuestStats([]byte(`{"stats": {"stat-swap-out": 4096, "stat-available-memory": 104857600,
		"stat-free-memory": 52428800, "stat-minor-faults": 100, "stat-major-faults": 3, "stat-total-memory": 209715200,
		"stat-swap-in": 8192, "stat-disk-caches": 18446744073709551615}, "last-update": 1700000000}`))
	if err != nil {
		t.Fatal(err)
	}
	want := GuestStats{LastUpdate: time.Unix(1700000000, 0), SwapInBytes: 8192, SwapOutBytes: 4096, MajorFaults: 3, MinorFaults: 100,
		FreeBytes: 50 << 20, TotalBytes: 200 << 20, AvailableBytes: 100 << 20, DiskCachesBytes: -1}
	if s != want {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
	s, err = ParseGuestStats([]byte(`{"stats": {}, "last-update": 0}`))
	if err != nil || !s.LastUpdate.IsZero() || s.AvailableBytes != -1 {
		t.Errorf("no stats yet: %+v, %v", s, err)
	}
	if _, err := ParseGuestStats([]byte(`{"last-update": 0}`)); err == nil {
		t.Error("guest-stats without stats accepted")
	}
}

// fakeServer speaks QMP on one end of a pipe: handle answers each command
// line (nil: no answer).
func fakeServer(t *testing.T, handle func(cmd map[string]any, send func(string))) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	go func() {
		w := bufio.NewWriter(server)
		send := func(s string) { w.WriteString(s + "\r\n"); w.Flush() }
		send(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}`)
		sc := bufio.NewScanner(server)
		for sc.Scan() {
			var cmd map[string]any
			if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
				t.Errorf("client sent %q: %v", sc.Text(), err)
				return
			}
			handle(cmd, send)
		}
	}()
	return client
}

func reply(cmd map[string]any, ret string) string {
	id, _ := json.Marshal(cmd["id"])
	return `{"return": ` + ret + `, "id": ` + string(id) + `}`
}

// awaitPending waits until n commands wait for their replies.
func awaitPending(c *Client, n int) {
	for {
		c.mu.Lock()
		have := len(c.pending)
		c.mu.Unlock()
		if have == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClientRepliesOutOfOrderAndEvents(t *testing.T) {
	var held map[string]any
	conn := fakeServer(t, func(cmd map[string]any, send func(string)) {
		switch cmd["execute"] {
		case "qmp_capabilities":
			send(reply(cmd, "{}"))
		case "query-balloon":
			// Answer after the next command, with an event in between.
			held = cmd
		case "query-status":
			send(reply(cmd, `{"running": true, "status": "running"}`))
			send(`{"event": "BALLOON_CHANGE", "data": {"actual": 1048576}, "timestamp": {"seconds": 1, "microseconds": 2}}`)
			send(reply(held, `{"actual": 2097152}`))
		case "balloon":
			send(`{"error": {"class": "GenericError", "desc": "Parameter 'value' expects a size"}, "id": "` + cmd["id"].(string) + `"}`)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewClient(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Version() != "7.2.0" {
		t.Errorf("version %q", c.Version())
	}
	balloon := make(chan uint64, 1)
	go func() {
		n, err := c.QueryBalloon(ctx)
		if err != nil {
			t.Error(err)
		}
		balloon <- n
	}()
	awaitPending(c, 1) // query-status must be sent after query-balloon
	st, err := c.QueryStatus(ctx)
	if err != nil || !st.Running {
		t.Fatalf("status %+v, %v", st, err)
	}
	if n := <-balloon; n != 2<<20 {
		t.Errorf("query-balloon answered %d", n)
	}
	ev := <-c.Events()
	if ev.Name != EventBalloonChange {
		t.Errorf("event %+v", ev)
	}
	var qe *Error
	if err := c.Balloon(ctx, 1); !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Errorf("balloon error = %v", err)
	}
}

func TestClientTimeoutAndClose(t *testing.T) {
	conn := fakeServer(t, func(cmd map[string]any, send func(string)) {
		if cmd["execute"] == "qmp_capabilities" {
			send(reply(cmd, "{}"))
		}
		// Everything else goes unanswered.
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewClient(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := c.SystemPowerdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unanswered command: %v, want a deadline error", err)
	}
	pending := make(chan error, 1)
	go func() { pending <- c.Execute(ctx, "query-status", nil, nil) }()
	awaitPending(c, 1)
	c.Close()
	if err := <-pending; !errors.Is(err, ErrClosed) {
		t.Errorf("command pending at close: %v, want ErrClosed", err)
	}
	if _, ok := <-c.Events(); ok {
		t.Error("events channel open after close")
	}
	if err := c.Execute(ctx, "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("command after close: %v", err)
	}
}

func TestHandshakeRefusesNonGreeting(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		server.Write([]byte(`{"return": {}}` + "\n"))
		server.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := NewClient(ctx, client); err == nil || !strings.Contains(err.Error(), "greeting") {
		t.Errorf("err = %v", err)
	}
}
