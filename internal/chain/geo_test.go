package chain

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// geoNet is two sites, A (site 1: servers a1, a2, master mA) and B (site
// 2: b1, b2, mB), each with the same keyspace of two volumes replicated
// by both, k = 1, chains of two. The test plays both masters (static
// configurations, the table of stable updates gathered from heartbeats)
// and the network (FIFO per link; links between sites can be held).
type geoNet struct {
	t       *testing.T
	now     wire.Time
	servers map[wire.NodeID]*Server
	site    map[wire.NodeID]wire.SiteID
	configs map[wire.SiteID][]wire.Config
	ks      []wire.Keyspace
	sites   []wire.Site
	tables  map[wire.SiteID]map[wire.VolumeID]wire.Vector
	queue   []geoMsg
	// held are the messages between sites not yet delivered; hold says
	// which to hold.
	held []geoMsg
	hold func(m geoMsg) bool
	// holdIn says which messages within a site to hold (into held too).
	holdIn  func(m geoMsg) bool
	replies []*wire.ClientReply
	// clusters are the sites' deployment names, as their masters give
	// them; a master answers another deployment's ConfigRequest with
	// its name only, as master.Master does.
	clusters map[wire.SiteID]string
}

type geoMsg struct {
	from, to wire.NodeID
	msg      wire.Message
}

func newGeoNet(t *testing.T) *geoNet { return newGeoNetWith(t, DefaultLimits, nil) }

// newGeoNetOf builds the two sites with the deployment names their
// masters give (Settings.Cluster; nil: none).
func newGeoNetOf(t *testing.T, clusters map[wire.SiteID]string) *geoNet {
	return newGeoNetWith(t, DefaultLimits, clusters)
}

// newGeoNetWith builds the two sites with the servers' limits and the
// deployment names their masters give.
func newGeoNetWith(t *testing.T, limits Limits, clusters map[wire.SiteID]string) *geoNet {
	return newGeoNetOfMode(t, limits, clusters, 1, false)
}

// newStrongGeoNet builds the two sites with a keyspace of strong chains
// replicated by both (k = 0: the tail answers), as a hierarchical
// keyspace's volumes are (docs/adr/0016-hierarchical-replication-control.md),
// in durable mode: a write is answered once both sites hold it.
func newStrongGeoNet(t *testing.T) *geoNet { return newGeoNetOfMode(t, DefaultLimits, nil, 0, false) }

// newRelaxedGeoNet is newStrongGeoNet in relaxed mode (the paper's): a
// write is answered once its primary's chain holds it.
func newRelaxedGeoNet(t *testing.T) *geoNet { return newGeoNetOfMode(t, DefaultLimits, nil, 0, true) }

// newGeoNetOfMode builds the two sites, the replicated keyspace causal
// with k, or hierarchical (strong chains) with k = 0, durable unless
// relaxed.
func newGeoNetOfMode(t *testing.T, limits Limits, clusters map[wire.SiteID]string, k int, relaxed bool) *geoNet {
	return newGeoNetOfSites(t, limits, clusters, k, relaxed, 2, Mutations{})
}

// isGeoMaster reports whether id names a site's master.
func isGeoMaster(id wire.NodeID) bool {
	return len(id) == 2 && id[0] == 'm' && id[1] >= 'A' && id[1] <= 'Z'
}

// geoMaster names site's master: mA, mB, ...
func geoMaster(site wire.SiteID) wire.NodeID { return wire.NodeID("m" + string(rune('A'+site-1))) }

// newGeoNetOfSites builds nsites sites (a, b, c, ...) as newGeoNetOfMode,
// their servers running with mutations.
func newGeoNetOfSites(t *testing.T, limits Limits, clusters map[wire.SiteID]string, k int, relaxed bool, nsites int, mutations Mutations) *geoNet {
	n := &geoNet{
		clusters: clusters,
		t:        t, servers: map[wire.NodeID]*Server{}, site: map[wire.NodeID]wire.SiteID{},
		configs: map[wire.SiteID][]wire.Config{},
		tables:  map[wire.SiteID]map[wire.VolumeID]wire.Vector{},
		hold:    func(geoMsg) bool { return false },
		holdIn:  func(geoMsg) bool { return false },
	}
	var ids []wire.SiteID
	for i := 1; i <= nsites; i++ {
		id := wire.SiteID(i)
		ids = append(ids, id)
		n.tables[id] = map[wire.VolumeID]wire.Vector{}
		n.sites = append(n.sites, wire.Site{ID: id, Name: string(rune('a' + i - 1)), Masters: []wire.NodeID{geoMaster(id)}})
	}
	n.ks = []wire.Keyspace{
		{Name: wire.DefaultKeyspace, Mode: wire.ModeCausal, K: k, ReplicationFactor: 2, Volumes: 2, Sites: ids},
		// A keyspace each site keeps to itself (no chains in this test).
		{Name: "here", Prefix: "here/", ReplicationFactor: 2, FirstVolume: 2, Volumes: 1},
	}
	if k == 0 {
		n.ks[0].Mode, n.ks[0].PartitionDepth, n.ks[0].Relaxed = wire.ModeHierarchical, 1, relaxed
	}
	for _, site := range ids {
		p := n.sites[site-1].Name
		x, y := wire.NodeID(p+"1"), wire.NodeID(p+"2")
		n.configs[site] = []wire.Config{
			{Volume: 0, Epoch: 1, Chain: []wire.NodeID{x, y}, Fresh: true, K: k, Sites: ids},
			{Volume: 1, Epoch: 1, Chain: []wire.NodeID{y, x}, Fresh: true, K: k, Sites: ids},
		}
		for _, id := range []wire.NodeID{x, y} {
			n.site[id] = site
			n.servers[id] = NewServer(ServerOptions{
				ID: id, Masters: []wire.NodeID{geoMaster(site)}, Incarnation: 1,
				HeartbeatInterval: 10 * wire.Millisecond, Limits: limits, Engine: storage.NewMemoryEngine(), Site: site, Mutations: mutations,
			})
		}
	}
	n.heartbeats()
	n.run()
	return n
}

// heartbeats has every server send one, and answers it as the master.
func (n *geoNet) heartbeats() {
	for _, id := range slices.Sorted(maps.Keys(n.servers)) {
		n.now++
		for _, e := range n.servers[id].heartbeat(n.now) {
			n.queue = append(n.queue, geoMsg{id, e.To, e.Msg})
		}
	}
}

// master answers a message to site's master.
func (n *geoNet) master(site wire.SiteID, from wire.NodeID, m wire.Message) []geoMsg {
	me := geoMaster(site)
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
		return []geoMsg{{me, from, &wire.HeartbeatReply{SentAt: m.SentAt, LeaseGranted: true, LeaseFor: 1000 * wire.Second,
			Configs: n.configs[site], Keyspaces: n.ks, Sites: n.sites, Stable: vv, Cluster: n.clusters[site]}}}
	case *wire.ConfigRequest:
		if m.Cluster != "" && m.Cluster != n.clusters[site] {
			return []geoMsg{{me, from, &wire.ConfigReply{Cluster: n.clusters[site]}}}
		}
		return []geoMsg{{me, from, &wire.ConfigReply{Configs: n.configs[site], Masters: []wire.NodeID{me}, Leader: me, Keyspaces: n.ks, Cluster: n.clusters[site]}}}
	}
	return nil
}

// run delivers messages until none is left but the held ones.
func (n *geoNet) run() {
	for steps := 0; len(n.queue) > 0; steps++ {
		if steps > 100_000 {
			kinds := map[string]int{}
			for _, m := range n.queue {
				key := fmt.Sprintf("%s→%s %s", m.from, m.to, wire.MessageName(m.msg))
				if a, ok := m.msg.(*wire.ShipAck); ok {
					key += fmt.Sprintf(" err=%v origin=%d", a.Err, a.Origin)
				}
				kinds[key]++
			}
			n.t.Logf("queued: %v", kinds)
			for _, m := range n.queue[:min(3, len(n.queue))] {
				if c, ok := m.msg.(*wire.Control); ok {
					n.t.Logf("%s→%s %s %+v", m.from, m.to, wire.MessageName(m.msg), *c)
				} else {
					n.t.Logf("%s→%s %s %+v", m.from, m.to, wire.MessageName(m.msg), m.msg)
				}
			}
			n.t.Fatal("messages do not stop")
		}
		m := n.queue[0]
		n.queue = n.queue[1:]
		n.deliver(m)
	}
}

// deliverSome delivers one message chosen by rng among the queue's
// links, the oldest of its link (FIFO per link, links interleaved at
// random); false if none is queued.
func (n *geoNet) deliverSome(rng *rand.Rand) bool {
	if len(n.queue) == 0 {
		return false
	}
	pick := n.queue[rng.IntN(len(n.queue))]
	i := slices.IndexFunc(n.queue, func(m geoMsg) bool { return m.from == pick.from && m.to == pick.to })
	m := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	n.deliver(m)
	return true
}

// siteOf returns the site of a server or master (0: a client).
func (n *geoNet) siteOf(id wire.NodeID) wire.SiteID {
	if s, ok := n.site[id]; ok {
		return s
	}
	if isGeoMaster(id) {
		return wire.SiteID(id[1]-'A') + 1
	}
	return 0
}

// deliver hands m to its receiver (or holds it).
func (n *geoNet) deliver(m geoMsg) {
	n.now++
	if fs, ts := n.siteOf(m.from), n.siteOf(m.to); fs != 0 && ts != 0 && (fs != ts && n.hold(m) || fs == ts && n.holdIn(m)) {
		n.held = append(n.held, m)
		return
	}
	switch to := m.to; {
	case to == "":
		n.t.Fatalf("%s sent %T to nobody: %+v", m.from, m.msg, m.msg)
	case isGeoMaster(to):
		n.queue = append(n.queue, n.master(n.siteOf(to), m.from, m.msg)...)
	case n.servers[to] != nil:
		for _, e := range n.servers[to].Step(n.now, m.from, m.msg) {
			n.queue = append(n.queue, geoMsg{to, e.To, e.Msg})
		}
	case to == "client":
		n.replies = append(n.replies, m.msg.(*wire.ClientReply))
	}
}

// settle runs ticks, idles and heartbeats until the sites are quiet.
func (n *geoNet) settle() {
	for range 20 {
		n.tick()
	}
}

// release delivers the held messages that match f.
func (n *geoNet) release(f func(m geoMsg) bool) {
	var keep []geoMsg
	for _, m := range n.held {
		if f(m) {
			n.queue = append(n.queue, m)
		} else {
			keep = append(keep, m)
		}
	}
	n.held = keep
	n.run()
}

// keyIn returns a key of volume v.
func (n *geoNet) keyIn(v wire.VolumeID, not ...string) string {
	for i := 0; ; i++ {
		k := fmt.Sprint("key", i)
		if got, _ := placement.Route(n.ks, k); got == v && !slices.Contains(not, k) {
			return k
		}
	}
}

// put writes key at a site's head of the key's volume, as client id,
// and fails the test unless the write succeeds.
func (n *geoNet) put(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64) *wire.ClientReply {
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
func (n *geoNet) tryPut(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64) *wire.ClientReply {
	n.t.Helper()
	r := n.putWithin(site, client, reqNo, key, value, deps, ts, 50)
	if r == nil {
		n.t.Fatalf("put %s at site %d: no answer", key, site)
	}
	return r
}

// tryPutFor sends a write and gives it ticks rounds of time; it returns
// the answer, nil if none came.
func (n *geoNet) tryPutFor(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, ticks int) *wire.ClientReply {
	return n.putWithin(site, client, reqNo, key, value, nil, 0, ticks)
}

// putWithin sends a write to the head of the key's volume at site and
// waits up to ticks ticks for its answer (nil if none came).
func (n *geoNet) putWithin(site wire.SiteID, client wire.ClientID, reqNo uint64, key, value string, deps []wire.Dep, ts uint64, ticks int) *wire.ClientReply {
	return n.updateWithin(site, client, reqNo, wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, deps, ts, ticks)
}

// updateWithin sends an update to the head of its key's volume at site
// and waits up to ticks ticks for its answer (nil if none came).
func (n *geoNet) updateWithin(site wire.SiteID, client wire.ClientID, reqNo uint64, op wire.Op, deps []wire.Dep, ts uint64, ticks int) *wire.ClientReply {
	v, _ := placement.Route(n.ks, op.Key)
	n.replies = nil
	n.queue = append(n.queue, geoMsg{"client", n.configs[site][v].Head(), &wire.ClientRequest{
		Volume: v, Epoch: n.configs[site][v].Epoch, Client: client, ReqNo: reqNo, AckedBelow: reqNo, Keyspaces: uint32(len(n.ks)),
		Op: op, Deps: deps, TS: ts,
	}})
	n.run()
	for range ticks {
		if r := n.reply(client, reqNo); r != nil {
			return r
		}
		n.tick()
	}
	return n.reply(client, reqNo)
}

// reply returns the answer to client's request reqNo among those
// received since the last request, or nil.
func (n *geoNet) reply(client wire.ClientID, reqNo uint64) *wire.ClientReply {
	for _, r := range n.replies {
		if r.Client == client && r.ReqNo == reqNo {
			return r
		}
	}
	return nil
}

// tick advances time by 20 ms: every server ticks and idles, and
// heartbeats go to the masters.
func (n *geoNet) tick() {
	n.now += 20 * wire.Millisecond
	for _, id := range slices.Sorted(maps.Keys(n.servers)) {
		out := n.servers[id].Tick(n.now)
		out = append(out, n.servers[id].Idle(n.now)...)
		for _, e := range out {
			n.queue = append(n.queue, geoMsg{id, e.To, e.Msg})
		}
	}
	n.heartbeats()
	n.run()
}

// object returns what every member of site holds for key.
func (n *geoNet) object(site wire.SiteID, key string) (string, wire.Stamp) {
	n.t.Helper()
	v, _ := placement.Route(n.ks, key)
	var value string
	var stamp wire.Stamp
	for i, id := range n.configs[site][v].Chain {
		o := n.servers[id].Replica(v).store.Get(key)
		if i > 0 && (string(o.Value) != value || o.Stamp != stamp) {
			n.t.Fatalf("site %d: %s holds %s=%q %v, its predecessor %q %v", site, id, key, o.Value, o.Stamp, value, stamp)
		}
		value, stamp = string(o.Value), o.Stamp
	}
	return value, stamp
}

// vector returns the vector of volume v at site's tail.
func (n *geoNet) vector(site wire.SiteID, v wire.VolumeID) wire.Vector {
	return n.servers[n.configs[site][v].Tail()].Replica(v).Vector()
}

// ChainReaction §V: an update answered at its site reaches the other
// site's chain, where every member applies it, and the vectors agree.
func TestGeoUpdateReachesOtherSite(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(0)
	r := n.put(1, 7, 1, key, "from-a", nil, 0)
	if r.Result.Stamp.Origin != 1 || r.Result.Stamp.N != 1 {
		t.Fatalf("answer's stamp = %v, want site 1's first update", r.Result.Stamp)
	}
	n.settle()
	if value, stamp := n.object(2, key); value != "from-a" || stamp != r.Result.Stamp {
		t.Fatalf("site 2 holds %q %v, want %q %v", value, stamp, "from-a", r.Result.Stamp)
	}
	if a, b := n.vector(1, 0), n.vector(2, 0); !slices.Equal(a, b) || a.Get(1) != 1 {
		t.Fatalf("vectors: site 1 %v, site 2 %v", a, b)
	}
	// The tail reports what site 2 holds stable (catena status's
	// shipping lag); other members report nothing.
	for i, id := range n.configs[1][0].Chain {
		st := n.servers[id].Replica(0).Status()
		want := wire.Vector(nil)
		if i == len(n.configs[1][0].Chain)-1 {
			want = wire.Vector{{Site: 2, N: 1}}
		}
		if !slices.Equal(st.Shipped, want) {
			t.Errorf("%s reports shipped %v, want %v", id, st.Shipped, want)
		}
	}
	// Site 2 holds it stable, so site 1's shipping logs let it go.
	for _, id := range n.configs[1][0].Chain {
		if log := n.servers[id].Replica(0).store.ShipLog(1, 1, 10); len(log) != 0 {
			t.Errorf("%s still holds %d updates to ship", id, len(log))
		}
	}
}

// A volume of strong chains replicated by two sites (the substrate of a
// hierarchical keyspace): the tail answers a write once every member of
// its chain holds it, with the write's stamp; the tail ships it; the
// other site's chain applies it, sends nobody an answer for it, and its
// tail reads it.
func TestStrongGeoUpdateReachesOtherSite(t *testing.T) {
	n := newRelaxedGeoNet(t)
	key := n.keyIn(0)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	r := n.put(1, 7, 1, key, "from-a", nil, 0)
	if r.Result.Stamp.Origin != 1 || r.Result.Stamp.N != 1 || !r.Stable || r.Position != 1 {
		t.Fatalf("answer %+v: want the tail's (position 1), stable, with site 1's first stamp", r)
	}
	for _, id := range n.configs[1][0].Chain {
		if o := n.servers[id].Replica(0).store.Get(key); string(o.Value) != "from-a" {
			t.Fatalf("answered while %s holds %q", id, o.Value)
		}
	}
	if value, _ := n.object(2, key); value != "" {
		t.Fatalf("site 2 holds %q with shipments held", value)
	}
	n.hold = func(geoMsg) bool { return false }
	n.replies = nil
	n.release(func(geoMsg) bool { return true })
	n.settle()
	if value, stamp := n.object(2, key); value != "from-a" || stamp != r.Result.Stamp {
		t.Fatalf("site 2 holds %q %v, want %q %v", value, stamp, "from-a", r.Result.Stamp)
	}
	if a, b := n.vector(1, 0), n.vector(2, 0); !slices.Equal(a, b) || a.Get(1) != 1 {
		t.Fatalf("vectors: site 1 %v, site 2 %v", a, b)
	}
	if len(n.replies) != 0 {
		t.Fatalf("site 2's chain answered someone for site 1's update: %+v", n.replies[0])
	}
	// Site 1 is the key's primary until it has been idle for the idle
	// time (and site 2 holds its write); then site 2 writes it as its
	// own primary, stamped above site 1's version.
	for range 60 {
		n.tick() // 1.2 s: past site 1's idle time
	}
	r2 := n.put(2, 8, 2, key, "from-b", nil, 0)
	if r2.Result.Stamp.Origin != 2 || !r2.Result.Stamp.After(r.Result.Stamp) {
		t.Fatalf("site 2's write stamped %v after %v", r2.Result.Stamp, r.Result.Stamp)
	}
	n.settle()
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.object(site, key); value != "from-b" {
			t.Errorf("site %d holds %q, want from-b", site, value)
		}
	}
}

// While shipments to site 2 are held, the tail reports site 1's updates
// as originated and not shipped: the lag catena status shows.
func TestGeoTailReportsShippingLag(t *testing.T) {
	n := newGeoNet(t)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	key := n.keyIn(0)
	n.put(1, 7, 1, key, "one", nil, 0)
	n.put(1, 7, 2, key, "two", nil, 0)
	n.settle()
	tail := n.servers[n.configs[1][0].Tail()].Replica(0).Status()
	if tail.Stable.Get(1) != 2 || tail.Shipped.Get(2) != 0 {
		t.Fatalf("tail reports stable %v shipped %v while shipping is held, want 2 of site 1 originated, none shipped", tail.Stable, tail.Shipped)
	}
	if lag := n.servers[n.configs[1][0].Tail()].Replica(0).ShippingLag(); !slices.Equal(lag, []wire.SiteCount{{Site: 2, N: 2}}) {
		t.Fatalf("tail's shipping lag %v, want 2 to site 2", lag)
	}
	if lag := n.servers[n.configs[1][0].Head()].Replica(0).ShippingLag(); lag != nil {
		t.Fatalf("head's shipping lag %v, want none (the tail ships)", lag)
	}
	n.hold = func(geoMsg) bool { return false }
	n.release(func(geoMsg) bool { return true })
	n.settle()
	tail = n.servers[n.configs[1][0].Tail()].Replica(0).Status()
	if tail.Shipped.Get(2) != 2 {
		t.Fatalf("tail reports shipped %v after release, want site 2 at 2", tail.Shipped)
	}
	if lag := n.servers[n.configs[1][0].Tail()].Replica(0).ShippingLag(); !slices.Equal(lag, []wire.SiteCount{{Site: 2, N: 0}}) {
		t.Fatalf("tail's shipping lag %v after release, want 0 to site 2", lag)
	}
}

// Concurrent writes of one key at both sites: every replica of both sites
// ends with the one of larger (timestamp, site), and the loser still
// counts in the vectors (NOTES A3.10, A3.11).
func TestGeoConcurrentWritesConverge(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(1)
	ra := n.put(1, 7, 1, key, "a", nil, 0)
	rb := n.put(2, 8, 1, key, "b", nil, 0)
	n.settle()
	want := "a"
	if rb.Result.Stamp.After(ra.Result.Stamp) {
		want = "b"
	}
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.object(site, key); value != want {
			t.Errorf("site %d holds %q, want %q (stamps a %v, b %v)", site, value, want, ra.Result.Stamp, rb.Result.Stamp)
		}
		if v := n.vector(site, 1); v.Get(1) != 1 || v.Get(2) != 1 {
			t.Errorf("site %d vector %v, want one update of each site", site, v)
		}
	}
	// A write that read the winner carries its timestamp: it wins
	// everywhere, whatever the clocks say.
	_, st := n.object(1, key)
	rc := n.put(2, 8, 2, key, "c", []wire.Dep{{Key: key, Origin: st.Origin, N: st.N}}, st.TS)
	if !rc.Result.Stamp.After(st) {
		t.Fatalf("a write after reading %v got stamp %v", st, rc.Result.Stamp)
	}
	n.settle()
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.object(site, key); value != "c" {
			t.Errorf("site %d holds %q, want c", site, value)
		}
	}
}

// A remote update waits at the receiving head until its dependencies are
// stable at that site: y (volume 1) depends on x (volume 0); with x's
// shipment held back, site 2 does not show y; once x arrives, both do.
func TestGeoRemoteUpdateWaitsForItsDependencies(t *testing.T) {
	n := newGeoNet(t)
	x, y := n.keyIn(0), n.keyIn(1)
	rx := n.put(1, 7, 1, x, "x1", nil, 0)
	n.hold = func(m geoMsg) bool { s, ok := m.msg.(*wire.Ship); return ok && s.OriginVolume == 0 }
	n.put(1, 7, 2, y, "y1", []wire.Dep{{Key: x, Origin: 1, N: rx.Result.Stamp.N}}, rx.Result.Stamp.TS)
	n.settle()
	if value, _ := n.object(2, y); value != "" {
		t.Fatalf("site 2 shows y=%q before its dependency x", value)
	}
	if len(n.held) == 0 {
		t.Fatal("no shipment of volume 0 was held")
	}
	n.hold = func(geoMsg) bool { return false }
	n.release(func(geoMsg) bool { return true })
	n.settle()
	if value, _ := n.object(2, x); value != "x1" {
		t.Fatalf("site 2 holds x=%q, want x1", value)
	}
	if value, _ := n.object(2, y); value != "y1" {
		t.Fatalf("site 2 holds y=%q, want y1 once x is stable there", value)
	}
}

// Shipping resumes without loss or duplicate when the shipper changes:
// site 1's tail of volume 0 fails with shipments in flight (dropped), its
// predecessor becomes tail and ships from its own durable log.
func TestGeoShippingResumesAfterTheTailChanges(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(0)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	for i := range uint64(5) {
		n.put(1, 7, i+1, key, fmt.Sprint("v", i), nil, 0)
	}
	n.settle()
	if len(n.held) == 0 {
		t.Fatal("no shipment held")
	}
	n.held = nil // lost with the link
	n.hold = func(geoMsg) bool { return false }
	// a2, the tail of volume 0 at site 1, fails: a1 is the chain.
	n.configs[1][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a1"}, K: 1, Sites: []wire.SiteID{1, 2}}
	delete(n.servers, "a2")
	n.configs[1][1] = wire.Config{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a1"}, K: 1, Sites: []wire.SiteID{1, 2}}
	n.settle()
	if value, _ := n.object(2, key); value != "v4" {
		t.Fatalf("site 2 holds %q, want v4", value)
	}
	if v := n.vector(2, 0); v.Get(1) != 5 {
		t.Fatalf("site 2's vector %v, want 5 updates of site 1 (no loss, no duplicate)", v)
	}
}

// A dependency on a key of a keyspace the receiving site does not
// replicate from the origin names nothing a reader there can see: the
// update is applied without waiting for it (it would wait forever).
func TestGeoDependencyOutsideTheSitesKeyspacesIsMet(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(0)
	n.put(1, 7, 1, key, "v", []wire.Dep{{Key: "here/x", Origin: 1, N: 5}}, 0)
	n.settle()
	if value, _ := n.object(2, key); value != "v" {
		t.Fatalf("site 2 holds %q, want v", value)
	}
}

// The receiving head changes while the old one stays up: site 2 removes
// b1 from volume 0's chain (b2 heads it now) and b1 drops its replica, so
// it answers a shipment with ErrNotHead and no configuration. Site 1's
// tail, which knew b1 as the head, must ask site 2's masters again
// rather than send to b1 forever.
func TestGeoShippingFindsANewReceivingHead(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(0)
	n.put(1, 7, 1, key, "first", nil, 0)
	n.settle()
	if value, _ := n.object(2, key); value != "first" {
		t.Fatalf("site 2 holds %q before the change, want first", value)
	}
	n.configs[2][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"b2"}, K: 1, Sites: []wire.SiteID{1, 2}}
	n.settle()
	if n.servers["b1"].Replica(0) != nil {
		t.Fatal("b1 still holds volume 0 after leaving its chain")
	}
	n.put(1, 7, 2, key, "second", nil, 0)
	for range 10 { // 4 s: well past ShipRetryInterval
		n.settle()
	}
	if value, _ := n.object(2, key); value != "second" {
		t.Fatalf("site 2 holds %q, want second: shipping did not find the new head", value)
	}
}

// Bad input on a geo write gets a clear error and changes nothing: a
// dependency numbered 0, too many dependencies, a timestamp near the
// clock's limit.
func TestGeoRefusesBadDependenciesAndTimestamps(t *testing.T) {
	n := newGeoNet(t)
	key := n.keyIn(0)
	v, _ := placement.Route(n.ks, key)
	head := n.configs[1][v].Head()
	for i, tc := range []struct {
		deps []wire.Dep
		ts   uint64
	}{
		{deps: []wire.Dep{{Key: key, Origin: 1, N: 0}}},
		{deps: make([]wire.Dep, DefaultLimits.DepsMax+1)},
		{ts: 1 << 62},
	} {
		n.replies = nil
		n.queue = append(n.queue, geoMsg{"client", head, &wire.ClientRequest{
			Volume: v, Epoch: 1, Client: 9, ReqNo: uint64(i + 1), AckedBelow: uint64(i + 1), Keyspaces: uint32(len(n.ks)),
			Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("x")}, Deps: tc.deps, TS: tc.ts,
		}})
		n.run()
		if len(n.replies) != 1 || n.replies[0].Err != wire.ErrBadRequest {
			t.Fatalf("case %d: replies %+v, want one ErrBadRequest", i, n.replies)
		}
	}
	if value, _ := n.object(1, key); value != "" {
		t.Fatalf("a refused write changed %s to %q", key, value)
	}
	if v := n.vector(1, v); len(v) != 0 {
		t.Fatalf("refused writes counted: vector %v", v)
	}
}

// A receiving head whose queue is full says so (ErrTooManyInFlight) and
// the shipper sends the rest again after a short pause, not after
// ShipRetryInterval (1 s): with a queue of 4, 30 updates arrive within
// 1.2 s (waiting for ShipRetryInterval each time the queue filled, 5).
func TestGeoShippingGoesOnWhenTheReceiverQueueIsFull(t *testing.T) {
	limits := DefaultLimits
	limits.InboundMax = 4
	n := newGeoNetWith(t, limits, nil)
	x, y := n.keyIn(0), n.keyIn(1)
	rx := n.put(1, 7, 1, x, "x", nil, 0)
	for i := range uint64(30) {
		n.put(1, 7, i+2, y, fmt.Sprint("y", i), []wire.Dep{{Key: x, Origin: 1, N: rx.Result.Stamp.N}}, rx.Result.Stamp.TS)
	}
	for range 3 { // 3 × 400 ms of simulated time
		n.settle()
	}
	if value, _ := n.object(2, y); value != "y29" {
		t.Fatalf("site 2 holds %s=%q, want y29", y, value)
	}
}

// Sites of two deployments (their masters' Settings.Cluster differ)
// exchange nothing: a master's answer of the other deployment is ignored,
// a shipment from it is refused with ErrWrongCluster and nothing is
// applied, and each refusal is recorded for the log. Sites of one named
// deployment replicate as usual.
func TestGeoRefusesAnotherDeployment(t *testing.T) {
	same := newGeoNetOf(t, map[wire.SiteID]string{1: "prod", 2: "prod"})
	key := same.keyIn(0)
	same.put(1, 7, 1, key, "v", nil, 0)
	same.settle()
	if value, _ := same.object(2, key); value != "v" {
		t.Fatalf("one deployment: site 2 holds %q, want %q", value, "v")
	}

	n := newGeoNetOf(t, map[wire.SiteID]string{1: "prod", 2: "staging"})
	n.put(1, 7, 1, key, "v", nil, 0)
	n.settle()
	if value, _ := n.object(2, key); value != "" || len(n.vector(2, 0)) != 0 {
		t.Fatalf("site 2 of another deployment holds %q, vector %v", value, n.vector(2, 0))
	}
	refusals := func(site wire.SiteID) string {
		var all []string
		for _, id := range slices.Sorted(maps.Keys(n.servers)) {
			if n.site[id] == site {
				all = append(all, n.servers[id].Refusals()...)
			}
		}
		return strings.Join(all, "\n")
	}
	if got := refusals(1); !strings.Contains(got, `a master of site 2 of deployment "staging": this is "prod"`) {
		t.Errorf("site 1's refusals: %q", got)
	}

	// A shipment that gets there anyway (a head's address known) is
	// refused, and the refusal reaches the shipper.
	tail := n.configs[1][0].Tail()
	batch := n.servers[tail].Replica(0).store.ShipLog(1, 1, 10)
	if len(batch) != 1 {
		t.Fatalf("site 1's shipping log holds %d updates, want the 1 site 2 never acknowledged", len(batch))
	}
	head := n.configs[2][0].Head()
	out := n.servers[head].Step(n.now, tail, &wire.Ship{Volume: 0, Origin: 1, OriginVolume: 0, Updates: batch, Cluster: "prod", Sender: 1})
	if len(out) != 1 || out[0].To != tail {
		t.Fatalf("Ship of another deployment answered %v", out)
	}
	ack, ok := out[0].Msg.(*wire.ShipAck)
	if !ok || ack.Err != wire.ErrWrongCluster {
		t.Fatalf("Ship of another deployment answered %v, want ShipAck %v", out[0].Msg, wire.ErrWrongCluster)
	}
	n.settle()
	if value, _ := n.object(2, key); value != "" || len(n.vector(2, 0)) != 0 {
		t.Fatalf("site 2 applied a shipment of another deployment: %q, vector %v", value, n.vector(2, 0))
	}
	if got := refusals(2); !strings.Contains(got, `refused 1 updates shipped by `+string(tail)+`, site 1 of deployment "prod": this is "staging"`) {
		t.Errorf("site 2's refusals: %q", got)
	}
	if out := n.servers[tail].Step(n.now, head, ack); len(out) != 0 {
		t.Fatalf("the refusal's ShipAck produced %v", out)
	}
	if got := refusals(1); !strings.Contains(got, "refused this site's shipment of volume 0") {
		t.Errorf("site 1's refusals after the ShipAck: %q", got)
	}
	if log := n.servers[tail].Replica(0).store.ShipLog(1, 1, 10); len(log) != 1 {
		t.Errorf("the refusal trimmed site 1's shipping log to %d updates", len(log))
	}
}

// A write durable across sites: the origin's tail answers OpWaitShipped
// for it only once the other site holds it stable, and refuses a wait it
// cannot answer (too many sites, another site's update, no stamp).
func TestGeoWaitShippedAnswersOnceTheOtherSiteHoldsIt(t *testing.T) {
	n := newGeoNet(t)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	key := n.keyIn(0)
	st := n.put(1, 7, 1, key, "durable", nil, 0).Result.Stamp
	tail := n.configs[1][0].Tail()
	wait := func(reqNo uint64, dep wire.Dep, sites int64) {
		n.queue = append(n.queue, geoMsg{"client", tail, &wire.ClientRequest{
			Volume: 0, Epoch: 1, Client: 8, ReqNo: reqNo, Keyspaces: uint32(len(n.ks)),
			Op: wire.Op{Kind: wire.OpWaitShipped, Key: key, Delta: sites}, Deps: []wire.Dep{dep},
		}})
		n.run()
	}
	answer := func(reqNo uint64) *wire.ClientReply {
		for _, r := range n.replies {
			if r.Client == 8 && r.ReqNo == reqNo {
				return r
			}
		}
		return nil
	}
	n.replies = nil
	for i, bad := range []struct {
		dep   wire.Dep
		sites int64
	}{
		{wire.Dep{Key: key, Origin: 1, N: st.N}, 3},
		{wire.Dep{Key: key, Origin: 1, N: st.N}, 1},
		{wire.Dep{Key: key, Origin: 2, N: 1}, 2},
		{wire.Dep{Key: key, Origin: 1, N: 0}, 2},
	} {
		wait(uint64(10+i), bad.dep, bad.sites)
		if r := answer(uint64(10 + i)); r == nil || r.Err != wire.ErrBadRequest {
			t.Fatalf("wait for %v at %d sites: answer %+v, want ErrBadRequest", bad.dep, bad.sites, r)
		}
	}

	n.settle() // stable at site 1, held on its way to site 2
	wait(1, wire.Dep{Key: key, Origin: 1, N: st.N}, 2)
	n.settle()
	if r := answer(1); r != nil {
		t.Fatalf("answered %+v while site 2 has not received the update", r)
	}
	n.hold = func(geoMsg) bool { return false }
	n.release(func(geoMsg) bool { return true })
	n.settle()
	if r := answer(1); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("after shipping: answer %+v, want one without error", r)
	}
	if value, _ := n.object(2, key); value != "durable" {
		t.Fatalf("site 2 holds %q", value)
	}
}
