package control

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/mutation/mutationtest"
	"github.com/catena-kv/catena/internal/wire"
)

const ms = wire.Time(1e6)

// net is a deterministic network of sites' machines: messages wait in a
// queue until delivered, in order or shuffled.
type net struct {
	t      *testing.T
	sites  map[wire.SiteID]*Machine
	queue  []wire.Control
	now    wire.Time
	synced bool
	// persisted is each site's durable state, as its host would keep it.
	persisted map[wire.SiteID]*State
	views     Views
	// down: crashed sites (nothing delivered to or from them, no time);
	// cut: pairs of sites partitioned from each other. Messages to or
	// from them are lost.
	down map[wire.SiteID]bool
	cut  map[[2]wire.SiteID]bool
	// fail, if set, receives invariant violations instead of failing
	// the test.
	fail  func(error)
	tweak func(*Config)
	// stats: what the views did, seen by collect.
	stats    viewStats
	excluded map[wire.SiteID]bool
}

// viewStats counts what a schedule's views did, so the random tests can
// show they exercised them.
type viewStats struct {
	maxView             uint64
	exclusions, rejoins int
}

func newNet(t *testing.T, n int, tweak func(*Config)) *net {
	t.Helper()
	w := &net{t: t, sites: map[wire.SiteID]*Machine{}, synced: true, persisted: map[wire.SiteID]*State{}, views: Views{},
		down: map[wire.SiteID]bool{}, cut: map[[2]wire.SiteID]bool{}, tweak: tweak, excluded: map[wire.SiteID]bool{}}
	var ids []wire.SiteID
	for i := 1; i <= n; i++ {
		ids = append(ids, wire.SiteID(i))
	}
	for _, id := range ids {
		w.sites[id] = w.newMachine(id, ids, tweak)
	}
	return w
}

func (w *net) newMachine(id wire.SiteID, ids []wire.SiteID, tweak func(*Config)) *Machine {
	cfg := Config{Self: id, Sites: ids, Keyspace: "builds", DeepMinDepth: 1, Synced: func(string) bool { return w.synced }}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	if w.persisted[id] == nil {
		w.persisted[id] = &State{}
	}
	return m
}

// restart replaces site id's machine by a new one restored from what it
// persisted, and brings it up.
func (w *net) restart(id wire.SiteID) {
	w.t.Helper()
	m := w.newMachine(id, slices.Sorted(maps.Keys(w.sites)), w.tweak)
	m.Restore(*w.persisted[id], w.now)
	w.sites[id] = m
	delete(w.down, id)
	w.collect()
}

// lost reports whether msg is lost: its sender or receiver is down, or
// they are partitioned.
func (w *net) lost(msg wire.Control) bool {
	return w.down[msg.From] || w.down[msg.To] || w.cut[[2]wire.SiteID{msg.From, msg.To}] || w.cut[[2]wire.SiteID{msg.To, msg.From}]
}

// collect moves every site's output to the queue and its records to its
// persisted state, and checks the invariants.
func (w *net) collect() {
	w.t.Helper()
	for _, id := range slices.Sorted(maps.Keys(w.sites)) {
		m := w.sites[id]
		for _, r := range m.Persisted() {
			w.persisted[id].Apply(r)
		}
		w.stats.maxView = max(w.stats.maxView, m.view.N)
		switch ex := m.Excluded(); {
		case ex && !w.excluded[id]:
			w.stats.exclusions++
		case !ex && w.excluded[id]:
			w.stats.rejoins++
		}
		w.excluded[id] = m.Excluded()
		w.queue = append(w.queue, m.Messages()...)
	}
	var all []*Machine
	for _, id := range slices.Sorted(maps.Keys(w.sites)) {
		all = append(all, w.sites[id])
	}
	err := Check(all)
	if err == nil {
		err = w.views.Check(all)
	}
	if err != nil {
		if w.fail != nil {
			w.fail(err)
			return
		}
		w.t.Fatal(err)
	}
}

// deliver delivers queued messages (and those they cause) until none is
// left, advancing time by step per message.
func (w *net) deliver(step wire.Time) {
	w.t.Helper()
	w.collect()
	for len(w.queue) > 0 {
		msg := w.queue[0]
		w.queue = w.queue[1:]
		w.now += step
		if m, ok := w.sites[msg.To]; ok && !w.lost(msg) {
			m.Step(msg, w.now)
		}
		w.collect()
	}
}

func (w *net) write(site wire.SiteID, key string) Decision {
	w.t.Helper()
	d := w.sites[site].Write(key, w.now)
	w.collect()
	return d
}

func (w *net) tick(by wire.Time) {
	w.t.Helper()
	w.now += by
	for _, id := range slices.Sorted(maps.Keys(w.sites)) {
		if !w.down[id] {
			w.sites[id].Tick(w.now)
		}
	}
	w.collect()
}

func expect(t *testing.T, got Decision, kind Kind, site wire.SiteID) {
	t.Helper()
	if got.Kind != kind || got.Site != site {
		t.Fatalf("decision %v site %d (err %v), want %v site %d", got.Kind, got.Site, got.Err, kind, site)
	}
}

// §2.2, §3.1: the first write under an uncontrolled directory elects the
// writer's site primary of the directory (deep control) in one round;
// later writes are served at once; another site forwards to it and asks
// it to release the directory (revoke).
func TestFirstWriteElectsDeepControlInOneRound(t *testing.T) {
	w := newNet(t, 3, nil)
	expect(t, w.write(1, "ssh/src/a.c"), Wait, 0)
	if n := len(w.queue); n != 2 {
		t.Fatalf("%d messages after the first write, want a proposal to each other site", n)
	}
	w.deliver(ms)
	if h := w.sites[1].Holds(); !h["ssh/src/"] {
		t.Fatalf("site 1 holds %v, want deep control of ssh/src/", h)
	}
	expect(t, w.write(1, "ssh/src/a.c"), Serve, 0)
	expect(t, w.write(1, "ssh/src/new/b.c"), Serve, 0) // a new key under the prefix inherits its primary
	expect(t, w.write(2, "ssh/src/c.c"), Forward, 1)
	revokes := 0
	for _, m := range w.queue {
		if m.Kind == wire.ControlRevoke && m.To == 1 && m.Path == "ssh/src/" {
			revokes++
		}
	}
	if revokes != 1 {
		t.Fatalf("%d revokes queued, want 1", revokes)
	}
	if d := w.sites[3].Read("ssh/src/a.c"); d.Kind != Forward || d.Site != 1 {
		t.Fatalf("read at site 3: %+v, want forwarded to site 1", d)
	}
	if d := w.sites[3].Read("other/x"); d.Kind != Serve {
		t.Fatalf("read of an uncontrolled key at site 3: %+v, want served locally", d)
	}
}

// Fig. 1's contention: every site asks at once; the largest id wins, the
// others abort and forward to it.
func TestContentionLargestSiteWins(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	for _, s := range []wire.SiteID{1, 2, 3} {
		expect(t, w.write(s, "x"), Wait, 0)
	}
	w.deliver(ms)
	w.tick(DefaultRoundTimeout) // rounds that ended without a majority retry
	w.deliver(ms)
	if h := w.sites[3].Holds(); !h["x"] {
		t.Fatalf("site 3 holds %v, want x", h)
	}
	for _, s := range []wire.SiteID{1, 2} {
		expect(t, w.write(s, "x"), Forward, 3)
	}
	expect(t, w.write(3, "x"), Serve, 0)
}

// Fig. 4: S1 controls a/b/, S2 controls a/c/; S3's deep request for a/
// conflicts with both and is downgraded to shallow control of its key.
func TestDeepRequestOverControlledDescendantsDowngrades(t *testing.T) {
	w := newNet(t, 3, nil)
	w.write(1, "a/b/f")
	w.write(2, "a/c/g")
	w.deliver(ms)
	if !w.sites[1].Holds()["a/b/"] || !w.sites[2].Holds()["a/c/"] {
		t.Fatalf("holds %v and %v, want a/b/ and a/c/", w.sites[1].Holds(), w.sites[2].Holds())
	}
	// Site 3 knows both (it voted): it asks for shallow control at once.
	expect(t, w.write(3, "a/h"), Wait, 0)
	w.deliver(ms)
	if h := w.sites[3].Holds(); !h["a/h"] || h["a/"] {
		t.Fatalf("site 3 holds %v, want shallow a/h only", h)
	}
}

// A deep request that meets a conflict its requester did not know of
// (the other site's election is still running) fails and is downgraded.
func TestFailedDeepRequestIsDowngradedToShallow(t *testing.T) {
	w := newNet(t, 3, nil)
	w.write(1, "a/b/f") // site 1 asks for a/b/
	// Site 2 and 3 acknowledge it; site 3 then asks for a/ before
	// learning the outcome: its own ancestry table says a/b/ is site 1's.
	w.deliver(ms)
	// Take a site that did not see it: a fresh 3-site net where site 3's
	// deep request for a/ races site 1's for a/b/.
	w = newNet(t, 3, nil)
	w.write(1, "a/b/f")
	w.write(3, "a/g")
	w.deliver(ms)
	w.tick(DefaultRoundTimeout)
	w.deliver(ms)
	h1, h3 := w.sites[1].Holds(), w.sites[3].Holds()
	if h3["a/"] && h1["a/b/"] {
		t.Fatalf("both a/ (site 3) and a/b/ (site 1) held")
	}
	if !h3["a/g"] && !h3["a/"] {
		t.Fatalf("site 3 holds %v: its write of a/g got no control", h3)
	}
}

// B3.1: an abort or release of an older election never undoes a newer
// one, and a late duplicate of a withdrawn proposal is ignored.
func TestOldBallotsChangeNothing(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	w.write(1, "k")
	w.deliver(ms)
	old := w.sites[2].Votes()["k"]
	w.tick(DefaultIdle) // released
	w.deliver(ms)
	if _, ok := w.sites[2].Votes()["k"]; ok {
		t.Fatalf("site 2 still acknowledges k after the release")
	}
	w.write(1, "k")
	w.deliver(ms)
	cur := w.sites[2].Votes()["k"]
	if !old.Ballot.Less(cur.Ballot) {
		t.Fatalf("new ballot %v not after %v", cur.Ballot, old.Ballot)
	}
	for _, kind := range []wire.ControlKind{wire.ControlRelease, wire.ControlAbort, wire.ControlPropose} {
		w.sites[2].Step(wire.Control{Kind: kind, From: 1, To: 2, Ballot: old.Ballot, Path: "k"}, w.now)
		w.collect()
		if got := w.sites[2].Votes()["k"]; got != cur {
			t.Fatalf("late %v of ballot %v changed site 2's vote to %+v", kind, old.Ballot, got)
		}
	}
	// A duplicate of the current proposal is granted again, unchanged.
	w.queue = nil
	w.sites[2].Step(wire.Control{Kind: wire.ControlPropose, From: 1, To: 2, Ballot: cur.Ballot, Path: "k"}, w.now)
	w.collect()
	if len(w.queue) != 1 || !w.queue[0].Granted {
		t.Fatalf("duplicate proposal answered %+v, want one grant", w.queue)
	}
	w.queue = nil
}

// §3.3: control is released after the idle time once every site has
// every update, not before; a write resets the timer; a revoke shortens
// it to a tenth.
func TestIdleReleaseRevokeAndSync(t *testing.T) {
	w := newNet(t, 3, nil)
	w.write(1, "d/f")
	w.deliver(ms)
	w.tick(DefaultIdle / 2)
	expect(t, w.write(1, "d/g"), Serve, 0) // a new key: resets d/'s timer
	w.deliver(ms)
	w.tick(DefaultIdle * 3 / 4)
	if !w.sites[1].Holds()["d/"] {
		t.Fatalf("d/ released %v after a write under it, before the idle time", DefaultIdle*3/4)
	}
	w.synced = false
	w.tick(DefaultIdle)
	if !w.sites[1].Holds()["d/"] {
		t.Fatalf("d/ released while a site lacks updates under it")
	}
	w.synced = true
	w.tick(ms)
	w.deliver(ms)
	if w.sites[1].Holds()["d/"] {
		t.Fatalf("d/ still held once idle and synced")
	}
	for _, s := range []wire.SiteID{2, 3} {
		if v, ok := w.sites[s].Votes()["d/"]; ok {
			t.Fatalf("site %d still acknowledges %+v for d/", s, v)
		}
	}

	// Revoke: site 2 writes under site 1's deep control.
	w.write(1, "e/f")
	w.deliver(ms)
	w.tick(ms)
	expect(t, w.write(2, "e/x"), Forward, 1)
	w.deliver(ms)
	w.tick(DefaultIdle/RevokeDivisor + ms)
	w.deliver(ms)
	if w.sites[1].Holds()["e/"] {
		t.Fatalf("e/ still held %v after a revoke", DefaultIdle/RevokeDivisor)
	}
}

// §3.3: writes of a key under deep control give it shallow control of
// its own, so after the first they keep only the key's timer alive.
func TestWritesOfAKeyDoNotExtendThePrefix(t *testing.T) {
	w := newNet(t, 3, nil)
	w.write(1, "p/f")
	w.deliver(ms)
	expect(t, w.write(1, "p/g"), Serve, 0)
	w.deliver(ms)
	if v := w.sites[3].Votes()["p/g"]; v.Holder != 1 {
		t.Fatalf("site 3's vote for p/g: %+v, want site 1's claim", v)
	}
	for range 5 {
		w.tick(DefaultIdle / 4)
		expect(t, w.write(1, "p/g"), Serve, 0)
	}
	w.deliver(ms)
	h := w.sites[1].Holds()
	if h["p/"] || !h["p/g"] {
		t.Fatalf("site 1 holds %v, want p/g without p/ (released while only p/g was written)", h)
	}
}

// Bad input changes nothing: a proposal from a site outside the view, a
// key path with empty segments, a ballot not of its sender, deep control
// of a key; writes of such keys are refused.
func TestBadControlMessagesAreRefused(t *testing.T) {
	w := newNet(t, 3, nil)
	w.write(1, "a/b")
	w.deliver(ms)
	before := w.sites[2].Votes()
	cases := []struct {
		name string
		msg  wire.Control
		err  wire.ErrCode
	}{
		{"outside the view", wire.Control{Kind: wire.ControlPropose, From: 9, To: 2, Ballot: wire.Ballot{N: 1, Site: 9}, Path: "x"}, 0},
		{"empty segment", wire.Control{Kind: wire.ControlPropose, From: 3, To: 2, Ballot: wire.Ballot{N: 1, Site: 3}, Path: "a//b"}, wire.ErrBadRequest},
		{"leading slash", wire.Control{Kind: wire.ControlPropose, From: 3, To: 2, Ballot: wire.Ballot{N: 1, Site: 3}, Path: "/a"}, wire.ErrBadRequest},
		{"ballot of another site", wire.Control{Kind: wire.ControlPropose, From: 3, To: 2, Ballot: wire.Ballot{N: 7, Site: 1}, Path: "y"}, wire.ErrBadRequest},
		{"deep control of a key", wire.Control{Kind: wire.ControlPropose, From: 3, To: 2, Ballot: wire.Ballot{N: 1, Site: 3}, Path: "y", Deep: true}, wire.ErrBadRequest},
		{"release by another site", wire.Control{Kind: wire.ControlRelease, From: 3, To: 2, Ballot: before["a/"].Ballot, Path: "a/", Deep: true}, 0},
		{"meant for another site", wire.Control{Kind: wire.ControlPropose, From: 3, To: 1, Ballot: wire.Ballot{N: 1, Site: 3}, Path: "z"}, wire.ErrNotInView},
		{"unknown kind", wire.Control{Kind: 99, From: 3, To: 2, Ballot: wire.Ballot{N: 1, Site: 3}, Path: "z"}, 0},
	}
	for _, tc := range cases {
		w.queue = nil
		w.sites[2].Step(tc.msg, w.now)
		w.collect()
		if got := w.sites[2].Votes(); !equalVotes(got, before) {
			t.Errorf("%s: votes changed from %v to %v", tc.name, before, got)
		}
		var refused wire.ErrCode
		for _, m := range w.queue {
			if m.Kind == wire.ControlVote && m.Granted {
				t.Errorf("%s: granted", tc.name)
			}
			refused = m.Err
		}
		if refused != tc.err {
			t.Errorf("%s: refused with %v, want %v", tc.name, refused, tc.err)
		}
	}
	w.queue = nil
	for _, key := range []string{"", "a//b", "/a", "a/"} {
		if d := w.sites[1].Write(key, w.now); d.Kind != Refuse || !errors.Is(d.Err, wire.ErrEmptyPathSegment) && !errors.Is(d.Err, wire.ErrEmptyPath) {
			t.Errorf("write of %q: %+v, want refused", key, d)
		}
	}
}

func equalVotes(a, b map[string]Vote) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// B3.4: votes survive a restart. A site that restarts resumes its own
// election with the same ballot; one that acknowledged another keeps
// refusing competitors.
func TestVotesSurviveRestart(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	w.write(1, "k")
	w.deliver(ms)
	for _, s := range []wire.SiteID{1, 2} {
		w.restart(s)
	}
	w.deliver(ms)
	expect(t, w.write(2, "k"), Forward, 1)
	expect(t, w.write(1, "k"), Serve, 0)
	expect(t, w.write(1, "k2"), Wait, 0)
	w.deliver(ms)
	if a, b := w.sites[1].Votes()["k"].Ballot, w.sites[1].Votes()["k2"].Ballot; !a.Less(b) {
		t.Fatalf("ballot %v after the restart does not follow %v", b, a)
	}
}

// Randomised: writes and reads at random sites, messages delivered in a
// random order, duplicated, or lost; the invariants hold after every
// step (checked by collect).
func TestRandomScheduleKeepsOneController(t *testing.T) {
	var total viewStats
	for seed := range uint64(120) {
		st, err := randomSchedule(t, seed, Mutations{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		total.maxView = max(total.maxView, st.maxView)
		total.exclusions += st.exclusions
		total.rejoins += st.rejoins
	}
	t.Logf("views: up to number %d, %d sites learned they were excluded, %d rejoined", total.maxView, total.exclusions, total.rejoins)
	if total.maxView == 0 || total.exclusions == 0 || total.rejoins == 0 {
		t.Fatalf("the schedules exercised no view change, exclusion or rejoin: %+v", total)
	}
}

// Each mutation of the protocol is caught by the invariants of some
// random schedule.
func TestRandomSchedulesCatchMutations(t *testing.T) {
	mutationtest.Require(t)
	for _, mut := range []Mutations{{VoteForTwo: true}, {AbortIgnoresBallot: true}, {DeepOverControlledDescendant: true},
		{AdoptViewWithoutMajority: true}} {
		caught := 0
		for seed := range uint64(60) {
			if _, err := randomSchedule(t, seed, mut); err != nil {
				caught++
			}
		}
		t.Logf("%+v: caught by %d of 60 schedules", mut, caught)
		if caught == 0 {
			t.Errorf("%+v: no schedule caught it", mut)
		}
	}
}

// randomSchedule runs 1000 random steps and returns what its views did
// and the first invariant violation. Beside writes, reads and message delivery (shuffled,
// duplicated, lost), sites crash (their messages are lost) and restart
// from what they persisted, pairs of sites are partitioned and healed,
// and the hosts resynchronise sites outside the view (Resynced), or
// the operator reassigns their keys (Reassign): faults in odd seeds
// only, so even seeds exercise the fault-free protocol as much. Then the
// faults end (heal).
func randomSchedule(t *testing.T, seed uint64, mut Mutations) (viewStats, error) {
	faults := seed%2 == 1
	keys := []string{"a/b/c", "a/b/d", "a/e", "f", "a/b/x", "g/h"}
	rng := rand.New(rand.NewPCG(seed, 7))
	w := newNet(t, 2+int(seed%4), func(c *Config) {
		c.DeepMinDepth = int(seed % 2)
		c.Durable = seed%3 != 0
		c.Mutations = mut
	})
	var violation error
	w.fail = func(err error) {
		if violation == nil {
			violation = err
		}
	}
	n := len(w.sites)
	site := func() wire.SiteID { return wire.SiteID(1 + rng.IntN(n)) }
	for step := 0; step < 1000 && violation == nil; step++ {
		switch r := rng.IntN(40); {
		case r < 14:
			if s := site(); !w.down[s] {
				w.write(s, keys[rng.IntN(len(keys))])
			}
		case r < 16:
			if s := site(); !w.down[s] {
				w.sites[s].Read(keys[rng.IntN(len(keys))])
			}
		case r < 32 && len(w.queue) > 0:
			i := rng.IntN(len(w.queue))
			msg := w.queue[i]
			if rng.IntN(10) != 1 { // one in ten is delivered and kept: a duplicate
				w.queue = slices.Delete(w.queue, i, i+1)
			}
			if rng.IntN(20) == 0 || w.lost(msg) {
				continue // lost
			}
			w.now += ms
			w.sites[msg.To].Step(msg, w.now)
			w.collect()
		case r == 32 && faults:
			// A crash, or a restart from what the site persisted; at
			// most a minority down at once.
			if s := site(); w.down[s] {
				w.restart(s)
			} else if len(w.down) < (n-1)/2 || n == 2 {
				w.down[s] = true
			}
		case r == 33 && faults:
			if a, b := site(), site(); rng.IntN(2) == 0 {
				clear(w.cut) // the partitions heal
			} else if a != b {
				w.cut[[2]wire.SiteID{a, b}] = true
			}
		case r == 34 && faults:
			// The hosts' and operator's inputs for sites outside a view:
			// an excluded site's resync; a removed site's keys
			// resynchronised (durable) or reassigned (relaxed).
			for s := range wire.SiteID(n) {
				m := w.sites[s+1]
				if o := site(); w.down[s+1] {
					continue
				} else if m.Excluded() {
					m.Resynced(s+1, w.now)
				} else if !m.View().Has(o) && m.cfg.Durable {
					m.Resynced(o, w.now)
				} else if !m.View().Has(o) && rng.IntN(3) == 0 {
					m.Reassign(o, w.now)
				}
			}
			w.collect()
		default:
			w.synced = rng.IntN(4) > 0
			w.tick(wire.Time(rng.IntN(300)) * ms)
		}
	}
	if violation == nil {
		w.heal()
	}
	if debugNet != nil {
		debugNet(w)
	}
	return w.stats, violation
}

// healRounds is how many fault-free rounds end each random schedule.
const healRounds = 15

// heal ends every fault (crashed sites restart, partitions heal, messages
// arrive in order, a round's worth at a time) and feeds the hosts' resync
// inputs each round, for healRounds rounds: view changes, exclusions and
// rejoins then run to their end, checked like every other step. No
// liveness is asserted: a key election split by stale votes (known limit
// 2 of ADR 16) can keep a join handshake waiting.
func (w *net) heal() {
	for _, s := range slices.Sorted(maps.Keys(w.down)) {
		w.restart(s)
	}
	clear(w.cut)
	for range healRounds {
		// The messages queued when the round starts arrive in order; those
		// they cause wait for the next round (a refused key election may
		// propose again at once, forever).
		w.collect()
		batch := w.queue
		w.queue = nil
		for _, msg := range batch {
			w.now += ms
			w.sites[msg.To].Step(msg, w.now)
			w.collect()
		}
		for _, s := range slices.Sorted(maps.Keys(w.sites)) {
			m := w.sites[s]
			if m.Excluded() {
				m.Resynced(s, w.now)
				continue
			}
			for _, o := range slices.Sorted(maps.Keys(w.sites)) {
				if !m.View().Has(o) && m.cfg.Durable {
					m.Resynced(o, w.now)
				} else if !m.View().Has(o) {
					m.Reassign(o, w.now)
				}
			}
		}
		w.collect()
		w.tick(DefaultRoundTimeout)
	}
}

var debugNet func(*net)

// An election restored after a restart (or asked again of a site that
// rejoined) knows no key; refused, it must not become a shallow election
// of its prefix, which every site would refuse as malformed and which
// would never end (found by catena sim --mode hierarchical, seed 25),
// nor go on for ever (a joining site waits for every election of the
// members: seed 3); it is given up.
func TestRestoredDeepElectionRefusedIsGivenUp(t *testing.T) {
	m, err := New(Config{Self: 1, Sites: []wire.SiteID{1, 2, 3}, Keyspace: "builds", DeepMinDepth: 1, Synced: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	b := wire.Ballot{N: 1, Site: 1}
	m.Restore(State{NextBallot: 2, Votes: map[string]Vote{"a/": {Holder: 1, Ballot: b, Deep: true}}}, 0)
	m.Messages()
	for _, from := range []wire.SiteID{2, 3} {
		m.Step(wire.Control{Kind: wire.ControlVote, From: from, To: 1, Ballot: b, Path: "a/", Deep: true,
			Holder: 2, HolderBallot: wire.Ballot{N: 4, Site: 2}}, 10*wire.Millisecond)
	}
	for now := wire.Time(0); now < 3*wire.Second; now += 100 * wire.Millisecond {
		m.Tick(now)
		for _, msg := range m.Messages() {
			if msg.Kind == wire.ControlPropose && wire.IsPrefixPath(msg.Path) && !msg.Deep {
				t.Fatalf("at %v: a shallow proposal of prefix %q", now, msg.Path)
			}
		}
	}
	if _, running := m.elections["a/"]; running {
		t.Fatal("the refused restored election still runs: a joining site waits for it for ever")
	}
	if _, voted := m.votes["a/"]; voted {
		t.Fatal("its vote for itself stays")
	}
}

// A vote whose Abort or Release never arrived (lost, or sent while this
// site was out) refuses the key's next proposer; the refusal asks the
// vote's holder whether its ballot stands (ControlCheck), the holder,
// which runs no election and holds nothing of that ballot, answers with
// the Release it would have sent, and the next proposal is granted. A
// ballot that stands is not released.
func TestCheckReleasesAVoteWhoseReleaseWasLost(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	m1, m2 := w.sites[1], w.sites[2]
	stale := wire.Ballot{N: 40, Site: 2} // an election of site 2's that ended without telling site 1
	m1.Step(wire.Control{Kind: wire.ControlPropose, From: 2, To: 1, Ballot: stale, Path: "k"}, w.now)
	m1.Messages()
	m1.Step(wire.Control{Kind: wire.ControlPropose, From: 3, To: 1, Ballot: wire.Ballot{N: 41, Site: 3}, Path: "k"}, w.now)
	var check *wire.Control
	for _, msg := range m1.Messages() {
		if msg.Kind == wire.ControlCheck {
			check = &msg
		}
	}
	if check == nil || check.To != 2 || check.Ballot != stale || check.Path != "k" {
		t.Fatalf("site 1's refusal asked %+v, want a check of %v at site 2", check, stale)
	}
	check.From = 1
	m2.Step(*check, w.now)
	answer := m2.Messages()
	if len(answer) != 1 || answer[0].Kind != wire.ControlRelease || answer[0].Ballot != stale {
		t.Fatalf("site 2 answered the check %+v, want a release of %v", answer, stale)
	}
	answer[0].From = 2
	m1.Step(answer[0], w.now)
	m1.Messages()
	m1.Step(wire.Control{Kind: wire.ControlPropose, From: 3, To: 1, Ballot: wire.Ballot{N: 41, Site: 3}, Path: "k"}, w.now)
	if msgs := m1.Messages(); len(msgs) != 1 || !msgs[0].Granted {
		t.Fatalf("site 3's proposal after the release answered %+v, want granted", msgs)
	}

	// Site 2's own standing election is not released by a check.
	expect(t, w.write(2, "j"), Wait, 0)
	w.queue = nil
	b := m2.Votes()["j"].Ballot
	m2.Step(wire.Control{Kind: wire.ControlCheck, From: 1, To: 2, Ballot: b, Path: "j"}, w.now)
	if msgs := m2.Messages(); len(msgs) != 0 {
		t.Fatalf("site 2 answered a check of its running election with %+v", msgs)
	}
}
