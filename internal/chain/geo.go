package chain

import (
	"fmt"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction across sites (§V of the paper; docs/adr/0013-sites-and-
// geo-causal.md): a volume of a geo keyspace has a sibling chain at each
// of the keyspace's sites (Config.Sites).
//
//   - Versions: the head stamps every update it sequences for a client
//     with its site, the next number of that site's updates of the
//     volume (Stamp.N), and a hybrid timestamp above the prior version
//     of the key, the client's causal past (ClientRequest.TS) and every
//     update this replica applied. Every member counts what it applied
//     per origin site (vector, ChainReaction's version vector per chain)
//     and stores objects with their stamps; a deletion leaves a
//     tombstone.
//   - Shipping: every member keeps the updates its site originated in a
//     durable shipping log. The tail ships them, once stable here, to
//     the head of the sibling chain at every other site (Ship), in
//     Stamp.N order, a window at a time; the receiver answers how many it
//     has taken (ShipAck), so a new tail or a new receiving head resumes
//     without loss or duplicate. What every other site holds stable is
//     trimmed from the logs (Ack.Shipped).
//   - Applying: the receiving head queues a site's updates in order and
//     sequences each, as an update of its own chain, once every
//     dependency it names (Update.Deps: the client's last write and what
//     it read since) is stable at this site (SiteView.StableCount). Last
//     writer wins by (TS, site): an update older than the key's version
//     is sequenced without changing the value (Changed false), so it
//     still counts in the vector and nobody waits for it forever.

// SiteView is what a server knows of its site and the others, for the
// replicas of geo volumes. The server implements it.
type SiteView interface {
	// Site is this server's site.
	Site() wire.SiteID
	// Cluster is the deployment's name, sent with every Ship.
	Cluster() string
	// StableCount returns how many of site's updates to the volume key
	// belongs to are known stable at this site.
	StableCount(key string, site wire.SiteID) uint64
	// Route returns where a message to the sibling of volume v at site
	// goes: the sibling's head and its volume id; ok false while the
	// server does not know (it asks that site's masters).
	Route(site wire.SiteID, v wire.VolumeID) (head wire.NodeID, volume wire.VolumeID, ok bool)
	// RouteTail is Route for the sibling's tail (reads forwarded to a
	// hierarchical key's primary site).
	RouteTail(site wire.SiteID, v wire.VolumeID) (tail wire.NodeID, volume wire.VolumeID, ok bool)
	// Learn records a configuration of a volume at another site (sent
	// back with ErrNotHead).
	Learn(site wire.SiteID, c wire.Config)
	// Stale says the server's configuration of the sibling of volume v
	// at site is out of date (a shipment went unanswered, or reached a
	// server that is not the head): it is dropped until site's masters
	// tell a newer one.
	Stale(site wire.SiteID, v wire.VolumeID)
	// Await says a queued update waits for d to be stable at this site:
	// the server asks the tail of d's volume to say when it is.
	Await(d wire.Dep)
	// Keyspace returns the keyspace volume v belongs to, as the server
	// knows the keyspaces.
	Keyspace(v wire.VolumeID) (wire.Keyspace, bool)
	// Relaying says the head of volume v forwarded client's request
	// reqNo to another site (hierarchical.go): the server hands that
	// site's answer to v's replica.
	Relaying(client wire.ClientID, reqNo uint64, v wire.VolumeID, now wire.Time)
}

// geoState is a replica's state for a geo volume.
type geoState struct {
	// vector counts the applied updates per origin site.
	// INVARIANT: each origin's updates are applied in Stamp.N order with
	// no gap, so vector[s] = n means updates 1..n of site s are applied.
	vector wire.Vector
	// lastTS is the largest timestamp applied.
	lastTS uint64
	// shippedTrim: the shipping log holds nothing numbered up to it.
	shippedTrim uint64
	// ship is, at the tail, the shipping to each other site.
	ship map[wire.SiteID]*shipCursor
	// inbound is, at the head, each other site's updates received and
	// not yet sequenced, in Stamp.N order.
	inbound map[wire.SiteID][]wire.Update
	// waiters are, at the tail, OpWaitStable requests for a dependency
	// (ClientRequest.Deps[0]) not yet stable.
	waiters []stableWaiter
	// shipWaiters are, at the tail, OpWaitShipped requests for one of
	// this site's updates not yet held by enough sites.
	shipWaiters []stableWaiter
	// heldAnswers are, at the tail of a hierarchical volume in durable
	// mode, answers to writes, and to reads of versions, of this site not
	// yet held by a majority of its sites (hierarchical.go); they leave
	// from the front, each once enough sites hold its version.
	heldAnswers []heldAnswer
	// shippedTo is, in a hierarchical volume, how many of this site's
	// updates each other site holds stable, as the tail reported
	// (Ack.ShippedTo; the tail's own cursors at the tail).
	shippedTo wire.Vector
	// shippers are, at the head of a hierarchical volume, the member
	// that last shipped each other site's updates here and how many of
	// them it was last told are stable here (reportStable).
	shippers map[wire.SiteID]*shipper
}

// shipCursor is a tail's shipping to one other site.
type shipCursor struct {
	// sent is the last update number sent, received what the receiver
	// took, stable what it holds stable.
	sent, received, stable uint64
	// progressAt is when the receiver last answered; an unanswered
	// window is sent again after ShipRetryInterval.
	progressAt wire.Time
	// pausedUntil: the receiver's queue was full; nothing is shipped
	// to it before then.
	pausedUntil wire.Time
}

// geo reports whether the replica's volume is replicated across sites.
func (r *Replica) geo() bool { return r.config.Geo() && r.sites != nil }

// stamped reports whether the volume's updates carry stamps: every
// causal volume's do (a version's identity: GET-TRANSACTION compares
// them), and every geo volume's, causal or strong (a hierarchical
// keyspace's), since they travel between sites.
func (r *Replica) stamped() bool { return r.causal() || r.config.Geo() }

// ownSite is this server's site (0 in a deployment of one site).
func (r *Replica) ownSite() wire.SiteID {
	if r.sites == nil {
		return 0
	}
	return r.sites.Site()
}

// remote reports whether an update originated at another site.
func (r *Replica) remote(u *wire.Update) bool {
	return !u.Stamp.IsZero() && r.sites != nil && u.Stamp.Origin != r.sites.Site()
}

// Vector returns the applied updates per origin site (geo volumes).
func (r *Replica) Vector() wire.Vector { return slices.Clone(r.geoState.vector) }

// stableVector returns the updates per origin site that this member knows
// are processed by the tail: the vector without the updates on Sent after
// committed (INVARIANT Sent).
func (r *Replica) stableVector() wire.Vector {
	v := slices.Clone(r.geoState.vector)
	if r.committed >= r.applied {
		return v
	}
	for sn := max(r.committed+1, r.sent.firstSN()); r.sent.holds(sn); sn++ {
		u := r.sent.at(sn)
		if u.Stamp.IsZero() {
			continue
		}
		// Updates of one origin are in N order: the first one after
		// committed bounds what is stable.
		if n := u.Stamp.N - 1; n < v.Get(u.Stamp.Origin) {
			v = v.Set(u.Stamp.Origin, n)
		}
	}
	return v
}

// shippedVector returns, at the tail, how many of this site's updates
// each other site holds stable as far as the tail knows (for the status:
// the shipping lag); nil at other members.
func (r *Replica) shippedVector() wire.Vector {
	if !r.role.isTail() {
		return nil
	}
	var v wire.Vector
	for _, site := range r.config.Sites {
		if site == r.sites.Site() {
			continue
		}
		n := r.geoState.shippedTrim
		if c := r.geoState.ship[site]; c != nil {
			n = max(n, c.stable)
		}
		v = v.Set(site, n)
	}
	return v
}

// ShippingLag returns, at the tail of a geo volume, how many of this
// site's updates each other site does not hold stable yet, one entry per
// other site in site order (zeros included); nil at other members.
func (r *Replica) ShippingLag() []wire.SiteCount {
	if !r.geo() || r.phase == phaseWedged || !r.role.isTail() {
		return nil
	}
	own := r.sites.Site()
	originated := r.geoState.vector.Get(own)
	shipped := r.shippedVector()
	var lag []wire.SiteCount
	for _, site := range r.config.Sites {
		if site != own {
			lag = append(lag, wire.SiteCount{Site: site, N: originated - min(shipped.Get(site), originated)})
		}
	}
	return lag
}

// stampLocal gives an update this head sequences for a client its
// identity across sites and its dependencies.
func (r *Replica) stampLocal(u *wire.Update, req *wire.ClientRequest, prior wire.Stamp) {
	site := r.ownSite()
	ts := max(uint64(max(r.now, 0)), prior.TS+1, req.TS+1, r.geoState.lastTS+1)
	if r.mutations.GeoPhysicalTime {
		ts = uint64(max(r.now, 1))
	}
	u.Stamp = wire.Stamp{Origin: site, N: r.geoState.vector.Get(site) + 1, TS: ts}
	u.Result.Stamp = u.Stamp
	if !r.causal() {
		// A hierarchical volume's updates depend on nothing: one site
		// writes a key at a time, control moves only once the view holds
		// the old primary's writes, and the stamps order them (ADR 16).
		return
	}
	u.Deps = slices.Clone(req.Deps)
	if !prior.IsZero() && prior.Origin != site {
		// The new version is computed from (or replaces) the prior one:
		// another site must hold that first. (Of this site's own updates
		// FIFO shipping takes care.)
		u.Deps = append(u.Deps, wire.Dep{Key: u.Key, Origin: prior.Origin, N: prior.N})
	}
}

// applyGeo is apply's part for geo volumes: the vector, the timestamp
// and the shipping log.
func (r *Replica) applyGeo(u *wire.Update) {
	if u.Stamp.IsZero() {
		return
	}
	g := &r.geoState
	if want := g.vector.Get(u.Stamp.Origin) + 1; u.Stamp.N != want {
		panic(fmt.Sprintf("INVARIANT origin order: %s volume %d applying update %d of site %d, expected %d",
			r.id, r.volume, u.Stamp.N, u.Stamp.Origin, want))
	}
	g.vector = g.vector.Set(u.Stamp.Origin, u.Stamp.N)
	g.lastTS = max(g.lastTS, u.Stamp.TS)
	if r.geo() && (!r.remote(u) || r.hierarchical()) {
		// A hierarchical volume logs the other sites' updates too: it
		// relays them if their origin leaves the view (relay.go).
		r.store.AppendShipLog(*u)
	}
}

// handleShip is the head's receipt of another site's updates.
func (r *Replica) handleShip(from wire.NodeID, m *wire.Ship) {
	ack := &wire.ShipAck{Volume: m.OriginVolume, Site: r.sites.Site(), Origin: m.Origin}
	if !r.geo() || !slices.Contains(r.config.Sites, m.Origin) || m.Origin == r.sites.Site() {
		r.protocolError("ship from %s for site %d to a volume of sites %v", from, m.Origin, r.config.Sites)
		return
	}
	if m.Sender != m.Origin && !r.hierarchical() {
		r.protocolError("ship from %s of site %d's updates by site %d to a volume that relays none", from, m.Origin, m.Sender)
		return
	}
	if r.hierarchical() && r.refusesShipment(m) {
		// A site outside the active view may hold writes the view gave
		// up (ADR 16), and one admitted again may have sent them before
		// it left: refused, changing nothing.
		ack.Err = wire.ErrNotInView
		r.send(from, ack)
		return
	}
	if !r.role.isHead() {
		ack.Err = wire.ErrNotHead
		c := r.config.Clone()
		ack.Config = &c
		r.send(from, ack)
		return
	}
	queue := r.geoState.inbound[m.Origin]
	received := r.geoState.vector.Get(m.Origin) + uint64(len(queue))
	for i := range m.Updates {
		u := &m.Updates[i]
		switch n := u.Stamp.N; {
		case u.Stamp.Origin != m.Origin || u.Stamp.N == 0:
			r.protocolError("ship from %s of site %d carries update %v", from, m.Origin, u.Stamp)
			return
		case n <= received:
			continue // sent again
		case n > received+1:
			// A gap: earlier updates were lost (a link broke, or this
			// head is new). The shipper goes back to received.
			ack.Err = wire.ErrUnavailable
		case len(queue) >= r.limits.InboundMax:
			// Full: the rest comes again once the queue drains; the
			// shipper waits a little before it sends it.
			ack.Err = wire.ErrTooManyInFlight
		default:
			queue = append(queue, *u)
			received = n
			continue
		}
		break
	}
	if r.geoState.inbound == nil {
		r.geoState.inbound = map[wire.SiteID][]wire.Update{}
	}
	r.geoState.inbound[m.Origin] = queue
	ack.Received = received
	ack.Stable = r.stableVector().Get(m.Origin)
	r.send(from, ack)
	r.noteShipper(from, m, ack.Stable)
	r.sequenceInbound()
}

// sequenceInbound sequences, at the head, the queued updates of other
// sites whose dependencies are stable here, each site's in order.
func (r *Replica) sequenceInbound() {
	if !r.role.isHead() || !r.geo() {
		return
	}
	for _, site := range r.config.Sites {
		queue := r.geoState.inbound[site]
		through := r.restoreBarrier(site)
		n := 0
		for n < len(queue) && queue[n].Stamp.N <= through && r.admitsUpdate() && r.depsStable(queue[n].Deps) {
			if r.mutations.GeoDropLosers && !queue[n].Stamp.After(r.store.Get(queue[n].Key).Stamp) {
				n++ // discarded: not applied, not counted
				continue
			}
			r.sequenceRemote(&queue[n])
			n++
		}
		if n > 0 {
			r.geoState.inbound[site] = slices.Delete(queue, 0, n)
			r.afterApply()
		}
	}
}

// admitsUpdate reports whether the head may sequence another update now
// (see handleUpdateRequest's backpressure).
func (r *Replica) admitsUpdate() bool {
	return r.sent.len() < r.limits.SentMax && r.phase != phaseHandoffPaused && !r.tooShortForWrites()
}

// depsStable reports whether every dependency is stable at this site;
// the server is asked to find out about the first one that is not.
func (r *Replica) depsStable(deps []wire.Dep) bool {
	if r.mutations.GeoSkipDependencies {
		return true
	}
	for _, d := range deps {
		if r.sites.StableCount(d.Key, d.Origin) < d.N {
			r.sites.Await(d)
			return false
		}
	}
	return true
}

// Object returns the replica's copy of key, for checkers.
func (r *Replica) Object(key string) kv.Object { return r.store.Get(key) }

// GeoProgress sequences, at a geo volume's head, the queued updates of
// other sites whose dependencies became stable (the server calls it when
// its table of stable updates grew).
func (r *Replica) GeoProgress() []wire.Envelope {
	if r.phase == phaseWedged {
		return nil
	}
	r.sequenceInbound()
	return r.flush().Messages
}

// HasInbound reports whether a geo head holds updates of other sites.
func (r *Replica) HasInbound() bool {
	for _, q := range r.geoState.inbound {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

// StableCount returns how many of site's updates this member knows are
// stable (geo volumes).
func (r *Replica) StableCount(site wire.SiteID) uint64 { return r.stableVector().Get(site) }

// sequenceRemote sequences another site's update in this chain: last
// writer wins, so an update older than the key's version changes nothing
// but still counts (NOTES A3.11).
func (r *Replica) sequenceRemote(in *wire.Update) {
	prior := r.store.Get(in.Key)
	u := wire.Update{
		SN: r.applied + 1, Key: in.Key, Changed: in.Changed && (in.Stamp.After(prior.Stamp) || r.mutations.GeoOverwrite),
		Deleted: in.Deleted, Value: in.Value, Stamp: in.Stamp, Deps: in.Deps, Epoch: r.config.Epoch,
	}
	if !u.Changed {
		u.Deleted, u.Value = false, nil
	}
	if r.hierarchical() {
		// The write's session travels with it: a client whose write ran
		// at another site finds its outcome here if it asks again once
		// control moved here (hierarchical.go). Its SN is this chain's.
		u.Client, u.ReqNo, u.AckedBelow, u.Result = in.Client, in.ReqNo, in.AckedBelow, in.Result
		u.Result.SN = u.SN
	}
	r.apply(&u)
}

// shipTo sends other sites, from the tail, the stable updates this site
// originated that they have not taken, a window at a time; after
// ShipRetryInterval without an answer it starts again from what they took.
// With idleOnly it ships only to sites with nothing in flight: a tail
// ships once per applied batch while the link is quiet, and otherwise as
// answers come back, so shipments batch under load.
func (r *Replica) shipTo(now wire.Time, idleOnly bool) {
	if !r.geo() || !r.role.isTail() || r.phase == phaseWedged {
		return
	}
	g := &r.geoState
	own := r.sites.Site()
	last := g.vector.Get(own) // the tail applied it: stable
	if g.ship == nil {
		g.ship = map[wire.SiteID]*shipCursor{}
	}
	for _, site := range r.config.Sites {
		if site == own {
			continue
		}
		c := g.ship[site]
		if c == nil {
			c = &shipCursor{sent: g.shippedTrim, received: g.shippedTrim, stable: g.shippedTrim, progressAt: now}
			g.ship[site] = c
		}
		if !r.shipDue(c, site, now, idleOnly) {
			continue
		}
		if !idleOnly && c.sent == c.received && c.stable < c.received && now-c.progressAt >= r.limits.ShipRetryInterval/4 {
			// Everything taken, not all stable there yet: ask (an empty
			// shipment), so the shipping logs can drop it.
			if head, volume, ok := r.sites.Route(site, r.volume); ok {
				r.send(head, &wire.Ship{Volume: volume, Origin: own, OriginVolume: r.volume, Cluster: r.sites.Cluster(), Sender: own,
					View: r.hier.state.View.N})
				c.progressAt = now
			}
		}
		r.shipWindow(c, site, own, last)
	}
	r.relayTo(now, idleOnly)
}

// shipDue reports whether the tail may send site more from cursor c now:
// an unanswered window is sent again after ShipRetryInterval (the route
// to site may be stale), a full receiver is left alone for a while, and
// with idleOnly a link with something in flight waits for its answers.
func (r *Replica) shipDue(c *shipCursor, site wire.SiteID, now wire.Time, idleOnly bool) bool {
	if c.sent > c.received && now-c.progressAt >= r.limits.ShipRetryInterval {
		c.sent, c.progressAt = c.received, now
		r.sites.Stale(site, r.volume)
	}
	return !(idleOnly && c.sent > c.received || now < c.pausedUntil)
}

// shipWindow sends site, from cursor c, origin's updates from the
// shipping log up to last, as many as the window allows.
func (r *Replica) shipWindow(c *shipCursor, site, origin wire.SiteID, last uint64) {
	own := r.sites.Site()
	for c.sent < last && c.sent-c.received < uint64(r.limits.ShipWindowMax) {
		head, volume, ok := r.sites.Route(site, r.volume)
		if !ok {
			break
		}
		batch := r.store.ShipLog(origin, c.sent+1, min(r.limits.ForwardBatchMax, int(last-c.sent)))
		if len(batch) == 0 && r.shipLogTrim(origin) >= last {
			// Trimmed through all of it: every other site holds those
			// stable (as below), this one included.
			c.sent, c.received = last, max(c.received, last)
			break
		}
		if len(batch) == 0 || batch[0].Stamp.N > last {
			r.protocolError("shipping log of volume %d lacks update %d of site %d for site %d", r.volume, c.sent+1, origin, site)
			break
		}
		if first := batch[0].Stamp.N; first > c.sent+1 {
			// Trimmed: every other site holds those stable
			// (Ack.Shipped, Ack.Relayed), this one included.
			c.sent, c.received = first-1, max(c.received, first-1)
		}
		for i := range batch {
			if origin == own && r.hierarchical() && r.expiredUpdate(batch[i].Stamp.N) {
				batch[i] = asNoOp(batch[i]) // given up by the others (rejoin.go)
			}
			// What means nothing at another site goes: the SN, the
			// answer's address; and the session, but in a hierarchical
			// volume, where it travels with the write (sequenceRemote).
			batch[i].SN, batch[i].ReplyTo = 0, ""
			if !r.hierarchical() {
				batch[i].Client, batch[i].ReqNo, batch[i].AckedBelow = 0, 0, 0
				batch[i].Result = wire.Result{}
			}
		}
		r.send(head, &wire.Ship{Volume: volume, Origin: origin, OriginVolume: r.volume, Updates: batch, Cluster: r.sites.Cluster(), Sender: own,
			View: r.hier.state.View.N})
		c.sent = batch[len(batch)-1].Stamp.N
	}
}

// handleShipAck is the tail's receipt of another site's answer.
func (r *Replica) handleShipAck(now wire.Time, m *wire.ShipAck) {
	site := m.Site
	c := r.geoState.ship[site]
	relayed := m.Origin != 0 && m.Origin != r.ownSite()
	if relayed {
		c = r.hier.relay[shipRoute{to: site, origin: m.Origin}]
	}
	if c == nil || !r.role.isTail() {
		return
	}
	switch m.Err {
	case wire.ErrNotHead:
		if m.Config != nil {
			r.sites.Learn(site, *m.Config)
		}
		if m.Config == nil || m.Config.Head() == "" {
			r.sites.Stale(site, r.volume)
		}
		c.sent = c.received
		return
	case wire.ErrUnavailable, wire.ErrTooManyInFlight:
		// A gap, or the receiver's queue is full: what it did not take
		// goes again, after a pause when it is full.
		c.received = m.Received
		c.sent = m.Received
		if m.Err == wire.ErrTooManyInFlight {
			c.pausedUntil = now + r.limits.ShipRetryInterval/20
		}
	case wire.ErrNone:
		c.received = m.Received
		c.sent = max(c.sent, c.received)
	default:
		return
	}
	c.progressAt = now
	c.stable = max(c.stable, m.Stable)
	if relayed {
		r.relayTo(now, false)
		return
	}
	r.answerShipWaiters()
	r.trimShipLog()
	r.shipTo(now, false)
}

// trimShipLog drops from the shipping log what every other site holds
// stable, and tells the predecessors (Ack.Shipped).
func (r *Replica) trimShipLog() {
	g := &r.geoState
	through := uint64(0)
	first := true
	for _, site := range r.config.Sites {
		if site == r.sites.Site() {
			continue
		}
		c := g.ship[site]
		if c == nil {
			return
		}
		if first || c.stable < through {
			through, first = c.stable, false
		}
	}
	to := false
	if r.hierarchical() {
		to = r.noteShippedTo(r.shippedVector())
	}
	if r.noteShipped(through) || to {
		r.ackUpstream()
	}
}

// afterApplyGeo ships and sequences what the last step made possible.
func (r *Replica) afterApplyGeo() {
	if !r.geo() {
		return
	}
	r.shipTo(r.now, true)
}

// noteShipped records that every other site holds this site's updates up
// to through stable: the shipping log drops them.
// It reports whether that is news.
func (r *Replica) noteShipped(through uint64) bool {
	if through <= r.geoState.shippedTrim {
		return false
	}
	r.geoState.shippedTrim = through
	r.store.TrimShipLog(r.ownSite(), through)
	return true
}

// adoptGeo drops what a new configuration's role no longer needs: the
// shipping cursors when this replica stops being the tail (a new tail
// starts from what the receivers took), the inbound queues when it stops
// being the head (the shippers send them again).
func (r *Replica) adoptGeo() {
	if !r.role.isTail() {
		r.geoState.ship, r.hier.relay, r.hier.holds, r.hier.leaseSince = nil, nil, nil, 0
	}
	if !r.role.isHead() {
		r.geoState.inbound = nil
	}
}

// restoreShipTrims sets, after a restart or a snapshot's installation,
// how far each origin's shipping log was trimmed (not persisted): to
// before its first update still logged, or, with none, to every update
// of the origin applied (entries leave the log only once every site
// holds them). Otherwise a new tail's cursors would start before what
// the log holds.
func (r *Replica) restoreShipTrims() {
	if r.sites == nil || !r.config.Geo() {
		return
	}
	trim := func(origin wire.SiteID) uint64 {
		if first := r.store.ShipLog(origin, 1, 1); len(first) > 0 {
			return first[0].Stamp.N - 1
		}
		return r.geoState.vector.Get(origin)
	}
	own := r.sites.Site()
	r.geoState.shippedTrim = trim(own)
	if r.config.K == 0 { // hierarchical: the other sites' updates are logged too (relay.go)
		for _, origin := range r.config.Sites {
			if origin != own {
				r.hier.relayTrim = r.hier.relayTrim.Set(origin, trim(origin))
			}
		}
	}
}

// shipLogTrim returns through which N origin's shipping log was trimmed:
// every other site holds those updates stable.
func (r *Replica) shipLogTrim(origin wire.SiteID) uint64 {
	if origin == r.sites.Site() {
		return r.geoState.shippedTrim
	}
	return r.hier.relayTrim.Get(origin)
}

// resetGeo drops a geo volume's state with the rest of the replica's.
func (r *Replica) resetGeo() { r.geoState = geoState{} }

// handleGeoWaitStable answers OpWaitStable for a dependency across sites
// (ClientRequest.Deps[0]: site Origin's N-th update of this volume) once
// it is stable here; the tail holds the request until then. A server
// whose head waits for a dependency asks so (siteView.Await), and so does
// a client that moved to this site.
func (r *Replica) handleGeoWaitStable(replyTo wire.NodeID, req *wire.ClientRequest) {
	d := req.Deps[0]
	switch {
	case !r.geo() || len(req.Deps) != 1 || d.N == 0:
		r.reply(replyTo, req, wire.ErrBadRequest, wire.Result{})
	case r.stableVector().Get(d.Origin) >= d.N:
		r.replyAs(replyTo, req, wire.ErrNone, wire.Result{Stamp: wire.Stamp{Origin: d.Origin, N: d.N}}, true)
	case !r.role.isTail():
		r.reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case len(r.geoState.waiters) >= r.limits.WaitersMax:
		r.reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
	default:
		r.geoState.waiters = append(r.geoState.waiters, stableWaiter{replyTo: replyTo, req: *req})
	}
}

// answerGeoWaiters answers, at the tail, the waits for dependencies now
// applied (the tail's vector is stable).
func (r *Replica) answerGeoWaiters() {
	if len(r.geoState.waiters) == 0 {
		return
	}
	r.geoState.waiters = slices.DeleteFunc(r.geoState.waiters, func(w stableWaiter) bool {
		d := w.req.Deps[0]
		if r.geoState.vector.Get(d.Origin) < d.N {
			return false
		}
		r.replyAs(w.replyTo, &w.req, wire.ErrNone, wire.Result{Stamp: wire.Stamp{Origin: d.Origin, N: d.N}}, true)
		return true
	})
}

// tsMax bounds a client's causal timestamp: beyond it the head's clock
// arithmetic could wrap. (No bound relative to this head's clock holds
// across sites, whose clocks may be skewed by any amount; a forged
// timestamp makes its writes win conflicts, which authentication, not the
// protocol, must prevent.)
const tsMax = uint64(1) << 62

// checkGeoRequest refuses a geo update whose dependencies or timestamp
// cannot be right; it changes nothing.
func (r *Replica) checkGeoRequest(req *wire.ClientRequest) wire.ErrCode {
	if len(req.Deps) > r.limits.DepsMax {
		return wire.ErrBadRequest
	}
	for _, d := range req.Deps {
		if d.N == 0 || d.Key == "" || len(d.Key) > kv.KeySizeMax {
			return wire.ErrBadRequest
		}
	}
	if req.TS >= tsMax {
		return wire.ErrBadRequest
	}
	return wire.ErrNone
}

// handleWaitShipped answers OpWaitShipped at the tail of the update's
// origin site once Op.Delta sites, this one included, hold this site's
// update Deps[0] stable: the second step of a write durable across
// sites (the client core's CallOptions.Sites). The tail learns what
// another site holds from its ShipAcks (shipCursor.stable); every member
// knows what all of them hold (shippedTrim).
func (r *Replica) handleWaitShipped(replyTo wire.NodeID, req *wire.ClientRequest) {
	switch {
	case !r.geo() || len(req.Deps) != 1 || req.Deps[0].N == 0 || req.Deps[0].Origin != r.ownSite() ||
		req.Op.Delta < 2 || req.Op.Delta > int64(len(r.config.Sites)):
		r.reply(replyTo, req, wire.ErrBadRequest, wire.Result{})
	case !r.role.isMember():
		r.reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case r.sitesHolding(req.Deps[0].N, r.stableVector().Get(r.ownSite())) >= int(req.Op.Delta):
		r.replyAs(replyTo, req, wire.ErrNone, wire.Result{}, true)
	case !r.role.isTail():
		r.reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case len(r.geoState.shipWaiters) >= r.limits.WaitersMax:
		r.reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
	default:
		r.geoState.shipWaiters = append(r.geoState.shipWaiters, stableWaiter{replyTo: replyTo, req: *req})
	}
}

// sitesHolding returns how many sites, this one included, this member
// knows hold this site's n-th update of the volume stable; stableHere is
// how many of this site's updates are stable here (stableVector, which
// scans Sent: computed once per batch of waiters).
func (r *Replica) sitesHolding(n, stableHere uint64) int {
	own := r.ownSite()
	if stableHere < n {
		return 0 // stable here first: only then does it ship
	}
	if n <= r.geoState.shippedTrim || r.mutations.GeoShippedEarly {
		return len(r.config.Sites)
	}
	held := 1
	for _, site := range r.config.Sites {
		if c := r.geoState.ship[site]; site != own && c != nil && c.stable >= n {
			held++
		}
	}
	return held
}

// answerShipWaiters answers, at the tail, the OpWaitShipped requests
// now held by enough sites.
func (r *Replica) answerShipWaiters() {
	r.answerHeldAnswers()
	if len(r.geoState.shipWaiters) == 0 {
		return
	}
	stableHere := r.stableVector().Get(r.ownSite())
	r.geoState.shipWaiters = slices.DeleteFunc(r.geoState.shipWaiters, func(w stableWaiter) bool {
		if r.sitesHolding(w.req.Deps[0].N, stableHere) < int(w.req.Op.Delta) {
			return false
		}
		r.replyAs(w.replyTo, &w.req, wire.ErrNone, wire.Result{}, true)
		return true
	})
}
