package chain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation/mutationtest"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// Scenarios of watches (watch.go, docs/adr/0032): a client "w" sends
// OpWatch long polls to the members of a chain whose replicas exchange
// messages through a loopback (catchup_test.go); the test plays the
// master and holds back the links it wants to.

// watchClient is the client that sends the watches.
const watchClient wire.ClientID = 9

// watchChain returns a loopback of the replicas ids, each with limits and
// mutations and a store for the seed of a split, which have adopted
// epoch 1 with ids as the chain.
func watchChain(t *testing.T, limits Limits, mutations Mutations, ids ...wire.NodeID) *loopback {
	n := newLoopback(t)
	for _, id := range ids {
		n.replicas[id] = NewReplica(ReplicaOptions{ID: id, Volume: 0, Store: storage.NewMemory(), Limits: limits, FirstStart: true,
			Mutations: mutations, SiblingStore: func(wire.VolumeID) storage.Store { return storage.NewMemory() }})
	}
	n.configure(wiretest.Config(1, "", ids...))
	return n
}

// watchOp watches the keys with prefix after revision from (or
// wire.WatchFromNow), held up to hold.
func watchOp(prefix string, from int64, hold wire.Time) wire.Op {
	return wire.Op{Kind: wire.OpWatch, Key: prefix, Delta: from, TTL: hold}
}

// watchKeyOp watches key alone.
func watchKeyOp(key string, from int64, hold wire.Time) wire.Op {
	op := watchOp(key, from, hold)
	op.Value = []byte{wire.WatchExactKey}
	return op
}

// sendWatch sends op from the watch client to member at, in the epoch it
// adopted, and returns the request's number.
func (n *loopback) sendWatch(at wire.NodeID, op wire.Op) uint64 {
	return n.sendWatchIn(at, n.replicas[at].Config().Epoch, op)
}

func (n *loopback) sendWatchIn(at wire.NodeID, epoch wire.Epoch, op wire.Op) uint64 {
	n.now++
	reqNo := uint64(n.now) // (unique: the clock only moves forward)
	n.deliver("w", []wire.Envelope{{To: at, Msg: &wire.ClientRequest{Volume: 0, Epoch: epoch, Client: watchClient, ReqNo: reqNo, Op: op}}})
	return reqNo
}

// watchReply returns the answer to watch reqNo, or nil while there is
// none; a second answer fails the test.
func (n *loopback) watchReply(reqNo uint64) *wire.ClientReply {
	n.t.Helper()
	var found *wire.ClientReply
	for _, e := range n.toClients {
		if rep, ok := e.Msg.(*wire.ClientReply); ok && e.To == "w" && rep.Client == watchClient && rep.ReqNo == reqNo {
			if found != nil {
				n.t.Fatalf("watch %d answered twice: %+v and %+v", reqNo, found, rep)
			}
			found = rep
		}
	}
	return found
}

// watchPage returns the page answering watch reqNo, described
// (describePage), "held" while it is unanswered, or the error code.
func (n *loopback) watchPage(reqNo uint64) string {
	n.t.Helper()
	rep := n.watchReply(reqNo)
	switch {
	case rep == nil:
		return "held"
	case rep.Err != wire.ErrNone:
		return rep.Err.String()
	}
	p, err := wire.DecodeWatchPage(rep.Result.Value)
	if err != nil {
		n.t.Fatalf("watch %d answered with %v", reqNo, err)
	}
	if rep.Result.SN != p.Through || !rep.Result.Found || rep.Result.Status != wire.StatusOK {
		n.t.Fatalf("watch %d: result %+v for a page through %d", reqNo, rep.Result, p.Through)
	}
	return describePage(p)
}

// describePage says what a page holds, as the cases write it: "through
// 7, compacted from 5, split into 1 at 6 (epoch 2, modulus 2): 6 put
// k=v until 11s (hash), 7 delete k, 8 expire e".
func describePage(p wire.WatchPage) string {
	s := fmt.Sprintf("through %d", p.Through)
	if p.Compacted {
		s += fmt.Sprintf(", compacted from %d", p.Oldest)
	}
	if !p.Split.IsZero() || p.SplitModulus != 0 {
		s += fmt.Sprintf(", split into %d at %d (epoch %d, modulus %d)", p.Split.Into, p.Split.SN, p.Split.Epoch, p.SplitModulus)
	}
	var events []string
	for _, e := range p.Events {
		ev := fmt.Sprintf("%d %v %s", e.SN, e.Kind, e.Key)
		if e.Kind == wire.WatchPut {
			ev += fmt.Sprintf("=%s", e.Value)
		}
		if e.Expires != 0 {
			ev += fmt.Sprintf(" until %v", time.Duration(e.Expires))
		}
		if e.Type == wire.TypeHash {
			ev += " (hash)"
		}
		events = append(events, ev)
	}
	if len(events) > 0 {
		s += ": " + strings.Join(events, ", ")
	}
	return s
}

// heldLink holds back the Forwards from one member to another until
// release delivers them.
type heldLink struct {
	n        *loopback
	from, to wire.NodeID
	held     []wire.Envelope
}

func holdForwards(n *loopback, from, to wire.NodeID) *heldLink {
	h := &heldLink{n: n, from: from, to: to}
	n.drop = func(f wire.NodeID, e wire.Envelope) bool {
		if _, ok := e.Msg.(*wire.Forward); ok && f == from && e.To == to {
			h.held = append(h.held, e)
			return true
		}
		return false
	}
	return h
}

func (h *heldLink) release() {
	h.n.drop = nil
	held := h.held
	h.held = nil
	h.n.deliver(h.from, held)
}

// inFlightToTail builds chain [h, m, t] with five committed updates, k0
// to k4 (SNs 1-5), and a sixth, k5 (SN 6), that h and m applied and the
// tail has not: m's Forward of it is held back until the link is
// released.
func inFlightToTail(t *testing.T, mutations Mutations) (*loopback, *heldLink) {
	n := watchChain(t, DefaultLimits, mutations, "h", "m", "t")
	for i := range uint64(5) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	link := holdForwards(n, "m", "t")
	n.write("h", 6, putOp("k5", "in flight"))
	if h, m, tail := n.replicas["h"], n.replicas["m"], n.replicas["t"]; h.AppliedSN() != 6 || m.AppliedSN() != 6 || tail.AppliedSN() != 5 || h.CommittedSN() != 5 {
		t.Fatalf("applied: h %d m %d t %d, h committed %d; want 6 6 5 and 5", h.AppliedSN(), m.AppliedSN(), tail.AppliedSN(), h.CommittedSN())
	}
	return n, link
}

// watchesOfCommittedUpdates runs the scenario of
// TestWatchDeliversOnlyCommittedUpdates and returns what went wrong.
func watchesOfCommittedUpdates(t *testing.T, mutations Mutations) []string {
	n, link := inFlightToTail(t, mutations)
	var wrong []string
	expect := func(what, got, want string) {
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s: %q, want %q", what, got, want))
		}
	}
	const committed = "through 5: 1 put k0=v, 2 put k1=v, 3 put k2=v, 4 put k3=v, 5 put k4=v"
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		expect(fmt.Sprintf("%s, from revision 0", id), n.watchPage(n.sendWatch(id, watchOp("k", 0, 0))), committed)
		expect(fmt.Sprintf("%s, from revision 5", id), n.watchPage(n.sendWatch(id, watchOp("k", 5, 0))), "through 5")
	}
	held := map[wire.NodeID]uint64{}
	for _, id := range []wire.NodeID{"h", "m"} {
		held[id] = n.sendWatch(id, watchOp("k", 5, wire.Second))
		expect(fmt.Sprintf("%s, held from revision 5 while the tail lacks SN 6", id), n.watchPage(held[id]), "held")
	}
	link.release() // the tail applies SN 6; its Ack reaches m, then h
	for _, id := range []wire.NodeID{"h", "m"} {
		expect(fmt.Sprintf("%s, held from revision 5, after the ack", id), n.watchPage(held[id]), "through 6: 6 put k5=in flight")
	}
	expect("t, from revision 5, after it applied SN 6", n.watchPage(n.sendWatch("t", watchOp("k", 5, 0))), "through 6: 6 put k5=in flight")
	return wrong
}

// CR §3: an update is committed once the tail processed it, and every
// member learns so from the acknowledgements. A member answers a watch
// with committed updates only: one the head and the middle applied but
// the tail has not is not delivered at either (a failure could still
// take it back), and a watch held for it is answered once the
// acknowledgement arrives.
func TestWatchDeliversOnlyCommittedUpdates(t *testing.T) {
	for _, w := range watchesOfCommittedUpdates(t, Mutations{}) {
		t.Error(w)
	}
}

// The scenario catches a member that delivers what it applied
// (WatchDeliversUncommitted) and one that resumes a revision late
// (WatchResumesLate).
func TestWatchMutationsAreCaught(t *testing.T) {
	mutationtest.Require(t)
	for name, m := range map[string]Mutations{
		"WatchDeliversUncommitted": {WatchDeliversUncommitted: true},
		"WatchResumesLate":         {WatchResumesLate: true},
	} {
		wrong := watchesOfCommittedUpdates(t, m)
		if len(wrong) == 0 {
			t.Errorf("%s: the scenario found nothing wrong", name)
		}
		t.Logf("%s: %q", name, wrong)
	}
}

// A member with nothing to send holds the watch: an update of a key it
// does not watch commits and it still waits (looking further); an update
// it watches commits and it answers at once; else its hold ends at a tick
// and it answers with how far it looked. A watch without a hold time is
// answered at once.
func TestWatchIsHeldUntilAMatchingUpdateCommitsOrItsHoldEnds(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "h", "m", "t")
	m := n.replicas["m"]
	n.write("h", 1, putOp("b/0", "v"))

	w := n.sendWatch("m", watchOp("a/", 1, wire.Second))
	if got := n.watchPage(w); got != "held" || m.Watches() != 1 {
		t.Fatalf("a watch with nothing to send: %q, %d held", got, m.Watches())
	}
	n.write("h", 2, putOp("b/1", "v"))
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("after a committed update of a key it does not watch: %q, want held", got)
	}
	n.write("h", 3, putOp("a/1", "x"))
	if got, want := n.watchPage(w), "through 3: 3 put a/1=x"; got != want || m.Watches() != 0 {
		t.Fatalf("after a committed update of a key it watches: %q, want %q (%d held)", got, want, m.Watches())
	}

	w = n.sendWatch("m", watchOp("a/", 3, wire.Second))
	heldAt := n.now // (the step that held it)
	n.write("h", 4, putOp("b/2", "v"))
	n.tick("m", heldAt+wire.Second-1-n.now)
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("a nanosecond before the hold ends: %q, want held", got)
	}
	n.tick("m", 1)
	if got, want := n.watchPage(w), "through 4"; got != want || m.Watches() != 0 {
		t.Fatalf("once the hold ended: %q, want %q (%d held)", got, want, m.Watches())
	}

	if got, want := n.watchPage(n.sendWatch("m", watchOp("a/", 3, 0))), "through 4"; got != want {
		t.Errorf("a watch without a hold time: %q, want %q", got, want)
	}
	// Held from a revision the member has not committed yet (another
	// member's answer): no page until it gets there.
	w = n.sendWatch("m", watchOp("a/", 9, wire.Second))
	n.write("h", 5, putOp("a/2", "y"))
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("a watch from revision 9 after SN 5 committed: %q, want held", got)
	}
	n.tick("m", wire.Second)
	if got, want := n.watchPage(w), "through 9"; got != want {
		t.Errorf("its hold ended: %q, want %q", got, want)
	}
}

// A member holds at most watchesMax watches; one more is answered at
// once with what there is (its watcher asks again), and the held ones
// are still served.
func TestWatchesHeldAreBounded(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "a")
	n.write("a", 1, putOp("k", "v"))
	first := n.sendWatch("a", watchOp("k", 1, wire.Second))
	for range watchesMax - 1 {
		n.sendWatch("a", watchOp("k", 1, wire.Second))
	}
	if got := n.replicas["a"].Watches(); got != watchesMax {
		t.Fatalf("%d watches held, want %d", got, watchesMax)
	}
	if got := n.watchPage(n.sendWatch("a", watchOp("k", 1, wire.Second))); got != "through 1" {
		t.Errorf("one watch more than the bound: %q, want through 1 at once", got)
	}
	n.write("a", 2, putOp("k", "w"))
	if got, want := n.watchPage(first), "through 2: 2 put k=w"; got != want || n.replicas["a"].Watches() != 0 {
		t.Errorf("the first held watch: %q, want %q (%d still held)", got, want, n.replicas["a"].Watches())
	}
}

// A page holds at most wire.WatchPageEvents events and, past its first
// event, wire.WatchPageBytes of them: its Through stops before the
// event that did not fit, where the next page starts.
func TestWatchPagesAreBounded(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "a")
	sn := uint64(0)
	write := func(key, value string) {
		// (Each write acknowledges the ones before: a client may have
		// only OutcomesPerClientMax unacknowledged.)
		sn++
		n.deliver("client", []wire.Envelope{{To: "a", Msg: &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 7, ReqNo: sn, AckedBelow: sn, Op: putOp(key, value)}}})
		if a := n.replicas["a"].AppliedSN(); a != wire.SN(sn) {
			t.Fatalf("applied %d after write %d", a, sn)
		}
	}
	for i := range wire.WatchPageEvents + 5 {
		write(fmt.Sprint("k", i), "v")
		write(fmt.Sprint("other", i), "v")
	}
	page := func(from wire.SN) wire.WatchPage {
		t.Helper()
		rep := n.watchReply(n.sendWatch("a", watchOp("k", int64(from), 0)))
		p, err := wire.DecodeWatchPage(rep.Result.Value)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := page(0)
	// (k999 at SN 1999, other999 examined too, k1000 at 2001 left out.)
	if len(p.Events) != wire.WatchPageEvents || p.Events[len(p.Events)-1].SN != 2*wire.WatchPageEvents-1 || p.Through != 2*wire.WatchPageEvents {
		t.Fatalf("a full page: %d events through %d, want %d through %d", len(p.Events), p.Through, wire.WatchPageEvents, 2*wire.WatchPageEvents)
	}
	if p = page(p.Through); len(p.Events) != 5 || p.Events[0].Key != fmt.Sprint("k", wire.WatchPageEvents) || p.Through != wire.SN(sn) {
		t.Fatalf("the next page: %d events from %s through %d, want 5 from k%d through %d", len(p.Events), p.Events[0].Key, p.Through, wire.WatchPageEvents, sn)
	}

	big := strings.Repeat("x", wire.WatchPageBytes/3)
	from := wire.SN(sn)
	for _, k := range []string{"k-a", "other", "k-b", "k-c", "k-d"} {
		write(k, big)
	}
	// k-a and k-b fit (with other, which does not match, between them);
	// k-c would pass the bound.
	if p = page(from); len(p.Events) != 2 || p.Events[1].Key != "k-b" || p.Through != from+3 {
		t.Errorf("a page of large values: %d events through %d, want k-a and k-b through %d", len(p.Events), p.Through, from+3)
	}
	huge := strings.Repeat("x", wire.WatchPageBytes+1)
	write("k-huge", huge)
	if p = page(wire.SN(sn - 1)); len(p.Events) != 1 || p.Through != wire.SN(sn) {
		t.Errorf("a value larger than a page: %d events through %d, want it alone through %d", len(p.Events), p.Through, sn)
	}
}

// A watch from now has nothing to wait for: it is answered at once with
// the member's committed revision, not one it only applied.
func TestWatchFromNowAnswersAtOnceWithTheCommittedRevision(t *testing.T) {
	n, link := inFlightToTail(t, Mutations{})
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		if got := n.watchPage(n.sendWatch(id, watchOp("", wire.WatchFromNow, wire.WatchHoldMax))); got != "through 5" || n.replicas[id].Watches() != 0 {
			t.Errorf("%s: a watch from now while SN 6 is in flight: %q, want through 5 (%d held)", id, got, n.replicas[id].Watches())
		}
	}
	link.release()
	if got := n.watchPage(n.sendWatch("h", watchKeyOp("k5", wire.WatchFromNow, wire.WatchHoldMax))); got != "through 6" {
		t.Errorf("h: a watch from now once SN 6 committed: %q, want through 6", got)
	}
}

// A member answers from its catch-up log: a revision whose next update
// left it (or was never in it: a member that took a snapshot) is
// answered Compacted, with the oldest revision it can watch from, which
// a watch from then serves.
func TestWatchFromBeforeTheLogIsCompacted(t *testing.T) {
	limits := DefaultLimits
	limits.CatchUpLogMax = 3
	n := watchChain(t, limits, Mutations{}, "h", "m", "t")
	for i := range uint64(10) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		for _, tc := range []struct {
			from int64
			want string
		}{
			{0, "through 0, compacted from 7"},
			{2, "through 2, compacted from 7"},
			{6, "through 6, compacted from 7"},
			{7, "through 10: 8 put k7=v, 9 put k8=v, 10 put k9=v"},
			{9, "through 10: 10 put k9=v"},
			{10, "through 10"},
		} {
			if got := n.watchPage(n.sendWatch(id, watchOp("", tc.from, 0))); got != tc.want {
				t.Errorf("%s: a watch from %d: %q, want %q", id, tc.from, got, tc.want)
			}
		}
	}

	// j joins with a snapshot and becomes the tail: its log starts
	// empty, at the snapshot's revision.
	n.replicas["j"] = NewReplica(ReplicaOptions{ID: "j", Volume: 0, Store: storage.NewMemory(), Limits: limits, FirstStart: true})
	n.configure(wiretest.Config(2, "j", "h", "m", "t"))
	if n.sent["j SnapshotChunk"] == 0 {
		t.Fatal("the joiner received no snapshot")
	}
	n.configure(wiretest.Config(3, "", "h", "m", "t", "j"))
	if got, want := n.watchPage(n.sendWatch("j", watchOp("", 9, wire.Second))), "through 9, compacted from 10"; got != want {
		t.Errorf("j: a watch from before its snapshot: %q, want %q", got, want)
	}
	w := n.sendWatch("j", watchOp("", 10, wire.Second))
	n.write("h", 11, putOp("k10", "v"))
	if got, want := n.watchPage(w), "through 11: 11 put k10=v"; got != want {
		t.Errorf("j: a watch from its snapshot's revision: %q, want %q", got, want)
	}
}

// Compacted names the revision a watcher reads the keys at and watches
// from: it must be committed. A head whose log holds only updates the
// tail has not processed (CatchUpLogMax smaller than what is in flight)
// names none: the first it holds may never commit, and if it fails
// before forwarding it, the chain commits another update at that
// revision, which a watch from there would skip. It waits, as for any
// update it cannot deliver yet, and answers Compacted once the oldest
// update it holds committed.
func TestWatchCompactedNamesOnlyACommittedRevision(t *testing.T) {
	limits := DefaultLimits
	limits.CatchUpLogMax = 2
	n := watchChain(t, limits, Mutations{}, "h", "m", "t")
	for i := range uint64(5) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	link := holdForwards(n, "m", "t")
	for i := range uint64(3) {
		n.write("h", 6+i, putOp(fmt.Sprint("k", 5+i), "in flight")) // SNs 6-8: h keeps 7 and 8
	}
	if got := n.watchPage(n.sendWatch("h", watchOp("", 3, 0))); got != "through 3" {
		t.Errorf("h, from revision 3 while SNs 6-8 are in flight: %q, want through 3 (not compacted from 6, uncommitted)", got)
	}
	w := n.sendWatch("h", watchOp("", 3, wire.Second))
	if got := n.watchPage(w); got != "held" {
		t.Errorf("h, held from revision 3: %q", got)
	}
	link.release()
	if got, want := n.watchPage(w), "through 3, compacted from 6"; got != want {
		t.Errorf("h, held from revision 3, once SN 8 committed: %q, want %q", got, want)
	}

	// Updates only the head applied, lost with it.
	link = holdForwards(n, "h", "m")
	for i := range uint64(3) {
		n.write("h", 9+i, putOp(fmt.Sprint("lost", i), "v")) // SNs 9-11, h keeps 10 and 11
	}
	if got := n.watchPage(n.sendWatch("h", watchOp("", 7, 0))); got != "through 7" {
		t.Errorf("h, from revision 7 while only it holds SNs 9-11: %q, want through 7 (not compacted from 9)", got)
	}
	n.drop = nil
	n.configure(wiretest.Config(2, "", "m", "t")) // h fails
	n.write("m", 12, putOp("k8", "committed"))
	// The chain's SN 9 is another update than h's: a watch from 9 would
	// skip it.
	if got, want := n.watchPage(n.sendWatch("t", watchOp("", 7, 0))), "through 9: 8 put k7=in flight, 9 put k8=committed"; got != want {
		t.Errorf("t, from revision 7, after h failed: %q, want %q", got, want)
	}
}

// A watch of a prefix delivers the updates of the keys it prefixes (the
// empty prefix: every key), a watch of one key (wire.WatchExactKey) the
// updates of that key alone; an update that changed nothing (a delete
// of an absent key) is no event.
func TestWatchMatchesItsPrefixOrItsKey(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "a")
	for i, op := range []wire.Op{
		putOp("cfg/a", "1"), putOp("cfg/ab", "2"), putOp("cfg", "3"), putOp("cfh/a", "4"), putOp("other", "5"),
		putOp("cfg/a", "6"), {Kind: wire.OpDelete, Key: "cfg/ab"}, {Kind: wire.OpDelete, Key: "cfg/zz"},
	} {
		n.write("a", uint64(i+1), op)
	}
	for _, tc := range []struct {
		op   wire.Op
		want string
	}{
		{watchOp("cfg/a", 0, 0), "through 8: 1 put cfg/a=1, 2 put cfg/ab=2, 6 put cfg/a=6, 7 delete cfg/ab"},
		{watchKeyOp("cfg/a", 0, 0), "through 8: 1 put cfg/a=1, 6 put cfg/a=6"},
		{watchOp("cfg", 0, 0), "through 8: 1 put cfg/a=1, 2 put cfg/ab=2, 3 put cfg=3, 6 put cfg/a=6, 7 delete cfg/ab"},
		{watchKeyOp("cfg", 0, 0), "through 8: 3 put cfg=3"},
		{watchOp("cfg/", 2, 0), "through 8: 6 put cfg/a=6, 7 delete cfg/ab"},
		{watchOp("", 0, 0), "through 8: 1 put cfg/a=1, 2 put cfg/ab=2, 3 put cfg=3, 4 put cfh/a=4, 5 put other=5, 6 put cfg/a=6, 7 delete cfg/ab"},
		{watchOp("zzz", 0, 0), "through 8"},
		{watchKeyOp("cfg/zz", 0, 0), "through 8"},
		{watchKeyOp("cfg/", 0, 0), "through 8"},
	} {
		if got := n.watchPage(n.sendWatch("a", tc.op)); got != tc.want {
			t.Errorf("a watch of %q (flags %x): %q, want %q", tc.op.Key, tc.op.Value, got, tc.want)
		}
	}
	// Held, a watch of one key waits through the updates of the keys it
	// prefixes.
	w := n.sendWatch("a", watchKeyOp("cfg/a", 8, wire.Second))
	n.write("a", 9, putOp("cfg/ab", "9"))
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("a watch of cfg/a after a put of cfg/ab: %q, want held", got)
	}
	n.write("a", 10, wire.Op{Kind: wire.OpDelete, Key: "cfg/a"})
	if got, want := n.watchPage(w), "through 10: 10 delete cfg/a"; got != want {
		t.Errorf("a watch of cfg/a after its delete: %q, want %q", got, want)
	}
}

// What an update did is its event's kind: a put (with the key's value,
// deadline and type after it, a changed deadline alone included), a
// client's delete, and an expiry, the head's reclaim (ADR 28: the
// replicated delete of no client, wire.NoClient).
func TestWatchEventsOfPutsDeletesAndExpiries(t *testing.T) {
	c := &serverClock{version: ExpiryVersion, offsetMax: 100 * wire.Millisecond, trustedUntil: 1 << 62}
	r, do := expiryReplica(t, c)
	const start = 10 * wire.Second
	fields := kv.EncodeFields([]kv.Field{{Name: "f", Value: []byte("v")}})
	for _, op := range []wire.Op{
		{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second},
		{Kind: wire.OpHashSet, Key: "h", Value: fields},
		{Kind: wire.OpDelete, Key: "k"},
		{Kind: wire.OpDelete, Key: "k"}, // (absent: changes nothing)
		{Kind: wire.OpExpire, Key: "h", TTL: 5 * wire.Second},
		{Kind: wire.OpPut, Key: "gone", Value: []byte("v"), TTL: wire.Second},
	} {
		if rep := do(start, op); rep.Err != wire.ErrNone {
			t.Fatalf("%v: %v", op, rep.Err)
		}
	}
	r.Reclaim(start + wire.Second + 100*wire.Millisecond)
	if r.AppliedSN() != 7 {
		t.Fatalf("applied %d after the reclaim, want the expiry of gone at 7", r.AppliedSN())
	}
	rep := do(start+2*wire.Second, watchOp("", 0, 0))
	page, err := wire.DecodeWatchPage(rep.Result.Value)
	if rep.Err != wire.ErrNone || err != nil {
		t.Fatalf("the watch: %v, %v", rep.Err, err)
	}
	want := fmt.Sprintf("through 7: 1 put k=v until 11s, 2 put h=%s (hash), 3 delete k, 5 put h=%s until 15s (hash), 6 put gone=v until 11s, 7 expire gone", fields, fields)
	if got := describePage(page); got != want {
		t.Errorf("events\n%q, want\n%q", got, want)
	}
}

// The split of a volume (split.go) is a point of its history: a page
// names it once its Through reaches the point (the moved keys' updates
// from there on are the new volume's), not while the point is applied
// but uncommitted; a watch held across it is answered when it commits,
// though the marker is no event.
func TestWatchReportsTheSplitOnceThroughPassesIt(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "h", "m", "t")
	for i := range uint64(4) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	link := holdForwards(n, "m", "t")
	split := wiretest.Config(2, "", "h", "m", "t")
	split.Split = wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}
	n.configure(split) // h sequences the marker at SN 5; it reaches m, not t
	if m := n.replicas["m"]; m.AppliedSN() != 5 || m.CommittedSN() != 4 || n.replicas["t"].AppliedSN() != 4 {
		t.Fatalf("m applied %d, committed %d; t applied %d; want 5, 4, 4", m.AppliedSN(), m.CommittedSN(), n.replicas["t"].AppliedSN())
	}
	if got, want := n.watchPage(n.sendWatch("m", watchOp("", 0, 0))), "through 4: 1 put k0=v, 2 put k1=v, 3 put k2=v, 4 put k3=v"; got != want {
		t.Errorf("m, before the split committed: %q, want %q", got, want)
	}
	w := n.sendWatch("m", watchOp("", 4, wire.Second))
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("m, held from revision 4: %q", got)
	}
	link.release()
	const passed = "through 5, split into 1 at 5 (epoch 2, modulus 2)"
	if got := n.watchPage(w); got != passed {
		t.Errorf("m, held from revision 4, once the split committed: %q, want %q", got, passed)
	}
	if got, want := n.watchPage(n.sendWatch("t", watchOp("", 2, 0))), passed+": 3 put k2=v, 4 put k3=v"; got != want {
		t.Errorf("t, from revision 2: %q, want %q", got, want)
	}
	// The updates after the split are the kept keys' alone.
	var kept string
	for i := range 10 {
		if k := fmt.Sprint("x", i); split.Split.Owns(k) {
			kept = k
			break
		}
	}
	n.write("h", 5, putOp(kept, "after"))
	if got, want := n.watchPage(n.sendWatch("h", watchOp("", 4, 0))), "through 6, split into 1 at 5 (epoch 2, modulus 2): 6 put "+kept+"=after"; got != want {
		t.Errorf("h, from revision 4 after a write: %q, want %q", got, want)
	}
}

// splitVolume returns the loopback of a chain of one, a, that split
// volume 0 into volume 1 at SN 5 (epoch 2, modulus 2) after four updates
// of k0-k3, and a key volume 0 keeps.
func splitVolume(t *testing.T) (*loopback, wire.Split, string) {
	n := watchChain(t, DefaultLimits, Mutations{}, "a")
	for i := range uint64(4) {
		n.write("a", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	c := wiretest.Config(2, "", "a")
	c.Split = wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}
	n.configure(c)
	if a := n.replicas["a"]; a.CommittedSN() != 5 || a.Status().Split != (wire.SplitPoint{Into: 1, SN: 5, Epoch: 2}) {
		t.Fatalf("after the split: committed %d, split %+v", a.CommittedSN(), a.Status().Split)
	}
	for i := range 10 {
		if k := fmt.Sprint("x", i); c.Split.Owns(k) {
			return n, c.Split, k
		}
	}
	t.Fatal("no key of x0-x9 stays in volume 0")
	return nil, wire.Split{}, ""
}

// Every page whose Through is at or past the split point names it
// (wire.WatchPage.Split), also one that looked no further than the
// revision asked for: a watch from now, and a watch from the point whose
// hold ended. A watcher that starts after the split with the volumes it
// knew before (a watch's volumes are fixed when it starts, from the
// keyspace list the client holds then, which may predate the split)
// learns from it to follow the new volume; without it, it would not
// until a key volume 0 keeps changes, and miss every update of the moved
// keys meanwhile.
func TestWatchPagesPastTheSplitNameIt(t *testing.T) {
	n, _, _ := splitVolume(t)
	const past = "through 5, split into 1 at 5 (epoch 2, modulus 2)"
	if got := n.watchPage(n.sendWatch("a", watchOp("", wire.WatchFromNow, wire.Second))); got != past {
		t.Errorf("a watch from now: %q, want %q", got, past)
	}
	w := n.sendWatch("a", watchOp("", 5, wire.Second))
	n.tick("a", wire.Second)
	if got := n.watchPage(w); got != past {
		t.Errorf("a watch from the split point, its hold ended: %q, want %q", got, past)
	}
	if got := n.watchPage(n.sendWatch("a", watchOp("", 4, 0))); got != past {
		t.Errorf("a watch from before the split point: %q, want %q", got, past)
	}
}

// The split ends a hold only for the watch that passes its point: one
// from at or past it is held, as any other, through the commits of
// keys it does not watch (else after a split every commit of the volume
// would answer every watch held on it, and long polls would become a
// poll per update), and it is answered by its own events or its hold's
// end, naming the split.
func TestWatchFromPastTheSplitIsHeld(t *testing.T) {
	n, _, kept := splitVolume(t)
	w := n.sendWatch("a", watchOp("zzz", 5, wire.Second))
	n.write("a", 5, putOp(kept, "v"))
	if got := n.watchPage(w); got != "held" {
		t.Fatalf("a watch from the split point after a commit it does not watch: %q, want held", got)
	}
	n.tick("a", wire.Second)
	if got, want := n.watchPage(w), "through 6, split into 1 at 5 (epoch 2, modulus 2)"; got != want {
		t.Errorf("its hold ended: %q, want %q", got, want)
	}
	w = n.sendWatch("a", watchOp(kept, 6, wire.Second))
	n.write("a", 6, putOp(kept, "w"))
	if got, want := n.watchPage(w), "through 7, split into 1 at 5 (epoch 2, modulus 2): 7 put "+kept+"=w"; got != want {
		t.Errorf("a watch of the kept key: %q, want %q", got, want)
	}
}

// A new configuration ends every held watch: each member answers with
// what it has (the watcher asks again in the new epoch), whether it stays
// a member or leaves the chain.
func TestWatchesHeldAreAnsweredOnANewConfiguration(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "h", "m", "t")
	for i := range uint64(3) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v"))
	}
	held := map[wire.NodeID]uint64{}
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		held[id] = n.sendWatch(id, watchOp("z", 3, wire.Second))
		n.sendWatch(id, watchKeyOp("k0", 3, wire.Second))
		if r := n.replicas[id]; r.Watches() != 2 {
			t.Fatalf("%s holds %d watches, want 2", id, r.Watches())
		}
	}
	n.configure(wiretest.Config(2, "", "h", "m")) // t leaves the chain
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		if got := n.watchPage(held[id]); got != "through 3" || n.replicas[id].Watches() != 0 {
			t.Errorf("%s after the new configuration: %q, want through 3 (%d held)", id, got, n.replicas[id].Watches())
		}
		if rep := n.watchReply(held[id]); rep != nil && rep.Epoch != 1 {
			t.Errorf("%s answered in epoch %d, want the epoch the watch was held in, 1", id, rep.Epoch)
		}
	}
	if rep := n.watchReply(n.sendWatchIn("h", 1, watchOp("z", 3, wire.Second))); rep == nil || rep.Err != wire.ErrWrongEpoch || rep.Config == nil {
		t.Errorf("a watch in the old epoch: %+v, want ErrWrongEpoch with the configuration", rep)
	}
}

// Only a running member answers: a joining server and a replica restored
// from disk, wedged until the master's next configuration, answer
// ErrUnavailable; a malformed watch is refused.
func TestWatchRefusals(t *testing.T) {
	n := watchChain(t, DefaultLimits, Mutations{}, "h", "t")
	n.write("h", 1, putOp("k", "v"))
	n.replicas["j"] = NewReplica(ReplicaOptions{ID: "j", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	n.configure(wiretest.Config(2, "j", "h", "t"))
	if got := n.watchPage(n.sendWatch("j", watchOp("", 0, 0))); got != "unavailable" {
		t.Errorf("the joining server: %q, want ErrUnavailable", got)
	}
	n.restart("h", DefaultLimits, Mutations{})
	if got := n.watchPage(n.sendWatch("h", watchOp("", 0, 0))); got != "unavailable" {
		t.Errorf("a replica restored from disk: %q, want ErrUnavailable", got)
	}
	for _, op := range []wire.Op{watchOp("", 0, wire.WatchHoldMax+1), watchKeyOp("", 0, 0), watchOp("", -2, 0), watchOp(wire.ReservedKeyPrefix, 0, 0)} {
		if got := n.watchPage(n.sendWatch("t", op)); got != "bad-request" {
			t.Errorf("%+v: %q, want ErrBadRequest", op, got)
		}
	}
}
