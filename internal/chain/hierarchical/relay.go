package hierarchical

import (
	"slices"

	"github.com/catena-kv/catena/internal/chain/sites"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Relaying and resynchronisation in a hierarchical volume
// (docs/adr/0016-hierarchical-replication-control.md, "Sites outside the
// view"). Shipping is from a write's origin only, so once the active view
// leaves a site out (it crashed, or is cut off), the writes it originated
// that only some members hold would stay there. In durable mode a write
// was answered once a majority of the sites held it, and a majority of
// the sites makes the view, so some member holds every answered write of
// the removed site; the members make each other whole:
//
//   - Every member logs the other sites' updates too (applyGeo), until
//     every site holds them (Ack.Relayed trims the logs).
//   - The sites tell each other what they hold: a tail's lease request
//     carries its applied updates per origin and its view; the head's
//     grant carries its stable ones (wire.Control.Vector).
//   - The tail relays to each member of its view the updates of a site
//     outside the view that the member lacks (relayTo), from its log, as
//     the origin would ship them (wire.Ship.Sender is the relayer).
//   - A member refuses shipments, and forwarded requests, from a site
//     outside its view (ADR 16: such a site may hold writes the view gave
//     up); on adopting a view it drops the queued updates of the sites it
//     leaves out, which then come only through relays.
//   - The head calls Resynced(site) for a removed site once every other
//     member reported, in this same view, holding no more of the site's
//     updates than this site holds stable (resyncRemoved): no member can
//     get more of them, so this site has every answered one, and the
//     site's keys may be elected again.

// relaying is a hierarchical replica's state for relaying and
// resynchronisation.
type relaying struct {
	// holds are, at the tail, the stable updates per origin each other
	// site's head last granted a lease with.
	holds map[wire.SiteID]wire.Vector
	// reports are, at the head, the view and applied updates each other
	// site's tail last asked for a lease with.
	reports map[wire.SiteID]memberReport
	// viewN is the view number the head last dropped the queues of the
	// sites outside the view for; resynced the view number in which it
	// called Resynced for each removed site.
	viewN    uint64
	resynced map[wire.SiteID]uint64
}

// activeView returns the members of the volume's active view as this
// replica knows it: the head's machine's, or the records' (all the
// configured sites before the first change).
func (h *Mode) activeView() wire.View {
	v := h.state.View
	if m := h.machine; m != nil {
		v = m.View()
	}
	if v.N == 0 {
		v.Members = h.core.Config().Sites
	}
	return v
}

// inView reports whether site is a member of the volume's active view.
func (h *Mode) inView(site wire.SiteID) bool {
	return slices.Contains(h.activeView().Members, site)
}

// refusesShipment reports whether the head of a hierarchical volume
// refuses a shipment: from a sender outside its view in durable mode (its
// updates the view lacks may have been given up: relay.go), or sent in a
// view older than the one that last admitted the sender (rejoin.go).
func (h *Mode) refusesShipment(m *wire.Ship) bool {
	if h.controlMachine() == nil {
		return false // the keyspace is not known yet: nothing to refuse by
	}
	if h.takesOver(m.Sender) && !h.inView(m.Sender) {
		return true
	}
	return m.View < h.admittedIn[m.Sender]
}

// relayTo sends, at the tail, each member of the view the updates of the
// sites outside it that the member lacks, a window at a time (see
// shipTo; with idleOnly only to members with nothing in flight).
func (h *Mode) relayTo(now wire.Time, idleOnly bool) {
	if !h.core.IsTail() {
		return
	}
	view := h.activeView()
	h.shipping.StopRelays(func(route sites.Route) bool {
		// The origin ships its own again, or the member left.
		return slices.Contains(view.Members, route.Origin) || !slices.Contains(view.Members, route.To)
	})
	own := h.sites.Site()
	for _, origin := range h.core.Config().Sites {
		if origin == own || slices.Contains(view.Members, origin) {
			continue
		}
		for _, site := range view.Members {
			held, known := h.holds[site]
			if site == own || !known {
				continue // a member's grant says what it holds
			}
			h.shipping.Relay(site, origin, held.Get(origin), now, idleOnly)
		}
	}
}

// noteHolds records, at the tail, the stable updates per origin another
// site's head granted a lease with, and trims the relay logs.
func (h *Mode) noteHolds(site wire.SiteID, v wire.Vector) {
	if h.holds == nil {
		h.holds = map[wire.SiteID]wire.Vector{}
	}
	h.holds[site] = h.holds[site].Merge(v)
	// Each other origin's updates every site holds leave the logs.
	var through wire.Vector
	own := h.sites.Site()
	for _, origin := range h.core.Config().Sites {
		if origin == own {
			continue
		}
		n := h.versions.Applied(origin)
		for _, s := range h.core.Config().Sites {
			if s != own && s != origin {
				n = min(n, h.holds[s].Get(origin))
			}
		}
		through = through.Set(origin, n)
	}
	if h.shipping.NoteRelayed(through) {
		h.core.AckUpstream()
	}
}

// noteReport records, at the head, the view and applied updates another
// site's tail asked for a lease with.
func (h *Mode) noteReport(m *wire.Control) {
	if h.reports == nil {
		h.reports = map[wire.SiteID]memberReport{}
	}
	h.reports[m.From] = memberReport{view: m.View.N, vector: m.Vector}
}

// viewChanged runs, at the head, when the machine may have adopted a new
// view: the queued updates of the sites it leaves out are dropped (their
// shipments are refused from now on), so that what this site reports
// holding of them in this view grows only through relays.
func (h *Mode) viewChanged() {
	view := h.machine.View()
	if view.N == h.viewN {
		return
	}
	h.viewN = view.N
	h.adoptedView(view)
	for _, site := range h.shipping.InboundSites() {
		// (Relaxed: a site's shipments are taken while it is out, unless
		// the operator reassigned its keys: rejoin.go.)
		if !slices.Contains(view.Members, site) && h.takesOver(site) {
			h.shipping.DropInbound(site)
		}
	}
}

// resyncRemoved tells the head's machine, in durable mode, that a site
// outside the view is resynchronised here once every other member
// reported, in this view, holding no more of its updates than this site
// holds stable: its keys may then be elected again (ADR 16).
func (h *Mode) resyncRemoved() {
	m := h.machine
	if m == nil || m.Excluded() {
		return
	}
	view := m.View()
	if view.N == 0 {
		return
	}
	own := h.sites.Site()
	var stable wire.Vector
	for _, site := range h.core.Config().Sites {
		if site == own || slices.Contains(view.Members, site) || h.resynced[site] == view.N || !h.takesOver(site) {
			continue
		}
		if stable == nil {
			stable = h.versions.Stable()
		}
		if !h.membersReportedAtMost(view, site, stable.Get(site)) && !(mutation.Enabled && h.core.Mutations().HierarchicalResyncEarly) {
			continue
		}
		resynced := m.Resynced
		if !h.durableAcrossSites() {
			resynced = m.Reassign // (the operator's reassignment, relaxed mode)
		}
		if err := resynced(site, h.core.Now()); err != nil {
			h.core.ProtocolError("volume %d: %v", h.core.Volume(), err)
		}
		if h.resynced == nil {
			h.resynced = map[wire.SiteID]uint64{}
		}
		h.resynced[site] = view.N
	}
}

// membersReportedAtMost reports whether every other member of view said,
// in that view, that it holds at most n of site's updates.
func (h *Mode) membersReportedAtMost(view wire.View, site wire.SiteID, n uint64) bool {
	for _, member := range view.Members {
		if member == h.sites.Site() {
			continue
		}
		rep, ok := h.reports[member]
		if !ok || rep.view != view.N || rep.vector.Get(site) > n {
			return false
		}
	}
	return true
}
