package chain

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction §III-B: past the first K members an update travels
// lazily. The K-th member holds its forwards back while eager input
// arrives, and sends them when the server is idle, on its tick, or once
// LazyBacklogMax updates are held back; a member inside the first K
// forwards at once.
func TestLazyPhaseForwardsWhenIdleTickedOrBacklogFull(t *testing.T) {
	limits := DefaultLimits
	limits.LazyBacklogMax = 4
	newMember := func(id wire.NodeID, k int) *Server {
		s := NewServer(ServerOptions{ID: id, Masters: []wire.NodeID{"master"}, Incarnation: 1, HeartbeatInterval: wire.Second,
			Limits: limits, Engine: storage.NewMemoryEngine()})
		config := chainConfig(1, "", "a", "b", "c", "d")
		config.K = k
		s.Step(1, "master", &wire.NewConfig{Config: config})
		s.Step(2, "a", &wire.SyncReply{Volume: 0, Epoch: 1})
		s.Step(3, "c", &wire.SyncRequest{Volume: 0, Epoch: 1})
		return s
	}

	eager := newMember("b", 3) // index 1 < K−1 = 2
	if got := forwardedSNs(eager.Step(4, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: updates(1, 1)}), "c"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("a member inside the first K forwarded %v, want [1] at once", got)
	}

	lazy := newMember("b", 2) // index 1 = K−1: answers the client, then the lazy phase
	out := lazy.Step(4, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: updates(1, 1)})
	if got := forwardedSNs(out, "c"); len(got) != 0 {
		t.Fatalf("the K-th member forwarded %v while busy, want it held back", got)
	}
	if !answersClient(out) {
		t.Fatal("the K-th member did not answer the update's client")
	}
	if got := forwardedSNs(lazy.Idle(5), "c"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("idle: forwarded %v, want [1]", got)
	}
	if got := forwardedSNs(lazy.Idle(6), "c"); len(got) != 0 {
		t.Fatalf("idle again: forwarded %v, want nothing", got)
	}

	lazy.Step(7, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: updates(2, 3)})
	if got := forwardedSNs(lazy.Tick(8), "c"); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("tick: forwarded %v, want [2 3]", got)
	}

	lazy.Step(9, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: updates(4, 6)})
	if got := forwardedSNs(lazy.Step(10, "a", &wire.Forward{Volume: 0, Epoch: 1, Updates: updates(7, 7)}), "c"); fmt.Sprint(got) != "[4 5 6 7]" {
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
