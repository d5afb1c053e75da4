package chaintest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Sites is a network of two or more sites, A (site 1: servers a1, a2,
// master mA), B (site 2: b1, b2, mB), ..., each with the same keyspace
// of two volumes replicated by all of them, chains of two. The test plays
// the masters (static configurations, the table of stable updates
// gathered from heartbeats) and the network (FIFO per link; links between
// sites can be held).
type Sites struct {
	t *testing.T
	// Now is the time of the last delivery, tick or heartbeat.
	Now wire.Time
	// Servers are the servers by id; a test deletes one to fail it.
	Servers map[wire.NodeID]*chain.Server
	site    map[wire.NodeID]wire.SiteID
	// Configs are each site's configurations of volumes 0 and 1, which
	// its master gives; a test changes them to reconfigure a chain.
	Configs map[wire.SiteID][]wire.Config
	// Keyspaces are the masters' keyspaces: the replicated one, and
	// "here", which each site keeps to itself.
	Keyspaces []wire.Keyspace
	sites     []wire.Site
	tables    map[wire.SiteID]map[wire.VolumeID]wire.Vector
	// Queue are the messages on their way, delivered in order by Run.
	Queue []Msg
	// Held are the messages between sites not yet delivered; Hold says
	// which to hold.
	Held []Msg
	Hold func(m Msg) bool
	// HoldIn says which messages within a site to hold (into Held too).
	HoldIn func(m Msg) bool
	// Replies are the answers clients received since a test (or a
	// request of UpdateWithin or Get) last emptied them.
	Replies []*wire.ClientReply
	// RemoteKeyspaces, when set for a site, are the keyspaces its master
	// tells other sites' servers (a site that has not created a
	// keyspace the others have); its own servers still get Keyspaces.
	RemoteKeyspaces map[wire.SiteID][]wire.Keyspace
	// clusters are the sites' deployment names, as their masters give
	// them; a master answers another deployment's ConfigRequest with
	// its name only, as master.Master does.
	clusters map[wire.SiteID]string
}

// Msg is a message on its way from one node to another.
type Msg struct {
	From, To wire.NodeID
	Msg      wire.Message
}

// SitesOptions say what sites NewSites builds.
type SitesOptions struct {
	// Modes makes the servers' volume modes.
	Modes chain.Modes
	// Limits are the servers' limits (zero: chain.DefaultLimits).
	Limits chain.Limits
	// Clusters are the deployment names the sites' masters give (nil:
	// none).
	Clusters map[wire.SiteID]string
	// K makes the replicated keyspace causal with k = K; 0 makes it
	// hierarchical (strong chains), durable unless Relaxed.
	K       int
	Relaxed bool
	// Sites is how many sites there are (a, b, c, ...; 0: two).
	Sites int
	// Mutations are the deliberate protocol bugs the servers run with.
	Mutations chain.Mutations
}

// isMaster reports whether id names a site's master.
func isMaster(id wire.NodeID) bool {
	return len(id) == 2 && id[0] == 'm' && id[1] >= 'A' && id[1] <= 'Z'
}

// master names site's master: mA, mB, ...
func master(site wire.SiteID) wire.NodeID { return wire.NodeID("m" + string(rune('A'+site-1))) }

// NewSites builds the sites o says, and runs them until the servers
// adopted their configurations.
func NewSites(t *testing.T, o SitesOptions) *Sites {
	if o.Limits == (chain.Limits{}) {
		o.Limits = chain.DefaultLimits
	}
	if o.Sites == 0 {
		o.Sites = 2
	}
	n := &Sites{
		clusters: o.Clusters,
		t:        t, Servers: map[wire.NodeID]*chain.Server{}, site: map[wire.NodeID]wire.SiteID{},
		Configs: map[wire.SiteID][]wire.Config{},
		tables:  map[wire.SiteID]map[wire.VolumeID]wire.Vector{},
		Hold:    func(Msg) bool { return false },
		HoldIn:  func(Msg) bool { return false },
	}
	var ids []wire.SiteID
	for i := 1; i <= o.Sites; i++ {
		id := wire.SiteID(i)
		ids = append(ids, id)
		n.tables[id] = map[wire.VolumeID]wire.Vector{}
		n.sites = append(n.sites, wire.Site{ID: id, Name: string(rune('a' + i - 1)), Masters: []wire.NodeID{master(id)}})
	}
	n.Keyspaces = []wire.Keyspace{
		{Name: wire.DefaultKeyspace, Mode: wire.ModeCausal, K: o.K, ReplicationFactor: 2, Volumes: 2, Sites: ids},
		// A keyspace each site keeps to itself (no chains in these sites).
		{Name: "here", Prefix: "here/", ReplicationFactor: 2, FirstVolume: 2, Volumes: 1},
	}
	if o.K == 0 {
		n.Keyspaces[0].Mode, n.Keyspaces[0].PartitionDepth, n.Keyspaces[0].Relaxed = wire.ModeHierarchical, 1, o.Relaxed
	}
	mode := n.Keyspaces[0].Mode
	for _, site := range ids {
		p := n.sites[site-1].Name
		x, y := wire.NodeID(p+"1"), wire.NodeID(p+"2")
		n.Configs[site] = []wire.Config{
			{Volume: 0, Epoch: 1, Chain: []wire.NodeID{x, y}, Fresh: true, Mode: mode, K: o.K, Sites: ids},
			{Volume: 1, Epoch: 1, Chain: []wire.NodeID{y, x}, Fresh: true, Mode: mode, K: o.K, Sites: ids},
		}
		for _, id := range []wire.NodeID{x, y} {
			n.site[id] = site
			n.Servers[id] = chain.NewServer(chain.ServerOptions{
				ID: id, Masters: []wire.NodeID{master(site)}, Incarnation: 1,
				HeartbeatInterval: 10 * wire.Millisecond, Limits: o.Limits, Engine: storage.NewMemoryEngine(), Site: site,
				Mutations: o.Mutations, Modes: o.Modes,
			})
		}
	}
	n.Heartbeats()
	n.Run()
	return n
}

// Heartbeats has every server send one, and answers it as the master.
func (n *Sites) Heartbeats() {
	for _, id := range slices.Sorted(maps.Keys(n.Servers)) {
		n.Now++
		for _, e := range n.Servers[id].Nudge(n.Now) { // (a server of one loop: its heartbeat)
			n.Queue = append(n.Queue, Msg{id, e.To, e.Msg})
		}
	}
}

// master answers a message to site's master.
func (n *Sites) master(site wire.SiteID, from wire.NodeID, m wire.Message) []Msg {
	me := master(site)
	switch m := m.(type) {
	case *wire.Heartbeat:
		table := n.tables[site]
		for _, v := range m.Volumes {
			table[v.Volume] = table[v.Volume].Merge(v.Stable)
		}
		var vv []wire.VolumeVector
		for v := wire.VolumeID(0); v < 2; v++ {
			vv = append(vv, wire.VolumeVector{Volume: v, Vector: table[v]})
		}
		return []Msg{{me, from, &wire.HeartbeatReply{SentAt: m.SentAt, LeaseGranted: true, LeaseFor: 1000 * wire.Second,
			Configs: n.Configs[site], Keyspaces: n.Keyspaces, Sites: n.sites, Stable: vv, Cluster: n.clusters[site]}}}
	case *wire.ConfigRequest:
		if m.Cluster != "" && m.Cluster != n.clusters[site] {
			return []Msg{{me, from, &wire.ConfigReply{Cluster: n.clusters[site]}}}
		}
		ks := n.Keyspaces
		if remote, ok := n.RemoteKeyspaces[site]; ok && n.SiteOf(from) != site {
			ks = remote
		}
		return []Msg{{me, from, &wire.ConfigReply{Configs: n.Configs[site], Masters: []wire.NodeID{me}, Leader: me, Keyspaces: ks,
			Cluster: n.clusters[site]}}}
	}
	return nil
}

// Run delivers messages until none is left but the held ones.
func (n *Sites) Run() {
	for steps := 0; len(n.Queue) > 0; steps++ {
		if steps > 100_000 {
			kinds := map[string]int{}
			for _, m := range n.Queue {
				key := fmt.Sprintf("%s→%s %s", m.From, m.To, wire.MessageName(m.Msg))
				if a, ok := m.Msg.(*wire.ShipAck); ok {
					key += fmt.Sprintf(" err=%v origin=%d", a.Err, a.Origin)
				}
				kinds[key]++
			}
			n.t.Logf("queued: %v", kinds)
			for _, m := range n.Queue[:min(3, len(n.Queue))] {
				if c, ok := m.Msg.(*wire.Control); ok {
					n.t.Logf("%s→%s %s %+v", m.From, m.To, wire.MessageName(m.Msg), *c)
				} else {
					n.t.Logf("%s→%s %s %+v", m.From, m.To, wire.MessageName(m.Msg), m.Msg)
				}
			}
			n.t.Fatal("messages do not stop")
		}
		m := n.Queue[0]
		n.Queue = n.Queue[1:]
		n.deliver(m)
	}
}

// DeliverSome delivers one message chosen by rng among the queue's
// links, the oldest of its link (FIFO per link, links interleaved at
// random); false if none is queued.
func (n *Sites) DeliverSome(rng *rand.Rand) bool {
	if len(n.Queue) == 0 {
		return false
	}
	pick := n.Queue[rng.IntN(len(n.Queue))]
	i := slices.IndexFunc(n.Queue, func(m Msg) bool { return m.From == pick.From && m.To == pick.To })
	m := n.Queue[i]
	n.Queue = slices.Delete(n.Queue, i, i+1)
	n.deliver(m)
	return true
}

// SiteOf returns the site of a server or master (0: a client).
func (n *Sites) SiteOf(id wire.NodeID) wire.SiteID {
	if s, ok := n.site[id]; ok {
		return s
	}
	if isMaster(id) {
		return wire.SiteID(id[1]-'A') + 1
	}
	return 0
}

// deliver hands m to its receiver (or holds it).
func (n *Sites) deliver(m Msg) {
	n.Now++
	if fs, ts := n.SiteOf(m.From), n.SiteOf(m.To); fs != 0 && ts != 0 && (fs != ts && n.Hold(m) || fs == ts && n.HoldIn(m)) {
		n.Held = append(n.Held, m)
		return
	}
	switch to := m.To; {
	case to == "":
		n.t.Fatalf("%s sent %T to nobody: %+v", m.From, m.Msg, m.Msg)
	case isMaster(to):
		n.Queue = append(n.Queue, n.master(n.SiteOf(to), m.From, m.Msg)...)
	case n.Servers[to] != nil:
		for _, e := range n.Servers[to].Step(n.Now, m.From, m.Msg) {
			n.Queue = append(n.Queue, Msg{to, e.To, e.Msg})
		}
	case to == "client":
		n.Replies = append(n.Replies, m.Msg.(*wire.ClientReply))
	}
}

// Settle runs ticks, idles and heartbeats until the sites are quiet.
func (n *Sites) Settle() {
	for range 20 {
		n.Tick()
	}
}

// Release delivers the held messages that match f.
func (n *Sites) Release(f func(m Msg) bool) {
	var keep []Msg
	for _, m := range n.Held {
		if f(m) {
			n.Queue = append(n.Queue, m)
		} else {
			keep = append(keep, m)
		}
	}
	n.Held = keep
	n.Run()
}

// KeyIn returns a key of volume v, other than those named not.
func (n *Sites) KeyIn(v wire.VolumeID, not ...string) string {
	for i := 0; ; i++ {
		k := fmt.Sprint("key", i)
		if got, _ := placement.Route(n.Keyspaces, k); got == v && !slices.Contains(not, k) {
			return k
		}
	}
}

// Put writes key at a site's head of the key's volume, as client id,
// and fails the test unless the write succeeds.
func (n *Sites) Put(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64) *wire.ClientReply {
	n.t.Helper()
	r := n.tryPut(site, client, reqNo, key, value, deps, ts)
	if r.Err != wire.ErrNone {
		n.t.Fatalf("put %s at site %d: %v", key, site, r.Err)
	}
	return r
}

// tryPut writes key at a site's head of the key's volume, as client id,
// and returns the answer; it fails the test if none comes within 50
// ticks (a write of a hierarchical keyspace may wait for an election,
// which needs time: its rounds, the servers' routes to the other site).
func (n *Sites) tryPut(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64) *wire.ClientReply {
	n.t.Helper()
	r := n.putWithin(site, client, reqNo, key, value, deps, ts, 50)
	if r == nil {
		n.t.Fatalf("put %s at site %d: no answer", key, site)
	}
	return r
}

// TryPutFor sends a write and gives it ticks rounds of time; it returns
// the answer, nil if none came.
func (n *Sites) TryPutFor(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, ticks int) *wire.ClientReply {
	return n.putWithin(site, client, reqNo, key, value, nil, 0, ticks)
}

// putWithin sends a write to the head of the key's volume at site and
// waits up to ticks ticks for its answer (nil if none came).
func (n *Sites) putWithin(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64, ticks int) *wire.ClientReply {
	return n.UpdateWithin(site, client, reqNo, wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, deps, ts, ticks)
}

// UpdateWithin sends an update to the head of its key's volume at site
// and waits up to ticks ticks for its answer (nil if none came).
func (n *Sites) UpdateWithin(site wire.SiteID, client wire.ClientID, reqNo uint64, op wire.Op, deps []wire.Dep, ts uint64, ticks int) *wire.ClientReply {
	v, _ := placement.Route(n.Keyspaces, op.Key)
	n.Replies = nil
	n.Queue = append(n.Queue, Msg{"client", n.Configs[site][v].Head(), &wire.ClientRequest{
		Volume: v, Epoch: n.Configs[site][v].Epoch, Client: client, ReqNo: reqNo, AckedBelow: reqNo, Keyspaces: wire.KeyspacesVersion(n.Keyspaces),
		Op: op, Deps: deps, TS: ts,
	}})
	n.Run()
	for range ticks {
		if r := n.Reply(client, reqNo); r != nil {
			return r
		}
		n.Tick()
	}
	return n.Reply(client, reqNo)
}

// Get reads key at the tail of its volume at site and returns the
// answer.
func (n *Sites) Get(site wire.SiteID, client wire.ClientID, key string) *wire.ClientReply {
	n.t.Helper()
	v, _ := placement.Route(n.Keyspaces, key)
	n.Replies = nil
	n.Queue = append(n.Queue, Msg{"client", n.Configs[site][v].Tail(), &wire.ClientRequest{
		Volume: v, Epoch: n.Configs[site][v].Epoch, Client: client, ReqNo: 1, Keyspaces: wire.KeyspacesVersion(n.Keyspaces),
		Op: wire.Op{Kind: wire.OpGet, Key: key},
	}})
	n.Run()
	if len(n.Replies) != 1 {
		n.t.Fatalf("get %s at site %d: %d answers", key, site, len(n.Replies))
	}
	return n.Replies[0]
}

// WriteUnshipped has site write value to key in a relaxed keyspace,
// answered at once, while its shipments are held back and then dropped:
// the other sites never hear of the write.
func (n *Sites) WriteUnshipped(site wire.SiteID, key, value string) {
	n.t.Helper()
	n.Hold = func(m Msg) bool {
		_, ship := m.Msg.(*wire.Ship)
		return ship && n.SiteOf(m.From) == site
	}
	if r := n.TryPutFor(site, 7, 1, key, value, 200); r == nil || r.Err != wire.ErrNone {
		n.t.Fatalf("site %d's write: %+v", site, r)
	}
	n.Held = nil
}

// Reply returns the answer to client's request reqNo among those
// received since the last request, or nil.
func (n *Sites) Reply(client wire.ClientID, reqNo uint64) *wire.ClientReply {
	for _, r := range n.Replies {
		if r.Client == client && r.ReqNo == reqNo {
			return r
		}
	}
	return nil
}

// Tick advances time by 20 ms: every server ticks and idles, and
// heartbeats go to the masters.
func (n *Sites) Tick() {
	n.Now += 20 * wire.Millisecond
	for _, id := range slices.Sorted(maps.Keys(n.Servers)) {
		out := n.Servers[id].Tick(n.Now)
		out = append(out, n.Servers[id].Idle(n.Now)...)
		for _, e := range out {
			n.Queue = append(n.Queue, Msg{id, e.To, e.Msg})
		}
	}
	n.Heartbeats()
	n.Run()
}

// Object returns what every member of site holds for key.
func (n *Sites) Object(site wire.SiteID, key string) (string, wire.Stamp) {
	n.t.Helper()
	v, _ := placement.Route(n.Keyspaces, key)
	var value string
	var stamp wire.Stamp
	for i, id := range n.Configs[site][v].Chain {
		o := n.Servers[id].Replica(v).Store().Get(key)
		if i > 0 && (string(o.Value) != value || o.Stamp != stamp) {
			n.t.Fatalf("site %d: %s holds %s=%q %v, its predecessor %q %v", site, id, key, o.Value, o.Stamp, value, stamp)
		}
		value, stamp = string(o.Value), o.Stamp
	}
	return value, stamp
}

// Vector returns the vector of volume v at site's tail.
func (n *Sites) Vector(site wire.SiteID, v wire.VolumeID) wire.Vector {
	return n.Servers[n.Configs[site][v].Tail()].Replica(v).Vector()
}
