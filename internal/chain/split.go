package chain

import (
	"fmt"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// A volume splits in place (docs/adr/0031-splitting-volumes.md). The
// master gives its chain a configuration whose Split names the sibling
// volume, the epoch from which the volume no longer holds the moving
// half, and which half that is. Every member applies the split at the
// same point of the volume's history: just before the first update
// sequenced in that epoch or later. There it moves the moving half's
// objects out of its replica and into a replica of the sibling on the
// same server, with a copy of every client session (exactly-once: a
// retry that now goes to the sibling finds the outcome). Histories of
// one chain are prefixes of each other (Update Propagation), so every
// member seeds the same state at the same SN, and the sibling's chain,
// which the master starts on the members that agree with the tail
// (wire.VolumeStatus.Split), begins from it. No update after the point
// touches the moving half: the head refuses its keys in the split's
// epoch and later (ErrKeyspaces), and so does every member for reads.
//
// So that the point exists without waiting for a client's write, a head
// whose history has not reached the split's epoch sequences a marker
// first: an update that changes nothing.

// SplitKeyspaceMarker is the key of a split's marker update: no key a
// client may use (kv.Validate refuses the empty key).
const SplitKeyspaceMarker = ""

// owns reports whether the replica's volume holds key now (and not its
// sibling since the volume's latest split).
func (r *Replica) owns(key string) bool {
	if mutation.Enabled && r.mutations.SplitKeepsServing {
		return true
	}
	return r.config.Split.Owns(key)
}

// refusesMoved answers a request for a key that moved to the sibling in
// the volume's latest split with ErrKeyspaces (the client routes with an
// older keyspace list and asks the masters for the new one), and says
// whether it did. Every path to a key's answer asks it, a request held
// and handled again (a parked read, a mode's) included: the answer of one
// that waited across the split would come from a state without the key.
func (r *Replica) refusesMoved(from wire.NodeID, req *wire.ClientRequest) bool {
	if r.owns(req.Op.Key) {
		return false
	}
	r.reply(from, req, wire.ErrKeyspaces, wire.Result{})
	return true
}

// splitPending reports whether the replica's history has not yet reached
// the epoch of its volume's latest split.
func (r *Replica) splitPending() bool {
	s := r.config.Split
	return !s.IsZero() && r.appliedEpoch < s.Epoch
}

// sequenceSplitMarker makes the head sequence the split's marker when its
// history has not reached the split's epoch, so every member reaches the
// point where it splits; it retries on ticks while backpressure defers it.
func (r *Replica) sequenceSplitMarker() {
	if !r.role.isHead() || r.phase != phaseRunning || !r.splitPending() || !r.admitsUpdate() {
		return
	}
	u := wire.Update{SN: r.applied + 1, Key: SplitKeyspaceMarker, Epoch: r.config.Epoch, Client: wire.NoClient,
		Result: wire.Result{Status: wire.StatusOK, SN: r.applied + 1}}
	r.apply(&u)
	r.afterApply()
}

// splitBefore applies the volume's split before u when u is the first
// update of the replica's history sequenced in the split's epoch or
// later. Every replica records the point, a joining server's too: the
// master learns it from the tail, whichever members seeded.
func (r *Replica) splitBefore(u *wire.Update) {
	s := r.config.Split
	if s.IsZero() || u.Epoch < s.Epoch || r.appliedEpoch >= s.Epoch {
		return
	}
	moved := r.moveSplitHalf(s)
	r.split = wire.SplitPoint{Into: s.Into, SN: u.SN, Epoch: u.Epoch}
	if moved == nil {
		return // a joining server seeds no sibling
	}
	r.seedSibling(s, moved)
	if r.observer != nil {
		r.observer.Seeded(r.id, s.Into, r.volume, r.applied)
	}
	if r.seedMade != nil {
		r.seedMade(s.Into)
	}
}

// moveSplitHalf deletes the objects of the half that moves from the
// replica and returns them, in key order: every member does, so their
// states stay equal. A joining server, which seeds no sibling, returns
// nil.
func (r *Replica) moveSplitHalf(s wire.Split) []storage.KeyObject {
	var moved []storage.KeyObject
	seeds := r.role.isMember()
	for from := ""; ; {
		keys, more := r.store.Keys(from, splitPage)
		for _, k := range keys {
			if s.Owns(k) {
				continue
			}
			if seeds {
				moved = append(moved, storage.KeyObject{Key: k, Object: r.store.Get(k)})
			}
			r.store.Set(k, kv.Object{})
		}
		if !more || len(keys) == 0 {
			break
		}
		from = keys[len(keys)-1] + "\x00"
	}
	if seeds && moved == nil {
		moved = []storage.KeyObject{}
	}
	return moved
}

// splitPage is how many keys a split reads at a time.
const splitPage = 1024

// seedSibling writes the sibling's replica on this server: the moved
// objects, every client session of this replica, the state's SN, and the
// split point (r.split), which the seed reports as its own (Into is the
// sibling: wire.VolumeStatus.Seed). It waits, wedged, for the master's
// first configuration of the sibling (Server.takeSeed restores it;
// Replica.Adopt takes it as a member).
func (r *Replica) seedSibling(s wire.Split, moved []storage.KeyObject) {
	if r.siblingStore == nil {
		panic(fmt.Sprintf("INVARIANT split: %s volume %d splits into %d without the server's engine", r.id, r.volume, s.Into))
	}
	sib := r.siblingStore(s.Into)
	sib.Reset() // (nothing of the sibling is here but an earlier seed)
	for _, ko := range moved {
		sib.Set(ko.Key, ko.Object)
	}
	for _, rec := range r.store.Sessions() {
		sib.SetSession(rec.Client, rec.AckedBelow, rec.LastSN)
		for _, o := range rec.Outcomes {
			sib.SetOutcome(rec.Client, o.ReqNo, o.Result)
		}
	}
	sib.SetMeta(storage.Meta{
		Config:  wire.Config{Volume: s.Into, Mode: r.config.Mode, K: r.config.K, Sites: r.config.Sites},
		Applied: r.applied, Seeded: true, CatchUpTo: 0, Split: r.split,
	})
}
