// Package hierarchical is hierarchical replication control (Zhang and
// Honeyman's NFSv4 paper; docs/adr/0016-hierarchical-replication-control.md)
// as a mode of the chain core (internal/chain): a volume of a
// hierarchical keyspace is, at each of its sites, a strong chain that
// ships its updates to the other sites (internal/chain/sites), and its
// head runs the volume's control.Machine, which decides for each write
// whether this site serves it, waits for an election, or must leave it
// to the primary site.
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
//     with it (sites.Options.Relays), so a client that asks again at
//     another site once control moved gets the outcome instead of a
//     second run.
//   - Release: the machine releases a control only once every other
//     site holds every update this site originated in the volume
//     (Synced: the shipping acknowledgements, Ack.ShippedTo); a receiving
//     head reports stability to the shipper as soon as it grows
//     (reportStable).
//   - Durable mode (the keyspace's default): the tail holds the answer
//     to a write until a majority of the configured sites hold it
//     (holdAnswer), so losing the primary's site loses nothing
//     acknowledged; relaxed mode (the paper's) answers at once.
//
// relay.go holds the relaying and resynchronisation of the writes of a
// site outside the view, rejoin.go a site's return to the view, mode.go
// the chain.Mode the core calls.
package hierarchical

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/sites"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Mode is a hierarchical volume's mode.
type Mode struct {
	chain.Strong
	core     *chain.Core
	sites    chain.SiteView
	versions *sites.Versions
	shipping *sites.Shipping
	// hierState is dropped with the replica's state.
	hierState
	// heldAnswers are, at the tail in durable mode, answers to writes,
	// and to reads of versions, of this site not yet held by a majority
	// of its sites; they leave from the front, each once enough sites
	// hold its version.
	heldAnswers []heldAnswer
	// shippers are, at the head, the member that last shipped each other
	// site's updates here and how many of them it was last told are
	// stable here (reportStable).
	shippers map[wire.SiteID]*shipper
}

// hierState is a replica's control state of a hierarchical volume.
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
	// holds, reports and viewN: the relaying of the updates of sites
	// outside the view and the resynchronisation of their keys
	// (relay.go).
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

// relayKey names a forwarded request.
type relayKey struct {
	client wire.ClientID
	reqNo  uint64
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

// waitingUpdate is a client update the machine said must wait.
type waitingUpdate struct {
	from wire.NodeID
	req  *wire.ClientRequest
}

// controlMachine returns the head's control machine, made and restored
// from the replica's control state on first use; nil when the replica
// is not a head of a hierarchical volume or its keyspace is not known.
func (h *Mode) controlMachine() *control.Machine {
	if !h.core.IsHead() {
		return nil
	}
	if h.machine != nil {
		return h.machine
	}
	ks, ok := h.sites.Keyspace(h.core.Volume())
	if !ok {
		return nil
	}
	m, err := control.New(control.Config{
		Self: h.sites.Site(), Sites: slices.Clone(h.core.Config().Sites), Keyspace: ks.Name, Domain: uint32(h.core.Volume() - ks.FirstVolume),
		Idle: ks.Idle, DeepMinDepth: ks.PartitionDepth, Durable: !ks.Relaxed, LeaseSilence: true,
		Synced: func(string) bool {
			return h.shippedToView() || mutation.Enabled && h.core.Mutations().HierarchicalReleaseUnshipped
		},
		Mutations: h.core.Mutations().Control,
	})
	if err != nil {
		h.core.ProtocolError("volume %d: no control machine: %v", h.core.Volume(), err)
		return nil
	}
	m.Restore(h.state, h.core.Now())
	h.machine, h.prefix = m, ks.Prefix
	view := m.View()
	h.viewN, h.wasMember, h.members, h.adoptedVector = view.N, !m.Excluded(), slices.Clone(view.Members), h.versions.Stable()
	h.admittedIn = map[wire.SiteID]uint64{}
	for _, s := range view.Members {
		h.admittedIn[s] = view.N // (what older shipments they sent, unknown: refused)
	}
	h.heardAt, h.sentAt = map[wire.SiteID]wire.Time{}, map[wire.SiteID]wire.Time{}
	h.afterControl(0, "", false)
	return m
}

// shippedToView reports whether every other site of the active view
// holds every update this site originated in the volume, as the
// acknowledgements of the shipping tell the head (Ack.ShippedTo): a site
// removed from the view holds no release back (ADR 16).
func (h *Mode) shippedToView() bool {
	own := h.sites.Site()
	originated := h.versions.Applied(own)
	if h.shipping.ShippedTrim() >= originated {
		return true
	}
	members := h.core.Config().Sites
	if m := h.machine; m != nil && len(m.View().Members) > 0 {
		members = m.View().Members
	}
	for _, site := range members {
		if site != own && h.shipping.ShippedTo().Get(site) < originated {
			return false
		}
	}
	return true
}

// isControlUpdate reports whether u carries a control record.
func isControlUpdate(u *wire.Update) bool { return control.IsRecordKey(u.Key) || isRejoinRecord(u.Key) }

// applyControl folds a control record that u carries into the replica's
// control state.
func (h *Mode) applyControl(u *wire.Update) {
	if !isControlUpdate(u) {
		return
	}
	var value []byte // a removal
	if !u.Deleted {
		value = u.Value
	}
	if isRejoinRecord(u.Key) {
		h.foldRejoinRecord(u.Key, value)
		return
	}
	h.foldRecord(u.Key, value)
}

// foldRecord folds the record stored under key (nil value: removed) into
// the control state.
func (h *Mode) foldRecord(key string, value []byte) {
	rec, err := control.ParseRecord(key, value)
	if err != nil {
		h.core.ProtocolError("volume %d: %v", h.core.Volume(), err)
		return
	}
	h.state.Apply(rec)
}

// loadControlState rebuilds the control state from the store, after a
// restart or a snapshot's installation.
func (h *Mode) loadControlState() {
	h.state = control.State{}
	h.rejoinedIn, h.currentIn, h.expired = 0, 0, nil
	h.graceApplied, h.reassignApplied, h.reassigned = 0, 0, nil
	for _, o := range h.core.Store().Snapshot() {
		switch {
		case !o.Object.Exists:
		case control.IsRecordKey(o.Key):
			h.foldRecord(o.Key, o.Object.Value)
		case isRejoinRecord(o.Key):
			h.foldRejoinRecord(o.Key, o.Object.Value)
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
func (h *Mode) afterControl(replyTo wire.SiteID, replyNode wire.NodeID, leaseOnly bool) {
	m := h.machine
	if m == nil {
		return
	}
	for _, rec := range m.Persisted() {
		key, value := rec.Object()
		u := wire.Update{SN: h.core.Applied() + 1, Key: key, Changed: true, Deleted: value == nil, Value: value, Epoch: h.core.Epoch()}
		h.core.Apply(&u)
	}
	h.viewChanged()
	// Held messages the tail has processed go first: the commit that
	// made them sendable may have come by a path that did not send them
	// (a resynchronisation), and a queue never drained holds every later
	// message too (sim seed 134).
	h.releaseControl()
	for _, c := range m.Messages() {
		hc := heldControl{sn: h.core.Applied(), msg: c}
		if replyTo != 0 && c.To == replyTo && (!leaseOnly || c.Kind == wire.ControlLeased) {
			hc.to = replyNode
		}
		if h.core.Committed() < h.core.Applied() || len(h.held) > 0 {
			h.held = append(h.held, hc)
		} else {
			h.sendControl(hc)
		}
	}
	h.core.AfterApply()
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
			h.core.HandleUpdateRequest(w.from, w.req)
		}
		h.retrying = false
	}
}

// releaseControl sends the held messages whose records the tail has
// processed.
func (h *Mode) releaseControl() {
	n := 0
	for n < len(h.held) && h.held[n].sn <= h.core.Committed() {
		h.sendControl(h.held[n])
		n++
	}
	h.held = slices.Delete(h.held, 0, n)
}

// sendControl sends a control message to its node, or else to the head
// of the sibling volume at its site; a site that has not answered for
// two rounds gets its route refreshed.
func (h *Mode) sendControl(hc heldControl) {
	c := hc.msg
	head := hc.to
	if head == "" {
		var ok bool
		if head, _, ok = h.sites.Route(c.To, h.core.Volume()); !ok {
			return // the server asks that site's masters; the machine asks again next round
		}
	}
	if sent, heard := h.sentAt[c.To], h.heardAt[c.To]; sent > heard && h.core.Now()-sent > 2*control.DefaultRoundTimeout {
		h.sites.Stale(c.To, h.core.Volume())
		h.heardAt[c.To] = h.core.Now() // one refresh per silence
	}
	if _, ok := h.sentAt[c.To]; !ok || h.sentAt[c.To] <= h.heardAt[c.To] {
		h.sentAt[c.To] = h.core.Now()
	}
	h.decorateControl(&c)
	h.core.Send(head, &c)
}

// handleControl is the head's receipt of another site's control message
// from node from, which spoke as its site's head: a route to that site
// naming another head is stale.
func (h *Mode) handleControl(from wire.NodeID, m *wire.Control) {
	if isLeaseAnswer(m) && m.Kind == wire.ControlVote && h.core.IsHead() {
		h.noteLeaseRefusal(m) // (and the machine learns the view from it, below)
	}
	if m.Kind == wire.ControlJoined && m.Granted && h.core.IsHead() {
		h.noteConfirm(m)
	}
	if m.Kind == wire.ControlLeased {
		if m.Granted && h.core.IsTail() {
			if h.leases == nil {
				h.leases = map[wire.SiteID]wire.Time{}
			}
			h.leases[m.From] = max(h.leases[m.From], wire.Time(m.Ballot.N))
			h.noteHolds(m.From, m.Vector)
			h.relayTo(h.core.Now(), false)
		}
		return
	}
	machine := h.controlMachine()
	if machine == nil {
		if !h.core.IsHead() {
			// Not the head (any more): the sender routes its next
			// round to the head this replica knows.
			h.core.Send(from, &wire.Moved{Site: h.sites.Site(), Config: h.core.Config().Clone()})
		}
		return
	}
	if m.Kind == wire.ControlLease {
		h.noteReport(m)
	} else { // (a lease request comes from a tail)
		h.heardAt[m.From] = h.core.Now()
		if head, _, ok := h.sites.Route(m.From, h.core.Volume()); ok && head != from {
			h.sites.Stale(m.From, h.core.Volume())
		}
	}
	machine.Step(*m, h.core.Now())
	h.afterControl(m.From, from, m.Kind == wire.ControlLease)
}

// tickControl drives the machine's timers (rounds, idle release), and
// the tail's requests for membership leases.
func (h *Mode) tickControl(now wire.Time) {
	if len(h.waiting) > 0 && h.missingSites() != nil {
		// The updates waiting for an election wait for nothing that can
		// come: refused, naming the sites that lack the keyspace.
		for _, w := range slices.Clone(h.waiting) {
			h.refuseMissing(w.from, w.req)
		}
	}
	if m := h.controlMachine(); m != nil {
		h.applyOverrides(m)
		m.Tick(now)
		h.resyncRemoved()
		h.tickRejoin()
		if h.rejoinedIn > h.currentIn {
			h.headCurrent() // (records it for the tail when it is)
		}
		h.afterControl(0, "", false)
	}
	h.expireRelays(now)
	h.askLeases(now)
}

// askLeases sends, at the tail, a request for a lease on this site's
// membership of the view to every other site's head, every half lease.
func (h *Mode) askLeases(now wire.Time) {
	if !h.core.IsTail() || now-h.leaseAskedAt < control.DefaultLease/2 {
		return
	}
	ks, ok := h.sites.Keyspace(h.core.Volume())
	if !ok {
		return
	}
	h.leaseAskedAt = now
	view := h.state.View
	if view.N == 0 {
		view = wire.View{Members: slices.Sorted(slices.Values(h.core.Config().Sites))}
	}
	own := h.sites.Site()
	if h.leaseSince == 0 {
		h.leaseSince = now
	}
	for _, s := range h.core.Config().Sites {
		if s == own {
			continue
		}
		if silent := now - max(h.leases[s], h.leaseSince, h.leaseStaleAt[s]); silent > 2*control.DefaultLease {
			// No grant from s for two leases: the route to its head may
			// name a server that is not its head any more, which drops
			// the requests (an excluded site is refused, and refreshes
			// too, harmlessly).
			h.sites.Stale(s, h.core.Volume())
			if h.leaseStaleAt == nil {
				h.leaseStaleAt = map[wire.SiteID]wire.Time{}
			}
			h.leaseStaleAt[s] = now
		}
		if head, _, ok := h.sites.Route(s, h.core.Volume()); ok {
			h.core.Send(head, &wire.Control{Kind: wire.ControlLease, Keyspace: ks.Name, Domain: uint32(h.core.Volume() - ks.FirstVolume),
				From: own, To: s, Ballot: wire.Ballot{N: uint64(max(now, 0))}, Path: wire.ViewPath, View: view,
				Vector: h.versions.Vector()})
		}
	}
}

// leased reports whether this site's tail holds a lease on its
// membership of the view: a majority of the sites, this one included,
// granted requests sent within the lease (ADR 16). Only then may it read
// its own copy of a key its site does not control: a site removed from
// the view without knowing it has lost its lease before the others use
// the view without it.
func (h *Mode) leased() bool {
	granted := 1
	for _, at := range h.leases {
		if h.core.Now()-at < control.DefaultLease {
			granted++
		}
	}
	return granted >= h.sitesMajority()
}

// missingSites returns the sites that lack the volume's keyspace when
// too many do for the others to be a majority of its sites: no site can
// be elected or leased until they create it (nil otherwise).
func (h *Mode) missingSites() []wire.SiteID {
	lacking := h.sites.Lacking(h.core.Volume())
	if len(lacking) == 0 || len(h.core.Config().Sites)-len(lacking) >= h.sitesMajority() {
		return nil
	}
	return lacking
}

// refuseMissing answers a request that cannot be served because sites
// lack the keyspace, naming them (ErrKeyspaceMissing); it reports
// whether it did.
func (h *Mode) refuseMissing(from wire.NodeID, req *wire.ClientRequest) bool {
	missing := h.missingSites()
	if missing == nil {
		return false
	}
	// (An earlier attempt queued for an election is dropped with it: it
	// must not be sequenced after the client was told nothing was.)
	h.waiting = slices.DeleteFunc(h.waiting, func(w waitingUpdate) bool {
		return w.req.Client == req.Client && w.req.ReqNo == req.ReqNo
	})
	h.core.Send(from, &wire.ClientReply{Volume: h.core.Volume(), Client: req.Client, ReqNo: req.ReqNo, Err: wire.ErrKeyspaceMissing,
		Epoch: h.core.Epoch(), Position: h.core.Position(), Sites: missing})
	return true
}

// controlWrite asks the machine whether the head may sequence a client
// update now; when not, the request is queued or answered.
func (h *Mode) controlWrite(from wire.NodeID, req *wire.ClientRequest) bool {
	m := h.controlMachine()
	if m == nil {
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		return false
	}
	d := m.Write(strings.TrimPrefix(req.Op.Key, h.prefix), h.core.Now())
	defer h.afterControl(0, "", false)
	if (d.Kind == control.Wait || d.Kind == control.Unavailable) && h.refuseMissing(from, req) {
		return false
	}
	switch d.Kind {
	case control.Serve:
		if !h.headCurrent() {
			// Admitted back, this site may still lack what a member
			// released before it knew (rejoin.go).
			h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
			return false
		}
		return true
	case control.Wait:
		if i := slices.IndexFunc(h.waiting, func(w waitingUpdate) bool {
			return w.req.Client == req.Client && w.req.ReqNo == req.ReqNo
		}); i >= 0 {
			h.waiting[i] = waitingUpdate{from: from, req: req} // asked again: one entry, the newest address
			return false
		}
		if len(h.waiting) >= h.core.Limits().WaitersMax {
			h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
			return false
		}
		h.waiting = append(h.waiting, waitingUpdate{from: from, req: req})
	case control.Refuse:
		h.core.Reply(from, req, wire.ErrBadRequest, wire.Result{})
	case control.Forward:
		h.forwardWrite(from, req, d.Site)
	default: // Unavailable
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
	}
	return false
}

// forwardWrite sends a client's write to the head of the sibling volume
// at the key's primary site, and remembers to relay its answer. A write
// another site forwarded is not forwarded again (ADR 16): its sender
// answers the client, who asks again.
func (h *Mode) forwardWrite(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID) {
	head, vol, ok := h.sites.Route(site, h.core.Volume())
	if req.FromSite != 0 || !ok {
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	h.relay(from, req, site, head, vol)
}

// handleRelayedReply passes the primary site's answer to a forwarded
// write on to the client, as this chain's answer. A primary that is not
// the head any more makes the route stale and the client ask again.
func (h *Mode) handleRelayedReply(m *wire.ClientReply) {
	k := relayKey{m.Client, m.ReqNo}
	rel, ok := h.relays[k]
	if !ok {
		return
	}
	delete(h.relays, k)
	code := m.Err
	switch code {
	case wire.ErrNotHead, wire.ErrNotTail, wire.ErrWrongEpoch:
		h.sites.Stale(rel.site, h.core.Volume())
		code = wire.ErrUnavailable
	case wire.ErrKeyspaces, wire.ErrBadRequest:
		code = wire.ErrUnavailable // the sites disagree on the keyspaces for now
	}
	h.core.Send(rel.to, &wire.ClientReply{Volume: h.core.Volume(), Client: m.Client, ReqNo: m.ReqNo, Err: code, Result: m.Result,
		Epoch: h.core.Epoch(), Position: h.core.Position(), Stable: m.Stable && code == wire.ErrNone, Sites: m.Sites})
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
func (h *Mode) durableAcrossSites() bool {
	ks, ok := h.sites.Keyspace(h.core.Volume())
	return ok && !ks.Relaxed
}

// sitesMajority is the number of sites that make a majority of the
// volume's configured sites.
func (h *Mode) sitesMajority() int { return len(h.core.Config().Sites)/2 + 1 }

// holdAnswer keeps, at the tail of a durable hierarchical volume, the
// answer to a write of this site that a majority of the sites does not
// hold yet; it reports whether it did. The answer leaves when the
// shipping's acknowledgements say enough sites hold it
// (answerHeldAnswers).
func (h *Mode) holdAnswer(u *wire.Update) bool {
	if !h.core.IsTail() || u.Stamp.IsZero() || h.versions.Remote(u) || !h.durableAcrossSites() {
		return false
	}
	if h.shipping.SitesHolding(u.Stamp.N, h.versions.Applied(h.sites.Site())) >= h.sitesMajority() {
		return false
	}
	h.heldAnswers = append(h.heldAnswers, heldAnswer{n: u.Stamp.N, to: u.ReplyTo, reply: wire.ClientReply{
		Volume: h.core.Volume(), Client: u.Client, ReqNo: u.ReqNo, Result: u.Result, Epoch: h.core.Epoch(), Position: h.core.Position(), Stable: true,
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
func (h *Mode) holdRead(from wire.NodeID, req *wire.ClientRequest, s wire.Stamp, result wire.Result) bool {
	if s.IsZero() || s.Origin != h.sites.Site() || !h.durableAcrossSites() || mutation.Enabled && h.core.Mutations().HierarchicalReadsUndurable {
		return false
	}
	if !h.core.IsTail() {
		if s.N <= h.shipping.ShippedTrim() {
			return false
		}
		h.core.Reply(from, req, wire.ErrDirty, wire.Result{})
		return true
	}
	if h.shipping.SitesHolding(s.N, h.versions.Applied(h.sites.Site())) >= h.sitesMajority() {
		return false
	}
	if len(h.heldAnswers) >= h.core.Limits().WaitersMax {
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		return true
	}
	// (Answers leave in order while enough sites hold their version: one
	// behind a newer version waits for it, which only delays it.)
	h.heldAnswers = append(h.heldAnswers, heldAnswer{n: s.N, to: from, reply: wire.ClientReply{
		Volume: h.core.Volume(), Client: req.Client, ReqNo: req.ReqNo, Result: result, Epoch: h.core.Epoch(), Position: h.core.Position(), Stable: true,
	}})
	return true
}

// answerHeldAnswers sends the held answers whose writes a majority of
// the sites now hold.
func (h *Mode) answerHeldAnswers() {
	if len(h.heldAnswers) == 0 {
		return
	}
	stableHere := h.versions.Stable().Get(h.sites.Site())
	n := 0
	for n < len(h.heldAnswers) && h.shipping.SitesHolding(h.heldAnswers[n].n, stableHere) >= h.sitesMajority() {
		a := h.heldAnswers[n]
		h.core.Send(a.to, &a.reply) // a copy: Delete below clears the slice's tail
		n++
	}
	h.heldAnswers = slices.Delete(h.heldAnswers, 0, n)
}

// durableHere reports whether the head may answer a recorded write of
// stamp s again: in durable mode only once every site holds it, as far
// as the head knows (Ack.Shipped); the tail knows per site, and answers
// as soon as a majority does.
func (h *Mode) durableHere(s wire.Stamp) bool {
	if s.IsZero() || s.Origin != h.sites.Site() || !h.durableAcrossSites() {
		return true
	}
	return s.N <= h.shipping.ShippedTrim()
}

// shipper is the member of another site that ships its updates here.
type shipper struct {
	node     wire.NodeID
	volume   wire.VolumeID
	reported uint64
}

// noteShipper remembers, at the head of a hierarchical volume, who
// shipped m and what it was told is stable here.
func (h *Mode) noteShipper(from wire.NodeID, m *wire.Ship, stable uint64) {
	if h.shippers == nil {
		h.shippers = map[wire.SiteID]*shipper{}
	}
	s := h.shippers[m.Origin]
	if s == nil || s.node != from {
		s = &shipper{node: from, volume: m.OriginVolume}
		h.shippers[m.Origin] = s
	}
	s.reported = max(s.reported, stable)
}

// reportStable tells, at the head of a hierarchical volume, each other
// site's shipper how many of its updates are now stable here, as soon as
// that grows: its tail answers durable writes (holdAnswer) and releases
// control (Synced) on it, instead of waiting for its next shipment or
// probe.
func (h *Mode) reportStable() {
	if len(h.shippers) == 0 {
		return
	}
	stable := h.versions.Stable()
	for _, site := range slices.Sorted(maps.Keys(h.shippers)) { // (in order: the simulator replays a seed)
		s := h.shippers[site]
		if n := stable.Get(site); n > s.reported {
			s.reported = n
			received := h.shipping.Received(site)
			h.core.Send(s.node, &wire.ShipAck{Volume: s.volume, Site: h.sites.Site(), Received: received, Stable: n, Origin: site})
		}
	}
}

// expireRelays forgets forwarded writes whose answer did not come.
func (h *Mode) expireRelays(now wire.Time) {
	for k, rel := range h.relays {
		if now-rel.at > chain.RelayKeep {
			delete(h.relays, k)
		}
	}
}

// controlledElsewhere returns the site the tail's site voted primary of
// key, if it is another: the key's newest copy may be there (site 0:
// not known yet, as the keyspace is not).
func (h *Mode) controlledElsewhere(key string) (wire.SiteID, bool) {
	if mutation.Enabled && h.core.Mutations().HierarchicalReadsLocal {
		return 0, false
	}
	ks, ok := h.sites.Keyspace(h.core.Volume())
	if !ok {
		return 0, true // not served from a copy that may be old
	}
	key = ks.Path(key)
	own := h.sites.Site()
	if view := h.state.View; view.N > 0 && !slices.Contains(view.Members, own) {
		// This site knows it is outside the active view: its copy may
		// lack what the others wrote since (ADR 16); refused.
		return 0, true
	}
	if v, ok := h.state.Votes[key]; ok && v.Holder != own {
		return v.Holder, true
	}
	for _, p := range wire.Ancestors(key) {
		if v, ok := h.state.Votes[p]; ok && v.Deep && v.Holder != own {
			return v.Holder, true
		}
	}
	if h.rejoinedIn > h.currentIn {
		// Admitted back, this site may still lack what a member
		// released before it knew (rejoin.go).
		return 0, true
	}
	if !h.leased() {
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
func (h *Mode) forwardRead(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID) {
	if site == 0 || req.FromSite != 0 || !h.inView(site) {
		// (A primary outside the view: its keys are refused, in relaxed
		// mode until it returns; in durable mode until this site took
		// them over.)
		if !h.refuseMissing(from, req) {
			h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		}
		return
	}
	tail, vol, ok := h.sites.RouteTail(site, h.core.Volume())
	if !ok {
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	h.relay(from, req, site, tail, vol)
}

// relay sends a copy of req to node, a member of the sibling vol of this
// volume at site, as this site's forwarded request, and remembers where
// the answer goes; with too many in flight, the client asks again.
func (h *Mode) relay(from wire.NodeID, req *wire.ClientRequest, site wire.SiteID, node wire.NodeID, vol wire.VolumeID) {
	if len(h.relays) >= h.core.Limits().WaitersMax {
		h.core.Reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	fwd := *req
	fwd.Volume, fwd.Epoch, fwd.Keyspaces, fwd.FromSite, fwd.Caller = vol, 0, 0, h.sites.Site(), wire.Caller{}
	if h.relays == nil {
		h.relays = map[relayKey]relay{}
	}
	h.relays[relayKey{req.Client, req.ReqNo}] = relay{to: from, site: site, at: h.core.Now()}
	h.sites.Relaying(req.Client, req.ReqNo, h.core.Volume(), h.core.Now())
	h.core.Send(node, &fwd)
}

// adoptHier drops what a new configuration's role no longer needs: the
// forwarded requests (their clients ask again), and when this replica
// stops being the head the machine, its held messages and the waiting
// writes (a new head restores the machine from its copy of the records,
// and its elections ask again).
func (h *Mode) adoptHier() {
	keys := slices.SortedFunc(maps.Keys(h.relays), func(a, b relayKey) int {
		return cmp.Or(cmp.Compare(a.client, b.client), cmp.Compare(a.reqNo, b.reqNo))
	})
	for _, k := range keys { // (in order: the simulator replays a seed)
		rel := h.relays[k]
		h.core.Send(rel.to, &wire.ClientReply{Volume: h.core.Volume(), Client: k.client, ReqNo: k.reqNo, Err: wire.ErrUnavailable, Epoch: h.core.Epoch()})
	}
	h.relays = nil
	if h.core.IsHead() {
		return
	}
	for _, w := range h.waiting {
		h.core.Reply(w.from, w.req, wire.ErrNotHead, wire.Result{})
	}
	h.machine, h.held, h.waiting, h.heardAt, h.sentAt = nil, nil, nil, nil, nil
}
