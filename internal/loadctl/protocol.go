// Package loadctl coordinates many `headroom load` workers: a controller
// listens on a unix or tcp address, workers connect, report ready after
// populating, begin together on the controller's start signal, stream
// interval records and send a summary. The density harness and
// `headroom load --workers` are its users.
//
// The protocol is JSON lines over one stream connection per worker:
//
//	worker → controller: hello, ready, started, interval, summary, error
//	controller → worker: start, stop
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
const ProtocolVersion = 1

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
	Error           string                 `json:"error,omitempty"`
	Record          *memload.Record        `json:"-"`
	Summary         *memload.Summary       `json:"-"`
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
	case TypeHello, TypeReady, TypeStart, TypeStarted, TypeError, TypeStop:
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

// AddrForm describes the accepted --controller syntax, for error messages.
const AddrForm = "unix:/path/to/socket or tcp:host:port"

// ParseAddr splits "unix:/path" or "tcp:host:port" into a network and address.
func ParseAddr(s string) (network, address string, err error) {
	network, address, ok := strings.Cut(s, ":")
	if !ok || address == "" {
		return "", "", fmt.Errorf("invalid controller address %q", s)
	}
	switch network {
	case "unix":
		return network, address, nil
	case "tcp":
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", "", fmt.Errorf("invalid controller address %q: %v", s, err)
		}
		return network, address, nil
	}
	return "", "", fmt.Errorf("invalid controller address %q: network must be unix or tcp", s)
}

// ErrControllerLost is the cause a worker's run is canceled with when the
// controller closes the connection or cannot be reached.
var ErrControllerLost = errors.New("controller went away")

func unixNano(t int64) time.Time { return time.Unix(0, t) }
