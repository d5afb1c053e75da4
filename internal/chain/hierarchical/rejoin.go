package hierarchical

import (
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// A site's return to the active view of a hierarchical volume
// (docs/adr/0016-hierarchical-replication-control.md, "Return"). A site
// the others removed learns it from their refusals; it serves nothing
// (its machine answers Unavailable, its tail refuses reads) until it is
// a member again, which it asks for with Resynced(self) once:
//
//   - every member of its view has answered its tail's lease request in
//     that view (a refusal carrying the member's view, the updates it
//     holds stable and whether it still votes for this site);
//   - in durable mode no member votes for it any more: each has taken
//     over its keys (relay.go) and holds the same M of its updates, the
//     ones a majority may have acknowledged. The site's own updates
//     after M were never acknowledged nor read (holdRead) and the others
//     gave them up: the site restores the keys they touched to a
//     member's copies (Fetch), records the range as expired (its tail
//     ships those updates as no-ops, so every site's count of them stays
//     without gaps) and only then asks to join;
//   - in relaxed mode every member holds all of its updates (they take a
//     site's shipments while it is out, keeping its controls: the
//     paper's recovery, the writes only it held go out), unless the
//     operator reassigned its keys (catena keyspace reassign): a member
//     that took them over says so (its lease refusal no longer keeps the
//     site's writes), and the site restores and gives up its writes the
//     members lack as in durable mode.
//
// Admitted again, it may lack what a member released while that member
// did not yet know the view admitting it. Each member's confirmation of
// the join handshake (ControlJoined) carries what the member held stable
// when it adopted its view; the head serves writes, and the tail reads
// its own copy, only once this site holds all of that, for every member
// (the head writes the "current" record for the tail). Shipments a
// member sent before the view that last admitted it are refused
// (Ship.View), so a returning site's old shipments cannot overtake its
// expired range.

// rejoining is a hierarchical replica's state for returning to the view.
type rejoining struct {
	// refusals are, at the head, each member's answer to this site's
	// lease requests while it is outside the view.
	refusals map[wire.SiteID]memberReport
	// confirms are, at the head, each member's confirmation of this
	// site's join handshake.
	confirms map[wire.SiteID]memberReport
	// restore is, at the head, the restoring of the keys of this site's
	// expired updates before it asks to join (nil: none under way).
	restore *restore
	// asked is set once this head called Resynced for its own site in
	// the current exclusion.
	asked bool
	// adoptedVector is, at the head, what this replica held stable when
	// the machine adopted its current view.
	adoptedVector wire.Vector
	// admittedIn is, at the head, the view number that last admitted
	// each site (shipments sent in an older view are refused).
	admittedIn map[wire.SiteID]uint64
	// wasMember: the machine's view held this site at the last
	// viewChanged; members are that view's members.
	wasMember bool
	members   []wire.SiteID
	// graceApplied and reassignApplied are the generations of the
	// operator's last forced view and last reassignment
	// (wire.Keyspace.Grace, Reassign) this site's control acted on;
	// reassigned, the number of the view in which each site's keys were
	// last reassigned here. Folded from the chain's records.
	graceApplied, reassignApplied uint64
	reassigned                    map[wire.SiteID]uint64
	// Folded from the chain's records: rejoinedIn is the view number
	// that last admitted this site after it was out (0: never),
	// currentIn the number of the view in which it found itself holding
	// what every member released before; expired are this site's own
	// updates the others gave up, as ranges (from, through].
	rejoinedIn, currentIn uint64
	expired               []expiredRange
}

// memberReport is what another site said: in which view, the updates it
// holds per origin, and (on a refusal of this site's lease request)
// whether it still votes for this site.
type memberReport struct {
	view     uint64
	vector   wire.Vector
	votesFor bool
}

// expiredRange is a range (from, through] of this site's updates.
type expiredRange struct{ from, through uint64 }

// restore is a returning head's restoring of keys to a member's copies.
type restore struct {
	member  wire.SiteID
	keys    []string // still to fetch
	asking  []string // the batch asked for, until its answer
	askedAt wire.Time
	askedOf wire.NodeID // the server asked: a route that changed since (Moved) asks again at once
	// refreshed: the route to the member's tail was refreshed since the
	// batch was last asked for.
	refreshed bool
	// fetched are the answers not yet applied: each waits until this
	// site holds what its answerer held when it read the keys.
	fetched []*wire.Fetched
	// expired is the range of this site's updates the restore is for.
	expired expiredRange
}

// restoreBarrier returns, at a head restoring keys (rejoin.go), how many
// of site's updates it may have applied: while a restore waits for an
// answer, none beyond what it applied; with an answer, up to what the
// answerer held. A version that came in after the answerer read its copy
// could lose to this site's own given-up version and then be shadowed by
// the older copy restored. (No bound otherwise.)
func (h *Mode) restoreBarrier(site wire.SiteID) uint64 {
	rs := h.restore
	switch {
	case rs == nil:
		return math.MaxUint64
	case len(rs.fetched) > 0:
		return rs.fetched[0].Vector.Get(site)
	}
	return h.versions.Applied(site)
}

// fetchBatchMax bounds the keys one Fetch asks for: an answer of values
// of the largest size stays below the frame limit.
const fetchBatchMax = 8

// The chain's records of a returning site (reserved keys, like the
// control records: every member folds them).
const (
	rejoinedKey  = wire.ReservedKeyPrefix + "rejoin/admitted"
	currentKey   = wire.ReservedKeyPrefix + "rejoin/current"
	graceKey     = wire.ReservedKeyPrefix + "rejoin/grace"
	reassignKey  = wire.ReservedKeyPrefix + "rejoin/reassign"
	reassignedIn = wire.ReservedKeyPrefix + "rejoin/reassigned/"
	expiredKeys  = wire.ReservedKeyPrefix + "rejoin/expired/"
	rejoinPrefix = wire.ReservedKeyPrefix + "rejoin/"
)

// isRejoinRecord reports whether key holds a rejoin record.
func isRejoinRecord(key string) bool { return strings.HasPrefix(key, rejoinPrefix) }

// foldRejoinRecord folds a rejoin record into the replica's state.
func (h *Mode) foldRejoinRecord(key string, value []byte) {
	n, _ := binary.Uvarint(value)
	switch {
	case key == rejoinedKey:
		h.rejoinedIn = max(h.rejoinedIn, n)
	case key == currentKey:
		h.currentIn = max(h.currentIn, n)
	case key == graceKey:
		h.graceApplied = max(h.graceApplied, n)
	case key == reassignKey:
		h.reassignApplied = max(h.reassignApplied, n)
	case strings.HasPrefix(key, reassignedIn):
		site, _ := binary.Uvarint([]byte(key[len(reassignedIn):]))
		if h.reassigned == nil {
			h.reassigned = map[wire.SiteID]uint64{}
		}
		h.reassigned[wire.SiteID(site)] = max(h.reassigned[wire.SiteID(site)], n)
	case strings.HasPrefix(key, expiredKeys):
		from, _ := binary.Uvarint([]byte(key[len(expiredKeys):]))
		if e := (expiredRange{from, n}); !slices.Contains(h.expired, e) {
			h.expired = append(h.expired, e)
			h.forgetExpired(e)
		}
	}
}

// forgetExpired forgets the outcomes of this site's updates in e, which
// the other sites gave up: a client asking again runs its request again
// (it ran nowhere else), and an answer the tail still holds goes out as
// unavailable (the client asks again).
func (h *Mode) forgetExpired(e expiredRange) {
	updates, _ := h.loggedUpdates(e)
	for _, u := range updates {
		if u.Client != 0 {
			h.core.ForgetOutcome(u.Client, u.ReqNo, u.Stamp)
		}
	}
	h.heldAnswers = slices.DeleteFunc(h.heldAnswers, func(a heldAnswer) bool {
		if a.n <= e.from || a.n > e.through {
			return false
		}
		h.core.Send(a.to, &wire.ClientReply{Volume: h.core.Volume(), Client: a.reply.Client, ReqNo: a.reply.ReqNo, Err: wire.ErrUnavailable, Epoch: h.core.Epoch()})
		return true
	})
}

// loggedUpdates returns this site's updates in e from its shipping log;
// ok is false if the log lacks some (it returns those before the first
// missing one).
func (h *Mode) loggedUpdates(e expiredRange) (updates []wire.Update, ok bool) {
	for n := e.from + 1; n <= e.through; {
		batch := h.core.Store().ShipLog(h.sites.Site(), n, int(min(256, e.through-n+1)))
		if len(batch) == 0 {
			return updates, false
		}
		updates = append(updates, batch...)
		n = batch[len(batch)-1].Stamp.N + 1
	}
	return updates, true
}

// recordRejoin sequences, at the head, a rejoin record as an update of
// the chain.
func (h *Mode) recordRejoin(key string, n uint64) {
	u := wire.Update{SN: h.core.Applied() + 1, Key: key, Changed: true, Value: binary.AppendUvarint(nil, n), Epoch: h.core.Epoch()}
	h.core.Apply(&u)
}

// expiredUpdate reports whether this site's n-th update of the volume is
// one the other sites gave up.
func (h *Mode) expiredUpdate(n uint64) bool {
	for _, e := range h.expired {
		if n > e.from && n <= e.through {
			return true
		}
	}
	return false
}

// asNoOp returns an expired update as it ships: it changes nothing.
func asNoOp(u wire.Update) wire.Update {
	return wire.Update{Key: u.Key, Stamp: u.Stamp, Epoch: u.Epoch}
}

// isLeaseAnswer reports whether m answers a tail's lease request (its
// ballot, the request's send time, names no site).
func isLeaseAnswer(m *wire.Control) bool {
	return m.Path == wire.ViewPath && m.Ballot.Site == 0 &&
		(m.Kind == wire.ControlLeased || m.Kind == wire.ControlVote && m.Err == wire.ErrNotInView)
}

// decorateControl adds, at the head, what the host tells other sites on
// the machine's messages: on a lease answer the updates held stable and
// the view (relay.go), on a refusal of a site outside the view whether
// this site still votes for it, on a join confirmation what this site
// held when it adopted its view.
func (h *Mode) decorateControl(c *wire.Control) {
	m := h.machine
	switch {
	case c.Kind == wire.ControlLeased:
		c.Vector, c.View = h.versions.Stable(), m.View()
	case isLeaseAnswer(c):
		// Holder says the member keeps the asker's writes: it still
		// votes for it (durable mode: it has not taken its keys over),
		// or, relaxed, it was not told to take them over (a site
		// without controls has no votes).
		c.Vector = h.versions.Stable()
		if m.VotesFor(c.To) || !h.takesOver(c.To) {
			c.Holder = c.To
		}
	case c.Kind == wire.ControlJoined && c.Granted:
		c.Vector = slices.Clone(h.adoptedVector)
	}
}

// noteLeaseRefusal records, at the head, a member's answer to this site's lease
// request: a refusal while this site is outside the view.
func (h *Mode) noteLeaseRefusal(m *wire.Control) {
	if h.refusals == nil {
		h.refusals = map[wire.SiteID]memberReport{}
	}
	h.refusals[m.From] = memberReport{view: m.View.N, vector: m.Vector, votesFor: m.Holder == h.sites.Site()}
}

// noteConfirm records, at the head, a member's confirmation of this
// site's join handshake.
func (h *Mode) noteConfirm(m *wire.Control) {
	if h.confirms == nil {
		h.confirms = map[wire.SiteID]memberReport{}
	}
	h.confirms[m.From] = memberReport{view: m.View.N, vector: m.Vector}
}

// adoptedView runs when the head's machine adopted a view: it remembers
// what this replica held then, which sites the view admitted, and, when
// it admits this site after it was out, records that in the chain.
func (h *Mode) adoptedView(view wire.View) {
	own := h.sites.Site()
	h.adoptedVector = h.versions.Stable()
	if h.admittedIn == nil {
		h.admittedIn = map[wire.SiteID]uint64{}
	}
	for _, s := range view.Members {
		if _, known := h.admittedIn[s]; !known || !h.wasMemberOf(s) {
			h.admittedIn[s] = view.N
		}
	}
	member := slices.Contains(view.Members, own)
	if member && !h.wasMember && view.N > 0 {
		h.recordRejoin(rejoinedKey, view.N)
	}
	if !member {
		h.asked, h.confirms = false, nil
	}
	h.wasMember = member
	h.members = slices.Clone(view.Members)
}

// wasMemberOf reports whether s was a member of the view the head last
// adopted.
func (h *Mode) wasMemberOf(s wire.SiteID) bool { return slices.Contains(h.members, s) }

// headCurrent reports whether the head may serve writes: unless its
// site was admitted back to the view and has not yet found itself
// holding what every member released before, it may.
func (h *Mode) headCurrent() bool {
	if h.rejoinedIn <= h.currentIn {
		return true
	}
	view := h.machine.View()
	stable := h.versions.Stable()
	for _, s := range view.Members {
		if s == h.sites.Site() {
			continue
		}
		c, ok := h.confirms[s]
		if !ok || c.view < h.rejoinedIn || !covers(stable, c.vector) {
			return false
		}
	}
	h.recordRejoin(currentKey, h.rejoinedIn)
	return true
}

// covers reports whether v holds at least every count of w.
func covers(v, w wire.Vector) bool { return coversOthers(v, w, 0) }

// coversOthers reports whether v holds at least every count of w but
// site's.
func coversOthers(v, w wire.Vector, site wire.SiteID) bool {
	for _, sc := range w {
		if sc.Site != site && v.Get(sc.Site) < sc.N {
			return false
		}
	}
	return true
}

// tickRejoin moves, at the head of a site outside the view, its return
// on: once every member answered in this view, it restores the keys of
// its expired updates (durable mode) and asks to join.
func (h *Mode) tickRejoin() {
	m := h.machine
	if m == nil || !m.Excluded() || h.asked {
		return
	}
	view := m.View()
	own := h.sites.Site()
	originated := h.versions.Applied(own)
	var gaveUp uint64 // how many of this site's updates every member holds
	first, takenOver := true, h.durableAcrossSites()
	for _, s := range view.Members {
		rep, ok := h.refusals[s]
		if !ok || rep.view != view.N {
			return // not yet heard in this view
		}
		n := rep.vector.Get(own)
		switch {
		case h.durableAcrossSites() && rep.votesFor:
			return // it has not taken over this site's keys yet
		case !h.durableAcrossSites() && rep.votesFor && n < originated:
			return // relaxed: it takes every update of this site first
		case !h.durableAcrossSites() && !rep.votesFor:
			takenOver = true // the operator reassigned this site's keys there
		}
		if first || n > gaveUp {
			gaveUp, first = n, false
		}
	}
	if gaveUp < originated && takenOver && !(mutation.Enabled && h.core.Mutations().HierarchicalRejoinKeepsGivenUp) {
		if !h.restoreExpired(view, expiredRange{gaveUp, originated}) {
			return
		}
	}
	h.asked = true
	if err := m.Resynced(own, h.core.Now()); err != nil {
		h.core.ProtocolError("volume %d: %v", h.core.Volume(), err)
	}
}

// restoreExpired restores, at a returning head in durable mode, the keys
// its expired updates e touched to a member's copies, a batch at a time;
// it reports whether it is done (the expired range then recorded).
func (h *Mode) restoreExpired(view wire.View, e expiredRange) bool {
	rs := h.restore
	if rs == nil || rs.expired != e {
		updates, ok := h.loggedUpdates(e)
		if !ok {
			h.core.ProtocolError("volume %d: shipping log lacks expired updates %d..%d", h.core.Volume(), e.from+1, e.through)
			return false
		}
		keys := map[string]bool{}
		for _, u := range updates {
			keys[u.Key] = true
		}
		member := wire.SiteID(0)
		for _, s := range view.Members {
			if s != h.sites.Site() {
				member = s
				break
			}
		}
		rs = &restore{member: member, keys: slices.Sorted(maps.Keys(keys)), expired: e}
		h.restore = rs
	}
	// Apply an answer once this site holds exactly what its answerer
	// held (restoreBarrier stops the other sites' updates there): no
	// older version of its keys can arrive after it, and none newer was
	// applied before it (one could have lost to this site's given-up
	// version). An answerer that held less than this site is asked again.
	if len(rs.fetched) > 0 && !coversOthers(rs.fetched[0].Vector, h.versions.Vector(), h.sites.Site()) {
		for _, o := range rs.fetched[0].Objects {
			rs.keys = append(rs.keys, o.Key)
		}
		rs.fetched = rs.fetched[1:]
	}
	for len(rs.fetched) > 0 && coversOthers(h.versions.Stable(), rs.fetched[0].Vector, h.sites.Site()) {
		for _, o := range rs.fetched[0].Objects {
			if cur := h.core.Get(o.Key).Stamp; cur.Origin != h.sites.Site() || cur.N <= e.from || cur.N > e.through {
				continue // not a version given up: one that came since is newer
			}
			// The member's copy, unstamped: this site holds every update
			// the member held, so a later version is newer, and the
			// next write of the key stamps above every version applied.
			u := wire.Update{SN: h.core.Applied() + 1, Key: o.Key, Changed: true, Deleted: o.Deleted, Value: o.Value, Epoch: h.core.Epoch()}
			h.core.Apply(&u)
		}
		rs.fetched = rs.fetched[1:]
		h.core.AfterApply()
	}
	if len(rs.keys) == 0 && len(rs.asking) == 0 && len(rs.fetched) == 0 {
		h.recordRejoin(expiredKeys+string(binary.AppendUvarint(nil, e.from)), e.through)
		h.core.AfterApply()
		h.restore = nil
		return true
	}
	if len(rs.asking) == 0 && len(rs.keys) > 0 {
		n := min(fetchBatchMax, len(rs.keys))
		rs.asking, rs.keys = rs.keys[:n], rs.keys[n:]
		rs.askedAt = 0
	}
	if len(rs.asking) > 0 && rs.askedAt != 0 && !rs.refreshed {
		if tail, _, ok := h.sites.RouteTail(rs.member, h.core.Volume()); ok && tail != rs.askedOf {
			rs.askedAt = 0 // the server learned the member's new tail
		}
	}
	if len(rs.asking) > 0 && (rs.askedAt == 0 || h.core.Now()-rs.askedAt >= h.core.Limits().ShipRetryInterval) {
		retry := h.core.Now() - h.core.Limits().ShipRetryInterval/2 // look again in half a retry interval
		switch tail, vol, ok := h.sites.RouteTail(rs.member, h.core.Volume()); {
		case rs.askedAt != 0 && !rs.refreshed:
			// Unanswered: the route may name a server that is not the
			// member's tail any more (it drops the request); refreshed
			// once, then asked again.
			h.sites.Stale(rs.member, h.core.Volume())
			rs.refreshed, rs.askedAt = true, retry
		case ok:
			h.core.Send(tail, &wire.Fetch{Volume: vol, Site: h.sites.Site(), OriginVolume: h.core.Volume(), Keys: slices.Clone(rs.asking), Cluster: h.sites.Cluster()})
			rs.askedAt, rs.refreshed, rs.askedOf = h.core.Now(), false, tail
		default:
			rs.askedAt = retry // the server asks the member's masters for the route
		}
	}
	return false
}

// handleFetch answers, at the tail, another site's request for its copies
// of some keys.
func (h *Mode) handleFetch(from wire.NodeID, m *wire.Fetch) {
	if len(m.Keys) > fetchBatchMax || !slices.Contains(h.core.Config().Sites, m.Site) {
		h.core.ProtocolError("fetch of %d keys from %s, site %d, at volume %d", len(m.Keys), from, m.Site, h.core.Volume())
		return
	}
	if !h.core.IsTail() {
		// Not the tail any more: the asker routes its next Fetch to
		// the tail this replica knows.
		h.core.Send(from, &wire.Moved{Site: h.sites.Site(), Config: h.core.Config().Clone()})
		return
	}
	ans := &wire.Fetched{Volume: m.OriginVolume, Site: h.sites.Site(), Vector: h.versions.Vector()}
	for _, k := range m.Keys {
		o := h.core.Get(k)
		ans.Objects = append(ans.Objects, wire.KeyValue{Key: k, Value: o.Value, Deleted: !o.Exists, Stamp: o.Stamp})
	}
	h.core.Send(from, ans)
}

// handleFetched takes, at a returning head, the answer to its Fetch.
func (h *Mode) handleFetched(m *wire.Fetched) {
	rs := h.restore
	if rs == nil || m.Site != rs.member || len(m.Objects) != len(rs.asking) {
		return // late, or not the batch asked for
	}
	for i, o := range m.Objects {
		if o.Key != rs.asking[i] {
			return
		}
	}
	rs.asking = nil
	rs.fetched = append(rs.fetched, m)
	h.tickRejoin()
}

// applyOverrides acts, once per generation, on the operator's overrides
// of the keyspace at this site (the generations are records of the
// chain, so a new or restarted head does not act again):
//   - a grace view (catena keyspace grace): its sites, numbered after
//     the head's own view, adopted without a majority (NFSv4 §2.3's grace
//     period after a majority of the sites failed at once); the machine
//     sends it to the other sites;
//   - a reassignment (catena keyspace reassign, relaxed mode): each site
//     named, once outside the view (the operator may ask before the
//     view leaves a failed site out), is from then on treated as durable
//     mode treats every removed site (takesOver): its shipments are refused,
//     its queued updates dropped, and once every member holds as many of
//     its updates as this one its keys are freed (resyncRemoved); when
//     it returns it gives up its writes the others lack (tickRejoin).
func (h *Mode) applyOverrides(m *control.Machine) {
	ks, ok := h.sites.Keyspace(h.core.Volume())
	if !ok {
		return
	}
	if ks.Grace.Generation > h.graceApplied {
		v := wire.View{N: m.View().N + 1, Members: slices.Clone(ks.Grace.Sites)}
		if err := m.ForceView(v, h.core.Now()); err != nil {
			h.core.ProtocolError("volume %d: the operator's grace view %v (generation %d) refused: %v", h.core.Volume(), v, ks.Grace.Generation, err)
		}
		h.recordRejoin(graceKey, ks.Grace.Generation)
	}
	if ks.Reassign.Generation > h.reassignApplied {
		view := m.View()
		waiting := false
		for _, site := range ks.Reassign.Sites {
			switch {
			case site == h.sites.Site() || !ks.Relaxed:
				h.core.ProtocolError("volume %d: the operator's reassignment of site %d (generation %d) refused: this site, or the keyspace is durable", h.core.Volume(), site, ks.Reassign.Generation)
			case view.Has(site):
				waiting = true // applied once the view leaves the site out
			case !h.takesOver(site):
				h.recordRejoin(reassignedIn+string(binary.AppendUvarint(nil, uint64(site))), view.N)
				h.shipping.DropInbound(site)
			}
		}
		if !waiting {
			h.recordRejoin(reassignKey, ks.Reassign.Generation)
		}
	}
}

// takesOver reports whether this site gives up the writes of site that
// it lacks while site is outside the view, and takes over its keys:
// always in durable mode; in relaxed mode once the operator reassigned
// site's keys here since the view that last admitted it.
func (h *Mode) takesOver(site wire.SiteID) bool {
	if h.durableAcrossSites() {
		return true
	}
	n, ok := h.reassigned[site]
	return ok && n >= h.admittedIn[site]
}
