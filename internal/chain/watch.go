package chain

import (
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Watches (docs/adr/0032-watch-and-leases.md). A revision is a volume's
// SN. Any member of a strong chain answers an OpWatch from its catch-up
// log (catchup.go: the updates it applied last, in SN order), with the
// updates after the revision asked for to the keys watched, never past
// its committed SN: every member's committed SN is an SN the tail
// processed (CR §3: the tail's acknowledgements set it), so nothing a
// failure could take back is delivered. A member with nothing to send
// holds the request until an update it can deliver commits, the
// volume's history passes a split, or the hold time ends (then it
// answers with how far it looked), so a watcher waits one round trip
// for a change, not a polling interval. Updates that left the log (or
// were never in it: a restart, a snapshot) are answered Compacted with
// the oldest revision the log can serve, once that revision is committed.

// watchesMax bounds the watches one replica holds; beyond it a watch is
// answered at once with what there is (the client asks again).
const watchesMax = 4096

// heldWatch is a watch a member holds while it has nothing to send: the
// page so far (no events; Through how far it looked), the revision it
// was asked from, and when the hold ends.
type heldWatch struct {
	from  wire.NodeID
	req   *wire.ClientRequest
	page  wire.WatchPage
	since wire.SN
	until wire.Time
}

// handleWatch answers an OpWatch, or holds it (see above).
func (r *Replica) handleWatch(from wire.NodeID, req *wire.ClientRequest) {
	switch {
	case !r.role.isMember() || r.phase != phaseRunning:
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	case r.config.Mode != wire.ModeStrong:
		// A causal member's committed SN is not the tail's, and other
		// sites' updates arrive out of SN order: not designed yet.
		r.reply(from, req, wire.ErrBadRequest, wire.Result{})
		return
	}
	w := heldWatch{from: from, req: req, until: r.now + req.Op.TTL}
	if req.Op.Delta == wire.WatchFromNow {
		w.page.Through = r.watchable()
		r.answerWatch(&w)
		return
	}
	w.page.Through = wire.SN(req.Op.Delta)
	if mutation.Enabled && r.mutations.WatchResumesLate && w.page.Through < r.watchable() {
		w.page.Through++
	}
	w.since = w.page.Through
	if r.extendWatch(&w) || req.Op.TTL == 0 || len(r.watches) >= watchesMax {
		r.answerWatch(&w)
		return
	}
	r.watches = append(r.watches, w)
}

// watchable returns the highest revision this member delivers: its
// committed SN.
func (r *Replica) watchable() wire.SN {
	if mutation.Enabled && r.mutations.WatchDeliversUncommitted {
		return r.applied
	}
	return min(r.committed, r.applied)
}

// extendWatch adds to w's page the updates after its Through, up to
// what this member delivers, and reports whether the page should be sent
// now: it holds events, says Compacted, or passed the volume's split
// (from a revision before its point: a watch asked from past it waits
// for its events, as any other).
func (r *Replica) extendWatch(w *heldWatch) bool {
	p := &w.page
	last := r.watchable()
	if p.Through >= last {
		return false
	}
	if !r.recent.holds(p.Through + 1) {
		oldest := r.watchOldest()
		if oldest > last {
			// The oldest update held is not committed: a failure may
			// take it back and the chain commit another at its SN,
			// which a watch from there would skip. Wait for the commit.
			return false
		}
		p.Compacted, p.Oldest = true, oldest
		return true
	}
	size := 0
	for sn := p.Through + 1; sn <= last; sn++ {
		u := r.recent.at(sn)
		if e, ok := watchEvent(u); ok && wire.WatchMatches(w.req.Op, u.Key) {
			n := len(e.Key) + len(e.Value) + 32
			if len(p.Events) == wire.WatchPageEvents || len(p.Events) > 0 && size+n > wire.WatchPageBytes {
				break
			}
			p.Events, size = append(p.Events, e), size+n
		}
		p.Through = sn
	}
	r.noteSplit(p)
	return len(p.Events) > 0 || !p.Split.IsZero() && w.since < p.Split.SN
}

// noteSplit names in p the volume's latest split once p's Through has
// reached its point (wire.WatchPage.Split): every page at or past it
// does, one that looked no further than the revision asked for too (a
// watch from now, a hold that ended), so that a watcher that did not
// know of the split learns to follow the new volume.
func (r *Replica) noteSplit(p *wire.WatchPage) {
	if s := r.split; !s.IsZero() && s.Into == r.config.Split.Into && s.SN <= p.Through {
		p.Split, p.SplitModulus = s, r.config.Split.Modulus
	}
}

// watchOldest returns the oldest revision a watch can start from here:
// the SN before the first update in the catch-up log, or the applied SN
// when the log is empty. A page names it only once it is committed
// (extendWatch).
func (r *Replica) watchOldest() wire.SN {
	if r.recent.len() == 0 {
		return r.applied
	}
	return r.recent.firstSN() - 1
}

// watchEvent returns the event an update makes: none for an update that
// changed nothing or for a split's marker.
func watchEvent(u *wire.Update) (wire.WatchEvent, bool) {
	if !u.Changed || u.Key == SplitKeyspaceMarker {
		return wire.WatchEvent{}, false
	}
	e := wire.WatchEvent{SN: u.SN, Key: u.Key}
	switch {
	case !u.Deleted:
		e.Kind, e.Value, e.Expires, e.Type = wire.WatchPut, u.Value, u.Expires, u.Type
	case u.Client == wire.NoClient:
		e.Kind = wire.WatchExpire // (the head's reclaim: expiry.go)
	default:
		e.Kind = wire.WatchDelete
	}
	return e, true
}

// answerWatch sends w's page.
func (r *Replica) answerWatch(w *heldWatch) {
	r.noteSplit(&w.page)
	r.replyAs(w.from, w.req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true,
		Value: wire.EncodeWatchPage(w.page), SN: w.page.Through}, false)
}

// serveWatches answers the held watches that have something to send, or
// whose hold ended, or every one (all: the replica's configuration or
// state changes, and the watchers ask again).
func (r *Replica) serveWatches(all bool) {
	kept := r.watches[:0]
	for i := range r.watches {
		w := &r.watches[i]
		if r.extendWatch(w) || all || r.now >= w.until {
			r.answerWatch(w)
			continue
		}
		kept = append(kept, *w)
	}
	clear(r.watches[len(kept):])
	r.watches = kept
}

// Watches returns how many watches the replica holds (metrics, tests).
func (r *Replica) Watches() int { return len(r.watches) }

// WatchWindow returns the depth of the window watches are served from:
// how many updates the catch-up log holds, and the oldest revision a
// watch can start from here (metrics, tests).
func (r *Replica) WatchWindow() (updates int, oldest wire.SN) {
	return r.recent.len(), r.watchOldest()
}
