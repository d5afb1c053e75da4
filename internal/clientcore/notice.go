package clientcore

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// Stable notices (docs/adr/0025-stable-notices-and-peers-first.md). Before each update a
// causal client waits until the versions it depends on are stable
// (waitForDependencies), its own previous update almost always among
// them; ChainReaction asks the member that knows, one request per
// update. That member tells the writer instead, unasked, once it knows
// the update stable (chain.Traits.StableNotice): the update's answer
// again, stable. A notice drops the key's metadata, so a later update
// needs no wait on it; a wait that began before the notice came is held
// unsent as though sent, and the notice answers it. A notice lost with a
// failed server costs that wait one attempt timeout, after which it goes
// out as a request as before; a volume whose servers send no notices (an
// older version) never holds a wait back.

// stableNotice is one of the client's own updates answered before it was
// stable: the notice of its version is expected.
type stableNotice struct {
	volume  wire.VolumeID
	key     string
	version wire.SN
}

// stableNotices are the notices a client expects, by the request number
// of their update and by key (the latest update of each key).
type stableNotices struct {
	byReqNo map[uint64]stableNotice
	byKey   map[string]uint64
	// from holds the volumes a notice came from: a wait is held back only
	// for those.
	from map[wire.VolumeID]bool
}

// noticesMax bounds the notices a client expects; past it, those whose
// key's metadata moved on are forgotten, then the oldest.
const noticesMax = 1024

func newStableNotices() stableNotices {
	return stableNotices{byReqNo: map[uint64]stableNotice{}, byKey: map[string]uint64{}, from: map[wire.VolumeID]bool{}}
}

// forget drops the notice of request reqNo.
func (s *stableNotices) forget(reqNo uint64) {
	n, ok := s.byReqNo[reqNo]
	if !ok {
		return
	}
	delete(s.byReqNo, reqNo)
	if s.byKey[n.key] == reqNo {
		delete(s.byKey, n.key)
	}
}

// expectNotice records that the client's update reqNo wrote version of
// key and was answered unstable.
func (c *Core) expectNotice(reqNo uint64, volume wire.VolumeID, key string, version wire.SN) {
	s := &c.notices
	if prev, ok := s.byKey[key]; ok {
		s.forget(prev) // the metadata holds the newer version only
	}
	s.byReqNo[reqNo] = stableNotice{volume: volume, key: key, version: version}
	s.byKey[key] = reqNo
	if len(s.byReqNo) <= noticesMax {
		return
	}
	for _, r := range slices.Sorted(maps.Keys(s.byReqNo)) {
		n := s.byReqNo[r]
		if kv, ok := c.metadata.lookup(n.key); !ok || kv.Version != n.version || len(s.byReqNo) > noticesMax {
			s.forget(r)
		}
	}
}

// awaitNotice holds back wait w, as though sent, when the version it
// waits for is the client's own update whose notice its volume sends; it
// reports whether it did.
func (c *Core) awaitNotice(now wire.Time, w *operation) bool {
	reqNo, ok := c.notices.byKey[w.op.Key]
	if !ok || c.opts.AttemptTimeout <= 0 {
		return false
	}
	n := c.notices.byReqNo[reqNo]
	cfg, known := c.configs[n.volume]
	if !known || !c.notices.from[n.volume] || n.version < w.waitFor || len(cfg.Chain) == 0 {
		return false
	}
	w.volume, w.routed = n.volume, true
	w.state, w.sentAt, w.retryAt = opSent, now, 0
	w.sentTo, _ = c.causalTarget(now, cfg, w) // the member its request would go to
	w.attempts++
	c.armAt(now + c.opts.AttemptTimeout)
	return true
}

// handleStableNotice takes an answer to a finished request: the notice
// that the client's update is stable, or a duplicate to ignore. In one
// site only the head's notice says every member knows (the waits' rule,
// internal/chain/causal); a tail's (a new tail answers again what it
// processed) is a stable answer like a read's.
func (c *Core) handleStableNotice(now wire.Time, from wire.NodeID, m *wire.ClientReply) {
	n, ok := c.notices.byReqNo[m.ReqNo]
	if !ok || !m.Stable || m.Err != wire.ErrNone || n.volume != m.Volume || m.Result.SN != n.version {
		return
	}
	cfg := c.configs[m.Volume]
	everywhere := cfg.Geo() || m.Position == 0
	if !cfg.Geo() {
		f := c.floors[m.Volume]
		if n.version > f.committed {
			f.committed, f.key = n.version, n.key
		}
		if everywhere {
			f.everywhere = max(f.everywhere, n.version)
		}
		c.floors[m.Volume] = f
	}
	c.metadata.observe(n.key, KeyVersion{Volume: m.Volume, Epoch: m.Epoch, Version: n.version, Position: m.Position}, true)
	if !everywhere {
		return
	}
	c.notices.forget(m.ReqNo)
	c.notices.from[m.Volume] = true
	var answered []OpID
	for wk, id := range c.waits {
		if wk.key == n.key && wk.version <= n.version {
			answered = append(answered, id)
		}
	}
	slices.Sort(answered)
	for _, id := range answered {
		if w := c.ops[id]; w != nil {
			c.finish(now, w, Done{Outcome: OK, Result: m.Result, From: from})
		}
	}
}
