package chain

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// TestServerAssertsInvariants: a server that checks its replicas'
// invariants (ServerOptions.CheckInvariants) runs a chain's steps
// unchanged, and stops at the first step after which a replica's state
// breaks one, naming it; a server that does not check goes on.
func TestServerAssertsInvariants(t *testing.T) {
	for _, checks := range []bool{true, false} {
		s := NewServer(ServerOptions{ID: "h", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
			Limits: DefaultLimits, Engine: storage.NewMemoryEngine(), CheckInvariants: checks})
		s.Step(1, "m", &wire.HeartbeatReply{SentAt: 0, LeaseGranted: true, LeaseFor: 3600 * wire.Second, Configs: []wire.Config{wiretest.Config(1, "", "h")}})
		put := func(reqNo uint64) []wire.Envelope {
			return s.Step(2, "c", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 7, ReqNo: reqNo, AckedBelow: 1,
				Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}})
		}
		if out := put(1); len(out) != 1 || out[0].Msg.(*wire.ClientReply).Err != wire.ErrNone {
			t.Fatalf("checks %v: the put was answered %v", checks, out)
		}
		s.Replica(0).committed = s.Replica(0).applied + 5 // INVARIANT committed ≤ applied broken
		panicked := func() (msg string) {
			defer func() {
				if p := recover(); p != nil {
					msg = p.(string)
				}
			}()
			s.Step(3, "c", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 8, ReqNo: 1, Op: wire.Op{Kind: wire.OpGet, Key: "k"}})
			return ""
		}()
		switch {
		case checks && !strings.Contains(panicked, "committed 6 > applied 1"):
			t.Errorf("a checking server went on from a broken state (panic %q)", panicked)
		case !checks && panicked != "":
			t.Errorf("a server without checks panicked: %s", panicked)
		}
	}
}
