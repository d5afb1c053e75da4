package master

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// Stalled links between chain neighbours (docs/adr/0002-leases-and-epochs.md).
//
// Two servers that both talk to the master may still lose everything one
// sends the other: a one-way fault. The failure detector proper (Tick,
// deaf) hears both, so without more the chain stalls for as long as the
// fault lasts. Every head and middle member therefore reports, per
// volume, how long it has held updates for its successor without the
// acknowledgements from down the chain advancing
// (wire.VolumeStatus.StalledFor). A link that carries nothing either way
// (forwards or SyncReplies lost, or acknowledgements or SyncRequests
// lost) stalls its predecessor and every member above it, and no member
// below it; so the last member reporting a stall is the predecessor of
// the faulty link, and the master cuts the fault out of that chain.
//
// The rule. When the last member P reporting a stall in a volume's
// current epoch has reported it for longer than the failure timeout, the
// leader cuts P's successor S, unless it already cut a successor of P in
// this volume for P's stall (one of P's earlier successors): then P
// itself is the common end of two stalled links and is cut instead, unless
// the master no longer hears S either (silent): a successor that stopped
// heartbeating explains the stall on its own, and P, which holds every
// update S held, is the member to keep. (Cutting P there once cost a
// chain its last live copy: its successor crashed and the failure
// detector had not yet removed it when P was cut; a false suspicion of
// the tail then left only the crashed member; `catena-lab sim -faults
// -mode causal -sites 3 -seed 52` with waits held for notices.) The
// argument:
//
//   - It cuts the fault out: the stalled link is P→S (no later member
//     stalls), and either end of it goes.
//   - It cannot remove every member one after the other. A fault at S's
//     end costs S only. A fault at P's end costs at most one innocent
//     successor, then P; it never walks down the chain removing each new
//     successor of a faulty P. A chain with a stalled link has two
//     members at least, and a cut removes one, so a chain is never left
//     empty (as CmdRemove, it may leave one member, which the placement
//     policy extends again).
//   - It loses no answered update, and keeps a member known to hold them
//     all (VolumeStatus.Complete, lastComplete). A member's history is a
//     prefix of its predecessor's (Update Propagation), and a complete
//     member's predecessor is complete too, so cutting any member but the
//     head leaves its predecessor holding everything it held. The head
//     is cut only if its successor reported itself complete in this
//     epoch (in a strong chain every member is): otherwise what the head
//     holds beyond it may have been answered. A head of a causal chain
//     of k = 1 answers alone and its successor is never complete; a
//     successor that moved into the first k catches up from its
//     predecessor, which the stalled link may prevent. Such a head is
//     not cut: the rule cuts its successors instead, until it is the
//     chain's only member.
//   - It keeps the lease promise. A cut removes a server that is alive
//     and may be serving (a tail answering reads), so the leader first
//     stops renewing its lease and proposes the cut only once the last
//     lease it granted has surely expired, as for a silent server
//     (LeaseGuard, plus LeadershipWindow for a lease a deposed leader
//     granted). Its lease is server-wide, so its other volumes pause for
//     about a lease too.
//
// A stall report counts only from a member alive in the volume's current
// epoch, and not while an extension is under way (a tail paused for the
// hand-off legitimately acknowledges nothing until the promotion, which
// starts a new epoch). What the leader remembers of earlier cuts is soft
// state: a new leader may cut one more innocent successor. It forgets
// nothing while it leads: a member that once had its successor cut, and
// later stalls because a new successor is faulty, is cut in that
// successor's place. That costs one removal more, since the faulty
// member's next predecessor then reports it in turn.

// stallCut is a cut the leader decided: Victim leaves Volume's chain of
// Epoch once its lease has run out.
type stallCut struct {
	epoch wire.Epoch
	// victim is pred (the member reporting the stall) or succ (its
	// successor).
	victim, pred, succ wire.NodeID
	// proposed is set once CmdCut went to the log; the victim gets no
	// lease until the epoch changes.
	proposed bool
}

// blame records, per volume, the member whose stall made the leader cut
// its successor last, and that successor.
type blame struct{ pred, succ wire.NodeID }

// stalledFor returns how long id reports its link to its successor in c
// stalled: 0 unless id is alive and reported on c's epoch.
func (m *Master) stalledFor(id wire.NodeID, c *wire.Config) wire.Time {
	st := m.servers[id]
	if st == nil || !st.alive {
		return 0
	}
	s, ok := st.status[c.Volume]
	if !ok || s.Epoch != c.Epoch {
		return 0
	}
	return s.StalledFor
}

// noticeStall decides a cut for volume v if its chain has a link stalled
// past the failure timeout (see the rule above). Leader only.
func (m *Master) noticeStall(now wire.Time, v wire.VolumeID) {
	c := m.configs[v]
	if c == nil || c.Joining != "" || m.cuts[v] != nil || m.pending(now, v) {
		return
	}
	// The last member stalled past half the timeout: a member further
	// down that stalls as well started a little later, and is the one
	// waited for.
	last := -1
	for i, id := range c.Chain[:max(len(c.Chain)-1, 0)] {
		if m.stalledFor(id, c) > m.opts.FailureTimeout/2 {
			last = i
		}
	}
	if last < 0 || m.stalledFor(c.Chain[last], c) <= m.opts.FailureTimeout {
		return
	}
	cut := &stallCut{epoch: c.Epoch, pred: c.Chain[last], succ: c.Chain[last+1]}
	cut.victim = cut.succ
	if b, ok := m.blamed[v]; ok && b.pred == cut.pred && b.succ != cut.succ && m.mayCut(c, cut.pred) {
		cut.victim = cut.pred
	}
	m.cuts[v] = cut
}

// silent reports whether the master has not heard id for longer than half
// the failure timeout: a server that stopped heartbeating (crashed, most
// likely), which explains its predecessor's stall on its own.
func (m *Master) silent(now wire.Time, id wire.NodeID) bool {
	st := m.servers[id]
	return st == nil || !st.alive || now-st.lastHeard > m.opts.FailureTimeout/2
}

// mayCut reports whether the leader may cut id from c (the rule above):
// cuttable, and if it is the head, its successor reported itself
// complete in c's epoch (every member of a strong chain is).
func (m *Master) mayCut(c *wire.Config, id wire.NodeID) bool {
	if !cuttable(c, id) {
		return false
	}
	if c.Index(id) > 0 || !c.Causal() {
		return true
	}
	st := m.servers[c.Chain[1]]
	if st == nil || !st.alive {
		return false
	}
	s, ok := st.status[c.Volume]
	return ok && s.Epoch == c.Epoch && s.Complete
}

// cuttable reports what CmdCut checks when it applies, from the
// configuration alone: id is a member of two or more, and not the head of
// a causal chain of k = 1, which answers updates alone (kept).
func cuttable(c *wire.Config, id wire.NodeID) bool {
	i := c.Index(id)
	return i >= 0 && len(c.Chain) >= 2 && !(i == 0 && c.Causal() && kept(c) <= 1)
}

// cutting reports whether the leader withholds id's lease for a cut.
func (m *Master) cutting(id wire.NodeID) bool {
	for _, cut := range m.cuts {
		if cut.victim == id {
			return true
		}
	}
	return false
}

// proposeCuts drops the cuts whose chain moved on or whose link
// recovered before they were proposed, and proposes those whose victim's
// lease has run out. Leader only.
func (m *Master) proposeCuts(now wire.Time) {
	for _, v := range slices.Sorted(maps.Keys(m.cuts)) {
		cut, c := m.cuts[v], m.configs[v]
		switch {
		case c == nil || c.Epoch != cut.epoch:
			delete(m.cuts, v) // applied, or another change came first
			continue
		case !cut.proposed && (m.stalledFor(cut.pred, c) <= m.opts.FailureTimeout/2 || !m.mayCut(c, cut.victim)):
			delete(m.cuts, v) // the link carries updates again, or a report changed
			continue
		case !cut.proposed && cut.victim == cut.pred && m.silent(now, cut.succ):
			// The successor fell silent while the predecessor's lease ran
			// out: it explains the stall, and the failure detector (or the
			// next stall report) removes it instead.
			delete(m.cuts, v)
			continue
		case m.pending(now, v):
			continue
		}
		if st := m.servers[cut.victim]; st != nil {
			if now-st.lastGrant <= m.opts.LeaseGuard()+m.opts.LeadershipWindow {
				continue
			}
			// INVARIANT lease: the victim's lease has expired before a
			// configuration without it is installed.
			if now < st.lastGrant+m.opts.LeaseGuard() {
				panic(fmt.Sprintf("INVARIANT lease: cutting %s at %d before its lease guard ends at %d", cut.victim, now, st.lastGrant+m.opts.LeaseGuard()))
			}
		}
		m.mayPropose(now, v)
		cut.proposed = true
		if cut.victim == cut.succ {
			m.blamed[v] = blame{pred: cut.pred, succ: cut.succ}
		} else {
			delete(m.blamed, v)
		}
		m.submit(now, Command{Kind: CmdCut, Server: cut.victim, Volume: v, Epoch: cut.epoch})
	}
}

// applyCut removes Server from Volume's chain of Epoch (CmdCut).
func (m *Master) applyCut(c Command) {
	cur := m.configs[c.Volume]
	if cur == nil || cur.Epoch != c.Epoch || !cuttable(cur, c.Server) {
		return
	}
	next := cur.Clone()
	next.Joining = "" // any change aborts an extension
	next.Chain = slices.DeleteFunc(next.Chain, func(id wire.NodeID) bool { return id == c.Server })
	m.install(next, cur)
	if m.leading && len(m.cutNotes) < refusalsMax {
		m.cutNotes = append(m.cutNotes, fmt.Sprintf("volume %d: cut %s out of chain %v (epoch %d): a link of it carried nothing; now %v (epoch %d)",
			c.Volume, c.Server, cur.Chain, cur.Epoch, next.Chain, next.Epoch))
	}
}
