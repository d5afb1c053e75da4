package chain

import (
	"fmt"
	"slices"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	ID wire.NodeID
	// Masters lists the master's members; heartbeats go to all of them,
	// and the leader answers.
	Masters []wire.NodeID
	// Incarnation must grow each time the server process starts, also
	// across a wiped data directory (catena server starts a new
	// directory's count from the wall clock).
	Incarnation uint64
	// NewDataDir says this process created the server's data directory:
	// it believes it is the server's first process, and says so to the
	// master, which may know better (HeartbeatReply.Returning).
	// Incarnation 1 implies it.
	NewDataDir bool
	// Protocol is the range of protocol versions the server speaks
	// (zero: release.Speaks), told to the master in every heartbeat.
	Protocol release.Range
	// ClockOffsetMax bounds every clock's offset from true time, as
	// the deployment assumes it (zero: DefaultClockOffsetMax): a server
	// whose clock the heartbeats find beyond half of it answers nothing
	// about keys with deadlines (docs/adr/0028).
	ClockOffsetMax    wire.Time
	HeartbeatInterval wire.Time
	Limits            Limits
	// Engine holds the server's volumes; replicas it has state for are
	// restored (wedged until the master's next configuration).
	Engine    storage.Engine
	Observer  Observer
	Mutations Mutations
	// Reads says which members of a chain answer queries (default: the
	// tail only).
	Reads ReadMode
	// Site is the server's site in a deployment of several (0: one site,
	// no geo volumes).
	Site wire.SiteID
	// CommitsLag: the environment commits the Engine after steps and
	// calls Committed (ReplicaOptions.CommitsLag): the node loop does.
	CommitsLag bool
	// Loop makes the server one of several event loops of its process
	// (loops.go); the zero value is the only one.
	Loop LoopOptions
	// Modes makes each volume's mode from its configuration
	// (internal/chain/modes.New makes every mode; nil: StrongOnly).
	Modes Modes
	// CheckInvariants asserts each replica's local invariants after
	// each of its steps (Replica.CheckInvariants, but for the protocol
	// errors a peer caused, which are logged): a violation panics, so a
	// process stops rather than go on from a broken state. The simulator
	// checks them always; catena dev, the integration tests and catena
	// torture turn it on for real processes (catena server
	// -check-invariants).
	CheckInvariants bool
}

// Server is one storage server: the replicas of the volumes it hosts and
// its lease with the master.
//
// The lease is the master's promise not to install a configuration without
// this server before it expires (see docs/adr/0002-leases-and-epochs.md).
// The server counts it from the moment it sent the heartbeat the master
// answered, on its own clock, so it expires on the server no later than
// the master stops honouring it given the bounded clock drift the master
// assumes. Without a valid lease a server answers no query and accepts no
// update: a server the master removed while it was still running (false
// suspicion, partition, long pause) stops serving before the new
// configuration takes effect.
type Server struct {
	opts     ServerOptions
	replicas map[wire.VolumeID]*Replica
	// order holds the keys of replicas in order: Tick and heartbeats visit
	// every volume, and sorting the map's keys each time dominated large
	// simulations.
	order []wire.VolumeID
	// ordered holds the replicas in the order of order.
	ordered    []*Replica
	leaseUntil wire.Time
	// heard is the SentAt the newest heartbeat reply echoed, reported in
	// every heartbeat (wire.Heartbeat.Heard).
	heard wire.Time
	// clusterVersion is the protocol version the cluster runs at, as
	// the master's last reply said (0 before any).
	clusterVersion uint32
	// clock is what the replicas ask before they use deadlines
	// (expiry.go).
	clock serverClock
	// heartbeatDue is when the next heartbeat is sent.
	heartbeatDue wire.Time
	// removedAt is, per volume this process held a replica of and was
	// then removed from, the epoch that removed it. Configurations at or
	// below it are stale (a deposed master member may still send them)
	// and are ignored: with its replica gone, nothing else remembers
	// that this server has moved past them, and an empty replica created
	// for one would, in a server's first process, take the stale
	// membership (simulator seed 518).
	removedAt map[wire.VolumeID]wire.Epoch
	// keyspaces are the master's keyspaces, the default first; requests
	// routed with another list are refused (misrouted).
	keyspaces []wire.Keyspace
	// heldBack lists, in the order their steps left them so, the replicas
	// whose lazy phase holds updates back for Idle (Traits.LazyFrom); a replica
	// is listed at most once (Replica.listedHeldBack), so a step costs
	// O(1) however many volumes hold updates back.
	heldBack []*Replica
	// sites is the server's view of the sites (nil with Site 0).
	sites *siteView
	// refusals are the messages of another deployment refused since
	// Refusals last ran (for the log).
	refusals []string
	// silence is the hung loop for which this loop 0 withheld its last
	// heartbeat, nil while heartbeats go (Silence).
	silence *LoopSilence
	// auth is the master's users and roles (auth.go).
	auth authView
	// firstProcess is set while this may be the server's first process
	// ever: only then may an empty replica become a member
	// (Replica.firstStart).
	firstProcess bool
	// seedsMade are the volumes this loop's replicas seeded since the
	// last takeSeeds.
	seedsMade []wire.VolumeID
}

// NewServer returns a server hosting no volume yet; it learns its volumes
// from the master.
func NewServer(o ServerOptions) *Server {
	o.NewDataDir = o.NewDataDir || o.Incarnation == 1 // incarnation 1 is always a new directory
	if o.Loop.many() && (o.Loop.Statuses == nil || o.Site != 0 || o.Loop.Index < 0 || o.Loop.Index >= o.Loop.Count) {
		// A server of several sites shares its site view between its
		// volumes: one loop (docs/adr/0019-event-loops.md).
		panic(fmt.Sprintf("chain: loop %d of %d needs LoopStatuses and one site", o.Loop.Index, o.Loop.Count))
	}
	if o.ClockOffsetMax <= 0 {
		o.ClockOffsetMax = DefaultClockOffsetMax
	}
	s := &Server{opts: o, replicas: map[wire.VolumeID]*Replica{}, removedAt: map[wire.VolumeID]wire.Epoch{},
		firstProcess: o.NewDataDir}
	s.clock = serverClock{offsetMax: o.ClockOffsetMax, ignoreBound: o.Mutations.ExpiryTrustsClock}
	if o.Site != 0 {
		s.sites = newSiteView(s, o.Site)
	}
	for _, v := range o.Engine.Volumes() {
		if !s.owns(v) {
			continue // another loop's
		}
		if r := RestoreReplica(s.replicaOptions(v)); r != nil {
			s.setReplica(v, r)
		}
	}
	return s
}

func (s *Server) replicaOptions(v wire.VolumeID) ReplicaOptions {
	return ReplicaOptions{
		ID: s.opts.ID, Volume: v, Store: s.opts.Engine.Volume(v),
		Limits: s.opts.Limits, Observer: s.opts.Observer, Mutations: s.opts.Mutations,
		FirstStart:   s.firstProcess,
		Incarnation:  s.opts.Incarnation,
		Reads:        s.opts.Reads,
		Sites:        s.siteView(),
		CommitsLag:   s.opts.CommitsLag,
		Modes:        s.opts.Modes,
		clock:        &s.clock,
		SiblingStore: s.opts.Engine.Volume,
		seedMade:     s.seedMade,
	}
}

// Committed tells every replica that the storage writes of the steps so
// far are durable (Replica.Committed); the messages it returns go out
// after those that waited for the commit.
func (s *Server) Committed(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	ready := false
	for _, r := range s.ordered {
		o := r.Committed(now)
		s.assertInvariants(r)
		out = append(out, o.Messages...)
		ready = ready || o.JoinerReady
	}
	if ready {
		out = append(out, s.heartbeat(now)...) // (as stepReplica does)
	}
	return out
}

// siteCluster returns the deployment's name ("" with one site).
func (s *Server) siteCluster() string {
	if s.sites == nil {
		return ""
	}
	return s.sites.cluster
}

// siteView returns the server's SiteView, nil with one site.
func (s *Server) siteView() SiteView {
	if s.sites == nil {
		return nil
	}
	return s.sites
}

// setReplica adds or replaces a volume's replica.
func (s *Server) setReplica(v wire.VolumeID, r *Replica) {
	i, found := slices.BinarySearch(s.order, v)
	if found {
		s.ordered[i] = r
	} else {
		s.order = slices.Insert(s.order, i, v)
		s.ordered = slices.Insert(s.ordered, i, r)
	}
	s.replicas[v] = r
}

// deleteReplica drops a volume's replica.
func (s *Server) deleteReplica(v wire.VolumeID) {
	if i, found := slices.BinarySearch(s.order, v); found {
		s.order = slices.Delete(s.order, i, i+1)
		s.ordered = slices.Delete(s.ordered, i, i+1)
	}
	delete(s.replicas, v)
}

// ProtocolErrors returns and clears the protocol errors of every replica:
// messages from peers that contradicted the protocol and were dropped.
func (s *Server) ProtocolErrors() []string {
	var out []string
	for _, r := range s.ordered {
		out = append(out, r.ProtocolErrors()...)
	}
	return out
}

// refuse records a message refused because it came from another
// deployment, for Refusals.
func (s *Server) refuse(why string) {
	if len(s.refusals) < refusalsMax {
		s.refusals = append(s.refusals, why)
	}
}

// refusalsMax bounds the refusals kept between two calls of Refusals.
const refusalsMax = 64

// Silence reports the loop of this process that has published nothing
// for longer than LoopOptions.SilenceMax, for which loop 0 withheld its
// last heartbeat, for the process to log; false while heartbeats go.
func (s *Server) Silence() (LoopSilence, bool) {
	if s.silence == nil {
		return LoopSilence{}, false
	}
	return *s.silence, true
}

// Refusals returns and clears the messages refused since the last call
// because they came from a site of another deployment (its masters'
// Settings.Cluster), for the process to log.
func (s *Server) Refusals() []string {
	out := s.refusals
	s.refusals = nil
	return out
}

// ID returns the server's id.
func (s *Server) ID() wire.NodeID { return s.opts.ID }

// Replica returns the replica of a volume, or nil.
func (s *Server) Replica(v wire.VolumeID) *Replica { return s.replicas[v] }

// Volumes returns the volumes the server holds a replica of, in order.
func (s *Server) Volumes() []wire.VolumeID { return slices.Clone(s.order) }

// HasLease reports whether the server's lease is valid at now.
func (s *Server) HasLease(now wire.Time) bool { return now < s.leaseUntil }

// Idle forwards what the replicas' lazy phases held back: the node calls
// it once no input waits, so lazy propagation yields to eager traffic.
func (s *Server) Idle(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for _, r := range s.heldBack {
		r.listedHeldBack = false
		if s.replicas[r.volume] == r {
			out = append(out, r.Idle()...)
			s.assertInvariants(r)
		}
	}
	s.heldBack = s.heldBack[:0]
	return out
}

// Tick sends heartbeats and lets replicas retry.
func (s *Server) Tick(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	if now >= s.heartbeatDue && s.speaksToMaster() {
		if hb := s.heartbeat(now); hb != nil {
			s.heartbeatDue = now + s.opts.HeartbeatInterval
			out = append(out, hb...)
		}
	}
	leased := s.HasLease(now)
	for _, r := range s.ordered {
		out = append(out, r.Tick(now)...)
		if leased {
			out = append(out, r.Reclaim(now)...)
		}
		s.assertInvariants(r)
	}
	if s.sites != nil {
		out = append(out, s.sites.tick(now)...)
	}
	for _, r := range s.heldBack {
		r.listedHeldBack = false // every replica forwarded on its tick
	}
	s.heldBack = s.heldBack[:0]
	return out
}

// heartbeat returns the process's heartbeat to each master member. A
// loop other than loop 0 asks loop 0 to send one instead; loop 0 sends
// none before every loop published its statuses.
func (s *Server) heartbeat(now wire.Time) []wire.Envelope {
	if !s.speaksToMaster() {
		s.opts.Loop.Statuses.WantHeartbeat(s.opts.Loop.Index)
		return nil
	}
	if silent, hung := s.silentLoop(now); hung {
		// A hung loop's volumes stay in their chains while heartbeats
		// come: none go until it runs again (LoopOptions.SilenceMax).
		s.silence = &silent
		return nil
	}
	s.silence = nil
	volumes, ok := s.allStatuses(now)
	if !ok {
		return nil
	}
	out := make([]wire.Envelope, len(s.opts.Masters))
	for i, m := range s.opts.Masters {
		out[i] = wire.Envelope{To: m, Msg: &wire.Heartbeat{Incarnation: s.opts.Incarnation, SentAt: now, Volumes: volumes, Heard: s.heard, AuthVersion: s.auth.version,
			NewDataDir: s.opts.NewDataDir, MinProtocol: s.protocol().Min, MaxProtocol: s.protocol().Max}}
	}
	return out
}

// protocol returns the versions the server speaks.
func (s *Server) protocol() release.Range {
	if s.opts.Protocol == (release.Range{}) {
		return release.Speaks
	}
	return s.opts.Protocol
}

// ClusterVersion returns the protocol version the cluster runs at, as
// the master last said (1 before it said; docs/upgrades.md): a behaviour
// that needs version v is used only once it is at least v.
func (s *Server) ClusterVersion() uint32 { return max(1, s.clusterVersion) }

// ClockOffset returns the server's clock offset from the master's as the
// last heartbeat measured it (master minus server), whether one did, and
// whether the clock passes the check at now: while it does not, the
// server answers nothing about keys with deadlines (docs/adr/0028).
func (s *Server) ClockOffset(now wire.Time) (offset wire.Time, measured, trusted bool) {
	return s.clock.offset, s.clock.measured, s.clock.trusted(now)
}

// Incompatible reports why the server cannot go on: the master says the
// cluster runs at a protocol version it does not speak (a downgrade
// after finalizing). The process stops with it.
func (s *Server) Incompatible() error {
	if v, p := s.ClusterVersion(), s.protocol(); v > p.Max {
		return fmt.Errorf("the cluster runs at protocol version %d (finalized), and this server (release %s) speaks at most %d: run a release that speaks it (docs/upgrades.md)",
			v, release.Version, p.Max)
	}
	return nil
}

// Step handles one message.
func (s *Server) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	switch m := m.(type) {
	case *wire.HeartbeatReply:
		if !slices.Contains(s.opts.Masters, from) {
			return nil
		}
		s.heard = max(s.heard, m.SentAt)
		s.clusterVersion = max(s.clusterVersion, m.ClusterVersion)
		if s.Incompatible() != nil {
			return nil // the process stops: nothing of this cluster for it
		}
		s.clock.version = s.clusterVersion
		if e, ok := s.opts.Engine.(storage.VersionedEngine); ok {
			e.SetClusterVersion(s.ClusterVersion())
		}
		s.clock.measure(now, m.SentAt, m.WallTime, s.opts.HeartbeatInterval)
		if m.Returning && s.firstProcess {
			// The master knew an earlier process: the data directory was
			// wiped or replaced. Before adopting the reply's configurations.
			s.firstProcess = false
			for _, r := range s.ordered {
				r.firstStart = false
			}
		}
		if m.Auth != nil {
			s.auth.learn(*m.Auth) // before the lease it may grant
		}
		if m.LeaseGranted {
			s.leaseUntil = max(s.leaseUntil, m.SentAt+m.LeaseFor)
		}
		if wire.NewerKeyspaces(s.keyspaces, m.Keyspaces) {
			s.keyspaces = slices.Clone(m.Keyspaces)
		}
		var out []wire.Envelope
		for _, c := range m.Configs {
			out = append(out, s.adopt(now, c)...)
		}
		if s.sites != nil {
			if len(m.Sites) > 0 {
				s.sites.sites = slices.Clone(m.Sites)
				s.sites.cluster = m.Cluster
			}
			s.sites.learnTable(m.Stable)
			out = append(out, s.geoProgress(now)...)
		}
		return out
	case *wire.NewConfig:
		if !slices.Contains(s.opts.Masters, from) {
			return nil
		}
		return s.adopt(now, m.Config)
	case *wire.NewAuth:
		if slices.Contains(s.opts.Masters, from) {
			s.auth.learn(m.Table)
		}
		return nil
	case *wire.ClientRequest:
		if code := s.authorize(from, m); code != wire.ErrNone {
			return []wire.Envelope{{To: from, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Err: code}}}
		}
		r := s.replicas[m.Volume]
		if r == nil && m.FromSite != 0 {
			// Another site's head forwarded the request on a route that
			// names this server, which holds the volume no more: it
			// asks this site's masters for the volume's chain.
			return []wire.Envelope{{To: from, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Err: wire.ErrNotHead}}}
		}
		if r == nil || !(s.HasLease(now) || mutation.Enabled && s.opts.Mutations.IgnoreLease) {
			return []wire.Envelope{{To: from, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Err: wire.ErrUnavailable}}}
		}
		if code := s.checkRoute(m); code != wire.ErrNone {
			return []wire.Envelope{{To: from, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Err: code}}}
		}
		return s.stepReplica(now, from, r, m)
	case *wire.ConfigRequest:
		// A client took this server for a master: name the masters, so
		// it can say what is wrong (clientcore.Core.NotMaster).
		return []wire.Envelope{{To: from, Msg: &wire.ConfigReply{Masters: slices.Clone(s.opts.Masters)}}}
	case *wire.PeerReset:
		var out []wire.Envelope
		for _, r := range s.ordered {
			out = append(out, s.stepReplica(now, from, r, m)...)
		}
		return out
	case *wire.Forward:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.Ack:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.QueryUp:
		if r := s.replicas[m.Volume]; r != nil && !(s.HasLease(now) || mutation.Enabled && s.opts.Mutations.IgnoreLease) {
			return []wire.Envelope{{To: m.ReplyTo, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Request.Client, ReqNo: m.Request.ReqNo, Err: wire.ErrUnavailable}}}
		}
		return s.toReplica(now, from, m.Volume, m)
	case *wire.SyncRequest:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.SyncReply:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.Durable:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.SnapshotChunk:
		return s.toReplica(now, from, m.Volume, m)
	default:
		// Messages between sites (siteview.go).
		return s.stepFromSites(now, from, m)
	}
}

// checkRoute refuses a request routed with another keyspace list than
// this server's: a client that does not know a new keyspace would send
// its keys to a volume of the default keyspace. A client that knows more
// keyspaces than this server waits for the server to learn them.
func (s *Server) checkRoute(m *wire.ClientRequest) wire.ErrCode {
	switch n := wire.KeyspacesVersion(s.keyspaces); {
	case m.Keyspaces == 0 || mutation.Enabled && s.opts.Mutations.SplitKeepsServing:
		return wire.ErrNone // routed without keyspaces (experiments)
	case m.Keyspaces < n:
		return wire.ErrKeyspaces
	case m.Keyspaces > n:
		return wire.ErrUnavailable
	}
	if m.Op.Kind.NamesVolume() {
		// A scan or export names its volume; its key is only where it
		// starts.
		if _, ok := placement.KeyspaceOfVolume(s.keyspaces, m.Volume); !ok {
			return wire.ErrBadRequest
		}
		return wire.ErrNone
	}
	if v, ok := placement.Route(s.keyspaces, m.Op.Key); !ok || v != m.Volume {
		return wire.ErrBadRequest // routed with the same keyspaces: a client bug or forgery
	}
	return wire.ErrNone
}

func (s *Server) toReplica(now wire.Time, from wire.NodeID, v wire.VolumeID, m wire.Message) []wire.Envelope {
	r := s.replicas[v]
	if r == nil {
		return nil
	}
	return s.stepReplica(now, from, r, m)
}

// stepReplica hands a message to a replica. When the step made the
// replica's joining server ready, the tail is paused until the master
// promotes the joiner, so the server tells the master at once with a
// heartbeat rather than at the next one.
func (s *Server) stepReplica(now wire.Time, from wire.NodeID, r *Replica, m wire.Message) []wire.Envelope {
	committed := r.committed
	out := r.Step(now, from, m)
	s.assertInvariants(r)
	if !r.listedHeldBack && r.HasHeldBack() {
		r.listedHeldBack = true
		s.heldBack = append(s.heldBack, r)
	}
	if r.committed > committed && r.shipping != nil && s.sites != nil {
		// What this member knows stable grew: heads of this server that
		// wait for it may go on (siteView.StableCount asks this replica).
		s.sites.tableGrew = true
		out.Messages = append(out.Messages, s.geoProgress(now)...)
	}
	if out.JoinerReady {
		return append(out.Messages, s.heartbeat(now)...)
	}
	return out.Messages
}

// fullWithout reports whether c, which leaves this server out, is as long
// as its keyspace's replication factor (false while the server does not
// know the keyspace).
func (s *Server) fullWithout(c wire.Config) bool {
	for _, k := range s.keyspaces {
		if k.HasVolume(c.Volume) {
			return k.ReplicationFactor > 0 && len(c.Chain) >= k.ReplicationFactor
		}
	}
	return false
}

// adopt hands a configuration to the volume's replica, creating it if this
// server is named, and dropping it if this server was removed (a replica
// that keeps its state for a catch-up stays, wedged: catchup.go).
func (s *Server) adopt(now wire.Time, c wire.Config) []wire.Envelope {
	if !s.owns(c.Volume) || c.Epoch <= s.removedAt[c.Volume] {
		return nil
	}
	r := s.replicas[c.Volume]
	created := false
	if r == nil {
		seed := s.splitSeed(c)
		if !c.Contains(s.opts.ID) {
			return nil
		}
		r, created = seed, true
		if r == nil {
			r = NewReplica(s.replicaOptions(c.Volume))
		}
		s.setReplica(c.Volume, r)
	}
	verdict, out := r.Adopt(now, c)
	s.assertInvariants(r)
	if verdict == AdoptionRetained && s.fullWithout(c) {
		// The chain is as long as its keyspace wants without this
		// server: the master will not add it back soon.
		r.Drop()
		verdict = AdoptionRemoved
	}
	switch {
	case verdict == AdoptionRemoved:
		s.deleteReplica(c.Volume)
		s.removedAt[c.Volume] = c.Epoch
	case created && (verdict == AdoptionRefused || verdict == AdoptionStale):
		// The replica created for this configuration did not take it and
		// holds nothing (see Replica.Adopt).
		s.deleteReplica(c.Volume)
	}
	return out
}

// assertInvariants panics if r's local invariants do not hold, when the
// server checks them (ServerOptions.CheckInvariants).
func (s *Server) assertInvariants(r *Replica) {
	if !s.opts.CheckInvariants {
		return
	}
	if err := r.checkState(); err != nil {
		panic(fmt.Sprintf("%s volume %d: %v", s.opts.ID, r.volume, err))
	}
}

// splitSeed returns the replica a split of another volume seeded on this
// server for c's volume (split.go), when c names this server a member:
// the master starts the sibling's chain on the servers that seeded it.
// A seed c does not name is dropped. Nil if there is none.
func (s *Server) splitSeed(c wire.Config) *Replica {
	store := s.opts.Engine.Volume(c.Volume)
	meta, ok := store.Meta()
	if !ok || !meta.Seeded {
		return nil
	}
	if c.Index(s.opts.ID) < 0 {
		store.Reset()
		return nil
	}
	return RestoreReplica(s.replicaOptions(c.Volume))
}

// seedMade records that a replica of this loop seeded volume v
// (Replica.seedMade).
func (s *Server) seedMade(v wire.VolumeID) { s.seedsMade = append(s.seedsMade, v) }

// takeSeeds makes the seeds this loop's replicas made, and those another
// loop of the process made for this loop's volumes, replicas of this
// loop: wedged, holding the seed's state, reporting it in heartbeats
// (wire.VolumeStatus.Seed) until the master's first configuration of the
// volume starts it or drops it. So a seed is reported by the server that
// holds it, whether or not it is still a member of the parent's chain
// (the master may move or remove it before the sibling starts), as a
// restarted server's restored seeds are. It runs before the loop's
// statuses are taken, when its steps' writes have committed.
func (s *Server) takeSeeds() {
	made := s.seedsMade
	s.seedsMade = nil
	if s.opts.Loop.many() {
		var own []wire.VolumeID
		for _, v := range made {
			if s.owns(v) {
				own = append(own, v)
			} else {
				s.opts.Loop.Statuses.HandSeed(LoopOf(v, s.opts.Loop.Count), v)
			}
		}
		made = append(own, s.opts.Loop.Statuses.TakeSeeds(s.opts.Loop.Index)...)
	}
	for _, v := range made {
		if s.replicas[v] != nil {
			continue // started meanwhile
		}
		if meta, ok := s.opts.Engine.Volume(v).Meta(); !ok || !meta.Seeded {
			continue // dropped meanwhile
		}
		if r := RestoreReplica(s.replicaOptions(v)); r != nil {
			s.setReplica(v, r)
		}
	}
}
