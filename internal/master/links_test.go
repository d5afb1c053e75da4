package master

import (
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// stallCluster drives a master whose servers all hear it and report, on
// volume 0, the stalls the test gives them.
type stallCluster struct {
	t *testing.T
	m *Master
	// since holds, per server, when its link to its successor stalled
	// (absent: not stalled); a new epoch starts every link over.
	since map[wire.NodeID]wire.Time
	epoch wire.Epoch
	// granted holds, per server, when it was last granted a lease.
	granted map[wire.NodeID]wire.Time
	// complete holds the servers that report themselves complete.
	complete map[wire.NodeID]bool
}

func newStallCluster(t *testing.T, o Options, servers ...wire.NodeID) *stallCluster {
	m, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	s := &stallCluster{t: t, m: m, since: map[wire.NodeID]wire.Time{}, granted: map[wire.NodeID]wire.Time{}, complete: map[wire.NodeID]bool{}}
	s.beat(0, servers...)
	return s
}

// stall makes id report its link stalled from now on (in this epoch).
func (s *stallCluster) stall(now wire.Time, id wire.NodeID) { s.since[id] = now }

// beat delivers a heartbeat of each server at now, then ticks.
func (s *stallCluster) beat(now wire.Time, ids ...wire.NodeID) {
	for _, id := range ids {
		c := s.m.Config(0)
		if c.Epoch != s.epoch {
			s.epoch = c.Epoch
			clear(s.since)
		}
		hb := &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now}
		if c.Contains(id) {
			st := wire.VolumeStatus{Volume: 0, Epoch: c.Epoch, Complete: s.complete[id]}
			if at, ok := s.since[id]; ok {
				st.StalledFor = now - at
			}
			hb.Volumes = []wire.VolumeStatus{st}
		}
		for _, env := range s.m.Step(now, id, hb) {
			if r, ok := env.Msg.(*wire.HeartbeatReply); ok && env.To == id && r.LeaseGranted {
				s.granted[id] = now
			}
		}
	}
	s.m.Tick(now)
}

// extend beats the servers ids every 100ms from now until the chain of
// volume 0 is extended to 3 and its joiner promoted (the tail reports it
// ready), and returns when it is.
func (s *stallCluster) extend(now wire.Time, ids ...wire.NodeID) wire.Time {
	for ; ; now += 100 * wire.Millisecond {
		c := s.m.Config(0)
		if len(c.Chain) == 3 && c.Joining == "" {
			return now
		}
		if c.Joining != "" {
			s.m.Step(now, c.Tail(), &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now,
				Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: c.Epoch, JoinerReady: true}}})
		}
		s.beat(now, ids...)
		if now > 600*wire.Second {
			s.t.Fatalf("chain %v not extended", c)
		}
	}
}

// run beats every 100ms from from to until, and returns when the chain
// first left out id (-1: never).
func (s *stallCluster) run(from, until wire.Time, out wire.NodeID, ids ...wire.NodeID) wire.Time {
	for now := from; now <= until; now += 100 * wire.Millisecond {
		s.beat(now, ids...)
		if s.m.Config(0).Index(out) < 0 {
			return now
		}
	}
	return -1
}

// A head whose forwards are lost (or whose successor's acknowledgements
// are) reports its link stalled: once past the failure timeout, the
// master stops renewing the successor's lease and, once that lease has
// run out, cuts the successor from the chain, and from that chain only.
func TestStalledLinkCutsTheSuccessor(t *testing.T) {
	o := testOptions()
	o.Chains[1] = []wire.NodeID{"c", "b", "a"} // b in another chain too
	o.Volumes = 2
	servers := []wire.NodeID{"a", "b", "c"}
	s := newStallCluster(t, o, servers...)
	s.stall(100*wire.Millisecond, "a")
	cutAt := s.run(100*wire.Millisecond, 3*wire.Second, "b", servers...)
	if cutAt < 0 {
		t.Fatalf("b still in %v", s.m.Config(0))
	}
	// Decided at 600 (stalled for 500 > 400): b's last lease is the one
	// of 500, and the cut waits out its lease guard.
	if got := s.granted["b"]; got != 500*wire.Millisecond || cutAt-got <= o.LeaseGuard() {
		t.Fatalf("b's last lease at %d, cut at %d: want the lease of 500ms outlasted by its guard %d", got, cutAt, o.LeaseGuard())
	}
	if c := s.m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c"}) {
		t.Fatalf("after the cut: %v, want [a c]", c)
	}
	if c := s.m.Config(1); c.Index("b") < 0 {
		t.Fatalf("b cut from volume 1 too: %v", c)
	}
	if cuts := s.m.Cuts(); len(cuts) != 1 || !strings.Contains(cuts[0], "volume 0: cut b out of chain [a b c]") {
		t.Fatalf("cuts for the log: %q, want the one of b from volume 0", cuts)
	}
	// b is alive and leased again.
	s.beat(cutAt+100*wire.Millisecond, servers...)
	if s.granted["b"] != cutAt+100*wire.Millisecond {
		t.Fatalf("b gets no lease after the cut (last at %d)", s.granted["b"])
	}
}

// A stall shows at every member above the stalled link: the master cuts
// the successor of the last member that reports one, not of the first.
func TestStalledLinkCutAfterTheLastStalledMember(t *testing.T) {
	s := newStallCluster(t, testOptions(), "a", "b", "c", "d")
	s.stall(100*wire.Millisecond, "b") // b's forwards to c are lost...
	s.stall(110*wire.Millisecond, "a") // ...so a's are not acknowledged either
	if at := s.run(100*wire.Millisecond, 3*wire.Second, "c", "a", "b", "c", "d"); at < 0 {
		t.Fatalf("c still in %v", s.m.Config(0))
	}
	if c := s.m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "b"}) {
		t.Fatalf("after the cut: %v, want [a b]", c)
	}
	// The member further down stalled later (it held nothing when a
	// forwarded): the first report past the timeout is a's, and the
	// master waits for b's.
	s = newStallCluster(t, testOptions(), "a", "b", "c", "d")
	s.stall(100*wire.Millisecond, "a")
	s.stall(250*wire.Millisecond, "b")
	if at := s.run(100*wire.Millisecond, 3*wire.Second, "c", "a", "b", "c", "d"); at < 0 || s.m.Config(0).Index("b") < 0 {
		t.Fatalf("cut the wrong member: %v", s.m.Config(0))
	}
}

// A predecessor whose every outgoing link is down stalls with each new
// successor: the master cuts one successor, and then the predecessor
// itself, never the chain's members one after the other.
func TestStalledPredecessorIsCutAfterOneSuccessor(t *testing.T) {
	servers := []wire.NodeID{"a", "b", "c", "d"}
	s := newStallCluster(t, testOptions(), servers...)
	s.stall(100*wire.Millisecond, "a")
	at := s.run(100*wire.Millisecond, 3*wire.Second, "b", servers...)
	if at < 0 {
		t.Fatalf("b still in %v", s.m.Config(0))
	}
	// The chain [a c] is extended; once it is whole, a stalls with c.
	at = s.extend(at+100*wire.Millisecond, servers...)
	s.stall(at, "a")
	if cut := s.run(at+100*wire.Millisecond, at+3*wire.Second, "a", servers...); cut < 0 {
		t.Fatalf("a, stalled with two successors, still in %v", s.m.Config(0))
	}
	if c := s.m.Config(0); c.Index("c") < 0 {
		t.Fatalf("after a's cut: %v, want c kept", c)
	}
}

// A predecessor that had one successor cut for its stall and stalls again
// because its new successor crashed is kept: the silent successor goes,
// as the failure detector would remove it. Cutting the predecessor there
// (the common end of two stalled links, as it looks) would drop a live
// member holding every update while the chain still counts a dead one;
// `catena-lab sim -faults -mode causal -sites 3 -seed 52` lost an answered
// update that way once a false suspicion removed the third member.
func TestStalledPredecessorIsKeptWhenItsSuccessorFellSilent(t *testing.T) {
	o := testOptions()
	o.LeaseDuration = 200 * wire.Millisecond // a cut can come before the failure detector
	servers := []wire.NodeID{"a", "b", "c", "d"}
	s := newStallCluster(t, o, servers...)
	s.stall(100*wire.Millisecond, "a")
	at := s.run(100*wire.Millisecond, 3*wire.Second, "b", servers...)
	if at < 0 {
		t.Fatalf("b still in %v", s.m.Config(0))
	}
	at = s.extend(at+100*wire.Millisecond, servers...)
	succ := s.m.Config(0).Chain[1]
	// a stalls; its successor crashes 300ms later, while the master has
	// not yet decided on the stall: it beats no more.
	s.stall(at, "a")
	alive := slices.DeleteFunc(slices.Clone(servers), func(id wire.NodeID) bool { return id == succ })
	for now := at; now <= at+3*wire.Second; now += 50 * wire.Millisecond {
		if now <= at+300*wire.Millisecond {
			s.beat(now, servers...)
		} else {
			s.beat(now, alive...)
		}
		if c := s.m.Config(0); c.Index("a") != 0 {
			t.Fatalf("at %v: a, stalled because its successor %s crashed, was cut: %v", now-at, succ, c)
		}
		if s.m.Config(0).Index(succ) < 0 {
			return
		}
	}
	t.Fatalf("%s, silent, still in %v", succ, s.m.Config(0))
}

// A link that carries updates again before the successor's lease ran
// out is not cut, and the successor is leased again.
func TestStalledLinkThatRecoversIsNotCut(t *testing.T) {
	servers := []wire.NodeID{"a", "b", "c"}
	s := newStallCluster(t, testOptions(), servers...)
	s.stall(100*wire.Millisecond, "a")
	s.run(100*wire.Millisecond, 600*wire.Millisecond, "b", servers...)
	if !s.m.cutting("b") {
		t.Fatal("a stalled for 500ms: b's cut not decided")
	}
	delete(s.since, "a")
	s.run(700*wire.Millisecond, 2*wire.Second, "b", servers...)
	if c := s.m.Config(0); c.Index("b") < 0 || c.Epoch != 1 {
		t.Fatalf("the link recovered, yet %v", c)
	}
	if s.granted["b"] != 2*wire.Second {
		t.Fatalf("b not leased again (last at %d)", s.granted["b"])
	}
}

// The head of a causal chain of k = 1 answers updates alone: what its
// successor lacks may have been answered, so it is never cut, even
// stalled with one successor after another; its successors are.
func TestCausalHeadAnsweringAloneIsNeverCut(t *testing.T) {
	o := testOptions()
	o.DefaultK = 1
	servers := []wire.NodeID{"a", "b", "c"}
	s := newStallCluster(t, o, servers...)
	at := wire.Time(0)
	for round := range 3 {
		at = s.extend(at+100*wire.Millisecond, servers...)
		succ := s.m.Config(0).Chain[1]
		s.stall(at, "a")
		if s.run(at+100*wire.Millisecond, at+3*wire.Second, succ, servers...) < 0 {
			t.Fatalf("round %d: a stalled with %s: %v, want %s cut", round, succ, s.m.Config(0), succ)
		}
		if c := s.m.Config(0); c.Head() != "a" {
			t.Fatalf("round %d: %v, want a kept as the head", round, c)
		}
	}
	if cuttable(&wire.Config{Chain: []wire.NodeID{"a", "b"}, Mode: wire.ModeCausal, K: 1}, "a") || !cuttable(&wire.Config{Chain: []wire.NodeID{"a", "b"}, Mode: wire.ModeCausal, K: 2}, "a") ||
		!cuttable(&wire.Config{Chain: []wire.NodeID{"a", "b"}}, "a") || cuttable(&wire.Config{Chain: []wire.NodeID{"a"}}, "a") {
		t.Fatal("cuttable: want only a k = 1 head and a last member kept")
	}
}

// In a causal chain of k = 2 the head that stalls with a second
// successor is cut only if that successor reported itself complete (it
// holds every answered update); otherwise the successor is cut again.
func TestCausalHeadCutOnlyWithACompleteSuccessor(t *testing.T) {
	for _, complete := range []bool{false, true} {
		o := testOptions()
		o.DefaultK = 2
		servers := []wire.NodeID{"a", "b", "c"}
		s := newStallCluster(t, o, servers...)
		s.stall(0, "a")
		at := s.run(100*wire.Millisecond, 3*wire.Second, "b", servers...)
		if at < 0 {
			t.Fatalf("b still in %v", s.m.Config(0))
		}
		at = s.extend(at+100*wire.Millisecond, servers...)
		succ := s.m.Config(0).Chain[1]
		s.complete[succ] = complete
		s.stall(at, "a")
		want := succ
		if complete {
			want = "a"
		}
		if s.run(at+100*wire.Millisecond, at+3*wire.Second, want, servers...) < 0 {
			t.Fatalf("%s complete %v: a stalled again: %v, want %s cut", succ, complete, s.m.Config(0), want)
		}
	}
}
