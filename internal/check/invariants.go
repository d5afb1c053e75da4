package check

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// Entry is one applied update in a replica's history: the update's
// identity and a digest of the history up to and including it, so two
// histories agree up to an SN exactly when their digests there are equal.
type Entry struct {
	Digest uint64
	Client wire.ClientID
	ReqNo  uint64
}

type replicaKey struct {
	node   wire.NodeID
	volume wire.VolumeID
}

// Histories records Hist_i of every replica (CR §3) as the replicas apply
// updates. It implements chain.Observer.
type Histories struct {
	current map[replicaKey][]Entry
	// retired keeps each replica's history from before its last reset: a
	// snapshot taken just before its source was removed may still arrive.
	retired map[replicaKey][]Entry
	// caughtUp and snapshots count the catch-ups and snapshots installed.
	caughtUp, snapshots int
	// seeds records, per volume made by a split, its parent and the SNs
	// its seeds hold (Seeded): one, but for a member that seeded from a
	// history the chain then lost (a head's updates no one else held).
	seeds map[wire.VolumeID][]SeedPoint
}

// SeedPoint is where a split seeded a volume: its parent and the SN of
// the parent's state the seed holds (the split applied before SN+1).
type SeedPoint struct {
	Parent wire.VolumeID
	SN     wire.SN
}

// NewHistories returns an empty recorder.
func NewHistories() *Histories {
	return &Histories{current: map[replicaKey][]Entry{}, retired: map[replicaKey][]Entry{}, seeds: map[wire.VolumeID][]SeedPoint{}}
}

// Of returns a replica's history (Hist_i); entry k-1 is SN k.
func (h *Histories) Of(node wire.NodeID, v wire.VolumeID) []Entry {
	return h.current[replicaKey{node, v}]
}

// Applied implements chain.Observer.
func (h *Histories) Applied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	k := replicaKey{node, v}
	hist := h.current[k]
	if u.SN != wire.SN(len(hist)+1) {
		panic(fmt.Sprintf("check: %s applied SN %d with a history of %d", node, u.SN, len(hist)))
	}
	var prev uint64
	if len(hist) > 0 {
		prev = hist[len(hist)-1].Digest
	}
	h.current[k] = append(hist, Entry{Digest: digest(prev, u), Client: u.Client, ReqNo: u.ReqNo})
}

// SnapshotInstalled implements chain.Observer: the joiner's history becomes
// the source's up to sn.
func (h *Histories) SnapshotInstalled(node wire.NodeID, v wire.VolumeID, from wire.NodeID, sn wire.SN) {
	src := h.current[replicaKey{from, v}]
	if len(src) < int(sn) {
		src = h.retired[replicaKey{from, v}]
	}
	if len(src) < int(sn) {
		panic(fmt.Sprintf("check: %s installed a snapshot at SN %d from %s, which never had it", node, sn, from))
	}
	h.current[replicaKey{node, v}] = append([]Entry(nil), src[:sn]...)
	h.snapshots++
}

// CaughtUp implements chain.Observer: a joining replica keeps its history
// of sn updates, which must be a prefix of the source's (the tail's
// choice of a catch-up over a snapshot, chain/catchup.go); the source's
// later updates reach it as forwards. It panics otherwise, failing the
// simulated run.
func (h *Histories) CaughtUp(node wire.NodeID, v wire.VolumeID, from wire.NodeID, sn wire.SN) {
	mine, src := h.current[replicaKey{node, v}], h.current[replicaKey{from, v}]
	if wire.SN(len(mine)) != sn || !IsPrefix(mine, src) {
		panic(fmt.Sprintf("check: %s caught up at SN %d from %s, but its history of %d updates is not a prefix of the %d of %s",
			node, sn, from, len(mine), len(src), from))
	}
	h.caughtUp++
}

// Seeded implements chain.Observer: a member of volume parent split and
// seeded volume v's replica on the same node with its state at sn, so
// that replica's history is the parent's up to sn (the sibling's SNs go
// on from the parent's). Every member of the sibling's first chain
// seeded at the same point: their histories are equal.
func (h *Histories) Seeded(node wire.NodeID, v, parent wire.VolumeID, sn wire.SN) {
	src := h.current[replicaKey{node, parent}]
	if wire.SN(len(src)) != sn {
		panic(fmt.Sprintf("check: %s seeded volume %d at SN %d from volume %d, whose history there has %d updates", node, v, sn, parent, len(src)))
	}
	h.current[replicaKey{node, v}] = slices.Clone(src)
	if p := (SeedPoint{parent, sn}); !slices.Contains(h.seeds[v], p) {
		h.seeds[v] = append(h.seeds[v], p)
	}
}

// Seeds returns where the members that seeded each volume made by a
// split did so.
func (h *Histories) Seeds() map[wire.VolumeID][]SeedPoint { return maps.Clone(h.seeds) }

// Transfers returns how many times a joining replica caught up and how
// many times it installed a snapshot.
func (h *Histories) Transfers() (catchUps, snapshots int) { return h.caughtUp, h.snapshots }

// Reset implements chain.Observer.
func (h *Histories) Reset(node wire.NodeID, v wire.VolumeID) {
	k := replicaKey{node, v}
	if len(h.current[k]) > 0 {
		h.retired[k] = h.current[k]
	}
	delete(h.current, k)
}

// Forget drops a crashed replica's history: its state is gone.
func (h *Histories) Forget(node wire.NodeID, v wire.VolumeID) { h.Reset(node, v) }

// Crashed cuts a crashed replica's history to the sn updates its disk
// kept: the ones it applied after its last commit are gone (a pipelined
// chain's member forwards before it commits, chain/durable.go). A replica
// reset (removed from its chain) whose reset was not committed yet keeps
// its earlier state on disk: its history is the retired one's prefix.
func (h *Histories) Crashed(node wire.NodeID, v wire.VolumeID, sn wire.SN) {
	k := replicaKey{node, v}
	hist := h.current[k]
	if retired := h.retired[k]; wire.SN(len(hist)) < sn && wire.SN(len(retired)) >= sn {
		h.current[k] = slices.Clone(retired[:sn])
		return
	}
	if wire.SN(len(hist)) < sn {
		panic(fmt.Sprintf("check: %s kept SN %d of volume %d on disk with a history of %d", node, sn, v, len(hist)))
	}
	if wire.SN(len(hist)) == sn {
		return
	}
	h.retired[k] = hist
	h.current[k] = slices.Clone(hist[:sn])
}

func digest(prev uint64, u *wire.Update) uint64 {
	f := fnv.New64a()
	var b [8]byte
	put := func(x uint64) { binary.LittleEndian.PutUint64(b[:], x); f.Write(b[:]) }
	put(prev)
	put(uint64(u.SN))
	put(uint64(u.Client))
	put(u.ReqNo)
	f.Write([]byte(u.Key))
	flags := uint64(0)
	if u.Changed {
		flags |= 1
	}
	if u.Deleted {
		flags |= 2
	}
	put(flags)
	put(uint64(u.Expires))
	f.Write(u.Value)
	return f.Sum64()
}

// IsPrefix reports whether history a is a prefix of history b.
func IsPrefix(a, b []Entry) bool {
	if len(a) > len(b) {
		return false
	}
	return len(a) == 0 || a[len(a)-1].Digest == b[len(a)-1].Digest
}

// ReplicaState is what the invariant checks read of one live replica.
type ReplicaState struct {
	ID        wire.NodeID
	Applied   wire.SN
	SentFirst wire.SN // 0 when Sent is empty
	SentLast  wire.SN
}

// ChainInvariants checks CR §3's invariants over the live replicas of one
// configuration, given in chain order (head first, then the joining
// server if any); tail is the configuration's tail, or nil if it is not
// live. It returns a description of the first violation, or "".
//
//	Update Propagation: Hist_j is a prefix of Hist_i when i precedes j.
//	Inprocess Requests: Hist_i = Hist_tail ⊕ Sent_i, that is, every
//	update i applied beyond the tail is on Sent_i.
func (h *Histories) ChainInvariants(v wire.VolumeID, chain []ReplicaState, tail *ReplicaState) string {
	for i := range chain {
		hi := h.Of(chain[i].ID, v)
		if wire.SN(len(hi)) != chain[i].Applied {
			return fmt.Sprintf("%s reports applied %d but applied %d updates", chain[i].ID, chain[i].Applied, len(hi))
		}
		for j := i + 1; j < len(chain); j++ {
			if hj := h.Of(chain[j].ID, v); !IsPrefix(hj, hi) {
				return fmt.Sprintf("update propagation: Hist(%s) (%d updates) is not a prefix of Hist(%s) (%d updates)",
					chain[j].ID, len(hj), chain[i].ID, len(hi))
			}
		}
	}
	if tail == nil {
		return ""
	}
	for _, r := range chain {
		if r.ID == tail.ID || r.Applied <= tail.Applied {
			continue
		}
		if r.SentFirst == 0 || r.SentFirst > tail.Applied+1 || r.SentLast != r.Applied {
			return fmt.Sprintf("inprocess requests: %s applied %d, tail %s applied %d, but Sent(%s) covers [%d, %d]",
				r.ID, r.Applied, tail.ID, tail.Applied, r.ID, r.SentFirst, r.SentLast)
		}
	}
	return ""
}
