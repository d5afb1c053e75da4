package chain

import (
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// expiryReplica is the sole member of a strong chain with the server
// clock c: head and tail at once.
func expiryReplica(t *testing.T, c *serverClock) (*Replica, func(now wire.Time, op wire.Op) *wire.ClientReply) {
	r := NewReplica(ReplicaOptions{ID: "a", Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits, FirstStart: true, clock: c})
	r.Adopt(0, wiretest.Config(1, "", "a"))
	reqNo := uint64(0)
	do := func(now wire.Time, op wire.Op) *wire.ClientReply {
		t.Helper()
		reqNo++
		out := r.Step(now, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 7, ReqNo: reqNo, Op: op})
		for _, m := range out.Messages {
			if rep, ok := m.Msg.(*wire.ClientReply); ok && rep.ReqNo == reqNo {
				return rep
			}
		}
		t.Fatalf("%v at %v: no reply in %v", op, now, out.Messages)
		return nil
	}
	return r, do
}

// ADR 28: the head turns a TTL into a deadline by its clock, once; a
// read answers by the member's clock; the head reclaims the key with a
// replicated delete once the deadline passed by more than the bound.
func TestKeysExpireAtTheDeadlineTheHeadAssigned(t *testing.T) {
	c := &serverClock{version: ExpiryVersion, offsetMax: 100 * wire.Millisecond, trustedUntil: 1 << 62}
	r, do := expiryReplica(t, c)
	const start = 10 * wire.Second
	put := do(start, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second})
	if put.Err != wire.ErrNone || put.Result.Expires != start+wire.Second {
		t.Fatalf("put with a TTL: %v, deadline %v, want %v", put.Err, put.Result.Expires, start+wire.Second)
	}
	get := do(start+wire.Second-1, wire.Op{Kind: wire.OpGet, Key: "k"})
	if !get.Result.Found || get.Result.Expires != start+wire.Second {
		t.Fatalf("read before the deadline: %+v", get.Result)
	}
	if get := do(start+wire.Second, wire.Op{Kind: wire.OpGet, Key: "k"}); get.Result.Found {
		t.Fatalf("read at the deadline found the key: %+v", get.Result)
	}
	// INCR on the expired key starts from nothing, with no deadline.
	if incr := do(start+wire.Second, wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}); string(incr.Result.Value) != "1" || incr.Result.Expires != 0 {
		t.Fatalf("increment of an expired key: %+v", incr.Result)
	}

	do(start, wire.Op{Kind: wire.OpPut, Key: "gone", Value: []byte("v"), TTL: wire.Second})
	applied := r.applied
	r.Reclaim(start + wire.Second + 50*wire.Millisecond) // within the bound: not yet
	if r.applied != applied || !r.Store().Get("gone").Exists {
		t.Fatal("the head reclaimed a key within the clock bound of its deadline")
	}
	r.Reclaim(start + wire.Second + 100*wire.Millisecond)
	if r.applied != applied+1 || r.Store().Get("gone").Exists || len(r.Store().Deadlines(10)) != 0 {
		t.Fatalf("the head did not reclaim the expired key: applied %d (was %d), deadlines %v", r.applied, applied, r.Store().Deadlines(10))
	}
}

// Until the cluster runs at protocol 2 no deadline is accepted, and while
// the server's clock fails its check nothing is answered about keys with
// one; keys without are served as ever.
func TestDeadlinesNeedTheClusterVersionAndATrustedClock(t *testing.T) {
	c := &serverClock{version: 1, offsetMax: 100 * wire.Millisecond, trustedUntil: 1 << 62}
	_, do := expiryReplica(t, c)
	if rep := do(1, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second}); rep.Err != wire.ErrUnavailable {
		t.Fatalf("a TTL before the server heard of protocol 2: %v, want ErrUnavailable", rep.Err)
	}
	c.version = ExpiryVersion
	if rep := do(2, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second}); rep.Err != wire.ErrNone {
		t.Fatalf("a TTL at protocol 2: %v", rep.Err)
	}
	do(3, wire.Op{Kind: wire.OpPut, Key: "plain", Value: []byte("v")})
	c.trustedUntil = 0
	for _, op := range []wire.Op{{Kind: wire.OpGet, Key: "k"}, {Kind: wire.OpIncrement, Key: "k", Delta: 1}, {Kind: wire.OpExpire, Key: "plain", TTL: wire.Second}} {
		if rep := do(4, op); rep.Err != wire.ErrUnavailable {
			t.Errorf("%v with the clock beyond the bound: %v, want ErrUnavailable", op, rep.Err)
		}
	}
	if rep := do(5, wire.Op{Kind: wire.OpGet, Key: "plain"}); rep.Err != wire.ErrNone || !rep.Result.Found {
		t.Fatalf("a key without a deadline with the clock beyond the bound: %+v", rep)
	}
}

// The heartbeat's check: the master's clock, read between the heartbeat
// and its reply, against this server's.
func TestClockCheck(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		sentAt, now, master  wire.Time
		wantTrusted, changed bool
	}{
		{"in step", 1000, 1020, 1010, true, true},
		{"master ahead within the bound", 1000, 1020, 1010 + 40, true, true},
		{"master ahead beyond", 1000, 1020, 1010 + 45, false, true},
		{"server ahead beyond", 1000, 1020, 1010 - 45, false, true},
		{"a reply too slow to tell", 1000, 1000 + 60, 1000, true, false},
	} {
		c := serverClock{offsetMax: 100, trustedUntil: 1 << 40}
		c.measure(tc.now, tc.sentAt, tc.master, 1)
		if c.trusted(tc.now) != tc.wantTrusted || c.measured != tc.changed {
			t.Errorf("%s: trusted %v measured %v (offset %v)", tc.name, c.trusted(tc.now), c.measured, c.offset)
		}
	}
}
