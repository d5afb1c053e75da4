package chain

import (
	"cmp"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction (Almeida, Leitão, Rodrigues: causal+ chain replication,
// §III) on the same chain: a volume of a causal keyspace has K > 0 in its
// configuration (docs/adr/0010-causal-mode.md).
//
//   - Writes: the head sequences and applies an update as in CR; the
//     member at index K−1 answers the client once it applied it (the
//     eager phase: the first K members hold it); the update goes on to
//     the tail, whose acknowledgement makes it stable everywhere on its
//     way back (committed). With fewer than K members the head accepts no
//     update: an answer promises K copies.
//   - Reads: any member answers a read whose client has seen no newer
//     version of the key than the member applied (ClientRequest.
//     MinVersion ≤ applied; SNs are applied in order, so applied ≥ v
//     means the member holds version v). A member that has not applied
//     it passes the read up (QueryUp): by Update Propagation its
//     predecessor holds at least as much. The answer says which member
//     answered and whether the key's version there is stable (no update
//     to the key beyond committed), which is the client's metadata.
//   - Dependency stabilisation: OpWaitStable(key, v) is answered once v
//     is committed; the tail knows first, so clients ask it, and it
//     holds the request until it has applied v.

// causal reports whether this replica's volume belongs to a causal keyspace.
func (r *Replica) causal() bool { return r.config.K > 0 }

// position returns this replica's index in its chain, or -1.
func (r *Replica) position() int { return r.config.Index(r.id) }

// Completeness (wire.VolumeStatus.Complete). In a causal chain an update
// is answered once the first K members hold it, so they, and for sure
// only they, hold every answered update; the master never removes a
// failed member that may be the last one known to (master.go,
// lastComplete), or an answered update could be lost to a partition the
// chain would have outlived by waiting. A member stays complete while it
// stays in the first K: members only move towards the head, and every
// update answered later reaches it first. One that moved into the first
// K because members before it left lacks what its predecessor had not
// forwarded yet: a complete predecessor answers its SyncRequest with the
// SN it applied, which no update answered so far exceeds, so the member
// is complete once it applied that SN.

// complete reports whether this member holds every update the chain has
// answered (always in a strong chain: a member holds what the tail does).
func (r *Replica) complete() bool { return r.applied >= r.catchUpTo }

// adoptCompleteness updates catchUpTo for a newly adopted configuration;
// prev is the one adopted before, held in role wasRole.
func (r *Replica) adoptCompleteness(prev wire.Config, wasRole role) {
	i := r.position()
	switch {
	case !r.causal() && r.role.isMember():
		r.catchUpTo = 0
	case i < 0 || i >= r.config.K:
		r.catchUpTo = storage.NeverCaughtUp
	case r.config.Fresh || prev.Epoch == 0 && r.config.Epoch == 1:
		r.catchUpTo = 0 // the chain begins, empty: nothing was answered
	case prev.Causal() && wasRole.isMember() && prev.Index(r.id) < prev.K:
		// Still in the first K: complete, or catching up as before.
	default:
		r.catchUpTo = storage.NeverCaughtUp
	}
	if i == 0 && !r.complete() {
		// A head has no predecessor to catch up from: anything answered
		// it lacks is gone with the members the master removed, which it
		// does only when none that stays is known to hold everything (a
		// failure of more than the first K). The chain goes on from here.
		r.catchUpTo = 0
	}
}

// catchUpWith notes a causal predecessor's SyncReply: once this member of
// the first K applied what a complete predecessor had, it is complete.
func (r *Replica) catchUpWith(m *wire.SyncReply) {
	if r.causal() && m.PredecessorComplete && !r.complete() && r.position() >= 0 && r.position() < r.config.K {
		r.catchUpTo = min(r.catchUpTo, m.PredecessorAppliedSN)
		r.saveMeta()
	}
}

// tooShortForWrites reports whether a causal chain has fewer than K
// members: an update could not reach K replicas, so none is accepted or
// answered (ChainReaction §III-D: a chain with fewer than k members
// processes no write).
func (r *Replica) tooShortForWrites() bool { return r.causal() && len(r.config.Chain) < r.config.K }

// answersUpdates reports whether this member tells clients the outcome of
// the updates it applies: the tail in a strong volume (CR §2), the member
// at index K−1 in a causal one (the tail too, for updates it processes
// after a reconfiguration made it the tail: becomeTail).
func (r *Replica) answersUpdates() bool {
	if !r.causal() {
		return r.role.isTail()
	}
	k := r.config.K - 1
	if r.mutations.CausalRepliesEarly && k > 0 {
		k--
	}
	return r.position() == k && !r.tooShortForWrites()
}

// forwardsLazily reports whether this member forwards at low priority.
// ChainReaction §III-B: once an update is on the first K members the
// client has its answer and the rest of the chain receives it lazily. So
// in a causal volume the members from index K−1 on hold their forwards
// back until the server has no other input waiting (Idle), its next
// tick, or LazyBacklogMax held-back updates, whichever comes first: eager
// work (client requests, the first K members' forwards, acknowledgements)
// goes first, and the lazy phase falls behind by a bounded amount.
func (r *Replica) forwardsLazily() bool {
	return r.causal() && r.position() >= r.config.K-1
}

// heldBack returns how many applied updates the successor has not been
// sent yet.
func (r *Replica) heldBack() wire.SN {
	if r.downstream != successorStreaming || r.applied <= r.forwardedTo {
		return 0
	}
	return r.applied - r.forwardedTo
}

// HasHeldBack reports whether Idle would forward something.
func (r *Replica) HasHeldBack() bool { return r.heldBack() > 0 }

// handleCausalQuery answers a read on a causal volume, or passes it up.
// replyTo is the client (the query may have come up from a successor).
func (r *Replica) handleCausalQuery(replyTo wire.NodeID, req *wire.ClientRequest) {
	if !r.role.isMember() {
		r.reply(replyTo, req, wire.ErrNotTail, wire.Result{})
		return
	}
	if req.Op.Kind == wire.OpWaitStable {
		r.handleWaitStable(replyTo, req)
		return
	}
	if req.MinVersion > r.applied {
		if r.role.isHead() {
			// Nobody holds it: the head has applied every update of the
			// chain that survives.
			r.reply(replyTo, req, wire.ErrUnknownVersion, wire.Result{})
			return
		}
		r.send(r.predecessor, &wire.QueryUp{Volume: r.volume, Epoch: r.config.Epoch, ReplyTo: replyTo, Request: *req})
		return
	}
	version, dirty := r.sent.newestOf(req.Op.Key)
	stable := !dirty || version <= r.committed
	eager := min(r.config.K, len(r.config.Chain)) - 1 // the last member of the eager phase
	if !stable && r.position() < eager && version > req.MinVersion {
		// The key's newest version here may not have reached K members
		// yet: if this member failed now, it could be lost, after a
		// client had read it. Members from index K−1 on hold only
		// versions on K members (Update Propagation); the client asks
		// there. (A gap in ChainReaction, which lets any member up to
		// the client's position answer with its newest version.)
		r.reply(replyTo, req, wire.ErrDirty, wire.Result{})
		return
	}
	result := kv.Read(req.Op, r.store.Get(req.Op.Key))
	if stable {
		// Every version of the key this member holds is stable; the
		// committed SN bounds them.
		version = r.committed
	}
	result.SN = version
	r.replyAs(replyTo, req, wire.ErrNone, result, stable)
}

// stableWaiter is an OpWaitStable request held until its version is
// committed.
type stableWaiter struct {
	replyTo wire.NodeID
	req     wire.ClientRequest
}

// handleWaitStable answers OpWaitStable(key, v) once v is committed. Any
// member that knows answers at once; the tail holds the request until it
// applied v (it commits what it applies); others send the client to the
// tail.
func (r *Replica) handleWaitStable(replyTo wire.NodeID, req *wire.ClientRequest) {
	if len(req.Deps) > 0 {
		r.handleGeoWaitStable(replyTo, req)
		return
	}
	switch {
	case req.MinVersion <= r.committed:
		r.replyAs(replyTo, req, wire.ErrNone, wire.Result{SN: req.MinVersion}, true)
	case !r.role.isTail():
		r.reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case req.MinVersion > r.applied+wire.SN(r.limits.SentMax):
		// No chain member holds it: the head admits no update while
		// SentMax of them are unacknowledged, so the tail is never
		// further behind than that. A forged version would hold a
		// waiter until the tail changes.
		r.reply(replyTo, req, wire.ErrUnknownVersion, wire.Result{})
	case len(r.stableWaiters) >= r.limits.WaitersMax:
		r.reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
	default:
		w := stableWaiter{replyTo: replyTo, req: *req}
		i, _ := slices.BinarySearchFunc(r.stableWaiters, req.MinVersion, func(w stableWaiter, v wire.SN) int {
			return cmp.Compare(w.req.MinVersion, v)
		})
		r.stableWaiters = slices.Insert(r.stableWaiters, i, w)
	}
}

// answerStableWaiters answers the OpWaitStable requests whose version is
// now committed.
func (r *Replica) answerStableWaiters() {
	n := 0
	for n < len(r.stableWaiters) && r.stableWaiters[n].req.MinVersion <= r.committed {
		w := &r.stableWaiters[n]
		r.replyAs(w.replyTo, &w.req, wire.ErrNone, wire.Result{SN: w.req.MinVersion}, true)
		n++
	}
	r.stableWaiters = slices.Delete(r.stableWaiters, 0, n)
}

// releaseStableWaiters sends the held OpWaitStable requests back to their
// clients when this replica stops being the tail: they ask the new one.
func (r *Replica) releaseStableWaiters() {
	for i := range r.stableWaiters {
		w := &r.stableWaiters[i]
		r.reply(w.replyTo, &w.req, wire.ErrNotTail, wire.Result{})
	}
	r.stableWaiters = nil
	for _, w := range append(r.geoState.waiters, r.geoState.shipWaiters...) {
		r.reply(w.replyTo, &w.req, wire.ErrNotTail, wire.Result{})
	}
	r.geoState.waiters, r.geoState.shipWaiters = nil, nil
	r.geoState.heldAnswers = nil // their clients ask again: the head answers once every site holds them
}

// handleQueryUp takes a query a successor passed up.
func (r *Replica) handleQueryUp(m *wire.QueryUp) {
	if m.Request.Volume != r.volume || m.Request.Epoch != r.config.Epoch || !r.causal() {
		r.protocolError("successor passed up a query for volume %d epoch %d (causal %v)", m.Request.Volume, m.Request.Epoch, r.causal())
		return
	}
	r.handleCausalQuery(m.ReplyTo, &m.Request)
}
