package agent

import (
	"errors"

	"github.com/headroom-dev/headroom/internal/policy"
)

// applyBalloon hands a balloon target to the VM's goroutine and remembers
// which VMs are ballooned, to give them their memory back at exit.
func (h *hostActuators) applyBalloon(vm Balloon, d policy.Decision) error {
	if vm == nil {
		return errors.New("the VM has no balloon the agent can reach")
	}
	vm.SetBalloon(d.Balloon.TargetBytes)
	if d.Balloon.TargetBytes < d.Balloon.MaxBytes {
		h.ballooned[d.Workload] = d.Balloon.MaxBytes
	} else {
		delete(h.ballooned, d.Workload)
	}
	if err := vm.BalloonErr(); err != nil {
		return errors.New("the previous balloon request failed: " + err.Error())
	}
	return nil
}

// restoreBalloons deflates every balloon the agent inflated: a guest must
// not stay starved of memory nobody manages any more.
func (h *hostActuators) restoreBalloons(balloon func(name string) Balloon) {
	for name, maxBytes := range h.ballooned {
		vm := balloon(name)
		if vm == nil {
			continue
		}
		if err := vm.Deflate(maxBytes); err != nil {
			h.log.Warn("could not deflate the balloon", "workload", name, "err", err)
		}
		delete(h.ballooned, name)
	}
}
