// Package chain is the chain replication protocol of van Renesse and
// Schneider (OSDI'04, §3) as deterministic state machines: Replica holds
// one volume's replica on one server (head, middle, tail or joining
// server); Server hosts a server's replicas and keeps its lease with the
// master. Inputs are messages and ticks with the node's clock reading;
// outputs are the messages to send. Nothing here does I/O.
package chain

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Limits bounds every queue and batch of a replica, in one place.
type Limits struct {
	// SessionsMax is how many client sessions the exactly-once table keeps.
	SessionsMax int
	// OutcomesPerClientMax is how many unacknowledged updates one client
	// may have; their outcomes are kept until the client acknowledges them.
	OutcomesPerClientMax int
	// ForwardBatchMax is how many updates one Forward message carries.
	ForwardBatchMax int
	// SnapshotChunkObjectsMax is how many objects one SnapshotChunk carries.
	SnapshotChunkObjectsMax int
	// WaitersMax bounds the retried requests the head holds until their
	// update commits.
	WaitersMax int
	// SyncRetryInterval is how long a successor waits for a SyncReply
	// before asking again.
	SyncRetryInterval wire.Time
	// SentMax bounds the Sent list: the head refuses new updates
	// (ErrUnavailable) while its Sent list is this long, which pushes back
	// on clients when a successor is slow.
	SentMax int
	// HandoffLagMax: a tail pauses (applies nothing more) once its joining
	// server is this close behind, so the joiner catches up exactly.
	HandoffLagMax wire.SN
}

// DefaultLimits are the limits servers use unless configured otherwise.
var DefaultLimits = Limits{
	SessionsMax:             100_000,
	OutcomesPerClientMax:    1024,
	ForwardBatchMax:         256,
	SnapshotChunkObjectsMax: 512,
	WaitersMax:              10_000,
	SyncRetryInterval:       50 * wire.Millisecond,
	SentMax:                 100_000,
	HandoffLagMax:           64,
}

// Mutations deliberately break the protocol, so tests can show that the
// simulator's checkers catch each kind of bug. Servers never set them.
type Mutations struct {
	// HeadRepliesEarly: the head answers an update as soon as it applied
	// it, before the tail has processed it.
	HeadRepliesEarly bool
	// SkipResendOnSync: a predecessor does not resend its Sent list to a
	// new successor (CR §3 Fig. 3 without message 3).
	SkipResendOnSync bool
	// IgnoreLease: a server serves clients without a valid lease.
	IgnoreLease bool
	// NoHandoffPause: the tail keeps applying updates after reporting its
	// joining server ready, so the joiner may become the tail without
	// updates the old tail acknowledged.
	NoHandoffPause bool
	// AnswerDirtyReads: with ReadsCleanAtAnyMember, a member answers
	// queries on dirty keys too.
	AnswerDirtyReads bool
}

// Observer sees what a replica applies. The simulator uses it to check the
// Update Propagation invariant; servers pass nil.
type Observer interface {
	// Applied is called after the replica applied u.
	Applied(node wire.NodeID, volume wire.VolumeID, u *wire.Update)
	// SnapshotInstalled is called after a joining replica installed a
	// snapshot of from's state at sn.
	SnapshotInstalled(node wire.NodeID, volume wire.VolumeID, from wire.NodeID, sn wire.SN)
	// Reset is called when a replica drops its state.
	Reset(node wire.NodeID, volume wire.VolumeID)
}

// Replica is one server's replica of one volume.
//
// The chain's state, in the paper's terms: Hist is the sequence of applied
// updates 1..applied; Sent is the list of updates this replica forwarded (or
// will forward) to its successor that may not have been processed by the
// tail. CR §3's invariants, asserted by the simulator after every step:
//
//	Update Propagation: Hist_j is a prefix of Hist_i when i precedes j.
//	Inprocess Requests: Hist_i = Hist_tail ⊕ Sent_i.
type Replica struct {
	id        wire.NodeID
	volume    wire.VolumeID
	store     storage.Store
	limits    Limits
	observer  Observer
	mutations Mutations
	reads     ReadMode
	// firstStart is set in a server's first process ever: only then may
	// an empty replica accept a configuration naming it a member.
	firstStart bool

	// config is the configuration this replica adopted; Epoch 0: none.
	config wire.Config

	applied wire.SN
	// committed is the highest SN known to be processed by the tail.
	// INVARIANT: committed ≤ applied.
	committed wire.SN
	// sent holds updates with consecutive SNs ending at applied.
	// INVARIANT: sent is empty or sent[len-1].SN == applied.
	sent     []wire.Update
	sessions sessionTable
	// waiters are retried requests whose update is applied at the head but
	// not committed yet; they are answered when committed reaches the SN.
	waiters map[wire.SN][]waiter

	// Successor link (CR §3 Fig. 3). Nothing is forwarded until the
	// successor has reported, in this epoch, the last SN it has.
	successorSynced bool
	forwardedTo     wire.SN
	// joinerAcked is what the joining server acknowledged (tail only);
	// joinerHasAcked says it acknowledged anything since the last snapshot
	// was sent, which it does only once it installed one.
	joinerAcked        wire.SN
	joinerSnapshotSent bool
	joinerHasAcked     bool
	// ackedUpstream is the last SN acknowledged to the predecessor.
	ackedUpstream wire.SN

	// Predecessor link.
	predecessorSynced bool
	syncRequestedAt   wire.Time
	// handoffPaused is set on a tail whose joining server is nearly
	// caught up: it applies nothing more in this epoch, so the joiner can
	// catch up exactly and be made the tail holding everything this tail
	// applied (see JoinerReady).
	handoffPaused bool

	// Joining server: snapshot being received.
	snapshotInstalled bool
	snapshotSN        wire.SN
	snapshotNextSeq   int

	// wedged is set on a replica restored from disk until it adopts a
	// newer configuration: its Sent list and links are gone.
	wedged bool
	// protocolErrors holds messages from peers that contradicted the
	// protocol; they were dropped.
	protocolErrors []string

	out []wire.Envelope
}

// ReadMode says which members of a chain answer queries.
type ReadMode uint8

const (
	// ReadsAtTail: only the tail answers queries (CR §2), so every query
	// sees exactly the updates acknowledged so far: linearizable.
	ReadsAtTail ReadMode = iota
	// ReadsAtAnyReplica: every member answers queries from its own state
	// (CR §5.1's weak-chain). Not linearizable: a member ahead of the tail
	// returns updates not yet acknowledged, one behind returns old values.
	// It is a baseline for the experiments, not a mode to serve users.
	ReadsAtAnyReplica
	// ReadsCleanAtAnyMember: CRAQ's apportioned queries. Every member
	// answers a query on a clean key (every update to it this member
	// applied is known processed by the tail) from its own state, and
	// refuses one on a dirty key with ErrDirty, sending the client to the
	// tail. Linearizable: by Update Propagation the tail holds no update
	// this member lacks, so a clean key's value here is the tail's; any
	// update acknowledged to a client has passed every member, and is
	// dirty here until its acknowledgement comes back.
	ReadsCleanAtAnyMember
)

type waiter struct {
	replyTo wire.NodeID
	client  wire.ClientID
	reqNo   uint64
}

// ReplicaOptions configure a Replica.
type ReplicaOptions struct {
	ID        wire.NodeID
	Volume    wire.VolumeID
	Store     storage.Store
	Limits    Limits
	Observer  Observer
	Mutations Mutations
	// FirstStart: this is the server's first process (incarnation 1).
	FirstStart bool
	// Reads says which members answer queries; the zero value is the tail.
	Reads ReadMode
}

// NewReplica returns an empty replica that belongs to no configuration.
func NewReplica(o ReplicaOptions) *Replica {
	return &Replica{
		id:         o.ID,
		volume:     o.Volume,
		store:      o.Store,
		limits:     o.Limits,
		observer:   o.Observer,
		mutations:  o.Mutations,
		firstStart: o.FirstStart,
		reads:      o.Reads,
		sessions:   newSessionTable(o.Limits.SessionsMax, o.Limits.OutcomesPerClientMax, o.Store),
		waiters:    map[wire.SN][]waiter{},
	}
}

// RestoreReplica returns a replica with the state a previous process left
// in store, or nil if the store holds none. The replica is wedged: it
// takes part in nothing until the master sends it a newer configuration
// (the master removes a restarted server from every chain but the ones it
// is the last member of, and then re-adds it at the tail).
func RestoreReplica(o ReplicaOptions) *Replica {
	meta, ok := o.Store.Meta()
	if !ok {
		return nil
	}
	r := NewReplica(o)
	r.config = meta.Config.Clone()
	r.applied, r.committed = meta.Applied, meta.Applied
	r.snapshotInstalled = meta.SnapshotInstalled
	r.sessions.load(o.Store.Sessions())
	r.wedged = true
	return r
}

// Config returns the adopted configuration.
func (r *Replica) Config() wire.Config { return r.config }

// AppliedSN returns the SN of the last applied update.
func (r *Replica) AppliedSN() wire.SN { return r.applied }

// CommittedSN returns the highest SN known to be processed by the tail.
func (r *Replica) CommittedSN() wire.SN { return r.committed }

// Sent returns the SNs of the first and last update on the Sent list
// (0, 0 when it is empty).
func (r *Replica) Sent() (first, last wire.SN) {
	if len(r.sent) == 0 {
		return 0, 0
	}
	return r.sent[0].SN, r.sent[len(r.sent)-1].SN
}

// Wedged reports whether the replica was restored from disk and waits for
// the master's next configuration; it takes part in nothing until then.
func (r *Replica) Wedged() bool { return r.wedged }

// IsHead reports whether the replica is the head of its adopted configuration.
func (r *Replica) IsHead() bool { return r.config.Head() == r.id }

// IsTail reports whether the replica is the tail of its adopted configuration.
func (r *Replica) IsTail() bool { return r.config.Tail() == r.id }

// isJoiner reports whether the replica is the joining server.
func (r *Replica) isJoiner() bool { return r.config.Joining == r.id }

// JoinerReady reports whether this tail's joining server holds everything
// this tail has applied, which stays so because the tail is paused: the
// master may make the joiner the tail. Until this tail adopts that
// configuration both serve queries from the same state; afterwards the
// old tail serves none. So the new tail never lacks an update the old one
// acknowledged or let a query see (pitfall 4), and any member remains a
// safe survivor of a total outage.
func (r *Replica) JoinerReady() bool {
	if !r.IsTail() || r.config.Joining == "" || !r.joinerSnapshotSent || !r.joinerHasAcked {
		return false
	}
	if r.mutations.NoHandoffPause {
		return r.applied-r.joinerAcked <= r.limits.HandoffLagMax
	}
	return r.handoffPaused && r.joinerAcked == r.applied
}

func (r *Replica) send(to wire.NodeID, m wire.Message) {
	r.out = append(r.out, wire.Envelope{To: to, Msg: m})
}

func (r *Replica) flush() []wire.Envelope {
	out := r.out
	r.out = nil
	return out
}

// Adopt installs a newer configuration. Configurations at or below the
// adopted epoch are ignored.
func (r *Replica) Adopt(now wire.Time, c wire.Config) []wire.Envelope {
	if c.Epoch <= r.config.Epoch || c.Volume != r.volume {
		return nil
	}
	wasTail := r.IsTail()
	wasMember := r.config.Index(r.id) >= 0
	hasState := wasMember || (r.isJoiner() && r.snapshotInstalled)
	if !hasState && c.Index(r.id) >= 0 && !r.firstStart && !c.Fresh {
		// An empty replica becomes a member only in the server's first
		// process: membership is gained only at bootstrap or through a
		// snapshot, so a first process named a member has been one since
		// epoch 1, and nothing committed without it. Otherwise this is a
		// server that restarted empty before the master noticed; it must
		// join at the tail, and the master removes it. A Fresh
		// configuration says the volume is empty everywhere.
		return nil
	}
	if r.wedged && c.Index(r.id) >= 0 && len(c.Chain) > 1 {
		// Restored from disk, and the master has not yet handled this
		// restart: it will remove this server, or keep it as the chain's
		// only member. Until then take part in nothing.
		r.config = c.Clone()
		r.saveMeta()
		return nil
	}
	joinerAcked := r.joinerAcked
	r.config = c.Clone()
	r.wedged = false
	r.joinerAcked, r.joinerSnapshotSent, r.joinerHasAcked = 0, false, false

	switch {
	case !c.Contains(r.id):
		// Removed: drop everything. A server that comes back joins at the
		// tail with a snapshot, like a new one.
		r.resetState()
		return r.flush()
	case r.isJoiner():
		// Every epoch that names a joining server is a new attempt to add
		// it (the master aborts an extension on any other change): start
		// from nothing.
		r.resetState()
	}

	r.successorSynced = false
	r.predecessorSynced = false
	r.handoffPaused = false
	if r.IsTail() && !wasTail {
		r.becomeTail()
	}
	if wasTail && !r.IsTail() {
		// The joining server became the tail; what it has not acknowledged
		// is not processed by the tail any more.
		r.committed = min(r.committed, joinerAcked)
	}
	r.trimSent()
	if !r.IsHead() {
		clear(r.waiters)
	}
	if r.config.Predecessor(r.id) != "" {
		r.requestSync(now)
	}
	r.saveMeta()
	return r.flush()
}

func (r *Replica) saveMeta() {
	r.store.SetMeta(storage.Meta{Config: r.config, Applied: r.applied, SnapshotInstalled: r.snapshotInstalled})
}

func (r *Replica) resetState() {
	r.store.Reset()
	r.sessions.reset()
	r.applied, r.committed, r.ackedUpstream = 0, 0, 0
	r.sent = nil
	clear(r.waiters)
	r.snapshotInstalled, r.snapshotSN, r.snapshotNextSeq = false, 0, 0
	if r.observer != nil {
		r.observer.Reset(r.id, r.volume)
	}
}

// becomeTail: every update this replica applied is now processed by the
// tail (CR §3 "Failure of the Tail"). The old tail may not have replied to
// all of them, so this replica replies again; clients ignore duplicates.
func (r *Replica) becomeTail() {
	for i := range r.sent {
		u := &r.sent[i]
		if u.SN > r.committed && u.ReplyTo != "" {
			r.replyUpdate(u)
		}
	}
	r.committed = r.applied
	r.trimSent()
	r.answerWaiters()
}

func (r *Replica) requestSync(now wire.Time) {
	r.syncRequestedAt = now
	r.send(r.config.Predecessor(r.id), &wire.SyncRequest{
		Volume:       r.volume,
		Epoch:        r.config.Epoch,
		AppliedSN:    r.applied,
		CommittedSN:  r.committed,
		NeedSnapshot: r.isJoiner() && !r.snapshotInstalled,
	})
}

// Tick repeats an unanswered SyncRequest.
func (r *Replica) Tick(now wire.Time) []wire.Envelope {
	if r.wedged {
		return nil
	}
	if r.config.Predecessor(r.id) != "" && !r.predecessorSynced && now-r.syncRequestedAt >= r.limits.SyncRetryInterval {
		r.requestSync(now)
	}
	return r.flush()
}

// Step handles one message from another node. Messages of another epoch,
// or from a node that is not this replica's neighbour, are dropped: the
// sender learns the configuration from the master.
func (r *Replica) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	if r.wedged {
		if req, ok := m.(*wire.ClientRequest); ok {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		}
		return r.flush()
	}
	switch m := m.(type) {
	case *wire.ClientRequest:
		r.handleClientRequest(from, m)
	case *wire.Forward:
		if m.Epoch == r.config.Epoch && from == r.config.Predecessor(r.id) && r.predecessorSynced &&
			(r.snapshotInstalled || !r.isJoiner()) {
			r.handleForward(now, m)
		}
	case *wire.Ack:
		if m.Epoch == r.config.Epoch && from == r.config.Successor(r.id) {
			r.handleAck(m.SN)
		}
	case *wire.SyncRequest:
		if m.Epoch == r.config.Epoch && from == r.config.Successor(r.id) {
			r.handleSyncRequest(m)
		}
	case *wire.SyncReply:
		if m.Epoch == r.config.Epoch && from == r.config.Predecessor(r.id) {
			if m.PredecessorAppliedSN < r.applied && !r.isJoiner() {
				r.protocolError("update propagation: predecessor %s applied %d, %s applied %d", from, m.PredecessorAppliedSN, r.id, r.applied)
				break
			}
			r.predecessorSynced = true
		}
	case *wire.SnapshotChunk:
		if m.Epoch == r.config.Epoch && from == r.config.Predecessor(r.id) && r.isJoiner() {
			r.handleSnapshotChunk(now, from, m)
		}
	case *wire.PeerReset:
		if m.Peer == r.config.Predecessor(r.id) {
			r.predecessorSynced = false
			r.requestSync(now)
		}
		if m.Peer == r.config.Successor(r.id) {
			r.successorSynced = false
		}
	}
	return r.flush()
}

func (r *Replica) reply(to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result) {
	rep := &wire.ClientReply{Volume: r.volume, Client: req.Client, ReqNo: req.ReqNo, Err: code, Result: result}
	if code == wire.ErrWrongEpoch && r.config.Epoch > req.Epoch {
		c := r.config.Clone()
		rep.Config = &c
	}
	r.send(to, rep)
}

func (r *Replica) replyUpdate(u *wire.Update) {
	r.send(u.ReplyTo, &wire.ClientReply{Volume: r.volume, Client: u.Client, ReqNo: u.ReqNo, Result: u.Result})
}

func (r *Replica) handleClientRequest(from wire.NodeID, req *wire.ClientRequest) {
	if err := kv.Validate(req.Op); err != nil {
		r.reply(from, req, wire.ErrBadRequest, wire.Result{})
		return
	}
	if req.Epoch != r.config.Epoch {
		r.reply(from, req, wire.ErrWrongEpoch, wire.Result{})
		return
	}
	if req.Op.Kind.IsQuery() {
		member := r.config.Index(r.id) >= 0
		switch {
		case r.IsTail(), member && r.reads == ReadsAtAnyReplica:
		case member && r.reads == ReadsCleanAtAnyMember:
			if r.dirty(req.Op.Key) && !r.mutations.AnswerDirtyReads {
				r.reply(from, req, wire.ErrDirty, wire.Result{})
				return
			}
		default:
			r.reply(from, req, wire.ErrNotTail, wire.Result{})
			return
		}
		result := kv.Read(req.Op, r.store.Get(req.Op.Key))
		result.SN = r.applied
		r.reply(from, req, wire.ErrNone, result)
		return
	}
	if !r.IsHead() {
		r.reply(from, req, wire.ErrNotHead, wire.Result{})
		return
	}
	if len(r.sent) >= r.limits.SentMax || r.handoffPaused {
		// Backpressure: the chain is this far behind, or a hand-off is
		// under way; the client retries.
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	switch verdict, result := r.sessions.admit(req); verdict {
	case admitExpired:
		r.reply(from, req, wire.ErrSessionExpired, wire.Result{})
	case admitTooMany:
		r.reply(from, req, wire.ErrTooManyInFlight, wire.Result{})
	case admitRecorded:
		if result.SN <= r.committed {
			r.reply(from, req, wire.ErrNone, result)
			return
		}
		if len(r.waiters) >= r.limits.WaitersMax {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
			return
		}
		r.waiters[result.SN] = append(r.waiters[result.SN], waiter{replyTo: from, client: req.Client, reqNo: req.ReqNo})
	case admitNew:
		r.sequence(from, req)
	}
}

// dirty reports whether this member applied an update to key that it
// does not know the tail processed. Such updates are on Sent: a member's
// Sent holds every update after committed (INVARIANT Sent).
func (r *Replica) dirty(key string) bool {
	for i := len(r.sent) - 1; i >= 0 && r.sent[i].SN > r.committed; i-- {
		if r.sent[i].Key == key {
			return true
		}
	}
	return false
}

// sequence is the head's update processing (CR §3): compute the update's
// effect once, assign the next SN, apply it and pass it down the chain.
func (r *Replica) sequence(from wire.NodeID, req *wire.ClientRequest) {
	sn := r.applied + 1
	next, changed, result := kv.Apply(req.Op, r.store.Get(req.Op.Key))
	result.SN = sn
	u := wire.Update{
		SN: sn, Key: req.Op.Key, Changed: changed, Deleted: changed && !next.Exists, Value: next.Value,
		Client: req.Client, ReqNo: req.ReqNo, AckedBelow: req.AckedBelow, ReplyTo: from, Result: result,
	}
	r.apply(&u)
	if r.mutations.HeadRepliesEarly && !r.IsTail() {
		r.replyUpdate(&u)
	}
	r.afterApply()
}

// apply stores one update in SN order and records its outcome.
func (r *Replica) apply(u *wire.Update) {
	if u.SN != r.applied+1 {
		panic(fmt.Sprintf("INVARIANT apply order: %s applying SN %d after %d", r.id, u.SN, r.applied))
	}
	if u.Changed {
		r.store.Set(u.Key, kv.Object{Value: u.Value, Exists: !u.Deleted})
	}
	r.sessions.record(u)
	r.applied = u.SN
	r.saveMeta()
	if r.observer != nil {
		r.observer.Applied(r.id, r.volume, u)
	}
	switch {
	case r.IsTail():
		// The tail processes the update: reply and acknowledge. With a
		// joining server it also keeps the update for it.
		r.committed = u.SN
		r.replyUpdate(u)
		if r.config.Joining != "" {
			r.sent = append(r.sent, *u)
		}
	case r.isJoiner():
		// A joining server is the end of the line; it acknowledges what it
		// has to the tail.
	default:
		r.sent = append(r.sent, *u)
	}
}

// afterApply forwards and acknowledges what the last step applied.
func (r *Replica) afterApply() {
	r.forward()
	r.answerWaiters()
	r.ackUpstream()
}

// forward sends the successor the updates on Sent it does not have yet.
func (r *Replica) forward() {
	succ := r.config.Successor(r.id)
	if succ == "" || !r.successorSynced {
		return
	}
	i := 0
	for i < len(r.sent) && r.sent[i].SN <= r.forwardedTo {
		i++
	}
	for i < len(r.sent) {
		j := min(i+r.limits.ForwardBatchMax, len(r.sent))
		batch := make([]wire.Update, j-i)
		copy(batch, r.sent[i:j])
		r.send(succ, &wire.Forward{Volume: r.volume, Epoch: r.config.Epoch, Updates: batch})
		r.forwardedTo = batch[len(batch)-1].SN
		i = j
	}
}

// ackUpstream tells the predecessor how far the tail has processed (a
// joining server: how far it has applied).
func (r *Replica) ackUpstream() {
	pred := r.config.Predecessor(r.id)
	if pred == "" {
		return
	}
	sn := r.committed
	if r.isJoiner() {
		sn = r.applied
	}
	if sn <= r.ackedUpstream {
		return
	}
	r.ackedUpstream = sn
	r.send(pred, &wire.Ack{Volume: r.volume, Epoch: r.config.Epoch, SN: sn})
}

func (r *Replica) handleForward(now wire.Time, m *wire.Forward) {
	if r.handoffPaused {
		// The predecessor resends these once the hand-off's epoch starts.
		return
	}
	for i := range m.Updates {
		u := &m.Updates[i]
		if u.SN <= r.applied {
			continue // resent after a re-synchronisation
		}
		if u.SN != r.applied+1 {
			// A gap: messages were lost on a link that broke. Start over.
			r.predecessorSynced = false
			r.requestSync(now)
			break
		}
		r.apply(u)
	}
	r.afterApply()
}

func (r *Replica) handleAck(sn wire.SN) {
	if r.IsTail() {
		// From the joining server.
		if sn > r.applied {
			r.protocolError("joiner acknowledged %d beyond tail %s applied %d", sn, r.id, r.applied)
			return
		}
		r.joinerAcked = max(r.joinerAcked, sn)
		r.joinerHasAcked = true
		if r.applied-r.joinerAcked <= r.limits.HandoffLagMax && !r.mutations.NoHandoffPause {
			r.handoffPaused = true
		}
		r.trimSent()
		r.ackUpstream()
		return
	}
	if sn > r.applied {
		r.protocolError("successor acknowledged %d beyond %s applied %d", sn, r.id, r.applied)
		return
	}
	if sn <= r.committed {
		return
	}
	r.committed = sn
	r.trimSent()
	r.answerWaiters()
	r.ackUpstream()
}

// trimSent drops from Sent what the successor no longer needs.
func (r *Replica) trimSent() {
	upTo := r.committed
	if r.IsTail() {
		upTo = r.applied
		if r.config.Joining != "" {
			upTo = r.joinerAcked
		}
	}
	i := 0
	for i < len(r.sent) && r.sent[i].SN <= upTo {
		i++
	}
	if i > 0 {
		r.sent = append(r.sent[:0:0], r.sent[i:]...)
	}
}

func (r *Replica) answerWaiters() {
	for _, sn := range slices.Sorted(maps.Keys(r.waiters)) {
		if sn > r.committed {
			break
		}
		for _, w := range r.waiters[sn] {
			if s := r.sessions.sessions[w.client]; s != nil {
				if result, ok := s.outcomes[w.reqNo]; ok {
					r.send(w.replyTo, &wire.ClientReply{Volume: r.volume, Client: w.client, ReqNo: w.reqNo, Result: result})
				}
			}
		}
		delete(r.waiters, sn)
	}
}

// handleSyncRequest is the predecessor's side of CR §3 Fig. 3: the
// successor reported the last SN it has; resend the rest of Sent.
func (r *Replica) handleSyncRequest(m *wire.SyncRequest) {
	succ := r.config.Successor(r.id)
	if m.NeedSnapshot {
		if succ != r.config.Joining {
			return
		}
		r.sendSnapshot(succ)
		return
	}
	if m.AppliedSN > r.applied {
		r.protocolError("update propagation: successor %s has %d, beyond predecessor %s at %d", succ, m.AppliedSN, r.id, r.applied)
		return
	}
	if len(r.sent) > 0 && m.AppliedSN+1 < r.sent[0].SN || len(r.sent) == 0 && m.AppliedSN < r.applied {
		r.protocolError("inprocess requests: successor %s needs SN %d, %s's Sent starts at %d (applied %d)",
			succ, m.AppliedSN+1, r.id, firstSN(r.sent), r.applied)
		return
	}
	r.successorSynced = true
	r.forwardedTo = m.AppliedSN
	if r.mutations.SkipResendOnSync {
		r.forwardedTo = r.applied
	}
	r.send(succ, &wire.SyncReply{Volume: r.volume, Epoch: r.config.Epoch, PredecessorAppliedSN: r.applied})
	if succ == r.config.Joining {
		r.joinerAcked = max(r.joinerAcked, m.AppliedSN)
		r.trimSent()
	} else if m.CommittedSN > r.committed {
		r.committed = m.CommittedSN
		r.trimSent()
		r.answerWaiters()
	}
	r.forward()
	r.ackUpstream()
}

func firstSN(sent []wire.Update) wire.SN {
	if len(sent) == 0 {
		return 0
	}
	return sent[0].SN
}

// sendSnapshot starts a state transfer to the joining server: a copy of
// the store and the session table at applied, then (on the same FIFO link)
// every later update from Sent.
func (r *Replica) sendSnapshot(joiner wire.NodeID) {
	sn := r.applied
	r.joinerSnapshotSent = true
	r.joinerHasAcked = false
	r.joinerAcked = 0
	r.send(joiner, &wire.SyncReply{Volume: r.volume, Epoch: r.config.Epoch, PredecessorAppliedSN: sn})
	objects := r.store.Snapshot()
	seq := 0
	chunk := &wire.SnapshotChunk{Volume: r.volume, Epoch: r.config.Epoch, SnapshotSN: sn, Seq: seq, Sessions: r.sessions.export()}
	for _, o := range objects {
		if len(chunk.Objects) == r.limits.SnapshotChunkObjectsMax {
			r.send(joiner, chunk)
			seq++
			chunk = &wire.SnapshotChunk{Volume: r.volume, Epoch: r.config.Epoch, SnapshotSN: sn, Seq: seq}
		}
		chunk.Objects = append(chunk.Objects, wire.KeyValue{Key: o.Key, Value: o.Object.Value})
	}
	chunk.Last = true
	r.send(joiner, chunk)
	// Updates up to sn are in the snapshot; the ones after it follow.
	r.successorSynced = true
	r.forwardedTo = sn
	i := 0
	for i < len(r.sent) && r.sent[i].SN <= sn {
		i++
	}
	r.sent = append(r.sent[:0:0], r.sent[i:]...)
	r.forward()
}

func (r *Replica) handleSnapshotChunk(now wire.Time, from wire.NodeID, m *wire.SnapshotChunk) {
	if r.snapshotInstalled {
		// A second transfer answering a repeated SyncRequest. This replica
		// already has everything up to it: the FIFO link delivered the
		// updates that followed the first snapshot before this one.
		return
	}
	if m.Seq == 0 {
		r.store.Reset()
		r.sessions.reset()
		r.snapshotInstalled = false
		r.snapshotSN = m.SnapshotSN
		r.snapshotNextSeq = 0
	}
	if m.SnapshotSN != r.snapshotSN || m.Seq != r.snapshotNextSeq {
		// A chunk was lost: ask for the transfer again.
		r.predecessorSynced = false
		r.requestSync(now)
		return
	}
	r.snapshotNextSeq++
	r.sessions.install(m.Sessions)
	for _, o := range m.Objects {
		r.store.Set(o.Key, kv.Object{Value: o.Value, Exists: true})
	}
	if !m.Last {
		return
	}
	r.snapshotInstalled = true
	r.applied, r.committed = m.SnapshotSN, m.SnapshotSN
	r.sent = nil
	r.saveMeta()
	if r.observer != nil {
		r.observer.SnapshotInstalled(r.id, r.volume, from, m.SnapshotSN)
	}
	// Acknowledge even SN 0: the tail counts the joiner as installed on
	// its first acknowledgement.
	r.ackedUpstream = r.applied
	r.send(from, &wire.Ack{Volume: r.volume, Epoch: r.config.Epoch, SN: r.applied})
}

// Status reports the replica's state for heartbeats.
func (r *Replica) Status() wire.VolumeStatus {
	return wire.VolumeStatus{
		Volume: r.volume, Epoch: r.config.Epoch, AppliedSN: r.applied, CommittedSN: r.committed,
		JoinerReady: r.JoinerReady(),
	}
}

// protocolError records a message from a peer that contradicts the
// protocol. The message is dropped; the peer's retries or the master's
// next configuration repair the link. The simulator fails a run on any.
func (r *Replica) protocolError(format string, args ...any) {
	if len(r.protocolErrors) < 16 {
		r.protocolErrors = append(r.protocolErrors, fmt.Sprintf(format, args...))
	}
}

// ProtocolErrors returns and clears the recorded protocol errors.
func (r *Replica) ProtocolErrors() []string {
	errs := r.protocolErrors
	r.protocolErrors = nil
	return errs
}

// CheckInvariants verifies the replica's local invariants; the simulator
// calls it after every step.
func (r *Replica) CheckInvariants() error {
	var errs []error
	for _, e := range r.protocolErrors {
		errs = append(errs, errors.New("protocol error: "+e))
	}
	if r.committed > r.applied {
		errs = append(errs, fmt.Errorf("%s: committed %d > applied %d", r.id, r.committed, r.applied))
	}
	for i := range r.sent {
		if i > 0 && r.sent[i].SN != r.sent[i-1].SN+1 {
			errs = append(errs, fmt.Errorf("%s: Sent not contiguous at SN %d", r.id, r.sent[i].SN))
			break
		}
	}
	if n := len(r.sent); n > 0 && r.sent[n-1].SN != r.applied {
		errs = append(errs, fmt.Errorf("%s: Sent ends at %d, applied %d", r.id, r.sent[n-1].SN, r.applied))
	}
	if r.IsTail() && r.config.Joining == "" && len(r.sent) > 0 {
		errs = append(errs, fmt.Errorf("%s: tail without joiner holds %d updates on Sent", r.id, len(r.sent)))
	}
	return errors.Join(errs...)
}
