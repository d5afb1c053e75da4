package sites_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/chaintest"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Shipping between sites, through the modes built on it: causal+ across
// sites (ChainReaction §V) and the strong chains of a hierarchical
// keyspace. The scenarios use chaintest.Sites: two sites, whose chains
// are a1→a2 and b1→b2 for volume 0, a2→a1 and b2→b1 for volume 1.

// newSites builds the sites o says, their servers running every mode
// (modes.New).
func newSites(t *testing.T, o chaintest.SitesOptions) *chaintest.Sites {
	o.Modes = modes.New
	return chaintest.NewSites(t, o)
}

// newCausalSites builds two sites whose replicated keyspace is causal
// with k = 1.
func newCausalSites(t *testing.T) *chaintest.Sites { return newSites(t, chaintest.SitesOptions{K: 1}) }

// ChainReaction §V: an update answered at its site reaches the other
// site's chain, where every member applies it, and the vectors agree.
func TestGeoUpdateReachesOtherSite(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	r := n.Put(1, 7, 1, key, "from-a", nil, 0)
	if r.Result.Stamp.Origin != 1 || r.Result.Stamp.N != 1 {
		t.Fatalf("answer's stamp = %v, want site 1's first update", r.Result.Stamp)
	}
	n.Settle()
	if value, stamp := n.Object(2, key); value != "from-a" || stamp != r.Result.Stamp {
		t.Fatalf("site 2 holds %q %v, want %q %v", value, stamp, "from-a", r.Result.Stamp)
	}
	if a, b := n.Vector(1, 0), n.Vector(2, 0); !slices.Equal(a, b) || a.Get(1) != 1 {
		t.Fatalf("vectors: site 1 %v, site 2 %v", a, b)
	}
	// The tail reports what site 2 holds stable (catena status's
	// shipping lag); other members report nothing.
	for i, id := range n.Configs[1][0].Chain {
		st := n.Servers[id].Replica(0).Status()
		want := wire.Vector(nil)
		if i == len(n.Configs[1][0].Chain)-1 {
			want = wire.Vector{{Site: 2, N: 1}}
		}
		if !slices.Equal(st.Shipped, want) {
			t.Errorf("%s reports shipped %v, want %v", id, st.Shipped, want)
		}
	}
	// Site 2 holds it stable, so site 1's shipping logs let it go.
	for _, id := range n.Configs[1][0].Chain {
		if log := n.Servers[id].Replica(0).Store().ShipLog(1, 1, 10); len(log) != 0 {
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
	n := newSites(t, chaintest.SitesOptions{Relaxed: true})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	r := n.Put(1, 7, 1, key, "from-a", nil, 0)
	if r.Result.Stamp.Origin != 1 || r.Result.Stamp.N != 1 || !r.Stable || r.Position != 1 {
		t.Fatalf("answer %+v: want the tail's (position 1), stable, with site 1's first stamp", r)
	}
	for _, id := range n.Configs[1][0].Chain {
		if o := n.Servers[id].Replica(0).Store().Get(key); string(o.Value) != "from-a" {
			t.Fatalf("answered while %s holds %q", id, o.Value)
		}
	}
	if value, _ := n.Object(2, key); value != "" {
		t.Fatalf("site 2 holds %q with shipments held", value)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Replies = nil
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	if value, stamp := n.Object(2, key); value != "from-a" || stamp != r.Result.Stamp {
		t.Fatalf("site 2 holds %q %v, want %q %v", value, stamp, "from-a", r.Result.Stamp)
	}
	if a, b := n.Vector(1, 0), n.Vector(2, 0); !slices.Equal(a, b) || a.Get(1) != 1 {
		t.Fatalf("vectors: site 1 %v, site 2 %v", a, b)
	}
	if len(n.Replies) != 0 {
		t.Fatalf("site 2's chain answered someone for site 1's update: %+v", n.Replies[0])
	}
	// Site 1 is the key's primary until it has been idle for the idle
	// time (and site 2 holds its write); then site 2 writes it as its
	// own primary, stamped above site 1's version.
	for range 60 {
		n.Tick() // 1.2 s: past site 1's idle time
	}
	r2 := n.Put(2, 8, 2, key, "from-b", nil, 0)
	if r2.Result.Stamp.Origin != 2 || !r2.Result.Stamp.After(r.Result.Stamp) {
		t.Fatalf("site 2's write stamped %v after %v", r2.Result.Stamp, r.Result.Stamp)
	}
	n.Settle()
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.Object(site, key); value != "from-b" {
			t.Errorf("site %d holds %q, want from-b", site, value)
		}
	}
}

// While shipments to site 2 are held, the tail reports site 1's updates
// as originated and not shipped: the lag catena status shows.
func TestGeoTailReportsShippingLag(t *testing.T) {
	n := newCausalSites(t)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "one", nil, 0)
	n.Put(1, 7, 2, key, "two", nil, 0)
	n.Settle()
	tail := n.Servers[n.Configs[1][0].Tail()].Replica(0).Status()
	if tail.Stable.Get(1) != 2 || tail.Shipped.Get(2) != 0 {
		t.Fatalf("tail reports stable %v shipped %v while shipping is held, want 2 of site 1 originated, none shipped", tail.Stable, tail.Shipped)
	}
	if lag := n.Servers[n.Configs[1][0].Tail()].Replica(0).ShippingLag(); !slices.Equal(lag, []wire.SiteCount{{Site: 2, N: 2}}) {
		t.Fatalf("tail's shipping lag %v, want 2 to site 2", lag)
	}
	if lag := n.Servers[n.Configs[1][0].Head()].Replica(0).ShippingLag(); lag != nil {
		t.Fatalf("head's shipping lag %v, want none (the tail ships)", lag)
	}
	// In time: the oldest update site 2 lacks was written at its stamp's
	// timestamp (the head's clock then).
	written := wire.Time(n.Servers[n.Configs[1][0].Tail()].Replica(0).Store().ShipLog(1, 1, 1)[0].Stamp.TS)
	if age := n.Servers[n.Configs[1][0].Tail()].Replica(0).ShippingAge(n.Now); len(age) != 1 || age[0].Site != 2 || age[0].Age != n.Now-written || age[0].Age <= 0 {
		t.Fatalf("tail's shipping age %v at %v, want site 2 at %v (the first update written at %v)", age, n.Now, n.Now-written, written)
	}
	// The status the tail reports (catena status, the status page) says
	// it too, as of the tail's last step.
	if st := tail.ShippingAge; len(st) != 1 || st[0].Site != 2 || st[0].Age <= 0 {
		t.Fatalf("tail's status shipping age %v while shipping is held, want site 2, above 0", st)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	tail = n.Servers[n.Configs[1][0].Tail()].Replica(0).Status()
	if tail.Shipped.Get(2) != 2 {
		t.Fatalf("tail reports shipped %v after release, want site 2 at 2", tail.Shipped)
	}
	if lag := n.Servers[n.Configs[1][0].Tail()].Replica(0).ShippingLag(); !slices.Equal(lag, []wire.SiteCount{{Site: 2, N: 0}}) {
		t.Fatalf("tail's shipping lag %v after release, want 0 to site 2", lag)
	}
	if age := n.Servers[n.Configs[1][0].Tail()].Replica(0).ShippingAge(n.Now); len(age) != 1 || age[0].Age != 0 {
		t.Fatalf("tail's shipping age %v after release, want 0 to site 2", age)
	}
	if st := tail.ShippingAge; len(st) != 1 || st[0].Age != 0 {
		t.Fatalf("tail's status shipping age %v after release, want 0 to site 2", st)
	}
}

// Concurrent writes of one key at both sites: every replica of both sites
// ends with the one of larger (timestamp, site), and the loser still
// counts in the vectors (NOTES A3.10, A3.11).
func TestGeoConcurrentWritesConverge(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(1)
	ra := n.Put(1, 7, 1, key, "a", nil, 0)
	rb := n.Put(2, 8, 1, key, "b", nil, 0)
	n.Settle()
	want := "a"
	if rb.Result.Stamp.After(ra.Result.Stamp) {
		want = "b"
	}
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.Object(site, key); value != want {
			t.Errorf("site %d holds %q, want %q (stamps a %v, b %v)", site, value, want, ra.Result.Stamp, rb.Result.Stamp)
		}
		if v := n.Vector(site, 1); v.Get(1) != 1 || v.Get(2) != 1 {
			t.Errorf("site %d vector %v, want one update of each site", site, v)
		}
	}
	// A write that read the winner carries its timestamp: it wins
	// everywhere, whatever the clocks say.
	_, st := n.Object(1, key)
	rc := n.Put(2, 8, 2, key, "c", []wire.Dep{{Key: key, Origin: st.Origin, N: st.N}}, st.TS)
	if !rc.Result.Stamp.After(st) {
		t.Fatalf("a write after reading %v got stamp %v", st, rc.Result.Stamp)
	}
	n.Settle()
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.Object(site, key); value != "c" {
			t.Errorf("site %d holds %q, want c", site, value)
		}
	}
}

// A remote update waits at the receiving head until its dependencies are
// stable at that site: y (volume 1) depends on x (volume 0); with x's
// shipment held back, site 2 does not show y; once x arrives, both do.
func TestGeoRemoteUpdateWaitsForItsDependencies(t *testing.T) {
	n := newCausalSites(t)
	x, y := n.KeyIn(0), n.KeyIn(1)
	rx := n.Put(1, 7, 1, x, "x1", nil, 0)
	n.Hold = func(m chaintest.Msg) bool { s, ok := m.Msg.(*wire.Ship); return ok && s.OriginVolume == 0 }
	n.Put(1, 7, 2, y, "y1", []wire.Dep{{Key: x, Origin: 1, N: rx.Result.Stamp.N}}, rx.Result.Stamp.TS)
	n.Settle()
	if value, _ := n.Object(2, y); value != "" {
		t.Fatalf("site 2 shows y=%q before its dependency x", value)
	}
	if len(n.Held) == 0 {
		t.Fatal("no shipment of volume 0 was held")
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	if value, _ := n.Object(2, x); value != "x1" {
		t.Fatalf("site 2 holds x=%q, want x1", value)
	}
	if value, _ := n.Object(2, y); value != "y1" {
		t.Fatalf("site 2 holds y=%q, want y1 once x is stable there", value)
	}
}

// Shipping resumes without loss or duplicate when the shipper changes:
// site 1's tail of volume 0 fails with shipments in flight (dropped), its
// predecessor becomes tail and ships from its own durable log.
func TestGeoShippingResumesAfterTheTailChanges(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	for i := range uint64(5) {
		n.Put(1, 7, i+1, key, fmt.Sprint("v", i), nil, 0)
	}
	n.Settle()
	if len(n.Held) == 0 {
		t.Fatal("no shipment held")
	}
	n.Held = nil // lost with the link
	n.Hold = func(chaintest.Msg) bool { return false }
	// a2, the tail of volume 0 at site 1, fails: a1 is the chain.
	n.Configs[1][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a1"}, Mode: wire.ModeCausal, K: 1, Sites: []wire.SiteID{1, 2}}
	delete(n.Servers, "a2")
	n.Configs[1][1] = wire.Config{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a1"}, Mode: wire.ModeCausal, K: 1, Sites: []wire.SiteID{1, 2}}
	n.Settle()
	if value, _ := n.Object(2, key); value != "v4" {
		t.Fatalf("site 2 holds %q, want v4", value)
	}
	if v := n.Vector(2, 0); v.Get(1) != 5 {
		t.Fatalf("site 2's vector %v, want 5 updates of site 1 (no loss, no duplicate)", v)
	}
}

// A dependency on a key of a keyspace the receiving site does not
// replicate from the origin names nothing a reader there can see: the
// update is applied without waiting for it (it would wait forever).
func TestGeoDependencyOutsideTheSitesKeyspacesIsMet(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v", []wire.Dep{{Key: "here/x", Origin: 1, N: 5}}, 0)
	n.Settle()
	if value, _ := n.Object(2, key); value != "v" {
		t.Fatalf("site 2 holds %q, want v", value)
	}
}

// The receiving head changes while the old one stays up: site 2 removes
// b1 from volume 0's chain (b2 heads it now) and b1 drops its replica, so
// it answers a shipment with ErrNotHead and no configuration. Site 1's
// tail, which knew b1 as the head, must ask site 2's masters again
// rather than send to b1 forever.
func TestGeoShippingFindsANewReceivingHead(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "first", nil, 0)
	n.Settle()
	if value, _ := n.Object(2, key); value != "first" {
		t.Fatalf("site 2 holds %q before the change, want first", value)
	}
	n.Configs[2][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"b2"}, Mode: wire.ModeCausal, K: 1, Sites: []wire.SiteID{1, 2}}
	n.Settle()
	if n.Servers["b1"].Replica(0) != nil {
		t.Fatal("b1 still holds volume 0 after leaving its chain")
	}
	n.Put(1, 7, 2, key, "second", nil, 0)
	for range 10 { // 4 s: well past ShipRetryInterval
		n.Settle()
	}
	if value, _ := n.Object(2, key); value != "second" {
		t.Fatalf("site 2 holds %q, want second: shipping did not find the new head", value)
	}
}

// Bad input on a geo write gets a clear error and changes nothing: a
// dependency numbered 0, too many dependencies, a timestamp near the
// clock's limit.
func TestGeoRefusesBadDependenciesAndTimestamps(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	v, _ := placement.Route(n.Keyspaces, key)
	head := n.Configs[1][v].Head()
	for i, tc := range []struct {
		deps []wire.Dep
		ts   uint64
	}{
		{deps: []wire.Dep{{Key: key, Origin: 1, N: 0}}},
		{deps: make([]wire.Dep, chain.DefaultLimits.DepsMax+1)},
		{ts: 1 << 62},
	} {
		n.Replies = nil
		n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: head, Msg: &wire.ClientRequest{
			Volume: v, Epoch: 1, Client: 9, ReqNo: uint64(i + 1), AckedBelow: uint64(i + 1), Keyspaces: uint32(len(n.Keyspaces)),
			Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("x")}, Deps: tc.deps, TS: tc.ts,
		}})
		n.Run()
		if len(n.Replies) != 1 || n.Replies[0].Err != wire.ErrBadRequest {
			t.Fatalf("case %d: replies %+v, want one ErrBadRequest", i, n.Replies)
		}
	}
	if value, _ := n.Object(1, key); value != "" {
		t.Fatalf("a refused write changed %s to %q", key, value)
	}
	if v := n.Vector(1, v); len(v) != 0 {
		t.Fatalf("refused writes counted: vector %v", v)
	}
}

// A receiving head whose queue is full says so (ErrTooManyInFlight) and
// the shipper sends the rest again after a short pause, not after
// ShipRetryInterval (1 s): with a queue of 4, 30 updates arrive within
// 1.2 s (waiting for ShipRetryInterval each time the queue filled, 5).
func TestGeoShippingGoesOnWhenTheReceiverQueueIsFull(t *testing.T) {
	limits := chain.DefaultLimits
	limits.InboundMax = 4
	n := newSites(t, chaintest.SitesOptions{K: 1, Limits: limits})
	x, y := n.KeyIn(0), n.KeyIn(1)
	rx := n.Put(1, 7, 1, x, "x", nil, 0)
	for i := range uint64(30) {
		n.Put(1, 7, i+2, y, fmt.Sprint("y", i), []wire.Dep{{Key: x, Origin: 1, N: rx.Result.Stamp.N}}, rx.Result.Stamp.TS)
	}
	for range 3 { // 3 × 400 ms of simulated time
		n.Settle()
	}
	if value, _ := n.Object(2, y); value != "y29" {
		t.Fatalf("site 2 holds %s=%q, want y29", y, value)
	}
}

// Sites of two deployments (their masters' Settings.Cluster differ)
// exchange nothing: a master's answer of the other deployment is ignored,
// a shipment from it is refused with ErrWrongCluster and nothing is
// applied, and each refusal is recorded for the log. Sites of one named
// deployment replicate as usual.
func TestGeoRefusesAnotherDeployment(t *testing.T) {
	same := newSites(t, chaintest.SitesOptions{K: 1, Clusters: map[wire.SiteID]string{1: "prod", 2: "prod"}})
	key := same.KeyIn(0)
	same.Put(1, 7, 1, key, "v", nil, 0)
	same.Settle()
	if value, _ := same.Object(2, key); value != "v" {
		t.Fatalf("one deployment: site 2 holds %q, want %q", value, "v")
	}

	n := newSites(t, chaintest.SitesOptions{K: 1, Clusters: map[wire.SiteID]string{1: "prod", 2: "staging"}})
	n.Put(1, 7, 1, key, "v", nil, 0)
	n.Settle()
	if value, _ := n.Object(2, key); value != "" || len(n.Vector(2, 0)) != 0 {
		t.Fatalf("site 2 of another deployment holds %q, vector %v", value, n.Vector(2, 0))
	}
	refusals := func(site wire.SiteID) string {
		var all []string
		for _, id := range slices.Sorted(maps.Keys(n.Servers)) {
			if n.SiteOf(id) == site {
				all = append(all, n.Servers[id].Refusals()...)
			}
		}
		return strings.Join(all, "\n")
	}
	if got := refusals(1); !strings.Contains(got, `a master of site 2 of deployment "staging": this is "prod"`) {
		t.Errorf("site 1's refusals: %q", got)
	}

	// A shipment that gets there anyway (a head's address known) is
	// refused, and the refusal reaches the shipper.
	tail := n.Configs[1][0].Tail()
	batch := n.Servers[tail].Replica(0).Store().ShipLog(1, 1, 10)
	if len(batch) != 1 {
		t.Fatalf("site 1's shipping log holds %d updates, want the 1 site 2 never acknowledged", len(batch))
	}
	head := n.Configs[2][0].Head()
	out := n.Servers[head].Step(n.Now, tail, &wire.Ship{Volume: 0, Origin: 1, OriginVolume: 0, Updates: batch, Cluster: "prod", Sender: 1})
	if len(out) != 1 || out[0].To != tail {
		t.Fatalf("Ship of another deployment answered %v", out)
	}
	ack, ok := out[0].Msg.(*wire.ShipAck)
	if !ok || ack.Err != wire.ErrWrongCluster {
		t.Fatalf("Ship of another deployment answered %v, want ShipAck %v", out[0].Msg, wire.ErrWrongCluster)
	}
	n.Settle()
	if value, _ := n.Object(2, key); value != "" || len(n.Vector(2, 0)) != 0 {
		t.Fatalf("site 2 applied a shipment of another deployment: %q, vector %v", value, n.Vector(2, 0))
	}
	if got := refusals(2); !strings.Contains(got, `refused 1 updates shipped by `+string(tail)+`, site 1 of deployment "prod": this is "staging"`) {
		t.Errorf("site 2's refusals: %q", got)
	}
	if out := n.Servers[tail].Step(n.Now, head, ack); len(out) != 0 {
		t.Fatalf("the refusal's ShipAck produced %v", out)
	}
	if got := refusals(1); !strings.Contains(got, "refused this site's shipment of volume 0") {
		t.Errorf("site 1's refusals after the ShipAck: %q", got)
	}
	if log := n.Servers[tail].Replica(0).Store().ShipLog(1, 1, 10); len(log) != 1 {
		t.Errorf("the refusal trimmed site 1's shipping log to %d updates", len(log))
	}
}

// A write durable across sites: the origin's tail answers OpWaitShipped
// for it only once the other site holds it stable, and refuses a wait it
// cannot answer (too many sites, another site's update, no stamp).
func TestGeoWaitShippedAnswersOnceTheOtherSiteHoldsIt(t *testing.T) {
	n := newCausalSites(t)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	key := n.KeyIn(0)
	st := n.Put(1, 7, 1, key, "durable", nil, 0).Result.Stamp
	tail := n.Configs[1][0].Tail()
	wait := func(reqNo uint64, dep wire.Dep, sites int64) {
		n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: tail, Msg: &wire.ClientRequest{
			Volume: 0, Epoch: 1, Client: 8, ReqNo: reqNo, Keyspaces: uint32(len(n.Keyspaces)),
			Op: wire.Op{Kind: wire.OpWaitShipped, Key: key, Delta: sites}, Deps: []wire.Dep{dep},
		}})
		n.Run()
	}
	answer := func(reqNo uint64) *wire.ClientReply {
		for _, r := range n.Replies {
			if r.Client == 8 && r.ReqNo == reqNo {
				return r
			}
		}
		return nil
	}
	n.Replies = nil
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

	n.Settle() // stable at site 1, held on its way to site 2
	wait(1, wire.Dep{Key: key, Origin: 1, N: st.N}, 2)
	n.Settle()
	if r := answer(1); r != nil {
		t.Fatalf("answered %+v while site 2 has not received the update", r)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	if r := answer(1); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("after shipping: answer %+v, want one without error", r)
	}
	if value, _ := n.Object(2, key); value != "durable" {
		t.Fatalf("site 2 holds %q", value)
	}
}

// A write durable across sites hears in about one round trip: the other
// site's head tells the origin's tail, unasked, once it holds the update
// stable, instead of the tail asking again a quarter of
// ShipRetryInterval later (issue 32: put -sites 3 took 509–539 ms at a
// 120 ms round trip).
func TestGeoWaitShippedAnsweredWhenTheOtherSiteHoldsItStable(t *testing.T) {
	n := newCausalSites(t)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	key := n.KeyIn(0)
	st := n.Put(1, 7, 1, key, "durable", nil, 0).Result.Stamp
	n.Settle() // stable at site 1, held on its way to site 2
	tail := n.Configs[1][0].Tail()
	n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: tail, Msg: &wire.ClientRequest{
		Volume: 0, Epoch: 1, Client: 8, ReqNo: 1, Keyspaces: uint32(len(n.Keyspaces)),
		Op: wire.Op{Kind: wire.OpWaitShipped, Key: key, Delta: 2}, Deps: []wire.Dep{{Key: key, Origin: 1, N: st.N}},
	}})
	n.Run()
	n.Replies = nil
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	for ticks := 1; n.Reply(8, 1) == nil; ticks++ {
		if ticks > 3 {
			t.Fatalf("no answer %d ms after the shipment arrived; want one once site 2's chain holds it", 20*ticks)
		}
		n.Tick()
	}
	if r := n.Reply(8, 1); r.Err != wire.ErrNone {
		t.Fatalf("answer %+v, want one without error", r)
	}
}

// Another site's update does not wait in the lazy phase: the receiving
// head forwards it at once (causal.Mode.Urgent), so it is stable at the
// receiving site, and the updates that depend on it may go on, without
// waiting for the servers to idle. The site's own updates still wait
// there (k = 1: every member of the chain of two forwards lazily).
func TestGeoRemoteUpdatePassesTheLazyPhase(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	r := n.Put(1, 7, 1, key, "from-a", nil, 0)
	n.Settle() // site 1's tail ships it: held
	if len(n.Held) == 0 {
		t.Fatal("site 1 shipped nothing")
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Run() // deliveries only: no server idles or ticks
	if v := n.Vector(2, 0); v.Get(1) != r.Result.Stamp.N {
		t.Fatalf("site 2's tail holds %v of site 1's updates before any idle, want %d", v, r.Result.Stamp.N)
	}

	local := n.Put(2, 8, 1, key, "from-b", nil, 0)
	if v := n.Vector(2, 0); v.Get(2) != 0 {
		t.Fatalf("site 2's tail holds its own update %v before any idle (vector %v): the lazy phase did not hold it", local.Result.Stamp, v)
	}
	n.Settle()
	if v := n.Vector(2, 0); v.Get(2) != 1 {
		t.Fatalf("site 2's tail holds %v once idle, want its own update", v)
	}
}

// A remote update computed from the key's previous version at its origin
// (a read-modify-write: it depends on that version) does not wait for
// that version to be stable at the receiving site: the version is before
// it in the same queue and chain (ADR 24). A dependency on another key of
// the same volume still waits. Site 2's chain of volume 0 holds its
// forwards, so nothing becomes stable there.
func TestGeoSameKeyDependencyNeedsNoWait(t *testing.T) {
	n := newCausalSites(t)
	x := n.KeyIn(0)
	y := n.KeyIn(0, x)
	r1 := n.Put(1, 7, 1, x, "x1", nil, 0)
	r2 := n.Put(1, 7, 2, x, "x2", []wire.Dep{{Key: x, Origin: 1, N: r1.Result.Stamp.N}}, r1.Result.Stamp.TS)
	n.Put(1, 7, 3, y, "y1", []wire.Dep{{Key: x, Origin: 1, N: r2.Result.Stamp.N}}, r2.Result.Stamp.TS)
	head := n.Configs[2][0].Head()
	n.HoldIn = func(m chaintest.Msg) bool {
		f, ok := m.Msg.(*wire.Forward)
		return ok && m.From == head && f.Volume == 0
	}
	n.Settle()
	store := n.Servers[head].Replica(0).Store()
	if got := string(store.Get(x).Value); got != "x2" {
		t.Fatalf("site 2's head holds x=%q, want x2 without waiting for x1 to be stable there", got)
	}
	if got := store.Get(y); got.Exists {
		t.Fatalf("site 2's head holds y=%q before x2, which it depends on, is stable there", got.Value)
	}
	n.HoldIn = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	if value, _ := n.Object(2, y); value != "y1" {
		t.Fatalf("site 2 holds y=%q, want y1 once x2 is stable there", value)
	}
}

// The writer of an update answered before it is stable hears from the
// tail, unasked, once it is (docs/adr/0025): the answer again, stable,
// so its next update need not ask. With k = 1 of a chain of two the
// head answers, the tail notices.
func TestGeoTailSendsTheWriterAStableNotice(t *testing.T) {
	n := newCausalSites(t)
	key := n.KeyIn(0)
	cfg := n.Configs[1][0]
	n.HoldIn = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Forward); return ok }
	r := n.Put(1, 7, 1, key, "v", nil, 0)
	if r.Stable || len(n.Replies) != 1 {
		t.Fatalf("answers before the tail has the update: %+v; want one, unstable", n.Replies)
	}
	n.HoldIn = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	n.Settle()
	var notices []*wire.ClientReply
	for _, m := range n.Replies {
		if m.ReqNo == 1 && m.Stable {
			notices = append(notices, m)
		}
	}
	if len(notices) != 1 || notices[0].Result.SN != r.Result.SN || notices[0].Position != len(cfg.Chain)-1 || notices[0].Result.Stamp != r.Result.Stamp {
		t.Fatalf("stable answers once the tail has the update: %+v; want one from the tail of SN %d, stamp %v", notices, r.Result.SN, r.Result.Stamp)
	}
}
