package chain

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// pipeline is a chain of replicas whose commits lag their steps
// (durable.go), with the messages between them delivered at once and
// each commit made by the test: what leaves the chain (to clients) is
// collected.
type pipeline struct {
	t        *testing.T
	replicas map[wire.NodeID]*Replica
	now      wire.Time
	// out collects the messages to nodes outside the chain.
	out []wire.Envelope
}

func newPipeline(t *testing.T, ids ...wire.NodeID) *pipeline {
	p := &pipeline{t: t, replicas: map[wire.NodeID]*Replica{}}
	for _, id := range ids {
		p.replicas[id] = NewReplica(ReplicaOptions{ID: id, Volume: 0, Store: storage.NewMemory(), Limits: DefaultLimits,
			FirstStart: true, Reads: ReadsAtTail, CommitsLag: true})
	}
	for _, id := range ids {
		_, out := p.replicas[id].Adopt(p.now, wiretest.Config(1, "", ids...))
		p.deliver(id, out)
	}
	for _, id := range ids {
		p.commit(id) // the epoch's metadata
	}
	p.out = nil
	return p
}

// deliver hands every message to its destination, and what that emits
// on, until none is left for a replica.
func (p *pipeline) deliver(from wire.NodeID, envs []wire.Envelope) {
	type msg struct {
		from wire.NodeID
		env  wire.Envelope
	}
	queue := make([]msg, 0, len(envs))
	for _, e := range envs {
		queue = append(queue, msg{from, e})
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		r := p.replicas[m.env.To]
		if r == nil {
			p.out = append(p.out, m.env)
			continue
		}
		p.now++
		for _, e := range r.Step(p.now, m.from, m.env.Msg).Messages {
			queue = append(queue, msg{m.env.To, e})
		}
	}
}

// commit makes a replica's writes durable and delivers what follows.
func (p *pipeline) commit(id wire.NodeID) {
	p.now++
	p.deliver(id, p.replicas[id].Committed(p.now).Messages)
}

// request sends a client's request to a replica.
func (p *pipeline) request(to wire.NodeID, reqNo uint64, op wire.Op) {
	p.deliver("client", []wire.Envelope{{To: to, Msg: &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 1, ReqNo: reqNo, AckedBelow: reqNo, Op: op}}})
}

// answered returns the request numbers answered to the client so far.
func (p *pipeline) answered() []uint64 {
	var out []uint64
	for _, e := range p.out {
		if r, ok := e.Msg.(*wire.ClientReply); ok && r.Err == wire.ErrNone {
			out = append(out, r.ReqNo)
		}
	}
	return out
}

// The tail answers an update, and a read of its key, only once every
// member's commit covered it, in whatever order the members commit; the
// forwards left before any commit.
func TestPipelinedTailAnswersOnceEveryMemberCommitted(t *testing.T) {
	for _, order := range [][]wire.NodeID{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "c", "a"}, {"c", "a", "b"}} {
		p := newPipeline(t, "a", "b", "c")
		p.request("a", 1, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")})
		if got := p.replicas["c"].AppliedSN(); got != 1 {
			t.Fatalf("commits %v: the tail applied %d before any commit, want 1 (forwards leave before the commit)", order, got)
		}
		p.request("c", 2, wire.Op{Kind: wire.OpGet, Key: "k"})
		p.request("c", 3, wire.Op{Kind: wire.OpGet, Key: "other"})
		if got := p.answered(); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("commits %v: before any commit the client got answers to %v, want only the read of a clean key (3)", order, got)
		}
		for i, id := range order {
			p.commit(id)
			want := []uint64{3}
			if i == len(order)-1 {
				want = []uint64{3, 1, 2} // the update, then the parked read
			}
			if got := p.answered(); !slices.Equal(got, want) {
				t.Fatalf("commits %v: after %s committed the client got answers to %v, want %v", order, id, got, want)
			}
			for _, r := range p.replicas {
				if err := r.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if a, c := p.replicas["a"].CommittedSN(), p.replicas["c"].CommittedSN(); a != 1 || c != 1 {
			t.Fatalf("commits %v: committed at the head %d, at the tail %d, want 1 (the acknowledgement went up)", order, a, c)
		}
	}
}

// Durable reports carry the minimum over a member and its predecessors:
// the middle's own commit alone reports nothing the head has not
// committed.
func TestDurableReportIsTheMinimumUpTheChain(t *testing.T) {
	p := newPipeline(t, "a", "b", "c")
	p.request("a", 1, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")})
	p.commit("b")
	p.commit("c")
	if b, c := p.replicas["b"].chainDurable(), p.replicas["c"].chainDurable(); b != 0 || c != 0 {
		t.Fatalf("head uncommitted: chainDurable at b %d, at c %d, want 0", b, c)
	}
	p.commit("a")
	if b, c := p.replicas["b"].chainDurable(), p.replicas["c"].chainDurable(); b != 1 || c != 1 {
		t.Fatalf("every member committed: chainDurable at b %d, at c %d, want 1", b, c)
	}
}
