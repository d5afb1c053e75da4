package chain

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/wire"
)

// Hierarchical replication control (Zhang and Honeyman's NFSv4 paper;
// docs/adr/0016-hierarchical-replication-control.md): a volume of a
// hierarchical keyspace is, at each of its sites, a strong chain that
// ships its updates to the other sites like a geo volume (geo.go), and
// its head runs the volume's control.Machine, which decides for each
// write whether this site serves it, waits for an election, or must
// leave it to the primary site.
//
//   - Records: the machine's durable changes (votes, the ballot counter,
//     views) travel down the chain as updates of reserved keys
//     (control.Record.Object), never stamped, shipped or answered. Every
//     member folds them into its copy of the site's control state
//     (hierState.state), so a new head restores the machine from its
//     own replica, and the tail knows every vote its site gave.
//   - The machine's messages to other sites wait at the head until the
//     updates carrying the records of their step are processed by the
//     tail (hierState.held, in order): a site's vote survives every
//     failure its chain survives (ADR 16, "Votes survive restart").
//   - Writes: a client update at the head runs as the machine decides:
//     Serve, Wait (queued; tried again when the machine reports a
//     change), Forward to the primary site's head, or refused (a bad
//     path; this site or the key's primary outside the view).
//   - Reads at the tail: served from the tail's copy unless the site's
//     votes name another site as the key's controller, whose copy may be
//     newer (then forwarded to that site's tail), and only while the
//     tail holds a lease on its site's membership of the view, granted
//     by a majority of the sites (askLeases, leased): a site cut off and
//     removed from the view without knowing it stops reading before the
//     others use the view without it (ADR 16).
//   - Forwarding (ClientRequest.FromSite): the forwarding member relays
//     the answer to the client as its own; a forwarded request is never
//     forwarded again (the client asks again). A write's session ships
//     with it (sequenceRemote), so a client that asks again at another
//     site once control moved gets the outcome instead of a second run.
//   - Release: the machine releases a control only once every other
//     site holds every update this site originated in the volume
//     (Synced: the shipping acknowledgements, Ack.Shipped); a receiving
//     head reports stability to the shipper as soon as it grows
//     (reportStable).
//   - Durable mode (the keyspace's default): the tail holds the answer
//     to a write until a majority of the configured sites hold it
//     (holdAnswer), so losing the primary's site loses nothing
//     acknowledged; relaxed mode (the paper's) answers at once.

// hierState is a replica's part of a hierarchical volume.
type hierState struct {
	// state is the fold of the control records this replica applied.
	state control.State
	// machine is the volume's control machine, at the head only (nil
	// elsewhere, and until the head's first input needs it).
	machine *control.Machine
	// held are the machine's messages waiting for the updates that carry
	// their step's records to be processed by the tail, in order.
	// INVARIANT: their SNs do not decrease.
	held []heldControl
	// waiting are client updates waiting for an election to end;
	// retrying is set while afterControl asks for them again.
	waiting  []waitingUpdate
	retrying bool
	// prefix is the keyspace's prefix, which a key loses to become a
	// control path (wire.Keyspace.Path).
	prefix string
	// ackNews: geoState.shippedTo or relayTrim grew since the last Ack
	// upstream.
	ackNews bool
	// relay, relayTrim, holds, reports and viewN: the relaying of the
	// updates of sites outside the view and the resynchronisation of
	// their keys (relay.go).
	relaying
	// The return of this site to the view (rejoin.go).
	rejoining
	// leases are, at the tail, the membership leases other sites' heads
	// granted this site (ControlLeased): the send time of the newest
	// request each granted; leaseAskedAt is when the tail last asked.
	leases       map[wire.SiteID]wire.Time
	leaseAskedAt wire.Time
	// leaseSince is when this tail started asking; leaseStaleAt when it
	// last refreshed its route to each site for want of a grant.
	leaseSince   wire.Time
	leaseStaleAt map[wire.SiteID]wire.Time
	// relays are the client writes this head forwarded to their primary
	// site, by client and request number: where the answer goes.
	relays map[relayKey]relay
	// heardAt is when each other site's replica last sent this head a
	// message; sentAt when this head last sent it one. A site silent
	// for two rounds after a message makes the route to it stale.
	heardAt, sentAt map[wire.SiteID]wire.Time
}

// heldControl is a message that leaves once sn is processed by the tail,
// for the node to (or, if none, the head its site's route names).
type heldControl struct {
	sn  wire.SN
	msg wire.Control
	to  wire.NodeID
}

// relay is a forwarded write: the client to answer, the site it went to.
type relay struct {
	to   wire.NodeID
	site wire.SiteID
	at   wire.Time
}

// relayKeep is how long a head remembers a forwarded write whose answer
// has not come: the client will have asked again, or given up.
const relayKeep = 10 * wire.Second

// waitingUpdate is a client update the machine said must wait.
type waitingUpdate struct {
	from wire.NodeID
	req  *wire.ClientRequest
}

// hierarchical reports whether the replica's volume belongs to a
// hierarchical keyspace: strong chains replicated by several sites (the
// master refuses strong keyspaces of several sites otherwise).
func (r *Replica) hierarchical() bool { return r.geo() && !r.causal() }

// ControlMachine returns the control machine of a hierarchical volume's
// head as it runs now (nil elsewhere, or before its first use), for the
// simulator's checks across sites.
func (r *Replica) ControlMachine() *control.Machine {
	if !r.hierarchical() || !r.role.isHead() {
		return nil
	}
	return r.hier.machine
}

// controlMachine returns the head's control machine, made and restored
// from the replica's control state on first use; nil when the replica
// is not a head of a hierarchical volume or its keyspace is not known.
func (r *Replica) controlMachine() *control.Machine {
	if !r.hierarchical() || !r.role.isHead() {
		return nil
	}
	h := &r.hier
	if h.machine != nil {
		return h.machine
	}
	ks, ok := r.sites.Keyspace(r.volume)
	if !ok {
		return nil
	}
	m, err := control.New(control.Config{
		Self: r.sites.Site(), Sites: slices.Clone(r.config.Sites), Keyspace: ks.Name, Domain: uint32(r.volume - ks.FirstVolume),
		Idle: ks.Idle, DeepMinDepth: ks.PartitionDepth, Durable: !ks.Relaxed, LeaseSilence: true,
		Synced:    func(string) bool { return r.shippedToView() || r.mutations.HierarchicalReleaseUnshipped },
		Mutations: r.mutations.Control,
	})
	if err != nil {
		r.protocolError("volume %d: no control machine: %v", r.volume, err)
		return nil
	}
	m.Restore(h.state, r.now)
	h.machine, h.prefix = m, ks.Prefix
	view := m.View()
	h.viewN, h.wasMember, h.members, h.adoptedVector = view.N, !m.Excluded(), slices.Clone(view.Members), r.stableVector()
	h.admittedIn = map[wire.SiteID]uint64{}
	for _, s := range view.Members {
		h.admittedIn[s] = view.N // (what older shipments they sent, unknown: refused)
	}
	h.heardAt, h.sentAt = map[wire.SiteID]wire.Time{}, map[wire.SiteID]wire.Time{}
	r.afterControl(0, "", false)
	return m
}

// shippedToView reports whether every other site of the active view
// holds every update this site originated in the volume, as the
// acknowledgements of the shipping tell the head (Ack.ShippedTo): a site
// removed from the view holds no release back (ADR 16).
func (r *Replica) shippedToView() bool {
	own := r.sites.Site()
	originated := r.geoState.vector.Get(own)
	if r.geoState.shippedTrim >= originated {
		return true
	}
	members := r.config.Sites
	if m := r.hier.machine; m != nil && len(m.View().Members) > 0 {
		members = m.View().Members
	}
	for _, site := range members {
		if site != own && r.geoState.shippedTo.Get(site) < originated {
			return false
		}
	}
	return true
}

// noteShippedTo merges what the successor (or, at the tail, the
// shipping) says each other site holds stable; it reports whether that
// grew (the predecessor is then told).
func (r *Replica) noteShippedTo(v wire.Vector) bool {
	merged := r.geoState.shippedTo.Merge(v)
	if slices.Equal(merged, r.geoState.shippedTo) {
		return false
	}
	r.geoState.shippedTo, r.hier.ackNews = merged, true
	return true
}

// isControlUpdate reports whether u carries a control record.
func isControlUpdate(u *wire.Update) bool { return control.IsRecordKey(u.Key) || isRejoinRecord(u.Key) }

// applyControl folds a control record that u carries into the replica's
// control state.
func (r *Replica) applyControl(u *wire.Update) {
	if !isControlUpdate(u) {
		return
	}
	var value []byte // a removal
	if !u.Deleted {
		value = u.Value
	}
	if isRejoinRecord(u.Key) {
		r.foldRejoinRecord(u.Key, value)
		return
	}
	r.foldRecord(u.Key, value)
}

// foldRecord folds the record stored under key (nil value: removed) into
// the control state.
func (r *Replica) foldRecord(key string, value []byte) {
	rec, err := control.ParseRecord(key, value)
	if err != nil {
		r.protocolError("volume %d: %v", r.volume, err)
		return
	}
	r.hier.state.Apply(rec)
}

// loadControlState rebuilds the control state from the store, after a
// restart or a snapshot's installation.
func (r *Replica) loadControlState() {
	r.hier.state = control.State{}
	r.hier.rejoinedIn, r.hier.currentIn, r.hier.expired = 0, 0, nil
	r.hier.graceApplied, r.hier.reassignApplied, r.hier.reassigned = 0, 0, nil
	for _, o := range r.store.Snapshot() {
		switch {
		case !o.Object.Exists:
		case control.IsRecordKey(o.Key):
			r.foldRecord(o.Key, o.Object.Value)
		case isRejoinRecord(o.Key):
			r.foldRejoinRecord(o.Key, o.Object.Value)
		}
	}
}

// afterControl sequences the machine's records as updates of the chain,
// holds or sends its messages, and tries the waiting writes again if
// control changed. Messages to site replyTo (the sender of the message
// just handled, if any) go to node replyNode, which spoke for its site:
// they answer it, whatever this server's route to that site says; with
// leaseOnly (the message was a tail's lease request) only the grant
// does, the rest going to that site's head.
func (r *Replica) afterControl(replyTo wire.SiteID, replyNode wire.NodeID, leaseOnly bool) {
	h := &r.hier
	m := h.machine
	if m == nil {
		return
	}
	for _, rec := range m.Persisted() {
		key, value := rec.Object()
		u := wire.Update{SN: r.applied + 1, Key: key, Changed: true, Deleted: value == nil, Value: value, Epoch: r.config.Epoch}
		r.apply(&u)
	}
	r.viewChanged()
	// Held messages the tail has processed go first: the commit that
	// made them sendable may have come by a path that did not send them
	// (a resynchronisation), and a queue never drained holds every later
	// message too (sim seed 134).
	r.releaseControl()
	for _, c := range m.Messages() {
		hc := heldControl{sn: r.applied, msg: c}
		if replyTo != 0 && c.To == replyTo && (!leaseOnly || c.Kind == wire.ControlLeased) {
			hc.to = replyNode
		}
		if r.committed < r.applied || len(h.held) > 0 {
			h.held = append(h.held, hc)
		} else {
			r.sendControl(hc)
		}
	}
	r.afterApply()
	// The waiting writes ask again when control changed. Their own
	// decisions run afterControl too: only the outermost call retries
	// (retrying), a few times at most if retrying changed control again.
	for range 3 {
		if h.retrying || len(h.waiting) == 0 || !m.Changed() {
			break
		}
		h.retrying = true
		waiting := h.waiting
		h.waiting = nil
		for _, w := range waiting {
			r.handleUpdateRequest(w.from, w.req)
		}
		h.retrying = false
	}
}

// releaseControl sends the held messages whose records the tail has
// processed.
func (r *Replica) releaseControl() {
	h := &r.hier
	n := 0
	for n < len(h.held) && h.held[n].sn <= r.committed {
		r.sendControl(h.held[n])
		n++
	}
	h.held = slices.Delete(h.held, 0, n)
}

// sendControl sends a control message to its node, or else to the head
// of the sibling volume at its site; a site that has not answered for
// two rounds gets its route refreshed.
func (r *Replica) sendControl(hc heldControl) {
	c := hc.msg
	head := hc.to
	if head == "" {
		var ok bool
		if head, _, ok = r.sites.Route(c.To, r.volume); !ok {
			return // the server asks that site's masters; the machine asks again next round
		}
	}
	h := &r.hier
	if sent, heard := h.sentAt[c.To], h.heardAt[c.To]; sent > heard && r.now-sent > 2*control.DefaultRoundTimeout {
		r.sites.Stale(c.To, r.volume)
		h.heardAt[c.To] = r.now // one refresh per silence
	}
	if _, ok := h.sentAt[c.To]; !ok || h.sentAt[c.To] <= h.heardAt[c.To] {
		h.sentAt[c.To] = r.now
	}
	r.decorateControl(&c)
	r.send(head, &c)
}

// handleControl is the head's receipt of another site's control message
// from node from, which spoke as its site's head: a route to that site
// naming another head is stale.
func (r *Replica) handleControl(from wire.NodeID, m *wire.Control) {
	if isLeaseAnswer(m) && m.Kind == wire.ControlVote && r.role.isHead() {
		r.noteLeaseRefusal(m) // (and the machine learns the view from it, below)
	}
	if m.Kind == wire.ControlJoined && m.Granted && r.role.isHead() {
		r.noteConfirm(m)
	}
	if m.Kind == wire.ControlLeased {
		if m.Granted && r.role.isTail() {
			if r.hier.leases == nil {
				r.hier.leases = map[wire.SiteID]wire.Time{}
			}
			r.hier.leases[m.From] = max(r.hier.leases[m.From], wire.Time(m.Ballot.N))
			r.noteHolds(m.From, m.Vector)
			r.relayTo(r.now, false)
		}
		return
	}
	machine := r.controlMachine()
	if machine == nil {
		if r.hierarchical() && !r.role.isHead() {
			// Not the head (any more): the sender routes its next
			// round to the head this replica knows.
			r.send(from, &wire.Moved{Site: r.sites.Site(), Config: r.config.Clone()})
		}
		return
	}
	if m.Kind == wire.ControlLease {
		r.noteReport(m)
	} else { // (a lease request comes from a tail)
		r.hier.heardAt[m.From] = r.now
		if head, _, ok := r.sites.Route(m.From, r.volume); ok && head != from {
			r.sites.Stale(m.From, r.volume)
		}
	}
	machine.Step(*m, r.now)
	r.afterControl(m.From, from, m.Kind == wire.ControlLease)
}

// tickControl drives the machine's timers (rounds, idle release), and
// the tail's requests for membership leases.
func (r *Replica) tickControl(now wire.Time) {
	if m := r.controlMachine(); m != nil {
		r.applyOverrides(m)
		m.Tick(now)
		r.resyncRemoved()
		r.tickRejoin()
		if r.hier.rejoinedIn > r.hier.currentIn {
			r.headCurrent() // (records it for the tail when it is)
		}
		r.afterControl(0, "", false)
	}
	r.expireRelays(now)
	r.askLeases(now)
}

// askLeases sends, at the tail, a request for a lease on this site's
// membership of the view to every other site's head, every half lease.
func (r *Replica) askLeases(now wire.Time) {
	if !r.hierarchical() || !r.role.isTail() || now-r.hier.leaseAskedAt < control.DefaultLease/2 {
		return
	}
	ks, ok := r.sites.Keyspace(r.volume)
	if !ok {
		return
	}
	r.hier.leaseAskedAt = now
	view := r.hier.state.View
	if view.N == 0 {
		view = wire.View{Members: slices.Sorted(slices.Values(r.config.Sites))}
	}
	own := r.sites.Site()
	if r.hier.leaseSince == 0 {
		r.hier.leaseSince = now
	}
	for _, s := range r.config.Sites {
		if s == own {
			continue
		}
		if silent := now - max(r.hier.leases[s], r.hier.leaseSince, r.hier.leaseStaleAt[s]); silent > 2*control.DefaultLease {
			// No grant from s for two leases: the route to its head may
			// name a server that is not its head any more, which drops
			// the requests (an excluded site is refused, and refreshes
			// too, harmlessly).
			r.sites.Stale(s, r.volume)
			if r.hier.leaseStaleAt == nil {
				r.hier.leaseStaleAt = map[wire.SiteID]wire.Time{}
			}
			r.hier.leaseStaleAt[s] = now
		}
		if head, _, ok := r.sites.Route(s, r.volume); ok {
			r.send(head, &wire.Control{Kind: wire.ControlLease, Keyspace: ks.Name, Domain: uint32(r.volume - ks.FirstVolume),
				From: own, To: s, Ballot: wire.Ballot{N: uint64(max(now, 0))}, Path: wire.ViewPath, View: view,
				Vector: slices.Clone(r.geoState.vector)})
		}
	}
}

// leased reports whether this site's tail holds a lease on its
// membership of the view: a majority of the sites, this one included,
// granted requests sent within the lease (ADR 16). Only then may it read
// its own copy of a key its site does not control: a site removed from
// the view without knowing it has lost its lease before the others use
// the view without it.
func (r *Replica) leased() bool {
	granted := 1
	for _, at := range r.hier.leases {
		if r.now-at < control.DefaultLease {
			granted++
		}
	}
	return granted >= r.sitesMajority()
}

// controlWrite asks the machine whether the head may sequence a client
// update now; when not, the request is queued or answered.
func (r *Replica) controlWrite(from wire.NodeID, req *wire.ClientRequest) bool {
	m := r.controlMachine()
	if m == nil {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return false
	}
	d := m.Write(strings.TrimPrefix(req.Op.Key, r.hier.prefix), r.now)
	defer r.afterControl(0, "", false)
	switch d.Kind {
	case control.Serve:
		if !r.headCurrent() {
			// Admitted back, this site may still lack what a member
			// released before it knew (rejoin.go).
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
			return false
		}
		return true
	case control.Wait:
		if i := slices.IndexFunc(r.hier.waiting, func(w waitingUpdate) bool {
			return w.req.Client == req.Client && w.req.ReqNo == req.ReqNo
		}); i >= 0 {
			r.hier.waiting[i] = waitingUpdate{from: from, req: req} // asked again: one entry, the newest address
			return false
		}
		if len(r.hier.waiting) >= r.limits.WaitersMax {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
			return false
		}
		r.hier.waiting = append(r.hier.waiting, waitingUpdate{from: from, req: req})
	case control.Refuse:
		r.reply(from, req, wire.ErrBadRequest, wire.Result{})
	case control.Forward:
		r.forwardWrite(from, req, d.Site)
	default: // Unavailable
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
	}
	return false
}

// forwardWrite sends a client's write to the head of the sibling volume
// at the key's primary site, and remembers to relay its answer. A write
// another site forwarded is not forwarded again (ADR 16): its sender
// answers the client, who asks again.
func (r *Replica) forwardWrite(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID) {
	head, vol, ok := r.sites.Route(site, r.volume)
	if req.FromSite != 0 || !ok {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	r.relay(from, req, site, head, vol)
}

// handleRelayedReply passes the primary site's answer to a forwarded
// write on to the client, as this chain's answer. A primary that is not
// the head any more makes the route stale and the client ask again.
func (r *Replica) handleRelayedReply(m *wire.ClientReply) {
	k := relayKey{m.Client, m.ReqNo}
	rel, ok := r.hier.relays[k]
	if !ok {
		return
	}
	delete(r.hier.relays, k)
	code := m.Err
	switch code {
	case wire.ErrNotHead, wire.ErrNotTail, wire.ErrWrongEpoch:
		r.sites.Stale(rel.site, r.volume)
		code = wire.ErrUnavailable
	case wire.ErrKeyspaces, wire.ErrBadRequest:
		code = wire.ErrUnavailable // the sites disagree on the keyspaces for now
	}
	r.send(rel.to, &wire.ClientReply{Volume: r.volume, Client: m.Client, ReqNo: m.ReqNo, Err: code, Result: m.Result,
		Epoch: r.config.Epoch, Position: r.position(), Stable: m.Stable && code == wire.ErrNone})
}

// heldAnswer is an answer the tail holds until a majority of the sites
// hold the write (durable mode).
type heldAnswer struct {
	n     uint64
	reply wire.ClientReply
	to    wire.NodeID
}

// durableAcrossSites reports whether the volume's keyspace is
// hierarchical in durable mode: a write is answered once a majority of
// its sites hold it, so losing the primary's site loses nothing
// acknowledged (ADR 16).
func (r *Replica) durableAcrossSites() bool {
	if !r.hierarchical() {
		return false
	}
	ks, ok := r.sites.Keyspace(r.volume)
	return ok && !ks.Relaxed
}

// sitesMajority is the number of sites that make a majority of the
// volume's configured sites.
func (r *Replica) sitesMajority() int { return len(r.config.Sites)/2 + 1 }

// holdAnswer keeps, at the tail of a durable hierarchical volume, the
// answer to a write of this site that a majority of the sites does not
// hold yet; it reports whether it did. The answer leaves when the
// shipping's acknowledgements say enough sites hold it
// (answerHeldAnswers).
func (r *Replica) holdAnswer(u *wire.Update) bool {
	if !r.role.isTail() || u.Stamp.IsZero() || r.remote(u) || !r.durableAcrossSites() {
		return false
	}
	if r.sitesHolding(u.Stamp.N, r.geoState.vector.Get(r.ownSite())) >= r.sitesMajority() {
		return false
	}
	r.geoState.heldAnswers = append(r.geoState.heldAnswers, heldAnswer{n: u.Stamp.N, to: u.ReplyTo, reply: wire.ClientReply{
		Volume: r.volume, Client: u.Client, ReqNo: u.ReqNo, Result: u.Result, Epoch: r.config.Epoch, Position: r.position(), Stable: true,
	}})
	return true
}

// holdRead keeps, in a durable hierarchical volume, the answer to a read
// of a version this site wrote that a majority of the sites does not
// hold yet, as holdAnswer keeps the write's own answer: the version could
// still be lost with this site, and a read must not return what a later
// read may not find (ADR 16). It reports whether it did; a member other
// than the tail, which knows only what every site holds, sends the
// reader to the tail.
func (r *Replica) holdRead(from wire.NodeID, req *wire.ClientRequest, s wire.Stamp, result wire.Result) bool {
	if s.IsZero() || s.Origin != r.ownSite() || !r.durableAcrossSites() || r.mutations.HierarchicalReadsUndurable {
		return false
	}
	if !r.role.isTail() {
		if s.N <= r.geoState.shippedTrim {
			return false
		}
		r.reply(from, req, wire.ErrDirty, wire.Result{})
		return true
	}
	if r.sitesHolding(s.N, r.geoState.vector.Get(r.ownSite())) >= r.sitesMajority() {
		return false
	}
	if len(r.geoState.heldAnswers) >= r.limits.WaitersMax {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return true
	}
	// (Answers leave in order while enough sites hold their version: one
	// behind a newer version waits for it, which only delays it.)
	r.geoState.heldAnswers = append(r.geoState.heldAnswers, heldAnswer{n: s.N, to: from, reply: wire.ClientReply{
		Volume: r.volume, Client: req.Client, ReqNo: req.ReqNo, Result: result, Epoch: r.config.Epoch, Position: r.position(), Stable: true,
	}})
	return true
}

// answerHeldAnswers sends the held answers whose writes a majority of
// the sites now hold.
func (r *Replica) answerHeldAnswers() {
	if len(r.geoState.heldAnswers) == 0 {
		return
	}
	stableHere := r.stableVector().Get(r.ownSite())
	n := 0
	for n < len(r.geoState.heldAnswers) && r.sitesHolding(r.geoState.heldAnswers[n].n, stableHere) >= r.sitesMajority() {
		a := r.geoState.heldAnswers[n]
		r.send(a.to, &a.reply) // a copy: Delete below clears the slice's tail
		n++
	}
	r.geoState.heldAnswers = slices.Delete(r.geoState.heldAnswers, 0, n)
}

// durableHere reports whether the head may answer a recorded write of
// stamp s again: in durable mode only once every site holds it, as far
// as the head knows (Ack.Shipped); the tail knows per site, and answers
// as soon as a majority does.
func (r *Replica) durableHere(s wire.Stamp) bool {
	if s.IsZero() || s.Origin != r.ownSite() || !r.durableAcrossSites() {
		return true
	}
	return s.N <= r.geoState.shippedTrim
}

// shipper is the member of another site that ships its updates here.
type shipper struct {
	node     wire.NodeID
	volume   wire.VolumeID
	reported uint64
}

// noteShipper remembers, at the head of a hierarchical volume, who
// shipped m and what it was told is stable here.
func (r *Replica) noteShipper(from wire.NodeID, m *wire.Ship, stable uint64) {
	if !r.hierarchical() {
		return
	}
	g := &r.geoState
	if g.shippers == nil {
		g.shippers = map[wire.SiteID]*shipper{}
	}
	s := g.shippers[m.Origin]
	if s == nil || s.node != from {
		s = &shipper{node: from, volume: m.OriginVolume}
		g.shippers[m.Origin] = s
	}
	s.reported = max(s.reported, stable)
}

// reportStable tells, at the head of a hierarchical volume, each other
// site's shipper how many of its updates are now stable here, as soon as
// that grows: its tail answers durable writes (holdAnswer) and releases
// control (Synced) on it, instead of waiting for its next shipment or
// probe.
func (r *Replica) reportStable() {
	g := &r.geoState
	if len(g.shippers) == 0 {
		return
	}
	stable := r.stableVector()
	for _, site := range slices.Sorted(maps.Keys(g.shippers)) { // (in order: the simulator replays a seed)
		s := g.shippers[site]
		if n := stable.Get(site); n > s.reported {
			s.reported = n
			received := g.vector.Get(site) + uint64(len(g.inbound[site]))
			r.send(s.node, &wire.ShipAck{Volume: s.volume, Site: r.sites.Site(), Received: received, Stable: n, Origin: site})
		}
	}
}

// expireRelays forgets forwarded writes whose answer did not come.
func (r *Replica) expireRelays(now wire.Time) {
	for k, rel := range r.hier.relays {
		if now-rel.at > relayKeep {
			delete(r.hier.relays, k)
		}
	}
}

// controlledElsewhere returns the site the tail's site voted primary of
// key, if it is another: the key's newest copy may be there (site 0:
// not known yet, as the keyspace is not).
func (r *Replica) controlledElsewhere(key string) (wire.SiteID, bool) {
	if !r.hierarchical() || r.mutations.HierarchicalReadsLocal {
		return 0, false
	}
	ks, ok := r.sites.Keyspace(r.volume)
	if !ok {
		return 0, true // not served from a copy that may be old
	}
	key = ks.Path(key)
	own := r.sites.Site()
	if view := r.hier.state.View; view.N > 0 && !slices.Contains(view.Members, own) {
		// This site knows it is outside the active view: its copy may
		// lack what the others wrote since (ADR 16); refused.
		return 0, true
	}
	if v, ok := r.hier.state.Votes[key]; ok && v.Holder != own {
		return v.Holder, true
	}
	for _, p := range wire.Ancestors(key) {
		if v, ok := r.hier.state.Votes[p]; ok && v.Deep && v.Holder != own {
			return v.Holder, true
		}
	}
	if r.hier.rejoinedIn > r.hier.currentIn {
		// Admitted back, this site may still lack what a member
		// released before it knew (rejoin.go).
		return 0, true
	}
	if !r.leased() {
		// Nobody else controls the key as far as this site knows, but
		// the others may have removed it from the view and written
		// since (even a key this site voted itself: its election may
		// have lost).
		return 0, true
	}
	return 0, false
}

// forwardRead sends a client's read of a key another site controls to
// that site's tail, and remembers to relay its answer; a read another
// site forwarded is not forwarded again.
func (r *Replica) forwardRead(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID) {
	if site == 0 || req.FromSite != 0 || !r.inView(site) {
		// (A primary outside the view: its keys are refused, in relaxed
		// mode until it returns; in durable mode until this site took
		// them over.)
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	tail, vol, ok := r.sites.RouteTail(site, r.volume)
	if !ok {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	r.relay(from, req, site, tail, vol)
}

// relay sends a copy of req to node, a member of the sibling vol of this
// volume at site, as this site's forwarded request, and remembers where
// the answer goes; with too many in flight, the client asks again.
func (r *Replica) relay(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID, node wire.NodeID, vol wire.VolumeID) {
	if len(r.hier.relays) >= r.limits.WaitersMax {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	fwd := *req
	fwd.Volume, fwd.Epoch, fwd.Keyspaces, fwd.FromSite, fwd.Caller = vol, 0, 0, r.sites.Site(), wire.Caller{}
	if r.hier.relays == nil {
		r.hier.relays = map[relayKey]relay{}
	}
	r.hier.relays[relayKey{req.Client, req.ReqNo}] = relay{to: from, site: site, at: r.now}
	r.sites.Relaying(req.Client, req.ReqNo, r.volume, r.now)
	r.send(node, &fwd)
}

// adoptHier drops what a new configuration's role no longer needs: the
// forwarded requests (their clients ask again), and when this replica
// stops being the head the machine, its held messages and the waiting
// writes (a new head restores the machine from its copy of the records,
// and its elections ask again).
func (r *Replica) adoptHier() {
	h := &r.hier
	keys := slices.SortedFunc(maps.Keys(h.relays), func(a, b relayKey) int {
		return cmp.Or(cmp.Compare(a.client, b.client), cmp.Compare(a.reqNo, b.reqNo))
	})
	for _, k := range keys { // (in order: the simulator replays a seed)
		rel := h.relays[k]
		r.send(rel.to, &wire.ClientReply{Volume: r.volume, Client: k.client, ReqNo: k.reqNo, Err: wire.ErrUnavailable, Epoch: r.config.Epoch})
	}
	h.relays = nil
	if r.role.isHead() && r.hierarchical() {
		return
	}
	for _, w := range h.waiting {
		r.reply(w.from, w.req, wire.ErrNotHead, wire.Result{})
	}
	h.machine, h.held, h.waiting, h.heardAt, h.sentAt = nil, nil, nil, nil, nil
}
