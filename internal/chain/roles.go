package chain

import (
	"fmt"

	"github.com/catena-kv/catena/internal/wire"
)

// role is a replica's place in its adopted configuration (CR §3: the head
// sequences updates, every member applies and forwards them, the tail
// answers queries and replies). setConfig derives it, with the replica's
// neighbours, whenever the configuration changes; nothing else sets it.
type role uint8

const (
	// roleNone: not in the configuration (none adopted yet, or removed).
	roleNone role = iota
	// roleHead: the first of two or more members.
	roleHead
	// roleMiddle: a member between the head and the tail.
	roleMiddle
	// roleTail: the last of two or more members.
	roleTail
	// roleSole: the only member, head and tail at once.
	roleSole
	// roleJoining: the server being added after the tail (CR §3 "Extending
	// a Chain"); it receives the tail's state and answers nobody.
	roleJoining
)

var roleNames = [...]string{roleNone: "none", roleHead: "head", roleMiddle: "middle", roleTail: "tail", roleSole: "head+tail", roleJoining: "joining"}

func (ro role) String() string { return roleNames[ro] }

// isHead: the role sequences updates.
func (ro role) isHead() bool { return ro == roleHead || ro == roleSole }

// isTail: the role answers queries and replies to updates.
func (ro role) isTail() bool { return ro == roleTail || ro == roleSole }

// isMember: the role is a member of the chain (not the joining server).
func (ro role) isMember() bool { return ro != roleNone && ro != roleJoining }

// roleIn returns id's role in c.
func roleIn(c wire.Config, id wire.NodeID) role {
	switch i := c.Index(id); {
	case i < 0 && id != "" && id == c.Joining:
		return roleJoining
	case i < 0:
		return roleNone
	case len(c.Chain) == 1:
		return roleSole
	case i == 0:
		return roleHead
	case i == len(c.Chain)-1:
		return roleTail
	default:
		return roleMiddle
	}
}

// setConfig records c as the adopted configuration and derives the role
// and neighbours from it. A joining server's progress belongs to one
// epoch (the master aborts an extension on any other change), so it
// starts over.
// REQUIRES: the replica has its mode (makeMode).
func (r *Replica) setConfig(c wire.Config) {
	r.config = c.Clone()
	r.role = roleIn(c, r.id)
	r.predecessor = c.Predecessor(r.id)
	r.successor = c.Successor(r.id)
	r.joiner = joinerProgress{}
	r.traits = r.mode.Traits(r.config)
	r.sent.keepVersions(r.traits.KeepsVersions)
	if !r.exportsHere() {
		r.dropExports(0, true)
	}
}

// position returns this replica's index in its chain, or -1.
func (r *Replica) position() int { return r.config.Index(r.id) }

// answersUpdates reports whether this member tells clients the outcome
// of the updates it applies: the tail in CR (§2), another member in some
// modes (Traits.Answerer), none while writes are paused.
func (r *Replica) answersUpdates() bool {
	p := r.position()
	return p >= 0 && p == r.traits.Answerer && !r.traits.WritesPaused
}

// forwardsLazily reports whether this member forwards at low priority
// (Traits.LazyFrom): it holds its forwards back until the server has no
// other input waiting (Idle), its next tick, or LazyBacklogMax held-back
// updates, whichever comes first, so eager work goes first and the lazy
// phase falls behind by a bounded amount.
func (r *Replica) forwardsLazily() bool {
	p := r.position()
	return p >= 0 && p >= r.traits.LazyFrom
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

// complete reports whether this member holds every update the chain has
// answered (Mode.Completeness).
func (r *Replica) complete() bool { return r.applied >= r.catchUpTo }

// phase is what a replica may do in its role. It changes only through
// the transitions below, in the style of etcd raft's become* functions.
type phase uint8

const (
	// phaseRunning: the replica takes part in its chain as its role says.
	phaseRunning phase = iota
	// phaseWedged: restored from disk with its Sent list and links gone,
	// it takes part in nothing (refuses clients, drops chain messages)
	// until it adopts a configuration the master made after noticing the
	// restart (docs/adr/0003, "Restarts").
	phaseWedged
	// phaseHandoffPaused: a tail whose joining server is nearly caught up
	// applies nothing more in this epoch (drops forwards, refuses updates
	// as head), so the joiner catches up exactly and the master can make it
	// the tail holding everything this tail applied (see JoinerReady).
	phaseHandoffPaused
)

var phaseNames = [...]string{phaseRunning: "running", phaseWedged: "wedged", phaseHandoffPaused: "paused for hand-off"}

func (p phase) String() string { return phaseNames[p] }

// becomeWedged: a replica restored from disk waits for the master.
// REQUIRES: the replica has taken part in nothing in this process.
func (r *Replica) becomeWedged() {
	if r.phase != phaseRunning || r.applied != r.committed || r.sent.len() > 0 {
		panic(fmt.Sprintf("INVARIANT wedge: %s wedged while %s with applied %d, committed %d, %d updates on Sent",
			r.id, r.phase, r.applied, r.committed, r.sent.len()))
	}
	r.phase = phaseWedged
}

// becomeRunning: a newer configuration ends a wedge and a hand-off pause.
func (r *Replica) becomeRunning() { r.phase = phaseRunning }

// pauseForHandoff: this tail's joiner is within HandoffLagMax updates, so
// the tail stops applying until the master makes the joiner the tail.
// REQUIRES: the replica is a tail with a joining server, and running
// (or already paused: a late acknowledgement pauses again).
func (r *Replica) pauseForHandoff() {
	if !r.hasJoiner() {
		panic(fmt.Sprintf("INVARIANT hand-off pause: %s pauses as %s without a joining server", r.id, r.role))
	}
	if r.phase == phaseWedged {
		panic(fmt.Sprintf("INVARIANT hand-off pause: %s pauses while wedged", r.id))
	}
	r.phase = phaseHandoffPaused
}
