package sim

import (
	"fmt"
	"slices"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Load runs (CR §5's experiments): the protocols they drive, their
// options and what they measure. The run is in load_run.go, its clients
// in load_client.go, its sites in sites.go.

// Protocol names a replication protocol a load run drives.
type Protocol string

// The protocols CR §5.1 compares. The weak ones send queries to a random
// member and are not linearizable: they are baselines.
const (
	ProtocolChain     Protocol = "chain"      // chain replication: updates at the head, queries at the tail
	ProtocolPB        Protocol = "pb"         // primary/backup: the primary answers both
	ProtocolWeakChain Protocol = "weak-chain" // chain replication, queries at a random member
	ProtocolWeakPB    Protocol = "weak-pb"    // primary/backup, queries at a random member
)

// Protocols lists CR §5.1's protocols.
var Protocols = []Protocol{ProtocolChain, ProtocolPB, ProtocolWeakChain, ProtocolWeakPB}

// Catena's other read modes on the same chains, which ChainReaction's
// single-site experiments compare (docs/experiments.md).
const (
	// ProtocolCRAQ is chain replication with CRAQ's clean reads: queries
	// go to a random member, which answers a clean key and sends a dirty
	// one to the tail (chain.ReadsCleanAtAnyMember, docs/adr/0007).
	ProtocolCRAQ Protocol = "craq"
	// ProtocolCausal is ChainReaction's causal+ mode with
	// LoadOptions.K: the member at index K−1 answers updates, reads go
	// where the client's metadata allows, and an update waits for the
	// versions it depends on to be stable (docs/adr/0010).
	ProtocolCausal Protocol = "causal"
)

// knownProtocols lists every Protocol RunLoad runs.
var knownProtocols = append(slices.Clone(Protocols), ProtocolCRAQ, ProtocolCausal)

// Costs are the modelled service times of CR §5: what a server spends on
// each message it handles.
type Costs struct {
	Query   wire.Time // a query (a causal dependency wait too), at each member that handles it: answers, refuses or passes it up
	Update  wire.Time // an update at the head (primary): computing its effect
	Forward wire.Time // each object difference a replica applies from a Forward
	Other   wire.Time // any other message: acknowledgements, configuration, heartbeats
}

func (c Costs) of(m wire.Message) wire.Time {
	switch m := m.(type) {
	case *wire.ClientRequest:
		if m.Op.Kind.IsQuery() {
			return c.Query
		}
		return c.Update
	case *wire.Forward:
		return c.Forward * wire.Time(len(m.Updates))
	case *wire.QueryUp:
		return c.Query // a causal read a successor passed up: a read here
	case *wire.Ship:
		// Another site's updates at this site's head: each is applied
		// as an object difference, as from a Forward. Shipping them
		// costs the sender nothing, as forwarding does.
		return c.Forward * wire.Time(len(m.Updates))
	}
	return c.Other
}

// ServerFailure crashes a server at a time; it restarts empty RebootAfter
// later (0: never).
type ServerFailure struct {
	At          wire.Time
	Server      wire.NodeID
	RebootAfter wire.Time
}

// LoadEvent is a change an operator makes to the cluster at a time of a
// load run (chain protocols, one site): exactly one of Join and Split.
type LoadEvent struct {
	At wire.Time
	// Join starts a new, empty server with this id. It is in no chain
	// and not among the servers the master starts with
	// (master.Settings.Servers): its first heartbeat registers it
	// (CmdRegister), as a server added to a running cluster, and the
	// placement policy may then move chains onto it.
	Join wire.NodeID
	// Split asks the masters to split this keyspace's volumes once more,
	// as catena keyspace split does (docs/adr/0031). The clients then
	// route by the keyspaces the masters give them: LoadOptions.VolumeOf
	// must be nil.
	Split string
}

// LoadOptions describe a throughput experiment: Catena's protocol code on
// simulated servers under closed-loop clients, each with one request
// outstanding at a time (CR §5).
type LoadOptions struct {
	Seed     uint64
	Protocol Protocol
	// Chains gives each volume's servers, head first; the servers are the
	// ids it names, and Spares.
	Chains map[wire.VolumeID][]wire.NodeID
	// Spares are servers in no chain at the start, which the master may
	// add to chains that lost a member (chain protocols).
	Spares []wire.NodeID
	// K is ProtocolCausal's k: the first K members of a chain hold an
	// update when it is answered (1 ≤ K ≤ the chain's length). 0 for
	// every other protocol.
	K int
	// Objects is the number of objects clients choose from uniformly;
	// VolumeOf maps an object to its volume (nil: Catena's key hash, by
	// the keyspaces the master names once a client knows them).
	Objects  int
	VolumeOf func(object int) wire.VolumeID
	// Clients is the number of clients; UpdateFraction(i) is the share of
	// client i's requests that are updates.
	Clients        int
	UpdateFraction func(client int) float64
	// RequestsPerClient stops each client after that many completed or
	// abandoned requests (0: run until Duration).
	RequestsPerClient int
	Duration          wire.Time
	// Bucket is the width of the throughput series' intervals.
	Bucket wire.Time
	// CountOutstanding samples, at the end of every Bucket, what the
	// clients are waiting for (LoadResult.Outstanding).
	CountOutstanding bool
	// Watchdog abandons a request unanswered this long and moves on to the
	// next (CR §5.3); 0: retry until answered.
	Watchdog wire.Time
	// SkipDependencyWait: causal clients write without waiting for their
	// dependencies (clientcore.Options.SkipDependencyWait), an ablation
	// that shows what the wait costs.
	SkipDependencyWait bool
	// CausalReadsAtTail: causal clients read at the tail
	// (clientcore.Options.CausalReadsAtTail: the paper's CR-L).
	CausalReadsAtTail bool
	// AttemptTimeout resends a request unanswered this long (with a fresh
	// configuration), as Catena's client does (clientcore.Options); 0:
	// a request is resent only after an error reply, as CR §5's clients.
	AttemptTimeout wire.Time
	// RequestDelay is added to every request's way to the chain: a
	// dispatcher in between (CR §5.2).
	RequestDelay wire.Time
	Latency      wire.Time // one way, per message
	Costs        Costs
	// PeersFirst: a server handles what other servers sent before what
	// clients sent (NetworkModel.Peer), as Catena's servers do; without
	// it one FIFO queue, as in the simulations of CR §5.
	PeersFirst bool
	// ProcessPerVolume runs each volume's replica on a server on its own
	// processor, in parallel with the server's other volumes (BCR §4.1's
	// servers run one process per chain); otherwise a server handles one
	// message at a time for all its volumes, as Catena's event loop does.
	ProcessPerVolume bool
	// Loops, above 1, runs each server's volumes on that many event loops
	// as catena server -loops does: volume v on loop chain.LoopOf(v,
	// Loops), the loops in parallel, each loop's messages one at a time,
	// and messages of no volume on loop 0 (chain.RouteToLoops). The
	// simulated server is still one chain.Server: Loops models where its
	// CPU time goes.
	Loops int
	// VolumeBytes is the modelled size of one volume's data, moved at
	// RecoveryBandwidth bytes per second into and out of each server
	// during recovery.
	VolumeBytes       int64
	RecoveryBandwidth int64
	Failures          []ServerFailure
	// Events are servers added and keyspaces split during the run.
	Events []LoadEvent
	// Master parameters (chain protocols).
	Placement            placement.Strategy
	HeartbeatInterval    wire.Time
	LeaseDuration        wire.Time
	FailureTimeout       wire.Time
	TickInterval         wire.Time
	RecoveryPerServerMax int
	// FixedRoles keeps the master from moving members to even out roles
	// (master.Options.FixedRoles).
	FixedRoles bool
	// ClientTickInterval is how often clients run their watchdog and
	// retries (0: TickInterval, at least 10 ms). A long TickInterval
	// makes large simulations faster but would make the watchdog late.
	ClientTickInterval wire.Time
	Trace              func(string)
	// OnConfig, when set (chain protocols), sees every configuration the
	// master installs, at the time it installs it.
	OnConfig func(now wire.Time, c wire.Config)
	// Progress, when set, is called every ProgressEvery of simulated time.
	Progress      func(now wire.Time)
	ProgressEvery wire.Time
	// Workload, when set, replaces UpdateFraction and the uniform choice
	// among Objects: a YCSB core workload over Objects records.
	Workload *Workload
	// Sites, above 1, runs that many sites: each site is a whole
	// cluster, its master and the servers Chains and Spares name, with
	// the site's prefix "a/", "b/", ... before every id (Chains names a
	// site's servers without it). With the causal protocol the default
	// keyspace is replicated by every site in ChainReaction's geo mode
	// (docs/adr/0013-sites-and-geo-causal.md); with the others, which
	// Catena does not replicate across sites, each site is an
	// independent cluster serving its own clients (a bound: nothing is
	// shipped).
	Sites int
	// ClientSites spreads the clients over that many sites, client i at
	// the (i mod ClientSites)-th, its id prefixed with the site's. With
	// Sites it must be Sites or 0, and each client attaches to its
	// site's cluster. Without, the clients of one cluster are placed in
	// sites, as its servers are when Chains names them "a/s1", "b/s1":
	// chains spanning sites.
	ClientSites int
	// WAN is the one-way latency of a link between nodes of different
	// sites (by their ids' prefixes), ± WANJitter; Latency within a site.
	WAN, WANJitter wire.Time
	// KeepLatencies keeps every completed request's latency, by the
	// client's site (LoadResult.Latencies).
	KeepLatencies bool
}

// Sample is one measured duration D and the time At it was measured
// for: a request's completion, or when the origin answered an update.
type Sample struct{ At, D wire.Time }

// RequestLatencies are the latencies of a site's clients' completed
// reads, updates (a read-modify-write is an update) and GET-TRANSACTIONs,
// in completion order.
type RequestLatencies struct {
	Reads, Updates, Transactions []Sample
	// TransactionRounds are the rounds of reads each of Transactions
	// took (clientcore.TxnResult.Rounds), in the same order.
	TransactionRounds []int
	// Contended are the GET-TRANSACTIONs that ended with
	// clientcore.ErrContention (no two rounds agreed), when and after
	// how long; they are not completed requests.
	Contended []Sample
}

// LoadResult is what a load run measured.
type LoadResult struct {
	// Queries, Updates and Transactions count completed requests per
	// Bucket (a GET-TRANSACTION is one request).
	Queries, Updates, Transactions []int
	// Completed counts completed requests; Abandoned those the watchdog
	// gave up on; Contended the GET-TRANSACTIONs that ended with
	// clientcore.ErrContention.
	Completed, Abandoned, Contended int
	// First is when the first request was sent, Last when the last reply
	// arrived.
	First, Last wire.Time
	// Handled counts the client requests each server handled (queries,
	// updates), whether it answered, refused or passed them on.
	Handled map[wire.NodeID][2]int
	// Servers is what each server did, in more detail.
	Servers map[wire.NodeID]ServerLoad
	// QueryLatency and UpdateLatency sum the time from a request's start
	// to its answer over the completed queries and updates (a causal
	// update's includes its dependency wait).
	QueryLatency, UpdateLatency wire.Time
	// Outstanding is, with CountOutstanding, how many clients had a
	// request outstanding at the end of each Bucket: a query
	// (OutstandingQuery), an update waiting for its dependencies to be
	// stable before it is sent (OutstandingDependencies: causal only), or
	// an update sent (OutstandingUpdate).
	Outstanding [][3]int
	// Events is the number of simulator events processed.
	Events uint64
	// Configs are the master's configurations at the end, by volume
	// (chain protocols; with Sites, the first site's).
	Configs []wire.Config
	// Latencies are, with KeepLatencies, the completed requests'
	// latencies by the client's site prefix ("a/", ...; "" without
	// sites).
	Latencies map[string]*RequestLatencies
	// ShipLag and VisibleLag are, with Sites, for each update and each
	// other site, the time from when its origin answered it (the
	// origin's member at index K−1 applied it) to when that site's head
	// applied it (ShipLag: the site holds it) and when its member at
	// index K−1 did (VisibleLag: every reader there may read it); At is
	// when the origin answered. ShipPending and VisiblePending are the
	// (update, site) pairs that had not got so far when the run ended,
	// D how long they had waited (a lower bound of their lag).
	ShipLag, VisibleLag         []Sample
	ShipPending, VisiblePending []Sample
}

// The kinds of outstanding request LoadResult.Outstanding counts.
const (
	OutstandingQuery        = 0
	OutstandingDependencies = 1
	OutstandingUpdate       = 2
)

// ServerLoad is what one server did in a load run.
type ServerLoad struct {
	// Busy is the modelled service time it spent (Costs).
	Busy wire.Time
	// Reads counts the OpGet requests it handled, and PassedUp the causal
	// reads it passed to its predecessor.
	Reads, PassedUp int
	// Refused counts the client requests it answered with an error
	// (ErrDirty: the key is dirty here, ask another member; ErrNotTail:
	// not a member, or not the tail; ErrUnavailable: ...).
	Refused int
	// Waits counts the OpWaitStable requests it handled (causal updates'
	// dependency waits).
	Waits int
	// Updates counts the client updates it handled (at the head);
	// Applied the updates it applied from Forwards.
	Updates, Applied int
}

// Throughput returns completed requests per second between from and to.
func (r LoadResult) Throughput(bucket, from, to wire.Time) float64 {
	n := 0
	for i := int(from / bucket); i < int(to/bucket) && i < len(r.Queries); i++ {
		n += r.Queries[i] + r.Updates[i] + r.Transactions[i]
	}
	return float64(n) / (float64(to-from) / float64(wire.Second))
}

// validate reports options a load run cannot be made with.
func (o *LoadOptions) validate() error {
	if o.Bucket <= 0 || o.Duration <= 0 || o.Clients <= 0 || o.Objects <= 0 || len(o.Chains) == 0 {
		return fmt.Errorf("load: Bucket, Duration, Clients, Objects and Chains are required")
	}
	if !slices.Contains(knownProtocols, o.Protocol) {
		return fmt.Errorf("load: unknown protocol %q", o.Protocol)
	}
	if o.Protocol == ProtocolCausal {
		for v, members := range o.Chains {
			if o.K < 1 || o.K > len(members) {
				return fmt.Errorf("load: causal k=%d outside 1..%d (volume %d's chain length)", o.K, len(members), v)
			}
		}
	} else if o.K != 0 {
		return fmt.Errorf("load: k=%d is for the causal protocol only", o.K)
	}
	if len(o.Spares) > 0 && !o.Protocol.chained() {
		return fmt.Errorf("load: spare servers need a master: chain protocols only")
	}
	if o.Workload != nil {
		if err := o.Workload.validate(o.Objects); err != nil {
			return err
		}
		if o.Workload.Transaction > 0 && o.Protocol != ProtocolCausal {
			return fmt.Errorf("load: GET-TRANSACTIONs read causal keyspaces: the causal protocol only")
		}
	} else if o.UpdateFraction == nil {
		return fmt.Errorf("load: UpdateFraction or Workload is required")
	}
	if err := o.validateEvents(); err != nil {
		return err
	}
	if o.Sites > 1 {
		if o.ClientSites != 0 && o.ClientSites != o.Sites {
			return fmt.Errorf("load: %d client sites with %d sites: clients attach to their own site", o.ClientSites, o.Sites)
		}
		for _, id := range append(serversOf(o.Chains), o.Spares...) {
			if sitePrefix(id) != "" {
				return fmt.Errorf("load: server %s has a site prefix: with Sites, Chains names a site's servers without one", id)
			}
		}
	}
	return nil
}

// validateEvents reports events a load run cannot make.
func (o *LoadOptions) validateEvents() error {
	if len(o.Events) == 0 {
		return nil
	}
	if !o.Protocol.chained() || o.Sites > 1 {
		return fmt.Errorf("load: events need a master and one site: chain protocols without Sites only")
	}
	named := map[wire.NodeID]bool{}
	for _, id := range append(serversOf(o.Chains), o.Spares...) {
		named[id] = true
	}
	for _, e := range o.Events {
		switch {
		case (e.Join == "") == (e.Split == ""):
			return fmt.Errorf("load: event at %v: exactly one of Join and Split", e.At)
		case e.At < 0 || e.At >= o.Duration:
			return fmt.Errorf("load: event at %v outside the run's %v", e.At, o.Duration)
		case named[e.Join]:
			return fmt.Errorf("load: joining server %s is a chain member, a spare or joins twice", e.Join)
		case e.Split != "" && o.VolumeOf != nil:
			return fmt.Errorf("load: a split moves keys between volumes: clients must route by the keyspaces (VolumeOf nil)")
		}
		if e.Join != "" {
			named[e.Join] = true
		}
	}
	return nil
}

// fillDefaults sets the options left zero that have a default.
func (o *LoadOptions) fillDefaults() {
	orDefault(&o.HeartbeatInterval, 100*wire.Millisecond)
	orDefault(&o.LeaseDuration, 500*wire.Millisecond)
	orDefault(&o.FailureTimeout, 2*wire.Second)
	orDefault(&o.TickInterval, 10*wire.Millisecond)
}

// chained reports whether p runs chains under a master: every protocol
// but primary/backup.
func (p Protocol) chained() bool { return p != ProtocolPB && p != ProtocolWeakPB }

// weak reports whether p sends queries to a random member.
func (p Protocol) weak() bool { return p == ProtocolWeakChain || p == ProtocolWeakPB }

// geo reports whether the run is ChainReaction's geo mode: the causal
// protocol over several sites.
func (o *LoadOptions) geo() bool { return o.Sites > 1 && o.Protocol == ProtocolCausal }

// clientSites is how many sites the clients are spread over: every site
// with Sites.
func (o *LoadOptions) clientSites() int {
	if o.Sites > 1 {
		return o.Sites
	}
	return o.ClientSites
}
