package chain

import (
	"fmt"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/mutation/mutationtest"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// Scenarios of catch-up (catchup.go): a server comes back with the state
// it kept and the tail chooses between the updates it missed and a
// snapshot. Replicas exchange messages through a loopback net; the
// tests play the master by handing out configurations.

// loopback delivers the messages of a few replicas to each other, in
// order, until none is left; it counts what went to each node.
type loopback struct {
	t        *testing.T
	replicas map[wire.NodeID]*Replica
	now      wire.Time
	// drop, if set, loses the messages it returns true for.
	drop func(from wire.NodeID, e wire.Envelope) bool
	// sent counts messages by destination and type name.
	sent map[string]int
	// toClients are the messages to nodes that are no replica (clients),
	// in the order sent.
	toClients []wire.Envelope
}

func newLoopback(t *testing.T) *loopback {
	return &loopback{t: t, replicas: map[wire.NodeID]*Replica{}, sent: map[string]int{}}
}

func (n *loopback) deliver(from wire.NodeID, out []wire.Envelope) {
	type msg struct {
		from wire.NodeID
		e    wire.Envelope
	}
	var queue []msg
	for _, e := range out {
		queue = append(queue, msg{from, e})
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if n.drop != nil && n.drop(m.from, m.e) {
			continue
		}
		n.sent[string(m.e.To)+" "+wire.MessageName(m.e.Msg)]++
		r := n.replicas[m.e.To]
		if r == nil {
			n.toClients = append(n.toClients, m.e) // a client
			continue
		}
		n.now++
		for _, e := range r.Step(n.now, m.from, m.e.Msg).Messages {
			queue = append(queue, msg{m.e.To, e})
		}
		if err := r.CheckInvariants(); err != nil {
			n.t.Fatalf("after %s from %s: %v", wire.MessageName(m.e.Msg), m.from, err)
		}
	}
}

// configure has every replica adopt c: the ones it leaves out, then the
// members in chain order and the joining server last, so each
// SyncRequest finds its predecessor in the new epoch.
func (n *loopback) configure(c wire.Config) map[wire.NodeID]Adoption {
	order := func(id wire.NodeID) int {
		if id == c.Joining {
			return len(c.Chain) + 1
		}
		return c.Index(id) + 1 // 0: left out
	}
	var ids []wire.NodeID
	for id := range n.replicas {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b wire.NodeID) int { return order(a) - order(b) })
	verdicts := map[wire.NodeID]Adoption{}
	for _, id := range ids {
		n.now++
		v, out := n.replicas[id].Adopt(n.now, c)
		verdicts[id] = v
		n.deliver(id, out)
	}
	return verdicts
}

// write has the head apply one client update.
func (n *loopback) write(head wire.NodeID, reqNo uint64, op wire.Op) {
	r := n.replicas[head]
	n.now++
	req := &wire.ClientRequest{Volume: 0, Epoch: r.Config().Epoch, Client: 7, ReqNo: reqNo, AckedBelow: 1, Op: op}
	n.deliver("client", []wire.Envelope{{To: head, Msg: req}})
}

func putOp(key, value string) wire.Op {
	return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}
}

// restart stands for a server's process ending and a new one restoring
// the replica from its store.
func (n *loopback) restart(id wire.NodeID, limits Limits, mutations Mutations) *Replica {
	old := n.replicas[id]
	r := RestoreReplica(ReplicaOptions{ID: id, Volume: 0, Store: old.store, Limits: limits, Mutations: mutations})
	if r == nil || !r.Wedged() {
		n.t.Fatalf("%s restored as %v, want a wedged replica", id, r)
	}
	n.replicas[id] = r
	return r
}

// sameState reports how two replicas' objects and exactly-once records
// differ ("" if they do not).
func sameState(a, b *Replica) string {
	if a.AppliedSN() != b.AppliedSN() {
		return fmt.Sprintf("applied %d and %d", a.AppliedSN(), b.AppliedSN())
	}
	if sa, sb := fmt.Sprint(a.store.Snapshot()), fmt.Sprint(b.store.Snapshot()); sa != sb {
		return fmt.Sprintf("objects\n%s\n%s", sa, sb)
	}
	if sa, sb := fmt.Sprint(a.store.Sessions()), fmt.Sprint(b.store.Sessions()); sa != sb {
		return fmt.Sprintf("sessions\n%s\n%s", sa, sb)
	}
	return ""
}

// restartedTail builds the common start: chain [t, j] in epoch 1 with
// five updates on both, j restarted with its data and removed (epoch 2)
// while t applied three more, a deletion among them; then epoch 3 adds j
// back as the joining server. tLimits are t's limits.
func restartedTail(t *testing.T, tLimits Limits, mutations Mutations) *loopback {
	n := newLoopback(t)
	n.replicas["t"] = NewReplica(ReplicaOptions{ID: "t", Volume: 0, Store: storage.NewMemory(), Limits: tLimits, FirstStart: true, Mutations: mutations})
	n.replicas["j"] = NewReplica(ReplicaOptions{ID: "j", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	n.configure(wiretest.Config(1, "", "t", "j"))
	for i := range uint64(5) {
		n.write("t", i+1, putOp(fmt.Sprint("k", i), "v1"))
	}
	if n.replicas["j"].AppliedSN() != 5 {
		t.Fatalf("j applied %d of 5", n.replicas["j"].AppliedSN())
	}
	n.restart("j", DefaultLimits, Mutations{})
	if v := n.configure(wiretest.Config(2, "", "t")); v["j"] != AdoptionRetained || v["t"] != AdoptionMember {
		t.Fatalf("removing the restarted server: %v, want t member and j retained", v)
	}
	n.write("t", 6, putOp("k0", "v2"))
	n.write("t", 7, wire.Op{Kind: wire.OpDelete, Key: "k1"})
	n.write("t", 8, putOp("k9", "v2"))
	return n
}

// A server that restarted with its data misses three updates: the tail
// sends those three, not a snapshot, and the joiner ends with the tail's
// objects (the deletion included) and exactly-once records.
func TestCatchUpSendsOnlyTheMissedUpdates(t *testing.T) {
	n := restartedTail(t, DefaultLimits, Mutations{})
	clear(n.sent)
	if v := n.configure(wiretest.Config(3, "j", "t")); v["j"] != AdoptionJoiner {
		t.Fatalf("adding j back: %v, want joiner", v)
	}
	tail, joiner := n.replicas["t"], n.replicas["j"]
	if n.sent["j SnapshotChunk"] != 0 || n.sent["j Forward"] != 1 {
		t.Fatalf("tail sent %d snapshot chunks and %d forwards, want none and one", n.sent["j SnapshotChunk"], n.sent["j Forward"])
	}
	if !joiner.Installed() || !tail.JoinerReady() {
		t.Fatalf("joiner installed %v, ready %v: want both", joiner.Installed(), tail.JoinerReady())
	}
	if d := sameState(tail, joiner); d != "" {
		t.Fatalf("joiner differs from the tail: %s", d)
	}
	if o := joiner.store.Get("k1"); o.Exists {
		t.Fatal("the deletion of k1 did not reach the joiner")
	}
	// The joiner becomes the tail and answers a retried request from its
	// records, which the catch-up brought.
	n.configure(wiretest.Config(4, "", "t", "j"))
	if !joiner.IsTail() || joiner.sessions.sessions[7].outcomes[8].SN != 8 {
		t.Fatalf("new tail %v with outcome %+v for request 8, want the tail with SN 8", joiner.IsTail(), joiner.sessions.sessions[7].outcomes[8])
	}
	n.write("t", 9, putOp("k10", "v3"))
	if d := sameState(tail, joiner); d != "" {
		t.Fatalf("after the hand-off the new tail differs: %s", d)
	}
}

// The tail's catch-up log no longer reaches back to the joiner's SN: a
// snapshot, chosen without anyone asking.
func TestCatchUpFallsBackToSnapshotWhenLogTrimmed(t *testing.T) {
	limits := DefaultLimits
	limits.CatchUpLogMax = 2 // holds SNs 7 and 8; the joiner is at 5
	n := restartedTail(t, limits, Mutations{})
	n.configure(wiretest.Config(3, "j", "t"))
	if n.sent["j SnapshotChunk"] == 0 {
		t.Fatal("tail whose log starts after the joiner's SN sent no snapshot")
	}
	if d := sameState(n.replicas["t"], n.replicas["j"]); d != "" || !n.replicas["t"].JoinerReady() {
		t.Fatalf("joiner after the snapshot: %q, ready %v", d, n.replicas["t"].JoinerReady())
	}
}

// divergedHead builds a head j that applied an update (SN 6) no other
// member received before it failed, while the tail t, alone in epoch 2,
// sequenced a different SN 6 and 7; j restarted with its data and comes
// back in epoch 3.
func divergedHead(t *testing.T, mutations Mutations) *loopback {
	n := newLoopback(t)
	n.replicas["j"] = NewReplica(ReplicaOptions{ID: "j", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	n.replicas["t"] = NewReplica(ReplicaOptions{ID: "t", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true, Mutations: mutations})
	n.configure(wiretest.Config(1, "", "j", "t"))
	for i := range uint64(5) {
		n.write("j", i+1, putOp(fmt.Sprint("k", i), "v1"))
	}
	n.drop = func(from wire.NodeID, e wire.Envelope) bool { return from == "j" && e.To == "t" }
	n.write("j", 6, putOp("lost", "only on j"))
	n.drop = nil
	if n.replicas["j"].AppliedSN() != 6 || n.replicas["t"].AppliedSN() != 5 {
		t.Fatalf("applied: j %d, t %d; want 6 and 5", n.replicas["j"].AppliedSN(), n.replicas["t"].AppliedSN())
	}
	n.restart("j", DefaultLimits, Mutations{})
	n.configure(wiretest.Config(2, "", "t"))
	n.write("t", 7, putOp("k0", "v2"))
	n.write("t", 8, putOp("k8", "v2"))
	n.configure(wiretest.Config(3, "j", "t"))
	return n
}

// A server whose history diverged (a head that failed before forwarding
// its last update) offers SN 6, which the tail holds, but the tail's SN 6
// was sequenced in another epoch: a snapshot, and the update only the
// failed head had is gone from it.
func TestCatchUpRefusesDivergedHistory(t *testing.T) {
	n := divergedHead(t, Mutations{})
	if n.sent["j SnapshotChunk"] == 0 {
		t.Fatal("tail let a server with a diverged history catch up")
	}
	if d := sameState(n.replicas["t"], n.replicas["j"]); d != "" {
		t.Fatalf("joiner after the snapshot: %s", d)
	}
	if n.replicas["j"].store.Get("lost").Exists {
		t.Fatal("the update only the failed head applied survived the snapshot")
	}
}

// The check matters: a tail that ignores histories (CatchUpAnyHistory)
// leaves the diverged server with an object no other member has.
func TestCatchUpAnyHistoryMutationDiverges(t *testing.T) {
	mutationtest.Require(t)
	n := divergedHead(t, Mutations{CatchUpAnyHistory: true})
	if n.sent["j SnapshotChunk"] != 0 {
		t.Fatal("the mutation still sent a snapshot")
	}
	if d := sameState(n.replicas["t"], n.replicas["j"]); d == "" {
		t.Fatal("the mutation left the joiner equal to the tail; the scenario shows nothing")
	}
}

// A joining server ahead of the tail (its extra updates were never
// forwarded, and the tail applied nothing since) gets a snapshot.
func TestCatchUpRefusesJoinerAheadOfTail(t *testing.T) {
	n := newLoopback(t)
	n.replicas["j"] = NewReplica(ReplicaOptions{ID: "j", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	n.replicas["t"] = NewReplica(ReplicaOptions{ID: "t", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true})
	n.configure(wiretest.Config(1, "", "j", "t"))
	n.write("j", 1, putOp("a", "1"))
	n.drop = func(from wire.NodeID, e wire.Envelope) bool { return from == "j" && e.To == "t" }
	n.write("j", 2, putOp("b", "only on j"))
	n.drop = nil
	n.restart("j", DefaultLimits, Mutations{})
	n.configure(wiretest.Config(2, "", "t"))
	n.configure(wiretest.Config(3, "j", "t"))
	if n.sent["j SnapshotChunk"] == 0 || n.replicas["j"].store.Get("b").Exists {
		t.Fatalf("joiner ahead of the tail: %d snapshot chunks, b kept %v; want a snapshot without b",
			n.sent["j SnapshotChunk"], n.replicas["j"].store.Get("b").Exists)
	}
}

// A removed replica keeps its state only while no other server joins in
// its place; a joiner whose snapshot was cut short offers nothing.
func TestRetainedStateDroppedWhenAnotherServerJoins(t *testing.T) {
	n := restartedTail(t, DefaultLimits, Mutations{})
	j := n.replicas["j"]
	if v, _ := j.Adopt(100, wiretest.Config(3, "x", "t")); v != AdoptionRemoved || j.AppliedSN() != 0 || len(j.store.Snapshot()) != 0 {
		t.Fatalf("another server joins: %s, applied %d, %d objects; want removed and empty", v, j.AppliedSN(), len(j.store.Snapshot()))
	}
}

// A joining server that lost a snapshot chunk holds a partial copy: it
// asks again without offering it, and ends with a whole snapshot.
func TestPartialSnapshotIsNeverOffered(t *testing.T) {
	limits := DefaultLimits
	limits.CatchUpLogMax = 1
	limits.SnapshotChunkObjectsMax = 2
	n := restartedTail(t, limits, Mutations{})
	lost := false
	var offers []wire.Epoch // AppliedEpoch of j's SyncRequests once the chunk was lost
	n.drop = func(from wire.NodeID, e wire.Envelope) bool {
		switch m := e.Msg.(type) {
		case *wire.SnapshotChunk:
			if m.Seq == 1 && !lost {
				lost = true
				return true
			}
		case *wire.SyncRequest:
			if lost {
				offers = append(offers, m.AppliedEpoch)
			}
		}
		return false
	}
	n.configure(wiretest.Config(3, "j", "t"))
	j := n.replicas["j"]
	if !lost || len(offers) == 0 || slices.ContainsFunc(offers, func(e wire.Epoch) bool { return e != 0 }) {
		t.Fatalf("chunk lost %v; SyncRequests after it offered epochs %v, want some, all 0", lost, offers)
	}
	if d := sameState(n.replicas["t"], j); d != "" || !j.Installed() {
		t.Fatalf("after the retry: installed %v, %s", j.Installed(), d)
	}
}
