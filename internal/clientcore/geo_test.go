package clientcore

import (
	"errors"
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
