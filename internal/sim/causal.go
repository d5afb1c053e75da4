package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Causal mode (Options.Causal): the default keyspace is causal with k
// drawn per seed, clients write unique values and read them back, and
// the run is checked for causal convergence (check.CausalConvergence)
// instead of linearizability, with ChainReaction's white-box invariants
// (NOTES A4.3) asserted as the run goes:
//
//	I1 Update Propagation: the chain invariants every run checks.
//	I2 Visibility: when the head applies an update, every version the
//	   client had seen unstable when it started it is at its tail, or,
//	   for the key the update writes, has a lower SN (members apply in
//	   SN order, so it is wherever the update is).
//	I3 Metadata soundness: a client's (version, position, epoch) for a
//	   key holds: every member up to the position holds the version.
//	I4 Stable only at the tail: an answer that calls a version stable is
//	   sent only once the tail holds it.
//	I5 Acks after k: an update is answered only once k members hold it.
//	I7 Answered updates survive: after every step, a live member of the
//	   newest configuration holds the newest answered update of each
//	   volume at its SN. The fault guard (causalLosesData) keeps crashes
//	   from breaking it; configuration changes must not break it either.

// reqKey identifies one request of one client.
type reqKey struct {
	client wire.ClientID
	reqNo  uint64
}

// causalRecord is what the simulator knows beyond the protocol's state,
// for the causal invariants and the fault guard.
type causalRecord struct {
	// updates holds the requests that are updates, with the client's
	// unstable versions when it started each (I2).
	updates map[reqKey]map[string]clientcore.KeyVersion
	// acked is, per volume, the highest SN an update was answered with
	// (the fault guard keeps a live member holding it), and newest the
	// update answered with it (I7).
	acked  map[wire.VolumeID]wire.SN
	newest map[wire.VolumeID]reqKey
}

func (c *Cluster) causal() bool { return c.opts.Causal }

// started records an operation a simulated client started.
func (c *Cluster) started(cl *client, id clientcore.OpID, op wire.Op) {
	if !c.causal() || op.Kind.IsQuery() {
		return
	}
	seen := map[string]clientcore.KeyVersion{}
	for _, key := range cl.keys {
		if kv, ok := cl.core.KeyVersion(key); ok {
			seen[key] = kv
		}
	}
	c.record.updates[reqKey{cl.clientID, uint64(id)}] = seen
}

// member returns a live server's replica of a volume that has adopted
// epoch e and takes part in its chain, or nil.
func (c *Cluster) member(id wire.NodeID, v wire.VolumeID, e wire.Epoch) *chain.Replica {
	s := c.server(id)
	if s == nil {
		return nil
	}
	r := s.Replica(v)
	if r == nil || r.Wedged() || r.Config().Epoch != e {
		return nil
	}
	return r
}

// tailApplied returns what the tail of v's newest configuration has
// applied; ok is false while it is down or has not adopted it.
func (c *Cluster) tailApplied(v wire.VolumeID) (wire.SN, bool) {
	cfg := c.VolumeConfig(v)
	r := c.member(cfg.Tail(), v, cfg.Epoch)
	if r == nil {
		return 0, false
	}
	return r.AppliedSN(), true
}

// checkCausalReply asserts I3 (at the moment a position is handed out),
// I4 and I5 on an answer a server sends.
func (c *Cluster) checkCausalReply(n *node, env wire.Envelope) {
	rep, ok := env.Msg.(*wire.ClientReply)
	if !ok || rep.Err != wire.ErrNone || !c.causal() {
		return
	}
	s, ok := n.machine.(serverMachine)
	if !ok || s.Replica(rep.Volume) == nil {
		return
	}
	cfg := s.Replica(rep.Volume).Config()
	if !cfg.Causal() {
		return
	}
	sn := rep.Result.SN
	if rep.Stable {
		if applied, ok := c.tailApplied(rep.Volume); ok && applied < sn {
			panic(fmt.Sprintf("INVARIANT I4 stable at the tail: %s calls version %d of volume %d stable, the tail has applied %d", n.id, sn, rep.Volume, applied))
		}
	}
	for i := 0; i <= rep.Position && i < len(cfg.Chain); i++ {
		if r := c.member(cfg.Chain[i], rep.Volume, rep.Epoch); r != nil && r.AppliedSN() < sn {
			panic(fmt.Sprintf("INVARIANT I3 metadata: %s hands out version %d at position %d of %v, but %s at %d has applied %d",
				n.id, sn, rep.Position, cfg, cfg.Chain[i], i, r.AppliedSN()))
		}
	}
	if _, update := c.record.updates[reqKey{rep.Client, rep.ReqNo}]; !update {
		return
	}
	// The answering member applied the update, and by Update Propagation
	// (I1, checked after every step) so did every member before it: the
	// first Position+1 members hold it. A stable answer (the head answers
	// a retry once the update is committed) is at every member (I4).
	if len(cfg.Chain) < cfg.K || !rep.Stable && rep.Position+1 < cfg.K {
		panic(fmt.Sprintf("INVARIANT I5 acks after k: %s at position %d of %v answers update %d of volume %d, k=%d",
			n.id, rep.Position, cfg, sn, rep.Volume, cfg.K))
	}
	if sn >= c.record.acked[rep.Volume] {
		c.record.acked[rep.Volume] = sn
		c.record.newest[rep.Volume] = reqKey{rep.Client, rep.ReqNo}
	}
}

// checkAnsweredHeld asserts I7: for every volume, some live server named
// a member of its newest configuration holds the newest answered update
// at the SN it was answered with (in SN order, so every earlier one too).
// A chain that lost it would give the SN to another update.
func (c *Cluster) checkAnsweredHeld() {
	for _, v := range c.volumes() {
		need := c.record.acked[v]
		if need == 0 {
			continue
		}
		want := c.record.newest[v]
		cfg := c.VolumeConfig(v)
		if cfg.Epoch == 0 {
			continue // every master member is down (a whole site crashed)
		}
		held := slices.ContainsFunc(cfg.Chain, func(id wire.NodeID) bool {
			if c.server(id) == nil && !(c.opts.Durable && c.down[id]) {
				return false // a crashed server holds its data only on a durable disk
			}
			hist := c.histories.Of(id, v)
			return int(need) <= len(hist) && hist[need-1].Client == want.client && hist[need-1].ReqNo == want.reqNo
		})
		if !held {
			panic(fmt.Sprintf("INVARIANT I7 answered updates survive: no live member of %v holds client %d request %d, answered as SN %d of volume %d",
				cfg, want.client, want.reqNo, need, v))
		}
	}
}

// causalApplied asserts I2 when a head applies (sequences) an update.
func (c *Cluster) causalApplied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	s := c.server(node)
	if s == nil || s.Replica(v) == nil || !s.Replica(v).IsHead() || !s.Replica(v).Config().Causal() {
		return
	}
	deps := c.record.updates[reqKey{u.Client, u.ReqNo}]
	for _, key := range slices.Sorted(maps.Keys(deps)) {
		d := deps[key]
		if key == u.Key && d.Volume == v {
			// The key the update writes: every member applies in SN
			// order, so its version must come before the update.
			if d.Version >= u.SN {
				panic(fmt.Sprintf("INVARIANT I2 visibility: %s applies client %d request %d as SN %d, not after the version %d of the key %s it overwrites",
					node, u.Client, u.ReqNo, u.SN, d.Version, key))
			}
			continue
		}
		if applied, ok := c.tailApplied(d.Volume); ok && applied < d.Version {
			panic(fmt.Sprintf("INVARIANT I2 visibility: %s applies client %d request %d (SN %d) while its dependency %s@%d is not at the tail of volume %d (applied %d)",
				node, u.Client, u.ReqNo, u.SN, key, d.Version, d.Volume, applied))
		}
	}
}

// checkMetadata asserts I3 for every client's metadata.
func (c *Cluster) checkMetadata() {
	for _, cl := range c.clients {
		for _, key := range cl.keys {
			kv, ok := cl.core.KeyVersion(key)
			if !ok {
				continue
			}
			cfg := c.VolumeConfig(kv.Volume)
			if cfg.Epoch != kv.Epoch {
				continue // positions of another epoch: reads pass up
			}
			for i := 0; i <= kv.Position && i < len(cfg.Chain); i++ {
				if r := c.member(cfg.Chain[i], kv.Volume, kv.Epoch); r != nil && r.AppliedSN() < kv.Version {
					panic(fmt.Sprintf("INVARIANT I3 metadata: client %s holds %s@%d at position %d of %v, but %s has applied %d",
						cl.id, key, kv.Version, kv.Position, cfg, cfg.Chain[i], r.AppliedSN()))
				}
			}
		}
	}
}

// causalLosesData reports whether losing a server would leave a volume
// it is a member of without a live member holding every answered update:
// in causal mode only the first k members hold an update when it is
// answered, so losing k of them before it reaches the others loses it
// (an acknowledged update survives k−1 failures, ChainReaction §III-D).
func (c *Cluster) causalLosesData(id wire.NodeID) bool {
	for _, v := range c.volumes() {
		cfg := c.VolumeConfig(v)
		need := c.record.acked[v]
		if cfg.Index(id) < 0 || need == 0 {
			continue
		}
		held := false
		for _, m := range cfg.Chain {
			if m == id || c.mayBeRemoved(m) {
				continue
			}
			if r := c.member(m, v, cfg.Epoch); r != nil && r.AppliedSN() >= need {
				held = true
				break
			}
		}
		if !held {
			return true
		}
	}
	return false
}

// causalCutLosesData reports whether cutting a server off from the
// masters could lose an answered update: causalLosesData. (A cut member
// of a causal chain's first k goes on serving until its lease runs out,
// and what it answers meanwhile may be on no member that stays in touch:
// the master never removes the last member known to hold every answered
// update (master.lastComplete), so the chain waits for it. Before that
// rule the guard refused such cuts: seed 162 with 3 sites cut both of
// k = 2, and to k = 1 a false suspicion of the head lost its answers.)
func (c *Cluster) causalCutLosesData(id wire.NodeID) bool {
	return c.causalLosesData(id)
}

// checkConverged asserts causal+'s convergence once the cluster is quiet:
// every member of every chain applied the same updates, all stable.
func (c *Cluster) checkConverged() error {
	for _, v := range c.volumes() {
		cfg := c.VolumeConfig(v)
		var want wire.SN
		for i, id := range cfg.Chain {
			r := c.member(id, v, cfg.Epoch)
			if r == nil {
				return fmt.Errorf("convergence: %s of %v is down or behind the configuration", id, cfg)
			}
			if i == 0 {
				want = r.AppliedSN()
			}
			if r.AppliedSN() != want || r.CommittedSN() != want {
				return fmt.Errorf("convergence: %s of %v applied %d, committed %d; the head applied %d", id, cfg, r.AppliedSN(), r.CommittedSN(), want)
			}
		}
	}
	return nil
}

// volumes returns the volume ids of the run: the first Volumes, and
// those a split of the default keyspace added since (split.go).
func (c *Cluster) volumes() []wire.VolumeID {
	if c.opts.Splits {
		if ks := c.keyspaces(); len(ks) > 0 {
			return ks[0].VolumeList()
		}
	}
	if len(c.baseVolumes) != c.opts.Volumes {
		// (Kept: the checks after every step ask, and a run of 64
		// volumes would allocate the list each time.)
		c.baseVolumes = make([]wire.VolumeID, c.opts.Volumes)
		for i := range c.baseVolumes {
			c.baseVolumes[i] = wire.VolumeID(i)
		}
	}
	return c.baseVolumes
}

// causalObserver is the replicas' observer in causal mode: the histories
// the chain invariants use, and I2.
type causalObserver struct{ c *Cluster }

func (o causalObserver) Applied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	o.c.histories.Applied(node, v, u)
	o.c.causalApplied(node, v, u)
	o.c.checkRemoteApplied(node, v, u)
	o.c.noteReadable(node, v, u)
}

// noteReadable records, for the fault guard, an update the k-th member
// applied: readers may see it from then on, answered to a client or not
// (another site's update, sequenced here, is answered to nobody), so the
// faults must not lose it (causalLosesData).
func (c *Cluster) noteReadable(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	s := c.server(node)
	if s == nil || s.Replica(v) == nil {
		return
	}
	cfg := s.Replica(v).Config()
	if cfg.K > 0 && cfg.Index(node) == min(cfg.K, len(cfg.Chain))-1 && u.SN > c.record.acked[v] {
		c.record.acked[v] = u.SN
		c.record.newest[v] = reqKey{u.Client, u.ReqNo}
	}
}

func (o causalObserver) SnapshotInstalled(node wire.NodeID, v wire.VolumeID, from wire.NodeID, sn wire.SN) {
	o.c.histories.SnapshotInstalled(node, v, from, sn)
}

func (o causalObserver) Reset(node wire.NodeID, v wire.VolumeID) { o.c.histories.Reset(node, v) }

func (o causalObserver) CaughtUp(node wire.NodeID, v wire.VolumeID, from wire.NodeID, sn wire.SN) {
	o.c.histories.CaughtUp(node, v, from, sn)
}

func (o causalObserver) Seeded(node wire.NodeID, v, parent wire.VolumeID, sn wire.SN) {
	o.c.histories.Seeded(node, v, parent, sn)
}
