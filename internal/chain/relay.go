package chain

import (
	"slices"

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
	// relay are, at the tail, the cursors of the relaying of each
	// removed origin's updates to each member.
	relay map[shipRoute]*shipCursor
	// relayTrim: the log of each other origin holds nothing numbered up
	// to it (every site holds those).
	relayTrim wire.Vector
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

// shipRoute names the shipping of one origin's updates to one site.
type shipRoute struct{ to, origin wire.SiteID }

// activeView returns the members of the volume's active view as this
// replica knows it: the head's machine's, or the records' (all the
// configured sites before the first change).
func (r *Replica) activeView() wire.View {
	v := r.hier.state.View
	if m := r.hier.machine; m != nil {
		v = m.View()
	}
	if v.N == 0 {
		v.Members = r.config.Sites
	}
	return v
}

// inView reports whether site is a member of the volume's active view.
func (r *Replica) inView(site wire.SiteID) bool {
	return slices.Contains(r.activeView().Members, site)
}

// refusesShipment reports whether the head of a hierarchical volume
// refuses a shipment: from a sender outside its view in durable mode (its
// updates the view lacks may have been given up: relay.go), or sent in a
// view older than the one that last admitted the sender (rejoin.go).
func (r *Replica) refusesShipment(m *wire.Ship) bool {
	if r.controlMachine() == nil {
		return false // the keyspace is not known yet: nothing to refuse by
	}
	if r.takesOver(m.Sender) && !r.inView(m.Sender) {
		return true
	}
	return m.View < r.hier.admittedIn[m.Sender]
}

// relayTo sends, at the tail, each member of the view the updates of the
// sites outside it that the member lacks, a window at a time (see
// shipTo; with idleOnly only to members with nothing in flight).
func (r *Replica) relayTo(now wire.Time, idleOnly bool) {
	if !r.hierarchical() || !r.role.isTail() {
		return
	}
	h := &r.hier
	view := r.activeView()
	for route := range h.relay {
		if slices.Contains(view.Members, route.origin) || !slices.Contains(view.Members, route.to) {
			delete(h.relay, route) // the origin ships its own again, or the member left
		}
	}
	own := r.sites.Site()
	for _, origin := range r.config.Sites {
		if origin == own || slices.Contains(view.Members, origin) {
			continue
		}
		last := r.geoState.vector.Get(origin)
		for _, site := range view.Members {
			held, known := h.holds[site]
			if site == own || !known {
				continue // a member's grant says what it holds
			}
			route := shipRoute{to: site, origin: origin}
			c := h.relay[route]
			if c == nil {
				n := held.Get(origin)
				if n >= last {
					continue
				}
				c = &shipCursor{sent: n, received: n, stable: n, progressAt: now}
				if h.relay == nil {
					h.relay = map[shipRoute]*shipCursor{}
				}
				h.relay[route] = c
			}
			if r.shipDue(c, site, now, idleOnly) {
				r.shipWindow(c, site, origin, last)
			}
		}
	}
}

// noteHolds records, at the tail, the stable updates per origin another
// site's head granted a lease with, and trims the relay logs.
func (r *Replica) noteHolds(site wire.SiteID, v wire.Vector) {
	h := &r.hier
	if h.holds == nil {
		h.holds = map[wire.SiteID]wire.Vector{}
	}
	h.holds[site] = h.holds[site].Merge(v)
	// Each other origin's updates every site holds leave the logs.
	var through wire.Vector
	own := r.sites.Site()
	for _, origin := range r.config.Sites {
		if origin == own {
			continue
		}
		n := r.geoState.vector.Get(origin)
		for _, s := range r.config.Sites {
			if s != own && s != origin {
				n = min(n, h.holds[s].Get(origin))
			}
		}
		through = through.Set(origin, n)
	}
	if r.noteRelayed(through) {
		r.ackUpstream()
	}
}

// noteRelayed drops from the relay logs what the tail says every site
// holds; it reports whether that is news (the predecessor is then told).
func (r *Replica) noteRelayed(v wire.Vector) bool {
	news := false
	for _, sc := range v {
		if sc.Site == r.ownSite() || sc.N <= r.hier.relayTrim.Get(sc.Site) {
			continue
		}
		r.hier.relayTrim = r.hier.relayTrim.Set(sc.Site, sc.N)
		r.store.TrimShipLog(sc.Site, sc.N)
		news = true
	}
	if news {
		r.hier.ackNews = true
	}
	return news
}

// noteReport records, at the head, the view and applied updates another
// site's tail asked for a lease with.
func (r *Replica) noteReport(m *wire.Control) {
	h := &r.hier
	if h.reports == nil {
		h.reports = map[wire.SiteID]memberReport{}
	}
	h.reports[m.From] = memberReport{view: m.View.N, vector: m.Vector}
}

// viewChanged runs, at the head, when the machine may have adopted a new
// view: the queued updates of the sites it leaves out are dropped (their
// shipments are refused from now on), so that what this site reports
// holding of them in this view grows only through relays.
func (r *Replica) viewChanged() {
	h := &r.hier
	view := h.machine.View()
	if view.N == h.viewN {
		return
	}
	h.viewN = view.N
	r.adoptedView(view)
	for site := range r.geoState.inbound {
		// (Relaxed: a site's shipments are taken while it is out, unless
		// the operator reassigned its keys: rejoin.go.)
		if !slices.Contains(view.Members, site) && r.takesOver(site) {
			delete(r.geoState.inbound, site)
		}
	}
}

// resyncRemoved tells the head's machine, in durable mode, that a site
// outside the view is resynchronised here once every other member
// reported, in this view, holding no more of its updates than this site
// holds stable: its keys may then be elected again (ADR 16).
func (r *Replica) resyncRemoved() {
	h := &r.hier
	m := h.machine
	if m == nil || m.Excluded() {
		return
	}
	view := m.View()
	if view.N == 0 {
		return
	}
	own := r.sites.Site()
	var stable wire.Vector
	for _, site := range r.config.Sites {
		if site == own || slices.Contains(view.Members, site) || h.resynced[site] == view.N || !r.takesOver(site) {
			continue
		}
		if stable == nil {
			stable = r.stableVector()
		}
		if !r.membersReportedAtMost(view, site, stable.Get(site)) && !r.mutations.HierarchicalResyncEarly {
			continue
		}
		resynced := m.Resynced
		if !r.durableAcrossSites() {
			resynced = m.Reassign // (the operator's reassignment, relaxed mode)
		}
		if err := resynced(site, r.now); err != nil {
			r.protocolError("volume %d: %v", r.volume, err)
		}
		if h.resynced == nil {
			h.resynced = map[wire.SiteID]uint64{}
		}
		h.resynced[site] = view.N
	}
}

// membersReportedAtMost reports whether every other member of view said,
// in that view, that it holds at most n of site's updates.
func (r *Replica) membersReportedAtMost(view wire.View, site wire.SiteID, n uint64) bool {
	for _, member := range view.Members {
		if member == r.sites.Site() {
			continue
		}
		rep, ok := r.hier.reports[member]
		if !ok || rep.view != view.N || rep.vector.Get(site) > n {
			return false
		}
	}
	return true
}
