// Package qmp is a QEMU Machine Protocol client on the standard library:
// the greeting and capabilities handshake, commands with ids and
// deadlines, asynchronous events on a channel, and typed helpers for the
// commands headroom uses (balloon, guest stats, power-down, quit).
//
// QMP is JSON over a stream socket, one object per line: the server sends
// a greeting, then answers each command with a return or an error carrying
// the command's id, and sends events at any time.
package qmp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Kind is the kind of a server message.
type Kind int

// Message kinds.
const (
	KindGreeting Kind = iota + 1
	KindReturn
	KindError
	KindEvent
)

// Message is one decoded server message.
type Message struct {
	Kind Kind
	// ID is the id of the command answered (return or error), rendered as
	// a string whatever JSON type the client sent; "" if none.
	ID string
	// Return is the raw "return" value.
	Return json.RawMessage
	// Err is the error of a failed command.
	Err *Error
	// Event is set for KindEvent.
	Event Event
	// Version is QEMU's version from the greeting ("7.2.22").
	Version string
}

// Error is a command's error response.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return fmt.Sprintf("qmp: %s: %s", e.Class, e.Desc) }

// Event is an asynchronous notification (SHUTDOWN, STOP, BALLOON_CHANGE, ...).
type Event struct {
	Name string
	Data json.RawMessage
	// Time is QEMU's timestamp of the event.
	Time time.Time
}

// maxLineBytes bounds one message; the largest replies (query-qmp-schema)
// are a few hundred KiB.
const maxLineBytes = 4 << 20

// DecodeMessage decodes one line sent by a QMP server.
func DecodeMessage(line []byte) (Message, error) {
	var raw struct {
		QMP *struct {
			Version struct {
				QEMU struct {
					Major, Minor, Micro int
				} `json:"qemu"`
			} `json:"version"`
		} `json:"QMP"`
		Return    json.RawMessage `json:"return"`
		Error     *Error          `json:"error"`
		Event     string          `json:"event"`
		Data      json.RawMessage `json:"data"`
		ID        json.RawMessage `json:"id"`
		Timestamp *struct {
			Seconds      int64 `json:"seconds"`
			Microseconds int64 `json:"microseconds"`
		} `json:"timestamp"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Message{}, fmt.Errorf("qmp: decode %q: %w", truncate(line), err)
	}
	id, err := idString(raw.ID)
	if err != nil {
		return Message{}, err
	}
	switch {
	case raw.QMP != nil:
		v := raw.QMP.Version.QEMU
		return Message{Kind: KindGreeting, Version: fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)}, nil
	case raw.Error != nil:
		return Message{Kind: KindError, ID: id, Err: raw.Error}, nil
	case raw.Return != nil:
		return Message{Kind: KindReturn, ID: id, Return: raw.Return}, nil
	case raw.Event != "":
		ev := Event{Name: raw.Event, Data: raw.Data}
		if ts := raw.Timestamp; ts != nil && ts.Seconds >= 0 && ts.Microseconds >= 0 && ts.Microseconds < 1e6 {
			ev.Time = time.Unix(ts.Seconds, ts.Microseconds*1000)
		}
		return Message{Kind: KindEvent, Event: ev}, nil
	}
	return Message{}, fmt.Errorf("qmp: message %q is neither greeting, return, error nor event", truncate(line))
}

// idString renders a JSON id (string or number) as a string.
func idString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := strconv.ParseFloat(n.String(), 64); err == nil {
			return n.String(), nil
		}
	}
	return "", fmt.Errorf("qmp: id %s is neither a string nor a number", truncate(raw))
}

// encodeCommand renders one command line.
func encodeCommand(id, command string, args any) ([]byte, error) {
	if command == "" {
		return nil, errors.New("qmp: empty command")
	}
	cmd := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        string `json:"id"`
	}{command, args, id}
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("qmp: encode %s: %w", command, err)
	}
	return append(b, '\n'), nil
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}
