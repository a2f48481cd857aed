// Package loadctl coordinates many `headroom load` workers: a controller
// listens on a unix or tcp address, workers connect, report ready after
// populating, begin together on the controller's start signal, stream
// interval records and send a summary. The density harness and
// `headroom load --workers` are its users.
//
// The protocol is JSON lines over one stream connection per worker (a
// unix or tcp socket, or a serial line such as a VM's virtio-serial port):
//
//	worker → controller: hello, clock, ready, started, interval, summary, error
//	controller → worker: clock, start, stop
//
// Workers need not share the controller's clock (a guest's clock is set
// from its RTC, to the second): after hello a worker sends a few clock
// requests, which the controller answers at once with its time, and takes
// the offset from the exchange with the shortest round trip. From then on
// the worker speaks controller time: it waits for the start instant and
// reports its start and its records in it.
//
// A worker that loses its controller stops its run; a worker whose
// connection closes before its summary is reported as failed.
package loadctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
)

// ProtocolVersion is sent in hello; a controller refuses other versions.
// Version 2 added clock synchronisation.
const ProtocolVersion = 2

// Message types.
const (
	TypeHello    = "hello"
	TypeReady    = "ready"
	TypeStart    = "start"
	TypeStarted  = "started"
	TypeInterval = "interval"
	TypeSummary  = "summary"
	TypeError    = "error"
	TypeStop     = "stop"
	TypeClock    = "clock"
)

// Message is every protocol message. Interval and summary messages are the
// worker's own Record and Summary JSON (their "type" field is the message
// type), so a controller's log is the same JSON a worker prints with --json.
type Message struct {
	Type            string                 `json:"type"`
	Protocol        int                    `json:"protocol,omitempty"`
	Worker          string                 `json:"worker,omitempty"`
	PID             int                    `json:"pid,omitempty"`
	Populate        *memload.PopulateStats `json:"populate,omitempty"`
	AtUnixNano      int64                  `json:"at_unix_nano,omitempty"`
	StartedUnixNano int64                  `json:"started_unix_nano,omitempty"`
	// Clock is the worker's clock against the controller's, sent with ready.
	Clock   *ClockSync       `json:"clock,omitempty"`
	Error   string           `json:"error,omitempty"`
	Record  *memload.Record  `json:"-"`
	Summary *memload.Summary `json:"-"`
}

// maxLineBytes bounds one protocol line; a summary is about 1 KiB.
const maxLineBytes = 1 << 20

// DecodeMessage parses one protocol line.
func DecodeMessage(line []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, fmt.Errorf("decode message: %w", err)
	}
	switch m.Type {
	case TypeInterval:
		m.Record = new(memload.Record)
		if err := json.Unmarshal(line, m.Record); err != nil {
			return Message{}, fmt.Errorf("decode interval record: %w", err)
		}
	case TypeSummary:
		m.Summary = new(memload.Summary)
		if err := json.Unmarshal(line, m.Summary); err != nil {
			return Message{}, fmt.Errorf("decode summary: %w", err)
		}
	case TypeHello, TypeReady, TypeStart, TypeStarted, TypeError, TypeStop, TypeClock:
	default:
		return Message{}, fmt.Errorf("decode message: unknown type %q", m.Type)
	}
	return m, nil
}

// encodeMessage renders m as one line (with the trailing newline).
func encodeMessage(m Message) ([]byte, error) {
	var v any = m
	switch {
	case m.Record != nil:
		v = m.Record
	case m.Summary != nil:
		v = m.Summary
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ClockSync is how a worker's clock relates to its controller's.
type ClockSync struct {
	// OffsetNanos is controller time minus worker time.
	OffsetNanos int64 `json:"offset_nanos"`
	// RTTNanos is the round trip of the exchange the offset came from; the
	// offset is exact to within half of it.
	RTTNanos int64 `json:"rtt_nanos"`
}

// AddrForm describes the accepted --controller syntax, for error messages.
const AddrForm = "unix:/path/to/socket, tcp:host:port or serial:/dev/path (a serial line such as /dev/virtio-ports/NAME)"

// ParseAddr splits "unix:/path", "tcp:host:port" or "serial:/dev/path"
// into a network and address.
func ParseAddr(s string) (network, address string, err error) {
	network, address, ok := strings.Cut(s, ":")
	if !ok || address == "" {
		return "", "", fmt.Errorf("invalid controller address %q", s)
	}
	switch network {
	case "unix", "serial":
		return network, address, nil
	case "tcp":
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", "", fmt.Errorf("invalid controller address %q: %v", s, err)
		}
		return network, address, nil
	}
	return "", "", fmt.Errorf("invalid controller address %q: network must be unix, tcp or serial", s)
}

// ErrControllerLost is the cause a worker's run is canceled with when the
// controller closes the connection or cannot be reached.
var ErrControllerLost = errors.New("controller went away")

func unixNano(t int64) time.Time { return time.Unix(0, t) }
