package libvirt

import (
	"context"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
)

// Machine partitions, where libvirt puts its domains' cgroups: without
// systemd (cgroupfs) and with it.
var machinePartitions = []string{"/machine", "/machine.slice"}

// Scope is the agent's scope on a libvirt host: libvirt's machine
// partition (the first of /machine and /machine.slice the hierarchy has)
// when the configuration left it at the host ("/"), else what it names.
func Scope(h cgroup.Hierarchy, configured string) string {
	if path.Clean("/"+configured) != "/" {
		return configured
	}
	for _, p := range machinePartitions {
		if fi, err := os.Stat(filepath.Join(h.Mount, p)); err == nil && fi.IsDir() {
			return p
		}
	}
	return configured
}

// Attach makes a's workloads the host's running domains, and its evictions
// and balloons libvirt's, and follows libvirtd until ctx ends. grace is the time from
// a shutdown request to the destroy.
func Attach(ctx context.Context, a *agent.Agent, cfg Config, grace time.Duration, log *slog.Logger) (*Host, error) {
	h, err := Open(cfg, log)
	if err != nil {
		return nil, err
	}
	if err := a.RegisterCollectors(h.Collectors()...); err != nil {
		return nil, err
	}
	a.SetSource(h.Source())
	a.SetEvictor(h.Evictor(grace))
	if cfg.Balloon {
		a.SetBalloons(h.Balloons())
	}
	go h.Run(ctx)
	return h, nil
}
