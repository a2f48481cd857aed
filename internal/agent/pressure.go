package agent

import (
	"time"

	"github.com/headroom-dev/headroom/internal/policy"
)

// PressureReporter is told, after every round, the signals as evaluated;
// it must return at once (the Kubernetes node taint and condition are
// written from its own goroutine) and act only on changes.
type PressureReporter interface {
	Report(now time.Time, signals []policy.Signal)
}
