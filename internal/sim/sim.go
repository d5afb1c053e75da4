package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

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

// Options describe one simulated run. The zero value of a field takes the
// default from DefaultOptions.
type Options struct {
	Seed uint64
	// ChainLength is the replication factor t; 0 picks 3 or 5 from the seed.
	ChainLength int
	// Spares is the number of servers outside the initial chain.
	Spares  int
	Clients int
	Keys    int
	// Faults enables random faults during the fault phase.
	Faults bool
	// Durable servers keep their storage across a crash, as Pebble does
	// (the simulated servers commit before they send); a restarted server
	// comes back with its data. Then any number of servers may crash,
	// all of a chain at once included. Random runs (Faults) are durable
	// for half the seeds (those with seed/2 odd).
	Durable bool
	// Loops, above 1, runs each server process as that many event loops
	// (chain.SteppedLoops), volume v on loop chain.LoopOf(v, Loops); one
	// site only.
	Loops int
	// FaultPhase is how long faults are injected; the run then heals
	// everything and requires the cluster to recover within RecoveryTime.
	FaultPhase   wire.Time
	RecoveryTime wire.Time
	Network      NetworkModel
	// ClockDriftMax bounds each node's clock rate error (0.01 = 1%).
	ClockDriftMax float64

	HeartbeatInterval wire.Time
	LeaseDuration     wire.Time
	FailureTimeout    wire.Time
	TickInterval      wire.Time

	// Servers is the number of servers (0: ChainLength + Spares); Volumes
	// the number of volumes (chains) keys hash to; Placement the strategy
	// placing them (empty: the first ChainLength servers for one volume,
	// random for more).
	Servers   int
	Volumes   int
	Placement placement.Strategy

	// Masters is the number of master members: 1 runs a single master, 3
	// or 5 a Raft-replicated one, with master faults among the random ones.
	Masters         int
	MasterHeartbeat wire.Time
	ElectionTimeout wire.Time

	// CRAQReads sends clients' queries to a random member of the chain,
	// which answers clean keys itself and sends dirty ones to the tail
	// (chain.ReadsCleanAtAnyMember).
	CRAQReads bool
	// Causal makes the default keyspace causal (ChainReaction) with k =
	// K; K 0 draws k from 1..ChainLength by seed. Clients then put unique
	// values and get them, and the run is checked for causal convergence
	// and ChainReaction's invariants (causal.go) instead of
	// linearizability.
	Causal bool
	K      int
	// Sites, above 1, runs that many sites (each a whole cluster of the
	// options' shape) with the default keyspace causal and replicated by
	// all: ChainReaction's geo mode (geo.go). WAN is the one-way latency
	// between sites, WANJitter its spread.
	Sites int
	// Hierarchical, with Sites, makes the default keyspace hierarchical
	// instead (the NFSv4 paper's replication control: keys "dI/kJ", one
	// copy's semantics across sites, checked for linearizability;
	// hier.go), relaxed with Relaxed, else drawn by seed.
	Hierarchical bool
	Relaxed      bool
	WAN          wire.Time
	WANJitter    wire.Time
	// NoWritesForSites: clients never ask a write to be durable at
	// several sites (by default every 16th does, checked by G2).
	NoWritesForSites bool
	// SiteSkewMax bounds how far ahead each site's clocks start (clock
	// skew between sites, which last-writer-wins must not depend on).
	SiteSkewMax wire.Time

	// Mutations, MasterMutations and ClientMutations deliberately break
	// the protocol or the client core (checker tests only).
	Mutations       chain.Mutations
	MasterMutations master.Mutations
	ClientMutations clientcore.Mutations
	// SkipDependencyWait: causal clients write without waiting for their
	// dependencies, an ablation the causal+ checker must catch
	// (clientcore.Options.SkipDependencyWait).
	SkipDependencyWait bool
	// Script, when set, replaces random faults: it is called once the
	// cluster is running and schedules faults through the Cluster.
	Script func(c *Cluster)
	// Trace, when set, receives a line per processed event.
	Trace func(string)
	// ViolationDir, when set, receives porcupine's HTML visualisation of a
	// non-linearizable history.
	ViolationDir string

	// skipDurableAnswerCheck turns checkDurableAnswers off, so a test
	// can show what the broken rule it checks costs (a lost write).
	skipDurableAnswerCheck bool
}

// DefaultOptions are the parameters `catena sim` uses.
var DefaultOptions = Options{
	Spares:       2,
	Clients:      4,
	Keys:         6,
	FaultPhase:   4 * wire.Second,
	RecoveryTime: 3 * wire.Second,
	Network: NetworkModel{LatencyMin: 200 * wire.Microsecond, LatencyMax: 3 * wire.Millisecond, ServiceTimeMin: 20 * wire.Microsecond, ServiceTimeMax: 300 * wire.Microsecond,
		CommitTimeMin: 20 * wire.Microsecond, CommitTimeMax: 300 * wire.Microsecond},
	ClockDriftMax:     0.01,
	HeartbeatInterval: 50 * wire.Millisecond,
	LeaseDuration:     200 * wire.Millisecond,
	FailureTimeout:    400 * wire.Millisecond,
	TickInterval:      5 * wire.Millisecond,
	Masters:           1,
	MasterHeartbeat:   30 * wire.Millisecond,
	ElectionTimeout:   150 * wire.Millisecond,
}

func (o Options) withDefaults() Options {
	d := DefaultOptions
	if o.ChainLength == 0 {
		o.ChainLength = []int{3, 5}[o.Seed%2]
	}
	if o.Faults && o.Script == nil && o.Seed/2%2 == 1 {
		o.Durable = true
	}
	if o.Hierarchical && o.Sites < 2 {
		o.Sites = 3
	}
	if o.Hierarchical && !o.Relaxed {
		o.Relaxed = o.Seed/32%2 == 1
	}
	if o.Sites > 1 {
		o.Causal = !o.Hierarchical
		orDefault(&o.WAN, 60*wire.Millisecond)
		orDefault(&o.WANJitter, 5*wire.Millisecond)
		orDefault(&o.SiteSkewMax, 500*wire.Millisecond)
	}
	if o.Causal && o.K == 0 {
		o.K = 1 + int(o.Seed/4%uint64(o.ChainLength))
	}
	orDefault(&o.Spares, d.Spares)
	orDefault(&o.Clients, d.Clients)
	if o.Servers == 0 {
		o.Servers = o.ChainLength + o.Spares
	}
	if o.Volumes == 0 && o.Causal {
		// Several volumes, so that causal writes wait for dependencies
		// in other volumes (one volume's are ordered by SN).
		o.Volumes = 1 + int(o.Seed/8%3)
	}
	if o.Volumes == 0 {
		o.Volumes = 1
	}
	if o.Keys == 0 {
		o.Keys = max(d.Keys, min(2*o.Volumes, 128))
	}
	orDefault(&o.FaultPhase, d.FaultPhase)
	orDefault(&o.RecoveryTime, d.RecoveryTime)
	if o.Network.LatencyMax == 0 && o.Network.Cost == nil {
		o.Network = d.Network
	}
	orDefault(&o.ClockDriftMax, d.ClockDriftMax)
	orDefault(&o.HeartbeatInterval, d.HeartbeatInterval)
	orDefault(&o.LeaseDuration, d.LeaseDuration)
	orDefault(&o.FailureTimeout, d.FailureTimeout)
	orDefault(&o.TickInterval, d.TickInterval)
	orDefault(&o.Masters, d.Masters)
	orDefault(&o.MasterHeartbeat, d.MasterHeartbeat)
	orDefault(&o.ElectionTimeout, d.ElectionTimeout)
	return o
}

// orDefault sets *v to d if *v is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Result is the outcome of one run.
type Result struct {
	Seed       uint64
	Err        error
	Operations int
	Unknown    int
	Faults     []string
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
	faults    []string
	failures  []string
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
}

func newCluster(o Options) *Cluster {
	return &Cluster{opts: o, histories: check.NewHistories(), down: map[wire.NodeID]bool{}, linkFaulted: map[wire.NodeID]int{}, engines: map[wire.NodeID]*storage.MemoryEngine{}, raftLogs: map[wire.NodeID]*raftlog.Memory{},
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
			res.Err = fmt.Errorf("panic at %v: %v", c.w.now, p)
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
	res.Operations = len(c.history)
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
		c.w.addNode(id, c.newMaster(id), o.TickInterval, c.clockRate())
	}
	for _, id := range c.servers {
		c.startServer(c.w.addNode(id, c.newServer(id, 1), o.TickInterval, c.clockRate()))
	}
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = c.keyName(i)
	}
	for i := range o.Clients {
		cl := c.newClient(wire.NodeID(fmt.Sprintf("%sc%d", c.prefix, i+1)), c.clientIDBase()+wire.ClientID(i+1), keys)
		cl.readOnly = i == 0
		c.clients = append(c.clients, cl)
		c.w.addNode(cl.id, cl, o.TickInterval, 1)
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
	}
	if c.opts.Loops > 1 {
		return chain.NewSteppedLoops(o, c.opts.Loops)
	}
	return chain.NewServer(o)
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
		Client: cid, Masters: c.masters, Volumes: c.opts.Volumes, Rand: c.w.rng,
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

// checkStep asserts CR §3's invariants after every step of a server, on
// every volume it is part of.
func (c *Cluster) checkStep(n *node) {
	if c.causal() {
		c.checkAnsweredHeld() // a configuration change may break it
	}
	if slices.Contains(c.masters, n.id) {
		if err := c.masterState(n.id).CheckInvariants(); err != nil {
			panic(fmt.Sprintf("master %s: %v", n.id, err))
		}
		return // a configuration change alone changes no replica
	}
	if c.causal() {
		c.checkMetadata()
	}
	for v := range c.opts.Volumes {
		if cfg := c.VolumeConfig(wire.VolumeID(v)); cfg.Contains(n.id) {
			c.checkVolume(cfg)
		}
	}
	if c.opts.Hierarchical && c.geo != nil {
		c.geo.checkControl()
	}
}

func (c *Cluster) checkVolume(cfg wire.Config) {
	volume := cfg.Volume
	var states []check.ReplicaState
	var tail *check.ReplicaState
	for _, id := range append(slices.Clone(cfg.Chain), cfg.Joining) {
		s := c.server(id)
		if s == nil || s.Replica(volume) == nil {
			continue
		}
		r := s.Replica(volume)
		if r.Wedged() {
			continue // restored from disk, waiting for the master
		}
		if id == cfg.Joining && r.Config().Joining != id {
			// Not yet told it is joining: it still holds whatever it had
			// before (possibly a removed server's stale state).
			continue
		}
		if err := r.CheckInvariants(); err != nil {
			panic(fmt.Sprintf("INVARIANT %v", err))
		}
		if id == cfg.Joining && !r.Installed() {
			// The state a joiner kept is no part of the chain until the
			// tail accepts it for a catch-up (or a snapshot replaces it).
			continue
		}
		first, last := r.Sent()
		states = append(states, check.ReplicaState{ID: id, Applied: r.AppliedSN(), SentFirst: first, SentLast: last})
		if id == cfg.Tail() {
			tail = &states[len(states)-1]
		}
	}
	if msg := c.histories.ChainInvariants(volume, states, tail); msg != "" {
		panic("INVARIANT " + msg + " in " + cfg.String())
	}
	c.checkDurableAnswers(cfg)
}

// checkDurableAnswers asserts chain/durable.go's INVARIANT durable answer
// across the chain: every update the tail processed (answered,
// acknowledged, let be read) is on the disk of every member, so no crash
// can take it back. The replicas check their own part; this check reads
// the other members' disks, which no replica can.
func (c *Cluster) checkDurableAnswers(cfg wire.Config) {
	if cfg.K > 0 || cfg.Geo() || c.opts.skipDurableAnswerCheck {
		return // (their messages wait for the commit: durable.go)
	}
	s := c.server(cfg.Tail())
	if s == nil || s.Replica(cfg.Volume) == nil {
		return
	}
	tail := s.Replica(cfg.Volume)
	if tail.Wedged() || !tail.IsTail() || tail.Config().Epoch != cfg.Epoch {
		return
	}
	for _, id := range cfg.Chain {
		if s := c.server(id); s != nil {
			if r := s.Replica(cfg.Volume); r == nil || r.Wedged() || r.Config().Epoch != cfg.Epoch {
				continue // (not yet a member of this configuration)
			}
		} else if !c.opts.Durable {
			continue // crashed with its data: the master removes it
		}
		if meta, _ := c.engines[id].DurableMeta(cfg.Volume); meta.Applied < tail.CommittedSN() {
			panic(fmt.Sprintf("INVARIANT durable answer: tail %s processed SN %d, but %s holds %d on disk, in %v",
				cfg.Tail(), tail.CommittedSN(), id, meta.Applied, cfg))
		}
	}
}

// losingLosesData reports whether losing a server (a crash, or a cut from
// the master, which then removes it) would leave some chain it is a
// member of without a live member holding the data (up and in touch
// with the master, or the master will remove it: mayBeRemoved). Without durable
// storage that is more failures than a chain tolerates, so the random
// faults avoid it.
func (c *Cluster) losingLosesData(id wire.NodeID) bool {
	for v := range c.opts.Volumes {
		cfg := c.VolumeConfig(wire.VolumeID(v))
		if cfg.Index(id) < 0 {
			continue
		}
		live := 0
		for _, m := range cfg.Chain {
			if m != id && !c.mayBeRemoved(m) && c.server(m) != nil && c.server(m).Replica(cfg.Volume) != nil {
				live++
			}
		}
		if live == 0 {
			return true
		}
	}
	return false
}

// Crash crashes a server if the chain keeps a live member with the data;
// it restarts empty after restartAfter. It reports whether it crashed.
func (c *Cluster) Crash(id wire.NodeID, why string, restartAfter wire.Time) bool {
	if c.server(id) == nil {
		return false
	}
	if !c.opts.Durable && c.losingLosesData(id) || c.causal() && c.causalLosesData(id) {
		return false
	}
	c.faults = append(c.faults, fmt.Sprintf("%.3fs crash %s (%s)", float64(c.w.now)/1e9, id, why))
	c.w.crash(id) // (startServer's crashed: the histories lose what the disk did)
	c.down[id] = true
	c.w.at(c.w.now+restartAfter, func() { c.restart(id) })
	return true
}

// CrashMaster crashes a master member; it restarts from its Raft log
// after restartAfter. At most a minority of members is down at once.
func (c *Cluster) CrashMaster(id wire.NodeID, why string, restartAfter wire.Time) bool {
	down := 0
	for _, m := range c.masters {
		if !c.w.nodes[m].up {
			down++
		}
	}
	if !c.w.nodes[id].up || len(c.masters) == 1 || down+1 > (len(c.masters)-1)/2 {
		return false
	}
	c.faults = append(c.faults, fmt.Sprintf("%.3fs crash master %s (%s)", float64(c.w.now)/1e9, id, why))
	c.w.crash(id)
	c.down[id] = true
	c.w.at(c.w.now+restartAfter, func() { c.restart(id) })
	return true
}

func (c *Cluster) restart(id wire.NodeID) {
	if slices.Contains(c.masters, id) {
		if c.down[id] {
			delete(c.down, id)
			c.faults = append(c.faults, fmt.Sprintf("%.3fs restart master %s", float64(c.w.now)/1e9, id))
			c.w.restart(id, c.newMaster(id))
		}
		return
	}
	if !c.down[id] {
		return
	}
	delete(c.down, id)
	n := c.w.nodes[id]
	c.faults = append(c.faults, fmt.Sprintf("%.3fs restart %s", float64(c.w.now)/1e9, id))
	c.w.restart(id, c.newServer(id, n.incarnation))
	c.startServer(n)
}

// startServer gives a server process's node its disk: its storage
// commits lag its steps, as in the real servers (chain/durable.go), and a
// crash loses what it had not committed (node.disk).
func (c *Cluster) startServer(n *node) {
	id := n.id
	n.disk = c.engines[id]
	n.crashed = func() {
		for v := range c.opts.Volumes {
			if !c.opts.Durable {
				c.histories.Forget(id, wire.VolumeID(v))
			} else if meta, ok := c.engines[id].Volume(wire.VolumeID(v)).Meta(); ok {
				c.histories.Crashed(id, wire.VolumeID(v), meta.Applied)
			} else {
				c.histories.Forget(id, wire.VolumeID(v))
			}
		}
	}
}

// Partition cuts the links between a and b for a while.
func (c *Cluster) Partition(a, b wire.NodeID, why string, duration wire.Time) {
	c.faults = append(c.faults, fmt.Sprintf("%.3fs cut %s-%s for %.0fms (%s)", float64(c.w.now)/1e9, a, b, float64(duration)/1e6, why))
	c.w.breakLinks(a, b)
	c.w.at(c.w.now+duration, func() { c.w.healLinks(a, b) })
}

// LoseMessages loses every message from one node to another for a while,
// while messages the other way still arrive: a one-way link fault.
func (c *Cluster) LoseMessages(from, to wire.NodeID, why string, duration wire.Time) {
	c.faults = append(c.faults, fmt.Sprintf("%.3fs lose %s→%s for %.0fms (%s)", float64(c.w.now)/1e9, from, to, float64(duration)/1e6, why))
	c.w.breakLink(from, to)
	c.w.at(c.w.now+duration, func() { c.w.healLink(from, to) })
}

// loseChainLink loses every message from one chain neighbour to the
// other for a while (LoseMessages), and counts both as servers the
// master may remove (mayBeRemoved) until a failure timeout after it
// healed: the master cuts one end of a link that carries nothing
// (master/links.go), and may still do so on reports sent before the heal.
func (c *Cluster) loseChainLink(from, to wire.NodeID, why string, duration wire.Time) {
	c.LoseMessages(from, to, why, duration)
	c.linkFaulted[from]++
	c.linkFaulted[to]++
	c.w.at(c.w.now+duration+c.opts.FailureTimeout, func() {
		c.linkFaulted[from]--
		c.linkFaulted[to]--
	})
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

// cutFromMasters reports whether a server cannot reach a majority of the
// master's members (or they it): the master will remove it.
func (c *Cluster) cutFromMasters(id wire.NodeID) bool {
	cut := 0
	for _, m := range c.masters {
		if c.w.link(id, m).down || c.w.link(m, id).down {
			cut++
		}
	}
	return cut > len(c.masters)/2
}

// mayBeRemoved reports whether the master may remove a live server from
// a chain it belongs to: it is cut from the masters, or is an end of a
// one-way fault between chain neighbours (loseChainLink). The fault
// guards count on no such server to hold a chain's data.
func (c *Cluster) mayBeRemoved(id wire.NodeID) bool {
	return c.cutFromMasters(id) || c.linkFaulted[id] > 0
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

func (c *Cluster) healAll() {
	keys := slices.SortedFunc(maps.Keys(c.w.links), func(a, b linkKey) int {
		return strings.Compare(string(a.from)+"→"+string(a.to), string(b.from)+"→"+string(b.to))
	})
	for _, k := range keys {
		if c.w.links[k].down {
			c.w.healLinks(k.from, k.to)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.down)) {
		c.restart(id)
	}
}

// finalReads reads every key through a fresh client once the cluster has
// settled; the reads join the history, so a lost acknowledged update makes
// it non-linearizable.
func (c *Cluster) finalReads() error {
	var script []wire.Op
	for i := range c.opts.Keys {
		script = append(script, wire.Op{Kind: wire.OpGet, Key: c.keyName(i)})
	}
	reader := c.newClient(wire.NodeID(c.prefix+"reader"), c.clientIDBase()+wire.ClientID(1000), nil)
	reader.script = script
	reader.issuing = true
	reader.timeouts.inFlight = 1
	c.w.addNode(reader.id, reader, c.opts.TickInterval, 1)
	before := len(*c.historyOf())
	c.w.run(c.w.now + 3*wire.Second)
	if got := len(*c.historyOf()) - before; got != len(script) {
		return fmt.Errorf("liveness: %d of %d final reads answered within 3s after recovery", got, len(script))
	}
	return nil
}

// verify runs the end-of-run checks.
func (c *Cluster) verify() error {
	errs := c.verifySite()
	if c.causal() {
		if v := check.CausalConvergence(c.history); v != nil {
			errs = append(errs, fmt.Errorf("history of %d operations is not causal+ (k=%d): %w", len(c.history), c.opts.K, v))
		}
		return errors.Join(errs...)
	}
	result, info := check.Linearizable(c.history, 30*time.Second)
	if result != porcupine.Ok {
		errs = append(errs, fmt.Errorf("history of %d operations is %s (not linearizable)%s", len(c.history), result, c.describeViolation(info)))
	}
	return errors.Join(errs...)
}

// verifySite runs the end-of-run checks of one site: recorded failures,
// chains restored, operations after the heal completed, no acknowledged
// update lost, and in causal mode every chain converged.
func (c *Cluster) verifySite() []error {
	var errs []error
	for _, f := range c.failures {
		errs = append(errs, errors.New(f))
	}
	for v := range c.opts.Volumes {
		cfg := c.VolumeConfig(wire.VolumeID(v))
		if len(cfg.Chain) != c.opts.ChainLength || cfg.Joining != "" {
			errs = append(errs, fmt.Errorf("liveness: chain %v not restored to length %d after recovery", cfg, c.opts.ChainLength))
			break
		}
	}
	// Operations started well after the heal must have completed.
	settled := c.healed + 2*wire.Second
	for _, op := range *c.historyOf() {
		if op.Unknown && wire.Time(op.Call) > settled {
			errs = append(errs, fmt.Errorf("liveness: %v called at %.3fs after recovery never completed", op.Op, float64(op.Call)/1e9))
			break
		}
	}
	// No acknowledged update lost: the tail's history holds each one at
	// the SN it was acknowledged with. (A hierarchical write may run at
	// another site, whose SN it is answered with: the final reads, in
	// the checked history, find a lost one.)
	for _, a := range c.acked {
		if c.opts.Hierarchical {
			break
		}
		tail := c.VolumeConfig(a.volume).Tail()
		if c.server(tail) == nil {
			continue
		}
		hist := c.histories.Of(tail, a.volume)
		if int(a.sn) > len(hist) || hist[a.sn-1].Client != a.client || hist[a.sn-1].ReqNo != a.reqNo {
			errs = append(errs, fmt.Errorf("lost update: client %d request %d acknowledged at SN %d of volume %d is not in the tail's history", a.client, a.reqNo, a.sn, a.volume))
			break
		}
	}
	if c.causal() {
		if err := c.checkConverged(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (c *Cluster) describeViolation(info porcupine.LinearizationInfo) string {
	var b strings.Builder
	// Name the keys whose own histories fail: where to look in a trace.
	byKey := map[string][]check.Operation{}
	for _, op := range c.history {
		byKey[op.Op.Key] = append(byKey[op.Op.Key], op)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if r, _ := check.Linearizable(byKey[key], 10*time.Second); r != porcupine.Ok {
			fmt.Fprintf(&b, "; key %q (volume %d) is %s", key, c.volumeOf(key), r)
		}
	}
	if c.opts.ViolationDir != "" {
		path := filepath.Join(c.opts.ViolationDir, fmt.Sprintf("catena-sim-seed-%d.html", c.opts.Seed))
		if err := porcupine.VisualizePath(check.Model, info, path); err == nil {
			fmt.Fprintf(&b, "; visualization: %s", path)
		}
	}
	return b.String()
}
