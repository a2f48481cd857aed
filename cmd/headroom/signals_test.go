package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSignalHandler(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	type delivery struct {
		afterFirst time.Duration
		restoring  bool
	}
	tests := []struct {
		name       string
		deliveries []delivery // the first is at 0
		wantExit   bool
	}{
		{"one signal cancels, does not exit", []delivery{{0, false}}, false},
		{"a duplicate delivery is ignored", []delivery{{0, false}, {5 * time.Millisecond, false}}, false},
		{"a repeat after the window exits", []delivery{{0, false}, {2 * time.Second, false}}, true},
		{"a repeat while restoring waits", []delivery{{0, true}, {2 * time.Second, true}, {9 * time.Second, true}}, false},
		{"a repeat after restoring exits", []delivery{{0, true}, {2 * time.Second, false}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			now := start
			exited := -1
			var said strings.Builder
			h := &signalHandler{cancel: cancel, exit: func(code int) { exited = code }, now: func() time.Time { return now }, stderr: &said}
			for i, d := range tt.deliveries {
				now = start.Add(d.afterFirst)
				release := func() {}
				if d.restoring {
					release = h.holdRestore()
				}
				h.handle(syscall.SIGTERM)
				release()
				release() // idempotent
				if ctx.Err() == nil {
					t.Fatalf("signal %d: the run is not cancelled", i+1)
				}
			}
			if got := context.Cause(ctx).Error(); got != "signal: terminated" {
				t.Errorf("cause %q", got)
			}
			if (exited == 130) != tt.wantExit {
				t.Errorf("exit %d, want exit: %v", exited, tt.wantExit)
			}
			if waited := strings.Contains(said.String(), "still restoring"); waited != (tt.deliveries[len(tt.deliveries)-1].restoring && len(tt.deliveries) > 1) {
				t.Errorf("told the user %q", said.String())
			}
		})
	}
}
