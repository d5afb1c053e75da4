package chain

import (
	"fmt"
	"math"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Modes as strategies (docs/adr/0021-modes-as-strategies.md). This package
// is CR §3: updates and acknowledgements, the Fig. 3 exchange, extension,
// reads, reconfiguration, roles, sessions, durability and catch-up. What a
// keyspace's mode changes in a chain is decided by the volume's Mode, which
// the core calls at the points below and nowhere else asks which mode it
// runs:
//
//   - strong (CR: the tail answers) is this package's own, and every
//     other mode's starting point (Strong);
//   - causal+ (ChainReaction §III) is internal/chain/causal;
//   - shipping between sites (ChainReaction §V, and the base of
//     hierarchical control) is internal/chain/sites;
//   - hierarchical replication control (the NFSv4 paper) is
//     internal/chain/hierarchical, built on sites.
//
// A replica makes its Mode once, with ReplicaOptions.Modes, when it first
// adopts or restores a configuration, from the configuration's Mode
// (wire.Config.Mode, the keyspace's), and keeps it: a volume's mode never
// changes. Traits, asked at every configuration change, fix what the mode
// decides from the configuration alone.

// Mode is what a keyspace's mode decides in one volume's chain. Every
// method runs inside one of the replica's steps (no I/O, no goroutines),
// and may act on the replica through the Core it was made with.
type Mode interface {
	// Traits returns what the mode fixes for the configuration c, which
	// the replica adopts (or restores).
	Traits(c wire.Config) Traits

	// AdmitForwarded decides on a request another site forwarded
	// (ClientRequest.FromSite): ErrNone takes it whatever its epoch.
	AdmitForwarded(req *wire.ClientRequest) wire.ErrCode
	// Query may take over a query before CR's Query Processing, and
	// reports whether it did (answered, passed on or held).
	Query(from wire.NodeID, req *wire.ClientRequest) bool
	// RouteRead may send a query the core would answer from this
	// replica's state elsewhere (another site's copy may be newer), and
	// reports whether it did.
	RouteRead(from wire.NodeID, req *wire.ClientRequest) bool
	// HoldRead may hold the answer to a read of a version stamped s,
	// and reports whether it did.
	HoldRead(from wire.NodeID, req *wire.ClientRequest, s wire.Stamp, result wire.Result) bool
	// AdmitUpdate checks an update request at the head before its
	// session: ErrNone admits it.
	AdmitUpdate(req *wire.ClientRequest) wire.ErrCode
	// SessionRequest returns the request whose session the head looks
	// up (req itself, or a copy the mode changed).
	SessionRequest(req *wire.ClientRequest) *wire.ClientRequest
	// Repeatable reports whether the head may answer a retried update
	// from its recorded result once the update is committed here.
	Repeatable(result wire.Result) bool
	// Sequence decides whether the head sequences a new update now; if
	// not, the mode answered or holds the request.
	Sequence(from wire.NodeID, req *wire.ClientRequest) bool
	// Stamp gives an update the head sequences for a client its stamp
	// and dependencies; prior is the stamp of the key's version it
	// replaces (Traits.Stamps).
	Stamp(u *wire.Update, req *wire.ClientRequest, prior wire.Stamp)

	// RecordsSession reports whether applying u records its outcome in
	// the exactly-once table.
	RecordsSession(u *wire.Update) bool
	// Applied is called as the replica applies u, in SN order, before
	// it counts it applied.
	Applied(u *wire.Update)
	// Urgent reports whether the lazy phase (Traits.LazyFrom) must not
	// hold u back: the members after it forward it, and what precedes
	// it, at once.
	Urgent(u *wire.Update) bool
	// HoldsAnswer may hold the tail's (or answering member's) answer to
	// u, and reports whether it did.
	HoldsAnswer(u *wire.Update) bool
	// TailApplied is called at the tail after an update applied there
	// is committed.
	TailApplied()
	// AfterApply is called once a step's applied updates were
	// forwarded and acknowledged.
	AfterApply()
	// Committed is called at a member other than the tail after an
	// acknowledgement from down the chain moved its committed SN.
	Committed()

	// Step handles a message the core does not (the mode's own), and
	// reports whether it was one the mode takes.
	Step(from wire.NodeID, m wire.Message) bool
	// AckNews reports whether the mode has news for the predecessor
	// even if the committed SN did not move; FillAck adds it to an
	// acknowledgement about to go upstream.
	AckNews() bool
	FillAck(a *wire.Ack)
	// AckReceived takes the mode's part of a successor's
	// acknowledgement, and reports whether the predecessor should hear
	// of it.
	AckReceived(a *wire.Ack) bool
	// Tick runs the mode's timers.
	Tick(now wire.Time)

	// Completeness returns, as the replica adopts a configuration, the
	// SN from which it holds every update the chain answered
	// (wire.VolumeStatus.Complete; storage.NeverCaughtUp: not known to);
	// prev is the configuration adopted before, in which the replica was
	// a member if wasMember, and catchUpTo what it held until now.
	Completeness(prev wire.Config, wasMember bool, catchUpTo wire.SN) wire.SN
	// Adopted is called once a member or joining server adopted its
	// configuration and started its links over, before it takes up a
	// new role (becomes the tail).
	Adopted()
	// ReleaseTailRequests drops the requests the replica held as tail:
	// with answer (it adopted a configuration in which it is not the
	// tail) their clients are told to ask the new one; without (it keeps
	// its state for a catch-up, as a joiner or retained), they time out.
	ReleaseTailRequests(answer bool)
	// BecameTail is called once a replica that became the tail
	// committed what it applied.
	BecameTail()
	// SyncReplied takes the predecessor's answer to this replica's
	// SyncRequest.
	SyncReplied(m *wire.SyncReply)

	// Status adds the mode's part to the replica's heartbeat status.
	Status(st *wire.VolumeStatus)
	// Restore takes what a previous process saved (SaveMeta), and
	// Reset drops the mode's state with the replica's.
	Restore(m storage.Meta)
	SaveMeta(m *storage.Meta)
	Reset()
	// SnapshotStarted is called as a joining replica drops its state
	// for a snapshot's first chunk; FillSnapshot adds the mode's state
	// to the last chunk a tail sends, and Installed takes it from the
	// last chunk received.
	SnapshotStarted()
	FillSnapshot(last *wire.SnapshotChunk)
	Installed(last *wire.SnapshotChunk)
}

// Traits are what a mode fixes about a chain from its configuration.
type Traits struct {
	// Answerer is the index of the member that answers updates: the
	// tail in CR; -1: no member does (writes are paused).
	Answerer int
	// LazyFrom is the index of the first member that forwards at low
	// priority (Replica.Idle); past the chain's end: none does.
	LazyFrom int
	// WritesPaused: the head admits no update, and no member answers
	// one (ChainReaction: a chain shorter than k).
	WritesPaused bool
	// Stamps: updates carry stamps (the head reads the prior version's).
	Stamps bool
	// Pipelines: with lagging commits, members forward updates before
	// their own commit (durable.go); the other modes' messages wait for
	// it.
	Pipelines bool
	// CatchesUp: a joining server may receive only the updates it
	// missed (catchup.go); otherwise it always takes a snapshot.
	CatchesUp bool
	// KeepsVersions: each member keeps, for the keys with updates the
	// tail may not have processed, the versions from the committed one
	// on, so it can answer a read as of any SN it applied from its
	// committed one on (Core.GetAsOf).
	KeepsVersions bool
	// StableNotice is the member that tells each update's writer, unasked,
	// once it knows the update stable (docs/adr/0025): the writer's next
	// update then needs no dependency wait on it.
	StableNotice StableNotice
}

// StableNotice names the member of a chain that sends stable notices.
type StableNotice uint8

const (
	// NoStableNotice: no member does; every answer is stable already, or
	// the mode keeps no per-key stability.
	NoStableNotice StableNotice = iota
	// StableNoticeAtHead: the head, once the tail's acknowledgement
	// reaches it, when every member knows the update processed.
	StableNoticeAtHead
	// StableNoticeAtTail: the tail, as it processes the update.
	StableNoticeAtTail
)

// Modes makes the Mode of a volume whose configuration is c, acting on
// its replica through core. It fails for a mode this server cannot run.
type Modes func(core *Core, c wire.Config) (Mode, error)

// StrongOnly makes a strong volume's Mode and refuses every other mode:
// the Modes of a server that runs no other (internal/chain/modes makes
// them all).
func StrongOnly(core *Core, c wire.Config) (Mode, error) {
	if c.Mode != wire.ModeStrong {
		return nil, fmt.Errorf("volume %d is %s: this server runs strong volumes only", c.Volume, c.Mode)
	}
	return NewStrong(core), nil
}

// Strong is chain replication as CR §2-3 describe it: the tail answers
// updates and queries, nothing is stamped, shipped or held. Its methods
// are the defaults the other modes embed and override.
type Strong struct {
	Core *Core
}

// NewStrong returns the strong mode of core's replica.
func NewStrong(core *Core) *Strong { return &Strong{Core: core} }

// StrongTraits are the traits of a strong chain of configuration c: the
// tail answers, nothing is lazy or stamped, members pipeline and catch up.
func StrongTraits(c wire.Config) Traits {
	return Traits{Answerer: len(c.Chain) - 1, LazyFrom: math.MaxInt, Pipelines: true, CatchesUp: true}
}

// Traits implements Mode.
func (s *Strong) Traits(c wire.Config) Traits { return StrongTraits(c) }

// AdmitForwarded implements Mode: only hierarchical volumes take
// forwarded requests.
func (s *Strong) AdmitForwarded(req *wire.ClientRequest) wire.ErrCode {
	if req.Epoch != s.Core.r.config.Epoch {
		return wire.ErrWrongEpoch
	}
	return wire.ErrUnavailable
}

// Query implements Mode: a wait for other sites is refused (there are
// none).
func (s *Strong) Query(from wire.NodeID, req *wire.ClientRequest) bool {
	if req.Op.Kind == wire.OpWaitShipped {
		s.Core.Reply(from, req, wire.ErrBadRequest, wire.Result{})
		return true
	}
	return false
}

// RouteRead implements Mode.
func (s *Strong) RouteRead(wire.NodeID, *wire.ClientRequest) bool { return false }

// HoldRead implements Mode.
func (s *Strong) HoldRead(wire.NodeID, *wire.ClientRequest, wire.Stamp, wire.Result) bool {
	return false
}

// AdmitUpdate implements Mode.
func (s *Strong) AdmitUpdate(*wire.ClientRequest) wire.ErrCode { return wire.ErrNone }

// SessionRequest implements Mode.
func (s *Strong) SessionRequest(req *wire.ClientRequest) *wire.ClientRequest { return req }

// Repeatable implements Mode.
func (s *Strong) Repeatable(wire.Result) bool { return true }

// Sequence implements Mode.
func (s *Strong) Sequence(wire.NodeID, *wire.ClientRequest) bool { return true }

// Stamp implements Mode.
func (s *Strong) Stamp(*wire.Update, *wire.ClientRequest, wire.Stamp) {}

// RecordsSession implements Mode: every update's outcome is recorded.
func (s *Strong) RecordsSession(*wire.Update) bool { return true }

// Applied implements Mode.
func (s *Strong) Applied(*wire.Update) {}

// HoldsAnswer implements Mode.
func (s *Strong) HoldsAnswer(*wire.Update) bool { return false }

// Urgent implements Mode: nothing is (a strong chain has no lazy phase).
func (s *Strong) Urgent(*wire.Update) bool { return false }

// TailApplied implements Mode.
func (s *Strong) TailApplied() {}

// AfterApply implements Mode.
func (s *Strong) AfterApply() {}

// Committed implements Mode.
func (s *Strong) Committed() {}

// Step implements Mode: a strong chain has no messages of its own.
func (s *Strong) Step(wire.NodeID, wire.Message) bool { return false }

// AckNews implements Mode.
func (s *Strong) AckNews() bool { return false }

// FillAck implements Mode.
func (s *Strong) FillAck(*wire.Ack) {}

// AckReceived implements Mode.
func (s *Strong) AckReceived(*wire.Ack) bool { return false }

// Tick implements Mode.
func (s *Strong) Tick(wire.Time) {}

// Completeness implements Mode: every member of a strong chain holds
// every update the chain answered (the tail answers, and members before
// it hold what it holds); a server outside the chain holds none for sure.
func (s *Strong) Completeness(wire.Config, bool, wire.SN) wire.SN {
	if s.Core.IsMember() {
		return 0
	}
	return storage.NeverCaughtUp
}

// Adopted implements Mode.
func (s *Strong) Adopted() {}

// ReleaseTailRequests implements Mode.
func (s *Strong) ReleaseTailRequests(bool) {}

// BecameTail implements Mode.
func (s *Strong) BecameTail() {}

// SyncReplied implements Mode.
func (s *Strong) SyncReplied(*wire.SyncReply) {}

// Status implements Mode.
func (s *Strong) Status(*wire.VolumeStatus) {}

// Restore implements Mode.
func (s *Strong) Restore(storage.Meta) {}

// SaveMeta implements Mode.
func (s *Strong) SaveMeta(*storage.Meta) {}

// Reset implements Mode.
func (s *Strong) Reset() {}

// SnapshotStarted implements Mode.
func (s *Strong) SnapshotStarted() {}

// FillSnapshot implements Mode.
func (s *Strong) FillSnapshot(*wire.SnapshotChunk) {}

// Installed implements Mode.
func (s *Strong) Installed(*wire.SnapshotChunk) {}
