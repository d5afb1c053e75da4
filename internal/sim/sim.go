package sim

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// A simulated run: the Cluster, its assembly (build), and Run, which
// schedules the workload, the faults and the heal, then checks the run
// (checks.go). Its options are in options.go, its faults in faults.go.

// Result is the outcome of one run.
type Result struct {
	Seed       uint64
	Err        error
	Operations int
	Unknown    int
	// Scans counts the whole scans walked and checked (Options.Scans).
	Scans int
	// WatchEvents counts the events the watchers received and checked
	// (Options.Watches).
	WatchEvents int
	// Exports counts the volumes read whole and checked (Options.Backups).
	Exports int
	// Volumes is how many volumes the default keyspace ended with
	// (Options.Splits: more than it began with once a split applied).
	Volumes int
	// ExpiryKeys and ExpiryReads count the keys with a TTL whose
	// deadline was known and the reads of them checked (Options.Expiry).
	ExpiryKeys, ExpiryReads int
	Faults                  []string
	// Trace is a hash of every processed event: equal for equal runs.
	Trace   uint64
	Elapsed wire.Time
	// CatchUps and Snapshots count how joining servers received their
	// state: the updates they missed, or a whole copy (chain/catchup.go).
	CatchUps, Snapshots int
}

const volume = wire.VolumeID(0)

// Cluster is a simulated Catena cluster under a workload. Scripts use it
// to schedule faults at chosen times.
type Cluster struct {
	opts    Options
	w       *world
	masters []wire.NodeID
	chains  map[wire.VolumeID][]wire.NodeID
	// raftLogs keep each master member's Raft state across its restarts.
	raftLogs  map[wire.NodeID]*raftlog.Memory
	servers   []wire.NodeID
	clients   []*client
	histories *check.Histories
	history   []check.Operation
	acked     []ackedUpdate
	scans     []scanRecord
	// watchSegments are the watchers' streams, and watched what the run
	// recorded of each applied update (Options.Watches: watch.go).
	watchSegments []*watchSegment
	watched       map[uint64]watchedUpdate
	exports       []exportRecord
	// expiryRecord is what the clients did with keys that expire
	// (Options.Expiry; nil otherwise).
	expiryRecord *expiryRecord
	faults       []string
	failures     []string
	// down holds crashed servers waiting to restart.
	down map[wire.NodeID]bool
	// linkFaulted counts, per server, the one-way faults between chain
	// neighbours it is an end of (loseChainLink): the master may cut it
	// from a chain meanwhile.
	linkFaulted map[wire.NodeID]int
	// engines holds each server's storage, kept across restarts when
	// storage is durable.
	engines map[wire.NodeID]*storage.MemoryEngine
	// healed is when faults stopped.
	healed wire.Time
	// record holds what causal mode's checks need (causal.go).
	record causalRecord
	// sessions counts the client sessions started after a client gave
	// up on a causal write.
	sessions int
	// site, prefix and geo are set for a site of a run of several sites
	// (geo.go): the site's id, the prefix of its nodes' ids, the run.
	site   wire.SiteID
	prefix string
	geo    *geoRun
	// baseVolumes are the run's volumes without splits (volumes).
	baseVolumes []wire.VolumeID
}

func newCluster(o Options) *Cluster {
	return &Cluster{opts: o, histories: check.NewHistories(), watched: map[uint64]watchedUpdate{}, down: map[wire.NodeID]bool{}, linkFaulted: map[wire.NodeID]int{}, engines: map[wire.NodeID]*storage.MemoryEngine{}, raftLogs: map[wire.NodeID]*raftlog.Memory{},
		record: causalRecord{updates: map[reqKey]map[string]clientcore.KeyVersion{}, acked: map[wire.VolumeID]wire.SN{}, newest: map[wire.VolumeID]reqKey{}}}
}

// Run executes one simulated run and checks it.
func Run(o Options) (res Result) {
	o = o.withDefaults()
	if o.Sites > 1 {
		return runGeo(o)
	}
	c := newCluster(o)
	res.Seed = o.Seed
	defer func() {
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("panic at %v: %v\n%s", c.w.now, p, debug.Stack())
		}
		res.Faults = c.faults
		res.CatchUps, res.Snapshots = c.histories.Transfers()
		res.Trace = c.w.trace
		res.Elapsed = c.w.now
	}()
	c.build()
	start := 200 * wire.Millisecond
	c.w.at(start, func() {
		for _, cl := range c.clients {
			cl.issuing = true
		}
	})
	switch {
	case o.Script != nil:
		c.w.at(start, func() { o.Script(c) })
	case o.Faults:
		c.scheduleRandomFaults(start+100*wire.Millisecond, start+o.FaultPhase)
	}
	if o.Splits && o.Script == nil {
		c.scheduleSplits(start+100*wire.Millisecond, start+o.FaultPhase)
	}
	c.healed = start + o.FaultPhase
	c.w.at(c.healed, c.healAll)
	stopAt := c.healed + o.RecoveryTime
	c.w.at(stopAt, func() {
		for _, cl := range c.clients {
			cl.issuing = false
		}
	})
	c.w.run(stopAt + 2*wire.Second)
	if err := c.finalReads(); err != nil {
		c.fail(err.Error())
	}
	res.Err = c.verify()
	res.Operations, res.Scans, res.Exports, res.Volumes = len(c.history), len(c.scans), len(c.exports), len(c.volumes())
	res.WatchEvents = c.watchedEvents()
	if r := c.expiryRecord; r != nil {
		res.ExpiryKeys, res.ExpiryReads = len(r.puts), len(r.reads)
	}
	for _, op := range c.history {
		if op.Unknown {
			res.Unknown++
		}
	}
	return res
}

func (c *Cluster) fail(msg string) {
	if len(c.failures) < 10 {
		c.failures = append(c.failures, fmt.Sprintf("at %.3fs: %s", float64(c.w.now)/1e9, msg))
	}
}

func (c *Cluster) build() {
	o := c.opts
	if c.w == nil {
		c.w = newWorld(o.Seed, o.Network)
		c.w.traceLog = o.Trace
	}
	for i := range o.Servers {
		c.servers = append(c.servers, wire.NodeID(fmt.Sprintf("%ss%d", c.prefix, i+1)))
	}
	if o.Volumes == 1 && o.Placement == "" {
		c.chains = map[wire.VolumeID][]wire.NodeID{volume: slices.Clone(c.servers[:o.ChainLength])}
	} else {
		strategy := o.Placement
		if strategy == "" {
			strategy = placement.Random
		}
		chains, err := placement.Initial(strategy, c.servers, o.Volumes, o.ChainLength, c.w.rng)
		if err != nil {
			panic(err)
		}
		c.chains = chains
	}
	switch {
	case len(c.masters) > 0: // named by the run (sites know each other's)
	case o.Masters == 1:
		c.masters = []wire.NodeID{wire.NodeID(c.prefix + "m")}
	default:
		for i := range o.Masters {
			c.masters = append(c.masters, wire.NodeID(fmt.Sprintf("%sm%d", c.prefix, i+1)))
		}
	}
	for _, id := range c.masters {
		c.skewClock(c.w.addNode(id, c.newMaster(id), o.TickInterval, c.clockRate()))
	}
	for _, id := range c.servers {
		n := c.w.addNode(id, c.newServer(id, 1), o.TickInterval, c.clockRate())
		c.skewClock(n)
		c.startServer(n)
	}
	if o.Expiry && !c.causal() && !o.Hierarchical && o.Sites <= 1 {
		c.expiryRecord = &expiryRecord{puts: map[string]*expiryPut{}}
	}
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = c.keyName(i)
	}
	for i := range o.Clients {
		cl := c.newClient(wire.NodeID(fmt.Sprintf("%sc%d", c.prefix, i+1)), c.clientIDBase()+wire.ClientID(i+1), keys)
		cl.readOnly = i == 0
		cl.hashes = o.Hashes && !cl.readOnly && !c.causal() && !o.Hierarchical && o.Sites <= 1
		if c.expiryRecord != nil && !cl.readOnly {
			cl.expiryRecord, cl.expiryOps = c.expiryRecord, map[clientcore.OpID]expiryOp{}
		}
		if o.Scans && !cl.readOnly && !c.causal() && !o.Hierarchical && o.Sites <= 1 {
			cl.scans = &c.scans
		}
		if o.Backups && !cl.readOnly && !o.Hierarchical && o.Sites <= 1 {
			cl.exports = &c.exports
		}
		c.clients = append(c.clients, cl)
		c.w.addNode(cl.id, cl, o.TickInterval, 1)
	}
	if c.watches() {
		for i := range watchersPerRun {
			w := c.newWatcher(wire.NodeID(fmt.Sprintf("%sw%d", c.prefix, i+1)), c.clientIDBase()+wire.ClientID(1500+i))
			c.w.addNode(w.id, w, o.TickInterval, 1)
		}
	}
	if c.geo != nil {
		return // the run dispatches the checks to the site of each node
	}
	c.w.afterStep = c.checkStep
	if o.Causal {
		c.w.beforeSend = c.checkCausalReply
	}
}

// clientIDBase separates the client ids of the sites of a run.
func (c *Cluster) clientIDBase() wire.ClientID { return wire.ClientID(c.site) * 100_000 }

func (c *Cluster) clockRate() float64 {
	d := c.opts.ClockDriftMax
	return 1 - d + 2*d*c.w.rng.Float64()
}

// engine returns the storage a server process starts with: what the
// previous process left when storage is durable, empty otherwise.
func (c *Cluster) engine(id wire.NodeID) storage.Engine {
	if !c.opts.Durable || c.engines[id] == nil {
		c.engines[id] = storage.NewCrashableMemoryEngine()
	}
	return c.engines[id]
}

// serverMachine is a simulated server process: one chain.Server, or
// several event loops of one (Options.Loops).
type serverMachine interface {
	machine
	// Replica returns the process's replica of a volume, or nil.
	Replica(v wire.VolumeID) *chain.Replica
}

func (c *Cluster) newServer(id wire.NodeID, incarnation uint64) serverMachine {
	var observer chain.Observer = c.histories
	limits := chain.DefaultLimits
	limits.ExportPageObjects = 2 // (many pages, so failures fall between them)
	if c.causal() {
		observer = causalObserver{c}
		// A lazy backlog of a few updates, drawn per seed, so that both
		// of the lazy phase's bounds (an idle server, a full backlog)
		// forward, besides ticks.
		limits.LazyBacklogMax = wire.SN(2 + c.opts.Seed/16%4)
	}
	if c.opts.Hierarchical && c.geo != nil {
		observer = hierObserver{c.histories, c}
	}
	if c.watches() {
		observer = watchObserver{c.histories, c}
		// A short catch-up log, drawn per seed, so that watches resumed
		// after faults also find their revision compacted.
		limits.CatchUpLogMax = 50 + int(c.opts.Seed%4)*100
	}
	o := chain.ServerOptions{
		Modes: modes.New,
		ID:    id, Masters: c.masters, Incarnation: incarnation, Site: c.site,
		HeartbeatInterval: c.opts.HeartbeatInterval,
		Limits:            limits,
		Engine:            c.engine(id),
		Observer:          observer,
		Mutations:         c.opts.Mutations,
		Reads:             c.reads(),
		CommitsLag:        true, // startServer gives the node a disk
		ClockOffsetMax:    c.opts.ClockBound,
	}
	if c.opts.Loops > 1 {
		return chain.NewSteppedLoops(o, c.opts.Loops)
	}
	return chain.NewServer(o)
}

// watches reports whether the run has watchers (Options.Watches: strong
// keyspaces of one site).
func (c *Cluster) watches() bool {
	return c.opts.Watches && !c.causal() && !c.opts.Hierarchical && c.opts.Sites <= 1
}

// reads is the servers' read mode.
func (c *Cluster) reads() chain.ReadMode {
	if c.opts.CRAQReads {
		return chain.ReadsCleanAtAnyMember
	}
	return chain.ReadsAtTail
}

func (c *Cluster) newClient(id wire.NodeID, cid wire.ClientID, keys []string) *client {
	timeouts := clientTimeouts{attempt: 60 * wire.Millisecond, backoff: 10 * wire.Millisecond, giveUp: 2 * wire.Second, inFlight: 2}
	newCore := func(cid wire.ClientID) *clientcore.Core { return c.newCore(cid, timeouts, nil, 0) }
	core := newCore(cid)
	reads := clientcore.Strong
	if c.opts.CRAQReads {
		reads = clientcore.AnyMember
	}
	if c.causal() {
		// Causal+ orders a client's operations one after another: the
		// checker's sessions are sequential.
		timeouts.inFlight = 1
	}
	return &client{
		id: id, clientID: cid, session: int(cid), core: core, rng: c.w.rng, keys: keys, timeouts: timeouts,
		calls: map[clientcore.OpID]wire.Time{}, reads: reads, causal: c.causal(), onStart: c.started,
		newSession: func() (*clientcore.Core, wire.ClientID) {
			c.sessions++
			cid := c.clientIDBase() + wire.ClientID(2000+c.sessions)
			return newCore(cid), cid
		},
		history: c.historyOf(), acked: &c.acked,
		realTime: func() wire.Time { return c.w.now },
		failure:  c.fail,
		sites:    c.writeSites(), asked: map[clientcore.OpID]askedSites{}, durable: c.checkDurableAcrossSites,
	}
}

// newCore returns a client core of this site; after and afterTS are the
// causal past of a session that moves here from another site.
func (c *Cluster) newCore(cid wire.ClientID, timeouts clientTimeouts, after []wire.Dep, afterTS uint64) *clientcore.Core {
	core, err := clientcore.New(clientcore.Options{
		Client: cid, Masters: c.masters, Volumes: c.coreVolumes(), Rand: c.w.rng,
		AttemptTimeout: timeouts.attempt, RetryBackoff: timeouts.backoff,
		Mutations: c.opts.ClientMutations, SkipDependencyWait: c.opts.SkipDependencyWait, After: after, AfterTS: afterTS,
	})
	if err != nil {
		panic(err)
	}
	return core
}

// server returns a live server's state machine, or nil.
func (c *Cluster) server(id wire.NodeID) serverMachine {
	n := c.w.nodes[id]
	if n == nil || !n.up {
		return nil
	}
	return n.machine.(serverMachine)
}

// startServer gives a server process's node its disk: its storage
// commits lag its steps, as in the real servers (chain/durable.go), and a
// crash loses what it had not committed (node.disk).
func (c *Cluster) startServer(n *node) {
	id := n.id
	n.disk = c.engines[id]
	n.crashed = func() {
		for _, v := range c.volumes() {
			if !c.opts.Durable {
				c.histories.Forget(id, v)
			} else if meta, ok := c.engines[id].Volume(v).Meta(); ok {
				c.histories.Crashed(id, v, meta.Applied)
			} else {
				c.histories.Forget(id, v)
			}
		}
	}
}

// keyspaces returns the newest keyspace list a live master member holds.
func (c *Cluster) keyspaces() []wire.Keyspace {
	var best []wire.Keyspace
	for _, id := range c.masters {
		if n := c.w.nodes[id]; n != nil && n.up {
			if ks := c.masterState(id).Keyspaces(); wire.NewerKeyspaces(best, ks) {
				best = ks
			}
		}
	}
	return best
}

// Config returns the master's current configuration.
// That is volume 0's newest configuration any live master member has
// applied.
func (c *Cluster) Config() wire.Config { return c.VolumeConfig(volume) }

// VolumeConfig returns the newest configuration of volume v any live
// master member has applied.
func (c *Cluster) VolumeConfig(v wire.VolumeID) wire.Config {
	var best wire.Config
	for _, id := range c.masters {
		if n := c.w.nodes[id]; n != nil && n.up {
			if cfg := c.masterState(id).Config(v); cfg.Epoch > best.Epoch {
				best = cfg
			}
		}
	}
	return best
}

// masterState returns a master member's state machine.
func (c *Cluster) masterState(id wire.NodeID) *master.Master {
	switch m := c.w.nodes[id].machine.(type) {
	case *master.Master:
		return m
	case *master.Replicated:
		return m.Master()
	}
	panic("not a master: " + id)
}

// Leader returns the master member that leads, or "".
func (c *Cluster) Leader() wire.NodeID {
	for _, id := range c.masters {
		if n := c.w.nodes[id]; n != nil && n.up && c.masterState(id).Leading() {
			return id
		}
	}
	return ""
}

func (c *Cluster) masterOptions() master.Options {
	o := c.opts
	settings := master.Settings{Placement: o.Placement, Servers: c.servers[:o.Servers], ReplicationFactor: o.ChainLength, DefaultK: o.K}
	if c.geo != nil {
		settings.Site, settings.Sites, settings.DefaultSites = c.site, c.geo.sites(), c.geo.siteIDs()
		settings.DefaultHierarchical, settings.DefaultRelaxed = o.Hierarchical, o.Hierarchical && o.Relaxed
	}
	return master.Options{
		Settings:         settings,
		Chains:           c.chains,
		FailureTimeout:   o.FailureTimeout,
		LeaseDuration:    o.LeaseDuration,
		ClockDriftMax:    o.ClockDriftMax,
		ExtensionTimeout: 3 * wire.Second,
	}
}

// newMaster starts a master member: a single master, or a Raft member
// that resumes from the log its previous process left.
func (c *Cluster) newMaster(id wire.NodeID) machine {
	if len(c.masters) == 1 {
		m, err := master.New(id, c.masterOptions())
		if err != nil {
			panic(err)
		}
		return m
	}
	o := c.masterOptions()
	if c.raftLogs[id] == nil {
		c.raftLogs[id] = raftlog.NewMemory()
	} else {
		// A restarted member resumes from its log alone, as `catena
		// master` does.
		o.Settings, o.Chains = master.Settings{}, nil
	}
	r, err := master.NewReplicated(master.RaftOptions{
		ID: id, Members: c.masters, Master: o, Log: c.raftLogs[id],
		HeartbeatInterval: c.opts.MasterHeartbeat, ElectionTimeout: c.opts.ElectionTimeout,
		Rand:      rand.New(rand.NewPCG(c.w.rng.Uint64(), c.w.rng.Uint64())),
		Mutations: c.opts.MasterMutations,
	})
	if err != nil {
		panic(err)
	}
	return r
}

// At runs f at simulated time t.
func (c *Cluster) At(t wire.Time, f func()) { c.w.at(t, f) }

// Now returns the simulated time.
func (c *Cluster) Now() wire.Time { return c.w.now }

// Masters returns the master's id.
func (c *Cluster) Master() wire.NodeID { return c.masters[0] }
