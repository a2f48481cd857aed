package libvirt

import (
	"context"
	"fmt"
	"slices"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/headroom-dev/headroom/internal/policy"
)

// Parking: a domain the agent saved (managed save) is marked parked in its
// persistent configuration (headroom's element gets parked="TIME"). The
// host lists the inactive domains with a managed-save image and that mark,
// and Source.Resume starts one (libvirt restores it from its image) and
// clears the mark. Only domains the agent parked are ever started by it.

// markParked writes the parked mark into the saved domain's persistent
// configuration, keeping the rest of its element.
func (h *Host) markParked(conn *golibvirt.Libvirt, dom golibvirt.Domain, w Workload, at time.Time) error {
	w.Parked = at.UTC().Format(time.RFC3339Nano)
	return h.setElement(conn, dom, w)
}

// setElement replaces headroom's element in the domain's persistent
// configuration.
func (h *Host) setElement(conn *golibvirt.Libvirt, dom golibvirt.Domain, w Workload) error {
	return h.call("set the metadata of "+dom.Name, func() error {
		return conn.DomainSetMetadata(dom, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{MetadataElement(w)},
			golibvirt.OptString{MetadataKey}, golibvirt.OptString{Namespace}, golibvirt.DomainAffectConfig)
	})
}

// listParked lists the inactive domains with a managed-save image that
// the agent parked.
func (h *Host) listParked(conn *golibvirt.Libvirt) ([]policy.Parked, error) {
	var doms []golibvirt.Domain
	if err := h.call("list saved domains", func() (err error) {
		doms, _, err = conn.ConnectListAllDomains(1, golibvirt.ConnectListDomainsInactive|golibvirt.ConnectListDomainsManagedsave)
		return err
	}); err != nil {
		return nil, err
	}
	var out []policy.Parked
	for _, d := range doms {
		var x string
		if err := h.call("domain XML of "+d.Name, func() (err error) {
			x, err = conn.DomainGetXMLDesc(d, golibvirt.DomainXMLInactive)
			return err
		}); err != nil {
			h.report(d.Name, err)
			continue
		}
		info, err := ParseDomain(x)
		if err != nil || info.ParkedAt.IsZero() {
			continue // not parked by the agent (or its mark unreadable: never started by it)
		}
		out = append(out, policy.Parked{Name: d.Name, Priority: info.Meta.Priority, MemoryBytes: info.MaxMemoryBytes, ParkedAt: info.ParkedAt})
	}
	slices.SortFunc(out, func(a, b policy.Parked) int { return a.ParkedAt.Compare(b.ParkedAt) })
	return out, nil
}

// Parked are the domains the agent parked, as last listed.
func (s *Source) Parked() []policy.Parked {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return slices.Clone(s.h.parked)
}

// Resume starts a parked domain (from its managed-save image) and clears
// its mark. It blocks for as long as libvirtd restores the domain.
func (s *Source) Resume(name string) error {
	h := s.h
	h.mu.Lock()
	conn := h.conn
	h.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("libvirt %s is down", h.cfg.URI)
	}
	var dom golibvirt.Domain
	if err := h.call("look up "+name, func() (err error) { dom, err = conn.DomainLookupByName(name); return err }); err != nil {
		return err
	}
	var x string
	if err := h.call("domain XML of "+name, func() (err error) {
		x, err = conn.DomainGetXMLDesc(dom, golibvirt.DomainXMLInactive)
		return err
	}); err != nil {
		return err
	}
	info, err := ParseDomain(x)
	if err != nil {
		return err
	}
	if info.ParkedAt.IsZero() {
		return fmt.Errorf("domain %s is not parked by the agent", name)
	}
	// A restore reads the whole image back: longer than one call's bound.
	ctx, cancel := context.WithTimeoutCause(context.Background(), restoreTimeout, fmt.Errorf("no answer in %s", restoreTimeout))
	defer cancel()
	if err := callCtx(ctx, func() error { return conn.DomainCreate(dom) }); err != nil {
		h.rpcErrs.Inc()
		return fmt.Errorf("libvirt start %s: %w", name, err)
	}
	w := info.Element
	w.Parked = ""
	if err := h.setElement(conn, dom, w); err != nil {
		return fmt.Errorf("started %s, but its parked mark stays: %w", name, err)
	}
	return nil
}

// restoreTimeout bounds a parked domain's restore.
const restoreTimeout = 5 * time.Minute
