// Package loadrun runs `headroom load` in its three modes: standalone, as one
// worker of a controller, and as a local fleet of worker processes under one
// controller. It owns the workload's lifecycle (map, populate, measure) and
// its human and JSON output; the engine itself is internal/memload.
package loadrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
)

// Options configure one run.
type Options struct {
	Params memload.Params
	// Controller, if set, is the address of the controller to join.
	Controller string
	// Worker names this worker to its controller.
	Worker string
	// JSON selects JSON lines instead of a table.
	JSON bool
	Out  io.Writer
}

// sharedStartWindow is how long a controller's worker yields the CPU
// between small batches after the common start (see memload.Params).
const sharedStartWindow = 20 * time.Millisecond

// ErrRunFailed marks failures that happened after input was accepted.
var ErrRunFailed = errors.New("run failed")

// Standalone runs the workload in this process and prints its records and
// summary.
func Standalone(ctx context.Context, o Options) error {
	p := newPrinter(o.Out, o.JSON)
	p.header(o.Params)
	block, pop, err := prepare(ctx, o.Params)
	if err != nil {
		return err
	}
	defer block.Close()
	p.populated(pop)
	sum := memload.Run(ctx, block, o.Params, pop, p.record)
	p.summary(sum)
	return nil
}

// Worker joins the controller at o.Controller: it connects first (so an
// unreachable controller fails at once), populates, reports ready, waits for
// the start signal, streams records and sends the summary. The summary is
// printed locally too, so a lost controller loses no data.
func Worker(ctx context.Context, o Options) error {
	session, err := loadctl.Dial(ctx, o.Controller, o.Worker)
	if err != nil {
		return err
	}
	defer session.Close()
	p := newPrinter(o.Out, o.JSON)
	p.header(o.Params)
	// Keep the worker's own runtime (stacks, heap, the controller session)
	// resident: locked before the block is mapped, so only the block pages.
	// Otherwise, deep in swap, waking for the start signal and reporting
	// take major faults and measure the harness instead of the workload.
	// Best effort: without the privilege the worker runs unlocked.
	unix.Mlockall(unix.MCL_CURRENT | unix.MCL_ONFAULT)
	// One P: the touch loop needs one thread, the reporter and the session
	// need short turns. A second P makes every timer and network wake-up
	// start another thread, which, across tens of workers released at one
	// instant, delays the last ones to begin (100 workers: 7-11 ms of start
	// skew with two, 5-10 ms with one).
	runtime.GOMAXPROCS(1)

	// The run ends when the caller's context does or the controller stops
	// us or goes away, whichever comes first.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-session.Stopped():
			cancel(session.Err())
		case <-ctx.Done():
		}
	}()

	block, pop, err := prepare(ctx, o.Params)
	if err != nil {
		session.Fail(err)
		return err
	}
	defer block.Close()
	p.populated(pop)
	if err := session.Ready(pop); err != nil {
		return fmt.Errorf("%w: %v", ErrRunFailed, err)
	}
	if _, err := session.AwaitStart(ctx); err != nil {
		return fmt.Errorf("%w: waiting for start: %v", ErrRunFailed, err)
	}
	params := o.Params
	params.SharedStartWindow = sharedStartWindow
	first := true
	sum := memload.Run(ctx, block, params, pop, func(r memload.Record) {
		if first {
			first = false
			session.Started(r.Time.Add(-time.Duration(r.ElapsedSeconds * float64(time.Second))))
		}
		p.record(r)
		session.Record(r)
	})
	sum.Worker = o.Worker
	p.summary(sum)
	// A summary that cannot be sent, or a session that ended, both mean
	// the controller went away (which of the two is seen first is a race);
	// the summary was printed locally, so no measurement is lost.
	if err := session.Summary(sum); err != nil {
		return fmt.Errorf("%w: %v (%v)", ErrRunFailed, loadctl.ErrControllerLost, err)
	}
	if errors.Is(session.Err(), loadctl.ErrControllerLost) {
		return fmt.Errorf("%w: %v", ErrRunFailed, loadctl.ErrControllerLost)
	}
	return nil
}

// prepare maps and populates the block.
func prepare(ctx context.Context, params memload.Params) (*memload.Block, memload.PopulateStats, error) {
	block, err := memload.Map(params.SizeBytes, params.Mergeable, params.HugePages)
	if err != nil {
		return nil, memload.PopulateStats{}, fmt.Errorf("%w: %v", ErrRunFailed, err)
	}
	pop := block.Populate(params.Content, params.Seed, func() bool { return ctx.Err() != nil })
	if params.Checksum && pop.Pages == block.Pages() {
		pop.Checksum = block.Checksum()
	}
	return block, pop, nil
}
