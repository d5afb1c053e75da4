package chain

import "github.com/catena-kv/catena/internal/wire"

// A role move (docs/adr/0018-role-balance.md): the master takes a member
// M out of its place and makes it the joining server with the state it
// holds (wire.Config.Moved); the tail T catches it up and the master
// makes it the tail, so the members behind it move up one place and
// nobody leaves. While M is out of the chain, the chain has one member
// fewer; so that M still counts as a copy of everything the chain
// answered, T applies nothing M lacks until M is the tail:
//
//   - M held, when it left, every update T held (it was before T), and
//     T, taking updates only through M in the epoch before, held no
//     more than M when it adopted the move. So T caps what it applies at
//     its own applied SN, and raises the cap to M's offer (the SN and
//     epoch of the last update M applied, wire.SyncRequest).
//   - Updates up to M's offer reach T from its new predecessor, which
//     held them before M did (M was after it) or received them from M
//     (M was the head). Those M holds were all sequenced by the epoch of
//     M's last update or earlier; one sequenced later is not M's: M was
//     the head and the chain lost updates it never forwarded. T then
//     applies nothing more, and M gets a snapshot of T (catchup.go).
//   - T processes only what it applied, so every update T answers or
//     acknowledges is on M. If a member before T fails the move goes on;
//     if T fails it ends (a new tail may have applied more, and would
//     answer it); if T is the last member and fails, the master makes M
//     the only member (master.removeEverywhere).
//
// Writes wait while T caps: the predecessor keeps them on Sent and
// resends them once M is the tail.

// moveCap is a tail's limit on what it applies while a moved member
// joins: at most SN cap, sequenced at most in epoch, unless diverged.
type moveCap struct {
	capped bool
	sn     wire.SN
	epoch  wire.Epoch
	// diverged: an update within the cap was sequenced after M's last:
	// M's history is not the chain's, and only a snapshot brings it up
	// to date.
	diverged bool
}

// capForMovedJoiner starts the cap as this tail adopts a role move.
func (r *Replica) capForMovedJoiner() {
	if r.hasJoiner() && r.config.Moved {
		r.joiner.cap = moveCap{capped: true, sn: r.applied, epoch: r.appliedEpoch}
	}
}

// raiseCap takes the moved joiner's offer: its last update's SN and
// epoch. Updates up to it that this tail dropped are asked for again.
func (r *Replica) raiseCap(sn wire.SN, epoch wire.Epoch) {
	c := &r.joiner.cap
	if !c.capped || epoch == 0 || sn <= c.sn {
		return
	}
	c.sn, c.epoch = sn, max(c.epoch, epoch)
	if r.upstream == predecessorSynced && r.applied < sn {
		r.syncWithPredecessor(r.now)
	}
}

// takesUnderCap reports whether a capped tail may apply u, noting a
// divergence when u lies within the cap but is not the joiner's.
func (r *Replica) takesUnderCap(u *wire.Update) bool {
	c := &r.joiner.cap
	if !c.capped {
		return true
	}
	if u.SN > c.sn {
		return false
	}
	if u.Epoch > c.epoch {
		c.diverged = true
		return false
	}
	return true
}
