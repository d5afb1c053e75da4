package clientcore

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// watchHarness returns a harness whose core knows chainABC in a cluster
// that serves watches, with a watch of prefix k/ from revision 5 sent.
func watchHarness(t *testing.T) *harness {
	h := newHarness(t, Options{})
	h.step("m", &wire.ConfigReply{Configs: []wire.Config{chainABC}, Masters: []wire.NodeID{"m"}, ClusterVersion: release.ProtocolWatch})
	h.takeSent()
	h.core.StartWatch(h.now, 0, "k/", false, 5, 0, CallOptions{})
	h.collect()
	return h
}

// answerWatch answers the one request sent with page, and returns to
// whom it went.
func answerWatch(h *harness, page wire.WatchPage) wire.NodeID {
	h.t.Helper()
	to, req := h.onlyRequest()
	if req.Op.Kind != wire.OpWatch || req.Op.Delta != 5 {
		h.t.Fatalf("sent %+v, want the watch from 5", req.Op)
	}
	h.step(to, reply(req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true, Value: wire.EncodeWatchPage(page), SN: page.Through}))
	return to
}

// A member whose window does not reach back to the revision asked for
// (it restarted, or joined with a snapshot) answers Compacted; the
// watch goes on to a member that has not said so, and the page of the
// first member that holds the revision is the answer.
func TestWatchCompactedAtOneMemberAsksAnother(t *testing.T) {
	h := watchHarness(t)
	first := answerWatch(h, wire.WatchPage{Compacted: true, Oldest: 40})
	if done := h.takeDone(); len(done) > 0 {
		t.Fatalf("the watch ended with %+v after one member's Compacted", done)
	}
	want := wire.WatchPage{Events: []wire.WatchEvent{{SN: 6, Kind: wire.WatchPut, Key: "k/a", Value: []byte("v")}}, Through: 9}
	second := answerWatch(h, want)
	if second == first {
		t.Fatalf("asked %s again after it answered Compacted", first)
	}
	done := h.takeDone()
	if len(done) != 1 || done[0].Outcome != OK || done[0].From != second || done[0].Watch == nil {
		t.Fatalf("done %+v, want the page of %s", done, second)
	}
	if got := *done[0].Watch; got.Compacted || got.Through != 9 || len(got.Events) != 1 || got.Events[0].Key != "k/a" {
		t.Fatalf("page %+v, want %+v", got, want)
	}
}

// When every member of the chain answered Compacted, the watch ends with
// the page of the one that holds the oldest revision, each member asked
// once.
func TestWatchCompactedAtEveryMemberEndsWithTheOldest(t *testing.T) {
	h := watchHarness(t)
	var asked []wire.NodeID
	for _, oldest := range []wire.SN{40, 20, 30} {
		asked = append(asked, answerWatch(h, wire.WatchPage{Compacted: true, Oldest: oldest}))
	}
	slices.Sort(asked)
	if !slices.Equal(asked, chainABC.Chain) {
		t.Fatalf("asked %v, want each of %v once", asked, chainABC.Chain)
	}
	if sent := h.takeSent(); len(sent) > 0 {
		t.Fatalf("sent %v after every member answered", sent)
	}
	done := h.takeDone()
	if len(done) != 1 || done[0].Watch == nil || !done[0].Watch.Compacted || done[0].Watch.Oldest != 20 {
		t.Fatalf("done %+v, want Compacted with the oldest revision, 20", done)
	}
}

// A watch from now asks the tail, whose committed revision covers every
// update acknowledged so far; once the tail leaves an attempt unanswered,
// another member.
func TestWatchFromNowAsksTheTail(t *testing.T) {
	h := newHarness(t, Options{})
	h.step("m", &wire.ConfigReply{Configs: []wire.Config{chainABC}, Masters: []wire.NodeID{"m"}, ClusterVersion: release.ProtocolWatch})
	h.takeSent()
	for range 10 {
		h.core.StartWatch(h.now, 0, "k/", false, WatchFrom, 0, CallOptions{})
		h.collect()
		to, req := h.onlyRequest()
		if to != chainABC.Tail() {
			t.Fatalf("a watch from now went to %s (%+v), want the tail %s", to, req.Op, chainABC.Tail())
		}
		h.step(to, reply(req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true, Value: wire.EncodeWatchPage(wire.WatchPage{Through: 9}), SN: 9}))
	}
	h.takeDone()
	h.core.StartWatch(h.now, 0, "k/", false, WatchFrom, 0, CallOptions{})
	h.collect()
	h.takeSent()
	h.tickAt(h.now + 200*ms) // (the attempt timeout, 100 ms, passed)
	var again []wire.NodeID
	for _, e := range h.takeSent() {
		if req, ok := e.Msg.(*wire.ClientRequest); ok && req.Op.Kind == wire.OpWatch {
			again = append(again, e.To)
		}
	}
	if len(again) != 1 || again[0] == chainABC.Tail() {
		t.Fatalf("after the tail left the attempt unanswered, the watch from now asked %v, want one other member", again)
	}
}
