package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// scenario drives a simulated cluster step by step for the tests that
// read like the paper's cases: one scripted client, faults at chosen
// moments, and checks at the end. CR §3's invariants are asserted after
// every step, as in random runs.
type scenario struct {
	t      *testing.T
	c      *Cluster
	client *client
	probe  *probe
}

// probe is a node that sends raw requests and keeps the replies.
type probe struct{ replies []*wire.ClientReply }

func (p *probe) Step(_ wire.Time, _ wire.NodeID, m wire.Message) []wire.Envelope {
	if r, ok := m.(*wire.ClientReply); ok {
		p.replies = append(p.replies, r)
	}
	return nil
}
func (p *probe) Tick(wire.Time) []wire.Envelope { return nil }

func newScenario(t *testing.T, o Options) *scenario {
	t.Helper()
	if o.Seed == 0 {
		o.Seed = 1
	}
	o = o.withDefaults()
	c := newCluster(o)
	c.build() // the random clients stay idle: nothing sets them issuing
	s := &scenario{t: t, c: c, probe: &probe{}}
	s.client = c.newClient("c9", 9, nil)
	s.client.script = []wire.Op{}
	c.w.addNode(s.client.id, s.client, o.TickInterval, 1)
	c.w.addNode("probe", s.probe, o.TickInterval, 1)
	s.run(300 * wire.Millisecond) // leases granted, configuration learned
	return s
}

// run advances simulated time, failing the test on an invariant violation.
func (s *scenario) run(d wire.Time) {
	s.t.Helper()
	func() {
		defer func() {
			if p := recover(); p != nil {
				s.t.Fatalf("at %.3fs: %v", float64(s.c.w.now)/1e9, p)
			}
		}()
		s.c.w.run(s.c.w.now + d)
	}()
	for _, f := range s.c.failures {
		s.t.Fatal(f)
	}
}

// runUntil advances time until cond holds, failing after limit.
func (s *scenario) runUntil(limit wire.Time, what string, cond func() bool) {
	s.t.Helper()
	for deadline := s.c.w.now + limit; !cond(); {
		if s.c.w.now >= deadline {
			s.t.Fatalf("at %.3fs: still waiting for %s; configuration %v", float64(s.c.w.now)/1e9, what, s.c.Config())
		}
		s.run(wire.Millisecond)
	}
}

// start makes the scripted client issue op.
func (s *scenario) start(op wire.Op) {
	s.client.script = append(s.client.script, op)
	s.client.issuing = true
}

// await waits for the client's next completed operation.
func (s *scenario) await() check.Operation {
	s.t.Helper()
	n := len(s.c.history)
	s.runUntil(5*wire.Second, "the client's operation to complete", func() bool { return len(s.c.history) > n })
	return s.c.history[n]
}

// do runs one operation to completion and returns it.
func (s *scenario) do(op wire.Op) check.Operation {
	s.t.Helper()
	s.start(op)
	done := s.await()
	if done.Unknown {
		s.t.Fatalf("%v: outcome unknown", op)
	}
	return done
}

// get reads a key and returns its value ("" if absent).
func (s *scenario) get(key string) string {
	s.t.Helper()
	return string(s.do(wire.Op{Kind: wire.OpGet, Key: key}).Result.Value)
}

func (s *scenario) put(key, value string) {
	s.t.Helper()
	s.do(wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)})
}

// loseRepliesTo loses every reply to the scripted client while on is set.
func (s *scenario) loseRepliesTo(on bool) {
	s.holdBack(func(from wire.NodeID, env wire.Envelope) bool {
		_, reply := env.Msg.(*wire.ClientReply)
		return on && reply && env.To == s.client.id
	})
}

// holdBack loses the messages drop returns true for (nil: none).
func (s *scenario) holdBack(drop func(from wire.NodeID, env wire.Envelope) bool) { s.c.w.drop = drop }

// holdForwards loses every Forward from one server to another.
func (s *scenario) holdForwards(from, to wire.NodeID) {
	s.holdBack(func(f wire.NodeID, env wire.Envelope) bool {
		_, fwd := env.Msg.(*wire.Forward)
		return fwd && f == from && env.To == to
	})
}

// applied returns what a server's replica has applied.
func (s *scenario) applied(id wire.NodeID) wire.SN {
	if srv := s.c.server(id); srv != nil && srv.Replica(volume) != nil {
		return srv.Replica(volume).AppliedSN()
	}
	return 0
}

func (s *scenario) crash(id wire.NodeID, why string) {
	s.t.Helper()
	if !s.c.Crash(id, why, 3600*wire.Second) {
		s.t.Fatalf("could not crash %s", id)
	}
}

// awaitChain waits until the master's configuration is exactly chain with
// no extension in progress.
func (s *scenario) awaitChain(chain ...wire.NodeID) {
	s.t.Helper()
	s.runUntil(5*wire.Second, fmt.Sprintf("chain %v", chain), func() bool {
		c := s.c.Config()
		return slices.Equal(c.Chain, chain) && c.Joining == ""
	})
}

// ask sends a raw request to a server from the probe and returns the reply.
func (s *scenario) ask(to wire.NodeID, req *wire.ClientRequest) *wire.ClientReply {
	s.t.Helper()
	n := len(s.probe.replies)
	s.c.w.send("probe", wire.Envelope{To: to, Msg: req})
	s.runUntil(wire.Second, "a reply to the probe", func() bool { return len(s.probe.replies) > n })
	return s.probe.replies[n]
}

// finish checks the whole history for linearizability.
func (s *scenario) finish() {
	s.t.Helper()
	if result, _ := check.Linearizable(s.c.history, 10*time.Second); result != porcupine.Ok {
		s.t.Fatalf("history of %d operations is %s", len(s.c.history), result)
	}
}
