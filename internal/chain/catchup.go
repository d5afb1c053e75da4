package chain

import (
	"fmt"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Catch-up (docs/adr/0003, "Catch-up"): a server that joins a chain with
// the state it kept, because it restarted with its data or was removed
// and comes back, receives only the updates it missed when the tail still
// holds them and its history agrees with the tail's; a snapshot
// otherwise. The tail chooses; the joiner applies the missed updates as
// forwards, so deletions, stamps, version vectors and exactly-once
// records travel as they do down the chain.
//
// History identity. An update carries the epoch whose head sequenced it
// (wire.Update.Epoch). One server is head in an epoch, and it only
// appends to its history; every replica's history is a prefix of some
// head's. So two histories whose updates at SN n were sequenced in the
// same epoch agree on updates 1..n, and a joiner that applied updates the
// rest of the chain never received (a head that failed before forwarding
// them) differs from the tail at its last SN: it gets a snapshot.
//
// The catch-up log. Every replica keeps the updates it applied last in
// memory (Limits.CatchUpLogMax, CatchUpLogBytesMax): the tail serves a
// catch-up from it. A durable log in the store would survive the tail's
// own restart, but it would write every update twice on every member to
// speed up a rare path, and the tail of a chain that lost one member has
// been running all along. A tail that restarted, or whose log no longer
// reaches back to the joiner's SN, sends a snapshot.

// newCatchUpLog returns an empty catch-up log: a Sent ring without the
// per-key index.
func newCatchUpLog() sentList { return sentList{} }

// logApplied keeps u in the catch-up log, dropping the oldest updates
// beyond the limits.
func (r *Replica) logApplied(u *wire.Update) {
	if r.limits.CatchUpLogMax <= 0 {
		return
	}
	r.recent.append(u, nil)
	for r.recent.len() > r.limits.CatchUpLogMax || r.recent.len() > 1 && r.recent.bytes > r.limits.CatchUpLogBytesMax {
		r.recent.trimFront()
	}
}

// keepsState reports whether the replica's state is whole (not a snapshot
// partly received) and names its history, so it can be offered as the
// base of a catch-up. Some modes always take a snapshot
// (Traits.CatchesUp: a geo volume's shipping log and its trim point are
// not part of the offer).
func (r *Replica) keepsState() bool {
	partial := r.snapshot.nextSeq > 0 && !r.snapshot.installed
	return r.appliedEpoch != 0 && !partial && r.traits.CatchesUp
}

// offersCatchUp reports whether this joining server offers its state at
// applied as the base of a catch-up (SyncRequest.AppliedEpoch).
func (r *Replica) offersCatchUp() bool {
	return r.needsTransfer() && r.keepsState()
}

// catchesUp reports whether this tail can bring a joiner whose update at
// sn was sequenced in epoch up to date with the updates after sn alone:
// this tail's update at sn was sequenced in the same epoch, so the
// joiner's history is a prefix of this tail's, and the catch-up log holds
// every update after sn.
func (r *Replica) catchesUp(sn wire.SN, epoch wire.Epoch) bool {
	if epoch == 0 || sn > r.applied || !r.traits.CatchesUp {
		return false
	}
	mine := r.appliedEpoch
	if sn < r.applied {
		// The log ends at applied, so holding sn it holds the rest.
		if !r.recent.holds(sn) {
			return false
		}
		mine = r.recent.at(sn).Epoch
	}
	return mine == epoch || mutation.Enabled && r.mutations.CatchUpAnyHistory
}

// awaitsCatchUpBase reports whether a joiner offering its state at sn
// (sequenced in epoch) is ahead of this tail only by updates the tail's
// predecessor is still forwarding, so the tail answers a repeat of the
// offer rather than send a snapshot now. A member moved to the tail
// (placement's MoveToTail) had received updates its old successor, now
// this tail, had not: the predecessor they share resends them in this
// epoch. Until this tail's own SyncRequest is answered it cannot tell,
// and waits too. A joiner ahead of what the predecessor had applied, or
// of a tail without predecessor, holds updates the chain lost (a head
// removed before forwarding them): no wait brings this tail to them.
func (r *Replica) awaitsCatchUpBase(sn wire.SN, epoch wire.Epoch) bool {
	if epoch == 0 || sn <= r.applied || r.predecessor == "" || !r.traits.CatchesUp || r.joiner.cap.diverged {
		return false
	}
	return r.upstream != predecessorSynced || sn <= r.upstreamApplied
}

// answerDeferredOffer answers the joiner's deferred offer once this
// tail has applied that far, or learned it never will.
func (r *Replica) answerDeferredOffer() {
	d := r.joiner.deferred
	if d == nil || r.applied < d.AppliedSN && r.awaitsCatchUpBase(d.AppliedSN, d.AppliedEpoch) {
		return
	}
	r.joiner.deferred = nil
	r.handleSyncRequest(d)
}

// sendCatchUp starts a joiner's catch-up from sn: the SyncReply says so,
// then (on the same FIFO link) Sent, refilled from the catch-up log with
// every update after sn, and every later update.
func (r *Replica) sendCatchUp(sn wire.SN, t wire.TransferID) {
	r.joiner.transferSent(t)
	r.send(r.successor, &wire.SyncReply{Volume: r.volume, Epoch: r.config.Epoch, PredecessorAppliedSN: r.applied, CatchUp: true, Transfer: t})
	from := sn + 1
	if r.pipelined() && r.committed < sn && r.recent.holds(r.committed+1) {
		from = r.committed + 1 // kept until processed (durable.go)
	}
	r.sent.reset()
	for s := from; s <= r.applied; s++ {
		r.sent.append(r.recent.at(s), nil)
	}
	// INVARIANT Inprocess Requests at the hand-off: Hist_tail =
	// Hist_joiner ⊕ Sent_tail, the joiner holding 1..sn.
	if n := r.sent.len(); wire.SN(n) != r.applied-from+1 || n > 0 && r.sent.firstSN() != from {
		panic(fmt.Sprintf("INVARIANT catch-up: %s Sent covers [%d, %d] for a joiner at %d, applied %d",
			r.id, r.sent.firstSN(), r.sent.lastSN(), sn, r.applied))
	}
	r.streamToSuccessor(sn)
	r.forward()
}

// acceptCatchUp is the joining server's side: the tail found its state
// a prefix of the tail's history, and the updates after it follow. The
// joiner counts as holding a whole snapshot from here on.
func (r *Replica) acceptCatchUp(from wire.NodeID, m *wire.SyncReply) {
	if m.PredecessorAppliedSN < r.applied {
		r.protocolError("catch-up: tail %s at %d accepted %s at %d", from, m.PredecessorAppliedSN, r.id, r.applied)
		return
	}
	if !r.offersCatchUp() {
		// The offer no longer stands (a snapshot began arriving, or this
		// joiner installed one since it asked): drop the state and ask
		// for a new transfer, a snapshot.
		r.resetState()
		r.syncWithPredecessor(r.now)
		return
	}
	r.snapshot.installed = true
	r.committed = r.applied // the tail holds them
	r.saveMeta()
	if r.observer != nil {
		r.observer.CaughtUp(r.id, r.volume, from, r.applied)
	}
	// Acknowledge even an empty catch-up: the tail counts the joiner as
	// installed on its first acknowledgement.
	r.ackedUpstream = r.applied
	r.send(from, &wire.Ack{Volume: r.volume, Epoch: r.config.Epoch, SN: r.applied})
}

// keepForCatchUp: a joining server starts a new attempt with the state it
// kept, which it offers to the tail; whatever belonged to a role it had
// before goes.
func (r *Replica) keepForCatchUp() {
	r.sent.reset()
	clear(r.waiters)
	r.mode.ReleaseTailRequests(false)
	r.snapshot = snapshotReceipt{}
	r.ackedUpstream = 0
	r.committed = min(r.committed, r.applied)
}

// retains reports whether a replica that c removes keeps its state for a
// later catch-up: it is whole, and no other server is joining in its
// place.
func (r *Replica) retains(c wire.Config) bool {
	return r.keepsState() && c.Joining == ""
}

// retain: removed from the chain, the replica keeps its state, wedged,
// until the master adds it back (a catch-up) or adds another server
// (Server.adopt drops it then).
func (r *Replica) retain(now wire.Time) {
	r.keepForCatchUp()
	r.committed = r.applied
	r.dropLinks(now)
	r.becomeWedged()
	r.saveMeta()
}

// Drop removes a retained replica's state: the master will not add this
// server back to the chain soon.
func (r *Replica) Drop() { r.resetState() }
