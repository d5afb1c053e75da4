package sim

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/pb"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// A load run (RunLoad): its assembly (sites, network, masters, servers,
// clients, scheduled failures), what it checks and counts as it goes,
// and the run itself.

// A load run (RunLoad): its checks of the options, its assembly (sites,
// network, masters, servers, clients, scheduled failures), what it counts
// as it goes, and the run itself.

// RunLoad runs one load experiment.
func RunLoad(o LoadOptions) (LoadResult, error) {
	if err := o.validate(); err != nil {
		return LoadResult{}, err
	}
	o.fillDefaults()
	r := &loadRun{o: o, res: LoadResult{Handled: map[wire.NodeID][2]int{}, Servers: map[wire.NodeID]ServerLoad{}}}
	if err := r.placeServers(); err != nil {
		return r.res, err
	}
	r.w = newWorld(r.o.Seed, r.network())
	r.w.traceLog = r.o.Trace
	r.w.noTrace = true // a load run reports no trace hash
	if r.o.geo() {
		r.lags = newLagObserver(&r.o, r.sites, r.siteOf, &r.res, func() wire.Time { return r.w.now })
	}
	if err := r.startMasters(); err != nil {
		return r.res, err
	}
	r.startServers()
	if r.o.KeepLatencies {
		r.res.Latencies = map[string]*RequestLatencies{}
	}
	if err := r.startClients(); err != nil {
		return r.res, err
	}
	r.schedule()
	r.w.afterHandle = r.afterHandle
	r.w.beforeSend = r.beforeSend
	r.run()
	r.res.Events = r.w.seq
	if r.violation != nil {
		return r.res, r.violation
	}
	if r.eventErr != nil {
		return r.res, r.eventErr
	}
	if r.firstMaster != nil {
		r.res.Configs = r.firstMaster.Configs()
	}
	if r.lags != nil {
		r.lags.finish()
	}
	return r.res, nil
}

// loadRun is one load run's state.
type loadRun struct {
	o   LoadOptions
	res LoadResult
	w   *world

	sites    []*loadSite
	servers  []wire.NodeID
	isServer map[wire.NodeID]bool
	siteOf   map[wire.NodeID]*loadSite
	// incarnations holds each server's current incarnation.
	incarnations map[wire.NodeID]uint64
	// firstMaster is the first site's master (chain protocols).
	firstMaster *master.Master
	clients     []*loadClient
	// lags measures how far behind the other sites apply updates (geo).
	lags *lagObserver

	// violation is the first invariant found broken; handled counts the
	// messages pb servers handled, for their periodic checks.
	violation error
	handled   int
	// eventErr is the first of the operator's requests (Events) the
	// master refused.
	eventErr error
}

// placeServers lays out the sites and their servers.
func (r *loadRun) placeServers() error {
	r.sites = loadSites(&r.o, r.o.Protocol.chained(), r.o.geo())
	r.isServer = map[wire.NodeID]bool{}
	r.siteOf = map[wire.NodeID]*loadSite{}
	for _, s := range r.sites {
		for _, id := range s.servers {
			if r.isServer[id] {
				return fmt.Errorf("load: spare %s is a chain member or named twice", id)
			}
			r.isServer[id] = true
			r.siteOf[id] = s
			r.servers = append(r.servers, id)
		}
	}
	// Servers that join later (Events: one site) are servers from the
	// start for the cost model, and started when they join.
	for _, e := range r.o.Events {
		if e.Join != "" {
			r.isServer[e.Join] = true
			r.siteOf[e.Join] = r.sites[0]
		}
	}
	return nil
}

// count updates what a server did.
func (r *loadRun) count(id wire.NodeID, f func(l *ServerLoad)) {
	l := r.res.Servers[id]
	f(&l)
	r.res.Servers[id] = l
}

// network is the run's network model: its latencies, the servers'
// modelled costs, lanes and recovery bandwidth.
func (r *loadRun) network() NetworkModel {
	o := &r.o
	network := NetworkModel{LatencyMin: o.Latency, LatencyMax: o.Latency}
	if o.WAN > 0 {
		network.LinkLatency = wanLatency(o.WAN, o.WANJitter)
	}
	network.Cost = func(node wire.NodeID, m wire.Message) wire.Time {
		if !r.isServer[node] {
			return 0
		}
		cost := o.Costs.of(m)
		r.count(node, func(l *ServerLoad) { l.Busy += cost })
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
	if o.PeersFirst {
		network.Peer = func(from wire.NodeID) bool { return r.isServer[from] }
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
			if _, ok := m.(*wire.ClientRequest); ok && !r.isServer[from] {
				return o.RequestDelay
			}
			return 0
		}
	}
	return network
}

// newServer returns a server process of the run's protocol.
func (r *loadRun) newServer(id wire.NodeID, incarnation uint64) machine {
	o := &r.o
	s := r.siteOf[id]
	weak := o.Protocol.weak()
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
	if r.lags != nil {
		so.Observer = r.lags
	}
	return chain.NewServer(so)
}

// startMasters starts each site's master (chain protocols).
func (r *loadRun) startMasters() error {
	o := &r.o
	for _, s := range r.sites {
		if !o.Protocol.chained() {
			break
		}
		settings := master.Settings{Placement: o.Placement, Servers: s.servers, ReplicationFactor: maxChainLength(o.Chains), DefaultK: o.K}
		if o.geo() {
			settings.Site, settings.Sites, settings.DefaultSites = s.id, sitesSettings(r.sites), siteIDs(r.sites)
		}
		m, err := master.New(s.masters[0], master.Options{
			Settings: settings, Chains: s.chains,
			FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration, ClockDriftMax: 0.001,
			ExtensionTimeout: 24 * 3600 * wire.Second, RecoveryPerServerMax: o.RecoveryPerServerMax,
			FixedRoles: o.FixedRoles,
		})
		if err != nil {
			return err
		}
		if r.firstMaster == nil {
			r.firstMaster = m
		}
		var mm machine = m
		if o.OnConfig != nil {
			mm = &observedMaster{Master: m, epochs: map[wire.VolumeID]wire.Epoch{}, on: o.OnConfig}
		}
		r.w.addNode(s.masters[0], mm, o.TickInterval, 1)
	}
	return nil
}

// startServers starts every server in its first incarnation.
func (r *loadRun) startServers() {
	r.incarnations = map[wire.NodeID]uint64{}
	for _, id := range r.servers {
		r.incarnations[id] = 1
		r.w.addNode(id, r.newServer(id, 1), r.o.TickInterval, 1)
	}
}

// record counts a request a client of site completed (or a
// GET-TRANSACTION that ended contended) at now, after latency.
func (r *loadRun) record(now, latency wire.Time, c completion, site string) {
	res := &r.res
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
	i := int(now / r.o.Bucket)
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

// startClients adds the clients, each attached to its site's cluster.
func (r *loadRun) startClients() error {
	o := &r.o
	clientTick := o.ClientTickInterval
	if clientTick <= 0 {
		clientTick = max(o.TickInterval, 10*wire.Millisecond)
	}
	var keys *keyChooser
	if o.Workload != nil {
		keys = newKeyChooser(*o.Workload, o.Objects)
	}
	clientSites := o.clientSites()
	for i := range o.Clients {
		s, prefix := r.sites[0], ""
		if clientSites > 1 {
			prefix = siteName(i%clientSites) + "/"
			if o.Sites > 1 {
				s = r.sites[i%clientSites]
			}
		}
		cl, err := newLoadClient(o, i, prefix, s.masters, s.configs, keys, r.record, &r.res.Abandoned)
		if err != nil {
			return err
		}
		r.clients = append(r.clients, cl)
		r.w.addNode(cl.id, cl, clientTick, 1)
	}
	return nil
}

// schedule schedules the clients' start, the samples of what they wait
// for (CountOutstanding), and the failures.
func (r *loadRun) schedule() {
	o, w := &r.o, r.w
	// Clients start once the servers hold leases.
	start := 3 * o.HeartbeatInterval
	r.res.First = start
	w.at(start, func() {
		for _, cl := range r.clients {
			cl.next(w.now)
			w.emit(w.nodes[cl.id], cl.ready(w.now))
		}
	})
	if o.CountOutstanding {
		for t := o.Bucket; t <= o.Duration; t += o.Bucket {
			w.at(t, func() {
				var n [3]int
				for _, cl := range r.clients {
					if k, ok := cl.outstanding(); ok {
						n[k]++
					}
				}
				r.res.Outstanding = append(r.res.Outstanding, n)
			})
		}
	}
	for _, e := range o.Events {
		w.at(e.At, func() { r.event(e) })
	}
	for _, f := range o.Failures {
		w.at(f.At, func() { w.crash(f.Server) })
		if f.RebootAfter > 0 {
			w.at(f.At+f.RebootAfter, func() {
				r.incarnations[f.Server]++
				w.restart(f.Server, r.newServer(f.Server, r.incarnations[f.Server]))
			})
		}
	}
}

// loadOperator is the node id the operator's requests (Events) come
// from.
const loadOperator = wire.NodeID("operator")

// event makes one of LoadOptions.Events: starts a joining server, or
// asks the masters to split a keyspace once more, as catena keyspace
// split does (the operator's node notes a refusal: operatorNode).
func (r *loadRun) event(e LoadEvent) {
	w := r.w
	if e.Join != "" {
		r.incarnations[e.Join] = 1
		w.addNode(e.Join, r.newServer(e.Join, 1), r.o.TickInterval, 1)
		return
	}
	if w.nodes[loadOperator] == nil {
		w.addNode(loadOperator, &operatorNode{r: r}, r.o.TickInterval, 1)
	}
	splits := 0
	for _, k := range r.firstMaster.Keyspaces() {
		if k.Name == e.Split {
			splits = k.Splits
		}
	}
	for _, m := range r.sites[0].masters {
		w.send(loadOperator, wire.Envelope{To: m, Msg: &wire.KeyspaceRequest{Split: e.Split, Create: wire.Keyspace{Splits: splits}}})
	}
}

// operatorNode receives the masters' answers to the operator's requests:
// a refused one fails the run.
type operatorNode struct{ r *loadRun }

func (o *operatorNode) Step(now wire.Time, _ wire.NodeID, m wire.Message) []wire.Envelope {
	if reply, ok := m.(*wire.KeyspaceReply); ok && reply.Err != "" && o.r.eventErr == nil {
		o.r.eventErr = fmt.Errorf("load: the master refused the operator's request at %v: %s", now, reply.Err)
	}
	return nil
}

func (o *operatorNode) Tick(wire.Time) []wire.Envelope { return nil }

// afterHandle checks and counts what a server handled.
func (r *loadRun) afterHandle(n *node, m wire.Message) {
	if !r.isServer[n.id] {
		return
	}
	if r.violation == nil {
		r.checkInvariants(n, m)
	}
	r.countHandled(n, m)
}

// checkInvariants asserts CR §3's invariants (and pb's) as the run goes:
// a chain replica's after each message about its volume, a pb server's
// after every 1000th message it handles (its check covers all its
// volumes).
func (r *loadRun) checkInvariants(n *node, m wire.Message) {
	var err error
	switch s := n.machine.(type) {
	case *chain.Server:
		if v, ok := wire.VolumeOf(m); ok && s.Replica(v) != nil {
			err = s.Replica(v).CheckInvariants()
		}
	case *pb.Server:
		if r.handled++; r.handled%1000 == 0 {
			err = s.CheckInvariants()
		}
	}
	if err != nil {
		r.violation = fmt.Errorf("load: invariant violated at %v on %s: %w", r.w.now, n.id, err)
	}
}

// countHandled counts the client requests and forwarded updates a
// server handled.
func (r *loadRun) countHandled(n *node, m wire.Message) {
	switch m := m.(type) {
	case *wire.ClientRequest:
		h := r.res.Handled[n.id]
		if m.Op.Kind.IsQuery() {
			h[0]++
		} else {
			h[1]++
		}
		r.res.Handled[n.id] = h
		r.count(n.id, func(l *ServerLoad) {
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
		r.count(n.id, func(l *ServerLoad) { l.Applied += len(m.Updates) })
	}
}

// beforeSend counts the requests a server refused or passed up.
func (r *loadRun) beforeSend(n *node, env wire.Envelope) {
	if !r.isServer[n.id] {
		return
	}
	switch m := env.Msg.(type) {
	case *wire.ClientReply:
		if m.Err != wire.ErrNone {
			r.count(n.id, func(l *ServerLoad) { l.Refused++ })
		}
	case *wire.QueryUp:
		r.count(n.id, func(l *ServerLoad) { l.PassedUp++ })
	}
}

// run runs the simulation to Duration, reporting progress every
// ProgressEvery.
func (r *loadRun) run() {
	o := &r.o
	every := o.ProgressEvery
	if every <= 0 {
		every = o.Duration / 10
	}
	for t := every; t < o.Duration; t += every {
		r.w.run(t)
		if o.Progress != nil {
			o.Progress(t)
		}
	}
	r.w.run(o.Duration)
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

// ObjectKey returns the key of object i of a load run (LoadOptions.Objects).
func ObjectKey(i int) string { return objectKey(i) }

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
