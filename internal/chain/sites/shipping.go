package sites

import (
	"math"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Options are what a mode asks of its shipping.
type Options struct {
	// Relays: every member logs the other sites' updates too, and may
	// ship them on for an origin outside the view (internal/chain/hierarchical/relay.go); the
	// acknowledgements up the chain say what each site holds
	// (Ack.ShippedTo) and what every site holds of each origin
	// (Ack.Relayed); a write's session travels with it. Hierarchical
	// control's shipping.
	Relays bool
	// Policy decides what depends on the mode's other state (nil:
	// every shipment is taken and nothing is held).
	Policy Policy
}

// Policy is what a mode built on shipping decides about it.
type Policy interface {
	// RefusesShipment reports whether the head refuses a shipment
	// (answered ErrNotInView, changing nothing).
	RefusesShipment(m *wire.Ship) bool
	// ShipmentTaken notes, at the head, that from shipped m, and the
	// answer said stable of its origin's updates are stable here.
	ShipmentTaken(from wire.NodeID, m *wire.Ship, stable uint64)
	// Barrier returns how many of site's updates the head may have
	// applied now (math.MaxUint64: no bound).
	Barrier(site wire.SiteID) uint64
	// View returns the view number the tail's shipments carry.
	View() uint64
	// Outgoing prepares one of origin's updates for shipping (one the
	// other sites gave up ships as a no-op).
	Outgoing(origin wire.SiteID, u *wire.Update)
	// Relay ships on the updates the mode relays (after the tail
	// shipped, or an answer to a relay came); with idleOnly only over
	// links with nothing in flight.
	Relay(now wire.Time, idleOnly bool)
	// ShipmentAcked runs, at the tail, once the other sites' answers
	// moved what they hold (the answers the mode holds may go).
	ShipmentAcked()
}

// Shipping is a geo volume's replication to the other sites of its
// keyspace (the package comment).
type Shipping struct {
	core     *chain.Core
	sites    chain.SiteView
	versions *Versions
	options  Options

	// shippedTrim: the shipping log holds nothing of this site's
	// numbered up to it; ackedShipped is the Ack.Shipped last sent to
	// the predecessor.
	shippedTrim, ackedShipped uint64
	// originTrims: the log of each other origin holds nothing numbered
	// up to it (Relays: every site holds those).
	originTrims wire.Vector
	// ship is, at the tail, the shipping to each other site.
	ship map[wire.SiteID]*Cursor
	// relays are, at the tail, the cursors of the relaying of another
	// origin's updates to a site (Relays).
	relays map[Route]*Cursor
	// inbound is, at the head, each other site's updates received and
	// not yet sequenced, in Stamp.N order.
	inbound map[wire.SiteID][]wire.Update
	// waiters are, at the tail, OpWaitStable requests for a dependency
	// (ClientRequest.Deps[0]) not yet stable.
	waiters []waiter
	// shipWaiters are, at the tail, OpWaitShipped requests for one of
	// this site's updates not yet held by enough sites.
	shipWaiters []waiter
	// shippedTo is, with Relays, how many of this site's updates each
	// other site holds stable, as the tail reported (Ack.ShippedTo; the
	// tail's own cursors at the tail); news says it or originTrims grew
	// since the last acknowledgement upstream.
	shippedTo wire.Vector
	news      bool
	// told is, at the head, per origin whose tail ships here itself, that
	// tail and what it was last told this site holds stable: the head
	// tells it again as that grows (ReportStable), so a write that waits
	// for this site (OpWaitShipped) hears in one round trip, not at the
	// tail's next ask.
	told map[wire.SiteID]*stableTold
}

// stableTold is what a head last told an origin's tail.
type stableTold struct {
	tail   wire.NodeID
	volume wire.VolumeID
	stable uint64
	at     wire.Time
}

// StableReportEvery spaces a head's unasked reports of what it holds
// stable to one origin's tail.
const StableReportEvery = 5 * wire.Millisecond

// Cursor is a tail's shipping of one origin's updates to one site.
type Cursor struct {
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

// Route names the relaying of one origin's updates to one site.
type Route struct{ To, Origin wire.SiteID }

// waiter is a request the tail holds until what it waits for is so.
type waiter struct {
	replyTo wire.NodeID
	req     wire.ClientRequest
}

// NewShipping returns the shipping of core's replica, whose updates
// versions counts.
func NewShipping(core *chain.Core, versions *Versions, o Options) *Shipping {
	return &Shipping{core: core, sites: core.Sites(), versions: versions, options: o}
}

// ShippedTrim returns how many of this site's updates every other site
// holds stable, as far as this member knows.
func (s *Shipping) ShippedTrim() uint64 { return s.shippedTrim }

// ShippedTo returns, with Relays, how many of this site's updates each
// other site holds stable, as far as this member knows.
func (s *Shipping) ShippedTo() wire.Vector { return s.shippedTo }

// Applied logs an update the replica applies for shipping: this site's
// own, and with Relays the other sites' too.
func (s *Shipping) Applied(u *wire.Update) {
	if u.Stamp.IsZero() {
		return
	}
	if !s.versions.Remote(u) || s.options.Relays {
		s.core.Store().AppendShipLog(*u)
	}
}

// HandleShip is the head's receipt of another site's updates.
func (s *Shipping) HandleShip(from wire.NodeID, m *wire.Ship) {
	c := s.core
	own := s.versions.own
	ack := &wire.ShipAck{Volume: m.OriginVolume, Site: own, Origin: m.Origin}
	if !slices.Contains(c.Config().Sites, m.Origin) || m.Origin == own {
		c.ProtocolError("ship from %s for site %d to a volume of sites %v", from, m.Origin, c.Config().Sites)
		return
	}
	if m.Sender != m.Origin && !s.options.Relays {
		c.ProtocolError("ship from %s of site %d's updates by site %d to a volume that relays none", from, m.Origin, m.Sender)
		return
	}
	if p := s.options.Policy; p != nil && p.RefusesShipment(m) {
		ack.Err = wire.ErrNotInView
		c.Send(from, ack)
		return
	}
	if !c.IsHead() {
		ack.Err = wire.ErrNotHead
		cfg := c.Config().Clone()
		ack.Config = &cfg
		c.Send(from, ack)
		return
	}
	queue := s.inbound[m.Origin]
	received := s.versions.Applied(m.Origin) + uint64(len(queue))
	for i := range m.Updates {
		u := &m.Updates[i]
		switch n := u.Stamp.N; {
		case u.Stamp.Origin != m.Origin || u.Stamp.N == 0:
			c.ProtocolError("ship from %s of site %d carries update %v", from, m.Origin, u.Stamp)
			return
		case n <= received:
			continue // sent again
		case n > received+1:
			// A gap: earlier updates were lost (a link broke, or this
			// head is new). The shipper goes back to received.
			ack.Err = wire.ErrUnavailable
		case len(queue) >= c.Limits().InboundMax:
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
	if s.inbound == nil {
		s.inbound = map[wire.SiteID][]wire.Update{}
	}
	s.inbound[m.Origin] = queue
	ack.Received = received
	ack.Stable = s.versions.Stable().Get(m.Origin)
	c.Send(from, ack)
	if m.Sender == m.Origin && s.options.Policy == nil {
		if s.told == nil {
			s.told = map[wire.SiteID]*stableTold{}
		}
		s.told[m.Origin] = &stableTold{tail: from, volume: m.OriginVolume, stable: ack.Stable, at: c.Now()}
	}
	if p := s.options.Policy; p != nil {
		p.ShipmentTaken(from, m, ack.Stable)
	}
	s.SequenceInbound()
}

// ReportStable tells, at the head, each origin's tail that shipped here
// how many of its updates this site now holds stable, if that grew since
// it was told and StableReportEvery passed (an unasked ShipAck).
func (s *Shipping) ReportStable(now wire.Time) {
	c := s.core
	if !c.IsHead() {
		return
	}
	for _, origin := range c.Config().Sites {
		t := s.told[origin]
		if t == nil {
			continue
		}
		stable := s.versions.Stable().Get(origin)
		if stable <= t.stable || now-t.at < StableReportEvery {
			continue
		}
		t.stable, t.at = stable, now
		c.Send(t.tail, &wire.ShipAck{Volume: t.volume, Site: s.versions.own, Origin: origin,
			Received: s.versions.Applied(origin) + uint64(len(s.inbound[origin])), Stable: stable})
	}
}

// SequenceInbound sequences, at the head, the queued updates of other
// sites whose dependencies are stable here, each site's in order.
func (s *Shipping) SequenceInbound() {
	c := s.core
	if !c.IsHead() {
		return
	}
	for _, site := range c.Config().Sites {
		queue := s.inbound[site]
		through := uint64(math.MaxUint64)
		if p := s.options.Policy; p != nil {
			through = p.Barrier(site)
		}
		n := 0
		for n < len(queue) && queue[n].Stamp.N <= through && c.AdmitsUpdate() && s.depsStable(&queue[n]) {
			if mutation.Enabled && c.Mutations().GeoDropLosers && !queue[n].Stamp.After(c.Get(queue[n].Key).Stamp) {
				n++ // discarded: not applied, not counted
				continue
			}
			s.sequenceRemote(&queue[n])
			n++
		}
		if n > 0 {
			s.inbound[site] = slices.Delete(queue, 0, n)
			c.AfterApply()
		}
	}
}

// depsStable reports whether every dependency of u is stable at this
// site; the server is asked to find out about the first one that is not.
// A dependency on an earlier version of u's own key from u's origin needs
// no wait (ADR 24): it is in u's queue before u, so every member applies
// it first, and ADR 10's reads keep a key's versions in order for every
// reader (one who read u unstable reads the key only up to where it read
// it); its own dependencies were stable before it was applied. Without
// this, a hot key's read-modify-writes each waited a whole chain pass
// here, and the volume's queue with them.
func (s *Shipping) depsStable(u *wire.Update) bool {
	if mutation.Enabled && s.core.Mutations().GeoSkipDependencies {
		return true
	}
	for _, d := range u.Deps {
		if d.Origin == u.Stamp.Origin && d.N < u.Stamp.N && (d.Key == u.Key || mutation.Enabled && s.core.Mutations().GeoVolumeOrderOnly && s.sameVolume(d.Key)) {
			continue
		}
		if s.sites.StableCount(d.Key, d.Origin) < d.N {
			s.sites.Await(d)
			return false
		}
	}
	return true
}

// sameVolume reports whether key belongs to this replica's volume.
func (s *Shipping) sameVolume(key string) bool {
	ks, ok := s.sites.Keyspace(s.core.Volume())
	return ok && placement.VolumeIn(ks, key) == s.core.Volume()
}

// HasInbound reports whether the head holds updates of other sites.
func (s *Shipping) HasInbound() bool {
	for _, q := range s.inbound {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

// DropInbound drops, at the head, the queued updates of site (their
// shipments are refused from now on).
func (s *Shipping) DropInbound(site wire.SiteID) { delete(s.inbound, site) }

// InboundSites returns the sites the head holds a queue of updates of.
func (s *Shipping) InboundSites() []wire.SiteID {
	var out []wire.SiteID
	for site := range s.inbound {
		out = append(out, site)
	}
	slices.Sort(out)
	return out
}

// Received returns how many of site's updates the head has applied or
// queued.
func (s *Shipping) Received(site wire.SiteID) uint64 {
	return s.versions.Applied(site) + uint64(len(s.inbound[site]))
}

// sequenceRemote sequences another site's update in this chain: last
// writer wins, so an update older than the key's version changes nothing
// but still counts (NOTES A3.11).
func (s *Shipping) sequenceRemote(in *wire.Update) {
	c := s.core
	prior := c.Get(in.Key)
	u := c.NextUpdate(in.Key)
	u.Changed = in.Changed && (in.Stamp.After(prior.Stamp) || mutation.Enabled && c.Mutations().GeoOverwrite)
	u.Deleted, u.Value, u.Stamp, u.Deps = in.Deleted, in.Value, in.Stamp, in.Deps
	if !u.Changed {
		u.Deleted, u.Value = false, nil
	}
	if s.options.Relays {
		// The write's session travels with it: a client whose write ran
		// at another site finds its outcome here if it asks again once
		// control moved here (hierarchical). Its SN is this chain's.
		u.Client, u.ReqNo, u.AckedBelow, u.Result = in.Client, in.ReqNo, in.AckedBelow, in.Result
		u.Result.SN = u.SN
	}
	c.Apply(&u)
}

// ShipTo sends other sites, from the tail, the stable updates this site
// originated that they have not taken, a window at a time; after
// ShipRetryInterval without an answer it starts again from what they took.
// With idleOnly it ships only to sites with nothing in flight: a tail
// ships once per applied batch while the link is quiet, and otherwise as
// answers come back, so shipments batch under load.
func (s *Shipping) ShipTo(now wire.Time, idleOnly bool) {
	c := s.core
	if !c.IsTail() || c.Wedged() {
		return
	}
	own := s.versions.own
	last := s.versions.Applied(own) // the tail applied it: stable
	if s.ship == nil {
		s.ship = map[wire.SiteID]*Cursor{}
	}
	for _, site := range c.Config().Sites {
		if site == own {
			continue
		}
		cur := s.ship[site]
		if cur == nil {
			cur = &Cursor{sent: s.shippedTrim, received: s.shippedTrim, stable: s.shippedTrim, progressAt: now}
			s.ship[site] = cur
		}
		if !s.Due(cur, site, now, idleOnly) {
			continue
		}
		if !idleOnly && cur.sent == cur.received && cur.stable < cur.received && now-cur.progressAt >= c.Limits().ShipRetryInterval/4 {
			// Everything taken, not all stable there yet: ask (an empty
			// shipment), so the shipping logs can drop it.
			if head, volume, ok := s.sites.Route(site, c.Volume()); ok {
				c.Send(head, &wire.Ship{Volume: volume, Origin: own, OriginVolume: c.Volume(), Cluster: s.sites.Cluster(), Sender: own,
					View: s.view()})
				cur.progressAt = now
			}
		}
		s.Window(cur, site, own, last)
	}
	if p := s.options.Policy; p != nil {
		p.Relay(now, idleOnly)
	}
}

// view returns the view number shipments carry (0 without a policy).
func (s *Shipping) view() uint64 {
	if p := s.options.Policy; p != nil {
		return p.View()
	}
	return 0
}

// Due reports whether the tail may send site more from cursor c now:
// an unanswered window is sent again after ShipRetryInterval (the route
// to site may be stale), a full receiver is left alone for a while, and
// with idleOnly a link with something in flight waits for its answers.
func (s *Shipping) Due(c *Cursor, site wire.SiteID, now wire.Time, idleOnly bool) bool {
	if c.sent > c.received && now-c.progressAt >= s.core.Limits().ShipRetryInterval {
		c.sent, c.progressAt = c.received, now
		s.sites.Stale(site, s.core.Volume())
	}
	return !(idleOnly && c.sent > c.received || now < c.pausedUntil)
}

// Window sends site, from cursor c, origin's updates from the shipping
// log up to last, as many as the window allows.
func (s *Shipping) Window(c *Cursor, site, origin wire.SiteID, last uint64) {
	core := s.core
	own := s.versions.own
	limits := core.Limits()
	for c.sent < last && c.sent-c.received < uint64(limits.ShipWindowMax) {
		head, volume, ok := s.sites.Route(site, core.Volume())
		if !ok {
			break
		}
		batch := core.Store().ShipLog(origin, c.sent+1, min(limits.ForwardBatchMax, int(last-c.sent)))
		if len(batch) == 0 && s.logTrim(origin) >= last {
			// Trimmed through all of it: every other site holds those
			// stable (as below), this one included.
			c.sent, c.received = last, max(c.received, last)
			break
		}
		if len(batch) == 0 || batch[0].Stamp.N > last {
			core.ProtocolError("shipping log of volume %d lacks update %d of site %d for site %d", core.Volume(), c.sent+1, origin, site)
			break
		}
		if first := batch[0].Stamp.N; first > c.sent+1 {
			// Trimmed: every other site holds those stable
			// (Ack.Shipped, Ack.Relayed), this one included.
			c.sent, c.received = first-1, max(c.received, first-1)
		}
		for i := range batch {
			if p := s.options.Policy; p != nil {
				p.Outgoing(origin, &batch[i])
			}
			// What means nothing at another site goes: the SN, the
			// answer's address; and the session, unless it travels
			// with the write (Relays: sequenceRemote).
			batch[i].SN, batch[i].ReplyTo = 0, ""
			if !s.options.Relays {
				batch[i].Client, batch[i].ReqNo, batch[i].AckedBelow = 0, 0, 0
				batch[i].Result = wire.Result{}
			}
		}
		core.Send(head, &wire.Ship{Volume: volume, Origin: origin, OriginVolume: core.Volume(), Updates: batch, Cluster: s.sites.Cluster(), Sender: own,
			View: s.view()})
		c.sent = batch[len(batch)-1].Stamp.N
	}
}

// HandleShipAck is the tail's receipt of another site's answer.
func (s *Shipping) HandleShipAck(now wire.Time, m *wire.ShipAck) {
	core := s.core
	site := m.Site
	c := s.ship[site]
	relayed := m.Origin != 0 && m.Origin != s.versions.own
	if relayed {
		c = s.relays[Route{To: site, Origin: m.Origin}]
	}
	if c == nil || !core.IsTail() {
		return
	}
	switch m.Err {
	case wire.ErrNotHead:
		if m.Config != nil {
			s.sites.Learn(site, *m.Config)
		}
		if m.Config == nil || m.Config.Head() == "" {
			s.sites.Stale(site, core.Volume())
		}
		c.sent = c.received
		return
	case wire.ErrUnavailable, wire.ErrTooManyInFlight:
		// A gap, or the receiver's queue is full: what it did not take
		// goes again, after a pause when it is full.
		c.received = m.Received
		c.sent = m.Received
		if m.Err == wire.ErrTooManyInFlight {
			c.pausedUntil = now + core.Limits().ShipRetryInterval/20
		}
	case wire.ErrNone:
		if s.options.Policy == nil && m.Received <= c.received && c.sent > c.received {
			// Nothing new taken while a window is out: a head's unasked
			// report of what it holds stable (ReportStable, which
			// modes with a Policy do not send). It is not progress, or
			// a lost window would never be sent again.
			c.stable = max(c.stable, m.Stable)
			s.answerShipWaiters()
			s.trimShipLog()
			return
		}
		c.received = m.Received
		c.sent = max(c.sent, c.received)
	default:
		return
	}
	c.progressAt = now
	c.stable = max(c.stable, m.Stable)
	if relayed {
		s.options.Policy.Relay(now, false)
		return
	}
	s.answerShipWaiters()
	s.trimShipLog()
	s.ShipTo(now, false)
}

// trimShipLog drops from the shipping log what every other site holds
// stable, and tells the predecessors (Ack.Shipped).
func (s *Shipping) trimShipLog() {
	through := uint64(0)
	first := true
	for _, site := range s.core.Config().Sites {
		if site == s.versions.own {
			continue
		}
		c := s.ship[site]
		if c == nil {
			return
		}
		if first || c.stable < through {
			through, first = c.stable, false
		}
	}
	to := false
	if s.options.Relays {
		to = s.noteShippedTo(s.shippedVector())
	}
	if s.noteShipped(through) || to {
		s.core.AckUpstream()
	}
}

// noteShipped records that every other site holds this site's updates up
// to through stable: the shipping log drops them. It reports whether that
// is news.
func (s *Shipping) noteShipped(through uint64) bool {
	if through <= s.shippedTrim {
		return false
	}
	s.shippedTrim = through
	s.core.Store().TrimShipLog(s.versions.own, through)
	return true
}

// noteShippedTo merges what the successor (or, at the tail, the
// shipping) says each other site holds stable; it reports whether that
// grew (the predecessor is then told).
func (s *Shipping) noteShippedTo(v wire.Vector) bool {
	merged := s.shippedTo.Merge(v)
	if slices.Equal(merged, s.shippedTo) {
		return false
	}
	s.shippedTo, s.news = merged, true
	return true
}

// NoteRelayed drops from the logs of the other origins what the tail
// says every site holds; it reports whether that is news (the
// predecessor is then told).
func (s *Shipping) NoteRelayed(v wire.Vector) bool {
	news := false
	for _, sc := range v {
		if sc.Site == s.versions.own || sc.N <= s.originTrims.Get(sc.Site) {
			continue
		}
		s.originTrims = s.originTrims.Set(sc.Site, sc.N)
		s.core.Store().TrimShipLog(sc.Site, sc.N)
		news = true
	}
	if news {
		s.news = true
	}
	return news
}

// AckNews reports whether the predecessor has not heard what this
// member learned of the other sites.
func (s *Shipping) AckNews() bool { return s.shippedTrim > s.ackedShipped || s.news }

// FillAck adds what this member knows of the other sites to an
// acknowledgement going upstream.
func (s *Shipping) FillAck(a *wire.Ack) {
	s.ackedShipped, s.news = s.shippedTrim, false
	a.Shipped, a.ShippedTo, a.Relayed = s.ackedShipped, s.shippedTo, slices.Clone(s.originTrims)
}

// AckReceived takes what the successor knows of the other sites, and
// reports whether the predecessor should hear of it.
func (s *Shipping) AckReceived(a *wire.Ack) bool {
	shipped, to, relayed := s.noteShipped(a.Shipped), s.noteShippedTo(a.ShippedTo), s.NoteRelayed(a.Relayed)
	return shipped || to || relayed
}

// Adopted drops what a new configuration's role no longer needs: the
// shipping cursors when this replica stops being the tail (a new tail
// starts from what the receivers took), the inbound queues when it stops
// being the head (the shippers send them again).
func (s *Shipping) Adopted() {
	if !s.core.IsTail() {
		s.ship, s.relays = nil, nil
	}
	if !s.core.IsHead() {
		s.inbound = nil
	}
}

// Restore sets, after a restart or a snapshot's installation, how far
// each origin's shipping log was trimmed (not persisted): to before its
// first update still logged, or, with none, to every update of the
// origin applied (entries leave the log only once every site holds them).
// Otherwise a new tail's cursors would start before what the log holds.
func (s *Shipping) Restore() {
	trim := func(origin wire.SiteID) uint64 {
		if first := s.core.Store().ShipLog(origin, 1, 1); len(first) > 0 {
			return first[0].Stamp.N - 1
		}
		return s.versions.Applied(origin)
	}
	own := s.versions.own
	s.shippedTrim = trim(own)
	if s.options.Relays { // the other sites' updates are logged too
		for _, origin := range s.core.Config().Sites {
			if origin != own {
				s.originTrims = s.originTrims.Set(origin, trim(origin))
			}
		}
	}
}

// logTrim returns through which N origin's shipping log was trimmed:
// every other site holds those updates stable.
func (s *Shipping) logTrim(origin wire.SiteID) uint64 {
	if origin == s.versions.own {
		return s.shippedTrim
	}
	return s.originTrims.Get(origin)
}

// FillSnapshot adds the shipping log to a snapshot's last chunk: a new
// member ships, or relays, what the other sites do not hold yet.
func (s *Shipping) FillSnapshot(last *wire.SnapshotChunk) {
	store := s.core.Store()
	own := s.versions.own
	last.ShipLog = store.ShipLog(own, s.shippedTrim+1, int(s.versions.Applied(own)-s.shippedTrim))
	if !s.options.Relays {
		return
	}
	for _, origin := range s.core.Config().Sites {
		if trim := s.originTrims.Get(origin); origin != own {
			last.ShipLog = append(last.ShipLog, store.ShipLog(origin, trim+1, int(s.versions.Applied(origin)-trim))...)
		}
	}
}

// Installed takes the shipping log of an installed snapshot.
func (s *Shipping) Installed(last *wire.SnapshotChunk) {
	for _, u := range last.ShipLog {
		s.core.Store().AppendShipLog(u)
	}
	s.Restore() // each origin's log starts after what every site holds
}

// Reset drops the shipping's state with the replica's.
func (s *Shipping) Reset() {
	s.SnapshotStarted()
	s.ackedShipped, s.originTrims, s.relays, s.news, s.told = 0, nil, nil, false, nil
}

// SnapshotStarted drops what a joining replica holds of the shipping as
// it drops its state for a snapshot's first chunk (the snapshot's
// installation sets the trims again; it acknowledges nothing before).
func (s *Shipping) SnapshotStarted() {
	s.shippedTrim, s.ship, s.inbound, s.waiters, s.shipWaiters, s.shippedTo = 0, nil, nil, nil, nil, nil
}

// HandleWaitStable answers OpWaitStable for a dependency across sites
// (ClientRequest.Deps[0]: site Origin's N-th update of this volume) once
// it is stable here; the tail holds the request until then. A server
// whose head waits for a dependency asks so (SiteView.Await), and so does
// a client that moved to this site.
func (s *Shipping) HandleWaitStable(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := s.core
	d := req.Deps[0]
	stable := s.versions.Stable().Get(d.Origin)
	switch {
	case len(req.Deps) != 1 || d.N == 0:
		c.Reply(replyTo, req, wire.ErrBadRequest, wire.Result{})
	case stable >= d.N:
		// The answer says all this member knows stable: a head that
		// waits for several of the origin's updates learns of them all.
		c.ReplyStable(replyTo, req, wire.Result{Stamp: wire.Stamp{Origin: d.Origin, N: stable}})
	case !c.IsTail():
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case len(s.waiters) >= c.Limits().WaitersMax:
		c.Reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
	default:
		s.waiters = append(s.waiters, waiter{replyTo: replyTo, req: *req})
	}
}

// TailApplied answers, at the tail, the waits for dependencies now
// applied (the tail's vector is stable).
func (s *Shipping) TailApplied() {
	if len(s.waiters) == 0 {
		return
	}
	s.waiters = slices.DeleteFunc(s.waiters, func(w waiter) bool {
		d := w.req.Deps[0]
		applied := s.versions.Applied(d.Origin)
		if applied < d.N {
			return false
		}
		s.core.ReplyStable(w.replyTo, &w.req, wire.Result{Stamp: wire.Stamp{Origin: d.Origin, N: applied}})
		return true
	})
}

// HandleWaitShipped answers OpWaitShipped at the tail of the update's
// origin site once Op.Delta sites, this one included, hold this site's
// update Deps[0] stable: the second step of a write durable across
// sites (the client core's CallOptions.Sites). The tail learns what
// another site holds from its ShipAcks (Cursor.stable); every member
// knows what all of them hold (shippedTrim).
func (s *Shipping) HandleWaitShipped(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := s.core
	own := s.versions.own
	switch {
	case len(req.Deps) != 1 || req.Deps[0].N == 0 || req.Deps[0].Origin != own ||
		req.Op.Delta < 2 || req.Op.Delta > int64(len(c.Config().Sites)):
		c.Reply(replyTo, req, wire.ErrBadRequest, wire.Result{})
	case !c.IsMember():
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case s.SitesHolding(req.Deps[0].N, s.versions.Stable().Get(own)) >= int(req.Op.Delta):
		c.ReplyStable(replyTo, req, wire.Result{})
	case !c.IsTail():
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case len(s.shipWaiters) >= c.Limits().WaitersMax:
		c.Reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
	default:
		s.shipWaiters = append(s.shipWaiters, waiter{replyTo: replyTo, req: *req})
	}
}

// SitesHolding returns how many sites, this one included, this member
// knows hold this site's n-th update of the volume stable; stableHere is
// how many of this site's updates are stable here (Versions.Stable, which
// scans Sent: computed once per batch of waiters).
func (s *Shipping) SitesHolding(n, stableHere uint64) int {
	own := s.versions.own
	if stableHere < n {
		return 0 // stable here first: only then does it ship
	}
	if n <= s.shippedTrim || mutation.Enabled && s.core.Mutations().GeoShippedEarly {
		return len(s.core.Config().Sites)
	}
	held := 1
	for _, site := range s.core.Config().Sites {
		if c := s.ship[site]; site != own && c != nil && c.stable >= n {
			held++
		}
	}
	return held
}

// answerShipWaiters answers, at the tail, the OpWaitShipped requests
// now held by enough sites.
func (s *Shipping) answerShipWaiters() {
	if p := s.options.Policy; p != nil {
		p.ShipmentAcked()
	}
	if len(s.shipWaiters) == 0 {
		return
	}
	stableHere := s.versions.Stable().Get(s.versions.own)
	s.shipWaiters = slices.DeleteFunc(s.shipWaiters, func(w waiter) bool {
		if s.SitesHolding(w.req.Deps[0].N, stableHere) < int(w.req.Op.Delta) {
			return false
		}
		s.core.ReplyStable(w.replyTo, &w.req, wire.Result{})
		return true
	})
}

// ReleaseTailRequests sends the held waits back to their clients when
// this replica stops being the tail: they ask the new one.
func (s *Shipping) ReleaseTailRequests() {
	for _, w := range append(s.waiters, s.shipWaiters...) {
		s.core.Reply(w.replyTo, &w.req, wire.ErrNotTail, wire.Result{})
	}
	s.waiters, s.shipWaiters = nil, nil
}

// shippedVector returns, at the tail, how many of this site's updates
// each other site holds stable as far as the tail knows (for the status:
// the shipping lag); nil at other members.
func (s *Shipping) shippedVector() wire.Vector {
	if !s.core.IsTail() {
		return nil
	}
	var v wire.Vector
	for _, site := range s.core.Config().Sites {
		if site == s.versions.own {
			continue
		}
		n := s.shippedTrim
		if c := s.ship[site]; c != nil {
			n = max(n, c.stable)
		}
		v = v.Set(site, n)
	}
	return v
}

// Status adds the updates stable here and, at the tail, shipped to each
// other site to the replica's status.
func (s *Shipping) Status(st *wire.VolumeStatus) {
	st.Stable = s.versions.Stable()
	st.Shipped = s.shippedVector()
	st.ShippingAge = s.ShippingAge(s.core.Now())
}

// ShippingAge implements chain.Shipper: the age of the oldest update of
// this site each other site does not hold stable, from its stamp's
// timestamp (the origin head's clock when it was written, or later).
func (s *Shipping) ShippingAge(now wire.Time) []wire.SiteTime {
	lag := s.ShippingLag()
	if lag == nil {
		return nil
	}
	own := s.versions.own
	originated := s.versions.Applied(own)
	ages := make([]wire.SiteTime, len(lag))
	for i, l := range lag {
		ages[i].Site = l.Site
		if l.N == 0 {
			continue
		}
		// The oldest update the site lacks is the first after what it holds.
		if oldest := s.core.Store().ShipLog(own, originated-l.N+1, 1); len(oldest) == 1 {
			ages[i].Age = max(0, now-wire.Time(oldest[0].Stamp.TS))
		}
	}
	return ages
}

// ShippingLag returns, at the tail, how many of this site's updates each
// other site does not hold stable yet, one entry per other site in site
// order (zeros included); nil at other members.
func (s *Shipping) ShippingLag() []wire.SiteCount {
	c := s.core
	if c.Wedged() || !c.IsTail() {
		return nil
	}
	own := s.versions.own
	originated := s.versions.Applied(own)
	shipped := s.shippedVector()
	var lag []wire.SiteCount
	for _, site := range c.Config().Sites {
		if site != own {
			lag = append(lag, wire.SiteCount{Site: site, N: originated - min(shipped.Get(site), originated)})
		}
	}
	return lag
}

// StableCount returns how many of site's updates this member knows are
// stable.
func (s *Shipping) StableCount(site wire.SiteID) uint64 { return s.versions.Stable().Get(site) }

// Relay sends site, from the tail, origin's updates after what site
// holds (held, from the site's own report) up to the last this replica
// applied, as the origin would ship them (Ship.Sender is this site), a
// window at a time; with idleOnly only if nothing is in flight to it.
func (s *Shipping) Relay(site, origin wire.SiteID, held uint64, now wire.Time, idleOnly bool) {
	last := s.versions.Applied(origin)
	route := Route{To: site, Origin: origin}
	c := s.relays[route]
	if c == nil {
		if held >= last {
			return
		}
		c = &Cursor{sent: held, received: held, stable: held, progressAt: now}
		if s.relays == nil {
			s.relays = map[Route]*Cursor{}
		}
		s.relays[route] = c
	}
	if s.Due(c, site, now, idleOnly) {
		s.Window(c, site, origin, last)
	}
}

// StopRelays drops the relays for which stop is true.
func (s *Shipping) StopRelays(stop func(Route) bool) {
	for route := range s.relays {
		if stop(route) {
			delete(s.relays, route)
		}
	}
}

// Compile-time check: a replica's store logs what ships.
var _ interface {
	AppendShipLog(wire.Update)
	ShipLog(wire.SiteID, uint64, int) []wire.Update
	TrimShipLog(wire.SiteID, uint64)
} = storage.Store(nil)
