package chain

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// CR §3 Update Processing and Update Propagation: the head computes an
// update's effect once, assigns it the next SN and applies it; every
// member applies updates in SN order, keeps them on Sent and forwards them
// over a FIFO link; the tail replies to the client and acknowledges; an
// acknowledgement trims Sent and travels to the head.

// waiter is a retried update request whose update is applied at the head
// but not committed yet.
type waiter struct {
	replyTo wire.NodeID
	client  wire.ClientID
	reqNo   uint64
}

// handleUpdateRequest is the head's admission of an update: the mode's
// checks, backpressure, then exactly-once (session.go), then sequence.
func (r *Replica) handleUpdateRequest(from wire.NodeID, req *wire.ClientRequest) {
	if !r.role.isHead() {
		r.reply(from, req, wire.ErrNotHead, wire.Result{})
		return
	}
	if r.refusesMoved(from, req) {
		return
	}
	if int(req.Sites) > max(1, len(r.config.Sites)) {
		// Durability at more sites than hold the keyspace cannot be had:
		// refuse before anything is applied (every client path, ADR 13).
		r.reply(from, req, wire.ErrTooManySites, wire.Result{})
		return
	}
	if code := r.mode.AdmitUpdate(req); code != wire.ErrNone {
		r.reply(from, req, code, wire.Result{})
		return
	}
	if code := r.admitDeadlines(req.Op); code != wire.ErrNone {
		r.reply(from, req, code, wire.Result{})
		return
	}
	if r.sent.len() >= r.limits.SentMax || r.phase == phaseHandoffPaused || r.joiner.cap.capped || r.traits.WritesPaused {
		// Backpressure: the chain is this far behind, or a hand-off or
		// role move is under way, or the mode pauses writes; the client
		// retries.
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	switch verdict, result := r.sessions.admit(r.mode.SessionRequest(req)); verdict {
	case admitExpired:
		r.reply(from, req, wire.ErrSessionExpired, wire.Result{})
	case admitTooMany:
		r.reply(from, req, wire.ErrTooManyInFlight, wire.Result{})
	case admitRecorded:
		if result.SN <= r.committed {
			if !r.mode.Repeatable(result) {
				r.reply(from, req, wire.ErrUnavailable, wire.Result{}) // not yet: ask again
				return
			}
			r.replyAs(from, req, wire.ErrNone, result, true)
			return
		}
		if len(r.waiters) >= r.limits.WaitersMax {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
			return
		}
		r.waiters[result.SN] = append(r.waiters[result.SN], waiter{replyTo: from, client: req.Client, reqNo: req.ReqNo})
	case admitNew:
		if r.mode.Sequence(from, req) {
			r.sequence(from, req)
		}
	}
}

// admitsUpdate reports whether the head may sequence another update now
// (handleUpdateRequest's backpressure, for updates a mode sequences).
func (r *Replica) admitsUpdate() bool {
	return r.sent.len() < r.limits.SentMax && r.phase != phaseHandoffPaused && !r.traits.WritesPaused
}

// sequence is the head's update processing (CR §3): compute the update's
// effect once, assign the next SN, apply it and pass it down the chain.
func (r *Replica) sequence(from wire.NodeID, req *wire.ClientRequest) {
	sn := r.applied + 1
	op := kv.Resolve(req.Op, r.now) // a TTL becomes a deadline, once (ADR 28)
	var prior kv.Object
	if kv.ReadsPrior(op) || r.traits.Stamps {
		// A blind Put replaces whatever was there; only a stamped volume
		// needs the prior version's Stamp. Skipping the read saves the
		// head a storage lookup per write.
		prior = kv.Live(r.store.Get(op.Key), r.now) // (admitDeadlines checked the clock)
	}
	next, changed, result := kv.Apply(op, prior, r.now)
	result.SN = sn
	u := wire.Update{
		SN: sn, Key: op.Key, Changed: changed, Deleted: changed && !next.Exists, Value: next.Value,
		Client: req.Client, ReqNo: req.ReqNo, AckedBelow: req.AckedBelow, ReplyTo: from, Result: result,
		Epoch: r.config.Epoch, Expires: next.Expires, Type: next.Type,
	}
	if r.traits.Stamps {
		r.mode.Stamp(&u, req, prior.Stamp)
	}
	r.apply(&u)
	if mutation.Enabled && r.mutations.HeadRepliesEarly && !r.role.isTail() {
		r.replyUpdate(&u)
	}
	r.afterApply()
}

// apply stores one update in SN order and records its outcome.
func (r *Replica) apply(u *wire.Update) {
	if u.SN != r.applied+1 {
		panic(fmt.Sprintf("INVARIANT apply order: %s applying SN %d after %d", r.id, u.SN, r.applied))
	}
	r.splitBefore(u)
	// A list that keeps versions learns the object before the first
	// update to a key it holds (sentList.asOf), if the store holds it in
	// memory: reading the disk for it cost a causal member 10-20% of its
	// CPU on writes of keys not read lately (docs/benchmarks.md). Without
	// it, a read as of an SN before the update is answered by ADR 10's
	// rule, as on a list refilled from the catch-up log.
	var prior *kv.Object
	if r.sent.keepsVersions() && !r.sent.pending(u.Key) {
		if o, ok := r.store.Cached(u.Key); ok {
			prior = &o
		}
	}
	if u.Changed {
		r.store.Set(u.Key, kv.Object{Value: u.Value, Exists: !u.Deleted, Stamp: u.Stamp, Expires: u.Expires, Type: u.Type})
	}
	if u.Client != wire.NoClient && r.mode.RecordsSession(u) {
		r.sessions.record(u)
	}
	r.mode.Applied(u)
	if r.mode.Urgent(u) {
		r.urgentTo = u.SN
	}
	r.applied, r.appliedEpoch = u.SN, u.Epoch
	r.logApplied(u)
	r.saveMeta()
	if r.observer != nil {
		r.observer.Applied(r.id, r.volume, u)
	}
	switch {
	case r.role.isTail() && r.pipelined():
		// Processed once every member holds it on disk (durable.go,
		// advanceCommitted); kept on Sent until then.
		r.sent.append(u, prior)
	case r.role.isTail():
		// The tail processes the update: reply (if it is the member that
		// answers) and acknowledge. With a joining server it also keeps
		// the update for it.
		r.committed = u.SN
		if r.answersUpdates() {
			r.replyUpdate(u)
		} else if r.traits.StableNotice == StableNoticeAtTail {
			r.noticeStable(u)
		}
		if r.hasJoiner() {
			r.sent.append(u, prior)
		}
		r.mode.TailApplied()
	case r.role == roleJoining:
		// A joining server is the end of the line; it acknowledges what it
		// has to the tail.
	default:
		if r.sent.len() == 0 {
			r.progressed() // a stall counts from the oldest update held
		}
		r.sent.append(u, prior)
		if r.answersUpdates() {
			// A member before the tail answers in some modes
			// (ChainReaction: the K-th, once K replicas hold the update).
			r.replyUpdate(u)
			if mutation.Enabled && r.mutations.CausalNoticeEarly {
				r.noticeStable(u)
			}
		}
	}
}

// afterApply forwards and acknowledges what the last step applied.
func (r *Replica) afterApply() {
	r.advanceCommitted() // (at a pipelined tail; with lagging commits, a later input does)
	r.forward()
	r.answerWaiters()
	r.ackUpstream()
	r.mode.AfterApply()
}

// forward sends the successor the updates on Sent it does not have yet,
// now, or from a member that forwards lazily (Traits.LazyFrom) once the
// server is idle, the held-back updates reach LazyBacklogMax, or an
// urgent one is held back.
func (r *Replica) forward() {
	if r.forwardsLazily() && r.heldBack() < r.limits.LazyBacklogMax && r.urgentTo <= r.forwardedTo {
		return
	}
	r.forwardNow()
}

// forwardNow sends the successor the updates on Sent it does not have
// yet, starting after forwardedTo.
func (r *Replica) forwardNow() {
	if r.downstream != successorStreaming {
		return
	}
	for sn := max(r.forwardedTo+1, r.sent.firstSN()); r.sent.holds(sn); sn = r.forwardedTo + 1 {
		batch := r.sent.copyFrom(sn, r.limits.ForwardBatchMax)
		f := &wire.Forward{Volume: r.volume, Epoch: r.config.Epoch, Updates: batch}
		if r.pipelined() {
			r.sendEarly(r.successor, f) // before this member's commit (durable.go)
		} else {
			r.send(r.successor, f)
		}
		r.forwardedTo = batch[len(batch)-1].SN
	}
}

// ackUpstream tells the predecessor how far the tail has processed (a
// joining server: how far it has applied).
func (r *Replica) ackUpstream() {
	if r.predecessor == "" {
		return
	}
	sn := r.committed
	if r.role == roleJoining {
		sn = r.applied
	}
	if sn <= r.ackedUpstream && !r.mode.AckNews() {
		return
	}
	r.ackedUpstream = max(r.ackedUpstream, sn)
	ack := &wire.Ack{Volume: r.volume, Epoch: r.config.Epoch, SN: r.ackedUpstream}
	r.mode.FillAck(ack)
	if r.role == roleJoining {
		r.send(r.predecessor, ack) // (what it applied: on its disk first)
	} else {
		r.sendSettled(r.predecessor, ack)
	}
}

// takesForwards reports whether the replica applies forwards from its
// predecessor now: once the predecessor answered its SyncRequest in this
// epoch, at a joining server once it installed the snapshot, and not
// while paused for a hand-off (the predecessor resends them once the
// hand-off's epoch starts).
func (r *Replica) takesForwards() bool {
	return r.upstream == predecessorSynced && (r.role != roleJoining || r.snapshot.installed) &&
		r.phase != phaseHandoffPaused
}

func (r *Replica) handleForward(now wire.Time, m *wire.Forward) {
	for i := range m.Updates {
		u := &m.Updates[i]
		if u.SN <= r.applied {
			continue // resent after a re-synchronisation
		}
		if u.SN != r.applied+1 {
			// A gap: messages were lost on a link that broke. Start over.
			r.syncWithPredecessor(now)
			break
		}
		if !r.takesUnderCap(u) {
			break // resent once the moved member is the tail (rolemove.go)
		}
		r.apply(u)
	}
	r.afterApply()
	r.answerDeferredOffer()
}

// handleAck: the successor reports how far the tail has processed (CR §3:
// ack(r) deletes r from Sent and goes on to the predecessor). At the tail
// the successor is the joining server (extension.go).
func (r *Replica) handleAck(sn wire.SN) {
	if r.role.isTail() {
		r.handleJoinerAck(sn)
		return
	}
	if sn > r.applied {
		r.protocolError("successor acknowledged %d beyond %s applied %d", sn, r.id, r.applied)
		return
	}
	if sn <= r.committed {
		return
	}
	r.progressed()
	if r.traits.StableNotice == StableNoticeAtHead && r.role.isHead() {
		for s := max(r.committed+1, r.sent.firstSN()); s <= sn && r.sent.holds(s); s++ {
			r.noticeStable(r.sent.at(s))
		}
	}
	r.committed = sn
	r.trimSent()
	r.answerWaiters()
	r.ackUpstream()
	r.mode.Committed()
}

// trimSent drops from Sent what the successor no longer needs: what the
// tail processed, and at a tail what its joining server acknowledged (a
// pipelined tail keeps what it has not processed: durable.go).
func (r *Replica) trimSent() {
	upTo := r.committed
	if r.role.isTail() && !r.pipelined() {
		upTo = r.applied
	}
	if r.role.isTail() && r.hasJoiner() {
		upTo = min(upTo, r.joiner.acked)
	}
	r.sent.trimThrough(upTo)
}

// answerWaiters answers the retried requests whose update committed
// (not while the mode pauses writes: ChainReaction's answer promises K
// copies).
func (r *Replica) answerWaiters() {
	if len(r.waiters) == 0 || r.traits.WritesPaused {
		return
	}
	for _, sn := range slices.Sorted(maps.Keys(r.waiters)) {
		if sn > r.committed {
			break
		}
		for _, w := range r.waiters[sn] {
			if s := r.sessions.sessions[w.client]; s != nil {
				if result, ok := s.outcomes[w.reqNo]; ok && !r.mode.Repeatable(result) {
					r.send(w.replyTo, &wire.ClientReply{Volume: r.volume, Client: w.client, ReqNo: w.reqNo, Err: wire.ErrUnavailable, Epoch: r.config.Epoch})
				} else if ok {
					r.sendSettled(w.replyTo, &wire.ClientReply{
						Volume: r.volume, Client: w.client, ReqNo: w.reqNo, Result: result,
						Epoch: r.config.Epoch, Position: r.position(), Stable: true,
					})
				}
			}
		}
		delete(r.waiters, sn)
	}
}

// replyUpdate sends the client the outcome of its update; an update a
// mode sequenced (another site's, a record of its own) has nobody to
// answer, and a mode may hold the answer.
func (r *Replica) replyUpdate(u *wire.Update) {
	if u.ReplyTo == "" || r.mode.HoldsAnswer(u) {
		return
	}
	r.answerUpdate(u, r.role.isTail())
}

// noticeStable tells the writer of u, answered earlier by the member
// that answers updates, that u is stable (Traits.StableNotice): the
// answer again, stable. Clients take it as the answer to the wait their
// next update would otherwise send (docs/adr/0025), and ignore it as a
// duplicate otherwise. Not while writes are paused: an answer promises
// copies the chain no longer has.
func (r *Replica) noticeStable(u *wire.Update) {
	if u.ReplyTo == "" || r.traits.WritesPaused {
		return
	}
	r.answerUpdate(u, true)
}

// answerUpdate sends the client the outcome of its update u; stable says
// the tail processed it.
func (r *Replica) answerUpdate(u *wire.Update, stable bool) {
	r.sendSettled(u.ReplyTo, &wire.ClientReply{
		Volume: r.volume, Client: u.Client, ReqNo: u.ReqNo, Result: u.Result,
		Epoch: r.config.Epoch, Position: r.position(), Stable: stable,
	})
}
