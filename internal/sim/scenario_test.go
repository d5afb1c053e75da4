package sim

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// The cases of CR §3 "Coping with Server Failures", each followed by a
// retried update that must return its original outcome and apply once.

func incr(key string, delta int64) wire.Op {
	return wire.Op{Kind: wire.OpIncrement, Key: key, Delta: delta}
}

// Failure of the head: the master removes it and its successor becomes
// head. An update the whole chain applied, whose reply was lost, is
// retried at the new head and answered from the replicated outcome record.
func TestHeadFailure(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")

	s.loseRepliesTo(true)
	s.start(incr("n", 5))
	s.runUntil(wire.Second, "the tail to apply the increment", func() bool { return s.applied("s3") == 2 })
	s.crash("s1", "head failure")
	s.loseRepliesTo(false)

	if got := s.await(); got.Unknown || string(got.Result.Value) != "5" {
		t.Fatalf("retried increment returned %+v, want its original result 5", got)
	}
	s.awaitChain("s2", "s3", "s4") // removed, then extended with a spare
	if got := s.get("n"); got != "5" {
		t.Fatalf("n = %q after the retry, want 5 (applied once)", got)
	}
	s.put("k", "b")
	if got := s.get("k"); got != "b" {
		t.Fatalf("k = %q, want b", got)
	}
	s.finish()
}

// Failure of a middle server: its successor reports the last SN it has and
// the predecessor resends the rest of Sent (CR §3 Fig. 3). Updates the
// failed server never passed on still reach the tail.
func TestMiddleFailure(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")

	// s2 applies the next updates but never passes them to s3: they are
	// on Sent(s1) and Sent(s2) only.
	s.holdForwards("s2", "s3")
	s.start(incr("n", 1))
	s.runUntil(wire.Second, "s2 to apply the increment", func() bool { return s.applied("s2") == 2 })
	if s.applied("s3") != 1 {
		t.Fatalf("s3 applied %d, want 1", s.applied("s3"))
	}
	s.crash("s2", "middle failure")
	s.holdBack(nil)

	if got := s.await(); got.Unknown || string(got.Result.Value) != "1" {
		t.Fatalf("increment returned %+v, want 1", got)
	}
	s.awaitChain("s1", "s3", "s4")
	if got := s.get("n"); got != "1" {
		t.Fatalf("n = %q, want 1", got)
	}

	// A retried update after the repair: lose the reply, retry, same outcome.
	s.loseRepliesTo(true)
	s.start(incr("n", 10))
	s.runUntil(wire.Second, "the tail to apply", func() bool { return s.applied("s4") == 3 })
	s.loseRepliesTo(false)
	if got := s.await(); string(got.Result.Value) != "11" {
		t.Fatalf("retried increment returned %+v, want 11", got)
	}
	if got := s.get("n"); got != "11" {
		t.Fatalf("n = %q, want 11 (the retry applied once)", got)
	}
	s.finish()
}

// Failure of the tail: its predecessor becomes the tail. Updates that
// reached the predecessor but not the failed tail are now processed, and
// the new tail answers them.
func TestTailFailure(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")

	s.holdForwards("s2", "s3")
	s.start(incr("n", 7))
	s.runUntil(wire.Second, "s2 to apply the increment", func() bool { return s.applied("s2") == 2 })
	s.crash("s3", "tail failure")
	s.holdBack(nil)

	if got := s.await(); got.Unknown || string(got.Result.Value) != "7" {
		t.Fatalf("increment returned %+v, want 7", got)
	}
	s.awaitChain("s1", "s2", "s4")

	s.loseRepliesTo(true)
	s.start(incr("n", 1))
	s.runUntil(wire.Second, "the tail to apply", func() bool { return s.applied("s4") == 3 })
	s.loseRepliesTo(false)
	if got := s.await(); string(got.Result.Value) != "8" {
		t.Fatalf("retried increment returned %+v, want 8", got)
	}
	if got := s.get("n"); got != "8" {
		t.Fatalf("n = %q, want 8", got)
	}
	s.finish()
}

// Extending a chain: a new server receives the tail's state (snapshot,
// then Sent) while updates and queries continue, then becomes the tail.
// The snapshot carries the exactly-once records: after every original
// member has failed, the new server still answers a retry from its record.
func TestExtension(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3, Spares: 3})
	for _, k := range []string{"a", "b", "c"} {
		s.put(k, "v-"+k)
	}
	// Another client's increment is applied, but its reply is lost and it
	// will retry much later.
	retried := &wire.ClientRequest{Volume: volume, Epoch: s.c.Config().Epoch, Client: 77, ReqNo: 1, AckedBelow: 1, Op: incr("n", 3)}
	s.holdBack(func(_ wire.NodeID, env wire.Envelope) bool { return env.To == "probe" })
	s.c.w.send("probe", wire.Envelope{To: "s1", Msg: retried})
	called := s.c.Now()
	s.runUntil(wire.Second, "the tail to apply", func() bool { return s.applied("s3") == 4 })
	s.holdBack(nil)

	s.crash("s3", "tail failure before extension")
	s.runUntil(2*wire.Second, "an extension to start", func() bool { return s.c.Config().Joining != "" })
	joiner := s.c.Config().Joining
	// Updates and queries continue during the transfer.
	for i := range 5 {
		s.do(incr("n", 1))
		if got := s.get("a"); got != "v-a" {
			t.Fatalf("read %d during extension: a = %q", i, got)
		}
	}
	s.awaitChain("s1", "s2", joiner)
	if got := s.get("n"); got != "8" {
		t.Fatalf("n = %q on the new tail, want 8", got)
	}

	// Fail the remaining original members one at a time.
	s.crash("s1", "head failure")
	s.runUntil(2*wire.Second, "s1's removal", func() bool { return s.c.Config().Index("s1") < 0 })
	s.crash("s2", "head failure")
	s.runUntil(2*wire.Second, "s2's removal", func() bool { return s.c.Config().Index("s2") < 0 })

	// The other client retries its increment (same request number): the
	// joiner learned the outcome from the snapshot.
	s.runUntil(wire.Second, string(joiner)+" to adopt the configuration", func() bool {
		return s.c.server(joiner).Replica(volume).Config().Epoch == s.c.Config().Epoch
	})
	retried.Epoch = s.c.Config().Epoch
	reply := s.ask(joiner, retried)
	if reply.Err != wire.ErrNone || string(reply.Result.Value) != "3" {
		t.Fatalf("retry at %s: %+v, want the recorded result 3", joiner, reply)
	}
	s.c.history = append(s.c.history, check.Operation{Client: 77, Op: retried.Op, Call: int64(called), Return: int64(s.c.Now()), Result: reply.Result})
	if got := s.get("n"); got != "8" {
		t.Fatalf("n = %q, want 8: the retry must not apply again", got)
	}
	s.finish()
}

// A falsely suspected tail (alive, reachable by clients, cut off from the
// master) is removed; by then its lease has expired, so it refuses reads
// instead of serving stale values while the new tail serves newer ones.
func TestFalseSuspicionOfTail(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "old")
	epoch := s.c.Config().Epoch

	s.c.Partition("s3", s.c.Master(), "false suspicion", 5*wire.Second)
	s.runUntil(2*wire.Second, "s3's removal", func() bool { return s.c.Config().Index("s3") < 0 })
	s.put("k", "new")

	// A client that still believes s3 is the tail asks it.
	reply := s.ask("s3", &wire.ClientRequest{Volume: volume, Epoch: epoch, Client: 77, ReqNo: 1, Op: wire.Op{Kind: wire.OpGet, Key: "k"}})
	if reply.Err != wire.ErrUnavailable {
		t.Fatalf("removed tail answered %+v; want ErrUnavailable (lease expired)", reply)
	}
	// Nor does it accept writes as a head would.
	reply = s.ask("s3", &wire.ClientRequest{Volume: volume, Epoch: epoch, Client: 77, ReqNo: 2, Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("x")}})
	if reply.Err == wire.ErrNone {
		t.Fatalf("removed server accepted a write: %+v", reply)
	}
	if got := s.get("k"); got != "new" {
		t.Fatalf("k = %q, want new", got)
	}
	s.finish()
}

// A falsely suspected head stops accepting writes once its lease expired.
func TestFalseSuspicionOfHead(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")
	epoch := s.c.Config().Epoch
	s.c.Partition("s1", s.c.Master(), "false suspicion", 5*wire.Second)
	s.runUntil(2*wire.Second, "s1's removal", func() bool { return s.c.Config().Index("s1") < 0 })

	reply := s.ask("s1", &wire.ClientRequest{Volume: volume, Epoch: epoch, Client: 77, ReqNo: 1, Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("stale")}})
	if reply.Err != wire.ErrUnavailable {
		t.Fatalf("removed head answered %+v; want ErrUnavailable", reply)
	}
	s.put("k", "b")
	if got := s.get("k"); got != "b" {
		t.Fatalf("k = %q, want b", got)
	}
	s.finish()
}

// A server that restarts empty before the master noticed its failure is
// removed on its first heartbeat, and the chain does not take it back as a
// member without a state transfer.
func TestRestartBeforeDetection(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3, Spares: 1})
	s.put("k", "a")
	s.c.Crash("s2", "quick restart", 50*wire.Millisecond)
	s.runUntil(wire.Second, "s2's removal", func() bool { return s.c.Config().Index("s2") < 0 })
	s.awaitChain("s1", "s3", "s2") // s2 (the first spare by id) rejoins at the tail with a snapshot
	if got := s.get("k"); got != "a" {
		t.Fatalf("k = %q, want a", got)
	}
	s.finish()
}

// A server the master hears but that hears no master (a one-way fault,
// found by catena torture: docs/torture.md) gets no lease renewal and so
// serves nothing. The master must remove it as it would a silent one,
// instead of keeping it in its chain, stalled, for the whole fault.
func TestServerThatHearsNoMasterIsRemoved(t *testing.T) {
	for _, masters := range []int{1, 3} {
		t.Run(fmt.Sprintf("masters=%d", masters), func(t *testing.T) {
			s := newScenario(t, Options{ChainLength: 3, Masters: masters})
			s.put("k", "a")
			for _, m := range s.c.masters {
				s.c.LoseMessages(m, "s3", "s3 hears no master", 10*wire.Second)
			}
			s.runUntil(3*wire.Second, "s3's removal", func() bool { return s.c.Config().Index("s3") < 0 })
			s.put("k", "b")
			if got := s.get("k"); got != "b" {
				t.Fatalf("k = %q, want b", got)
			}
			// Once it hears the master again it counts as alive again,
			// and the chain is back to three (with s3, or a spare that
			// took its place first).
			s.run(10 * wire.Second)
			s.runUntil(5*wire.Second, "a chain of three", func() bool {
				c := s.c.Config()
				return len(c.Chain) == 3 && c.Joining == ""
			})
			s.runUntil(2*wire.Second, "the leader to count s3 alive", func() bool {
				l := s.c.Leader()
				if l == "" {
					return false
				}
				for _, srv := range s.c.masterState(l).Status().Servers {
					if srv.ID == "s3" {
						return srv.Alive
					}
				}
				return false
			})
			if got := s.get("k"); got != "b" {
				t.Fatalf("k = %q, want b", got)
			}
			s.finish()
		})
	}
}

// A middle server that hears nothing at all, neither the master nor its
// chain neighbours, while they all hear it: removed, and the chain works
// without it during the fault.
func TestMiddleServerThatHearsNothingIsRemoved(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")
	for _, from := range []wire.NodeID{s.c.Master(), "s1", "s3"} {
		s.c.LoseMessages(from, "s2", "s2 hears nothing", 10*wire.Second)
	}
	s.runUntil(3*wire.Second, "s2's removal", func() bool { return s.c.Config().Index("s2") < 0 })
	s.put("k", "b")
	if got := s.get("k"); got != "b" {
		t.Fatalf("k = %q, want b", got)
	}
	s.finish()
}

// A link between chain neighbours that carries nothing one way, while
// both servers talk to the master: the predecessor reports the link
// stalled in its heartbeats, and the master cuts the successor out of
// the chain once its lease has run out, instead of leaving the chain
// stalled for the whole fault. Lost forwards leave an update
// unanswered; lost acknowledgements leave a retried update (answered
// once the head knows it committed) unanswered.
func TestOneWayFaultBetweenNeighboursIsCut(t *testing.T) {
	for _, tc := range []struct {
		name       string
		from, to   wire.NodeID
		pred, succ wire.NodeID
		retry      bool
	}{
		{"forwards lost", "s1", "s2", "s1", "s2", false},
		{"acknowledgements lost", "s2", "s1", "s1", "s2", true},
		{"forwards lost further down", "s2", "s3", "s2", "s3", false},
		{"acknowledgements lost further down", "s3", "s2", "s2", "s3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, Options{ChainLength: 3})
			s.put("k", "a")
			s.c.LoseMessages(tc.from, tc.to, tc.name, 20*wire.Second)
			if tc.retry {
				// The tail applies and answers, the answer is lost, and
				// the client asks the head again.
				s.loseRepliesTo(true)
				s.start(incr("n", 2))
				s.runUntil(wire.Second, "the tail to apply the increment", func() bool { return s.applied("s3") == 2 })
				s.loseRepliesTo(false)
				if got := s.await(); got.Unknown || string(got.Result.Value) != "2" {
					t.Fatalf("retried increment returned %+v, want its original result 2", got)
				}
			} else if got := s.do(wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("b")}); got.Unknown {
				t.Fatalf("put during the fault: %+v", got)
			}
			// Not a link of the chain as long as the fault lasts.
			linked := func() bool { c := s.c.Config(); return c.Index(tc.succ) == c.Index(tc.pred)+1 && c.Index(tc.pred) >= 0 }
			s.runUntil(2*wire.Second, "the stalled link's cut", func() bool { return !linked() })
			for range 10 {
				s.run(500 * wire.Millisecond)
				if linked() {
					t.Fatalf("%s→%s is a link of %v again during the fault", tc.pred, tc.succ, s.c.Config())
				}
				s.put("k", "c")
			}
			if got := s.get("k"); got != "c" {
				t.Fatalf("k = %q, want c", got)
			}
			s.finish()
		})
	}
}

// A head whose messages reach no server (the master still hears it and
// it hears everyone): its first successor is cut, and when it stalls
// with the next one too, the head itself, so the chain goes on without
// it rather than shrinking to the faulty head alone.
func TestHeadThatReachesNoServerIsCut(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3})
	s.put("k", "a")
	for _, to := range s.c.servers[1:] {
		s.c.LoseMessages("s1", to, "s1 reaches no server", 20*wire.Second)
	}
	s.start(wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("b")})
	s.runUntil(6*wire.Second, "s1's cut", func() bool { return s.c.Config().Index("s1") < 0 })
	s.await()
	// s3, its second successor, stays; s1 may be tried again as a
	// joiner (it is the least loaded server), which times out while its
	// messages are lost: the chain serves meanwhile.
	for range 10 {
		s.run(500 * wire.Millisecond)
		if c := s.c.Config(); c.Index("s1") >= 0 || c.Index("s3") < 0 {
			t.Fatalf("%v during the fault: want s1 out and s3 in", c)
		}
		s.put("k", "c")
	}
	if got := s.get("k"); got != "c" {
		t.Fatalf("k = %q, want c", got)
	}
	s.finish()
}
