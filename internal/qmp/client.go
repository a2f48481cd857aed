package qmp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned for commands on a client whose connection has
// ended (QEMU exited or Close was called).
var ErrClosed = errors.New("qmp: connection closed")

// eventBuffer is how many events wait for a slow reader before new ones
// are dropped (and counted by DroppedEvents).
const eventBuffer = 256

// Client is one QMP connection. Its methods are safe for concurrent use.
type Client struct {
	conn    net.Conn
	version string
	writeMu sync.Mutex
	nextID  atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan Message
	err     error // why the connection ended

	events  chan Event
	dropped atomic.Uint64
	done    chan struct{}
}

// Dial connects to the QMP unix socket at path, reads the greeting and
// negotiates capabilities; ctx bounds the whole handshake.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connect %s: %w", path, err)
	}
	c, err := NewClient(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient runs the handshake on an open connection.
func NewClient(ctx context.Context, conn net.Conn) (*Client, error) {
	r := bufio.NewReaderSize(conn, 64<<10)
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(deadline)
	}
	line, err := readLine(r)
	if err != nil {
		return nil, fmt.Errorf("qmp: read greeting: %w", err)
	}
	conn.SetReadDeadline(time.Time{})
	greeting, err := DecodeMessage(line)
	if err != nil {
		return nil, err
	}
	if greeting.Kind != KindGreeting {
		return nil, fmt.Errorf("qmp: expected a greeting, got %q", truncate(line))
	}
	c := &Client{conn: conn, version: greeting.Version, pending: map[string]chan Message{},
		events: make(chan Event, eventBuffer), done: make(chan struct{})}
	go c.read(r)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Version is QEMU's version from the greeting.
func (c *Client) Version() string { return c.version }

// Events delivers asynchronous events in arrival order. Events arriving
// while eventBuffer are unread are dropped (DroppedEvents counts them).
// The channel is closed when the connection ends.
func (c *Client) Events() <-chan Event { return c.events }

// DroppedEvents is how many events were dropped because nobody read them.
func (c *Client) DroppedEvents() uint64 { return c.dropped.Load() }

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it is open).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; pending commands fail with ErrClosed.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// Execute runs command with args (nil for none) and decodes its return
// value into result (nil to ignore it). It fails with *Error when QEMU
// refuses the command, and with ctx's error when ctx ends first; a reply
// arriving after that is discarded.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	id := "hr-" + strconv.FormatUint(c.nextID.Add(1), 10)
	line, err := encodeCommand(id, command, args)
	if err != nil {
		return err
	}
	reply := make(chan Message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("qmp: %s: %w", command, err)
	}
	c.pending[id] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	c.writeMu.Lock()
	if deadline, ok := ctx.Deadline(); ok {
		c.conn.SetWriteDeadline(deadline)
	} else {
		c.conn.SetWriteDeadline(time.Time{})
	}
	_, err = c.conn.Write(line)
	c.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("qmp: send %s: %w", command, err)
	}

	select {
	case m, ok := <-reply:
		if !ok {
			return fmt.Errorf("qmp: %s: %w", command, c.Err())
		}
		if m.Kind == KindError {
			return fmt.Errorf("%s: %w", command, m.Err)
		}
		if result != nil {
			if err := json.Unmarshal(m.Return, result); err != nil {
				return fmt.Errorf("qmp: decode %s reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("qmp: %s: %w", command, context.Cause(ctx))
	}
}

// read dispatches replies to their commands and events to the channel
// until the connection ends.
func (c *Client) read(r *bufio.Reader) {
	var endErr error
	for {
		line, err := readLine(r)
		if err != nil {
			endErr = err
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := DecodeMessage(line)
		if err != nil {
			endErr = err
			break
		}
		switch m.Kind {
		case KindReturn, KindError:
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case KindEvent:
			select {
			case c.events <- m.Event:
			default:
				c.dropped.Add(1)
			}
		}
	}
	c.conn.Close()
	c.mu.Lock()
	c.err = errors.Join(ErrClosed, endErr)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.events)
	close(c.done)
}

// readLine reads one newline-terminated message.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxLineBytes {
			return nil, fmt.Errorf("qmp: message longer than %d bytes", maxLineBytes)
		}
		if !isPrefix {
			return line, nil
		}
	}
}
