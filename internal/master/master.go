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
//
// master.go holds the Master, its options and its message dispatch;
// commands.go the replicated state machine every member applies;
// leader.go the leader's failure detector and leases, recovery.go its
// recovery planning and role moves, links.go its cuts of stalled links;
// keyspaces.go, auth.go and settings.go the keyspaces, users and roles,
// and settings; invariants.go the checks of the durable state; state.go
// the saved state, raft.go the replicated master.
package master

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/release"
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
	// Protocol is the range of protocol versions this member speaks
	// (zero: release.Speaks). Tests set it to play other releases.
	Protocol release.Range
	// CheckInvariants asserts the durable state's invariants
	// (CheckInvariants) after each Step, Tick and Apply: a violation
	// panics, so the process stops rather than hand out configurations
	// from a broken state (catena master -check-invariants). The
	// simulator checks them always.
	CheckInvariants bool
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
	// clusterVersion is the protocol version the cluster runs at (0:
	// 1), raised by CmdClusterVersion; versionWaiters are the admins
	// waiting for a finalize to apply (upgrade.go).
	clusterVersion uint32
	// newCluster is set while this member knows the cluster is new:
	// a single master that created its state, or a Raft member that
	// created the log and leads with nothing after its creation
	// snapshot (so no majority ever committed more). Its first
	// leadership raises the cluster version to its release's newest.
	newCluster     bool
	versionWaiters []wire.NodeID
	// unknownCommand is the kind of a command from the log this release
	// does not know (0: none applied): the member must stop.
	unknownCommand CommandKind
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
	m.newCluster = true
	m.SetLeader(0, true, id)
	return m, nil
}

// Leading reports whether this member acts as the leader.
func (m *Master) Leading() bool { return m.leading }

// Leader returns the member this one believes leads ("" if none).
func (m *Master) Leader() wire.NodeID { return m.leader }

// Status returns what a StatusRequest is answered with: this member's
// view of the cluster.
func (m *Master) Status() *wire.StatusReply { return m.status() }

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
	defer m.assertInvariants()
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
		m.send(from, &wire.ConfigReply{Configs: m.Configs(), Masters: slices.Clone(m.members), Leader: m.leader, Keyspaces: m.Keyspaces(), Cluster: cluster,
			ClusterVersion: m.ClusterVersion()})
	case *wire.KeyspaceRequest:
		m.handleKeyspaceRequest(now, from, msg)
	case *wire.AuthRequest:
		m.handleAuthRequest(now, from, msg)
	case *wire.VersionRequest:
		m.handleVersionRequest(now, from, msg)
	case *wire.StatusRequest:
		m.send(from, m.status())
	}
	return m.flush()
}

func (m *Master) status() *wire.StatusReply {
	reply := &wire.StatusReply{Configs: m.Configs(), Masters: slices.Clone(m.members), Leader: m.leader, Keyspaces: m.Keyspaces(),
		Site: m.opts.Settings.Site, Sites: m.opts.Settings.Clone().Sites, Cluster: m.opts.Settings.ClusterName(), ClusterVersion: m.ClusterVersion()}
	for _, id := range slices.Sorted(maps.Keys(m.incarnations)) {
		ss := wire.ServerStatus{ID: id, Incarnation: m.incarnations[id]}
		if st := m.servers[id]; st != nil {
			ss.Alive = st.alive
			ss.MinProtocol, ss.MaxProtocol = st.protocol.Min, st.protocol.Max
			for _, v := range slices.Sorted(maps.Keys(st.status)) {
				ss.Volumes = append(ss.Volumes, st.status[v])
			}
		}
		reply.Servers = append(reply.Servers, ss)
	}
	return reply
}
