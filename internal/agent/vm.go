package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/loop"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/qmp"
)

// Balloon is one VM's balloon and its guest's memory statistics, followed
// beside the loop: reading them costs a round no I/O, and a VM that stops
// answering never delays it.
type Balloon interface {
	// Guest is the latest statistics, aged to now (nil: none yet).
	Guest(now time.Time) *policy.GuestMemory
	// SetBalloon asks for a target, sent beside the loop.
	SetBalloon(targetBytes uint64)
	// BalloonErr is how the last request went.
	BalloonErr() error
	// Deflate gives the guest maxBytes now (the agent's exit).
	Deflate(maxBytes uint64) error
}

// Balloons gives the agent the VMs' balloons where a platform owns them:
// libvirt holds a domain's only QMP monitor. Without it the agent follows
// the QMP socket a workload's metadata names.
type Balloons interface {
	// Balloon is the workload's balloon (nil: it has none).
	Balloon(name string) Balloon
}

// BalloonCache is what a VM's follower goroutine and the loop share: the
// guest's latest statistics and the balloon target waiting to be sent.
// The QMP follower here and libvirt's domain balloons embed it; Wake, if
// set, tells the follower a target is waiting.
type BalloonCache struct {
	mu      sync.Mutex
	guest   *policy.GuestMemory
	guestAt time.Time
	// target is the target to send (0: none pending); targetErr how the
	// last one went.
	target    uint64
	targetErr error
	Wake      func()
}

// Guest returns the latest guest statistics (nil if none), aged to now.
func (c *BalloonCache) Guest(now time.Time) *policy.GuestMemory {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.guest == nil {
		return nil
	}
	g := *c.guest
	g.AgeSeconds += now.Sub(c.guestAt).Seconds()
	return &g
}

// StoreGuest keeps statistics read at at.
func (c *BalloonCache) StoreGuest(g policy.GuestMemory, at time.Time) {
	c.mu.Lock()
	c.guest, c.guestAt = &g, at
	c.mu.Unlock()
}

// SetBalloon asks for a balloon target; the follower sends it, so a VM
// that does not answer never delays the caller.
func (c *BalloonCache) SetBalloon(targetBytes uint64) {
	c.mu.Lock()
	c.target = targetBytes
	c.mu.Unlock()
	if c.Wake != nil {
		c.Wake()
	}
}

// PendingTarget is the target waiting to be sent (0: none).
func (c *BalloonCache) PendingTarget() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.target
}

// TargetSent records how sending target went: one that failed stays
// pending, to be sent again at the next poll.
func (c *BalloonCache) TargetSent(target uint64, err error) {
	c.mu.Lock()
	if c.target == target && err == nil {
		c.target = 0
	}
	c.targetErr = err
	c.mu.Unlock()
}

// BalloonErr is how the last balloon request went.
func (c *BalloonCache) BalloonErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.targetErr
}

// balloonPath is the QOM path of a headroom micro-VM's balloon (and of any
// VM whose balloon has id balloon0, as libvirt names it).
const balloonPath = "/machine/peripheral/balloon0"

// qmpTimeout bounds every QMP command the agent sends.
const qmpTimeout = time.Second

// vmConn follows one VM through its QMP socket, in its own goroutine so a
// VM that stops answering never delays the agent's loop: it reads the
// guest's balloon statistics every poll interval (asking QEMU to have the
// guest report them once a second if nobody has) and carries power-down
// and quit requests. It reconnects after errors, at most once per poll.
type vmConn struct {
	socket string
	// pollEvery is how often QEMU's copy of the guest statistics is read.
	// Reading it costs QEMU a QMP command, not the guest: read more often
	// than the guest reports, a report reaches the policy within a poll
	// instead of up to a second late (TestSystemBalloonController's grower
	// got its memory back in 1.63, 1.73 and 3.07 s at 0.25 s, against
	// 2.94 and 3.05 s at 1 s).
	pollEvery time.Duration
	// clock stamps the statistics (the loop's clock: their age is taken
	// against a round's now).
	clock loop.Clock
	stop  chan struct{}
	// balloonSet wakes the goroutine to send a new balloon target.
	balloonSet chan struct{}
	BalloonCache

	mu       sync.Mutex
	client   *qmp.Client
	maxBytes uint64 // the guest's configured RAM, read once per connection
	err      error
}

// Bounds of a vmConn's poll interval: the guest reports once a second.
const (
	vmPollMin = 250 * time.Millisecond
	vmPollMax = time.Second
)

// newVMConn follows the VM at socket, reading its statistics every poll
// (bounded to [vmPollMin, vmPollMax]).
func newVMConn(socket string, poll time.Duration, clock loop.Clock) *vmConn {
	v := &vmConn{socket: socket, pollEvery: min(max(poll, vmPollMin), vmPollMax), clock: clock, stop: make(chan struct{}), balloonSet: make(chan struct{}, 1)}
	v.Wake = func() {
		select {
		case v.balloonSet <- struct{}{}:
		default:
		}
	}
	go v.run()
	return v
}

func (v *vmConn) run() {
	tick := time.NewTicker(v.pollEvery)
	defer tick.Stop()
	for {
		v.poll()
		v.sendBalloon()
		select {
		case <-v.stop:
			v.mu.Lock()
			if v.client != nil {
				v.client.Close()
			}
			v.mu.Unlock()
			return
		case <-tick.C:
		case <-v.balloonSet:
		}
	}
}

// sendBalloon sends the pending balloon target, if any.
func (v *vmConn) sendBalloon() {
	if target := v.PendingTarget(); target != 0 {
		v.TargetSent(target, v.command(func(ctx context.Context, c *qmp.Client) error { return c.Balloon(ctx, target) }))
	}
}

// poll connects if needed and reads the guest statistics.
func (v *vmConn) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	c, err := v.connection(ctx)
	if err == nil {
		var g policy.GuestMemory
		if g, err = readGuest(ctx, c); err == nil {
			v.mu.Lock()
			g.MaxBytes, v.err = v.maxBytes, nil
			v.mu.Unlock()
			v.StoreGuest(g, v.clock.Now())
			return
		}
		if errors.Is(err, errNoStatsYet) {
			return
		}
		c.Close()
	}
	v.mu.Lock()
	v.client, v.err = nil, err
	v.mu.Unlock()
}

// connection returns the open QMP client, dialling if there is none.
func (v *vmConn) connection(ctx context.Context) (*qmp.Client, error) {
	v.mu.Lock()
	c := v.client
	v.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	c, err := qmp.Dial(ctx, v.socket)
	if err != nil {
		return nil, err
	}
	go func() {
		for range c.Events() { // nobody needs them; keep the buffer drained
		}
	}()
	var interval int
	if err := c.QOMGet(ctx, balloonPath, "guest-stats-polling-interval", &interval); err == nil && interval == 0 {
		c.SetGuestStatsPollingInterval(ctx, balloonPath, 1)
	}
	maxBytes, _ := c.QueryMemorySizeSummary(ctx) // 0 (unknown) if it fails: never ballooned
	v.mu.Lock()
	v.client, v.maxBytes = c, maxBytes
	v.mu.Unlock()
	return c, nil
}

var errNoStatsYet = errors.New("the guest has not reported statistics yet")

func readGuest(ctx context.Context, c *qmp.Client) (policy.GuestMemory, error) {
	s, err := c.GuestStats(ctx, balloonPath)
	if err != nil {
		return policy.GuestMemory{}, err
	}
	if s.LastUpdate.IsZero() {
		return policy.GuestMemory{}, errNoStatsYet
	}
	actual, err := c.QueryBalloon(ctx)
	if err != nil {
		return policy.GuestMemory{}, err
	}
	return policy.GuestMemory{MemoryBytes: actual, TotalBytes: s.TotalBytes, AvailableBytes: s.AvailableBytes,
		FreeBytes: s.FreeBytes, DiskCachesBytes: s.DiskCachesBytes,
		MajorFaults: s.MajorFaults, SwapInBytes: s.SwapInBytes, SwapOutBytes: s.SwapOutBytes,
		AgeSeconds: time.Since(s.LastUpdate).Seconds()}, nil
}

// Err is the last connection or read error (nil when the VM answers).
func (v *vmConn) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// command runs one QMP request on the open connection, or fails at once
// if there is none.
func (v *vmConn) command(f func(ctx context.Context, c *qmp.Client) error) error {
	v.mu.Lock()
	c := v.client
	v.mu.Unlock()
	if c == nil {
		if err := v.Err(); err != nil {
			return err
		}
		return errors.New("no QMP connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	return f(ctx, c)
}

// Deflate sets the balloon to maxBytes and waits for QEMU's answer.
func (v *vmConn) Deflate(maxBytes uint64) error {
	return v.command(func(ctx context.Context, c *qmp.Client) error { return c.Balloon(ctx, maxBytes) })
}

// Powerdown presses the guest's power button.
func (v *vmConn) Powerdown() error {
	return v.command(func(ctx context.Context, c *qmp.Client) error { return c.SystemPowerdown(ctx) })
}

// Quit ends QEMU without asking the guest.
func (v *vmConn) Quit() error {
	return v.command(func(ctx context.Context, c *qmp.Client) error { return c.Quit(ctx) })
}

// Close stops following the VM; its goroutine ends within a QMP timeout.
func (v *vmConn) Close() { close(v.stop) }
