package chain

import (
	"fmt"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// Tests of single replicas driven message by message. The simulator
// checks the protocol as a whole under faults; these pin down the
// transitions and what Adopt and Step report.

func testReplica(id wire.NodeID, store storage.Store, firstStart bool, reads ReadMode) *Replica {
	return NewReplica(ReplicaOptions{ID: id, Volume: 0, Store: store, Limits: DefaultLimits, FirstStart: firstStart, Reads: reads})
}

func TestRoleIn(t *testing.T) {
	for _, tc := range []struct {
		config wire.Config
		id     wire.NodeID
		want   role
	}{
		{wiretest.Config(1, "", "a", "b", "c"), "a", roleHead},
		{wiretest.Config(1, "", "a", "b", "c"), "b", roleMiddle},
		{wiretest.Config(1, "", "a", "b", "c"), "c", roleTail},
		{wiretest.Config(1, "", "a"), "a", roleSole},
		{wiretest.Config(1, "d", "a", "b"), "d", roleJoining},
		{wiretest.Config(1, "d", "a", "b"), "e", roleNone},
		{wire.Config{}, "a", roleNone},
	} {
		if got := roleIn(tc.config, tc.id); got != tc.want {
			t.Errorf("role of %s in %v = %s, want %s", tc.id, tc.config, got, tc.want)
		}
	}
}

func TestAdoptVerdicts(t *testing.T) {
	// An empty replica in a restarted server may not become a member...
	r := testReplica("a", storage.NewMemory(), false, ReadsAtTail)
	if v, _ := r.Adopt(1, wiretest.Config(1, "", "a", "b")); v != AdoptionRefused || r.Config().Epoch != 0 {
		t.Fatalf("restarted empty replica named member: %s at epoch %d, want refused at 0", v, r.Config().Epoch)
	}
	// ...unless the master says the volume is empty everywhere.
	fresh := wiretest.Config(1, "", "a", "b")
	fresh.Fresh = true
	if v, _ := r.Adopt(1, fresh); v != AdoptionMember || !r.IsHead() {
		t.Fatalf("Fresh configuration: %s (head %v), want member and head", v, r.IsHead())
	}

	r = testReplica("a", storage.NewMemory(), true, ReadsAtTail)
	if v, _ := r.Adopt(1, wiretest.Config(2, "", "a", "b")); v != AdoptionMember {
		t.Fatalf("first process named member: %s, want member", v)
	}
	if v, _ := r.Adopt(1, wiretest.Config(2, "", "b", "a")); v != AdoptionStale || !r.IsHead() {
		t.Fatalf("same epoch again: %s, want stale and no change", v)
	}
	other := wiretest.Config(3, "", "a")
	other.Volume = 1
	if v, _ := r.Adopt(1, other); v != AdoptionStale {
		t.Fatalf("another volume's configuration: %s, want stale", v)
	}
	if v, out := r.Adopt(1, wiretest.Config(3, "a", "b")); v != AdoptionJoiner || len(out) != 1 {
		t.Fatalf("named joining: %s with %d messages, want joiner and one SyncRequest", v, len(out))
	}
	if v, _ := r.Adopt(1, wiretest.Config(4, "", "b")); v != AdoptionRemoved || r.Config().Epoch != 4 {
		t.Fatalf("left out: %s at epoch %d, want removed at 4", v, r.Config().Epoch)
	}
}

// A replica restored from disk takes part in nothing until the master
// keeps it as the only member (or removes it).
func TestRestoredReplicaStaysWedgedUntilSoleMember(t *testing.T) {
	store := storage.NewMemory()
	r := testReplica("a", store, true, ReadsAtTail)
	r.Adopt(1, wiretest.Config(1, "", "a", "b"))

	r = RestoreReplica(ReplicaOptions{ID: "a", Volume: 0, Store: store, Limits: DefaultLimits})
	if r == nil || !r.Wedged() || r.Config().Epoch != 1 {
		t.Fatalf("restored replica: %v, want wedged at epoch 1", r)
	}
	if v, out := r.Adopt(1, wiretest.Config(2, "", "a", "b")); v != AdoptionWedged || len(out) != 0 || !r.Wedged() {
		t.Fatalf("chain of two: %s with %d messages (wedged %v), want wedged and silent", v, len(out), r.Wedged())
	}
	out := r.Step(2, "client", &wire.ClientRequest{Volume: 0, Epoch: 2, Client: 1, ReqNo: 1, Op: wire.Op{Kind: wire.OpGet, Key: "k"}})
	if len(out.Messages) != 1 || out.Messages[0].Msg.(*wire.ClientReply).Err != wire.ErrUnavailable {
		t.Fatalf("wedged replica answered a query with %v, want ErrUnavailable", out.Messages)
	}
	if r.Tick(wire.Second) != nil {
		t.Fatal("wedged replica sent something on Tick")
	}
	if v, _ := r.Adopt(3, wiretest.Config(3, "", "a")); v != AdoptionMember || r.Wedged() || !r.IsHead() || !r.IsTail() {
		t.Fatalf("kept as the only member: %s (wedged %v), want a running head and tail", v, r.Wedged())
	}
}

// CR §3 Fig. 3: the predecessor forwards nothing until the successor has
// reported the last SN it has, then resends Sent after it; over a link
// that broke it resends Sent after the acknowledged SN at once, and again
// after what the successor reports if it asks.
func TestSuccessorSyncResendsSentAfterReportedSN(t *testing.T) {
	r := testReplica("m", storage.NewMemory(), true, ReadsAtTail)
	r.Adopt(1, wiretest.Config(1, "", "h", "m", "t"))
	r.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	if out := r.Step(3, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 10)}); len(wiretest.ForwardedSNs(out.Messages, "t")) != 0 {
		t.Fatalf("forwarded %v before the successor reported", wiretest.ForwardedSNs(out.Messages, "t"))
	}
	out := r.Step(4, "t", &wire.SyncRequest{Volume: 0, Epoch: 1, AppliedSN: 6})
	if got := wiretest.ForwardedSNs(out.Messages, "t"); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Fatalf("after the successor reported SN 6, forwarded %v, want 7..10", got)
	}
	r.Step(5, "t", &wire.Ack{Volume: 0, Epoch: 1, SN: 8})
	if first, last := r.Sent(); first != 9 || last != 10 {
		t.Fatalf("after ack 8 Sent holds [%d, %d], want [9, 10]", first, last)
	}
	// The link broke: the successor may not learn of it (the transport
	// tells the side that redials), so Sent after the acknowledged SN
	// goes again at once and what follows streams on.
	if got := wiretest.ForwardedSNs(r.Step(6, "t", &wire.PeerReset{Peer: "t"}).Messages, "t"); fmt.Sprint(got) != "[9 10]" {
		t.Fatalf("after the link reset, forwarded %v, want 9..10 again", got)
	}
	if got := wiretest.ForwardedSNs(r.Step(7, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(11, 11)}).Messages, "t"); fmt.Sprint(got) != "[11]" {
		t.Fatalf("after the link reset, forwarded %v of update 11", got)
	}
	// A successor that learned of the break asks again: Sent after the
	// SN it reports goes again.
	out = r.Step(8, "t", &wire.SyncRequest{Volume: 0, Epoch: 1, AppliedSN: 9, CommittedSN: 8})
	if got := wiretest.ForwardedSNs(out.Messages, "t"); fmt.Sprint(got) != "[10 11]" {
		t.Fatalf("after the link reset and SN 9 reported, forwarded %v, want 10..11", got)
	}
}

// CRAQ: a middle member answers a key with no update in flight and sends
// the client to the tail for a key with one.
func TestCleanReadsRefuseDirtyKeys(t *testing.T) {
	r := testReplica("m", storage.NewMemory(), true, ReadsCleanAtAnyMember)
	r.Adopt(1, wiretest.Config(1, "", "h", "m", "t"))
	r.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	r.Step(3, "t", &wire.SyncRequest{Volume: 0, Epoch: 1})
	r.Step(4, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 2)})
	query := func(key string) wire.ErrCode {
		out := r.Step(5, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: 1, Op: wire.Op{Kind: wire.OpGet, Key: key}})
		return out.Messages[0].Msg.(*wire.ClientReply).Err
	}
	if got := query("k1"); got != wire.ErrDirty {
		t.Fatalf("query of a key with an update in flight: %v, want ErrDirty", got)
	}
	if got := query("other"); got != wire.ErrNone {
		t.Fatalf("query of a clean key: %v, want an answer", got)
	}
	r.Step(6, "t", &wire.Ack{Volume: 0, Epoch: 1, SN: 1})
	if got, got2 := query("k1"), query("k2"); got != wire.ErrNone || got2 != wire.ErrDirty {
		t.Fatalf("after ack 1: k1 %v, k2 %v; want k1 answered and k2 dirty", got, got2)
	}
}

// The tail pauses once its joiner is close, and the step after which the
// joiner holds everything the tail applied reports it ready, once: the
// server sends the master a heartbeat then and not after later steps.
func TestJoinerReadyReportedByTheStepThatMadeIt(t *testing.T) {
	s := NewServer(ServerOptions{ID: "t", Masters: []wire.NodeID{"master"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
	heartbeats := func(out []wire.Envelope) (n int, ready bool) {
		for _, e := range out {
			if hb, ok := e.Msg.(*wire.Heartbeat); ok {
				n++
				ready = hb.Volumes[0].JoinerReady
			}
		}
		return n, ready
	}
	s.Step(1, "master", &wire.NewConfig{Config: wiretest.Config(1, "", "h", "t")})
	s.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	s.Step(3, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 3)})
	s.Step(4, "master", &wire.NewConfig{Config: wiretest.Config(2, "j", "h", "t")})
	s.Step(5, "h", &wire.SyncReply{Volume: 0, Epoch: 2, PredecessorAppliedSN: 3})
	s.Step(6, "j", &wire.SyncRequest{Volume: 0, Epoch: 2, NeedSnapshot: true})
	if got := wiretest.ForwardedSNs(s.Step(7, "h", &wire.Forward{Volume: 0, Epoch: 2, Updates: wiretest.Updates(4, 4)}), "j"); fmt.Sprint(got) != "[4]" {
		t.Fatalf("tail forwarded %v to its joiner, want [4]", got)
	}
	r := s.Replica(0)

	if n, _ := heartbeats(s.Step(8, "j", &wire.Ack{Volume: 0, Epoch: 2, SN: 3})); n != 0 || r.JoinerReady() {
		t.Fatalf("joiner at 3 of 4: %d heartbeats, ready %v; want none, not ready", n, r.JoinerReady())
	}
	if r.phase != phaseHandoffPaused {
		t.Fatalf("tail is %s with its joiner one update behind, want paused", r.phase)
	}
	s.Step(9, "h", &wire.Forward{Volume: 0, Epoch: 2, Updates: wiretest.Updates(5, 5)})
	if r.AppliedSN() != 4 {
		t.Fatalf("paused tail applied up to %d, want 4", r.AppliedSN())
	}
	if n, ready := heartbeats(s.Step(10, "j", &wire.Ack{Volume: 0, Epoch: 2, SN: 4})); n != 1 || !ready {
		t.Fatalf("joiner caught up: %d heartbeats (ready %v), want one reporting it ready", n, ready)
	}
	if n, _ := heartbeats(s.Step(11, "j", &wire.Ack{Volume: 0, Epoch: 2, SN: 4})); n != 0 || !r.JoinerReady() {
		t.Fatalf("a repeated ack: %d heartbeats, ready %v; want none, still ready", n, r.JoinerReady())
	}
	s.Step(12, "master", &wire.NewConfig{Config: wiretest.Config(3, "", "h", "t", "j")})
	if r.IsTail() || r.phase != phaseRunning || r.CommittedSN() != 4 {
		t.Fatalf("after the hand-off: tail %v, %s, committed %d; want a running middle at 4", r.IsTail(), r.phase, r.CommittedSN())
	}
}

// A server asked for configurations, as if it were a master, names its
// masters instead, so the client can say it was pointed at a server.
func TestServerAnswersConfigRequestWithItsMasters(t *testing.T) {
	s := NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m1", "m2"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
	out := s.Step(0, "client/x", &wire.ConfigRequest{})
	if len(out) != 1 || out[0].To != "client/x" {
		t.Fatalf("answered %v; want one reply to the client", out)
	}
	reply, ok := out[0].Msg.(*wire.ConfigReply)
	if !ok || len(reply.Configs) != 0 || !slices.Equal(reply.Masters, []wire.NodeID{"m1", "m2"}) {
		t.Fatalf("answered %+v; want no configurations and the masters m1, m2", out[0].Msg)
	}
}

// A middle member reports its link to its successor stalled for as long
// as it holds updates the acknowledgements from down the chain have not
// covered: from the oldest update it took while holding none, from the
// last acknowledgement that advanced, or from the epoch's start. It
// reports nothing while it holds nothing, and the tail never does. The
// heartbeat carries it.
func TestStalledLinkReportedUntilAcknowledged(t *testing.T) {
	s := NewServer(ServerOptions{ID: "m", Masters: []wire.NodeID{"master"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
	s.Step(10, "master", &wire.NewConfig{Config: wiretest.Config(1, "", "h", "m", "t")})
	r := s.Replica(0)
	s.Step(20, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	s.Step(30, "t", &wire.SyncRequest{Volume: 0, Epoch: 1})
	if got := r.StalledFor(1000); got != 0 {
		t.Fatalf("holding nothing: stalled for %d, want 0", got)
	}
	s.Step(100, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(1, 2)})
	s.Step(150, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(3, 3)})
	if got := r.StalledFor(400); got != 300 {
		t.Fatalf("holding 1..3 since 100: stalled for %d at 400, want 300", got)
	}
	stalled := func(out []wire.Envelope) wire.Time {
		for _, e := range out {
			if hb, ok := e.Msg.(*wire.Heartbeat); ok {
				return hb.Volumes[0].StalledFor
			}
		}
		t.Fatal("no heartbeat")
		return 0
	}
	if got := stalled(s.Tick(400)); got != 300 {
		t.Fatalf("the heartbeat at 400 reports a stall of %d, want 300", got)
	}
	s.Step(500, "t", &wire.Ack{Volume: 0, Epoch: 1, SN: 1}) // progress
	s.Step(600, "t", &wire.Ack{Volume: 0, Epoch: 1, SN: 1}) // none
	if got := r.StalledFor(700); got != 200 {
		t.Fatalf("acknowledged up to 1 at 500: stalled for %d at 700, want 200", got)
	}
	s.Step(800, "t", &wire.Ack{Volume: 0, Epoch: 1, SN: 3})
	if got := r.StalledFor(2000); got != 0 {
		t.Fatalf("everything acknowledged: stalled for %d, want 0", got)
	}
	s.Step(2100, "h", &wire.Forward{Volume: 0, Epoch: 1, Updates: wiretest.Updates(4, 4)})
	if got := r.StalledFor(2300); got != 200 {
		t.Fatalf("holding 4 since 2100: stalled for %d, want 200", got)
	}
	// A new epoch starts the link over; as the tail it reports nothing.
	s.Step(2500, "master", &wire.NewConfig{Config: wiretest.Config(2, "", "h", "m", "t2")})
	if got := r.StalledFor(2600); got != 100 {
		t.Fatalf("new epoch at 2500, holding 4: stalled for %d at 2600, want 100", got)
	}
	s.Step(2700, "master", &wire.NewConfig{Config: wiretest.Config(3, "", "h", "m")})
	if got := r.StalledFor(5000); got != 0 || !r.IsTail() {
		t.Fatalf("as the tail: stalled for %d, want 0", got)
	}
}

// A server that believes it is in its first process (a new data
// directory) but is told by the master that it is returning (the
// directory was wiped) takes no membership while empty: not from the
// reply's own configurations, not from those pushed later.
func TestReturningServerTakesNoMembershipWhileEmpty(t *testing.T) {
	for _, returning := range []bool{false, true} {
		s := NewServer(ServerOptions{ID: "b", Masters: []wire.NodeID{"master"}, Incarnation: 1_790_000_000_000_000, NewDataDir: true,
			HeartbeatInterval: wire.Second, Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
		s.Step(1, "master", &wire.HeartbeatReply{SentAt: 1, Returning: returning, Configs: []wire.Config{wiretest.Config(3, "", "a", "b")}})
		s.Step(2, "master", &wire.NewConfig{Config: wiretest.Config(4, "", "a", "b", "c")})
		member := s.Replica(0) != nil && s.Replica(0).Config().Index("b") >= 0
		if member == returning {
			t.Errorf("returning %v: empty member %v (want a member only in a first process)", returning, member)
		}
	}
}
