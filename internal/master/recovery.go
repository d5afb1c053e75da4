package master

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// The leader's recovery planning: aborting stuck extensions, recreating
// volumes left empty, and the placement policy's extensions, shrinks,
// role moves and rebalancing, each proposed as a command.

// recover aborts stuck extensions, recreates volumes whose members all
// restarted empty, and applies the placement policy
// (placement.Cluster.Recover): it extends shortened chains (as many at
// once as the strategy and the per-server budget allow) and shrinks
// over-long ones; once no chain is short, it moves a member to the tail
// to even out head and tail roles (placement.Cluster.BalanceRoles) or,
// with roles even, a volume onto a lightly loaded server
// (placement.Cluster.Rebalance). Commands go out in volume order.
func (m *Master) recover(now wire.Time) {
	servers, index := m.serverIndex()
	cluster := placement.NewCluster(m.opts.Placement, m.opts.ReplicationFactor, m.opts.RecoveryPerServerMax, len(servers))
	replicas := func(v wire.VolumeID) int { return m.keyspaceOf(v).ReplicationFactor }
	for i, id := range servers {
		st := m.servers[id]
		cluster.Live[i] = st != nil && st.alive && m.incarnations[id] != 0
	}
	volumes := m.volumes()
	chains := make([]placement.Chain, len(volumes))
	recreate := make([]bool, len(volumes))
	var members []int // one array for every chain's members
	for i, v := range volumes {
		c := m.configs[v]
		recreate[i] = m.holdsNothing(c)
		chains[i], members = policyChain(c, index, recreate[i] || m.pending(now, v) || m.cuts[v] != nil, members)
		chains[i].Replicas = replicas(v)
	}
	cluster.Count(chains)
	changes := cluster.Recover(chains)
	for i, v := range volumes {
		c := m.configs[v]
		switch {
		case c.Joining != "" && now-m.extensionStarted[v] > m.opts.ExtensionTimeout:
			if m.mayPropose(now, v) {
				m.submit(now, Command{Kind: CmdAbortExtension, Volume: v, Epoch: c.Epoch})
			}
		case recreate[i]:
			if m.mayPropose(now, v) {
				m.submit(now, Command{Kind: CmdRecreate, Volume: v, Epoch: c.Epoch})
			}
		case len(changes) > 0 && changes[0].Volume == v:
			m.mayPropose(now, v) // true: the policy skips pending volumes
			m.submit(now, changeCommand(changes[0], c, servers))
			changes = changes[1:]
		}
	}
	if !cluster.Idle() {
		return
	}
	// The commands above may have applied (a single master): the move is
	// chosen on the configurations as they are now. Roles first: a role
	// move copies only what the member moved lacks.
	if !m.opts.FixedRoles {
		current := make([]placement.Chain, len(volumes))
		var buf []int
		for i, v := range volumes {
			current[i], buf = m.currentChain(now, v, index, buf)
		}
		if move, ok := cluster.BalanceRoles(current); ok {
			m.mayPropose(now, move.Volume)
			m.submit(now, changeCommand(move, m.configs[move.Volume], servers))
			return
		}
	}
	move, ok := cluster.Rebalance(func(i int) []placement.Chain {
		var out []placement.Chain
		for _, v := range m.volumesOf(servers[i]) {
			ch, _ := m.currentChain(now, v, index, nil)
			out = append(out, ch)
		}
		return out
	})
	if ok {
		m.mayPropose(now, move.Volume)
		m.submit(now, changeCommand(move, m.configs[move.Volume], servers))
	}
}

// serverIndex numbers the servers for the placement policy: the ring
// order, then any other server a configuration names (by id; such a
// server never registered, so it is not live).
func (m *Master) serverIndex() ([]wire.NodeID, map[wire.NodeID]int) {
	servers := m.ring()
	index := make(map[wire.NodeID]int, len(servers))
	for i, id := range servers {
		index[id] = i
	}
	var others []wire.NodeID
	other := func(id wire.NodeID) {
		if _, known := index[id]; !known && id != "" && !slices.Contains(others, id) {
			others = append(others, id)
		}
	}
	for _, c := range m.configs {
		for _, id := range c.Chain {
			other(id)
		}
		other(c.Joining)
	}
	slices.Sort(others)
	for _, id := range others {
		index[id] = len(servers)
		servers = append(servers, id)
	}
	return servers, index
}

// currentChain is volume v's configuration as the placement policy sees
// it now: blocked while a change to it is pending or a cut is decided.
// Its members are appended to buf, which it returns.
func (m *Master) currentChain(now wire.Time, v wire.VolumeID, index map[wire.NodeID]int, buf []int) (placement.Chain, []int) {
	ch, buf := policyChain(m.configs[v], index, m.pending(now, v) || m.cuts[v] != nil, buf)
	ch.Replicas = m.keyspaceOf(v).ReplicationFactor
	return ch, buf
}

// policyChain is c as the placement policy sees it. Its members are
// appended to buf, which it returns.
func policyChain(c *wire.Config, index map[wire.NodeID]int, blocked bool, buf []int) (placement.Chain, []int) {
	from := len(buf)
	for _, id := range c.Chain {
		buf = append(buf, index[id])
	}
	ch := placement.Chain{Volume: c.Volume, Members: buf[from:len(buf):len(buf)], Joining: placement.None, Blocked: blocked,
		Keep: kept(c), FixedRoles: c.Geo() || c.Causal()}
	if c.Joining != "" {
		ch.Joining = index[c.Joining]
	}
	return ch, buf
}

// changeCommand is the command that makes a policy change to c.
func changeCommand(ch placement.Change, c *wire.Config, servers []wire.NodeID) Command {
	kind := CmdExtend
	switch ch.Kind {
	case placement.Shrink:
		kind = CmdShrink
	case placement.MoveToTail:
		kind = CmdMoveToTail
	}
	return Command{Kind: kind, Volume: ch.Volume, Server: servers[ch.Server], Epoch: c.Epoch}
}

// holdsNothing reports whether every member of c is alive in the
// incarnation the log knows, a restarted one, and reports holding nothing
// of the volume. Membership is gained only at bootstrap or through a
// snapshot, so such members have been members since epoch 1 without ever
// adopting the volume (with durable storage, an adopted volume survives a
// restart), and a chain with a member that never adopted it never
// acknowledged an update: the volume is empty everywhere. Its members
// restarted, so none may join it empty without a Fresh configuration.
func (m *Master) holdsNothing(c *wire.Config) bool {
	if c.Fresh || len(c.Chain) == 0 {
		return false
	}
	for _, id := range c.Chain {
		st := m.servers[id]
		if st == nil || !st.alive || st.incarnation != m.incarnations[id] || st.incarnation == m.first[id] {
			return false
		}
		if _, has := st.status[c.Volume]; has {
			return false
		}
	}
	return true
}

// ring returns the servers in ring order: the initial servers, then any
// other known server by id.
func (m *Master) ring() []wire.NodeID {
	ring := slices.Clone(m.opts.Servers)
	for _, id := range slices.Sorted(maps.Keys(m.incarnations)) {
		if !slices.Contains(ring, id) {
			ring = append(ring, id)
		}
	}
	return ring
}
