package chain

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// Scenarios of a role move (placement's MoveToTail, master's
// CmdMoveToTail): a member leaves its place and joins again at the tail
// with the state it holds. The tail brings it up to date with a catch-up,
// even when the member had received updates the tail had not.

// threeMembers builds chain [h, m, t] in epoch 1 with five updates on
// every member.
func threeMembers(t *testing.T) *loopback {
	n := newLoopback(t)
	for _, id := range []wire.NodeID{"h", "m", "t"} {
		n.replicas[id] = NewReplica(ReplicaOptions{ID: id, Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	}
	n.configure(wiretest.Config(1, "", "h", "m", "t"))
	for i := range uint64(5) {
		n.write("h", i+1, putOp(fmt.Sprint("k", i), "v1"))
	}
	return n
}

// roleMoveChain is threeMembers and one more update that reaches h and m
// but not t: the member moved holds an update its new predecessor lacks.
func roleMoveChain(t *testing.T) *loopback {
	n := threeMembers(t)
	n.drop = func(from wire.NodeID, e wire.Envelope) bool { return from == "m" && e.To == "t" }
	n.write("h", 6, putOp("k6", "in flight to t"))
	n.drop = nil
	if a, b := n.replicas["m"].AppliedSN(), n.replicas["t"].AppliedSN(); a != 6 || b != 5 {
		t.Fatalf("applied: m %d, t %d; want 6 and 5", a, b)
	}
	return n
}

// moveConfig is the master's role move: members, and moved joining
// again.
func moveConfig(epoch wire.Epoch, moved wire.NodeID, chain ...wire.NodeID) wire.Config {
	c := wiretest.Config(epoch, moved, chain...)
	c.Moved = true
	return c
}

// adoptInOrder has the replicas adopt c one by one in the order given,
// each delivering what it sends at once (a message for an epoch its
// receiver has not adopted yet is dropped, and repeated later).
func (n *loopback) adoptInOrder(c wire.Config, ids ...wire.NodeID) {
	for _, id := range ids {
		n.now++
		_, out := n.replicas[id].Adopt(n.now, c)
		n.deliver(id, out)
	}
}

// The middle member m moves to the tail while it holds SN 6 and the tail
// does not: the tail waits for h's resend of SN 6 instead of sending m a
// snapshot, then answers m's offer with a catch-up. After the promotion m
// is the tail, t a middle member, and writes go through.
func TestRoleMoveCatchesUpAMemberAheadOfTheTail(t *testing.T) {
	n := roleMoveChain(t)
	clear(n.sent)
	// t adopts first (its SyncRequest to h, still in epoch 1, is lost),
	// then m offers SN 6 to t, which has 5 and has heard nothing from h.
	n.adoptInOrder(moveConfig(2, "m", "h", "t"), "t", "m", "h")
	if n.sent["m SnapshotChunk"] != 0 || n.sent["m SyncReply"] != 0 {
		t.Fatalf("before t synced with h: %d snapshot chunks, %d replies to m; want none", n.sent["m SnapshotChunk"], n.sent["m SyncReply"])
	}
	n.tick("t", DefaultLimits.SyncRetryInterval) // t syncs; h resends SN 6; t answers m
	tail, moved := n.replicas["t"], n.replicas["m"]
	if n.sent["m SnapshotChunk"] != 0 || !moved.Installed() || !tail.JoinerReady() {
		t.Fatalf("%d snapshot chunks; m installed %v, t reports it ready %v; want a catch-up, installed and ready",
			n.sent["m SnapshotChunk"], moved.Installed(), tail.JoinerReady())
	}
	if d := sameState(tail, moved); d != "" {
		t.Fatalf("m differs from t after the catch-up: %s", d)
	}
	n.configure(wiretest.Config(3, "", "h", "t", "m"))
	if !moved.IsTail() || tail.IsTail() {
		t.Fatalf("after the promotion m tail %v, t tail %v", moved.IsTail(), tail.IsTail())
	}
	n.write("h", 7, putOp("k7", "after"))
	for _, id := range []wire.NodeID{"h", "t"} {
		if d := sameState(n.replicas[id], moved); d != "" {
			t.Errorf("%s differs from the new tail: %s", id, d)
		}
		if errs := n.replicas[id].ProtocolErrors(); len(errs) > 0 {
			t.Errorf("%s logged protocol errors: %q", id, errs)
		}
	}
}

// The head moves to the tail. With everything it sequenced forwarded, a
// catch-up; with an update it never forwarded (lost with the old head
// role, never answered), its history differs from the chain's and it
// gets a snapshot without that update.
func TestRoleMoveOfTheHead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unshipped bool
	}{{"everything forwarded", false}, {"an update not forwarded", true}} {
		t.Run(tc.name, func(t *testing.T) {
			n := threeMembers(t)
			if tc.unshipped {
				n.drop = func(from wire.NodeID, e wire.Envelope) bool { return from == "h" && e.To == "m" }
				n.write("h", 6, putOp("lost", "only on h"))
				n.drop = nil
			}
			clear(n.sent)
			n.configure(moveConfig(2, "h", "m", "t"))
			n.write("m", 7, putOp("k7", "new head"))
			for range 3 {
				n.tick("h", DefaultLimits.SyncRetryInterval)
			}
			moved := n.replicas["h"]
			if chunks := n.sent["h SnapshotChunk"]; (chunks > 0) != tc.unshipped {
				t.Errorf("%d snapshot chunks to the old head; want some only if it held an update the chain lacks", chunks)
			}
			if !moved.Installed() {
				t.Fatal("the old head did not install the tail's state")
			}
			if d := sameState(n.replicas["t"], moved); d != "" {
				t.Fatalf("the old head differs from the tail: %s", d)
			}
			if moved.store.Get("lost").Exists {
				t.Fatal("the update only the old head had survived its move")
			}
		})
	}
}

// While a member moves, the tail applies nothing the member lacks: a
// write that arrives then waits on the head's Sent, unanswered, until the
// member is the tail; so the member holds every answered update
// throughout, and when every other member fails the master makes it the
// only member, which it may become.
func TestRoleMoveKeepsTheMovedMemberACopyOfEverythingAnswered(t *testing.T) {
	n := roleMoveChain(t)
	n.configure(moveConfig(2, "m", "h", "t"))
	tail, moved := n.replicas["t"], n.replicas["m"]
	if !moved.Installed() || tail.AppliedSN() != 6 {
		t.Fatalf("m installed %v, t applied %d; want the catch-up done at 6", moved.Installed(), tail.AppliedSN())
	}
	clear(n.sent)
	n.write("h", 7, putOp("k7", "during the move"))
	if n.sent["client ClientReply"] != 0 || tail.AppliedSN() != 6 || moved.AppliedSN() != 6 {
		t.Fatalf("a write during the move: %d replies, t applied %d, m %d; want none answered, both at 6",
			n.sent["client ClientReply"], tail.AppliedSN(), moved.AppliedSN())
	}
	n.configure(wiretest.Config(3, "", "h", "t", "m"))
	if n.sent["client ClientReply"] != 1 || moved.AppliedSN() != 7 {
		t.Fatalf("after the promotion: %d replies, m applied %d; want the write answered by m at 7", n.sent["client ClientReply"], moved.AppliedSN())
	}

	// The same move again, and this time h and t fail before m is the
	// tail: the master makes m the only member.
	n = roleMoveChain(t)
	n.configure(moveConfig(2, "m", "h", "t"))
	n.write("h", 7, putOp("k7", "during the move"))
	moved = n.replicas["m"]
	delete(n.replicas, "h")
	delete(n.replicas, "t")
	if v := n.configure(wiretest.Config(3, "", "m")); v["m"] != AdoptionMember {
		t.Fatalf("the moved member named the only member: %s, want member", v["m"])
	}
	n.write("m", 8, putOp("k8", "after"))
	if !moved.IsTail() || moved.AppliedSN() != 7 || moved.store.Get("k6").Value == nil {
		t.Fatalf("m tail %v, applied %d; want the only member with everything answered (1..6) and the new write", moved.IsTail(), moved.AppliedSN())
	}
}
