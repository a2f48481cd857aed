package agent

import (
	"context"
	"errors"

	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/qmp"
)

// applyBalloon hands a balloon target to the VM's goroutine and remembers
// which VMs are ballooned, to give them their memory back at exit.
func (h *hostActuators) applyBalloon(vm *vmConn, d policy.Decision) error {
	if vm == nil {
		return errors.New("the VM has no QMP connection")
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
func (h *hostActuators) restoreBalloons(vms map[string]*vmConn) {
	for name, maxBytes := range h.ballooned {
		vm := vms[name]
		if vm == nil {
			continue
		}
		err := vm.command(func(ctx context.Context, c *qmp.Client) error { return c.Balloon(ctx, maxBytes) })
		if err != nil {
			h.log.Warn("could not deflate the balloon", "workload", name, "err", err)
		}
		delete(h.ballooned, name)
	}
}
