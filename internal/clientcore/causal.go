package clientcore

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction's client (§III): on a causal volume (wire.Config.K > 0)
// the core keeps per key the newest unstable version it saw (keyMetadata),
// sends each read to a member the metadata allows, and holds each update
// until the versions it depends on are stable (dependency stabilisation).
// See docs/adr/0010-causal-mode.md.

// waitKey names one version of one key an update waits to see stable.
type waitKey struct {
	key     string
	version wire.SN
}

// causalTarget returns the member a read on a causal volume goes to and
// the version it must hold: with no metadata for the key (never seen, or
// stable) any member; otherwise a random member at an index up to the
// one known to hold the version (ChainReaction's [head, chainIndex]).
// After a reconfiguration the index may name a member that lacks the
// version; it passes the read up (chain.QueryUp). In one site the version
// is at least the volume's floor, and OpWaitStable goes to the head,
// which learns last that a version is committed; across sites to the
// tail, which learns first (internal/chain/causal).
func (c *Core) causalTarget(now wire.Time, cfg wire.Config, o *operation) (wire.NodeID, wire.SN) {
	kv, ok := c.metadata.lookup(o.op.Key)
	var version wire.SN
	if ok {
		version = kv.Version
	}
	if o.op.Kind == wire.OpWaitStable {
		if !cfg.Geo() && !(mutation.Enabled && c.opts.Mutations.CausalStableAtTail) {
			return cfg.Head(), o.waitFor
		}
		return cfg.Tail(), o.waitFor
	}
	if !cfg.Geo() && !(mutation.Enabled && c.opts.Mutations.CausalNoFloor) {
		version = max(version, c.floors[cfg.Volume].committed)
	}
	if o.op.Kind == wire.OpWaitShipped {
		return cfg.Tail(), 0
	}
	if c.opts.CausalReadsAtTail {
		return cfg.Tail(), version
	}
	n := len(cfg.Chain)
	if mutation.Enabled && c.opts.Mutations.CausalReadsAnywhere {
		return cfg.Chain[c.opts.Rand.IntN(n)], 0
	}
	if ok {
		n = min(n, kv.Position+1)
	}
	if o.strong {
		// A member found the key's newest version not yet on k members,
		// or was not a member: ask the last member of the eager phase,
		// which holds only versions on k members (or passes the read up
		// if a reconfiguration left it without the client's version).
		return cfg.Chain[max(min(cfg.K, len(cfg.Chain))-1, 0)], version
	}
	return c.pickMember(now, cfg.Chain[:max(n, 1)]), version
}

// pickMember returns a member of chain at random, one no attempt went
// unanswered at lately if there is one (Core.suspects).
func (c *Core) pickMember(now wire.Time, chain []wire.NodeID) wire.NodeID {
	i := c.opts.Rand.IntN(len(chain))
	for j := range chain {
		if id := chain[(i+j)%len(chain)]; c.suspects[id] <= now {
			return id
		}
	}
	return chain[i]
}

// waitForDependencies starts an update on a causal volume: unless the
// client holds no unstable version, the update waits until every version
// in its metadata is stable (its last write, and the unstable versions
// it read since), so that its own version becomes visible only when its
// dependencies are readable at every replica (ChainReaction's visibility
// rule). It reports whether the update waits.
//
// The version of the key being written needs no wait: the head sequences
// the update after it and every member applies in SN order, so a reader
// that sees the new version can see nothing older of the key anywhere it
// may read (its metadata sends it up the chain), and the old version's
// own dependencies were stable before it was written. (Other keys of the
// same volume do need the wait: a reader that never touched them may
// read them at a member that lacks the update.) The update carries that
// version (ClientRequest.MinVersion) and a head that has not applied it
// refuses the update (ErrUnknownVersion: the version was lost to more
// failures than k tolerates), so the rule needs no trust in the chain's
// history.
func (c *Core) waitForDependencies(now wire.Time, o *operation) bool {
	if c.metadata.len() == 0 && len(c.floors) == 0 || c.opts.SkipDependencyWait {
		return false
	}
	o.deps = maps.Clone(c.metadata.entries)
	if own, ok := o.deps[o.op.Key]; ok {
		delete(o.deps, o.op.Key)
		o.ownVolume, o.ownVersion = own.Volume, own.Version
	}
	c.floorDependencies(o)
	if len(o.deps) == 0 {
		return false
	}
	for _, key := range slices.Sorted(maps.Keys(o.deps)) {
		wk := waitKey{key: key, version: o.deps[key].Version}
		w := c.ops[c.waits[wk]]
		if w == nil {
			w = c.startWait(now, wk)
		}
		w.dependents = append(w.dependents, o.id)
		o.blockedOn++
	}
	o.state, o.retryAt = opQueued, 0
	return true
}

// floor is what a client knows of a causal volume of one site.
type floor struct {
	// committed is the highest SN the client learned the tail committed,
	// from an answer about key.
	committed wire.SN
	key       string
	// everywhere is the highest SN the head told it committed: every
	// member knows (OpWaitStable's answer).
	everywhere wire.SN
}

// observeFloor records what a causal volume of one site answered to o and
// reports whether the answer is stable: said so, or as of an SN at or
// below the volume's floor (every member applied it). A stable answer
// raises the floor, and the head's answer to a wait what every member
// knows.
func (c *Core) observeFloor(o *operation, m *wire.ClientReply) bool {
	f := c.floors[m.Volume]
	stable := m.Stable || m.Result.SN <= f.committed
	if !stable {
		return false
	}
	if m.Result.SN > f.committed {
		f.committed, f.key = m.Result.SN, o.op.Key
	}
	if o.op.Kind == wire.OpWaitStable && !(mutation.Enabled && c.opts.Mutations.CausalStableAtTail) {
		f.everywhere = max(f.everywhere, m.Result.SN)
	}
	c.floors[m.Volume] = f
	return true
}

// floorDependencies adds to an update's dependencies, for each causal
// volume of one site other than its own whose floor not every member
// knows committed, the floor: a reader that sees the update must find
// what this client saw there at whichever member it asks, and members
// answer as of their committed SN (internal/chain/causal). In the
// update's own volume its SN orders it after the floor already.
func (c *Core) floorDependencies(o *operation) {
	own, routed := c.volumeOf(o.op.Key)
	for v, f := range c.floors {
		if f.committed <= f.everywhere || routed && v == own {
			continue
		}
		if d, ok := o.deps[f.key]; !ok || d.Version < f.committed {
			o.deps[f.key] = KeyVersion{Volume: v, Version: f.committed}
		}
	}
}

// startWait starts the internal operation that waits for one version to
// be stable.
func (c *Core) startWait(now wire.Time, wk waitKey) *operation {
	id := c.nextID
	c.nextID++
	w := &operation{id: id, reqNo: uint64(id), op: wire.Op{Kind: wire.OpWaitStable, Key: wk.key}, internal: true, waitFor: wk.version}
	c.ops[id] = w
	c.order = append(c.order, id)
	c.internal++
	c.waits[wk] = id
	if !c.awaitNotice(now, w) {
		c.send(now, w)
	}
	return w
}

// finishWait ends an internal wait: its updates go out once nothing else
// holds them. A wait ends without an answer only when every update that
// waited on it has ended (releaseWaits), or when the chain has lost the
// version (the update can wait for nothing that will come).
func (c *Core) finishWait(now wire.Time, w *operation, outcome Outcome) {
	c.internal--
	if w.arrival != nil {
		c.finishArrival(w)
	}
	if w.shipped != nil {
		c.finishShipWait(now, w, outcome)
		return
	}
	delete(c.waits, waitKey{key: w.op.Key, version: w.waitFor})
	for _, id := range w.dependents {
		o := c.ops[id]
		if o == nil || o.blockedOn == 0 {
			continue
		}
		o.blockedOn--
		if o.blockedOn == 0 && outcome != Unavailable {
			c.send(now, o)
		}
	}
}

// releaseWaits, for an update that ended, cancels the waits no other
// update needs.
func (c *Core) releaseWaits(now wire.Time, o *operation) {
	if o.blockedOn == 0 {
		return
	}
	o.blockedOn = 0
	for _, key := range slices.Sorted(maps.Keys(o.deps)) {
		w := c.ops[c.waits[waitKey{key: key, version: o.deps[key].Version}]]
		if w == nil {
			continue
		}
		w.dependents = slices.DeleteFunc(w.dependents, func(id OpID) bool { return id == o.id })
		if len(w.dependents) == 0 {
			c.finish(now, w, Done{Outcome: Unavailable})
		}
	}
}

// Dependencies returns the unstable versions an unfinished update waited
// for before it was sent (nil for a strong volume's update or an
// unknown id): the simulator checks that each was stable when the head
// applied the update.
func (c *Core) Dependencies(id OpID) map[string]KeyVersion {
	if o := c.ops[id]; o != nil {
		return maps.Clone(o.deps)
	}
	return nil
}
