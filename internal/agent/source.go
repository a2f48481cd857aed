package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// Source tells the agent which workloads it protects — each one's name,
// cgroup and metadata. The default lists the scope's child cgroups and
// reads metadata files beside them; the Kubernetes source (internal/kube)
// lists the node's pods.
type Source interface {
	// List returns the workloads present now. On an error the agent keeps
	// the workloads it knows.
	List() ([]Listed, error)
	// Metadata returns a listed workload's metadata. It is asked at every
	// stats refresh, so it must be cheap.
	Metadata(name string) (workloadmeta.Metadata, error)
	// Changed fires when the list may have changed, so a new workload gets
	// its swap allowance at once (nil: the agent lists only at its
	// discovery interval).
	Changed() <-chan struct{}
}

// ErrSourceDown wraps a List error that means the source cannot be
// reached now (libvirtd down or refusing the agent): the source says so
// itself, once, and the agent keeps the workloads it knows without a line
// of its own a round.
var ErrSourceDown = errors.New("workload source down")

// Parker is a Source whose platform parks workloads (libvirt's managed
// save) and starts them again: with it the policy may resume them
// (resumeParked).
type Parker interface {
	// Parked lists the workloads the agent parked, as last listed.
	Parked() []policy.Parked
	// Resume starts a parked workload; it blocks until the platform has
	// started it (seconds: the image is read back).
	Resume(name string) error
}

// Listed is one workload found by a Source.
type Listed struct {
	Name  string
	Group cgroup.Group
}

// cgroupSource is the default Source: the scope's child cgroups that are
// not ignored and do not hold the agent, with metadata from
// <workloadsDir>/<child-cgroup-name>.json.
type cgroupSource struct {
	scope        cgroup.Group
	workloadsDir string
	ignore       map[string]bool
	own          []cgroup.Group
	metadata     map[string]cachedMetadata
	log          *slog.Logger
	// unusable counts a metadata file that could not be used.
	unusable func()
	// changed fires when a group is made in the scope; nil until watch
	// runs, and without inotify (the listing then finds new groups).
	changed chan struct{}
}

type cachedMetadata struct {
	modTime time.Time
	size    int64
	md      workloadmeta.Metadata
}

func (s *cgroupSource) Changed() <-chan struct{} { return s.changed }

// watch makes Changed fire when a group is made in the scope, until ctx
// ends: a new workload gets its allowance at once, and the periodic
// listing need not stat every group to find one made again.
func (s *cgroupSource) watch(ctx context.Context) {
	changed := make(chan struct{}, 1)
	w, err := cgroup.WatchChildren(ctx, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}, func(err error) {
		s.log.Warn("inotify read failed; new workloads are found at the discovery interval", "err", err)
	})
	if err == nil {
		err = w.Add(s.scope.Path())
	}
	if err != nil {
		s.log.Warn("cannot watch the scope; new workloads are found at the discovery interval", "err", err)
		return
	}
	s.changed = changed
}

func (s *cgroupSource) List() ([]Listed, error) {
	kids, err := s.scope.Children()
	var out []Listed
	listed := make(map[string]bool, len(kids))
	for _, g := range kids {
		name := filepath.Base(g.Path())
		if s.ignore[name] || s.holdsAgent(g.Path()) {
			continue
		}
		out = append(out, Listed{Name: name, Group: g})
		listed[name] = true
	}
	for name := range s.metadata {
		if !listed[name] {
			delete(s.metadata, name)
		}
	}
	return out, err
}

// holdsAgent reports whether the cgroup at dir is, or contains, one of the
// agent's own cgroups.
func (s *cgroupSource) holdsAgent(dir string) bool {
	for _, g := range s.own {
		if own := g.Path(); own == dir || strings.HasPrefix(own, dir+"/") {
			return true
		}
	}
	return false
}

// Metadata re-reads a workload's file only when its modification time or
// size changed. A file that cannot be used (corrupt, truncated, too large,
// a symlink out of the directory) gives the workload the defaults — it is
// still ranked and given its allowance, as a workload without a file — and
// one log line, until the file changes.
func (s *cgroupSource) Metadata(name string) (workloadmeta.Metadata, error) {
	fi, err := os.Stat(filepath.Join(s.workloadsDir, name+".json"))
	if err != nil {
		delete(s.metadata, name)
		return workloadmeta.Read(s.workloadsDir, name)
	}
	if c, ok := s.metadata[name]; ok && c.modTime.Equal(fi.ModTime()) && c.size == fi.Size() {
		return c.md, nil
	}
	md, err := workloadmeta.Read(s.workloadsDir, name)
	if err != nil {
		s.log.Warn("workload metadata unusable; the workload gets the defaults (priority 0, no request, unprotected) until the file changes",
			"workload", name, "err", err)
		s.unusable()
	}
	if s.metadata == nil {
		s.metadata = map[string]cachedMetadata{}
	}
	s.metadata[name] = cachedMetadata{fi.ModTime(), fi.Size(), md}
	return md, nil
}
