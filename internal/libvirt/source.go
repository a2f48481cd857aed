package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/workloadmeta"
)

// Source is the agent's Source on a libvirt host: its running domains,
// named as libvirt names them.
type Source struct{ h *Host }

// Source returns the host's domains as the agent's workloads.
func (h *Host) Source() *Source { return &Source{h} }

// List returns the running domains of the last listing; while libvirtd is
// unreachable it says so and the agent keeps the domains it knows.
func (s *Source) List() ([]agent.Listed, error) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.conn == nil {
		return nil, fmt.Errorf("%w: libvirt %s: %w", agent.ErrSourceDown, s.h.cfg.URI, s.h.connErr)
	}
	out := make([]agent.Listed, 0, len(s.h.domains))
	for name, e := range s.h.domains {
		out = append(out, agent.Listed{Name: name, Group: e.group})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Metadata is the domain's, from headroom's element in its <metadata>
// (the defaults where it has none, or one that does not parse).
func (s *Source) Metadata(name string) (workloadmeta.Metadata, error) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	e, ok := s.h.domains[name]
	if !ok {
		return workloadmeta.Metadata{Name: name}, nil
	}
	return e.info.Meta, nil
}

// Changed fires after a listing that changed the domains (a lifecycle
// event: a domain started gets its allowance within a round).
func (s *Source) Changed() <-chan struct{} { return s.h.changed }

// Evictor evicts domains through libvirt, each as its metadata says: an
// ACPI shutdown, destroyed after the grace period, or a managed save.
type Evictor struct {
	h     *Host
	grace time.Duration
	poll  time.Duration
}

// Evictor returns the host's evictor; grace is the time from the shutdown
// request to the destroy.
func (h *Host) Evictor(grace time.Duration) *Evictor {
	return &Evictor{h: h, grace: grace, poll: 50 * time.Millisecond}
}

// Begin sends the graceful request: the ACPI power button, or a managed
// save, which runs in libvirtd (for seconds) while Finish waits for it. A
// domain already gone is not an error: Finish reports it.
func (e *Evictor) Begin(ctx context.Context, t agent.Target) (string, error) {
	ent, conn, ok := e.h.lookup(t.Name)
	if !ok {
		if !e.h.running(t.Name) {
			return "", nil
		}
		return "", fmt.Errorf("libvirt %s is down", e.h.cfg.URI)
	}
	if ent.info.Eviction == EvictManagedSave {
		done := make(chan error, 1)
		e.h.mu.Lock()
		e.h.saves[t.Name] = done
		e.h.mu.Unlock()
		go func() {
			err := conn.DomainManagedSave(ent.dom, 0)
			if err == nil {
				// Parked, so that --libvirt-resume may start it again.
				if merr := e.h.markParked(conn, ent.dom, ent.info.Element, time.Now()); merr != nil {
					e.h.log.Warn("libvirt: saved, but not marked parked; it will not be resumed", "domain", t.Name, "err", merr)
				}
			}
			done <- err
		}()
		return "managed save", nil
	}
	err := callCtx(ctx, func() error { return conn.DomainShutdownFlags(ent.dom, golibvirt.DomainShutdownAcpiPowerBtn) })
	if stopped(err) {
		return "", nil // it went by itself: Finish sees it gone
	}
	if err != nil {
		e.h.rpcErrs.Inc()
		return "", fmt.Errorf("libvirt shutdown of %s: %w", t.Name, err)
	}
	return "", nil
}

// Finish waits for the domain to stop running and its cgroup to empty.
// A shutdown not done after the grace period is forced (destroy), unless
// the agent is stopping; a managed save is waited for to its end.
func (e *Evictor) Finish(ctx context.Context, t agent.Target) policy.EvictionOutcome {
	out := func(result, note string) policy.EvictionOutcome {
		return policy.EvictionOutcome{Workload: t.Name, Result: result, Seconds: time.Since(t.SignaledAt).Seconds(), Err: note}
	}
	e.h.mu.Lock()
	save := e.h.saves[t.Name]
	delete(e.h.saves, t.Name)
	e.h.mu.Unlock()
	if save != nil {
		select {
		case err := <-save:
			if stopped(err) && e.gone(ctx, t.Group) {
				return out(policy.EvictedGracefully, "the domain stopped before its save")
			}
			if err != nil {
				return out(policy.EvictionFailed, "managed save: "+err.Error())
			}
			if !e.gone(ctx, t.Group) {
				return e.ended(ctx, out, "saved, but QEMU's processes are still there")
			}
			return out(policy.EvictedSaved, "")
		case <-ctx.Done():
			return e.ended(ctx, out, "the managed save is still running in libvirtd")
		}
	}
	grace, cancel := context.WithTimeout(ctx, e.grace-time.Since(t.SignaledAt))
	defer cancel()
	if e.gone(grace, t.Group) {
		return out(policy.EvictedGracefully, "")
	}
	if agent.Interrupted(ctx) || t.AgentStopping() {
		if e.gone(ctx, t.Group) {
			return out(policy.EvictedGracefully, "")
		}
		return e.ended(ctx, out, "the domain is still shutting down")
	}
	var note string
	if ent, conn, ok := e.h.lookup(t.Name); ok {
		if err := callCtx(ctx, func() error { return conn.DomainDestroyFlags(ent.dom, golibvirt.DomainDestroyDefault) }); err != nil {
			note = "destroy: " + err.Error()
		}
	}
	if e.gone(ctx, t.Group) {
		return out(policy.EvictedForcibly, note)
	}
	return e.ended(ctx, out, note)
}

// stopped reports whether err is libvirt's answer for a domain that is no
// longer there or no longer running: one that vanished mid-eviction.
func stopped(err error) bool {
	var le golibvirt.Error
	return errors.As(err, &le) && (le.Code == uint32(golibvirt.ErrNoDomain) || le.Code == uint32(golibvirt.ErrOperationInvalid))
}

func (e *Evictor) ended(ctx context.Context, out func(string, string) policy.EvictionOutcome, note string) policy.EvictionOutcome {
	if agent.Interrupted(ctx) {
		return out(policy.EvictionInterrupted, note)
	}
	return out(policy.EvictionFailed, note)
}

// gone waits until the domain's QEMU has left its cgroup (libvirt removes
// the cgroup with it), or ctx ends.
func (e *Evictor) gone(ctx context.Context, g cgroup.Group) bool {
	return g == nil || cgroup.WaitEmpty(ctx, g, e.poll)
}

// callCtx runs f, a libvirtd call that takes no context, and returns when
// it does or ctx ends (f then finishes on its own).
func callCtx(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
