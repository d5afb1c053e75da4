package clientcore

import (
	"errors"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// A chain of a keyspace of sites 1 and 2, causal with k = 1.
var geoChain = wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"a", "b", "c"}, Mode: wire.ModeCausal, K: 1, Sites: []wire.SiteID{1, 2}}

// A write that asks for two sites is done only once the tail says both
// hold it (OpWaitShipped, for the stamp the write's answer carried); a
// second answer to the write meanwhile does not end it early.
func TestWriteForSeveralSitesWaitsForTheTail(t *testing.T) {
	h := newHarness(t, Options{Configs: []wire.Config{geoChain}})
	id := h.start(put("k"), CallOptions{Sites: 2})
	_, req := h.onlyRequest()
	if req.Sites != 2 {
		t.Fatalf("the write carries Sites %d, want 2 (the head refuses more than the keyspace has)", req.Sites)
	}
	answer := reply(req, wire.ErrNone, wire.Result{Status: wire.StatusOK, SN: 3, Stamp: wire.Stamp{Origin: 1, N: 9, TS: 100}})
	h.step("a", answer)
	if d := h.takeDone(); len(d) != 0 {
		t.Fatalf("done %+v before the other site holds the write", d)
	}
	to, wait := h.onlyRequest()
	want := wire.Dep{Key: "k", Origin: 1, N: 9}
	if to != "c" || wait.Op.Kind != wire.OpWaitShipped || wait.Op.Delta != 2 || len(wait.Deps) != 1 || wait.Deps[0] != want {
		t.Fatalf("sent %s %+v; want the tail asked to wait for %v at the keyspace's 2 sites", to, wait, want)
	}
	h.step("a", answer) // a duplicate of the write's answer
	if d := h.takeDone(); len(d) != 0 {
		t.Fatalf("a duplicate answer ended the write early: %+v", d)
	}
	h.step("c", reply(wait, wire.ErrNone, wire.Result{}))
	d := h.takeDone()
	if len(d) != 1 || d[0].ID != id || d[0].Outcome != OK || d[0].Result.Stamp != answer.Result.Stamp || d[0].Op.Kind != wire.OpPut {
		t.Fatalf("done %+v; want the write, OK, with its own answer", d)
	}
}

// A deadline that passes while the other sites are awaited leaves the
// write Ambiguous (applied here, perhaps not there); a refused wait too.
func TestWriteForSeveralSitesWithoutThemIsAmbiguous(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		h := newHarness(t, Options{Configs: []wire.Config{geoChain}})
		h.start(put("k"), CallOptions{Sites: 2, Deadline: 500 * ms})
		_, req := h.onlyRequest()
		h.step("a", reply(req, wire.ErrNone, wire.Result{Status: wire.StatusOK, SN: 3, Stamp: wire.Stamp{Origin: 1, N: 9, TS: 100}}))
		_, wait := h.onlyRequest()
		if refuse {
			h.step("c", reply(wait, wire.ErrBadRequest, wire.Result{}))
		} else {
			h.tickAt(600 * ms)
		}
		d := h.takeDone()
		if len(d) != 1 || d[0].Outcome != Ambiguous || d[0].Op.Kind != wire.OpPut {
			t.Fatalf("refused %v: done %+v; want the write Ambiguous", refuse, d)
		}
		if refuse && !errors.Is(d[0].Err, ErrNotShipped) || !refuse && !errors.Is(d[0].Err, ErrDeadline) {
			t.Fatalf("refused %v: cause %v", refuse, d[0].Err)
		}
		if h.core.Pending() != 0 || len(h.core.ops) != 0 {
			t.Fatalf("refused %v: %d operations left (%d pending)", refuse, len(h.core.ops), h.core.Pending())
		}
	}
}

// A write the head refuses for asking more sites than replicate its
// keyspace ends Invalid, at once, with an error naming the keyspace's
// sites; nothing is retried.
func TestWriteForTooManySitesIsInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  wire.Config
		want string
	}{
		{geoChain, "the write asked for 3 sites, but the key's keyspace is replicated by 2 sites (1,2); nothing was applied"},
		{chainABC, "the write asked for 3 sites, but the key's keyspace is replicated by this site only; nothing was applied"},
	} {
		h := newHarness(t, Options{Configs: []wire.Config{tc.cfg}})
		h.start(put("k"), CallOptions{Sites: 3})
		_, req := h.onlyRequest()
		if req.Sites != 3 {
			t.Fatalf("the write carries Sites %d, want 3", req.Sites)
		}
		h.step("a", reply(req, wire.ErrTooManySites, wire.Result{}))
		d := h.takeDone()
		if len(d) != 1 || d[0].Outcome != Invalid || !errors.Is(d[0].Err, ErrTooManySites) {
			t.Fatalf("done %+v; want the write Invalid with ErrTooManySites", d)
		}
		if got := d[0].Err.Error(); got != ErrTooManySites.Error()+": "+tc.want {
			t.Fatalf("error %q, want it to end %q", got, tc.want)
		}
		h.tickAt(1000 * ms)
		if len(h.sent) != 0 || h.core.Pending() != 0 {
			t.Fatalf("after the refusal: sent %v, %d pending", h.sent, h.core.Pending())
		}
	}
}

// An operation of a session that moved here, whose past is not yet
// stable here by its deadline, fails naming the move and what is
// missing (a *MoveError wrapping ErrDeadline), not a bare deadline.
func TestMovedSessionTimesOutNamingTheMove(t *testing.T) {
	dep := wire.Dep{Key: "k", Origin: 1, N: 9}
	h := newHarness(t, Options{Configs: []wire.Config{geoChain}, After: []wire.Dep{dep}})
	h.tickAt(1 * ms)
	to, wait := h.onlyRequest()
	if to != "c" || wait.Op.Kind != wire.OpWaitStable || len(wait.Deps) != 1 || wait.Deps[0] != dep {
		t.Fatalf("sent %s %+v; want the tail asked to wait for %v", to, wait, dep)
	}
	h.start(get("x"), CallOptions{Deadline: 500 * ms})
	h.tickAt(600 * ms)
	d := h.takeDone()
	var me *MoveError
	if len(d) != 1 || d[0].Outcome != Unavailable || !errors.As(d[0].Err, &me) || !errors.Is(d[0].Err, ErrDeadline) {
		t.Fatalf("done %+v; want the read Unavailable with a MoveError wrapping ErrDeadline", d)
	}
	if len(me.Missing) != 1 || me.Missing[0] != dep {
		t.Fatalf("missing %v, want %v", me.Missing, dep)
	}
	if want := `session move: this site has not yet received update 9 from site 1 (key "k"): deadline passed`; me.Error() != want {
		t.Fatalf("error %q, want %q", me, want)
	}
	me.Here, me.Sites = "site 2 (oslo)", map[wire.SiteID]string{1: "site 1 (lisbon)"}
	if want := `session move: site 2 (oslo) has not yet received update 9 from site 1 (lisbon) (key "k"): deadline passed`; me.Error() != want {
		t.Fatalf("error %q, want %q", me, want)
	}
}

// StartMove brings a past into a running core: it asks this site's tail
// to say when the past is stable, finishes OK once it is, holds the
// operations started meanwhile, and the next write carries the past; at
// its deadline, without the past, it fails with a MoveError. With no
// past to wait for it is done at once.
func TestStartMoveWaitsForThePast(t *testing.T) {
	dep := wire.Dep{Key: "k", Origin: 1, N: 9}
	h := newHarness(t, Options{Configs: []wire.Config{geoChain}})
	if id := h.core.StartMove(h.now, nil, 0, CallOptions{}); len(h.core.Ready().Done) != 1 || h.core.Pending() != 0 {
		t.Fatalf("move %d of no past: not done at once", id)
	}
	id := h.core.StartMove(h.now, []wire.Dep{dep}, 500, CallOptions{Deadline: 10 * wire.Second})
	h.collect()
	to, wait := h.onlyRequest()
	if to != "c" || wait.Op.Kind != wire.OpWaitStable || len(wait.Deps) != 1 || wait.Deps[0] != dep {
		t.Fatalf("sent %s %+v; want the tail asked to wait for %v", to, wait, dep)
	}
	h.start(put("x"), CallOptions{})
	if len(h.takeSent()) != 0 || len(h.takeDone()) != 0 {
		t.Fatalf("a write went out, or something ended, before the past is here")
	}
	h.step("c", reply(wait, wire.ErrNone, wire.Result{}))
	d := h.takeDone()
	if len(d) != 1 || d[0].ID != id || d[0].Outcome != OK {
		t.Fatalf("done %+v; want the move OK", d)
	}
	_, w := h.onlyRequest()
	if w.Op.Kind != wire.OpPut || len(w.Deps) != 1 || w.Deps[0] != dep || w.TS < 500 {
		t.Fatalf("the write %+v does not carry the moved past", w)
	}

	h = newHarness(t, Options{Configs: []wire.Config{geoChain}})
	h.core.StartMove(h.now, []wire.Dep{dep}, 0, CallOptions{Deadline: 500 * ms})
	h.collect()
	h.tickAt(600 * ms)
	d = h.takeDone()
	var me *MoveError
	if len(d) != 1 || d[0].Outcome != Unavailable || !errors.As(d[0].Err, &me) || len(me.Missing) != 1 {
		t.Fatalf("done %+v; want the move Unavailable with a MoveError", d)
	}
}

// A hierarchical keyspace missing at too many of its sites ends an
// operation at once, Unavailable (even an update sent twice: no site can
// have applied it), with an error naming those sites.
func TestKeyspaceMissingAtSitesIsNamed(t *testing.T) {
	hier := wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"a", "b"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2, 3}}
	for _, op := range []wire.Op{put("k"), get("k")} {
		h := newHarness(t, Options{Configs: []wire.Config{hier}})
		h.start(op, CallOptions{Deadline: 10 * wire.Second})
		to, req := h.onlyRequest()
		h.tickAt(h.now + 200*ms) // a second attempt: still not ambiguous
		h.takeSent()
		h.step(to, &wire.ClientReply{Volume: 0, Client: 7, ReqNo: req.ReqNo, Err: wire.ErrKeyspaceMissing, Sites: []wire.SiteID{2, 3}})
		d := h.takeDone()
		var ke *KeyspaceMissingError
		if len(d) != 1 || d[0].Outcome != Unavailable || d[0].Attempts < 2 || !errors.As(d[0].Err, &ke) || !errors.Is(d[0].Err, ErrKeyspaceMissing) {
			t.Fatalf("%v: done %+v; want Unavailable with a KeyspaceMissingError", op, d)
		}
		want := "keyspace missing at its sites: the key's keyspace is not created at site(s) 2,3 of its sites 1,2,3, and without them the others are no majority: create it there too (catena keyspace create, with the same settings, at each)"
		if ke.Error() != want {
			t.Fatalf("error %q, want %q", ke, want)
		}
	}
}

// The nearest dependencies keep, per volume and origin, the newest
// version and the newest on another key: a site skips the wait for an
// earlier version of the written key (ADR 24), so that version cannot
// stand for the session's versions of other keys.
func TestGeoDependenciesKeepAnotherKeyBesideTheNewest(t *testing.T) {
	type seen struct {
		key    string
		origin wire.SiteID
		n      uint64
		write  bool
	}
	dep := func(key string, origin wire.SiteID, n uint64) wire.Dep {
		return wire.Dep{Key: key, Origin: origin, N: n}
	}
	for _, tc := range []struct {
		name string
		seen []seen
		want []wire.Dep
	}{
		{"own write, then a newer version of another key read",
			[]seen{{"k1", 2, 124, true}, {"k5", 2, 125, false}},
			[]wire.Dep{dep("k5", 2, 125), dep("k1", 2, 124)}},
		{"newer versions of one key replace older ones",
			[]seen{{"k1", 2, 124, false}, {"k1", 2, 130, false}},
			[]wire.Dep{dep("k1", 2, 130)}},
		{"an older version of a third key is covered by the other key's",
			[]seen{{"k1", 2, 124, true}, {"k5", 2, 125, false}, {"k2", 2, 110, false}},
			[]wire.Dep{dep("k5", 2, 125), dep("k1", 2, 124)}},
		{"the other key moves to the newest on any key but the newest's",
			[]seen{{"k1", 2, 124, true}, {"k5", 2, 125, false}, {"k2", 2, 126, false}},
			[]wire.Dep{dep("k2", 2, 126), dep("k5", 2, 125)}},
		{"a write covers what it carried",
			[]seen{{"k1", 2, 124, true}, {"k5", 2, 125, false}, {"k5", 2, 127, true}},
			[]wire.Dep{dep("k5", 2, 127)}},
		{"origins are kept apart",
			[]seen{{"k1", 2, 124, false}, {"k5", 3, 9, false}},
			[]wire.Dep{dep("k1", 2, 124), dep("k5", 3, 9)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGeoSession()
			for _, s := range tc.seen {
				g.observe(0, s.key, wire.Stamp{Origin: s.origin, N: s.n, TS: s.n}, s.write, g.seq)
			}
			if got := g.list(); !slices.Equal(got, tc.want) {
				t.Fatalf("dependencies %v, want %v", got, tc.want)
			}
		})
	}
}
