package master

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// Splitting a keyspace's volumes while it serves (catena keyspace split,
// docs/adr/0031-splitting-volumes.md). CmdSplitKeyspace doubles the
// keyspace's volume list, giving the new half fresh ids, and gives each
// old volume a configuration whose Split hands half of its keys to its
// new sibling from that epoch on. Every member of the volume's chain
// splits its replica in place at the same point of the history and
// seeds the sibling on its own server (chain/split.go), reporting the
// point in its heartbeats; once the tail has applied it, the leader
// proposes CmdSplitActivate, which starts the sibling's chain on the
// members that seeded it. Until then the sibling has no configuration,
// and clients that route a key to it wait. The placement policy then
// spreads the new chains like any other (recovery.go, Rebalance).

// handleSplitRequest checks a request to split keyspace name from
// splits splits to one more and proposes the split; the requester is
// answered once it is applied, at once if it was (a retry).
func (m *Master) handleSplitRequest(now wire.Time, from wire.NodeID, name string, splits int) {
	i := slices.IndexFunc(m.keyspaces, func(k wire.Keyspace) bool { return k.Name == name })
	if i < 0 {
		m.send(from, &wire.KeyspaceReply{Err: fmt.Sprintf("no keyspace %q", name)})
		return
	}
	k := m.keyspaces[i]
	switch {
	case k.Splits == splits+1:
		m.send(from, &wire.KeyspaceReply{Keyspaces: m.Keyspaces()}) // (done: a retry)
		return
	case k.Splits != splits:
		m.send(from, &wire.KeyspaceReply{Err: fmt.Sprintf("keyspace %q was split %d times, not %d: look again", name, k.Splits, splits)})
		return
	}
	if err := m.splittable(k); err != nil {
		m.send(from, &wire.KeyspaceReply{Err: err.Error()})
		return
	}
	next := volumeCount(m.keyspaces)
	into := make([]wire.VolumeID, k.Volumes)
	for j := range into {
		into[j] = wire.VolumeID(next + j)
	}
	split := k.Split(into)
	m.awaitKeyspaceCommand(now, name, from, Command{Kind: CmdSplitKeyspace, Keyspace: &split})
}

// splittable reports why keyspace k cannot be split now.
func (m *Master) splittable(k wire.Keyspace) error {
	switch {
	case m.ClusterVersion() < release.ProtocolSplit:
		return fmt.Errorf("splitting needs cluster version %d (it is %d): finalize the upgrade first (catena upgrade finalize)", release.ProtocolSplit, m.ClusterVersion())
	case k.Mode != wire.ModeStrong:
		// A causal keyspace's clients name versions by their volume's
		// SNs, a geo or hierarchical one has sibling chains at every
		// site that would have to split together: not yet designed.
		return fmt.Errorf("keyspace %q is %s: only strong keyspaces split (docs/adr/0031)", k.Name, k.Mode)
	case len(k.Sites) > 1:
		return fmt.Errorf("keyspace %q is replicated by several sites: only keyspaces of one site split (docs/adr/0031)", k.Name)
	case k.PartitionDepth > 0:
		return fmt.Errorf("keyspace %q places keys by partition: it does not split", k.Name)
	case 2*k.Volumes > KeyspaceVolumesMax:
		return fmt.Errorf("keyspace %q has %d volumes: a split would pass %d", k.Name, k.Volumes, KeyspaceVolumesMax)
	}
	for i := range k.Volumes {
		if v := k.Volume(i); m.configs[v] == nil {
			return fmt.Errorf("keyspace %q is still splitting: volume %d has not started; try again once it has", k.Name, v)
		}
	}
	return nil
}

// applySplitKeyspace applies CmdSplitKeyspace: the keyspace c.Keyspace
// names takes the doubled volume list c.Keyspace holds, and each of its
// old volumes gets a configuration that splits it. A command that no
// longer fits (another split or a keyspace took the ids first) does
// nothing, and its requesters are told.
func (m *Master) applySplitKeyspace(c Command) {
	split := *c.Keyspace
	i := slices.IndexFunc(m.keyspaces, func(k wire.Keyspace) bool { return k.Name == split.Name })
	var err error
	switch {
	case i < 0:
		err = fmt.Errorf("no keyspace %q", split.Name)
	case m.keyspaces[i].Splits != split.Splits-1 || split.Volumes != 2*m.keyspaces[i].Volumes:
		err = fmt.Errorf("keyspace %q was split meanwhile", split.Name)
	default:
		err = m.splittable(m.keyspaces[i])
	}
	if err == nil {
		old, next := m.keyspaces[i], volumeCount(m.keyspaces)
		for j := range old.Volumes {
			if split.Volume(j) != old.Volume(j) || int(split.Volume(old.Volumes+j)) != next+j {
				err = fmt.Errorf("volumes from %d were taken meanwhile", next)
				break
			}
		}
	}
	if err != nil {
		m.answerKeyspaceWaiters(split.Name, err)
		return
	}
	half := split.Volumes / 2
	m.keyspaces[i] = split
	for j := range half {
		cur := m.configs[split.Volume(j)]
		next := cur.Clone()
		next.Split = wire.Split{Into: split.Volume(half + j), Epoch: cur.Epoch + 1, Modulus: uint32(split.Volumes), Keep: uint32(j)}
		m.install(next, cur)
	}
	m.answerKeyspaceWaiters(split.Name, nil)
}

// applySplitActivate applies CmdSplitActivate: the first configuration of
// a split's new volume c.Volume, on c.Chains[c.Volume], the members of
// its parent that seeded it at one point (chain/split.go). Nothing if the
// volume started already or is no split's new volume.
func (m *Master) applySplitActivate(c Command) {
	if m.configs[c.Volume] != nil {
		return
	}
	parent, ok := m.splitParent(c.Volume)
	if !ok || len(c.Chains[c.Volume]) == 0 {
		return
	}
	p := m.configs[parent]
	cfg := &wire.Config{Volume: c.Volume, Epoch: 1, Chain: slices.Clone(c.Chains[c.Volume]), FromSplit: true, Mode: p.Mode, K: p.K, Sites: slices.Clone(p.Sites)}
	m.setConfig(cfg)
	if m.leading {
		for _, id := range cfg.Chain {
			m.send(id, &wire.NewConfig{Config: cfg.Clone()})
		}
	}
}

// splitParent returns the volume whose split made v, while v has no
// configuration yet: v is in the new half of its keyspace's volumes and
// its parent's configuration splits into it.
func (m *Master) splitParent(v wire.VolumeID) (wire.VolumeID, bool) {
	for _, k := range m.keyspaces {
		j, ok := k.IndexOf(v)
		if !ok || k.Splits == 0 || j < k.Volumes/2 {
			continue
		}
		parent := k.Volume(j - k.Volumes/2)
		if p := m.configs[parent]; p != nil && p.Split.Into == v {
			return parent, true
		}
	}
	return 0, false
}

// activateSplits proposes, at the leader, the first configuration of each
// split's new volume once its parent's tail reports the split point: on
// the servers that hold a seed made there (seededChain).
func (m *Master) activateSplits(now wire.Time) {
	for _, k := range m.keyspaces {
		if k.Splits == 0 {
			continue
		}
		for j := k.Volumes / 2; j < k.Volumes; j++ {
			v := k.Volume(j)
			if m.configs[v] != nil || m.pending(now, v) {
				continue
			}
			if chain := m.seededChain(k.Volume(j-k.Volumes/2), v); len(chain) > 0 && m.mayPropose(now, v) {
				m.submit(now, Command{Kind: CmdSplitActivate, Volume: v, Chains: map[wire.VolumeID][]wire.NodeID{v: chain}})
			}
		}
	}
}

// seededChain returns the servers holding a seed of volume into, the
// latest split of parent, made at the split point parent's tail reports:
// the parent's members in chain order, then any other server (one the
// master moved or removed from the parent's chain after it seeded) by
// id. The point names the history before it (wire.SplitPoint), and the
// tail holds only committed updates, so a seed made there holds the
// committed state; a seed made elsewhere (an old head's, past updates
// the chain lost with it) is not used. Nil while the tail has not
// reported the point, or while a member of the parent's chain has not
// reported since it passed the point: each member seeds as it passes it,
// so the chain starts as long as its parent's
// (TestSplitStartsOnEverySeededMember).
func (m *Master) seededChain(parent, into wire.VolumeID) []wire.NodeID {
	p := m.configs[parent]
	if p == nil || p.Split.Into != into || len(p.Chain) == 0 {
		return nil
	}
	status := func(id wire.NodeID, v wire.VolumeID) (wire.VolumeStatus, bool) {
		st := m.servers[id]
		if st == nil || !st.alive || st.incarnation != m.incarnations[id] {
			return wire.VolumeStatus{}, false
		}
		s, ok := st.status[v]
		return s, ok
	}
	tail, ok := status(p.Tail(), parent)
	point := tail.Split
	if !ok || tail.Epoch != p.Epoch || point.Into != into || point.IsZero() {
		return nil
	}
	for _, id := range p.Chain {
		if s, ok := status(id, parent); !ok || s.Epoch != p.Epoch || s.Split != point {
			// The member's latest report predates the parent's
			// configuration or its passing the point (it holds what the
			// tail holds): wait for its next rather than start without
			// its seed. One that stopped is removed from the chain
			// meanwhile.
			return nil
		}
	}
	seeded := func(id wire.NodeID) bool {
		s, ok := status(id, into)
		return ok && s.Seed() && s.Split == point
	}
	var chain []wire.NodeID
	for _, id := range p.Chain {
		if seeded(id) {
			chain = append(chain, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		if !slices.Contains(chain, id) && seeded(id) {
			chain = append(chain, id)
		}
	}
	return chain
}
