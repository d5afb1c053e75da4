// Package chain is the chain replication protocol of van Renesse and
// Schneider (OSDI'04, §3) as deterministic state machines: Replica holds
// one volume's replica on one server (head, middle, tail or joining
// server); Server hosts a server's replicas and keeps its lease with the
// master. Inputs are messages and ticks with the node's clock reading;
// outputs are the messages to send. Nothing here does I/O.
//
// This package is the core every keyspace mode shares. A volume's mode is
// a strategy the core calls at fixed points (mode.go): strong chains are
// the core's own; ChainReaction's causal+ is internal/chain/causal, its
// shipping between sites internal/chain/sites, the NFSv4 paper's
// hierarchical control internal/chain/hierarchical, and
// internal/chain/modes makes each (docs/adr/0021-modes-as-strategies.md).
package chain

import (
	"fmt"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

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
	// CaughtUp is called when a joining replica keeps its state at sn
	// as a prefix of from's history, and from sends it the updates after
	// it instead of a snapshot (catchup.go).
	CaughtUp(node wire.NodeID, volume wire.VolumeID, from wire.NodeID, sn wire.SN)
	// Seeded is called when a member of volume parent split and seeded
	// its sibling's replica on the same node with its state at sn
	// (split.go).
	Seeded(node wire.NodeID, volume, parent wire.VolumeID, sn wire.SN)
}

// Replica is one server's replica of one volume: CR §3's core, which
// runs its keyspace's mode through Mode (mode.go).
//
// The chain's state, in the paper's terms: Hist is the sequence of applied
// updates 1..applied; Sent is the list of updates this replica forwarded (or
// will forward) to its successor that may not have been processed by the
// tail. CR §3's invariants, asserted by the simulator after every step:
//
//	Update Propagation: Hist_j is a prefix of Hist_i when i precedes j.
//	Inprocess Requests: Hist_i = Hist_tail ⊕ Sent_i.
//
// The code follows the paper's parts, a file each: updates.go (Update
// Processing and Propagation: sequencing at the head, apply, forward,
// acknowledge), sent.go (the Sent list), sync.go (a new successor after a
// failure, Fig. 3), extension.go (Extending a Chain: the snapshot, the
// joiner, the hand-off), reads.go (Query Processing, and CRAQ's reads at
// any member), reconfiguration.go (adopting the master's configurations:
// failure of the head, of the tail, removal), roles.go (a replica's role
// and phase, and the transitions between them), session.go (exactly-once
// updates), durable.go (pipelined durability), catchup.go (a returning
// server receives only what it missed), rolemove.go (role balance),
// invariants.go (local invariants and protocol errors), mode.go and
// core.go (the seam to the modes).
type Replica struct {
	id        wire.NodeID
	volume    wire.VolumeID
	store     storage.Store
	limits    Limits
	observer  Observer
	mutations Mutations
	reads     ReadMode
	// sites is the server's view of the sites (geo volumes; nil in
	// deployments of one site).
	sites SiteView
	// modes makes the replica's mode when it first adopts or restores a
	// configuration; mode is the one made, modeOf the configuration
	// mode it was made for, traits what it fixes for the adopted
	// configuration (setConfig), core its handle on this replica.
	modes  Modes
	mode   Mode
	modeOf wire.Mode
	traits Traits
	core   Core
	// shipping and versions are the mode's, if it ships between sites
	// or stamps its updates (for the server, the metrics and checkers).
	shipping Shipper
	versions interface{ Vector() wire.Vector }
	// firstStart is set in a server's first process ever: only then may
	// an empty replica accept a configuration naming it a member.
	firstStart bool

	// config is the configuration this replica adopted; Epoch 0: none.
	// role, predecessor and successor follow from it; setConfig, the only
	// place config changes, derives them.
	config      wire.Config
	role        role
	predecessor wire.NodeID
	successor   wire.NodeID
	// phase is what the replica may do in its role (see roles.go).
	phase phase

	applied wire.SN
	// appliedEpoch is the epoch that sequenced the update at applied (0:
	// unknown, or none applied): with applied it names this replica's
	// history (catchup.go).
	appliedEpoch wire.Epoch
	// committed is the highest SN known to be processed by the tail.
	// INVARIANT: committed ≤ applied.
	committed wire.SN
	// commitsLag: the environment commits this replica's storage writes
	// after its steps and says so with Committed (durable.go).
	commitsLag bool
	// durable is the SN this replica had applied when its last commit
	// began; upstreamDurable is the predecessor's last report in this
	// epoch, reportedDurable this replica's last report to its successor
	// (durable.go).
	durable, upstreamDurable, reportedDurable wire.SN
	// upstreamApplied is the SN the predecessor had applied when it
	// answered this epoch's SyncRequest: updates up to it are on their
	// way (catchup.go, awaitsCatchUpBase).
	upstreamApplied wire.SN
	// reportedAt is when this replica last reported to its successor.
	reportedAt wire.Time
	// parkedReads are, at a pipelined tail, queries on keys with updates
	// not yet on every member's disk (durable.go).
	parkedReads []parkedRead
	// catchUpTo is the SN from which this member holds every update the
	// chain answered (complete; Mode.Completeness).
	catchUpTo wire.SN
	// sent holds updates with consecutive SNs ending at applied.
	// INVARIANT Sent: sent is empty or its last SN is applied; at the head
	// and middle members it holds every update after committed.
	sent sentList
	// recent is the catch-up log: the last updates applied, consecutive
	// and ending at applied (catchup.go).
	recent   sentList
	sessions sessionTable
	// waiters are retried requests whose update is applied at the head but
	// not committed yet; they are answered when committed reaches the SN.
	waiters map[wire.SN][]waiter

	// The link to the successor, this replica as S- of CR §3 Fig. 3:
	// nothing is forwarded until the successor has reported, in this
	// epoch, the last SN it has; then Sent is forwarded after forwardedTo.
	downstream  successorLink
	forwardedTo wire.SN
	// urgentTo is the SN of the last applied update the mode calls
	// urgent (Mode.Urgent): the lazy phase forwards through it at once.
	urgentTo wire.SN
	// progressAt is when the link to the successor last made progress
	// (sync.go, StalledFor): the epoch began, Sent became non-empty, or an
	// acknowledgement advanced committed.
	progressAt wire.Time
	// The link from the predecessor, this replica as S+.
	upstream        predecessorLink
	syncRequestedAt wire.Time
	// upstreamHeardAt is, at a joining server, when its predecessor last
	// sent it anything (joinerStreamQuiet).
	upstreamHeardAt wire.Time
	// transfer is, at a joining server, the state transfer it asks for.
	transfer transferRequest
	// ackedUpstream is the last SN acknowledged to the predecessor.
	ackedUpstream wire.SN

	// joiner is, at a tail with a joining server, the joiner's progress
	// (CR §3 "Extending a Chain").
	joiner joinerProgress
	// snapshot is, at the joining server, the tail's snapshot it receives.
	snapshot snapshotReceipt

	// protocolErrors holds messages from peers that contradicted the
	// protocol; they were dropped.
	protocolErrors []string

	// out collects what the current input produces.
	out Output
	// listedHeldBack: the server lists this replica for its next Idle
	// (Server.heldBack).
	listedHeldBack bool

	// now is the clock reading of the input being handled.
	now wire.Time
	// clock is the server's cluster version and clock check, which
	// decide whether deadlines may be used (expiry.go; nil: always).
	clock *serverClock
	// exports are, at the chain's answerer, the exports of the volume
	// being read, by id (export.go).
	exports map[int64]*heldExport
	// metaScratch is saveMeta's (a local escapes: the mode's method
	// takes its address).
	metaScratch storage.Meta
	// split is where this replica split in its volume's latest split
	// (split.go); seeded says the replica is a split's seed that has
	// adopted no configuration yet; siblingStore opens another volume's
	// store on this server, for the seed.
	split        wire.SplitPoint
	seeded       bool
	siblingStore func(wire.VolumeID) storage.Store
	// seedMade tells the server that this replica seeded a volume
	// (Server.takeSeed); nil: nobody to tell.
	seedMade func(wire.VolumeID)
	// watches are the watches this member holds (watch.go), and
	// watchedTo the revision they were last extended to.
	watches   []heldWatch
	watchedTo wire.SN
}

// Output is what a replica produced for one input.
type Output struct {
	// Messages are to be sent, in order.
	Messages []wire.Envelope
	// JoinerReady is set, once per epoch, by the step that made this
	// tail's joining server ready (see Replica.JoinerReady): the server
	// tells the master at once instead of at its next heartbeat, since
	// the tail is paused until the master makes the joiner the tail.
	JoinerReady bool
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
	// Incarnation is the server process's incarnation: it names the state
	// transfers this replica asks for (wire.TransferID).
	Incarnation uint64
	// Reads says which members answer queries; the zero value is the tail.
	Reads ReadMode
	// Sites is the server's view of the sites, for geo volumes.
	Sites SiteView
	// Modes makes the replica's mode from its configuration (nil:
	// StrongOnly).
	Modes Modes
	// CommitsLag: storage writes become durable only at the commit after
	// a step, which the environment reports with Committed; the replica
	// then forwards before its own commit (durable.go). False: every
	// step's writes are durable when it returns.
	CommitsLag bool
	// clock is the server's (expiry.go); nil: deadlines always usable.
	clock *serverClock
	// SiblingStore opens another volume's store on this server: where a
	// split seeds the sibling's replica (split.go). Nil: the replica
	// may not split (a configuration with a Split panics).
	SiblingStore func(wire.VolumeID) storage.Store
	// seedMade is called after the replica seeded volume v's replica on
	// this server (Server.takeSeed).
	seedMade func(v wire.VolumeID)
}

// NewReplica returns an empty replica that belongs to no configuration.
func NewReplica(o ReplicaOptions) *Replica {
	if o.Modes == nil {
		o.Modes = StrongOnly
	}
	r := &Replica{
		id:           o.ID,
		volume:       o.Volume,
		store:        o.Store,
		limits:       o.Limits,
		observer:     o.Observer,
		mutations:    o.Mutations,
		firstStart:   o.FirstStart,
		transfer:     transferRequest{incarnation: o.Incarnation},
		reads:        o.Reads,
		sites:        o.Sites,
		modes:        o.Modes,
		commitsLag:   o.CommitsLag,
		clock:        o.clock,
		siblingStore: o.SiblingStore,
		seedMade:     o.seedMade,
		catchUpTo:    storage.NeverCaughtUp,
		sent:         newSentList(),
		recent:       newCatchUpLog(),
		sessions:     newSessionTable(o.Limits.SessionsMax, o.Limits.OutcomesPerClientMax, o.Store),
		waiters:      map[wire.SN][]waiter{},
	}
	r.core.r = r
	return r
}

// makeMode makes, if the replica has none yet, the mode of the volume
// whose configuration is c. A configuration of another mode than the
// one made is refused (a volume's mode never changes).
func (r *Replica) makeMode(c wire.Config) error {
	if r.mode != nil {
		if c.Mode != r.modeOf {
			return fmt.Errorf("volume %d is %s, not %s", r.volume, r.modeOf, c.Mode)
		}
		return nil
	}
	m, err := r.modes(&r.core, c)
	if err != nil {
		return err
	}
	r.mode, r.modeOf = m, c.Mode
	if s, ok := m.(interface{ Shipper() Shipper }); ok {
		r.shipping = s.Shipper()
	}
	if v, ok := m.(interface{ Vector() wire.Vector }); ok {
		r.versions = v
	}
	return nil
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
	if err := r.makeMode(meta.Config); err != nil {
		// (This server cannot run the volume: a server of several
		// sites started without its site. It holds nothing of it;
		// its data stays on disk.)
		return nil
	}
	r.setConfig(meta.Config)
	r.applied, r.committed, r.appliedEpoch = meta.Applied, meta.Applied, meta.AppliedEpoch
	r.durable = meta.Applied
	r.snapshot.installed = meta.SnapshotInstalled
	r.catchUpTo = meta.CatchUpTo
	r.split, r.seeded = meta.Split, meta.Seeded
	r.sessions.load(o.Store.Sessions())
	r.mode.Restore(meta)
	r.becomeWedged()
	return r
}

// Mode returns the replica's mode (nil before it adopted a
// configuration).
func (r *Replica) Mode() Mode { return r.mode }

// Vector returns the applied updates per origin site (nil unless the
// volume's updates are stamped).
func (r *Replica) Vector() wire.Vector {
	if r.versions == nil {
		return nil
	}
	return r.versions.Vector()
}

// Object returns the replica's copy of key, for checkers.
func (r *Replica) Object(key string) kv.Object { return r.store.Get(key) }

// Store returns the replica's storage, for checkers and tests.
func (r *Replica) Store() storage.Store { return r.store }

// ShippingLag returns, at the tail of a geo volume, how many of this
// site's updates each other site does not hold stable yet, one entry per
// other site in site order (zeros included); nil at other members.
func (r *Replica) ShippingLag() []wire.SiteCount {
	if r.shipping == nil {
		return nil
	}
	return r.shipping.ShippingLag()
}

// ShippingAge returns, at the tail of a geo volume, how long ago the
// oldest of this site's updates each other site does not hold stable yet
// was written, one entry per other site in site order; nil at other
// members.
func (r *Replica) ShippingAge(now wire.Time) []wire.SiteTime {
	if r.shipping == nil {
		return nil
	}
	return r.shipping.ShippingAge(now)
}

// HasInbound reports whether a geo head holds updates of other sites.
func (r *Replica) HasInbound() bool { return r.shipping != nil && r.shipping.HasInbound() }

// GeoProgress sequences, at a geo volume's head, the queued updates of
// other sites whose dependencies became stable (the server calls it when
// its table of stable updates grew).
func (r *Replica) GeoProgress() []wire.Envelope {
	if r.phase == phaseWedged || r.shipping == nil {
		return nil
	}
	r.shipping.SequenceInbound()
	return r.flush().Messages
}

// stableCount returns how many of site's updates this member knows are
// stable, and whether the volume ships between sites at all.
func (r *Replica) stableCount(site wire.SiteID) (uint64, bool) {
	if r.shipping == nil {
		return 0, false
	}
	return r.shipping.StableCount(site), true
}

// Config returns the adopted configuration.
func (r *Replica) Config() wire.Config { return r.config }

// AppliedSN returns the SN of the last applied update.
func (r *Replica) AppliedSN() wire.SN { return r.applied }

// CommittedSN returns the highest SN known to be processed by the tail.
func (r *Replica) CommittedSN() wire.SN { return r.committed }

// Sent returns the SNs of the first and last update on the Sent list
// (0, 0 when it is empty).
func (r *Replica) Sent() (first, last wire.SN) { return r.sent.firstSN(), r.sent.lastSN() }

// Wedged reports whether the replica was restored from disk and waits for
// the master's next configuration; it takes part in nothing until then.
func (r *Replica) Wedged() bool { return r.phase == phaseWedged }

// Installed reports whether a joining server holds a whole snapshot or
// was caught up (catchup.go): before that, what it holds, such as the
// state it kept from before a restart, is no part of the chain.
func (r *Replica) Installed() bool { return r.snapshot.installed }

// Role names the replica's place in its adopted configuration: "head",
// "middle", "tail", "head+tail" (a chain of one), "joining" or "none".
func (r *Replica) Role() string { return r.role.String() }

// IsHead reports whether the replica is the head of its adopted configuration.
func (r *Replica) IsHead() bool { return r.role.isHead() }

// IsTail reports whether the replica is the tail of its adopted configuration.
func (r *Replica) IsTail() bool { return r.role.isTail() }

// Status reports the replica's state for heartbeats.
func (r *Replica) Status() wire.VolumeStatus {
	st := wire.VolumeStatus{
		Volume: r.volume, Epoch: r.config.Epoch, AppliedSN: r.applied, CommittedSN: r.committed,
		JoinerReady: r.JoinerReady(), Complete: r.complete(), Watches: uint64(len(r.watches)),
	}
	if r.split.Into == r.config.Split.Into || r.seeded {
		// The latest split's, as the master asks; a seed's is its own
		// (Into is its volume: wire.VolumeStatus.Seed).
		st.Split = r.split
	}
	if r.phase != phaseWedged {
		r.mode.Status(&st)
	}
	return st
}

// Tick repeats an unanswered SyncRequest and forwards what the lazy
// phase held back (a tick bounds how long it waits for an idle server).
func (r *Replica) Tick(now wire.Time) []wire.Envelope {
	if r.phase == phaseWedged {
		return nil
	}
	r.now = now
	if r.upstream == predecessorSyncing && now-r.syncRequestedAt >= r.limits.SyncRetryInterval {
		if r.needsTransfer() && r.transfer.unansweredFor(now, r.limits.TransferAnswerWait) {
			r.transfer.next(now, true)
		}
		r.sendSyncRequest(now)
	} else if r.joinerStreamQuiet(now) {
		r.syncWithPredecessor(now)
	}
	r.forwardNow()
	r.repeatDurableReport(now)
	r.mode.Tick(now)
	r.dropExports(now, false)
	r.sequenceSplitMarker()
	if len(r.watches) > 0 {
		r.serveWatches(false) // (holds that ended)
	}
	return r.flush().Messages
}

// Idle forwards what the lazy phase held back. The server calls it when
// no other input waits: lazy propagation runs at lower priority than
// eager traffic (Traits.LazyFrom, forwardsLazily).
func (r *Replica) Idle() []wire.Envelope {
	if r.phase == phaseWedged {
		return nil
	}
	r.forwardNow()
	return r.flush().Messages
}

// Step handles one message from another node. Messages of another epoch,
// or from a node that is not this replica's neighbour, are dropped: the
// sender learns the configuration from the master.
func (r *Replica) Step(now wire.Time, from wire.NodeID, m wire.Message) Output {
	r.now = now
	if r.phase == phaseWedged {
		if req, ok := m.(*wire.ClientRequest); ok {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		}
		return r.flush()
	}
	if r.role == roleJoining && from == r.predecessor {
		r.upstreamHeardAt = now
	}
	switch m := m.(type) {
	case *wire.ClientRequest:
		r.handleClientRequest(from, m)
	case *wire.Forward:
		if r.sentByPredecessor(from, m.Epoch) && r.takesForwards() {
			r.handleForward(now, m)
		}
	case *wire.Ack:
		if r.sentBySuccessor(from, m.Epoch) {
			r.handleAck(m.SN)
			if r.mode.AckReceived(m) {
				r.ackUpstream()
			}
		}
	case *wire.QueryUp:
		if r.sentBySuccessor(from, m.Epoch) && !r.mode.Step(from, m) {
			r.protocolError("successor passed up a query for volume %d epoch %d to a %s volume", m.Request.Volume, m.Request.Epoch, r.modeOf)
		}
	case *wire.SyncRequest:
		if r.sentBySuccessor(from, m.Epoch) {
			r.handleSyncRequest(m)
		}
	case *wire.SyncReply:
		if r.sentByPredecessor(from, m.Epoch) {
			r.handleSyncReply(from, m)
		}
	case *wire.Durable:
		if r.sentByPredecessor(from, m.Epoch) {
			r.handleDurable(m)
		}
	case *wire.SnapshotChunk:
		// Chunks follow the SyncReply that starts their transfer; while
		// syncing, they belong to an answer this joiner did not take.
		if r.sentByPredecessor(from, m.Epoch) && r.role == roleJoining && r.upstream == predecessorSynced {
			r.handleSnapshotChunk(now, from, m)
		}
	case *wire.PeerReset:
		r.handlePeerReset(now, m.Peer)
	case *wire.Ship, *wire.Fetch:
		// Requests only a mode takes: from a peer that takes this
		// volume for one of another mode.
		if !r.mode.Step(from, m) {
			r.protocolError("%s from %s to a %s volume", wire.MessageName(m), from, r.modeOf)
		}
	default:
		// The mode's answers (ShipAck, Fetched, Control, a relayed
		// ClientReply); one it did not ask for is dropped.
		r.mode.Step(from, m)
	}
	return r.flush()
}

// sentByPredecessor reports whether a message of epoch comes from this
// replica's predecessor in its adopted configuration.
func (r *Replica) sentByPredecessor(from wire.NodeID, epoch wire.Epoch) bool {
	return epoch == r.config.Epoch && from == r.predecessor
}

// sentBySuccessor reports whether a message of epoch comes from this
// replica's successor in its adopted configuration.
func (r *Replica) sentBySuccessor(from wire.NodeID, epoch wire.Epoch) bool {
	return epoch == r.config.Epoch && from == r.successor
}

// handleClientRequest sends a query to Query Processing (reads.go) and an
// update to Update Processing (updates.go).
func (r *Replica) handleClientRequest(from wire.NodeID, req *wire.ClientRequest) {
	if err := kv.Validate(req.Op); err != nil {
		r.reply(from, req, wire.ErrBadRequest, wire.Result{})
		return
	}
	if req.FromSite != 0 {
		// Another site's head forwarded it: it cannot know this chain's
		// epoch, and the mode decides (only hierarchical volumes take
		// any).
		if code := r.mode.AdmitForwarded(req); code != wire.ErrNone {
			r.reply(from, req, code, wire.Result{})
			return
		}
	} else if req.Epoch != r.config.Epoch {
		r.reply(from, req, wire.ErrWrongEpoch, wire.Result{})
		return
	}
	if req.Op.Kind.IsQuery() {
		r.handleQuery(from, req)
		return
	}
	r.handleUpdateRequest(from, req)
}

func (r *Replica) reply(to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result) {
	r.replyAs(to, req, code, result, false)
}

// replyAs answers a request; stable says the version answered (result.SN)
// is processed by the tail.
func (r *Replica) replyAs(to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result, stable bool) {
	r.send(to, r.clientReply(req, code, result, stable))
}

// clientReply is the answer to a request.
func (r *Replica) clientReply(req *wire.ClientRequest, code wire.ErrCode, result wire.Result, stable bool) *wire.ClientReply {
	rep := &wire.ClientReply{
		Volume: r.volume, Client: req.Client, ReqNo: req.ReqNo, Err: code, Result: result,
		Epoch: r.config.Epoch, Position: r.position(), Stable: stable && code == wire.ErrNone,
	}
	if code == wire.ErrWrongEpoch && r.config.Epoch > req.Epoch {
		c := r.config.Clone()
		rep.Config = &c
	}
	return rep
}

func (r *Replica) send(to wire.NodeID, m wire.Message) {
	r.out.Messages = append(r.out.Messages, wire.Envelope{To: to, Msg: m})
}

// sendEarly sends a message that may leave before this step's storage
// writes are durable (wire.Envelope.Early).
func (r *Replica) sendEarly(to wire.NodeID, m wire.Message) {
	r.out.Messages = append(r.out.Messages, wire.Envelope{To: to, Msg: m, Early: true})
}

// flush returns what the current input produced and starts the next.
func (r *Replica) flush() Output {
	if len(r.watches) > 0 && r.watchable() != r.watchedTo {
		r.watchedTo = r.watchable()
		r.serveWatches(false)
	}
	out := r.out
	r.out = Output{}
	return out
}

// saveMeta writes what a restart restores: the configuration, the applied
// SN, and whether a joiner holds a whole snapshot.
func (r *Replica) saveMeta() {
	m := &r.metaScratch // not a local: one allocation per update less
	*m = storage.Meta{Config: r.config, Applied: r.applied, SnapshotInstalled: r.snapshot.installed,
		CatchUpTo: r.catchUpTo, AppliedEpoch: r.appliedEpoch, Split: r.split, Seeded: r.seeded}
	r.mode.SaveMeta(m)
	r.store.SetMeta(*m)
}
