package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// duplicateSignalWindow: a repeated SIGINT/SIGTERM within this time of the
// first is the same request delivered twice (timeout(1), systemd and a
// terminal signal the process and then its whole process group), not the
// user insisting.
const duplicateSignalWindow = time.Second

// signalHandler decides what SIGINT/SIGTERM do. The first ends the run
// cleanly through the context. A later one exits at once (status 130) —
// unless the command is restoring the machine (swap off, cgroups removed),
// which is never abandoned halfway: then it only says so.
type signalHandler struct {
	cancel context.CancelCauseFunc
	exit   func(code int)
	now    func() time.Time
	stderr io.Writer

	mu        sync.Mutex
	first     time.Time
	restoring int
}

// handle processes one delivered signal.
func (h *signalHandler) handle(sig os.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	switch {
	case h.first.IsZero():
		h.first = now
		h.cancel(fmt.Errorf("signal: %v", sig))
	case now.Sub(h.first) < duplicateSignalWindow:
		// the same request, delivered again
	case h.restoring > 0:
		fmt.Fprintln(h.stderr, "headroom: still restoring the machine (workers, cgroups, swap); waiting for that to finish (SIGKILL abandons it)")
	default:
		h.exit(130)
	}
}

// holdRestore marks a stretch in which the command changes the machine
// and must undo it; call the returned function when it is undone.
func (h *signalHandler) holdRestore() (release func()) {
	h.mu.Lock()
	h.restoring++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.restoring--
			h.mu.Unlock()
		})
	}
}

type signalHandlerKey struct{}

// holdRestore is signalHandler.holdRestore for the handler in ctx; without
// one (tests calling commands directly) it does nothing.
func holdRestore(ctx context.Context) (release func()) {
	if h, ok := ctx.Value(signalHandlerKey{}).(*signalHandler); ok {
		return h.holdRestore()
	}
	return func() {}
}
