package loadctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/memload"
)

// Session is a worker's connection to its controller.
type Session struct {
	conn    io.ReadWriteCloser
	worker  string
	writeMu sync.Mutex
	start   chan time.Time
	clock   chan time.Time // the controller's answers to clock requests
	stopped chan struct{}  // closed on stop message or lost connection
	lostErr error
	// sync is the worker's clock against the controller's: times received
	// are shifted by -offset, times sent by +offset.
	sync ClockSync
	now  func() time.Time // the worker's clock
}

// clockSamples is how many clock exchanges a worker makes; the one with
// the shortest round trip sets the offset.
const clockSamples = 5

// Dial connects to the controller at addr ("unix:/path", "tcp:host:port",
// "serial:/dev/path"), introduces the worker and synchronises clocks.
func Dial(ctx context.Context, addr, worker string) (*Session, error) {
	return dialClock(ctx, addr, worker, time.Now)
}

// dialClock is Dial on a given clock (tests use skewed ones).
func dialClock(ctx context.Context, addr, worker string, now func() time.Time) (*Session, error) {
	network, address, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	var conn io.ReadWriteCloser
	if network == "serial" {
		conn, err = os.OpenFile(address, os.O_RDWR, 0)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, address)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to controller %s: %w", addr, err)
	}
	s := &Session{conn: conn, worker: worker, start: make(chan time.Time, 1), clock: make(chan time.Time, 1), stopped: make(chan struct{}), now: now}
	if err := s.send(Message{Type: TypeHello, Protocol: ProtocolVersion, Worker: worker, PID: os.Getpid()}); err != nil {
		conn.Close()
		return nil, err
	}
	go s.read()
	if err := s.syncClock(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// syncClock measures the offset between this worker's clock and the
// controller's.
func (s *Session) syncClock(ctx context.Context) error {
	best := ClockSync{RTTNanos: -1}
	for range clockSamples {
		sent := s.now()
		if err := s.send(Message{Type: TypeClock, Worker: s.worker}); err != nil {
			return err
		}
		timeout := time.NewTimer(10 * time.Second)
		select {
		case at := <-s.clock:
			timeout.Stop()
			rtt := s.now().Sub(sent)
			if best.RTTNanos < 0 || rtt.Nanoseconds() < best.RTTNanos {
				mid := sent.Add(rtt / 2)
				best = ClockSync{OffsetNanos: at.Sub(mid).Nanoseconds(), RTTNanos: rtt.Nanoseconds()}
			}
		case <-s.stopped:
			timeout.Stop()
			return fmt.Errorf("controller: %w", s.lostErr)
		case <-timeout.C:
			return fmt.Errorf("controller did not answer a clock request within 10s (protocol %d?)", ProtocolVersion)
		case <-ctx.Done():
			timeout.Stop()
			return context.Cause(ctx)
		}
	}
	s.sync = best
	return nil
}

// Clock is this worker's clock against the controller's.
func (s *Session) Clock() ClockSync { return s.sync }

// toController converts a time on this worker's clock to the controller's.
func (s *Session) toController(t time.Time) time.Time {
	return t.Add(time.Duration(s.sync.OffsetNanos))
}

// read handles controller messages until the connection ends.
func (s *Session) read() {
	sc := bufio.NewScanner(s.conn)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	for sc.Scan() {
		m, err := DecodeMessage(sc.Bytes())
		if err != nil {
			continue // a newer controller's message: ignore rather than die
		}
		switch m.Type {
		case TypeClock:
			select {
			case s.clock <- unixNano(m.AtUnixNano):
			default:
			}
		case TypeStart:
			select {
			case s.start <- unixNano(m.AtUnixNano):
			default:
			}
		case TypeStop:
			s.lostErr = fmt.Errorf("stopped by controller")
			close(s.stopped)
			return
		}
	}
	s.lostErr = ErrControllerLost
	close(s.stopped)
}

// Ready reports that the block is populated.
func (s *Session) Ready(pop memload.PopulateStats) error {
	sync := s.sync
	return s.send(Message{Type: TypeReady, Worker: s.worker, Populate: &pop, Clock: &sync})
}

// AwaitStart blocks until the controller's start signal and then until the
// start time it names; it returns the start on this worker's clock. It sends nothing, so that waking many workers at one
// instant does not also wake the controller; report the measured phase's
// real start with Started once the run is under way.
func (s *Session) AwaitStart(ctx context.Context) (time.Time, error) {
	select {
	case at := <-s.start:
		return waitUntil(ctx, s.now, at.Add(-time.Duration(s.sync.OffsetNanos)), s.stopped, s.Err)
	case <-s.stopped:
		return time.Time{}, s.lostErr
	case <-ctx.Done():
		return time.Time{}, context.Cause(ctx)
	}
}

// Started reports when the worker began its measured phase.
func (s *Session) Started(began time.Time) error {
	return s.send(Message{Type: TypeStarted, Worker: s.worker, StartedUnixNano: s.toController(began).UnixNano()})
}

// Stopped is closed when the controller asks the worker to stop or the
// connection to it is lost; Err then says which.
func (s *Session) Stopped() <-chan struct{} { return s.stopped }

// Err is why Stopped was closed.
func (s *Session) Err() error {
	select {
	case <-s.stopped:
		return s.lostErr
	default:
		return nil
	}
}

// Record streams one interval record.
func (s *Session) Record(r memload.Record) error {
	r.Worker = s.worker
	r.Time = s.toController(r.Time)
	return s.send(Message{Type: TypeInterval, Record: &r})
}

// Summary sends the final summary.
func (s *Session) Summary(sum memload.Summary) error {
	sum.Worker = s.worker
	if sum.StartUnixNano != 0 {
		sum.StartUnixNano = s.toController(time.Unix(0, sum.StartUnixNano)).UnixNano()
	}
	return s.send(Message{Type: TypeSummary, Summary: &sum})
}

// Fail reports an error that ends the worker.
func (s *Session) Fail(err error) error {
	return s.send(Message{Type: TypeError, Worker: s.worker, Error: err.Error()})
}

// Close ends the session.
func (s *Session) Close() error { return s.conn.Close() }

func (s *Session) send(m Message) error {
	b, err := encodeMessage(m)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if _, err := s.conn.Write(b); err != nil {
		return fmt.Errorf("send %s to controller: %w", m.Type, err)
	}
	return nil
}

// waitUntil returns at the start time. Rather than sleeping on a timer it
// yields the CPU in a loop: when tens of workers share a few cores, waking
// each from a timer costs a serialized scheduler round trip per worker
// (about 0.15 ms each here), while a yielding worker only needs its next
// turn, so all of them see the start time within a fraction of a
// millisecond. The wait lasts only the controller's short start lead.
func waitUntil(ctx context.Context, clock func() time.Time, at time.Time, stopped <-chan struct{}, stopErr func() error) (time.Time, error) {
	for i := 0; ; i++ {
		now := clock()
		if !now.Before(at) {
			return now, nil
		}
		if i%256 == 0 {
			select {
			case <-ctx.Done():
				return time.Time{}, context.Cause(ctx)
			case <-stopped:
				return time.Time{}, stopErr()
			default:
			}
		}
		if at.Sub(now) > maxYieldWait {
			// A start far in the future (a remote controller): sleep most of it.
			t := time.NewTimer(at.Sub(now) - maxYieldWait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return time.Time{}, context.Cause(ctx)
			case <-stopped:
				t.Stop()
				return time.Time{}, stopErr()
			}
			continue
		}
		// RawSyscall: sched_yield never blocks, and announcing it to the Go
		// scheduler lets sysmon hand the P to another thread when the yield
		// is long, adding runnable threads in every waiting worker.
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// maxYieldWait bounds how long a worker yield-waits for the start.
const maxYieldWait = 100 * time.Millisecond
