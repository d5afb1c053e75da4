package chain

import (
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// CR §3 "Failure of Other Servers", Fig. 3: when a server S leaves the
// chain, its predecessor S- must first send its new successor S+ the
// updates on Sent that S+ may lack. Catena runs this exchange on every
// link at the start of every epoch, and whenever a link broke (PeerReset)
// or lost messages: S+ reports the last SN it has (SyncRequest, Fig. 3's
// message 2, sent to S- directly rather than through the master), S-
// answers (SyncReply) and forwards Sent after that SN (message 4). S+
// applies nothing from S- before the answer; S- forwards nothing to S+
// before the request of the epoch. A break only S- saw does not wait for
// S+: S- resends Sent after the acknowledged SN (handlePeerReset).

// predecessorLink is this replica's side, as S+, of the link from its
// predecessor.
type predecessorLink uint8

const (
	// predecessorNone: no predecessor (the head, or not in the chain).
	predecessorNone predecessorLink = iota
	// predecessorSyncing: a SyncRequest is out; forwards are dropped until
	// the predecessor answers in this epoch. Tick repeats the request.
	predecessorSyncing
	// predecessorSynced: the predecessor answered in this epoch; its
	// forwards are applied in SN order.
	predecessorSynced
)

// successorLink is this replica's side, as S-, of the link to its
// successor.
type successorLink uint8

const (
	// successorUnsynced: the successor has not reported, in this epoch (or
	// since the link broke), the last SN it has; nothing is forwarded.
	successorUnsynced successorLink = iota
	// successorStreaming: Sent is forwarded to the successor after
	// forwardedTo.
	successorStreaming
)

// dropLinks: a new configuration starts both links over.
func (r *Replica) dropLinks(now wire.Time) {
	r.upstream = predecessorNone
	r.downstream = successorUnsynced
	r.progressAt, r.upstreamHeardAt = now, now
	r.upstreamDurable, r.reportedDurable, r.upstreamApplied = 0, 0, 0
}

// StalledFor returns how long, at now, this head or middle member has
// held updates for its successor without the acknowledgements from down
// the chain advancing (wire.VolumeStatus.StalledFor); 0 when it holds
// none, and at any other role. Updates wait on Sent until the tail's
// acknowledgement comes back, so a link that carries nothing one way (a
// successor that gets no forwards, or a predecessor that gets no acks or
// SyncRequests) stalls every member above it, and the last member that
// stalls is the link's predecessor. The master cuts the fault out of the
// chain (master/links.go). An idle chain holds nothing and stalls
// nothing: a fault shows with the first update after it.
func (r *Replica) StalledFor(now wire.Time) wire.Time {
	if r.phase != phaseRunning || r.role != roleHead && r.role != roleMiddle || r.sent.len() == 0 {
		return 0
	}
	return max(now-r.progressAt, 0)
}

// progressed notes that the link to the successor made progress.
func (r *Replica) progressed() { r.progressAt = r.now }

// syncWithPredecessor (re)starts the exchange with the predecessor: the
// epoch began, the link broke, or a gap shows messages were lost.
// REQUIRES: the replica has a predecessor.
func (r *Replica) syncWithPredecessor(now wire.Time) {
	if r.predecessor == "" {
		panic("INVARIANT sync: " + string(r.id) + " synchronises with no predecessor as " + r.role.String())
	}
	r.upstream = predecessorSyncing
	if r.needsTransfer() {
		r.transfer.next(now, false)
	}
	r.sendSyncRequest(now)
}

// sendSyncRequest reports to the predecessor the last SN this replica
// has; a joining server without a whole snapshot asks for one, offering
// the state it kept for a catch-up (catchup.go).
func (r *Replica) sendSyncRequest(now wire.Time) {
	r.syncRequestedAt = now
	m := &wire.SyncRequest{
		Volume:       r.volume,
		Epoch:        r.config.Epoch,
		AppliedSN:    r.applied,
		CommittedSN:  r.committed,
		NeedSnapshot: r.needsTransfer(),
	}
	if m.NeedSnapshot {
		m.Transfer = r.transfer.id()
	}
	if r.offersCatchUp() {
		m.AppliedEpoch = r.appliedEpoch
	}
	r.send(r.predecessor, m)
}

// handleSyncReply: the predecessor answered in this epoch; its forwards
// follow on the same FIFO link.
func (r *Replica) handleSyncReply(from wire.NodeID, m *wire.SyncReply) {
	if r.role == roleJoining && m.Transfer != (wire.TransferID{}) {
		if m.Transfer != r.transfer.id() {
			// An answer to a transfer this joiner gave up: the chunks and
			// forwards that follow it are dropped while it waits for the
			// answer to the one it asked for last.
			return
		}
		r.transfer.unanswered = 0
		if r.snapshot.installed {
			// A second answer to the transfer this joiner took (the tail,
			// its link to the joiner broken, answered a repeat): the
			// stream the tail continues is this one's. A catch-up starts
			// from the state the joiner offered then, which it no longer
			// holds as such: it drops its state and asks for a snapshot.
			if m.CatchUp {
				r.resetState()
				r.syncWithPredecessor(r.now)
				return
			}
			r.snapshot = snapshotReceipt{}
		}
	} else if r.needsTransfer() {
		return // a reply to no transfer request: not one this joiner sent
	}
	if m.PredecessorAppliedSN < r.applied && r.role != roleJoining {
		r.protocolError("update propagation: predecessor %s applied %d, %s applied %d", from, m.PredecessorAppliedSN, r.id, r.applied)
		return
	}
	r.upstream = predecessorSynced
	r.upstreamDurable = m.PredecessorDurableSN
	r.upstreamApplied = m.PredecessorAppliedSN
	if m.CatchUp && r.needsTransfer() {
		r.acceptCatchUp(from, m)
	}
	r.mode.SyncReplied(m)
	r.durabilityAdvanced()
}

// streamToSuccessor: the successor holds everything up to sn; forward
// Sent after it from now on.
func (r *Replica) streamToSuccessor(sn wire.SN) {
	r.downstream = successorStreaming
	r.forwardedTo = sn
}

// handleSyncRequest is the predecessor's side of CR §3 Fig. 3: the
// successor reported the last SN it has; resend the rest of Sent.
func (r *Replica) handleSyncRequest(m *wire.SyncRequest) {
	if m.NeedSnapshot {
		if r.hasJoiner() {
			r.raiseCap(m.AppliedSN, m.AppliedEpoch)
		}
		switch {
		case !r.hasJoiner():
		case !r.joiner.answers(m.Transfer):
			// A repeat: the transfer answering it is on its way on the
			// FIFO link, or the link broke, and then the joiner asks
			// anew. Each answer is a whole snapshot: a tail slower to send
			// one than the joiner is to repeat its request would
			// otherwise start transfers and never finish one.
		case r.catchesUp(m.AppliedSN, m.AppliedEpoch):
			r.sendCatchUp(m.AppliedSN, m.Transfer)
		case r.awaitsCatchUpBase(m.AppliedSN, m.AppliedEpoch):
			r.joiner.deferred = m // answered once this tail has applied that far
		default:
			r.sendSnapshot(m.Transfer)
		}
		return
	}
	if m.AppliedSN > r.applied {
		r.protocolError("update propagation: successor %s has %d, beyond predecessor %s at %d", r.successor, m.AppliedSN, r.id, r.applied)
		return
	}
	if r.sent.len() > 0 && m.AppliedSN+1 < r.sent.firstSN() || r.sent.len() == 0 && m.AppliedSN < r.applied {
		r.protocolError("inprocess requests: successor %s needs SN %d, %s's Sent starts at %d (applied %d)",
			r.successor, m.AppliedSN+1, r.id, r.sent.firstSN(), r.applied)
		return
	}
	from := m.AppliedSN
	if mutation.Enabled && r.mutations.SkipResendOnSync {
		from = r.applied
	}
	r.streamToSuccessor(from)
	r.reportedDurable, r.reportedAt = r.chainDurable(), r.now
	r.send(r.successor, &wire.SyncReply{Volume: r.volume, Epoch: r.config.Epoch, PredecessorAppliedSN: r.applied,
		PredecessorComplete: r.complete(), PredecessorDurableSN: r.reportedDurable})
	if r.hasJoiner() {
		r.joiner.reported(m.AppliedSN)
		r.trimSent()
	} else if m.CommittedSN > r.committed {
		r.progressed()
		r.committed = m.CommittedSN
		r.trimSent()
		r.answerWaiters()
	}
	r.forward()
	r.ackUpstream()
	r.reportJoinerReady()
}

// handlePeerReset: the link to peer broke and was re-established, so
// messages on it may be lost; the exchange starts over on that link.
func (r *Replica) handlePeerReset(now wire.Time, peer wire.NodeID) {
	if peer == "" {
		return // names no link (the codec can decode one)
	}
	if peer == r.predecessor {
		r.syncWithPredecessor(now)
	}
	if peer == r.successor && !r.role.isTail() && r.downstream == successorStreaming {
		// Forwards sent on the broken link may be lost, and the successor
		// may not learn of the break (a transport tells the side that
		// redials; the other side's connection may be its first, or a
		// one-way fault may have healed): waiting for its SyncRequest
		// could wait for good. Resend instead everything after what the
		// tail acknowledged, which the successor holds: it ignores what
		// it has, applies what follows, and asks for a resync if a gap
		// shows (handleForward).
		r.forwardedTo = min(r.forwardedTo, r.committed)
		r.forwardNow()
		return
	}
	if peer == r.successor {
		r.downstream = successorUnsynced
		// What was sent may be lost: the joiner's next request gets a
		// new transfer, even a repeat (not of a transfer the joiner
		// acknowledged: joinerProgress.answers). The joiner may not
		// learn of the break (a restarted joiner's first connection):
		// if it has its transfer, it asks again once the stream goes
		// quiet (joinerStreamQuiet).
		r.joiner.answered = wire.TransferID{}
	}
}
