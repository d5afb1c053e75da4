// Package master is the configuration master of CR §3 as a deterministic
// state machine: it detects failed servers by heartbeat timeouts, removes
// them from chains, extends shortened chains at the tail, grants leases and
// tells servers and clients the current configurations.
//
// The master's durable state is the cluster's settings, fixed when it is
// created, and the configurations and server incarnations, which change
// only by applying Commands in order. The leader decides the commands
// from heartbeats and timers and proposes them; every member applies
// them. A single master applies its proposals at once; a
// replicated master (raft.go) puts them through a Raft log first, so the
// members agree on every configuration and a new leader resumes where the
// old one stopped.
package master

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Options configure a Master.
type Options struct {
	// Settings are the cluster's settings (settings.go). A new cluster
	// takes them from here; a master that resumes from saved state takes
	// the saved ones, and any setting given here must equal its saved
	// value.
	Settings
	// Chains gives each volume's initial chain, head first: the epoch-1
	// configurations of a new cluster. A master that resumes from saved
	// state does not use them.
	Chains map[wire.VolumeID][]wire.NodeID
	// FailureTimeout: a server not heard from for this long is removed
	// from every chain.
	FailureTimeout wire.Time
	// LeaseDuration is the lease granted with each heartbeat.
	LeaseDuration wire.Time
	// ClockDriftMax bounds the drift rate of any clock against real time
	// (0.01 = 1%).
	ClockDriftMax float64
	// ExtensionTimeout aborts an extension whose joining server has not
	// caught up in this time, so another spare can be tried.
	ExtensionTimeout wire.Time
	// LeadershipWindow is how long a deposed leader may go on believing it
	// leads (and granting leases) after it last heard from a quorum; 0 for
	// a single master. See docs/adr/0004-replicated-master.md.
	LeadershipWindow wire.Time
	// RecoveryPerServerMax bounds the state transfers a server takes part
	// in at once, as source or target: the recovery bandwidth budget.
	// 0 means 4. A limit on this process's work, not a cluster setting:
	// it may differ between starts and between members (see
	// docs/adr/0008-master-settings.md).
	RecoveryPerServerMax int
	// FixedRoles: never move a member to the tail to even out head and
	// tail roles (CmdMoveToTail; placement.Cluster.BalanceRoles). Like
	// RecoveryPerServerMax, this process's choice. The experiments that
	// hold their chains fixed set it.
	FixedRoles bool
}

// LeaseGuard is how long, on the master's clock, the master must wait
// after granting a lease before the lease is surely expired on the
// server's clock: LeaseDuration·(1+ρ)/(1−ρ) for drift bound ρ.
func (o Options) LeaseGuard() wire.Time {
	return wire.Time(float64(o.LeaseDuration) * (1 + o.ClockDriftMax) / (1 - o.ClockDriftMax))
}

// Validate reports timing the master cannot run safely with. The
// settings and chains are checked when a cluster is created
// (newCluster), and against the saved ones when a master resumes.
func (o Options) Validate() error {
	var errs []error
	if o.ClockDriftMax < 0 || o.ClockDriftMax >= 0.5 {
		errs = append(errs, fmt.Errorf("clock drift bound %v outside [0, 0.5)", o.ClockDriftMax))
	}
	if o.LeaseDuration <= 0 {
		errs = append(errs, errors.New("lease duration must be positive"))
	}
	// Removal on suspicion must come after the suspect's lease expired,
	// including one granted by a leader that did not yet know it was
	// deposed.
	if o.FailureTimeout <= o.LeaseGuard()+o.LeadershipWindow {
		errs = append(errs, fmt.Errorf("failure timeout %v must exceed the lease guard %v plus the leadership window %v (lease %v, drift %v)",
			o.FailureTimeout, o.LeaseGuard(), o.LeadershipWindow, o.LeaseDuration, o.ClockDriftMax))
	}
	if o.ExtensionTimeout <= 0 {
		errs = append(errs, errors.New("extension timeout must be positive"))
	}
	return errors.Join(errs...)
}

// newCluster returns the settings of the cluster o creates, with the
// defaults filled in (placement random, one volume per chain), and
// reports settings or chains a cluster cannot be created with.
func (o Options) newCluster() (Settings, error) {
	s := o.Settings.withDefaults(len(o.Chains))
	var errs []error
	if len(o.Chains) == 0 {
		errs = append(errs, errors.New("no volumes"))
	}
	for v, chain := range o.Chains {
		seen := map[wire.NodeID]bool{}
		for _, id := range chain {
			if id == "" || seen[id] {
				errs = append(errs, fmt.Errorf("volume %d: empty or repeated server %q", v, id))
			}
			seen[id] = true
		}
		if len(chain) == 0 {
			errs = append(errs, fmt.Errorf("volume %d: empty chain", v))
		}
		if int(v) >= s.Volumes {
			errs = append(errs, fmt.Errorf("volume %d: outside the %d volumes", v, s.Volumes))
		}
	}
	if err := s.Validate(); err != nil {
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

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
}

// Master is the configuration master.
type Master struct {
	opts Options
	id   wire.NodeID
	// refusals are the messages of another deployment refused since
	// Refusals last ran (soft state, for the log).
	refusals []string
	// cutNotes describe the chain links cut (links.go) since Cuts last
	// ran, for the log.
	cutNotes []string
	// denials are the requests refused to their caller since Denials
	// last ran (soft state, for the log).
	denials []string

	// Durable state, changed only by Apply. Configurations change only
	// through setConfig and resetConfigs, which keep the indexes below.
	configs      map[wire.VolumeID]*wire.Config
	incarnations map[wire.NodeID]uint64
	// first is, per server, the incarnation the master registered it
	// with (CmdRegister): its first process. Any other is a returning
	// one (wire.HeartbeatReply.Returning).
	first map[wire.NodeID]uint64
	// volumeIDs is the sorted set of configs' keys.
	volumeIDs []wire.VolumeID
	// keyspaces holds every keyspace, the default one first.
	keyspaces []wire.Keyspace
	// byServer holds, per server, the volumes whose configuration names
	// it (member or joining): a heartbeat or removal touches only those.
	byServer map[wire.NodeID]map[wire.VolumeID]bool
	// auth holds the users and roles (auth.go).
	auth wire.AuthTable

	// The leader's own state, rebuilt when it takes over.
	leading          bool
	servers          map[wire.NodeID]*serverState
	extensionStarted map[wire.VolumeID]wire.Time
	// proposedAt holds, per volume, when a change was last proposed: no
	// other is proposed until it applied or proposalRetry passed.
	proposedAt map[wire.VolumeID]wire.Time
	// cuts holds, per volume, the cut of a stalled link the leader
	// decided, and blamed the member whose stall made it cut a successor
	// last (links.go).
	cuts   map[wire.VolumeID]*stallCut
	blamed map[wire.VolumeID]blame

	// propose puts a command in the log; nil applies it at once.
	propose func(Command)
	// canGrant reports whether the leader may grant leases now (it heard
	// from a quorum recently); nil: always.
	canGrant func(now wire.Time) bool
	// members and leader are what ConfigReply and StatusReply tell clients.
	members []wire.NodeID
	leader  wire.NodeID
	// keyspaceWaiters holds, per keyspace name, who asked the leader to
	// create it and waits for the command to apply.
	keyspaceWaiters map[string][]wire.NodeID
	// authWaiters are who asked the leader for a change of the users and
	// roles and waits for it to apply (at most authWaitersMax);
	// authPending holds the ids of the requests proposed and not yet
	// applied. Both are the leader's, dropped when leadership changes.
	authWaiters []authWaiter
	authPending map[uint64]bool
	// stable is, per geo volume, what its members reported stable (soft
	// state, rebuilt from heartbeats by a new leader): heads of the
	// site apply other sites' updates once their dependencies are
	// stable by it (chain/geo.go).
	stable map[wire.VolumeID]wire.Vector
	// expired counts the servers this member, leading, found silent past
	// the failure timeout (their leases had run out) and removed.
	expired uint64

	out []wire.Envelope
}

// proposalRetry is how long the leader waits for a proposed change to a
// volume to apply before it may propose again.
const proposalRetry = 500 * wire.Millisecond

type serverState struct {
	lastHeard wire.Time
	// lastGrant is when the master last granted this server a lease.
	lastGrant wire.Time
	alive     bool
	status    map[wire.VolumeID]wire.VolumeStatus
	// incarnation is the one its last heartbeat carried.
	incarnation uint64
	// awaiting is set while the server has not shown (by
	// wire.Heartbeat.Heard) that it heard a reply this master sent at
	// awaitingSince, answering the heartbeat it sent at awaitingSentAt
	// (its clock). See deaf.
	awaiting                      bool
	awaitingSince, awaitingSentAt wire.Time
}

// newMaster returns a master, not leading, holding no state yet.
func newMaster(id wire.NodeID, o Options) (*Master, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("master options: %w", err)
	}
	return &Master{
		opts: o, id: id,
		configs:      map[wire.VolumeID]*wire.Config{},
		incarnations: map[wire.NodeID]uint64{},
		first:        map[wire.NodeID]uint64{},
		byServer:     map[wire.NodeID]map[wire.VolumeID]bool{},
		members:      []wire.NodeID{id},
		leader:       id,

		keyspaceWaiters: map[string][]wire.NodeID{},
		authPending:     map[uint64]bool{},
		stable:          map[wire.VolumeID]wire.Vector{},
	}, nil
}

// create gives the master the state of the new cluster its options
// describe: their settings, and the epoch-1 configurations of their
// chains.
func (m *Master) create() error {
	s, err := m.opts.newCluster()
	if err != nil {
		return fmt.Errorf("master options: %w", err)
	}
	m.opts.Settings = s
	m.keyspaces = []wire.Keyspace{defaultKeyspace(s)}
	for v, chain := range m.opts.Chains {
		m.setConfig(&wire.Config{Volume: v, Epoch: 1, Chain: slices.Clone(chain), Mode: m.keyspaces[0].Mode, K: s.DefaultK, Sites: slices.Clone(s.DefaultSites)})
	}
	return nil
}

// New returns a single master of a new cluster, leading, with o's
// settings and the epoch-1 configurations of o.Chains.
func New(id wire.NodeID, o Options) (*Master, error) {
	m, err := newMaster(id, o)
	if err != nil {
		return nil, err
	}
	if err := m.create(); err != nil {
		return nil, err
	}
	m.SetLeader(0, true, id)
	return m, nil
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

// Config returns a copy of a volume's current configuration.
func (m *Master) Config(v wire.VolumeID) wire.Config { return m.configs[v].Clone() }

// Configs returns copies of all current configurations, by volume.
func (m *Master) Configs() []wire.Config {
	out := make([]wire.Config, 0, len(m.configs))
	for _, v := range m.volumes() {
		out = append(out, m.configs[v].Clone())
	}
	return out
}

// Leading reports whether this member acts as the leader.
func (m *Master) Leading() bool { return m.leading }

// Leader returns the member this one believes leads ("" if none).
func (m *Master) Leader() wire.NodeID { return m.leader }

// Expired counts the servers this member removed, while leading, because
// it had not heard from them within the failure timeout (their leases had
// run out). For metrics.
func (m *Master) Expired() uint64 { return m.expired }

// Status returns what a StatusRequest is answered with: this member's
// view of the cluster.
func (m *Master) Status() *wire.StatusReply { return m.status() }

// ServerStatus returns the last status a server reported for a volume to
// this member (the leader's view).
func (m *Master) ServerStatus(id wire.NodeID, v wire.VolumeID) (wire.VolumeStatus, bool) {
	st := m.servers[id]
	if st == nil {
		return wire.VolumeStatus{}, false
	}
	s, ok := st.status[v]
	return s, ok
}

// SetLeader tells the master whether it leads, and who does. A member
// that takes over forgets what it knew of servers: each gets a full
// failure timeout from now before it can be suspected, which also outlasts
// any lease the previous leader granted.
func (m *Master) SetLeader(now wire.Time, leading bool, leader wire.NodeID) {
	m.leader = leader
	if leading == m.leading && m.servers != nil {
		return
	}
	m.leading = leading
	m.servers = map[wire.NodeID]*serverState{}
	m.authWaiters, m.authPending = nil, map[uint64]bool{}
	m.extensionStarted = map[wire.VolumeID]wire.Time{}
	m.proposedAt = map[wire.VolumeID]wire.Time{}
	m.cuts = map[wire.VolumeID]*stallCut{}
	m.blamed = map[wire.VolumeID]blame{}
	if !leading {
		return
	}
	for id := range m.incarnations {
		m.servers[id] = &serverState{lastHeard: now, lastGrant: now, alive: true}
	}
	for v, c := range m.configs {
		if c.Joining != "" {
			m.extensionStarted[v] = now
		}
	}
}

func (m *Master) send(to wire.NodeID, msg wire.Message) {
	m.out = append(m.out, wire.Envelope{To: to, Msg: msg})
}

// refuse records a message refused because it came from another
// deployment, for Refusals.
func (m *Master) refuse(why string) {
	if len(m.refusals) < refusalsMax {
		m.refusals = append(m.refusals, why)
	}
}

// refusalsMax bounds the refusals kept between two calls of Refusals.
const refusalsMax = 64

// Refusals returns and clears the messages refused since the last call
// because they came from another deployment (Settings.Cluster), for the
// process to log.
func (m *Master) Refusals() []string {
	out := m.refusals
	m.refusals = nil
	return out
}

// deny records a request refused because its caller may not make it
// (users, roles, keyspaces), for Denials.
func (m *Master) deny(why string) {
	if len(m.denials) < refusalsMax {
		m.denials = append(m.denials, why)
	}
}

// Cuts returns and clears, for the process to log, what the leader cut
// since the last call: a live server removed from one chain because a
// link to or from it carried nothing (links.go).
func (m *Master) Cuts() []string {
	out := m.cutNotes
	m.cutNotes = nil
	return out
}

// Denials returns and clears the requests refused since the last call
// because their caller may not make them (authorization), for the
// process to log.
func (m *Master) Denials() []string {
	out := m.denials
	m.denials = nil
	return out
}

func (m *Master) flush() []wire.Envelope {
	out := m.out
	m.out = nil
	return out
}

func (m *Master) submit(now wire.Time, c Command) {
	if m.propose == nil {
		m.apply(now, c)
		return
	}
	m.propose(c)
}

// Step handles one message.
func (m *Master) Step(now wire.Time, from wire.NodeID, msg wire.Message) []wire.Envelope {
	switch msg := msg.(type) {
	case *wire.Heartbeat:
		if m.leading {
			m.handleHeartbeat(now, from, msg)
		}
	case *wire.ConfigRequest:
		cluster := m.opts.Settings.ClusterName()
		if msg.Cluster != "" && msg.Cluster != cluster {
			// A server of another deployment: nothing of this one for
			// it, and a reply that says whose this is.
			m.refuse(fmt.Sprintf("refused a configuration request from %s of deployment %q: this is %q", from, msg.Cluster, cluster))
			m.send(from, &wire.ConfigReply{Cluster: cluster})
			break
		}
		m.send(from, &wire.ConfigReply{Configs: m.Configs(), Masters: slices.Clone(m.members), Leader: m.leader, Keyspaces: m.Keyspaces(), Cluster: cluster})
	case *wire.KeyspaceRequest:
		m.handleKeyspaceRequest(now, from, msg)
	case *wire.AuthRequest:
		m.handleAuthRequest(now, from, msg)
	case *wire.StatusRequest:
		m.send(from, m.status())
	}
	return m.flush()
}

func (m *Master) handleHeartbeat(now wire.Time, from wire.NodeID, hb *wire.Heartbeat) {
	known := m.incarnations[from]
	switch {
	case hb.Incarnation < known:
		return // from a previous process, delayed
	case known == 0 && (hb.NewDataDir || hb.Incarnation == 1):
		// A new server (incarnation 1 is always a new data directory).
		m.submit(now, Command{Kind: CmdRegister, Server: from, Incarnation: hb.Incarnation})
	case hb.Incarnation > known:
		// The server restarted (perhaps before this master heard of it):
		// the process that held its replicas and its lease is gone, so it
		// is removed at once (no lease to wait out), unless it is the only
		// one left with a volume's data.
		m.submit(now, Command{Kind: CmdRestarted, Server: from, Incarnation: hb.Incarnation, Survive: m.survives(from, hb)})
	}
	st := m.servers[from]
	deaf := st != nil && m.deaf(now, st, hb)
	if st == nil {
		st = &serverState{}
		m.servers[from] = st
	}
	if !deaf {
		st.lastHeard = now
		st.alive = true
	}
	st.incarnation = hb.Incarnation
	st.status = map[wire.VolumeID]wire.VolumeStatus{}
	for _, s := range hb.Volumes {
		st.status[s.Volume] = s
		if len(s.Stable) > 0 {
			m.stable[s.Volume] = m.stable[s.Volume].Merge(s.Stable)
		}
	}
	for _, s := range hb.Volumes {
		if s.StalledFor > m.opts.FailureTimeout {
			m.noticeStall(now, s.Volume)
		}
	}

	// The keyspaces are copied: the transport encodes the reply on
	// another goroutine while an override may change them here.
	reply := &wire.HeartbeatReply{SentAt: hb.SentAt, Keyspaces: m.Keyspaces(),
		Returning: known != 0 && m.first[from] != hb.Incarnation}
	if hb.AuthVersion < m.auth.Version {
		// Before the lease below: a server never serves under a lease
		// without the users and roles the master had when granting it.
		t := m.serverAuthTable()
		reply.Auth = &t
	}
	if m.opts.Settings.Site != 0 {
		reply.Sites = m.opts.Settings.Sites
		reply.Cluster = m.opts.Settings.ClusterName()
		reply.Stable = m.stableTable()
	}
	// A lease only for the incarnation the log knows, only while this
	// member surely leads, not for a server that hears no replies, and
	// not for one about to be cut from a chain (links.go).
	// INVARIANT lease: lastGrant never passes lastHeard, so a server
	// removed for silence has no lease left.
	if !deaf && !m.cutting(from) && m.incarnations[from] == hb.Incarnation && (m.canGrant == nil || m.canGrant(now)) {
		reply.LeaseGranted, reply.LeaseFor = true, m.opts.LeaseDuration
		st.lastGrant = now
	}
	// Only volumes the server reports or is named in can need a newer
	// configuration.
	candidates := m.volumesOf(from)
	for _, s := range hb.Volumes {
		candidates = append(candidates, s.Volume)
	}
	slices.Sort(candidates)
	for _, v := range slices.Compact(candidates) {
		c := m.configs[v]
		if c == nil {
			continue
		}
		s, has := st.status[v]
		if m.incarnations[from] == hb.Incarnation && ((has && s.Epoch < c.Epoch) || (!has && c.Contains(from))) {
			// Not before the log knows this incarnation: a restarted
			// server must not take a configuration that still counts it.
			reply.Configs = append(reply.Configs, c.Clone())
		}
	}
	m.send(from, reply)
	if !st.awaiting {
		st.awaiting, st.awaitingSince, st.awaitingSentAt = true, now, hb.SentAt
	}

	// A tail reports that its joining server caught up: make it the tail.
	for _, s := range hb.Volumes {
		c := m.configs[s.Volume]
		if c != nil && s.JoinerReady && s.Epoch == c.Epoch && c.Tail() == from && c.Joining != "" && m.mayPropose(now, c.Volume) {
			m.submit(now, Command{Kind: CmdPromote, Volume: c.Volume, Epoch: c.Epoch})
		}
	}
}

// deaf reports whether a server whose heartbeat this master hears has
// heard none of its replies for longer than the failure timeout: the
// master's messages to it are lost (a one-way fault). Such a server
// renews no lease and so serves nothing, and it takes no new
// configuration; its heartbeats therefore do not count as hearing from
// it, and the failure detector removes it like a silent server instead
// of leaving its chains stalled for as long as the fault lasts. Replies
// still go out, so a server whose link is back shows it on its next
// heartbeat. Found by catena torture (docs/torture.md).
func (m *Master) deaf(now wire.Time, st *serverState, hb *wire.Heartbeat) bool {
	if !st.awaiting || st.incarnation != hb.Incarnation || hb.Heard >= st.awaitingSentAt {
		st.awaiting = false // a new process, or it heard that reply (or a later one)
		return false
	}
	return now-st.awaitingSince > m.opts.FailureTimeout
}

// survives returns the volumes a restarted server should keep: it is a
// member, reports holding the volume, and no other member is intact
// (alive, in the incarnation the log knows, holding the volume). In a
// causal chain only a member that holds every answered update (it
// reports Complete) may lead the chain back alone, and one that is not
// complete does not count as intact: the chain waits for a complete one.
func (m *Master) survives(from wire.NodeID, hb *wire.Heartbeat) []wire.VolumeID {
	reported := map[wire.VolumeID]wire.VolumeStatus{}
	for _, s := range hb.Volumes {
		reported[s.Volume] = s
	}
	var out []wire.VolumeID
	for _, v := range m.volumes() {
		c := m.configs[v]
		s, holds := reported[v]
		if c.Index(from) < 0 || !holds || c.Causal() && !s.Complete {
			continue
		}
		intact := slices.ContainsFunc(c.Chain, func(o wire.NodeID) bool {
			st := m.servers[o]
			if o == from || st == nil || !st.alive || st.incarnation != m.incarnations[o] {
				return false
			}
			s, has := st.status[v]
			return has && (!c.Causal() || s.Complete)
		})
		if !intact {
			out = append(out, v)
		}
	}
	return out
}

// lastComplete returns the causal chains a failed server stays a member
// of: it may hold answered updates no other member is known to
// (VolumeStatus.Complete; chain/causal.go). It reported itself complete,
// or reported nothing this leader heard while it is one of the first k,
// and no other live member reported itself complete. Removing it could
// lose those updates even though it may only be cut off for a while; so
// the chain waits for it, as a strong chain waits for its last member.
func (m *Master) lastComplete(failed wire.NodeID) []wire.VolumeID {
	var out []wire.VolumeID
	for _, v := range m.volumesOf(failed) {
		c := m.configs[v]
		i := c.Index(failed)
		if !c.Causal() || i < 0 || len(c.Chain) == 1 {
			continue
		}
		if s, has := m.servers[failed].status[v]; has && !s.Complete || !has && i >= c.K {
			continue
		}
		other := slices.ContainsFunc(c.Chain, func(o wire.NodeID) bool {
			st := m.servers[o]
			if o == failed || st == nil || !st.alive || st.incarnation != m.incarnations[o] {
				return false
			}
			s, has := st.status[v]
			return has && s.Complete
		})
		if !other {
			out = append(out, v)
		}
	}
	return out
}

// mayPropose reports whether a change to volume v may be proposed now,
// and if so notes that one is.
func (m *Master) mayPropose(now wire.Time, v wire.VolumeID) bool {
	if m.pending(now, v) {
		return false
	}
	m.proposedAt[v] = now
	return true
}

// pending reports whether a change to volume v was proposed too recently
// for another.
func (m *Master) pending(now wire.Time, v wire.VolumeID) bool {
	at, ok := m.proposedAt[v]
	return ok && now-at < proposalRetry
}

// Tick runs the failure detector, cuts stalled links (links.go) and
// starts extensions (leader only).
func (m *Master) Tick(now wire.Time) []wire.Envelope {
	if !m.leading {
		return nil
	}
	// A member that never registered (it failed before this leader heard
	// of it) is watched like any other.
	for _, c := range m.configs {
		for _, id := range c.Chain {
			if m.servers[id] == nil {
				m.servers[id] = &serverState{lastHeard: now, lastGrant: now, alive: true}
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		st := m.servers[id]
		if st.alive && now-st.lastHeard > m.opts.FailureTimeout {
			st.alive = false
			m.expired++
			// INVARIANT lease: the suspect's lease has expired before any
			// configuration without it is installed.
			if now < st.lastGrant+m.opts.LeaseGuard() {
				panic(fmt.Sprintf("INVARIANT lease: removing %s at %d before its lease guard ends at %d", id, now, st.lastGrant+m.opts.LeaseGuard()))
			}
			m.submit(now, Command{Kind: CmdRemove, Server: id, Survive: m.lastComplete(id)})
		}
	}
	m.proposeCuts(now)
	m.recover(now)
	return m.flush()
}

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

// kept returns how many leading members of c a planned removal (CmdShrink)
// keeps: a causal chain's first k hold the updates answered and not yet
// at the tail, and only they do. Removing one leaves k−1 copies until its
// successor catches up, and failures the master has not noticed yet may
// have taken those: the head of a k = 1 chain answers alone, so removing
// it loses what it has not forwarded even with no failure at all. A
// strong chain's tail holds every answered update, and it is never
// removed.
func kept(c *wire.Config) int { return c.K }

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

// Apply applies a committed command (replicated master). It returns the
// messages the leader sends about it.
func (m *Master) Apply(now wire.Time, c Command) []wire.Envelope {
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
	case CmdRecreate:
		cur := m.configs[c.Volume]
		if cur == nil || cur.Epoch != c.Epoch {
			return
		}
		next := cur.Clone()
		next.Joining = ""
		next.Fresh = true
		m.install(next, cur)
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

func (m *Master) status() *wire.StatusReply {
	reply := &wire.StatusReply{Configs: m.Configs(), Masters: slices.Clone(m.members), Leader: m.leader, Keyspaces: m.Keyspaces(),
		Site: m.opts.Settings.Site, Sites: m.opts.Settings.Clone().Sites, Cluster: m.opts.Settings.ClusterName()}
	for _, id := range slices.Sorted(maps.Keys(m.incarnations)) {
		ss := wire.ServerStatus{ID: id, Incarnation: m.incarnations[id]}
		if st := m.servers[id]; st != nil {
			ss.Alive = st.alive
			for _, v := range slices.Sorted(maps.Keys(st.status)) {
				ss.Volumes = append(ss.Volumes, st.status[v])
			}
		}
		reply.Servers = append(reply.Servers, ss)
	}
	return reply
}

// stableTable returns the table of stable updates per geo volume, in
// volume order.
func (m *Master) stableTable() []wire.VolumeVector {
	out := make([]wire.VolumeVector, 0, len(m.stable))
	for _, v := range slices.Sorted(maps.Keys(m.stable)) {
		out = append(out, wire.VolumeVector{Volume: v, Vector: slices.Clone(m.stable[v])})
	}
	return out
}
