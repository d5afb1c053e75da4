package causal

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/chaintest"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// modes makes this package's Mode for causal volumes
// (internal/chain/modes, which imports this package, cannot be used
// here).
var modes = chaintest.ModesOf(wire.ModeCausal, func(core *chain.Core, c wire.Config) chain.Mode { return New(core, c) })

// ChainReaction §III-B: past the first K members an update travels
// lazily. The K-th member holds its forwards back while eager input
// arrives, and sends them when the server is idle, on its tick, or once
// LazyBacklogMax updates are held back; a member inside the first K
// forwards at once.
func TestLazyPhaseForwardsWhenIdleTickedOrBacklogFull(t *testing.T) {
	limits := chain.DefaultLimits
	limits.LazyBacklogMax = 4
	newMember := func(id wire.NodeID, k int) *chain.Server {
		s := chain.NewServer(chain.ServerOptions{ID: id, Masters: []wire.NodeID{"master"}, Incarnation: 1, HeartbeatInterval: wire.Second,
			Limits: limits, Engine: storage.NewMemoryEngine(), Modes: modes})
		config := wiretest.Config(1, "", "a", "b", "c", "d")
		config.Mode, config.K = wire.ModeCausal, k
		s.Step(1, "master", &wire.NewConfig{Config: config})
		s.Step(2, "a", &wire.SyncReply{Volume: 0, Epoch: 1})
		s.Step(3, "c", &wire.SyncRequest{Volume: 0, Epoch: 1})
		return s
	}

	eager := newMember("b", 3) // index 1 < K−1 = 2
	if got := wiretest.ForwardedSNs(eager.Step(4, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 1)}), "c"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("a member inside the first K forwarded %v, want [1] at once", got)
	}

	lazy := newMember("b", 2) // index 1 = K−1: answers the client, then the lazy phase
	out := lazy.Step(4, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 1)})
	if got := wiretest.ForwardedSNs(out, "c"); len(got) != 0 {
		t.Fatalf("the K-th member forwarded %v while busy, want it held back", got)
	}
	if !answersClient(out) {
		t.Fatal("the K-th member did not answer the update's client")
	}
	if got := wiretest.ForwardedSNs(lazy.Idle(5), "c"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("idle: forwarded %v, want [1]", got)
	}
	if got := wiretest.ForwardedSNs(lazy.Idle(6), "c"); len(got) != 0 {
		t.Fatalf("idle again: forwarded %v, want nothing", got)
	}

	lazy.Step(7, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(2, 3)})
	if got := wiretest.ForwardedSNs(lazy.Tick(8), "c"); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("tick: forwarded %v, want [2 3]", got)
	}

	lazy.Step(9, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(4, 6)})
	if got := wiretest.ForwardedSNs(lazy.Step(10, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(7, 7)}), "c"); fmt.Sprint(got) != "[4 5 6 7]" {
		t.Fatalf("with %d updates held back: forwarded %v, want [4 5 6 7]", limits.LazyBacklogMax, got)
	}
}

// answersClient reports whether out holds a reply to the updates' client.
func answersClient(out []wire.Envelope) bool {
	for _, e := range out {
		if _, ok := e.Msg.(*wire.ClientReply); ok && e.To == "client" {
			return true
		}
	}
	return false
}

// headAndTail returns the replicas of a causal chain of one site, h then
// t, with k = 1, in epoch 2, their link synchronised.
func headAndTail() (head, tail *chain.Replica) {
	config := wiretest.Config(2, "", "h", "t")
	config.Mode, config.K = wire.ModeCausal, 1
	head = chaintest.Replica("h", storage.NewMemory(), true, chain.ReadsAtTail, modes)
	head.Adopt(1, config)
	head.Step(2, "t", &wire.SyncRequest{Volume: 0, Epoch: 2})
	tail = chaintest.Replica("t", storage.NewMemory(), true, chain.ReadsAtTail, modes)
	tail.Adopt(1, config)
	tail.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 2})
	return head, tail
}

// Forged or stale causal metadata gets a clear error and changes
// nothing: a read of a version no member holds is passed up to the head,
// which answers ErrUnknownVersion; a wait for a version beyond anything
// the chain can hold is refused at the tail; a request of an old epoch
// gets ErrWrongEpoch with the current configuration; a write that
// overwrites a version the head never applied is refused.
func TestCausalRequestsWithForgedOrStaleMetadata(t *testing.T) {
	head, tail := headAndTail()
	put := &wire.ClientRequest{Volume: 0, Epoch: 2, Client: 7, ReqNo: 1, AckedBelow: 1, Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}}
	head.Step(3, "client", put)
	for _, e := range head.Idle() { // K = 1: the head answers, then forwards lazily
		if e.To == "t" {
			tail.Step(4, "h", e.Msg)
		}
	}
	if head.AppliedSN() != 1 || tail.AppliedSN() != 1 {
		t.Fatalf("applied: head %d, tail %d; want 1 and 1", head.AppliedSN(), tail.AppliedSN())
	}

	only := func(out []wire.Envelope) wire.Envelope {
		t.Helper()
		if len(out) != 1 {
			t.Fatalf("sent %d messages %v, want one", len(out), out)
		}
		return out[0]
	}
	errOf := func(e wire.Envelope) wire.ErrCode {
		t.Helper()
		reply, ok := e.Msg.(*wire.ClientReply)
		if !ok || e.To != "client" {
			t.Fatalf("sent %T to %s, want a reply to the client", e.Msg, e.To)
		}
		return reply.Err
	}

	read := wire.ClientRequest{Volume: 0, Epoch: 2, Client: 8, ReqNo: 1, MinVersion: 99, Op: wire.Op{Kind: wire.OpGet, Key: "k"}}
	up := only(tail.Step(5, "client", &read).Messages)
	if _, ok := up.Msg.(*wire.QueryUp); !ok || up.To != "h" {
		t.Fatalf("tail sent %T to %s for an unknown version, want a QueryUp to the head", up.Msg, up.To)
	}
	if got := errOf(only(head.Step(6, "t", up.Msg).Messages)); got != wire.ErrUnknownVersion {
		t.Fatalf("head answered a forged version with %v, want ErrUnknownVersion", got)
	}

	// In one site the head answers waits (it knows last that a version
	// is committed); a version it never applied is refused, not held.
	wait := wire.ClientRequest{Volume: 0, Epoch: 2, Client: 8, ReqNo: 2, MinVersion: 7, Op: wire.Op{Kind: wire.OpWaitStable, Key: "k"}}
	if got := errOf(only(tail.Step(7, "client", &wait).Messages)); got != wire.ErrNotTail {
		t.Fatalf("tail answered a wait with %v, want ErrNotTail (ask the head)", got)
	}
	if got := errOf(only(head.Step(7, "client", &wait).Messages)); got != wire.ErrUnknownVersion {
		t.Fatalf("head answered a wait for a version it never applied with %v, want ErrUnknownVersion", got)
	}

	overwrite := *put
	overwrite.ReqNo, overwrite.MinVersion = 2, 5
	if got := errOf(only(head.Step(8, "client", &overwrite).Messages)); got != wire.ErrUnknownVersion {
		t.Fatalf("head answered a write depending on version 5 it never applied with %v, want ErrUnknownVersion", got)
	}

	stale := read
	stale.Epoch, stale.MinVersion = 1, 0
	reply := only(tail.Step(8, "client", &stale).Messages)
	if got := errOf(reply); got != wire.ErrWrongEpoch || reply.Msg.(*wire.ClientReply).Config == nil {
		t.Fatalf("request of epoch 1 answered %v, want ErrWrongEpoch with the configuration", got)
	}

	if head.AppliedSN() != 1 || tail.AppliedSN() != 1 || len(head.Mode().(*Mode).stableWaiters) != 0 {
		t.Fatalf("after the bad requests: applied head %d, tail %d, %d waits held; want 1, 1, none", head.AppliedSN(), tail.AppliedSN(), len(head.Mode().(*Mode).stableWaiters))
	}
}

// In one site the head tells the writer of an update it answered before
// the update was stable, unasked, once the tail's acknowledgement
// reaches it and every member knows (docs/adr/0025): the answer again,
// stable, from position 0. The tail, which processes the update first,
// sends nothing: the writer's next update must wait for what the head
// knows.
func TestHeadSendsTheWriterAStableNotice(t *testing.T) {
	head, tail := headAndTail()
	put := &wire.ClientRequest{Volume: 0, Epoch: 2, Client: 7, ReqNo: 1, AckedBelow: 1, Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}}
	replies := func(out []wire.Envelope) []*wire.ClientReply {
		var r []*wire.ClientReply
		for _, e := range out {
			if m, ok := e.Msg.(*wire.ClientReply); ok && e.To == "client" {
				r = append(r, m)
			}
		}
		return r
	}
	answered := replies(head.Step(3, "client", put).Messages)
	var ack wire.Message
	for _, e := range head.Idle() {
		if e.To != "t" {
			continue
		}
		out := tail.Step(4, "h", e.Msg).Messages
		if r := replies(out); len(r) != 0 {
			t.Fatalf("the tail sent the client %+v; want nothing (the head knows last)", r)
		}
		for _, o := range out {
			if _, ok := o.Msg.(*wire.Ack); ok && o.To == "h" {
				ack = o.Msg
			}
		}
	}
	if len(answered) != 1 || answered[0].Stable || ack == nil {
		t.Fatalf("head answered %+v, tail acknowledged %v; want one unstable answer and an ack", answered, ack)
	}
	notices := replies(head.Step(5, "t", ack).Messages)
	if len(notices) != 1 || !notices[0].Stable || notices[0].Position != 0 || notices[0].ReqNo != 1 || notices[0].Result.SN != answered[0].Result.SN {
		t.Fatalf("head sent %+v on the ack; want the update's answer again, stable, from position 0", notices)
	}
}

// Watches are for strong chains (chain/watch.go, docs/adr/0032): a
// causal member's committed SN is not the tail's, and other sites'
// updates arrive out of SN order. Every member of a causal chain refuses
// one as a bad request, held or not; the same request in a strong chain
// is answered.
func TestWatchRefusedInACausalVolume(t *testing.T) {
	head, tail := headAndTail()
	for i, op := range []wire.Op{
		{Kind: wire.OpWatch, Delta: wire.WatchFromNow},
		{Kind: wire.OpWatch, Key: "k", Value: []byte{wire.WatchExactKey}, Delta: 0, TTL: wire.Second},
	} {
		for _, r := range []*chain.Replica{head, tail} {
			req := &wire.ClientRequest{Volume: 0, Epoch: 2, Client: 9, ReqNo: uint64(i + 1), Op: op}
			out := r.Step(wire.Time(10+i), "client", req).Messages
			if len(out) != 1 || out[0].Msg.(*wire.ClientReply).Err != wire.ErrBadRequest || r.Watches() != 0 {
				t.Errorf("%s: a watch %+v: %v (%d held), want ErrBadRequest", r.Role(), op, out, r.Watches())
			}
		}
	}
	strong := chaintest.Replica("h", storage.NewMemory(), true, chain.ReadsAtTail, modes)
	strong.Adopt(1, wiretest.Config(1, "", "h"))
	out := strong.Step(2, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 9, ReqNo: 1, Op: wire.Op{Kind: wire.OpWatch, Delta: wire.WatchFromNow}})
	if len(out.Messages) != 1 || out.Messages[0].Msg.(*wire.ClientReply).Err != wire.ErrNone {
		t.Errorf("a watch in a strong chain: %v", out.Messages)
	}
}
