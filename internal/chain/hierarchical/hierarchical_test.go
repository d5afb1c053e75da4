package hierarchical

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/mutation/mutationtest"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/chaintest"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// The head of a hierarchical volume runs the volume's control machine
// (hierarchical.go, docs/adr/0016); these scenarios use chaintest.Sites:
// two sites (or three), chains a1→a2 and b1→b2 for volume 0.

// modes makes this package's Mode for the sites' hierarchical volumes
// (internal/chain/modes, which imports this package, cannot be used
// here).
var modes = chaintest.ModesOf(wire.ModeHierarchical, func(core *chain.Core, _ wire.Config) chain.Mode { return New(core) })

// newSites builds nsites sites whose replicated keyspace is
// hierarchical, durable unless relaxed, their servers running with
// mutations.
func newSites(t *testing.T, nsites int, relaxed bool, mutations chain.Mutations) *chaintest.Sites {
	return chaintest.NewSites(t, chaintest.SitesOptions{Modes: modes, Relaxed: relaxed, Sites: nsites, Mutations: mutations})
}

// modeOf returns the hierarchical mode of replica r.
func modeOf(r *chain.Replica) *Mode { return r.Mode().(*Mode) }

// siteVotes returns the vote for path each member of site's chain of
// volume v holds (its copy of the site's control state).
func siteVotes(n *chaintest.Sites, site wire.SiteID, v wire.VolumeID, path string) map[wire.NodeID]control.Vote {
	out := map[wire.NodeID]control.Vote{}
	for _, id := range n.Configs[site][v].Chain {
		if vote, ok := modeOf(n.Servers[id].Replica(v)).state.Votes[path]; ok {
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
	n := newSites(t, 2, true, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	n.Put(1, 7, 1, key, "v1", nil, 0)
	for _, site := range []wire.SiteID{1, 2} {
		votes := siteVotes(n, site, 0, key)
		if len(votes) != 2 {
			t.Fatalf("site %d's members hold votes %v, want both members' for site 1", site, votes)
		}
		for id, v := range votes {
			if v.Holder != 1 || v.Ballot.Site != 1 {
				t.Errorf("site %d: %s holds a vote %+v, want site 1's election", site, id, v)
			}
		}
	}
	if r := n.Get(2, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" || r.Volume != 0 {
		t.Fatalf("site 2's read of a key site 1 controls: %+v, want v1 from site 1's tail", r)
	}
	if value, _ := n.Object(2, key); value != "" {
		t.Fatalf("site 2's copy holds %q with the shipment held", value)
	}
	if r := n.Get(1, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
		t.Fatalf("site 1's read: %v %q", r.Err, r.Result.Value)
	}
	for range 60 {
		n.Tick() // 1.2 s: past the idle time, but the write is not shipped
	}
	if votes := siteVotes(n, 2, 0, key); len(votes) != 2 {
		t.Fatalf("site 1 released control before site 2 held its write: site 2's votes %v", votes)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	for range 20 {
		n.Tick()
	}
	for _, site := range []wire.SiteID{1, 2} {
		if votes := siteVotes(n, site, 0, key); len(votes) != 0 {
			t.Errorf("site %d's members still hold votes %v after the release", site, votes)
		}
	}
	if r := n.Get(2, 8, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
		t.Fatalf("site 2's read after the release: %v %q, want v1", r.Err, r.Result.Value)
	}
}

// A site's vote leaves only once its chain holds it: while site 2's
// chain holds its forwards, site 2's head answers site 1's proposal with
// nothing, and site 1's write waits; it is answered once site 2's tail
// has the vote.
func TestHierarchicalVoteLeavesOnlyOnceTheChainHoldsIt(t *testing.T) {
	n := newSites(t, 2, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.HoldIn = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Forward); return ok && n.SiteOf(m.From) == 2 }
	if r := n.TryPutFor(1, 7, 1, key, "v1", 60); r != nil {
		t.Fatalf("site 1's write answered (%v) while site 2's vote is not on its tail", r.Err)
	}
	if votes := siteVotes(n, 2, 0, key); len(votes) != 1 {
		t.Fatalf("site 2's members hold votes %v: want its head's only", votes)
	}
	n.HoldIn = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	for range 10 {
		if r := n.Reply(7, 1); r != nil {
			if r.Err != wire.ErrNone {
				t.Fatalf("site 1's write: %v", r.Err)
			}
			return
		}
		n.Tick()
	}
	t.Fatal("site 1's write not answered once site 2's chain holds its vote")
}

// A new head takes control over: site 1's head fails while site 1
// controls a key; the other member, now the head, restores the machine
// from its copy of the records and serves the next write without a new
// ballot (site 2's vote still names site 1's election).
func TestHierarchicalNewHeadKeepsTheSitesControl(t *testing.T) {
	n := newSites(t, 2, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	before := siteVotes(n, 2, 0, key)["b1"]
	n.Configs[1][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a2"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2}}
	n.Configs[1][1] = wire.Config{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a2"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2}}
	delete(n.Servers, "a1")
	n.Tick()
	n.Put(1, 7, 2, key, "v2", nil, 0)
	if after := siteVotes(n, 2, 0, key)["b1"]; after != before {
		t.Fatalf("site 2's vote was %+v, is %+v: a new election", before, after)
	}
	if v := modeOf(n.Servers["a2"].Replica(0)).machine; v == nil || !v.Holds()[key] {
		t.Fatalf("a2, the new head, does not hold the key's control")
	}
}

// A client cannot name the reserved keys the records live under.
func TestHierarchicalRecordKeysAreNotClients(t *testing.T) {
	n := newSites(t, 2, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	recKey, _ := control.Record{Kind: control.RecordVote, Path: key}.Object()
	n.Replies = nil
	n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: "a1", Msg: &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 9, ReqNo: 1,
		Op: wire.Op{Kind: wire.OpDelete, Key: recKey}}})
	n.Run()
	if len(n.Replies) != 1 || n.Replies[0].Err != wire.ErrBadRequest {
		t.Fatalf("a client's delete of %q: %+v", recKey, n.Replies)
	}
	if len(siteVotes(n, 1, 0, key)) != 2 {
		t.Fatal("the vote is gone")
	}
}

// A write at a site that does not control its key is forwarded to the
// primary's head, runs there, and is answered by the site the client
// asked; it reaches the client's site with the shipping. Its session
// travels with it: asked again once control came to the client's site,
// it is answered from the outcome, not run twice.
func TestHierarchicalWriteIsForwardedToThePrimaryOnce(t *testing.T) {
	n := newSites(t, 2, false, chain.Mutations{})
	key := n.KeyIn(0)
	counter := n.KeyIn(0, key)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	incr := func(reqNo uint64) *wire.ClientReply {
		n.Replies = nil
		n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: "b1", Msg: &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 8, ReqNo: reqNo, AckedBelow: 1,
			ExpectSession: reqNo > 1, Keyspaces: uint32(len(n.Keyspaces)), Op: wire.Op{Kind: wire.OpIncrement, Key: counter, Delta: 5}}})
		n.Run()
		for range 20 {
			if r := n.Reply(8, reqNo); r != nil {
				return r
			}
			n.Tick()
		}
		t.Fatalf("increment %d: no answer", reqNo)
		return nil
	}
	// Site 1 controls the counter: write it there first.
	n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: "a1", Msg: &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 7, ReqNo: 2, AckedBelow: 2, ExpectSession: true,
		Keyspaces: uint32(len(n.Keyspaces)), Op: wire.Op{Kind: wire.OpIncrement, Key: counter, Delta: 1}}})
	n.Run()
	if r := n.Reply(7, 2); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 1's increment: %+v", r)
	}
	r := incr(1)
	if r.Err != wire.ErrNone || r.Volume != 0 || string(r.Result.Value) != "6" {
		t.Fatalf("site 2's increment, forwarded: %+v", r)
	}
	if o := n.Servers["a2"].Replica(0).Store().Get(counter); string(o.Value) != "6" {
		t.Fatalf("site 1's tail holds %q", o.Value)
	}
	for range 60 {
		n.Tick() // past the idle time: site 1 releases, site 2 holds the increment and its session
	}
	if r := incr(1); r.Err != wire.ErrNone || string(r.Result.Value) != "6" {
		t.Fatalf("site 2's increment asked again: %+v, want the outcome 6 again", r)
	}
	for _, site := range []wire.SiteID{1, 2} {
		if value, _ := n.Object(site, counter); value != "6" {
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
	n := newSites(t, 2, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	if r := n.TryPutFor(1, 7, 1, key, "v1", 30); r != nil {
		t.Fatalf("answered (%+v) while site 2 does not hold the write", r)
	}
	if o := n.Servers["a2"].Replica(0).Store().Get(key); string(o.Value) != "v1" {
		t.Fatalf("site 1's tail holds %q", o.Value)
	}
	if r := n.TryPutFor(1, 7, 1, key, "v1", 1); r == nil || r.Err != wire.ErrUnavailable {
		t.Fatalf("asked again: %+v, want unavailable until site 2 holds it", r)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Replies = nil
	n.Release(func(chaintest.Msg) bool { return true })
	r := n.Reply(7, 1)
	if r == nil || r.Err != wire.ErrNone || !r.Stable {
		t.Fatalf("once site 2 holds it: %+v", r)
	}
}

// Relaxed mode (the paper's) answers once the primary's chain holds the
// write, shipped or not.
func TestHierarchicalRelaxedWriteIsAnsweredAtItsSite(t *testing.T) {
	n := newSites(t, 2, true, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	if r := n.TryPutFor(1, 7, 1, key, "v1", 30); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("relaxed write: %+v", r)
	}
}

// hierClient is one client of the random histories: at most one request
// at a time, asked again (same request number) until answered.
type hierClient struct {
	id      wire.ClientID
	site    wire.SiteID
	reqNo   uint64
	pending *check.Operation
	req     *wire.ClientRequest
	sentAt  wire.Time
	// last is the value this client last saw per key (for CAS).
	last map[string][]byte
}

// Random histories across three sites (two clients each, keys under one
// directory of one volume's control domain, writes, compare-and-sets and
// reads, the messages of every link in order but the links interleaved
// at random, the shipping between sites stalling now and then, a site
// cut off from the others now and then, up to two servers failing, a
// head among them) are linearizable per key, in durable and in
// relaxed mode: forwarding, elections, deep control, releases and
// durable answers together keep one copy's semantics.
func TestHierarchicalRandomHistoriesAreLinearizable(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
		// Two sites refusing each other traded proposals without end, at
		// no cost in time, until a round's early end waited for its
		// timer (control.Machine.settle).
		20, 39,
		// Site 3's tail answered a forwarded read with a write a
		// majority did not hold; site 3 was lost, the survivors took
		// its key over without the write (holdRead).
		37,
		// A receiving head reported a relayed origin's stable count as
		// the relayer's own (ShipAck.Origin unset): the relayer trimmed
		// its shipping log too early and shipped into a gap forever.
		120,
		// A returning site restored a key to a copy older than a
		// version it had applied meanwhile (which had lost to its own
		// given-up write): restoreBarrier.
		196}
	if os.Getenv("CATENA_HIER_SEEDS") != "" {
		n, _ := strconv.Atoi(os.Getenv("CATENA_HIER_SEEDS"))
		seeds = nil
		for s := range n {
			seeds = append(seeds, uint64(s+1))
		}
	}
	if testing.Short() {
		seeds = seeds[:3]
	}
	for _, relaxed := range []bool{false, true} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("relaxed=%v/seed=%d", relaxed, seed), func(t *testing.T) {
				if err := runHierarchicalHistory(t, seed, relaxed, chain.Mutations{}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// The random histories catch each deliberate bug of the data path in
// some seed: a tail reading its own copy of a key another site controls,
// a primary releasing control before the other sites hold its writes.
func TestHierarchicalRandomHistoriesCatchMutations(t *testing.T) {
	mutationtest.Require(t)
	if testing.Short() {
		t.Skip("many histories")
	}
	for name, m := range map[string]chain.Mutations{
		"reads local":       {HierarchicalReadsLocal: true},
		"release unshipped": {HierarchicalReleaseUnshipped: true},
		"reads undurable":   {HierarchicalReadsUndurable: true},
	} {
		t.Run(name, func(t *testing.T) {
			for seed := uint64(1); seed <= 40; seed++ {
				for _, relaxed := range []bool{false, true} {
					if err := runHierarchicalHistory(t, seed, relaxed, m); err != nil {
						t.Logf("caught by seed %d (relaxed %v): %.200s", seed, relaxed, err)
						return
					}
				}
			}
			t.Fatal("no history of 40 seeds caught it")
		})
	}
}

// runHierarchicalHistory runs one random history and returns what is
// wrong with it (nil: linearizable).
func runHierarchicalHistory(t *testing.T, seed uint64, relaxed bool, mutations chain.Mutations) error {
	cuts := true
	rng := rand.New(rand.NewPCG(seed, 0x68696572))
	n := newSites(t, 3, relaxed, mutations)
	keys := []string{"d1/x", "d1/y", "d1/z/w"}
	vol, _ := placement.Route(n.Keyspaces, keys[0]) // every key: its first segment places it
	var clients []*hierClient
	for site := wire.SiteID(1); site <= 3; site++ {
		for i := range 2 {
			clients = append(clients, &hierClient{id: wire.ClientID(100*int(site) + i), site: site, last: map[string][]byte{}})
		}
	}
	var history []check.Operation
	send := func(c *hierClient) {
		cfg := n.Configs[c.site][vol]
		to := cfg.Head()
		if c.req.Op.Kind.IsQuery() {
			to = cfg.Tail()
		}
		c.req.Epoch, c.sentAt = cfg.Epoch, n.Now
		req := *c.req
		n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: to, Msg: &req})
	}
	start := func(c *hierClient) {
		key := keys[rng.IntN(len(keys))]
		c.reqNo++
		op := wire.Op{Key: key}
		switch p := rng.IntN(10); {
		case p < 4:
			op.Kind = wire.OpGet
		case p < 8:
			op.Kind, op.Value = wire.OpPut, []byte(fmt.Sprintf("%d.%d", c.id, c.reqNo))
		default:
			op.Kind, op.Value = wire.OpCompareAndSet, []byte(fmt.Sprintf("%d.%d", c.id, c.reqNo))
			if prior, ok := c.last[key]; ok {
				op.Expected = prior
			} else {
				op.ExpectAbsent = true
			}
		}
		c.req = &wire.ClientRequest{Volume: vol, Client: c.id, ReqNo: c.reqNo, AckedBelow: c.reqNo, Keyspaces: uint32(len(n.Keyspaces)), Op: op}
		c.pending = &check.Operation{Client: int(c.id), Op: op, Call: int64(n.Now)}
		send(c)
	}
	answer := func() {
		for _, r := range n.Replies {
			for _, c := range clients {
				if c.pending == nil || r.Client != c.id || r.ReqNo != c.reqNo {
					continue
				}
				switch r.Err {
				case wire.ErrNone:
					c.pending.Return, c.pending.Result = int64(n.Now), r.Result
					if c.pending.Op.Kind == wire.OpGet && r.Result.Found || c.pending.Op.Kind == wire.OpCompareAndSet && r.Result.Status != wire.StatusOK {
						c.last[c.pending.Op.Key] = r.Result.Value
					} else if !c.pending.Op.Kind.IsQuery() && r.Result.Status == wire.StatusOK {
						c.last[c.pending.Op.Key] = c.pending.Op.Value
					}
					history = append(history, *c.pending)
					c.pending, c.req = nil, nil
				case wire.ErrUnavailable, wire.ErrNotHead, wire.ErrNotTail, wire.ErrWrongEpoch:
					// asked again below, after a while
				default:
					t.Fatalf("client %d: %v for %+v", c.id, r.Err, c.req)
				}
			}
		}
		n.Replies = nil
	}
	shipsHeld, failed := false, 0
	var cutSite wire.SiteID // a site cut off from the others for a while (0: none)
	n.Hold = func(m chaintest.Msg) bool {
		if _, ship := m.Msg.(*wire.Ship); ship && shipsHeld {
			return true
		}
		return cutSite != 0 && (n.SiteOf(m.From) == cutSite) != (n.SiteOf(m.To) == cutSite)
	}
	const steps = 12000
	for step := 0; step < steps || slices.ContainsFunc(clients, func(c *hierClient) bool { return c.pending != nil }); step++ {
		if step > 4*steps {
			break // what is still pending is unknown
		}
		if step < steps && rng.IntN(8) == 0 {
			if c := clients[rng.IntN(len(clients))]; c.pending == nil {
				start(c)
			}
		}
		if !n.DeliverSome(rng) || rng.IntN(40) == 0 {
			n.Now += 20 * wire.Millisecond
			for _, id := range slices.Sorted(maps.Keys(n.Servers)) {
				for _, e := range append(n.Servers[id].Tick(n.Now), n.Servers[id].Idle(n.Now)...) {
					n.Queue = append(n.Queue, chaintest.Msg{From: id, To: e.To, Msg: e.Msg})
				}
			}
			n.Heartbeats()
			if rng.IntN(60) == 0 {
				// The WAN's shipping stalls for a while, or resumes:
				// releases must wait for it.
				if shipsHeld = !shipsHeld; !shipsHeld {
					n.Release(func(chaintest.Msg) bool { return true })
				}
			}
			if cuts && rng.IntN(200) == 0 {
				if cutSite == 0 {
					cutSite = wire.SiteID(1 + rng.IntN(3))
				} else {
					cutSite = 0
					n.Release(func(chaintest.Msg) bool { return true })
				}
			}
			if failed < 2 && rng.IntN(300) == 0 {
				// A server fails: its site's chains go on without it
				// (the head's successor restores the control machine
				// from its copy of the records, forwarded requests in
				// flight are asked again). Its messages are lost.
				site := wire.SiteID(1 + rng.IntN(3))
				if chain := n.Configs[site][0].Chain; len(chain) == 2 {
					gone := chain[rng.IntN(2)]
					for v := range n.Configs[site] {
						c := n.Configs[site][v]
						c.Epoch++
						c.Chain = slices.DeleteFunc(slices.Clone(c.Chain), func(id wire.NodeID) bool { return id == gone })
						n.Configs[site][v] = c
					}
					delete(n.Servers, gone)
					failed++
				}
			}
			for _, c := range clients {
				if c.pending != nil && n.Now-c.sentAt > 300*wire.Millisecond {
					send(c) // no answer yet: ask again, same request number
				}
			}
		}
		answer()
	}
	writes := 0
	for _, c := range clients {
		if c.pending != nil && !c.pending.Op.Kind.IsQuery() {
			c.pending.Unknown = true
			history = append(history, *c.pending)
		}
	}
	for _, op := range history {
		if !op.Op.Kind.IsQuery() && !op.Unknown {
			writes++
		}
	}
	if writes == 0 {
		// (Few is possible: a site cut off is removed from the view and
		// stays out, as rejoining is not built yet; in relaxed mode the
		// keys it controlled are unavailable meanwhile. Durable mode
		// takes them over: relay.go.)
		t.Fatalf("no write answered of %d operations", len(history))
	}
	res, info := check.Linearizable(history, time.Minute)
	if res != porcupine.Ok {
		if os.Getenv("CATENA_HIER_DEBUG") != "" {
			for _, key := range keys {
				var sub []check.Operation
				for _, op := range history {
					if op.Op.Key == key {
						sub = append(sub, op)
					}
				}
				if r, _ := check.Linearizable(sub, time.Minute); r != porcupine.Ok {
					slices.SortFunc(sub, func(a, b check.Operation) int { return int(a.Call - b.Call) })
					// The earliest time T by which the history cut at T (what
					// returned after T maybe-applied, reads dropped) fails.
					cut := func(at int64) []check.Operation {
						var out []check.Operation
						for _, op := range sub {
							switch {
							case op.Call >= at:
							case op.Unknown || op.Return > at:
								if !op.Op.Kind.IsQuery() {
									op.Unknown = true
									out = append(out, op)
								}
							default:
								out = append(out, op)
							}
						}
						return out
					}
					var at int64
					for _, op := range sub {
						if r, _ := check.Linearizable(cut(op.Return+1), time.Minute); r != porcupine.Ok {
							at = op.Return + 1
							break
						}
					}
					sub = cut(at)
					sub = sub[max(0, len(sub)-24):]
					t.Logf("key %s fails by %d", key, at)
					for _, op := range sub {
						t.Logf("%s c%d %v %s exp=%s absent=%v [%d,%d] unknown=%v -> %s found=%v %q", key, op.Client, op.Op.Kind, op.Op.Value, op.Op.Expected, op.Op.ExpectAbsent, op.Call, op.Return, op.Unknown, op.Result.Status, op.Result.Found, op.Result.Value)
					}
				}
			}
		}
		return fmt.Errorf("not linearizable (%v): %d operations\n%v", res, len(history), info)
	}
	rejoined, expired := 0, 0
	for site := wire.SiteID(1); site <= 3; site++ {
		if id := n.Configs[site][vol].Tail(); n.Servers[id] != nil {
			h := modeOf(n.Servers[id].Replica(vol))
			if h.rejoinedIn > 0 {
				rejoined++
			}
			expired += len(h.expired)
		}
	}
	t.Logf("%d operations (%d writes answered) linearizable; %d sites rejoined the view, %d ranges of updates given up", len(history), writes, rejoined, expired)
	return nil
}

// A site removed from the active view holds no release back: with site
// 3 cut off, site 1's election removes it from the view (three silent
// rounds), site 1 writes with site 2's votes, and once idle releases
// control though site 3 lacks the write (it catches up when it
// returns, before it serves again).
func TestHierarchicalReleaseCountsTheViewOnly(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	// The write waits for the view change: a primary serves only once
	// every member of its view acknowledged it.
	if r := n.TryPutFor(1, 7, 1, key, "v1", 200); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 1's write with site 3 cut off: %+v", r)
	}
	for range 80 {
		n.Tick() // 1.6 s: past the idle time
	}
	if m := modeOf(n.Servers["a1"].Replica(0)).machine; m == nil || slices.Contains(m.View().Members, 3) {
		t.Fatalf("site 1's view still holds site 3")
	}
	for _, site := range []wire.SiteID{1, 2} {
		if votes := siteVotes(n, site, 0, key); len(votes) != 0 {
			t.Errorf("site %d still votes %v: site 1 did not release while site 3 lacks the write", site, votes)
		}
	}
}

// Durable mode loses no answered write with its primary's site: site 3
// writes v1 under its control, answered once site 2 holds it (site 3's
// shipments to site 1 are lost), and then site 3 is cut off for good.
// A compare-and-set from v1 at site 1 waits while site 3 controls the
// key; once the view leaves site 3 out, site 2 relays v1 to site 1 (only
// site 3 ships its own updates otherwise), both sites find that no
// member holds more of site 3's updates than they do (Resynced), site 1
// is elected, and the compare-and-set succeeds: site 1 saw v1.
func TestHierarchicalSurvivorsTakeOverALostPrimarysKeys(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool {
		_, ship := m.Msg.(*wire.Ship)
		return ship && n.SiteOf(m.From) == 3 && n.SiteOf(m.To) == 1
	}
	if r := n.TryPutFor(3, 7, 1, key, "v1", 200); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 3's write: %+v", r)
	}
	if v, _ := n.Object(1, key); v == "v1" {
		t.Fatalf("site 1 holds v1 already")
	}
	n.Held = nil // lost
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	cas := wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: []byte("v1"), Value: []byte("v2")}
	r := n.UpdateWithin(1, 8, 1, cas, nil, 0, 300)
	if r == nil || r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK {
		t.Fatalf("site 1's compare-and-set from v1 after site 3 was lost: %+v", r)
	}
	for _, site := range []wire.SiteID{1, 2} {
		if m := modeOf(n.Servers[n.Configs[site][0].Head()].Replica(0)).machine; m == nil || slices.Contains(m.View().Members, 3) {
			t.Errorf("site %d's view still holds site 3", site)
		}
	}
	for range 80 {
		n.Tick() // released, and shipped to site 2
	}
	for _, site := range []wire.SiteID{1, 2} {
		if v, _ := n.Object(site, key); v != "v2" {
			t.Errorf("site %d holds %q, want v2", site, v)
		}
	}

	// Site 3, outside the view, is refused on the data path, and nothing
	// changes: its shipment (a write the view gave up on) and a request
	// it forwards.
	head := n.Configs[1][0].Head()
	before := n.Vector(1, 0)
	late := wire.Update{Key: key, Changed: true, Value: []byte("v3"), Stamp: wire.Stamp{Origin: 3, N: 2, TS: uint64(n.Now) + 1}}
	out := n.Servers[head].Step(n.Now, n.Configs[3][0].Tail(), &wire.Ship{Volume: 0, Origin: 3, OriginVolume: 0,
		Updates: []wire.Update{late}, Cluster: "prod", Sender: 3})
	if len(out) != 1 {
		t.Fatalf("site 3's shipment answered with %v", out)
	}
	if ack, ok := out[0].Msg.(*wire.ShipAck); !ok || ack.Err != wire.ErrNotInView {
		t.Errorf("site 3's shipment answered %+v, want ErrNotInView", out[0].Msg)
	}
	fwd := &wire.ClientRequest{Volume: 0, Client: 9, ReqNo: 1, AckedBelow: 1, Keyspaces: uint32(len(n.Keyspaces)), FromSite: 3,
		Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v3")}}
	out = n.Servers[head].Step(n.Now, n.Configs[3][0].Head(), fwd)
	if len(out) != 1 {
		t.Fatalf("site 3's forwarded write answered with %v", out)
	}
	if rep, ok := out[0].Msg.(*wire.ClientReply); !ok || rep.Err != wire.ErrUnavailable {
		t.Errorf("site 3's forwarded write answered %+v, want ErrUnavailable", out[0].Msg)
	}
	n.Run()
	if v, _ := n.Object(1, key); v != "v2" || !slices.Equal(n.Vector(1, 0), before) {
		t.Errorf("after site 3's refused messages site 1 holds %q, vector %v (was %v)", v, n.Vector(1, 0), before)
	}
}

// In durable mode a site does not take over a lost primary's keys before
// it holds every update of it some member holds: without the relays
// (shipping only from a write's origin), site 1 never learns v1, so it
// must never be elected for the key (a compare-and-set from the absent
// key would succeed and lose v1).
func TestHierarchicalNoTakeOverWithoutTheLostPrimarysWrites(t *testing.T) {
	if lost := takeOverWithoutRelays(t, chain.Mutations{}); lost {
		t.Fatalf("site 1 wrote the key as absent: site 3's answered v1 is lost")
	}
	if !mutationtest.Enabled(t) {
		return
	}
	if lost := takeOverWithoutRelays(t, chain.Mutations{HierarchicalResyncEarly: true}); !lost {
		t.Fatalf("the HierarchicalResyncEarly mutation is not caught")
	}
}

// takeOverWithoutRelays runs TestHierarchicalNoTakeOverWithoutTheLostPrimarysWrites's
// case and reports whether site 1 wrote the key as absent.
func takeOverWithoutRelays(t *testing.T, mutations chain.Mutations) bool {
	n := newSites(t, 3, false, mutations)
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool {
		_, ship := m.Msg.(*wire.Ship)
		return ship && n.SiteOf(m.From) != 1 && n.SiteOf(m.To) == 1
	}
	if r := n.TryPutFor(3, 7, 1, key, "v1", 200); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 3's write: %+v", r)
	}
	n.Held = nil
	n.Hold = func(m chaintest.Msg) bool {
		_, ship := m.Msg.(*wire.Ship)
		return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 || ship && n.SiteOf(m.To) == 1
	}
	cas := wire.Op{Kind: wire.OpCompareAndSet, Key: key, ExpectAbsent: true, Value: []byte("v2")}
	r := n.UpdateWithin(1, 8, 1, cas, nil, 0, 300)
	return r != nil && r.Err == wire.ErrNone && r.Result.Status == wire.StatusOK
}

// A site that was lost returns without its writes the others gave up:
// site 3 writes v1 (answered: site 2 holds it too) and, cut off, v3 to
// the same key, applied in its chain but never answered (no majority
// holds it). Sites 1 and 2 take the key over and write v2. Once the cut
// heals, site 3 learns it is out of the view, restores the key to v2
// from a member, records v3's update as given up (it ships as a no-op)
// and joins again; v3's client is never told it succeeded, site 3 reads
// v2, and its next write reaches every site.
func TestHierarchicalLostSiteRejoinsWithoutItsUnansweredWrites(t *testing.T) {
	if err := rejoinWithoutUnansweredWrites(t, chain.Mutations{}); err != nil {
		t.Fatal(err)
	}
	if !mutationtest.Enabled(t) {
		return
	}
	if err := rejoinWithoutUnansweredWrites(t, chain.Mutations{HierarchicalRejoinKeepsGivenUp: true}); err == nil {
		t.Fatal("the HierarchicalRejoinKeepsGivenUp mutation is not caught")
	} else {
		t.Logf("HierarchicalRejoinKeepsGivenUp caught: %v", err)
	}
}

// rejoinWithoutUnansweredWrites runs TestHierarchicalLostSiteRejoinsWithoutItsUnansweredWrites's
// case; it returns what went wrong.
func rejoinWithoutUnansweredWrites(t *testing.T, mutations chain.Mutations) error {
	n := newSites(t, 3, false, mutations)
	key := n.KeyIn(0)
	if r := n.TryPutFor(3, 7, 1, key, "v1", 200); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 3's write: %+v", r)
	}
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	if r := n.TryPutFor(3, 7, 2, key, "v3", 20); r != nil && r.Err == wire.ErrNone {
		t.Fatalf("site 3's write while cut off was answered: %+v", r)
	}
	if v, _ := n.Object(3, key); v != "v3" {
		t.Fatalf("site 3's chain holds %q, want its unanswered v3", v)
	}
	cas := wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: []byte("v1"), Value: []byte("v2")}
	if r := n.UpdateWithin(1, 8, 1, cas, nil, 0, 300); r == nil || r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK {
		t.Fatalf("site 1's compare-and-set from v1 with site 3 cut off: %+v", r)
	}

	n.Hold = func(chaintest.Msg) bool { return false }
	n.Held = nil // what crossed the cut is lost
	n.Replies = nil
	for range 150 {
		n.Tick() // 3 s: site 3 learns it is out, restores, joins
	}
	for _, r := range n.Replies {
		if r.Client == 7 && r.ReqNo == 2 && r.Err == wire.ErrNone {
			return fmt.Errorf("v3's client was told it succeeded: %+v", r)
		}
	}
	if m := modeOf(n.Servers[n.Configs[3][0].Head()].Replica(0)).machine; m == nil || !slices.Contains(m.View().Members, 3) {
		return fmt.Errorf("site 3 is not back in the view")
	}
	if h := modeOf(n.Servers[n.Configs[3][0].Tail()].Replica(0)); h.rejoinedIn == 0 || h.currentIn < h.rejoinedIn {
		return fmt.Errorf("site 3's tail: rejoined in %d, current in %d", h.rejoinedIn, h.currentIn)
	}
	for site := wire.SiteID(1); site <= 3; site++ {
		if v, _ := n.Object(site, key); v != "v2" {
			return fmt.Errorf("site %d holds %q, want v2", site, v)
		}
		if r := n.Get(site, 9, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v2" {
			return fmt.Errorf("site %d reads %v %q, want v2", site, r.Err, r.Result.Value)
		}
	}
	cas = wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: []byte("v2"), Value: []byte("v4")}
	if r := n.UpdateWithin(3, 7, 3, cas, nil, 0, 300); r == nil || r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK {
		return fmt.Errorf("site 3's compare-and-set from v2 after it rejoined: %+v", r)
	}
	for range 80 {
		n.Tick()
	}
	for site := wire.SiteID(1); site <= 3; site++ {
		if v, _ := n.Object(site, key); v != "v4" {
			return fmt.Errorf("site %d holds %q after site 3's write, want v4", site, v)
		}
	}
	return nil
}

// In relaxed mode (the paper's) a returning primary's writes are kept:
// site 3 writes v1, answered at once, and is cut off before shipping it;
// the others remove it from the view and cannot use the key meanwhile
// (never stale); once the cut heals they take its shipments, it joins
// again, and every site reads v1.
func TestHierarchicalRelaxedRejoinKeepsThePrimarysWrites(t *testing.T) {
	n := newSites(t, 3, true, chain.Mutations{})
	key := n.KeyIn(0)
	n.WriteUnshipped(3, key, "v1")
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	for range 100 {
		n.Tick() // site 3 is removed from the view
	}
	if r := n.Get(1, 9, key); r.Err == wire.ErrNone {
		t.Fatalf("site 1 read the key of its lost primary: %q", r.Result.Value)
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Held = nil
	for range 150 {
		n.Tick()
	}
	if m := modeOf(n.Servers[n.Configs[3][0].Head()].Replica(0)).machine; m == nil || !slices.Contains(m.View().Members, 3) {
		t.Fatalf("site 3 is not back in the view")
	}
	for site := wire.SiteID(1); site <= 3; site++ {
		if r := n.Get(site, 9, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
			t.Errorf("site %d reads %v %q, want v1", site, r.Err, r.Result.Value)
		}
	}
}

// A site cut off from the others does not know, until it hears again,
// that they removed it from the view; its tail must not read its own
// copy of a key nobody controls meanwhile, which lacks what the others
// wrote since. Its membership lease (ADR 16) has run out before the
// others use a view without it: the read is refused. (Without the lease
// it read v1 after v2 was acknowledged.)
func TestHierarchicalCutSiteServesNoStaleRead(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	for range 80 {
		n.Tick() // released: every site holds v1, nobody controls the key
	}
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	if r := n.TryPutFor(1, 7, 2, key, "v2", 200); r == nil || r.Err != wire.ErrNone {
		t.Fatalf("site 1's write with site 3 cut off: %+v", r)
	}
	if r := n.Get(3, 9, key); r.Err == wire.ErrNone && string(r.Result.Value) == "v1" {
		t.Fatalf("site 3 read v1 after v2 was acknowledged")
	}
	// Before the cut, with its lease, site 3 read the key at once.
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
}

// Reads of keys nobody controls are served from the site's own copy
// while the site holds its lease: at every site, once the tails have
// asked for it.
func TestHierarchicalLeasedSitesReadTheirOwnCopy(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	for range 80 {
		n.Tick() // released, and leases asked for and granted
	}
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) != n.SiteOf(m.To) } // a read must not cross the WAN
	for site := wire.SiteID(1); site <= 3; site++ {
		if r := n.Get(site, 9, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v1" {
			t.Errorf("site %d's read: %v %q", site, r.Err, r.Result.Value)
		}
	}
}

// NFSv4 §2.3's grace period: two of three sites fail at once, and site 1
// alone can change no view. The operator forces view [1 2] at site 1
// (the keyspace's Grace, set by its master): the head adopts it, once,
// numbered after its own view; the generation is a record of the chain,
// so a new head does not force it again.
func TestHierarchicalGraceViewIsAdoptedOnce(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	key := n.KeyIn(0)
	n.Put(1, 7, 1, key, "v1", nil, 0)
	for _, id := range []wire.NodeID{"b1", "b2", "c1", "c2"} {
		delete(n.Servers, id)
	}
	before := modeOf(n.Servers["a1"].Replica(0)).machine.View()
	n.Keyspaces[0].Grace = wire.Override{Generation: 1, Sites: []wire.SiteID{1, 2}}
	n.Tick() // (the master's answer brings it)
	n.Tick()
	want := wire.View{N: before.N + 1, Members: []wire.SiteID{1, 2}}
	if got := modeOf(n.Servers["a1"].Replica(0)).machine.View(); got.N != want.N || !slices.Equal(got.Members, want.Members) {
		t.Fatalf("a1's view %v after the grace, want %v", got, want)
	}
	for _, id := range []wire.NodeID{"a1", "a2"} {
		if g := modeOf(n.Servers[id].Replica(0)).graceApplied; g != 1 {
			t.Fatalf("%s folded grace generation %d, want 1", id, g)
		}
	}
	// a2 becomes the head: it restores the forced view and forces
	// nothing more.
	n.Configs[1][0] = wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a2"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2, 3}}
	n.Configs[1][1] = wire.Config{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a2"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2, 3}}
	delete(n.Servers, "a1")
	n.Tick()
	n.Tick()
	if got := modeOf(n.Servers["a2"].Replica(0)).machine.View(); got.N != want.N || !slices.Equal(got.Members, want.Members) {
		t.Fatalf("a2, the new head, has view %v, want %v (forced once)", got, want)
	}
}

// A server that another site's message reaches on a stale route (it is
// not the head a Control is for, nor the tail a Fetch is for) answers
// Moved with its configuration, so the sender routes its next message
// to the right server at once rather than after rounds of silence; a
// server that does not hold the volume says so with an empty one.
func TestHierarchicalMisroutedMessagesAreAnsweredMoved(t *testing.T) {
	n := newSites(t, 2, false, chain.Mutations{})
	n.Put(1, 7, 1, n.KeyIn(0), "v1", nil, 0)
	moved := func(out []wire.Envelope) *wire.Moved {
		t.Helper()
		if len(out) != 1 || out[0].To != "b1" {
			t.Fatalf("answered %v, want one message to b1", out)
		}
		m, ok := out[0].Msg.(*wire.Moved)
		if !ok {
			t.Fatalf("answered %T, want Moved", out[0].Msg)
		}
		return m
	}
	ctl := &wire.Control{Kind: wire.ControlPropose, Keyspace: wire.DefaultKeyspace, From: 2, To: 1, Ballot: wire.Ballot{N: 9, Site: 2}, Path: "x"}
	if m := moved(n.Servers["a2"].Step(n.Now, "b1", ctl)); m.Site != 1 || m.Config.Head() != "a1" {
		t.Errorf("a2, not the head, answered %+v", m)
	}
	fetch := &wire.Fetch{Volume: 0, Site: 2, OriginVolume: 0, Keys: []string{n.KeyIn(0)}}
	if m := moved(n.Servers["a1"].Step(n.Now, "b1", fetch)); m.Site != 1 || m.Config.Tail() != "a2" {
		t.Errorf("a1, not the tail, answered %+v", m)
	}
	// Volume 2 is the "here" keyspace's, which no server holds: asked
	// as if it were hierarchical, a1 answers with no configuration.
	fetch.Volume = 2
	if m := moved(n.Servers["a1"].Step(n.Now, "b1", fetch)); m.Config.Volume != 2 || len(m.Config.Chain) != 0 {
		t.Errorf("a1, without the volume, answered %+v", m)
	}
}

// Relaxed mode: a lost primary's keys stay inaccessible until it returns
// or the operator reassigns them (NFSv4 §2.3). Site 3 writes v1, answered
// at once, and is lost before shipping it; sites 1 and 2 remove it from
// the view and refuse the key. The operator reassigns site 3's keys at
// both (catena keyspace reassign): they take the key over, giving v1 up
// (neither ever had it), a compare-and-set from absent at site 1
// succeeds, every member reads its value, and a late shipment of site 3's
// is refused.
func TestHierarchicalRelaxedReassignTakesOverALostPrimarysKeys(t *testing.T) {
	n := newSites(t, 3, true, chain.Mutations{})
	key := n.KeyIn(0)
	n.WriteUnshipped(3, key, "v1")
	lost := n.Configs[3][0]
	for _, id := range lost.Chain {
		delete(n.Servers, id)
	}
	n.Hold = func(m chaintest.Msg) bool { return n.SiteOf(m.From) == 3 || n.SiteOf(m.To) == 3 }
	// The operator reassigns site 3's keys at once: the sites act on it
	// once the view leaves site 3 out.
	n.Keyspaces[0].Reassign = wire.Override{Generation: 1, Sites: []wire.SiteID{3}}
	n.Tick()
	n.Tick()
	if g := modeOf(n.Servers[n.Configs[1][0].Head()].Replica(0)).reassignApplied; g != 0 {
		t.Fatalf("site 1 applied the reassignment of site 3 while it was in the view")
	}
	for range 100 {
		n.Tick() // site 3 is removed from the view, and its keys taken over
	}
	cas := wire.Op{Kind: wire.OpCompareAndSet, Key: key, ExpectAbsent: true, Value: []byte("v2")}
	if r := n.UpdateWithin(1, 8, 1, cas, nil, 0, 300); r == nil || r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK {
		t.Fatalf("site 1's compare-and-set from absent after the reassignment: %+v", r)
	}
	for range 80 {
		n.Tick() // released, and shipped to site 2
	}
	for _, site := range []wire.SiteID{1, 2} {
		if r := n.Get(site, 9, key); r.Err != wire.ErrNone || string(r.Result.Value) != "v2" {
			t.Errorf("site %d reads %v %q, want v2", site, r.Err, r.Result.Value)
		}
		if g := modeOf(n.Servers[n.Configs[site][0].Head()].Replica(0)).reassignApplied; g != 1 {
			t.Errorf("site %d's head applied reassignment %d, want 1", site, g)
		}
	}
	head := n.Configs[1][0].Head()
	late := wire.Update{Key: key, Changed: true, Value: []byte("v1"), Stamp: wire.Stamp{Origin: 3, N: 1, TS: uint64(n.Now) + 1}}
	out := n.Servers[head].Step(n.Now, lost.Tail(), &wire.Ship{Volume: 0, Origin: 3, OriginVolume: 0, Updates: []wire.Update{late}, Sender: 3})
	if len(out) != 1 {
		t.Fatalf("site 3's late shipment answered with %v", out)
	}
	if ack, ok := out[0].Msg.(*wire.ShipAck); !ok || ack.Err != wire.ErrNotInView {
		t.Errorf("site 3's late shipment answered %+v, want ErrNotInView", out[0].Msg)
	}
}
