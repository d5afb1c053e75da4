package chain

import (
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// CR §3 "Extending a Chain": a new server T+ joins after the tail T. T
// sends T+ a snapshot of its state (objects and session table at T's
// applied SN), then, on the same FIFO link, every later update from its
// Sent list, while it keeps serving as tail. Once T+ is nearly caught up,
// T pauses; when T+ has acknowledged everything T applied, T reports the
// joiner ready and the master makes T+ the tail (docs/adr/0003).

// joinerPhase is a tail's view of its joining server's state transfer.
type joinerPhase uint8

const (
	// joinerAwaitingSnapshot: no snapshot or catch-up sent in this epoch
	// yet.
	joinerAwaitingSnapshot joinerPhase = iota
	// joinerSnapshotSent: a snapshot or a catch-up (catchup.go) is on its
	// way; the joiner has acknowledged nothing since.
	joinerSnapshotSent
	// joinerInstalled: the joiner acknowledged after the transfer was
	// sent, which it does only once it installed the snapshot or
	// accepted the catch-up.
	joinerInstalled
)

// joinerProgress is a tail's view of its joining server in one epoch;
// setConfig starts it over.
type joinerProgress struct {
	phase joinerPhase
	// acked is the last SN the joiner acknowledged or reported having.
	acked wire.SN
	// readyReported: a step of this epoch reported the joiner ready.
	readyReported bool
	// answered is the transfer the last snapshot or catch-up answered,
	// while the link to the joiner has not broken since: repeats of its
	// request are not answered again (wire.SyncRequest.Transfer).
	answered wire.TransferID
	// transfer is the transfer the last snapshot or catch-up answered,
	// kept after a broken link: once the joiner acknowledged it
	// (joinerInstalled), a request naming it is a repeat sent before the
	// joiner had the answer.
	transfer wire.TransferID
	// cap limits what the tail applies while a moved member joins
	// (rolemove.go).
	cap moveCap
	// deferred is the joiner's offer of a catch-up base this tail has
	// not reached yet (awaitsCatchUpBase): answered once it has.
	deferred *wire.SyncRequest
}

// transferSent: a new transfer (a snapshot or a catch-up) answering the
// joiner's request for transfer t starts; the joiner holds nothing of it
// yet.
func (j *joinerProgress) transferSent(t wire.TransferID) {
	j.phase = joinerSnapshotSent
	j.acked = 0
	j.answered, j.transfer = t, t
}

// answers reports whether a request for transfer t gets a new transfer:
// it is not a repeat of the request answered last on an unbroken link,
// nor of one whose answer the joiner acknowledged (a joiner that needs
// a transfer again names a new one).
func (j *joinerProgress) answers(t wire.TransferID) bool {
	if t == (wire.TransferID{}) {
		return true
	}
	return t != j.answered && !(j.phase == joinerInstalled && t == j.transfer)
}

// transferRequest is, at a joining server, the state transfer it asks
// for: every SyncRequest it sends until the answer arrives names it, and
// the tail answers each name once (wire.SyncRequest.Transfer). The joiner
// takes only the answer to the name it asked for last: an answer starts
// the stream of chunks and forwards that follows it on the FIFO link,
// and an earlier answer's stream is not the one the tail continues.
type transferRequest struct {
	incarnation uint64
	// attempts counts the transfers this process asked for; it names the
	// current one.
	attempts uint64
	// askedAt is when the current transfer was first asked for.
	askedAt wire.Time
	// unanswered counts the transfers given up in a row for want of an
	// answer; each doubles the wait for the next (up to 8 times).
	unanswered int
}

// id names the current transfer.
func (t *transferRequest) id() wire.TransferID {
	return wire.TransferID{Incarnation: t.incarnation, Attempt: t.attempts}
}

// next names a new transfer asked for from now on; unanswered says the
// previous one got no answer.
func (t *transferRequest) next(now wire.Time, unanswered bool) {
	t.attempts++
	t.askedAt = now
	if unanswered {
		t.unanswered = min(t.unanswered+1, 3)
	}
}

// unansweredFor reports whether the current transfer has waited for an
// answer longer than wait, doubled for each one left unanswered before.
func (t *transferRequest) unansweredFor(now, wait wire.Time) bool {
	return now-t.askedAt >= wait<<t.unanswered
}

// needsTransfer reports whether this replica is a joining server without
// a whole snapshot: its SyncRequests ask for a state transfer.
func (r *Replica) needsTransfer() bool { return r.role == roleJoining && !r.snapshot.installed }

// joinerStreamQuiet reports whether this joining server, past its state
// transfer, has heard nothing from its tail for TransferAnswerWait: it
// then reports again the last SN it has (Tick), and the tail streams on
// from there. The tail stops forwarding after a PeerReset for the link
// to the joiner and waits for the joiner's SyncRequest (sync.go), but
// the transport may report the reset to the tail alone: it reports one
// on every reconnection of the connection it dials, and a restarted
// joiner's process, whose first connection from the tail that is, sees
// no break (issue 32 item 6: a paused tail and a joiner 21 updates
// behind waited for each other until the master aborted the extension).
// A joiner that holds everything and waits for the master to make it
// the tail costs the tail a SyncReply per TransferAnswerWait.
func (r *Replica) joinerStreamQuiet(now wire.Time) bool {
	return r.role == roleJoining && r.snapshot.installed && r.upstream == predecessorSynced &&
		now-r.upstreamHeardAt >= r.limits.TransferAnswerWait
}

// acknowledged records an Ack from the joiner.
func (j *joinerProgress) acknowledged(sn wire.SN) {
	j.acked = max(j.acked, sn)
	if j.phase == joinerSnapshotSent {
		j.phase = joinerInstalled
	}
}

// reported records the last SN the joiner has, from its SyncRequest.
func (j *joinerProgress) reported(sn wire.SN) { j.acked = max(j.acked, sn) }

// snapshotReceipt is, at a joining server, the tail's snapshot being
// received: chunks arrive in order (Seq 0, 1, ...), the last one
// installs it. resetState starts it over.
type snapshotReceipt struct {
	// installed: the replica holds a whole snapshot (saved with its
	// metadata: before that its objects are a partial copy).
	installed bool
	// sn and nextSeq identify the transfer under way and the chunk it
	// expects next.
	sn      wire.SN
	nextSeq int
}

// hasJoiner reports whether the replica is a tail with a joining server.
func (r *Replica) hasJoiner() bool { return r.role.isTail() && r.config.Joining != "" }

// JoinerReady reports whether this tail's joining server holds everything
// this tail has applied, which stays so because the tail is paused: the
// master may make the joiner the tail. Until this tail adopts that
// configuration both serve queries from the same state; afterwards the
// old tail serves none. So the new tail never lacks an update the old one
// acknowledged or let a query see (pitfall 4), and any member remains a
// safe survivor of a total outage.
func (r *Replica) JoinerReady() bool {
	if !r.hasJoiner() || r.joiner.phase != joinerInstalled {
		return false
	}
	if mutation.Enabled && r.mutations.NoHandoffPause {
		return r.applied-r.joiner.acked <= r.limits.HandoffLagMax
	}
	// A pipelined tail hands over once it processed everything it
	// applied: the joiner takes every update as processed (durable.go).
	return r.phase == phaseHandoffPaused && r.joiner.acked == r.applied && (!r.pipelined() || r.committed == r.applied)
}

// reportJoinerReady puts JoinerReady in the step's Output the first time
// in an epoch the joiner is ready. Only the joiner's Ack and SyncRequest
// can make it so.
func (r *Replica) reportJoinerReady() {
	if !r.joiner.readyReported && r.JoinerReady() {
		r.joiner.readyReported = true
		r.out.JoinerReady = true
	}
}

// sendSnapshot starts a state transfer to the joining server: a copy of
// the store and the session table at applied, then (on the same FIFO link)
// every later update from Sent.
func (r *Replica) sendSnapshot(t wire.TransferID) {
	joiner, sn := r.successor, r.applied
	r.joiner.transferSent(t)
	r.send(joiner, &wire.SyncReply{Volume: r.volume, Epoch: r.config.Epoch, PredecessorAppliedSN: sn, Transfer: t})
	objects := r.store.Snapshot()
	seq := 0
	chunk := &wire.SnapshotChunk{Volume: r.volume, Epoch: r.config.Epoch, SnapshotSN: sn, Seq: seq, Sessions: r.sessions.export()}
	for _, o := range objects {
		if len(chunk.Objects) == r.limits.SnapshotChunkObjectsMax {
			r.send(joiner, chunk)
			seq++
			chunk = &wire.SnapshotChunk{Volume: r.volume, Epoch: r.config.Epoch, SnapshotSN: sn, Seq: seq}
		}
		chunk.Objects = append(chunk.Objects, wire.KeyValue{Key: o.Key, Value: o.Object.Value, Deleted: !o.Object.Exists, Stamp: o.Object.Stamp, Expires: o.Object.Expires, Type: o.Object.Type})
	}
	chunk.Last = true
	chunk.SnapshotEpoch = r.appliedEpoch
	chunk.Split = r.split
	r.mode.FillSnapshot(chunk)
	r.send(joiner, chunk)
	// Updates up to sn are in the snapshot; the ones after it follow.
	r.streamToSuccessor(sn)
	if !r.pipelined() {
		r.sent.trimThrough(sn) // (a pipelined tail keeps what it has not processed)
	}
	r.forward()
}

// handleJoinerAck: the joining server acknowledged what it applied. Once
// it is within HandoffLagMax updates, this tail pauses for the hand-off.
func (r *Replica) handleJoinerAck(sn wire.SN) {
	if sn > r.applied {
		r.protocolError("joiner acknowledged %d beyond tail %s applied %d", sn, r.id, r.applied)
		return
	}
	r.joiner.acknowledged(sn)
	if r.applied-r.joiner.acked <= r.limits.HandoffLagMax && !(mutation.Enabled && r.mutations.NoHandoffPause) {
		r.pauseForHandoff()
	}
	r.trimSent()
	r.ackUpstream()
	r.reportJoinerReady()
}

// handleSnapshotChunk is the joining server's side of the transfer.
func (r *Replica) handleSnapshotChunk(now wire.Time, from wire.NodeID, m *wire.SnapshotChunk) {
	if r.snapshot.installed {
		// A chunk of a transfer this joiner did not take (an answer to a
		// request it no longer makes: handleSyncReply).
		return
	}
	if m.Seq == 0 {
		// The state this replica kept, if any, goes: it holds nothing
		// whole to offer until the last chunk.
		if r.applied > 0 && r.observer != nil {
			r.observer.Reset(r.id, r.volume)
		}
		r.store.Reset()
		r.sessions.reset()
		r.snapshot = snapshotReceipt{sn: m.SnapshotSN}
		r.applied, r.committed, r.appliedEpoch, r.urgentTo = 0, 0, 0, 0
		r.durable = 0
		r.recent.reset()
		r.mode.SnapshotStarted()
	}
	if m.SnapshotSN != r.snapshot.sn || m.Seq != r.snapshot.nextSeq {
		// A chunk was lost: ask for a new transfer.
		r.syncWithPredecessor(now)
		return
	}
	r.snapshot.nextSeq++
	r.sessions.install(m.Sessions)
	for _, o := range m.Objects {
		r.store.Set(o.Key, kv.Object{Value: o.Value, Exists: !o.Deleted, Stamp: o.Stamp, Expires: o.Expires, Type: o.Type})
	}
	if !m.Last {
		return
	}
	r.snapshot.installed = true
	r.applied, r.committed, r.appliedEpoch = m.SnapshotSN, m.SnapshotSN, m.SnapshotEpoch
	r.split = m.Split // (where the history passed a split: the joiner reports it)
	r.mode.Installed(m)
	r.sent.reset()
	r.saveMeta()
	if r.observer != nil {
		r.observer.SnapshotInstalled(r.id, r.volume, from, m.SnapshotSN)
	}
	// Acknowledge even SN 0: the tail counts the joiner as installed on
	// its first acknowledgement.
	r.ackedUpstream = r.applied
	r.send(from, &wire.Ack{Volume: r.volume, Epoch: r.config.Epoch, SN: r.applied})
}
