package chain

import (
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Adoption says what Replica.Adopt did with a configuration.
type Adoption uint8

const (
	// AdoptionStale: the configuration is not newer than the adopted one,
	// or is another volume's. Nothing changed.
	AdoptionStale Adoption = iota
	// AdoptionRefused: the configuration names this empty replica a member,
	// which it may not become (see Adopt). Nothing changed.
	AdoptionRefused
	// AdoptionWedged: a replica restored from disk recorded the
	// configuration but still takes part in nothing.
	AdoptionWedged
	// AdoptionMember: the replica is a member of the adopted configuration.
	AdoptionMember
	// AdoptionJoiner: the replica is the joining server of the adopted
	// configuration, starting from nothing.
	AdoptionJoiner
	// AdoptionRemoved: the configuration leaves this server out; the
	// replica dropped its state.
	AdoptionRemoved
	// AdoptionRetained: the configuration leaves this server out; the
	// replica keeps its state, wedged, for a catch-up when the master
	// adds it back (catchup.go).
	AdoptionRetained
)

var adoptionNames = [...]string{
	AdoptionStale: "stale", AdoptionRefused: "refused", AdoptionWedged: "wedged",
	AdoptionMember: "member", AdoptionJoiner: "joiner", AdoptionRemoved: "removed", AdoptionRetained: "retained",
}

func (a Adoption) String() string { return adoptionNames[a] }

// Adopt installs a newer configuration and says what it did. A new
// configuration is how the master tells a replica of CR §3's failure
// handling: the head's successor becomes head, the tail's predecessor
// becomes tail (becomeTail), the neighbours of a removed middle server
// synchronise (sync.go), a joining server starts receiving the tail's
// state (extension.go).
func (r *Replica) Adopt(now wire.Time, c wire.Config) (Adoption, []wire.Envelope) {
	if c.Epoch <= r.config.Epoch || c.Volume != r.volume {
		return AdoptionStale, nil
	}
	r.now = now
	r.serveWatches(true) // (their watchers ask again, in the new epoch)
	if err := r.makeMode(c); err != nil {
		r.protocolError("configuration %v refused: %v", c, err)
		return AdoptionRefused, nil
	}
	named := c.Index(r.id) >= 0
	// A member moved to the tail holds every answered update
	// (rolemove.go), and the master may make it a member again.
	// A split's seed holds the state every member of the sibling's first
	// chain holds (split.go).
	hasState := r.role.isMember() || r.role == roleJoining && (r.snapshot.installed || r.config.Moved && r.keepsState()) ||
		r.seeded && named
	seed := r.seeded
	if !hasState && named && (!r.firstStart || c.FromSplit) && !c.Fresh {
		// An empty replica becomes a member only in the server's first
		// process: membership is gained only at bootstrap or through a
		// snapshot, so a first process named a member has been one since
		// epoch 1, and nothing committed without it. Otherwise this is a
		// server that restarted empty before the master noticed; it must
		// join at the tail, and the master removes it. A Fresh
		// configuration says the volume is empty everywhere.
		return AdoptionRefused, nil
	}
	if r.phase == phaseWedged && named && len(c.Chain) > 1 && !seed {
		// Restored from disk, and the master has not yet handled this
		// restart: it will remove this server, or keep it as the chain's
		// only member. Until then take part in nothing.
		r.setConfig(c)
		r.saveMeta()
		return AdoptionWedged, nil
	}
	previous, prev := r.role, r.config
	joinerAcked := r.joiner.acked
	r.setConfig(c)
	r.becomeRunning()
	if seed {
		r.seeded, r.split = false, wire.SplitPoint{} // (a seed's point is its parent's)
	}
	r.adoptCompleteness(prev, previous)
	r.retryParkedReads() // answered, or sent to the new tail

	switch r.role {
	case roleNone:
		// Removed: keep the state for a catch-up when the master adds
		// this server back, unless another server joins in its place;
		// drop it otherwise. A server that comes back joins at the tail.
		if r.retains(c) {
			r.retain(now)
			return AdoptionRetained, r.flush().Messages
		}
		r.resetState()
		r.dropLinks(now)
		return AdoptionRemoved, r.flush().Messages
	case roleJoining:
		// Every epoch that names a joining server is a new attempt to add
		// it (the master aborts an extension on any other change): start
		// from the state kept, offered for a catch-up, or from nothing.
		if r.keepsState() {
			r.keepForCatchUp()
		} else {
			r.resetState()
		}
	}

	r.dropLinks(now)
	r.capForMovedJoiner()
	r.mode.Adopted()
	if r.role.isTail() && !previous.isTail() {
		r.becomeTail()
	}
	if previous.isTail() && !r.role.isTail() {
		r.handOverTail(joinerAcked)
	}
	r.trimSent()
	if !r.role.isHead() {
		clear(r.waiters)
	} else {
		r.answerWaiters() // a causal chain may be long enough again
	}
	if !r.role.isTail() {
		r.mode.ReleaseTailRequests(true)
	}
	if r.predecessor != "" {
		r.syncWithPredecessor(now)
	}
	r.durabilityAdvanced() // a tail left without a predecessor needs no report
	r.sequenceSplitMarker()
	r.saveMeta()
	if r.role == roleJoining {
		return AdoptionJoiner, r.flush().Messages
	}
	return AdoptionMember, r.flush().Messages
}

// becomeTail: every update this replica applied is now processed by the
// tail (CR §3 "Failure of the Tail"). The old tail may not have replied to
// all of them, so this replica replies again; clients ignore duplicates.
// (Not in a causal chain too short for writes: an answer promises k
// copies.)
func (r *Replica) becomeTail() {
	if r.pipelined() {
		// Processed as their durability is reported (durable.go): the
		// new predecessor's SyncReply starts the reports.
		r.advanceCommitted()
		return
	}
	for sn := max(r.committed+1, r.sent.firstSN()); r.sent.holds(sn) && !r.traits.WritesPaused; sn++ {
		if u := r.sent.at(sn); u.ReplyTo != "" {
			r.replyUpdate(u)
		}
	}
	r.committed = r.applied
	r.trimSent()
	r.answerWaiters()
	r.mode.BecameTail()
}

// handOverTail: the joining server became the tail (CR §3 "Extending a
// Chain"); what it had not acknowledged is not processed by the tail.
func (r *Replica) handOverTail(joinerAcked wire.SN) {
	r.committed = min(r.committed, joinerAcked)
}

// resetState drops the volume's data, as a server that must receive it
// again with a snapshot.
func (r *Replica) resetState() {
	r.serveWatches(true)
	r.dropExports(0, true)
	r.store.Reset()
	r.sessions.reset()
	r.applied, r.committed, r.ackedUpstream, r.urgentTo = 0, 0, 0, 0
	r.durable = 0 // (until the next commit: what the disk holds now is nothing of the chain's)
	r.appliedEpoch = 0
	r.catchUpTo = storage.NeverCaughtUp
	r.mode.Reset()
	r.sent.reset()
	r.recent.reset()
	clear(r.waiters)
	r.snapshot = snapshotReceipt{}
	r.split, r.seeded = wire.SplitPoint{}, false
	if r.observer != nil {
		r.observer.Reset(r.id, r.volume)
	}
}

// adoptCompleteness updates catchUpTo for a newly adopted configuration
// (Mode.Completeness); prev is the one adopted before, held in role
// wasRole.
func (r *Replica) adoptCompleteness(prev wire.Config, wasRole role) {
	r.catchUpTo = r.mode.Completeness(prev, wasRole.isMember(), r.catchUpTo)
	if r.position() == 0 && !r.complete() {
		// A head has no predecessor to catch up from: anything answered
		// it lacks is gone with the members the master removed, which it
		// does only when none that stays is known to hold everything (a
		// failure of more than the first K). The chain goes on from here.
		r.catchUpTo = 0
	}
}
