package master

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// The replicated state machine: the commands every member applies from
// the log, in order, to the durable state (configurations, server
// incarnations; keyspaces.go, auth.go and links.go apply theirs), and the
// indexes of the configurations. The state a command leaves depends only
// on the state before it and the command, so every member reaches the
// same one; the leader also tells the servers concerned (install).

// CommandKind names a change to the master's durable state.
type CommandKind uint8

// The commands. Each is applied by every member, in log order; one whose
// precondition no longer holds (the configuration moved on) does nothing.
// The log holds their numbers: new kinds go at the end.
const (
	// CmdRegister records a server's first incarnation.
	CmdRegister CommandKind = iota + 1
	// CmdRestarted records a new incarnation of a server and removes it
	// from every chain, except the chains of Survive: no other member of
	// those is intact, and the server holds the volume on its disk, so it
	// becomes the chain's only member (every acknowledged update was on
	// every member's disk).
	CmdRestarted
	// CmdRemove removes a failed server from every chain but the ones it
	// is the last member of and those of Survive: causal chains it may be
	// the last complete member of (lastComplete).
	CmdRemove
	// CmdExtend starts adding Server at the tail of Volume's chain.
	CmdExtend
	// CmdPromote makes Volume's joining server its tail.
	CmdPromote
	// CmdAbortExtension gives up Volume's extension.
	CmdAbortExtension
	// CmdShrink removes a live Server, neither the tail nor one of the
	// first k of a causal chain (kept), from Volume's chain that is longer
	// than the replication factor (the end of a rebalancing move).
	CmdShrink
	// CmdRecreate marks Volume's configuration Fresh for one epoch: every
	// member is alive in a known, restarted incarnation and holds nothing
	// (see wire.Config.Fresh).
	CmdRecreate
	// CmdCreateKeyspace adds Keyspace, with the first configurations of
	// its volumes on Chains (keyspaces.go).
	CmdCreateKeyspace
	// CmdAuth changes the users and roles as Auth says, for the
	// AuthRequest numbered AuthID (auth.go).
	CmdAuth
	// CmdCut removes a live Server from Volume's chain of Epoch only: one
	// end of a link between chain neighbours that carries nothing
	// (links.go).
	CmdCut
	// CmdOverride records an operator's override of a hierarchical
	// keyspace: its grace view or reassigned sites (Override;
	// keyspaces.go).
	CmdOverride
	// CmdMoveToTail takes a live Server other than the tail out of its
	// place in Volume's strong chain and makes it the joining server,
	// with the state it holds (wire.Config.Moved): a role move, decided by
	// placement.Cluster.BalanceRoles. The tail catches it up and
	// CmdPromote makes it the tail; the members behind it move up one
	// place. Not in causal volumes, whose later members need not hold
	// what was answered, nor geo volumes, whose members rejoin by
	// snapshot.
	CmdMoveToTail
	// CmdClusterVersion raises the cluster version to Version (never
	// lowers it): catena upgrade finalize (upgrade.go).
	CmdClusterVersion
	// CmdSplitKeyspace doubles a keyspace's volumes: Keyspace is the
	// keyspace as it will be, and each old volume gets a configuration
	// that splits it into its new sibling (split.go).
	CmdSplitKeyspace
	// CmdSplitActivate starts a split's new Volume on Chains[Volume], the
	// members of its parent that seeded it (split.go).
	CmdSplitActivate
)

// Command is one change to the master's durable state.
type Command struct {
	Kind        CommandKind
	Server      wire.NodeID   `json:",omitempty"`
	Incarnation uint64        `json:",omitempty"`
	Volume      wire.VolumeID `json:",omitempty"`
	// Epoch is the configuration the decision was made on (extension
	// commands); the command does nothing in any other.
	Epoch wire.Epoch `json:",omitempty"`
	// Survive lists the volumes a restarted server keeps (CmdRestarted)
	// or a failed one stays a member of (CmdRemove).
	Survive []wire.VolumeID `json:",omitempty"`
	// Keyspace and Chains describe a new keyspace (CmdCreateKeyspace).
	Keyspace *wire.Keyspace                  `json:",omitempty"`
	Chains   map[wire.VolumeID][]wire.NodeID `json:",omitempty"`
	// Auth and AuthID are a change to the users and roles and the
	// request that asked for it (CmdAuth).
	Auth   *wire.AuthChange `json:",omitempty"`
	AuthID uint64           `json:",omitempty"`
	// Override is an operator's override of a keyspace (CmdOverride).
	Override *wire.OverrideRequest `json:",omitempty"`
	// Version is the cluster version to raise to (CmdClusterVersion).
	Version uint32 `json:",omitempty"`
}

// Apply applies a committed command (replicated master). It returns the
// messages the leader sends about it.
func (m *Master) Apply(now wire.Time, c Command) []wire.Envelope {
	defer m.assertInvariants()
	m.apply(now, c)
	return m.flush()
}

func (m *Master) apply(now wire.Time, c Command) {
	switch c.Kind {
	case CmdRegister:
		if m.incarnations[c.Server] == 0 {
			m.first[c.Server] = c.Incarnation
		}
		m.incarnations[c.Server] = max(m.incarnations[c.Server], c.Incarnation)
	case CmdRestarted:
		if c.Incarnation <= m.incarnations[c.Server] {
			return
		}
		m.incarnations[c.Server] = c.Incarnation
		m.removeEverywhere(now, c.Server, c.Survive, true)
	case CmdRemove:
		m.removeEverywhere(now, c.Server, c.Survive, false)
	case CmdClusterVersion:
		m.applyClusterVersion(c.Version)
	case CmdExtend:
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch || cur.Joining != "" || cur.Contains(c.Server) {
			return
		}
		next := cur.Clone()
		next.Joining = c.Server
		m.extensionStarted[c.Volume] = now
		m.install(next, cur)
	case CmdPromote:
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch || cur.Joining == "" {
			return
		}
		next := cur.Clone()
		next.Chain = append(next.Chain, next.Joining)
		next.Joining = ""
		m.install(next, cur)
	case CmdAbortExtension:
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch || cur.Joining == "" {
			return
		}
		next := cur.Clone()
		next.Joining = ""
		m.install(next, cur)
	case CmdMoveToTail:
		cur := m.configs[c.Volume]
		i := -1
		if cur != nil {
			i = cur.Index(c.Server)
		}
		if cur == nil || cur.Epoch != c.Epoch || cur.Joining != "" || cur.Geo() || cur.Causal() || i < 0 || i >= len(cur.Chain)-1 {
			return
		}
		next := cur.Clone()
		next.Chain = slices.Delete(next.Chain, i, i+1)
		next.Joining, next.Moved = c.Server, true
		m.extensionStarted[c.Volume] = now
		m.install(next, cur)
	case CmdShrink:
		// Never the tail: a removed tail could serve reads until it learns
		// it was removed, and planned removals wait out no lease. Never
		// one of a causal chain's first k (kept).
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch || cur.Joining != "" || len(cur.Chain) <= m.keyspaceOf(c.Volume).ReplicationFactor ||
			cur.Index(c.Server) < kept(cur) || cur.Tail() == c.Server {
			return
		}
		next := cur.Clone()
		next.Chain = slices.DeleteFunc(next.Chain, func(id wire.NodeID) bool { return id == c.Server })
		m.install(next, cur)
	case CmdCut:
		m.applyCut(c)
	case CmdCreateKeyspace:
		if c.Keyspace != nil {
			m.applyCreateKeyspace(c)
		}
	case CmdAuth:
		if c.Auth != nil {
			m.applyAuth(c)
		}
	case CmdOverride:
		if c.Override != nil {
			m.applyOverride(*c.Override)
		}
	case CmdSplitKeyspace:
		if c.Keyspace != nil {
			m.applySplitKeyspace(c)
		}
	case CmdSplitActivate:
		m.applySplitActivate(c)
	case CmdRecreate:
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch {
			return
		}
		next := cur.Clone()
		next.Joining = ""
		next.Fresh = true
		m.install(next, cur)
	default:
		// A newer release's command, proposed while this member ran an
		// older one (it should have waited for the cluster version):
		// applying nothing would let this member's state part from the
		// others', so it stops instead (Incompatible).
		m.unknownCommand = c.Kind
	}
}

// removeEverywhere removes a server from every chain (and extension) it
// is part of. The last member of a chain is never removed: the volume
// waits for it rather than lose its data. In the chains of survive, a
// restarted server instead becomes the only member, in a new epoch, so it
// leaves the wedged state it restarted in with what its disk holds; a
// failed one stays where it is, and the chain waits for it.
func (m *Master) removeEverywhere(now wire.Time, id wire.NodeID, survive []wire.VolumeID, restarted bool) {
	for _, v := range m.volumesOf(id) {
		c := m.configs[v]
		if !c.Contains(id) {
			continue
		}
		next := c.Clone()
		next.Joining = "" // any change aborts an extension, but see below
		moving := c.Moved && c.Joining != id
		switch i := next.Index(id); {
		case i >= 0 && slices.Contains(survive, v) && !restarted:
			continue
		case i >= 0 && slices.Contains(survive, v):
			next.Chain = []wire.NodeID{id}
		case i >= 0 && len(next.Chain) == 1 && moving:
			// The member moved holds every update the chain answered
			// (wire.Config.Moved): it takes the last member's place.
			next.Chain = []wire.NodeID{c.Joining}
		case i >= 0 && len(next.Chain) == 1:
			continue
		case i >= 0:
			next.Chain = slices.Delete(next.Chain, i, i+1)
			if moving && i < len(c.Chain)-1 {
				// The tail stays, and applies nothing the member moved
				// lacks: the move goes on. (A new tail may have applied
				// more, and would answer it.)
				next.Joining = c.Joining
			}
		}
		m.install(next, c)
	}
}

// install makes next the volume's configuration with the next epoch. The
// leader tells every server of the old and new configuration.
func (m *Master) install(next wire.Config, prev *wire.Config) {
	next.Epoch = prev.Epoch + 1
	next.Moved = next.Moved && next.Joining != ""
	// Fresh lasts one epoch: by the next change its members have adopted
	// the volume, or the master finds them empty again.
	next.Fresh = next.Fresh && !prev.Fresh
	next.FromSplit = false // (the seeds' epoch only)
	old := prev.Clone()
	m.setConfig(&next)
	delete(m.proposedAt, next.Volume)
	delete(m.cuts, next.Volume) // a cut was decided for one epoch (links.go)
	if !m.leading {
		return
	}
	notify := map[wire.NodeID]bool{}
	for _, id := range append(append(old.Chain, old.Joining), append(next.Chain, next.Joining)...) {
		notify[id] = id != ""
	}
	for _, id := range slices.Sorted(maps.Keys(notify)) {
		if notify[id] {
			m.send(id, &wire.NewConfig{Config: next.Clone()})
		}
	}
}

// setConfig makes c its volume's configuration and keeps the indexes.
func (m *Master) setConfig(c *wire.Config) {
	prev := m.configs[c.Volume]
	if prev == nil {
		m.volumeIDs = nil // rebuilt by volumes()
	} else {
		for _, id := range append(slices.Clone(prev.Chain), prev.Joining) {
			delete(m.byServer[id], c.Volume)
		}
	}
	m.configs[c.Volume] = c
	for _, id := range append(slices.Clone(c.Chain), c.Joining) {
		if id == "" {
			continue
		}
		if m.byServer[id] == nil {
			m.byServer[id] = map[wire.VolumeID]bool{}
		}
		m.byServer[id][c.Volume] = true
	}
}

// resetConfigs replaces every configuration (a restored or loaded state).
func (m *Master) resetConfigs(configs []wire.Config) {
	clear(m.configs)
	clear(m.byServer)
	m.volumeIDs = nil
	for _, c := range configs {
		c := c.Clone()
		m.setConfig(&c)
	}
}

// volumes returns every volume, in order.
func (m *Master) volumes() []wire.VolumeID {
	if m.volumeIDs == nil {
		m.volumeIDs = slices.Sorted(maps.Keys(m.configs))
	}
	return m.volumeIDs
}

// volumesOf returns the volumes whose configuration names id, in order.
func (m *Master) volumesOf(id wire.NodeID) []wire.VolumeID {
	return slices.Sorted(maps.Keys(m.byServer[id]))
}

// Config returns a copy of a volume's current configuration; the zero
// Config for a volume that has none (a split's new volume before it
// starts, or no volume at all).
func (m *Master) Config(v wire.VolumeID) wire.Config {
	if c := m.configs[v]; c != nil {
		return c.Clone()
	}
	return wire.Config{}
}

// Configs returns copies of all current configurations, by volume.
func (m *Master) Configs() []wire.Config {
	out := make([]wire.Config, 0, len(m.configs))
	for _, v := range m.volumes() {
		out = append(out, m.configs[v].Clone())
	}
	return out
}

// kept returns how many leading members of c a planned removal (CmdShrink)
// keeps: a causal chain's first k hold the updates answered and not yet
// at the tail, and only they do. Removing one leaves k−1 copies until its
// successor catches up, and failures the master has not noticed yet may
// have taken those: the head of a k = 1 chain answers alone, so removing
// it loses what it has not forwarded even with no failure at all. A
// strong chain's tail holds every answered update, and it is never
// removed.
func kept(c *wire.Config) int { return c.K }
