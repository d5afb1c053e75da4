package sim

import (
	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// The options of a simulated run and their defaults.

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
	// Scans makes the read-write clients of a strong keyspace (one site)
	// walk a whole scan every 8th operation, a page of two keys at a
	// time, checked against Redis's SCAN promise (scan.go).
	Scans bool
	// Backups makes the read-write clients of a keyspace of one site
	// (strong or causal) read a whole volume as a backup does every 8th
	// operation, two objects a page, checked against the history
	// (export.go; docs/adr/0030).
	Backups bool
	// Watches runs watchers of the whole database (strong mode, one
	// site) alongside the clients, each stream checked against the
	// volumes' histories (watch.go; docs/adr/0032).
	Watches bool
	// Splits splits the default keyspace (strong, of one site) once or
	// twice during the fault phase, among the faults, doubling its
	// volumes while the clients read and write (split.go; docs/adr/0031).
	Splits bool
	// Expiry makes the read-write clients of a strong keyspace (one
	// site) also write keys with TTLs of a few hundred milliseconds and
	// read them back, with every node's clock started up to ClockBound/4
	// off, checked against ADR 28's rule (expiry.go). ClockBound is the
	// bound the servers assume (0: 100 ms); ClockSkewed, when set, starts
	// the second server's clock that far ahead instead, beyond the bound.
	Expiry      bool
	ClockBound  wire.Time
	ClockSkewed wire.Time
	// Hashes makes a fifth of the read-write clients' operations in a
	// strong keyspace a hash's (HSET, HSETNX, HDEL, HINCRBY, HGET), on
	// the same keys as the strings', so WRONGTYPE happens both ways;
	// checked for linearizability with the model that knows hashes.
	Hashes bool
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

// withDefaults returns o with every zero field set: from the seed where
// the default varies by seed, else from DefaultOptions.
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
	if o.Expiry {
		// Clocks that stay within the bound for the whole run, but for
		// the one ClockSkewed puts beyond it.
		orDefault(&o.ClockBound, 100*wire.Millisecond)
		orDefault(&o.ClockDriftMax, 0.001)
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
