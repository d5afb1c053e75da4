package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/pb"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

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
	// VolumeOf maps an object to its volume (nil: Catena's key hash).
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
	// AttemptTimeout resends a request unanswered this long (with a fresh
	// configuration), as Catena's client does (clientcore.Options); 0:
	// a request is resent only after an error reply, as CR §5's clients.
	AttemptTimeout wire.Time
	// RequestDelay is added to every request's way to the chain: a
	// dispatcher in between (CR §5.2).
	RequestDelay wire.Time
	Latency      wire.Time // one way, per message
	Costs        Costs
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

// RunLoad runs one load experiment.
func RunLoad(o LoadOptions) (LoadResult, error) {
	if o.Bucket <= 0 || o.Duration <= 0 || o.Clients <= 0 || o.Objects <= 0 || len(o.Chains) == 0 {
		return LoadResult{}, fmt.Errorf("load: Bucket, Duration, Clients, Objects and Chains are required")
	}
	if !slices.Contains(knownProtocols, o.Protocol) {
		return LoadResult{}, fmt.Errorf("load: unknown protocol %q", o.Protocol)
	}
	chainProtocol := o.Protocol != ProtocolPB && o.Protocol != ProtocolWeakPB
	if o.Protocol == ProtocolCausal {
		for v, members := range o.Chains {
			if o.K < 1 || o.K > len(members) {
				return LoadResult{}, fmt.Errorf("load: causal k=%d outside 1..%d (volume %d's chain length)", o.K, len(members), v)
			}
		}
	} else if o.K != 0 {
		return LoadResult{}, fmt.Errorf("load: k=%d is for the causal protocol only", o.K)
	}
	if len(o.Spares) > 0 && !chainProtocol {
		return LoadResult{}, fmt.Errorf("load: spare servers need a master: chain protocols only")
	}
	if o.Workload != nil {
		if err := o.Workload.validate(o.Objects); err != nil {
			return LoadResult{}, err
		}
		if o.Workload.Transaction > 0 && o.Protocol != ProtocolCausal {
			return LoadResult{}, fmt.Errorf("load: GET-TRANSACTIONs read causal keyspaces: the causal protocol only")
		}
	} else if o.UpdateFraction == nil {
		return LoadResult{}, fmt.Errorf("load: UpdateFraction or Workload is required")
	}
	geo := o.Sites > 1 && o.Protocol == ProtocolCausal
	clientSites := o.ClientSites
	if o.Sites > 1 {
		if clientSites != 0 && clientSites != o.Sites {
			return LoadResult{}, fmt.Errorf("load: %d client sites with %d sites: clients attach to their own site", clientSites, o.Sites)
		}
		clientSites = o.Sites
		for _, id := range append(serversOf(o.Chains), o.Spares...) {
			if sitePrefix(id) != "" {
				return LoadResult{}, fmt.Errorf("load: server %s has a site prefix: with Sites, Chains names a site's servers without one", id)
			}
		}
	}
	if o.VolumeOf == nil {
		volumes := len(o.Chains)
		o.VolumeOf = func(i int) wire.VolumeID { return placement.VolumeOf(objectKey(i), volumes) }
	}
	orDefault(&o.HeartbeatInterval, 100*wire.Millisecond)
	orDefault(&o.LeaseDuration, 500*wire.Millisecond)
	orDefault(&o.FailureTimeout, 2*wire.Second)
	orDefault(&o.TickInterval, 10*wire.Millisecond)

	res := LoadResult{Handled: map[wire.NodeID][2]int{}, Servers: map[wire.NodeID]ServerLoad{}}
	sites := loadSites(&o, chainProtocol, geo)
	var servers []wire.NodeID
	isServer := map[wire.NodeID]bool{}
	siteOf := map[wire.NodeID]*loadSite{}
	for _, s := range sites {
		for _, id := range s.servers {
			if isServer[id] {
				return res, fmt.Errorf("load: spare %s is a chain member or named twice", id)
			}
			isServer[id] = true
			siteOf[id] = s
			servers = append(servers, id)
		}
	}
	// count updates what a server did.
	count := func(id wire.NodeID, f func(l *ServerLoad)) {
		l := res.Servers[id]
		f(&l)
		res.Servers[id] = l
	}
	network := NetworkModel{LatencyMin: o.Latency, LatencyMax: o.Latency}
	if o.WAN > 0 {
		network.LinkLatency = wanLatency(o.WAN, o.WANJitter)
	}
	network.Cost = func(node wire.NodeID, m wire.Message) wire.Time {
		if !isServer[node] {
			return 0
		}
		cost := o.Costs.of(m)
		count(node, func(l *ServerLoad) { l.Busy += cost })
		return cost
	}
	switch {
	case o.ProcessPerVolume:
		network.Lane = func(_ wire.NodeID, m wire.Message) int {
			v, _ := wire.VolumeOf(m)
			return int(v)
		}
	case o.Loops > 1:
		network.Lane = func(_ wire.NodeID, m wire.Message) int {
			v, _ := wire.VolumeOf(m)
			return chain.LoopOf(v, o.Loops)
		}
	}
	network.ControlPlane = func(m wire.Message) bool {
		switch m.(type) {
		case *wire.Heartbeat, *wire.HeartbeatReply, *wire.NewConfig, *wire.ConfigRequest, *wire.ConfigReply:
			return true
		}
		return false
	}
	if o.VolumeBytes > 0 {
		network.RecoveryBandwidth = o.RecoveryBandwidth
		network.TransferBytes = func(m wire.Message) int64 {
			if c, ok := m.(*wire.SnapshotChunk); ok && c.Seq == 0 {
				return o.VolumeBytes
			}
			return 0
		}
	}
	if o.RequestDelay > 0 {
		network.SendDelay = func(from wire.NodeID, m wire.Message) wire.Time {
			if _, ok := m.(*wire.ClientRequest); ok && !isServer[from] {
				return o.RequestDelay
			}
			return 0
		}
	}
	w := newWorld(o.Seed, network)
	w.traceLog = o.Trace
	w.noTrace = true // a load run reports no trace hash

	weak := o.Protocol == ProtocolWeakChain || o.Protocol == ProtocolWeakPB
	var lags *lagObserver
	if geo {
		lags = newLagObserver(&o, sites, siteOf, &res, func() wire.Time { return w.now })
	}
	newServer := func(id wire.NodeID, incarnation uint64) machine {
		s := siteOf[id]
		if o.Protocol == ProtocolPB || o.Protocol == ProtocolWeakPB {
			return pb.NewServer(pb.Options{ID: id, Configs: s.configs, Engine: storage.NewMemoryEngine(), WeakReads: weak})
		}
		reads := chain.ReadsAtTail // a causal volume's members answer reads whatever the mode
		switch {
		case weak:
			reads = chain.ReadsAtAnyReplica
		case o.Protocol == ProtocolCRAQ:
			reads = chain.ReadsCleanAtAnyMember
		}
		limits := chain.DefaultLimits
		limits.SyncRetryInterval = max(limits.SyncRetryInterval, 2*o.TickInterval)
		so := chain.ServerOptions{
			Modes: modes.New,
			ID:    id, Masters: s.masters, Incarnation: incarnation, HeartbeatInterval: o.HeartbeatInterval,
			Limits: limits, Engine: storage.NewMemoryEngine(), Reads: reads, Site: s.id,
		}
		if lags != nil {
			so.Observer = lags
		}
		return chain.NewServer(so)
	}
	var theMaster *master.Master
	for _, s := range sites {
		if !chainProtocol {
			break
		}
		settings := master.Settings{Placement: o.Placement, Servers: s.servers, ReplicationFactor: maxChainLength(o.Chains), DefaultK: o.K}
		if geo {
			settings.Site, settings.Sites, settings.DefaultSites = s.id, sitesSettings(sites), siteIDs(sites)
		}
		m, err := master.New(s.masters[0], master.Options{
			Settings: settings, Chains: s.chains,
			FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration, ClockDriftMax: 0.001,
			ExtensionTimeout: 24 * 3600 * wire.Second, RecoveryPerServerMax: o.RecoveryPerServerMax,
			FixedRoles: o.FixedRoles,
		})
		if err != nil {
			return res, err
		}
		if theMaster == nil {
			theMaster = m
		}
		var mm machine = m
		if o.OnConfig != nil {
			mm = &observedMaster{Master: m, epochs: map[wire.VolumeID]wire.Epoch{}, on: o.OnConfig}
		}
		w.addNode(s.masters[0], mm, o.TickInterval, 1)
	}
	incarnations := map[wire.NodeID]uint64{}
	for _, id := range servers {
		incarnations[id] = 1
		w.addNode(id, newServer(id, 1), o.TickInterval, 1)
	}

	if o.KeepLatencies {
		res.Latencies = map[string]*RequestLatencies{}
	}
	record := func(now, latency wire.Time, c completion, site string) {
		var l *RequestLatencies
		if res.Latencies != nil {
			if l = res.Latencies[site]; l == nil {
				l = &RequestLatencies{}
				res.Latencies[site] = l
			}
		}
		sample := Sample{At: now, D: latency}
		if c.kind == completedContended {
			res.Contended++
			if l != nil {
				l.Contended = append(l.Contended, sample)
			}
			return
		}
		i := int(now / o.Bucket)
		for len(res.Queries) <= i {
			res.Queries = append(res.Queries, 0)
			res.Updates = append(res.Updates, 0)
			res.Transactions = append(res.Transactions, 0)
		}
		switch c.kind {
		case completedQuery:
			res.Queries[i]++
			res.QueryLatency += latency
			if l != nil {
				l.Reads = append(l.Reads, sample)
			}
		case completedUpdate:
			res.Updates[i]++
			res.UpdateLatency += latency
			if l != nil {
				l.Updates = append(l.Updates, sample)
			}
		case completedTransaction:
			res.Transactions[i]++
			if l != nil {
				l.Transactions = append(l.Transactions, sample)
				l.TransactionRounds = append(l.TransactionRounds, c.rounds)
			}
		}
		res.Completed++
		res.Last = now
	}
	var clients []*loadClient
	clientTick := o.ClientTickInterval
	if clientTick <= 0 {
		clientTick = max(o.TickInterval, 10*wire.Millisecond)
	}
	var keys *keyChooser
	if o.Workload != nil {
		keys = newKeyChooser(*o.Workload, o.Objects)
	}
	for i := range o.Clients {
		s, prefix := sites[0], ""
		if clientSites > 1 {
			prefix = siteName(i%clientSites) + "/"
			if o.Sites > 1 {
				s = sites[i%clientSites]
			}
		}
		cl, err := newLoadClient(&o, i, prefix, s.masters, s.configs, keys, record, &res.Abandoned)
		if err != nil {
			return res, err
		}
		clients = append(clients, cl)
		w.addNode(cl.id, cl, clientTick, 1)
	}
	// Clients start once the servers hold leases.
	start := 3 * o.HeartbeatInterval
	res.First = start
	w.at(start, func() {
		for _, cl := range clients {
			cl.next(w.now)
			w.emit(w.nodes[cl.id], cl.ready(w.now))
		}
	})
	if o.CountOutstanding {
		for t := o.Bucket; t <= o.Duration; t += o.Bucket {
			w.at(t, func() {
				var n [3]int
				for _, cl := range clients {
					if k, ok := cl.outstanding(); ok {
						n[k]++
					}
				}
				res.Outstanding = append(res.Outstanding, n)
			})
		}
	}
	for _, f := range o.Failures {
		w.at(f.At, func() { w.crash(f.Server) })
		if f.RebootAfter > 0 {
			w.at(f.At+f.RebootAfter, func() {
				incarnations[f.Server]++
				w.restart(f.Server, newServer(f.Server, incarnations[f.Server]))
			})
		}
	}
	// CR §3's invariants (and pb's) are asserted as the run goes: a chain
	// replica after each message about its volume, a pb server after every
	// 1000th message it handles (its check covers all its volumes).
	var violation error
	handled := 0
	w.afterHandle = func(n *node, m wire.Message) {
		if !isServer[n.id] {
			return
		}
		if violation == nil {
			var err error
			switch s := n.machine.(type) {
			case *chain.Server:
				if v, ok := wire.VolumeOf(m); ok && s.Replica(v) != nil {
					err = s.Replica(v).CheckInvariants()
				}
			case *pb.Server:
				if handled++; handled%1000 == 0 {
					err = s.CheckInvariants()
				}
			}
			if err != nil {
				violation = fmt.Errorf("load: invariant violated at %v on %s: %w", w.now, n.id, err)
			}
		}
		switch m := m.(type) {
		case *wire.ClientRequest:
			h := res.Handled[n.id]
			if m.Op.Kind.IsQuery() {
				h[0]++
			} else {
				h[1]++
			}
			res.Handled[n.id] = h
			count(n.id, func(l *ServerLoad) {
				switch {
				case m.Op.Kind == wire.OpWaitStable:
					l.Waits++
				case m.Op.Kind.IsQuery():
					l.Reads++
				default:
					l.Updates++
				}
			})
		case *wire.Forward:
			count(n.id, func(l *ServerLoad) { l.Applied += len(m.Updates) })
		}
	}
	w.beforeSend = func(n *node, env wire.Envelope) {
		if !isServer[n.id] {
			return
		}
		switch m := env.Msg.(type) {
		case *wire.ClientReply:
			if m.Err != wire.ErrNone {
				count(n.id, func(l *ServerLoad) { l.Refused++ })
			}
		case *wire.QueryUp:
			count(n.id, func(l *ServerLoad) { l.PassedUp++ })
		}
	}
	every := o.ProgressEvery
	if every <= 0 {
		every = o.Duration / 10
	}
	for t := every; t < o.Duration; t += every {
		w.run(t)
		if o.Progress != nil {
			o.Progress(t)
		}
	}
	w.run(o.Duration)
	res.Events = w.seq
	if violation != nil {
		return res, violation
	}
	if theMaster != nil {
		res.Configs = theMaster.Configs()
	}
	if lags != nil {
		lags.finish()
	}
	return res, nil
}

// observedMaster tells LoadOptions.OnConfig of each configuration the
// master installs: the master announces every one with NewConfig.
type observedMaster struct {
	*master.Master
	epochs map[wire.VolumeID]wire.Epoch
	on     func(now wire.Time, c wire.Config)
}

func (m *observedMaster) Step(now wire.Time, from wire.NodeID, msg wire.Message) []wire.Envelope {
	return m.observe(now, m.Master.Step(now, from, msg))
}

func (m *observedMaster) Tick(now wire.Time) []wire.Envelope {
	return m.observe(now, m.Master.Tick(now))
}

func (m *observedMaster) observe(now wire.Time, out []wire.Envelope) []wire.Envelope {
	for _, env := range out {
		if nc, ok := env.Msg.(*wire.NewConfig); ok && nc.Config.Epoch > m.epochs[nc.Config.Volume] {
			m.epochs[nc.Config.Volume] = nc.Config.Epoch
			m.on(now, nc.Config.Clone())
		}
	}
	return out
}

func objectKey(i int) string { return "o" + strconv.Itoa(i) }

// objectOf inverts objectKey.
func objectOf(key string) int {
	i, err := strconv.Atoi(key[1:])
	if err != nil {
		panic("load: not an object key: " + key)
	}
	return i
}

// serversOf returns the servers the chains name, in id order.
func serversOf(chains map[wire.VolumeID][]wire.NodeID) []wire.NodeID {
	seen := map[wire.NodeID]bool{}
	var out []wire.NodeID
	for _, members := range chains {
		for _, id := range members {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	slices.SortFunc(out, func(a, b wire.NodeID) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return compareIDs(a, b)
	})
	return out
}

func compareIDs(a, b wire.NodeID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func maxChainLength(chains map[wire.VolumeID][]wire.NodeID) int {
	n := 0
	for _, c := range chains {
		n = max(n, len(c))
	}
	return n
}

// completion is how a load client's request ended, for the record.
type completion struct {
	kind   uint8 // completedQuery...
	rounds int   // a GET-TRANSACTION's rounds of reads
}

// The kinds of completion.
const (
	completedQuery uint8 = iota
	completedUpdate
	completedTransaction
	completedContended // a GET-TRANSACTION that ended with clientcore.ErrContention
)

// loadClient is a closed-loop client: one request outstanding; the next
// leaves as soon as the previous is answered (or abandoned by the
// watchdog). Its requests go through the client core users run.
type loadClient struct {
	id             wire.NodeID
	opts           *LoadOptions
	core           *clientcore.Core
	rng            *rand.Rand // the requests
	updateFraction float64
	// keys, when set, draws the operations and keys of a YCSB workload
	// in place of updateFraction and a uniform choice.
	keys        *clientKeys
	site        string // the site prefix of the client's id
	consistency clientcore.Consistency
	record      func(now, latency wire.Time, c completion, site string)
	abandoned   *int

	sent    int       // requests started
	started wire.Time // when the outstanding request started
	waiting bool
	// update: the outstanding request is an update; sentUpdate: it has
	// left for the head (a causal update first waits for its
	// dependencies).
	update, sentUpdate bool
	// rmw: the outstanding request is a read-modify-write, reading
	// (update false) or writing its key.
	rmw bool
	// txn: the outstanding request is a GET-TRANSACTION.
	txn bool
	key string
}

// newLoadClient returns client i of a load run, at the site whose id
// prefix is site ("" without sites), attached to masters.
func newLoadClient(o *LoadOptions, i int, site string, masters []wire.NodeID, configs map[wire.VolumeID]wire.Config, keys *keyChooser,
	record func(now, latency wire.Time, c completion, site string), abandoned *int) (*loadClient, error) {
	var routing clientcore.Routing = clientcore.ChainRouting{}
	if o.Protocol == ProtocolPB || o.Protocol == ProtocolWeakPB {
		routing = pb.Routing{}
	}
	consistency := clientcore.Strong // on a causal volume the core routes by its metadata
	if o.Protocol == ProtocolWeakChain || o.Protocol == ProtocolWeakPB || o.Protocol == ProtocolCRAQ {
		consistency = clientcore.AnyMember // servers that answer from their own state, or clean keys
	}
	attemptTimeout := o.AttemptTimeout
	if attemptTimeout <= 0 {
		attemptTimeout = -1
	}
	initial := make([]wire.Config, 0, len(configs))
	for _, v := range slices.Sorted(maps.Keys(configs)) {
		initial = append(initial, configs[v])
	}
	core, err := clientcore.New(clientcore.Options{
		Client: wire.ClientID(i + 1), Masters: masters, Configs: initial,
		VolumeOf: func(key string) wire.VolumeID { return o.VolumeOf(objectOf(key)) },
		Routing:  routing,
		Rand:     rand.New(rand.NewPCG(o.Seed^0x5bd1e995, uint64(i+1))),
		// A closed-loop client of CR §5 waits for its answer (or its
		// watchdog) and retries only after an error reply, unless
		// AttemptTimeout says otherwise.
		AttemptTimeout: attemptTimeout, RetryBackoff: 50 * wire.Millisecond, RetryBackoffMax: 50 * wire.Millisecond,
		SkipDependencyWait: o.SkipDependencyWait,
	})
	if err != nil {
		return nil, err
	}
	c := &loadClient{
		id: wire.NodeID(fmt.Sprintf("%sc%d", site, i+1)), opts: o, core: core, site: site,
		rng:         rand.New(rand.NewPCG(o.Seed, uint64(i+1))),
		consistency: consistency, record: record, abandoned: abandoned,
	}
	if keys != nil {
		c.keys = keys.forClient(int64(o.Seed ^ uint64(i+1)<<32))
	} else {
		c.updateFraction = o.UpdateFraction(i)
	}
	return c, nil
}

// next starts the client's next request, if it has one.
func (c *loadClient) next(now wire.Time) {
	if c.opts.RequestsPerClient > 0 && c.sent >= c.opts.RequestsPerClient {
		c.waiting = false
		return
	}
	c.sent++
	c.started = now
	var key string
	update := false
	c.rmw, c.txn = false, false
	if c.keys != nil {
		op, object := c.keys.next()
		if op == opTransaction {
			c.startTransaction(now, c.keys.transaction())
			return
		}
		key, update, c.rmw = objectKey(object), op == opUpdate || op == opInsert, op == opReadModifyWrite
	} else {
		key = objectKey(c.rng.IntN(c.opts.Objects))
		update = c.rng.Float64() < c.updateFraction
	}
	c.key = key
	c.start(now, update)
}

// start sends the outstanding request's read or write of c.key.
func (c *loadClient) start(now wire.Time, update bool) {
	op := wire.Op{Kind: wire.OpGet, Key: c.key}
	if update {
		op = wire.Op{Kind: wire.OpPut, Key: c.key, Value: fmt.Appendf(nil, "%s.%d", c.id, c.sent)}
	}
	c.update, c.sentUpdate = update, false
	c.waiting = true
	c.core.Start(now, op, c.call(now))
}

// startTransaction starts the outstanding request: a GET-TRANSACTION of
// the objects.
func (c *loadClient) startTransaction(now wire.Time, objects []int) {
	keys := make([]string, len(objects))
	for i, o := range objects {
		keys[i] = objectKey(o)
	}
	c.txn, c.update, c.sentUpdate, c.waiting = true, false, false, true
	c.core.StartTransaction(now, keys, c.call(now))
}

// call returns the options of a request started at now.
func (c *loadClient) call(now wire.Time) clientcore.CallOptions {
	call := clientcore.CallOptions{Consistency: c.consistency}
	if c.opts.Watchdog > 0 {
		call.Deadline = now + c.opts.Watchdog
	}
	return call
}

// Tick runs the watchdog and retries.
func (c *loadClient) Tick(now wire.Time) []wire.Envelope {
	if !c.waiting {
		return nil
	}
	c.core.Tick(now)
	return c.ready(now)
}

// Step handles replies.
func (c *loadClient) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	c.core.Step(now, from, m)
	return c.ready(now)
}

// ready counts what finished, starts the next request, and returns the
// messages to send.
func (c *loadClient) ready(now wire.Time) []wire.Envelope {
	rd := c.core.Ready()
	c.noteSent(rd.Messages)
	for len(rd.Done) > 0 {
		for _, d := range rd.Done {
			if d.Outcome == clientcore.OK && c.rmw && d.Op.Kind.IsQuery() {
				c.start(now, true) // the read of a read-modify-write: now its write
				continue
			}
			switch {
			case d.Outcome == clientcore.OK && c.txn:
				c.record(now, now-c.started, completion{kind: completedTransaction, rounds: d.Txn.Rounds}, c.site)
			case d.Outcome == clientcore.OK && d.Op.Kind.IsQuery():
				c.record(now, now-c.started, completion{kind: completedQuery}, c.site)
			case d.Outcome == clientcore.OK:
				c.record(now, now-c.started, completion{kind: completedUpdate}, c.site)
			case c.txn && errors.Is(d.Err, clientcore.ErrContention):
				// No two rounds of reads agreed: the transaction gave
				// up, as a user's would; the client moves on.
				c.record(now, now-c.started, completion{kind: completedContended, rounds: d.Attempts}, c.site)
			default:
				// Abandoned by the watchdog (CR §5.3), or its session was
				// lost: move on, with a fresh configuration.
				*c.abandoned++
				c.core.RequestConfig(now)
			}
			c.next(now)
		}
		more := c.core.Ready()
		c.noteSent(more.Messages)
		rd.Messages = append(rd.Messages, more.Messages...)
		rd.Done = more.Done
	}
	return rd.Messages
}

// noteSent notes whether the outstanding update has left for the head.
func (c *loadClient) noteSent(out []wire.Envelope) {
	for _, env := range out {
		if m, ok := env.Msg.(*wire.ClientRequest); ok && !m.Op.Kind.IsQuery() {
			c.sentUpdate = true
		}
	}
}

// outstanding returns the kind of the client's outstanding request
// (OutstandingQuery...), if it has one.
func (c *loadClient) outstanding() (int, bool) {
	switch {
	case !c.waiting:
		return 0, false
	case !c.update:
		return OutstandingQuery, true
	case !c.sentUpdate:
		return OutstandingDependencies, true
	}
	return OutstandingUpdate, true
}
