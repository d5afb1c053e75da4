package control

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// rounds ticks n proposal rounds, delivering what each causes.
func (w *net) rounds(n int) {
	w.t.Helper()
	for range n {
		w.tick(DefaultRoundTimeout)
		w.deliver(ms)
	}
}

// served writes key at site until the write is served (an election
// first, if the control was released meanwhile).
func (w *net) served(site wire.SiteID, key string) {
	w.t.Helper()
	if d := w.write(site, key); d.Kind == Wait {
		w.deliver(ms)
	}
	expect(w.t, w.write(site, key), Serve, 0)
}

// §2.3: a member that answers none of a proposer's rounds is removed
// from the view after three; the proposer's first write, waiting for its
// acknowledgement, then completes (every member of the new view
// acknowledged it), and every member adopts the same view.
func TestCrashedSiteIsRemovedAfterThreeRounds(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	w.down[3] = true
	expect(t, w.write(1, "k"), Wait, 0)
	w.deliver(ms)
	if h := w.sites[1].Holds(); h["k"] {
		t.Fatalf("k ready with site 3 silent and in the view")
	}
	w.rounds(RemoveAfterRounds - 1)
	if v := w.sites[1].View(); v.N != 0 {
		t.Fatalf("view %v after %d silent rounds, want no change yet", v, RemoveAfterRounds-1)
	}
	w.rounds(1)
	for _, s := range []wire.SiteID{1, 2} {
		if v := w.sites[s].View(); v.N != 1 || !slices.Equal(v.Members, []wire.SiteID{1, 2}) {
			t.Fatalf("site %d's view %v, want view 1 [1 2]", s, v)
		}
	}
	expect(t, w.write(1, "k"), Serve, 0)
	expect(t, w.write(2, "k"), Forward, 1)
	if got := w.persisted[2].View; got.N != 1 {
		t.Fatalf("site 2 persisted view %v, want view 1", got)
	}
}

// removeSite3: site 3 holds k (written, not yet shipped: relaxed) and
// crashes; site 1's election of another key removes it.
func removeSite3(t *testing.T, durable bool) *net {
	t.Helper()
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true; c.Durable = durable })
	w.write(3, "k")
	w.deliver(ms)
	expect(t, w.write(3, "k"), Serve, 0)
	w.down[3] = true
	w.write(1, "other")
	w.deliver(ms)
	w.rounds(RemoveAfterRounds + 1)
	if v := w.sites[1].View(); v.Has(3) {
		t.Fatalf("site 3 not removed: %v", v)
	}
	return w
}

// §2.3, relaxed mode: the failed primary's keys are inaccessible
// elsewhere (Unavailable: never served stale, never forwarded to it) until
// it returns or the operator reassigns them; other keys stay available.
func TestRelaxedFailedPrimaryKeysAreUnavailable(t *testing.T) {
	w := removeSite3(t, false)
	for _, s := range []wire.SiteID{1, 2} {
		if d := w.sites[s].Read("k"); d.Kind != Unavailable || d.Site != 3 {
			t.Fatalf("read of k at site %d: %+v, want unavailable (site 3)", s, d)
		}
		if d := w.write(s, "k"); d.Kind != Unavailable {
			t.Fatalf("write of k at site %d: %+v, want unavailable", s, d)
		}
	}
	w.served(1, "other")
	if err := w.sites[1].Resynced(3, w.now); err == nil {
		t.Fatalf("Resynced of a relaxed site's keys accepted: only it holds their newest writes")
	}
	// The operator gives up site 3's unshipped writes.
	for _, s := range []wire.SiteID{1, 2} {
		if err := w.sites[s].Reassign(3, w.now); err != nil {
			t.Fatal(err)
		}
	}
	w.collect()
	expect(t, w.write(2, "k"), Wait, 0)
	w.deliver(ms)
	expect(t, w.write(2, "k"), Serve, 0)
	if err := w.sites[1].Reassign(2, w.now); err == nil {
		t.Fatalf("Reassign of a member accepted")
	}
}

// Durable mode: the failed primary's keys wait (every acknowledged write
// is at a majority) until the host resynchronised them, then they may be
// elected again.
func TestDurableFailedPrimaryKeysWaitUntilResynced(t *testing.T) {
	w := removeSite3(t, true)
	for _, s := range []wire.SiteID{1, 2} {
		if d := w.sites[s].Read("k"); d.Kind != Wait {
			t.Fatalf("read of k at site %d: %+v, want wait", s, d)
		}
	}
	expect(t, w.write(2, "k"), Wait, 0)
	w.deliver(ms)
	w.rounds(1)
	expect(t, w.write(2, "k"), Wait, 0)
	for _, s := range []wire.SiteID{1, 2} {
		if err := w.sites[s].Resynced(3, w.now); err != nil {
			t.Fatal(err)
		}
		if !w.sites[s].Changed() {
			t.Fatalf("site %d: no change reported after resync", s)
		}
	}
	w.collect()
	expect(t, w.write(2, "k"), Wait, 0)
	w.deliver(ms)
	expect(t, w.write(2, "k"), Serve, 0)
	if d := w.sites[1].Read("k"); d.Kind != Forward || d.Site != 2 {
		t.Fatalf("read of k at site 1: %+v, want forwarded to site 2", d)
	}
}

// §2.3, recovery: a site that returns learns from a refusal that it is
// outside the view, drops its controls, is resynchronised by its host,
// asks to join, is added by a view change, and serves again once every
// member confirmed it knows their controls; the keys it controlled are
// released; a control held meanwhile is forwarded to at the returning
// site, never read from its stale copy.
func TestReturningSiteRejoins(t *testing.T) {
	w := removeSite3(t, false)
	w.served(1, "other")
	w.restart(3)
	// Its restored election of k is refused: it is outside the view.
	w.deliver(ms)
	m3 := w.sites[3]
	if !m3.Excluded() || m3.View().N != 1 {
		t.Fatalf("site 3: excluded %v, view %v; want excluded at view 1", m3.Excluded(), m3.View())
	}
	if len(m3.Holds()) > 0 || m3.Votes()["k"].Holder == 3 {
		t.Fatalf("site 3 kept its controls: holds %v votes %v", m3.Holds(), m3.Votes())
	}
	if d := m3.Read("other"); d.Kind != Unavailable {
		t.Fatalf("read at the excluded site: %+v, want unavailable", d)
	}
	// The host resynchronised it.
	if err := m3.Resynced(3, w.now); err != nil {
		t.Fatal(err)
	}
	w.collect()
	w.deliver(ms)
	w.rounds(1) // the join handshake: asked again once the members' controls are acknowledged
	for _, s := range []wire.SiteID{1, 2, 3} {
		if v := w.sites[s].View(); v.N != 2 || len(v.Members) != 3 {
			t.Fatalf("site %d's view %v, want view 2 with every site", s, v)
		}
	}
	if w.sites[3].Joining() {
		t.Fatalf("site 3 still joining after every member answered")
	}
	// Site 3's old control of k was released everywhere; site 1's of
	// "other" is known at site 3 (a read there goes to site 1).
	for _, s := range []wire.SiteID{1, 2} {
		if v, ok := w.sites[s].Votes()["k"]; ok {
			t.Fatalf("site %d still acknowledges %+v for k", s, v)
		}
	}
	if d := w.sites[3].Read("other"); d.Kind != Forward || d.Site != 1 {
		t.Fatalf("read of other at site 3: %+v, want forwarded to site 1", d)
	}
	expect(t, w.write(1, "other"), Serve, 0)
	expect(t, w.write(2, "k"), Wait, 0)
	w.deliver(ms)
	expect(t, w.write(2, "k"), Serve, 0)
}

// While the joining site has not acknowledged a member's control, the
// member does not serve under it and the joining site waits: neither
// serves a read the other could contradict.
func TestJoiningSiteWaitsForEveryMember(t *testing.T) {
	w := removeSite3(t, false)
	w.restart(3)
	w.deliver(ms)
	w.served(1, "other")
	if err := w.sites[3].Resynced(3, w.now); err != nil {
		t.Fatal(err)
	}
	w.collect()
	// Hold back every message to site 3 but the decided view.
	var held []wire.Control
	for len(w.queue) > 0 {
		msg := w.queue[0]
		w.queue = w.queue[1:]
		if msg.To == 3 && msg.Kind != wire.ControlView {
			held = append(held, msg)
			continue
		}
		w.now += ms
		w.sites[msg.To].Step(msg, w.now)
		w.collect()
	}
	if !w.sites[3].Joining() {
		t.Fatalf("site 3 not joining with the members' proposals held back")
	}
	if d := w.sites[3].Read("other"); d.Kind != Wait {
		t.Fatalf("read at the joining site: %+v, want wait", d)
	}
	if d := w.sites[1].Write("other", w.now); d.Kind != Wait {
		t.Fatalf("write of other at site 1 before site 3 acknowledged it: %+v, want wait", d)
	}
	w.queue = append(w.queue, held...)
	w.deliver(ms)
	w.rounds(1)
	if w.sites[3].Joining() {
		t.Fatalf("site 3 still joining")
	}
	expect(t, w.write(1, "other"), Serve, 0)
}

// B3.1 for views: a proposal that does not follow a site's view, or a
// late abort or duplicate of a withdrawn proposal, changes nothing.
func TestStaleViewProposalsChangeNothing(t *testing.T) {
	w := removeSite3(t, false)
	m2 := w.sites[2]
	before, vvBefore := m2.View(), m2.viewVote
	old := wire.Ballot{N: 1, Site: 1}
	cases := []wire.Control{
		{Kind: wire.ControlPropose, From: 1, To: 2, Ballot: wire.Ballot{N: 99, Site: 1}, Path: wire.ViewPath,
			View: wire.View{N: 1, Members: []wire.SiteID{1, 2, 3}}}, // an old number
		{Kind: wire.ControlPropose, From: 1, To: 2, Ballot: wire.Ballot{N: 99, Site: 1}, Path: wire.ViewPath,
			View: wire.View{N: 5, Members: []wire.SiteID{1, 2}}}, // does not follow
		{Kind: wire.ControlAbort, From: 1, To: 2, Ballot: old, Path: wire.ViewPath},
		{Kind: wire.ControlView, From: 1, To: 2, Path: wire.ViewPath, View: wire.View{N: 1, Members: []wire.SiteID{1, 2, 3}}},
		{Kind: wire.ControlView, From: 1, To: 2, Path: wire.ViewPath, View: wire.View{N: 9, Members: []wire.SiteID{2, 3}}}, // not its member
		{Kind: wire.ControlPropose, From: 1, To: 2, Ballot: wire.Ballot{N: 99, Site: 1}, Path: wire.ViewPath,
			View: wire.View{N: 2, Members: []wire.SiteID{1}}}, // no majority
	}
	for i, msg := range cases {
		w.queue = nil
		m2.Step(msg, w.now)
		w.collect()
		if v := m2.View(); v.N != before.N || !slices.Equal(v.Members, before.Members) || m2.viewVote != vvBefore {
			t.Fatalf("case %d (%v %v): view %v vote %v, was %v %v", i, msg.Kind, msg.View, v, m2.viewVote, before, vvBefore)
		}
		for _, r := range w.queue {
			if r.Granted {
				t.Fatalf("case %d granted", i)
			}
		}
	}
	// A proposal for the next view is granted once; a competitor's for
	// the same number is refused naming it; its late abort of an older
	// ballot changes nothing.
	w.queue = nil
	next := wire.View{N: 2, Members: []wire.SiteID{1, 2}}
	m2.Step(wire.Control{Kind: wire.ControlPropose, From: 1, To: 2, Ballot: wire.Ballot{N: 50, Site: 1}, Path: wire.ViewPath, View: next}, w.now)
	m2.Step(wire.Control{Kind: wire.ControlPropose, From: 3, To: 2, Ballot: wire.Ballot{N: 60, Site: 3}, Path: wire.ViewPath, View: next}, w.now)
	m2.Step(wire.Control{Kind: wire.ControlAbort, From: 1, To: 2, Ballot: wire.Ballot{N: 49, Site: 1}, Path: wire.ViewPath}, w.now)
	w.collect()
	if vv := m2.viewVote; vv == nil || vv.Ballot != (wire.Ballot{N: 50, Site: 1}) {
		t.Fatalf("site 2's view vote %+v, want site 1's ballot 50", vv)
	}
	if len(w.queue) < 1 || !w.queue[0].Granted {
		t.Fatalf("proposal of view 2 answered %+v, want granted", w.queue)
	}
	for _, r := range w.queue[1:] {
		if r.Granted {
			t.Fatalf("second proposal for view 2 granted: %+v", r)
		}
	}
	w.queue = nil
}

// §2.3: working sites deny every request from a site outside the view,
// and it changes nothing; the refusal carries the view.
func TestMessagesFromOutsideTheViewAreRefused(t *testing.T) {
	w := removeSite3(t, false)
	m1 := w.sites[1]
	votes, view := m1.Votes(), m1.View()
	for _, kind := range []wire.ControlKind{wire.ControlPropose, wire.ControlAbort, wire.ControlRelease, wire.ControlRevoke, wire.ControlVote} {
		w.queue = nil
		b := wire.Ballot{N: 40, Site: 3}
		if kind == wire.ControlVote {
			b.Site = 1
		}
		m1.Step(wire.Control{Kind: kind, From: 3, To: 1, Ballot: b, Path: "other"}, w.now)
		w.collect()
		if !equalVotes(m1.Votes(), votes) || m1.View().N != view.N {
			t.Fatalf("%v from site 3 changed site 1: votes %v view %v", kind, m1.Votes(), m1.View())
		}
		if len(w.queue) != 1 || w.queue[0].Err != wire.ErrNotInView || w.queue[0].View.N != view.N {
			t.Fatalf("%v from site 3 answered %+v, want one refusal with the view", kind, w.queue)
		}
	}
	w.queue = nil
}

// B1.3: after a majority failed at once no view change gathers a
// majority; the operator forces one, and every member adopts it.
func TestForceViewAfterMajorityFailure(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	if err := w.sites[1].ForceView(wire.View{N: 0, Members: []wire.SiteID{1, 2, 3}}, w.now); err == nil {
		t.Fatalf("forced view with the current number accepted")
	}
	if err := w.sites[1].ForceView(wire.View{N: 4, Members: []wire.SiteID{1}}, w.now); err == nil {
		t.Fatalf("forced view without a majority accepted")
	}
	if err := w.sites[1].ForceView(wire.View{N: 4, Members: []wire.SiteID{2, 1}}, w.now); err != nil {
		t.Fatal(err)
	}
	w.deliver(ms)
	for _, s := range []wire.SiteID{1, 2, 3} {
		if v := w.sites[s].View(); v.N != 4 {
			t.Fatalf("site %d's view %v, want the forced view 4", s, v)
		}
	}
	if !w.sites[3].Excluded() {
		t.Fatalf("site 3 not excluded by the forced view")
	}
}

// Contention for a view number (Fig. 1): two sites propose different
// views at once; one is decided, every site adopts it, and the loser's
// proposal changes nothing.
func TestViewContentionDecidesOne(t *testing.T) {
	w := newNet(t, 5, func(c *Config) { c.NoDeep = true })
	w.sites[1].proposeRemoval(4)
	w.sites[2].proposeRemoval(5)
	w.collect()
	w.deliver(ms)
	w.rounds(4)
	v := w.sites[1].View()
	if v.N == 0 {
		t.Fatalf("no view decided")
	}
	for s := range w.sites {
		if got := w.sites[s].View(); got.N < 1 {
			t.Fatalf("site %d at %v, want a decided view", s, got)
		}
	}
}

// A restarted member does not know what it missed while down (it may
// have been joining): it serves nothing, not even a read of a key it
// believes uncontrolled, until every other member confirmed it has
// acknowledged their controls.
func TestRestartedMemberServesAfterTheJoinHandshake(t *testing.T) {
	w := newNet(t, 3, func(c *Config) { c.NoDeep = true })
	w.write(1, "k")
	w.deliver(ms)
	w.restart(3)
	if d := w.sites[3].Read("other"); d.Kind != Wait {
		t.Fatalf("read at the restarted site before the handshake: %v, want wait", d.Kind)
	}
	w.deliver(ms)
	if d := w.sites[3].Read("other"); d.Kind != Serve {
		t.Fatalf("read of an uncontrolled key after the handshake: %v, want serve", d.Kind)
	}
	if d := w.sites[3].Read("k"); d.Kind != Forward || d.Site != 1 {
		t.Fatalf("read of site 1's key after the handshake: %+v, want forwarded to 1", d)
	}
}
