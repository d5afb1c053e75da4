package chain

import (
	"testing"

	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// The head of a hierarchical volume runs the volume's control machine
// (hierarchical.go, docs/adr/0016); these scenarios use newStrongGeoNet's
// two sites, chains a1→a2 and b1→b2 for volume 0.

// get reads key at the tail of its volume at site and returns the answer.
func (n *geoNet) get(site wire.SiteID, client wire.ClientID, key string) *wire.ClientReply {
	n.t.Helper()
	v, _ := placement.Route(n.ks, key)
	n.replies = nil
	n.queue = append(n.queue, geoMsg{"client", n.configs[site][v].Tail(), &wire.ClientRequest{
		Volume: v, Epoch: n.configs[site][v].Epoch, Client: client, ReqNo: 1, Keyspaces: uint32(len(n.ks)),
		Op: wire.Op{Kind: wire.OpGet, Key: key},
	}})
	n.run()
	if len(n.replies) != 1 {
		n.t.Fatalf("get %s at site %d: %d answers", key, site, len(n.replies))
	}
	return n.replies[0]
}

// votes returns the vote for path each member of site's chain of
// volume v holds (its copy of the site's control state).
func (n *geoNet) votes(site wire.SiteID, v wire.VolumeID, path string) map[wire.NodeID]control.Vote {
	out := map[wire.NodeID]control.Vote{}
	for _, id := range n.configs[site][v].Chain {
		if vote, ok := n.servers[id].Replica(v).hier.state.Votes[path]; ok {
			out[id] = vote
		}
	}
	return out
}

// A first write elects its site primary: both sites' chains hold their
// site's vote for it (every member: the records are updates of the
// chain); the other site reads the key at the primary's tail, not from
// its own copy, while the primary controls it (here its copy lacks the
// write, whose shipment is held); the primary releases control only once
// the write is shipped and it has been idle; then the votes are gone and
// the other site reads its own copy.
func TestHierarchicalVotesTravelDownTheChains(t *testing.T) {
	n := newRelaxedGeoNet(t)
	key := n.keyIn(0)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	n.put(1, 7, 1, key, "v1", nil, 0)
	for _, site := range []wire.SiteID{1, 2} {
		votes := n.votes(site, 0, key)
		if len(votes) != 2 {
			t.Fatalf("site %d's members hold votes %v, want both members' for site 1", site, votes)
		}
		for id, v := range votes {
			if v.Holder != 1 || v.Ballot.Site != 1 {
				t.Errorf("site %d: %s holds a vote %+v, want site 1's election", site, id, v)
			}
		}
	}
	if r := n.get(2, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" || r.Volume != 0 {
		t.Fatalf("site 2's read of a key site 1 controls: %+v, want v1 from site 1's tail", r)
	}
	if value, _ := n.object(2, key); value != "" {
		t.Fatalf("site 2's copy holds %q with the shipment held", value)
	}
	if r := n.get(1, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
		t.Fatalf("site 1's read: %v %q", r.Err, r.Result.Value)
	}
	for range 60 {
		n.tick() // 1.2 s: past the idle time, but the write is not shipped
	}
	if votes := n.votes(2, 0, key); len(votes) != 2 {
		t.Fatalf("site 1 released control before site 2 held its write: site 2's votes %v", votes)
	}
	n.hold = func(geoMsg) bool { return false }
	n.release(func(geoMsg) bool { return true })
	for range 20 {
		n.tick()
	}
	for _, site := range []wire.SiteID{1, 2} {
		if votes := n.votes(site, 0, key); len(votes) != 0 {
			t.Errorf("site %d's members still hold votes %v after the release", site, votes)
		}
	}
	if r := n.get(2, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
		t.Fatalf("site 2's read after the release: %v %q, want v1", r.Err, r.Result.Value)
	}
}

// A site's vote leaves only once its chain holds it: while site 2's
// chain holds its forwards, site 2's head answers site 1's proposal with
// nothing, and site 1's write waits; it is answered once site 2's tail
// has the vote.
func TestHierarchicalVoteLeavesOnlyOnceTheChainHoldsIt(t *testing.T) {
	n := newStrongGeoNet(t)
	key := n.keyIn(0)
	n.holdIn = func(m geoMsg) bool { _, ok := m.msg.(*wire.Forward); return ok && n.site[m.from] == 2 }
	if r := n.tryPutFor(1, 7, 1, key, "v1", 60); r != nil {
		t.Fatalf("site 1's write answered (%v) while site 2's vote is not on its tail", r.Err)
	}
	if votes := n.votes(2, 0, key); len(votes) != 1 {
		t.Fatalf("site 2's members hold votes %v: want its head's only", votes)
	}
	n.holdIn = func(geoMsg) bool { return false }
	n.release(func(geoMsg) bool { return true })
	for range 10 {
		if r := n.reply(7, 1); r != nil {
			if r.Err != wire.ErrNone {
				t.Fatalf("site 1's write: %v", r.Err)
			}
			return
		}
		n.tick()
	}
	t.Fatal("site 1's write not answered once site 2's chain holds its vote")
}

// A new head takes control over: site 1's head fails while site 1
// controls a key; the other member, now the head, restores the machine
// from its copy of the records and serves the next write without a new
// ballot (site 2's vote still names site 1's election).
func TestHierarchicalNewHeadKeepsTheSitesControl(t *testing.T) {
	n := newStrongGeoNet(t)
	key := n.keyIn(0)
	n.put(1, 7, 1, key, "v1", nil, 0)
	before := n.votes(2, 0, key)["b1"]
	n.configs[1][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a2"}, Sites: []wire.SiteID{1, 2}}
	n.configs[1][1] = wire.Config{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a2"}, Sites: []wire.SiteID{1, 2}}
	delete(n.servers, "a1")
	n.tick()
	n.put(1, 7, 2, key, "v2", nil, 0)
	if after := n.votes(2, 0, key)["b1"]; after != before {
		t.Fatalf("site 2's vote was %+v, is %+v: a new election", before, after)
	}
	if v := n.servers["a2"].Replica(0).hier.machine; v == nil || !v.Holds()[key] {
		t.Fatalf("a2, the new head, does not hold the key's control")
	}
}

// A client cannot name the reserved keys the records live under.
func TestHierarchicalRecordKeysAreNotClients(t *testing.T) {
	n := newStrongGeoNet(t)
	key := n.keyIn(0)
	n.put(1, 7, 1, key, "v1", nil, 0)
	recKey, _ := control.Record{Kind: control.RecordVote, Path: key}.Object()
	n.replies = nil
	n.queue = append(n.queue, geoMsg{"client", "a1", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 9, ReqNo: 1,
		Op: wire.Op{Kind: wire.OpDelete, Key: recKey}}})
	n.run()
	if len(n.replies) != 1 || n.replies[0].Err != wire.ErrBadRequest {
		t.Fatalf("a client's delete of %q: %+v", recKey, n.replies)
	}
	if len(n.votes(1, 0, key)) != 2 {
		t.Fatal("the vote is gone")
	}
}

// A write at a site that does not control its key is forwarded to the
// primary's head, runs there, and is answered by the site the client
// asked; it reaches the client's site with the shipping. Its session
// travels with it: asked again once control came to the client's site,
// it is answered from the outcome, not run twice.
func TestHierarchicalWriteIsForwardedToThePrimaryOnce(t *testing.T) {
	n := newStrongGeoNet(t)
	key := n.keyIn(0)
	counter := n.keyIn(0, key)
	n.put(1, 7, 1, key, "v1", nil, 0)
	incr := func(reqNo uint64) *wire.ClientReply {
		n.replies = nil
		n.queue = append(n.queue, geoMsg{"client", "b1", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 8, ReqNo: reqNo, AckedBelow: 1,
			ExpectSession: reqNo > 1, Keyspaces: uint32(len(n.ks)), Op: wire.Op{Kind: wire.OpIncrement, Key: counter, Delta: 5}}})
		n.run()
		for range 20 {
			if r := n.reply(8, reqNo); r != nil {
				return r
			}
			n.tick()
		}
		t.Fatalf("increment %d: no answer", reqNo)
		return nil
	}
	// Site 1 controls the counter: write it there first.
	n.queue = append(n.queue, geoMsg{"client", "a1", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 7, ReqNo: 2, AckedBelow: 2, ExpectSession: true,
		Keyspaces: uint32(len(n.ks)), Op: wire.Op{Kind: wire.OpIncrement, Key: counter, Delta: 1}}})
	n.run()
	if r := n.reply(7, 2); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 1's increment: %+v", r)
	}
	r := incr(1)
	if r.Err != wire.ErrNone || r.Volume != 0 || string(r.Result.Value) != "6" {
		t.Fatalf("site 2's increment, forwarded: %+v", r)
	}
	if o := n.servers["a2"].Replica(0).store.Get(counter); string(o.Value) != "6" {
		t.Fatalf("site 1's tail holds %q", o.Value)
	}
	for range 60 {
		n.tick() // past the idle time: site 1 releases, site 2 holds the increment and its session
	}
	if r := incr(1); r.Err != wire.ErrNone || string(r.Result.Value) != "6" {
		t.Fatalf("site 2's increment asked again: %+v, want the outcome 6 again", r)
	}
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.object(site, counter); value != "6" {
			t.Errorf("site %d holds %q, want 6 (one increment of 5)", site, value)
		}
	}
	// The next request runs at site 2, which now may control the key.
	if r := incr(2); r.Err != wire.ErrNone || string(r.Result.Value) != "11" {
		t.Fatalf("site 2's next increment: %+v", r)
	}
}

// Durable mode answers a write once a majority of the sites (here both)
// hold it: not while its shipment is held, at once when it arrives (the
// receiving head tells the shipper as soon as the write is stable there).
// A client asking again meanwhile is not answered from the outcome
// either.
func TestHierarchicalDurableWriteWaitsForAMajorityOfSites(t *testing.T) {
	n := newStrongGeoNet(t)
	key := n.keyIn(0)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	if r := n.tryPutFor(1, 7, 1, key, "v1", 30); r != nil {
		t.Fatalf("answered (%+v) while site 2 does not hold the write", r)
	}
	if o := n.servers["a2"].Replica(0).store.Get(key); string(o.Value) != "v1" {
		t.Fatalf("site 1's tail holds %q", o.Value)
	}
	if r := n.tryPutFor(1, 7, 1, key, "v1", 1); r == nil || r.Err != wire.ErrUnavailable {
		t.Fatalf("asked again: %+v, want unavailable until site 2 holds it", r)
	}
	n.hold = func(geoMsg) bool { return false }
	n.replies = nil
	n.release(func(geoMsg) bool { return true })
	r := n.reply(7, 1)
	if r == nil || r.Err != wire.ErrNone || !r.Stable {
		t.Fatalf("once site 2 holds it: %+v", r)
	}
}

// Relaxed mode (the paper's) answers once the primary's chain holds the
// write, shipped or not.
func TestHierarchicalRelaxedWriteIsAnsweredAtItsSite(t *testing.T) {
	n := newRelaxedGeoNet(t)
	key := n.keyIn(0)
	n.hold = func(m geoMsg) bool { _, ok := m.msg.(*wire.Ship); return ok }
	if r := n.tryPutFor(1, 7, 1, key, "v1", 30); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("relaxed write: %+v", r)
	}
}
