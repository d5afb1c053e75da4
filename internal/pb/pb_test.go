package pb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// message is an envelope in flight, with its sender.
type message struct {
	from wire.NodeID
	wire.Envelope
}

// reply is a ClientReply as a client received it.
type reply struct {
	from wire.NodeID
	*wire.ClientReply
}

// link is a one-way channel between two nodes.
type link struct{ from, to wire.NodeID }

// network delivers messages to servers and collects at once what they send
// to anyone else (clients). By default it delivers in global FIFO order;
// with rng set it picks a random link each time, keeping each link FIFO.
// Messages on a held link wait until it is released.
type network struct {
	t       *testing.T
	servers map[wire.NodeID]*Server
	queue   []message
	hold    map[link]bool
	held    []message
	replies map[wire.NodeID][]reply
	rng     *rand.Rand
	// steps counts deliveries; it is the test's clock.
	steps int64
}

func newNetwork(t *testing.T, weakReads bool, configs ...wire.Config) *network {
	t.Helper()
	byVolume := map[wire.VolumeID]wire.Config{}
	var ids []wire.NodeID
	for _, c := range configs {
		byVolume[c.Volume] = c
		for _, id := range c.Chain {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	n := &network{t: t, servers: map[wire.NodeID]*Server{}, hold: map[link]bool{}, replies: map[wire.NodeID][]reply{}}
	for _, id := range ids {
		n.servers[id] = NewServer(Options{ID: id, Configs: byVolume, Engine: storage.NewMemoryEngine(), WeakReads: weakReads})
	}
	return n
}

func config(v wire.VolumeID, epoch wire.Epoch, chain ...wire.NodeID) wire.Config {
	return wire.Config{Volume: v, Epoch: epoch, Chain: chain}
}

// send puts a message on the network; a reply to a client arrives at once.
func (n *network) send(from, to wire.NodeID, m wire.Message) {
	if n.servers[to] != nil {
		n.queue = append(n.queue, message{from: from, Envelope: wire.Envelope{To: to, Msg: m}})
		return
	}
	rep, ok := m.(*wire.ClientReply)
	if !ok {
		n.t.Fatalf("client %s got %v from %s", to, m, from)
	}
	n.replies[to] = append(n.replies[to], reply{from: from, ClientReply: rep})
}

// deliver delivers one message; false if none is in flight.
func (n *network) deliver() bool {
	if len(n.queue) == 0 {
		return false
	}
	i := 0
	if n.rng != nil {
		// The oldest message on a random message's link.
		pick := n.queue[n.rng.IntN(len(n.queue))]
		i = slices.IndexFunc(n.queue, func(m message) bool { return m.from == pick.from && m.To == pick.To })
	}
	m := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	n.steps++
	if n.hold[link{m.from, m.To}] {
		n.held = append(n.held, m)
		return true
	}
	s := n.servers[m.To]
	for _, out := range s.Step(wire.Time(n.steps), m.from, m.Msg) {
		n.send(m.To, out.To, out.Msg)
	}
	if err := s.CheckInvariants(); err != nil {
		n.t.Fatalf("after %s handled %v from %s: %v", m.To, m.Envelope, m.from, err)
	}
	return true
}

// run delivers messages until none is in flight.
func (n *network) run() {
	for n.deliver() {
	}
}

// holdBack makes messages from one node to another wait; release
// delivers them, in order.
func (n *network) holdBack(from, to wire.NodeID) { n.hold[link{from, to}] = true }

func (n *network) release(from, to wire.NodeID) {
	delete(n.hold, link{from, to})
	var keep []message
	for _, m := range n.held {
		if m.from == from && m.To == to {
			n.queue = append(n.queue, m)
		} else {
			keep = append(keep, m)
		}
	}
	n.held = keep
}

// take returns and forgets the replies a client received.
func (n *network) take(client wire.NodeID) []reply {
	r := n.replies[client]
	delete(n.replies, client)
	return r
}

// only returns the single reply a client received.
func (n *network) only(client wire.NodeID) reply {
	n.t.Helper()
	r := n.take(client)
	if len(r) != 1 {
		n.t.Fatalf("%s got %d replies, want 1: %v", client, len(r), r)
	}
	return r[0]
}

// value returns a key's value on a server ("<absent>" if absent).
func (n *network) value(id wire.NodeID, v wire.VolumeID, key string) string {
	for _, ko := range n.servers[id].Snapshot(v) {
		if ko.Key == key {
			return string(ko.Object.Value)
		}
	}
	return "<absent>"
}

func request(v wire.VolumeID, epoch wire.Epoch, reqNo uint64, op wire.Op) *wire.ClientRequest {
	return &wire.ClientRequest{Volume: v, Epoch: epoch, Client: wire.ClientID(reqNo), ReqNo: reqNo, Op: op}
}

func put(key, value string) wire.Op { return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)} }
func get(key string) wire.Op        { return wire.Op{Kind: wire.OpGet, Key: key} }

func wantValue(t *testing.T, r reply, value string, sn wire.SN) {
	t.Helper()
	if r.Err != wire.ErrNone || !r.Result.Found || string(r.Result.Value) != value || r.Result.SN != sn {
		t.Fatalf("reply %+v (result %+v), want %q at SN %d", r.ClientReply, r.Result, value, sn)
	}
}

func wantErr(t *testing.T, r reply, code wire.ErrCode) {
	t.Helper()
	if r.Err != code {
		t.Fatalf("reply %+v, want error %v", r.ClientReply, code)
	}
}

const vol wire.VolumeID = 1
const epoch wire.Epoch = 3

func TestUpdateAnsweredAfterEveryBackupAcked(t *testing.T) {
	n := newNetwork(t, false, config(vol, epoch, "p", "b1", "b2"))
	n.holdBack("p", "b2")
	n.send("c", "p", request(vol, epoch, 1, put("x", "1")))
	n.run()

	if r := n.take("c"); len(r) != 0 {
		t.Fatalf("answered before b2 acknowledged: %v", r)
	}
	if got := n.value("b1", vol, "x"); got != "1" {
		t.Fatalf("b1 holds %q, want the forwarded value", got)
	}
	if a, c := n.servers["p"].AppliedSN(vol), n.servers["p"].CommittedSN(vol); a != 1 || c != 0 {
		t.Fatalf("primary applied %d committed %d, want 1 and 0", a, c)
	}
	// The primary sent to b2 itself, in parallel with b1: not via b1.
	if len(n.held) != 1 || wire.MessageName(n.held[0].Msg) != "Forward" {
		t.Fatalf("held on p→b2: %v, want one Forward", n.held)
	}

	n.release("p", "b2")
	n.run()
	r := n.only("c")
	if r.from != "p" || r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK || r.Result.SN != 1 {
		t.Fatalf("reply from %s: %+v, want success at SN 1 from the primary", r.from, r.ClientReply)
	}
	for _, id := range []wire.NodeID{"p", "b1", "b2"} {
		if got := n.value(id, vol, "x"); got != "1" {
			t.Fatalf("%s holds %q, want %q", id, got, "1")
		}
		if s := n.servers[id]; s.AppliedSN(vol) != 1 || s.CommittedSN(vol) != 1 {
			t.Fatalf("%s applied %d committed %d, want 1", id, s.AppliedSN(vol), s.CommittedSN(vol))
		}
	}
}

func TestPrimaryQueryWaitsForPendingUpdatesOnItsKey(t *testing.T) {
	n := newNetwork(t, false, config(vol, epoch, "p", "b1", "b2"))
	n.send("w", "p", request(vol, epoch, 1, put("x", "old")))
	n.run()
	n.take("w")

	n.holdBack("p", "b1")
	n.send("w", "p", request(vol, epoch, 2, put("x", "new")))
	n.send("r1", "p", request(vol, epoch, 3, get("x")))
	n.send("r2", "p", request(vol, epoch, 4, get("y")))
	n.run()

	// y has no pending update: answered at once, from committed state.
	r := n.only("r2")
	if r.Err != wire.ErrNone || r.Result.Found || r.Result.SN != 1 {
		t.Fatalf("get(y) = %+v (result %+v), want absent at SN 1", r.ClientReply, r.Result)
	}
	// x has one: the get may answer neither "new" (uncommitted, and lost
	// if the primary failed now) nor "old" (the put may commit and be
	// answered before this reply arrives), so it waits.
	if got := n.take("r1"); len(got) != 0 {
		t.Fatalf("get(x) answered while put(x) uncommitted: %v", got)
	}
	if h := n.servers["p"].HeldQueries(vol); h != 1 {
		t.Fatalf("primary holds %d queries, want 1", h)
	}

	n.release("p", "b1")
	n.run()
	if r := n.only("w"); r.Err != wire.ErrNone || r.Result.SN != 2 {
		t.Fatalf("put reply %+v, want SN 2", r.ClientReply)
	}
	wantValue(t, n.only("r1"), "new", 2)
}

func TestHeldQuerySeesCommittedStateNotLaterPendingUpdate(t *testing.T) {
	n := newNetwork(t, false, config(vol, epoch, "p", "b1", "b2"))
	n.holdBack("p", "b1")
	n.send("w", "p", request(vol, epoch, 1, put("x", "first")))
	n.send("r", "p", request(vol, epoch, 2, get("x")))
	n.send("w", "p", request(vol, epoch, 3, put("x", "second")))
	n.run()
	if r := n.take("r"); len(r) != 0 {
		t.Fatalf("get answered before put committed: %v", r)
	}

	// b1 acknowledges SN 1, then SN 2. The get waited only for SN 1, and
	// at SN 1's commit the store already holds the uncommitted "second".
	n.release("p", "b1")
	n.deliver() // Forward SN 1 to b1
	n.deliver() // Forward SN 2 to b1
	n.deliver() // Ack 1 to p
	wantValue(t, n.only("r"), "first", 1)
	n.run()
	if r := n.take("w"); len(r) != 2 || r[0].Result.SN != 1 || r[1].Result.SN != 2 {
		t.Fatalf("put replies %v, want SN 1 then SN 2", r)
	}
}

func TestBackupQueries(t *testing.T) {
	t.Run("strong", func(t *testing.T) {
		n := newNetwork(t, false, config(vol, epoch, "p", "b1", "b2"))
		n.send("w", "p", request(vol, epoch, 1, put("x", "1")))
		n.run()
		n.send("r", "b1", request(vol, epoch, 2, get("x")))
		n.run()
		wantErr(t, n.only("r"), wire.ErrNotTail)
	})
	t.Run("weak", func(t *testing.T) {
		n := newNetwork(t, true, config(vol, epoch, "p", "b1", "b2"))
		n.send("w", "p", request(vol, epoch, 1, put("x", "1")))
		n.run()
		n.send("r", "b1", request(vol, epoch, 2, get("x")))
		n.run()
		wantValue(t, n.only("r"), "1", 1)

		// A backup that has not received an update answers from its own,
		// older state: weak-p/b is not linearizable.
		n.holdBack("p", "b2")
		n.send("w", "p", request(vol, epoch, 3, put("x", "2")))
		n.run()
		n.send("r", "b1", request(vol, epoch, 4, get("x")))
		n.send("r", "b2", request(vol, epoch, 5, get("x")))
		n.run()
		r := n.take("r")
		if len(r) != 2 {
			t.Fatalf("got %d replies, want 2", len(r))
		}
		wantValue(t, r[0], "2", 2)
		wantValue(t, r[1], "1", 1)
	})
}

func TestRejectedRequestsChangeNothing(t *testing.T) {
	n := newNetwork(t, false, config(vol, epoch, "p", "b1", "b2"), config(2, 1, "x", "y"))
	cases := []struct {
		name string
		to   wire.NodeID
		req  *wire.ClientRequest
		want wire.ErrCode
	}{
		{"update at a backup", "b1", request(vol, epoch, 1, put("k", "v")), wire.ErrNotHead},
		{"older epoch", "p", request(vol, epoch-1, 2, put("k", "v")), wire.ErrWrongEpoch},
		{"newer epoch", "p", request(vol, epoch+1, 3, put("k", "v")), wire.ErrWrongEpoch},
		{"empty key", "p", request(vol, epoch, 4, put("", "v")), wire.ErrBadRequest},
		{"oversized value", "p", request(vol, epoch, 5, put("k", strings.Repeat("v", kv.ValueSizeMax+1))), wire.ErrBadRequest},
		{"unknown operation", "p", request(vol, epoch, 6, wire.Op{Kind: 99, Key: "k"}), wire.ErrBadRequest},
		{"unknown volume", "p", request(7, epoch, 7, put("k", "v")), wire.ErrUnavailable},
		{"volume hosted elsewhere", "p", request(2, 1, 8, put("k", "v")), wire.ErrUnavailable},
	}
	for _, c := range cases {
		n.send("c", c.to, c.req)
		n.run()
		r := n.only("c")
		wantErr(t, r, c.want)
		if r.ReqNo != c.req.ReqNo || r.Client != c.req.Client || r.Volume != c.req.Volume {
			t.Fatalf("%s: reply %+v does not answer request %+v", c.name, r.ClientReply, c.req)
		}
		if c.name == "older epoch" && (r.Config == nil || r.Config.Epoch != epoch) {
			t.Fatalf("%s: reply carries config %v, want the server's", c.name, r.Config)
		}
		if c.name == "newer epoch" && r.Config != nil {
			t.Fatalf("%s: reply carries older config %v", c.name, r.Config)
		}
	}
	for _, id := range []wire.NodeID{"p", "b1", "b2"} {
		if s := n.servers[id]; s.AppliedSN(vol) != 0 || len(s.Snapshot(vol)) != 0 {
			t.Fatalf("%s changed: applied %d, objects %v", id, s.AppliedSN(vol), s.Snapshot(vol))
		}
	}
	// Messages that are not for this protocol, or from the wrong peer, are
	// dropped.
	p := n.servers["p"]
	for _, m := range []struct {
		from wire.NodeID
		msg  wire.Message
	}{
		{"master", &wire.NewConfig{Config: config(vol, epoch+1, "b1")}},
		{"c", &wire.Ack{Volume: vol, Epoch: epoch, SN: 0}},
		{"b1", &wire.Forward{Volume: vol, Epoch: epoch, Updates: []wire.Update{{SN: 1, Key: "k", Changed: true}}}},
	} {
		if out := p.Step(0, m.from, m.msg); len(out) != 0 {
			t.Fatalf("%v from %s answered with %v", m.msg, m.from, out)
		}
	}
	if out := n.servers["b1"].Step(0, "b2", &wire.Forward{Volume: vol, Epoch: epoch, Updates: []wire.Update{{SN: 1, Key: "k", Changed: true}}}); len(out) != 0 || n.servers["b1"].AppliedSN(vol) != 0 {
		t.Fatalf("b1 took a forward from b2: %v", out)
	}
}

func TestForwardGapIsAProtocolError(t *testing.T) {
	b := NewServer(Options{ID: "b", Configs: map[wire.VolumeID]wire.Config{vol: config(vol, epoch, "p", "b")}, Engine: storage.NewMemoryEngine()})
	fwd := func(sn wire.SN) *wire.Forward {
		return &wire.Forward{Volume: vol, Epoch: epoch, Updates: []wire.Update{{SN: sn, Key: "k", Changed: true, Value: []byte("v")}}}
	}
	if out := b.Step(0, "p", fwd(2)); len(out) != 0 || b.AppliedSN(vol) != 0 || b.CheckInvariants() == nil {
		t.Fatalf("gap: out %v, applied %d, invariants %v; want dropped and reported", out, b.AppliedSN(vol), b.CheckInvariants())
	}
	if errs := b.ProtocolErrors(); len(errs) != 1 {
		t.Fatalf("protocol errors %v, want one", errs)
	}
	out := b.Step(0, "p", fwd(1))
	if len(out) != 1 || out[0].To != "p" || out[0].Msg.(*wire.Ack).SN != 1 {
		t.Fatalf("forward of SN 1 answered with %v, want Ack 1 to p", out)
	}
	if out := b.Step(0, "p", fwd(1)); len(out) != 0 || b.CheckInvariants() != nil {
		t.Fatalf("duplicate forward answered with %v (invariants %v), want ignored", out, b.CheckInvariants())
	}
}

func TestSingleServerAnswersAtOnce(t *testing.T) {
	s := NewServer(Options{ID: "p", Configs: map[wire.VolumeID]wire.Config{vol: config(vol, epoch, "p")}, Engine: storage.NewMemoryEngine()})
	out := s.Step(0, "c", request(vol, epoch, 1, put("x", "1")))
	if len(out) != 1 || out[0].To != "c" {
		t.Fatalf("put answered with %v, want one reply to c", out)
	}
	if r := out[0].Msg.(*wire.ClientReply); r.Err != wire.ErrNone || r.Result.Status != wire.StatusOK || r.Result.SN != 1 {
		t.Fatalf("put reply %+v, want success at SN 1", r)
	}
	out = s.Step(0, "c", request(vol, epoch, 2, get("x")))
	if len(out) != 1 {
		t.Fatalf("get answered with %v", out)
	}
	wantValue(t, reply{ClientReply: out[0].Msg.(*wire.ClientReply)}, "1", 1)
	if s.CommittedSN(vol) != 1 || s.Tick(0) != nil {
		t.Fatalf("committed %d, want 1", s.CommittedSN(vol))
	}
}

// TestRandomWorkload runs clients issuing random operations on two volumes
// with different primaries over a network that delivers each link in
// order but interleaves links at random, then checks that every request
// was answered once, every SN was assigned once, every member ends with the
// same state, and the history is linearizable.
func TestRandomWorkload(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			trace := runWorkload(t, seed)
			if again := runWorkload(t, seed); again != trace {
				t.Fatalf("seed %d is not deterministic", seed)
			}
		})
	}
}

type call struct {
	client wire.NodeID
	volume wire.VolumeID
	op     wire.Op
	start  int64
}

func runWorkload(t *testing.T, seed uint64) string {
	const (
		clients      = 5
		opsPerClient = 60
		inFlightMax  = 3
	)
	configs := []wire.Config{config(1, 2, "a", "b", "c"), config(2, 5, "b", "c", "a")}
	keys := []string{"k0", "k1", "k2", "k3"}
	volumeOf := func(key string) wire.Config { return configs[slices.Index(keys, key)/2] }

	n := newNetwork(t, false, configs...)
	rng := rand.New(rand.NewPCG(seed, 0))
	n.rng = rand.New(rand.NewPCG(seed, 1))

	randomOp := func() wire.Op {
		k := keys[rng.IntN(len(keys))]
		v := []byte(fmt.Sprint(rng.IntN(10)))
		switch rng.IntN(7) {
		case 0, 1:
			return wire.Op{Kind: wire.OpGet, Key: k}
		case 2:
			return wire.Op{Kind: wire.OpPut, Key: k, Value: v}
		case 3:
			return wire.Op{Kind: wire.OpAppend, Key: k, Value: v}
		case 4:
			return wire.Op{Kind: wire.OpIncrement, Key: k, Delta: int64(rng.IntN(5))}
		case 5:
			return wire.Op{Kind: wire.OpCompareAndSet, Key: k, Expected: v, Value: []byte("c"), ExpectAbsent: rng.IntN(3) == 0}
		default:
			return wire.Op{Kind: wire.OpDelete, Key: k}
		}
	}

	calls := map[uint64]call{} // by ReqNo, unique across clients
	issued := map[wire.NodeID]int{}
	inFlight := map[wire.NodeID]int{}
	var reqNo uint64
	var history []check.Operation
	var trace strings.Builder
	sns := map[wire.VolumeID][]wire.SN{}
	updates := map[wire.VolumeID]int{}

	collect := func() {
		for c := range clients {
			id := wire.NodeID(fmt.Sprint("client", c))
			for _, r := range n.take(id) {
				k, ok := calls[r.ReqNo]
				if !ok {
					t.Fatalf("%s: reply to unknown or already answered request %d", id, r.ReqNo)
				}
				delete(calls, r.ReqNo)
				inFlight[id]--
				if r.Err != wire.ErrNone || r.from != volumeOf(k.op.Key).Head() {
					t.Fatalf("%v from %s: %+v", k.op, r.from, r.ClientReply)
				}
				if !k.op.Kind.IsQuery() {
					sns[k.volume] = append(sns[k.volume], r.Result.SN)
				}
				history = append(history, check.Operation{Client: c, Op: k.op, Call: k.start, Return: n.steps, Result: r.Result})
				fmt.Fprintf(&trace, "%d %s %v %+v\n", n.steps, id, k.op, r.Result)
			}
		}
	}
	for {
		var ready []wire.NodeID
		for c := range clients {
			id := wire.NodeID(fmt.Sprint("client", c))
			if issued[id] < opsPerClient && inFlight[id] < inFlightMax {
				ready = append(ready, id)
			}
		}
		if len(ready) > 0 && (len(n.queue) == 0 || rng.IntN(3) == 0) {
			id := ready[rng.IntN(len(ready))]
			op := randomOp()
			cfg := volumeOf(op.Key)
			reqNo++
			calls[reqNo] = call{client: id, volume: cfg.Volume, op: op, start: n.steps}
			issued[id]++
			inFlight[id]++
			if !op.Kind.IsQuery() {
				updates[cfg.Volume]++
			}
			n.send(id, cfg.Head(), &wire.ClientRequest{Volume: cfg.Volume, Epoch: cfg.Epoch, Client: wire.ClientID(reqNo), ReqNo: reqNo, Op: op})
			continue
		}
		if !n.deliver() {
			break
		}
		collect()
	}

	if len(calls) != 0 {
		t.Fatalf("%d requests unanswered", len(calls))
	}
	for _, cfg := range configs {
		got := slices.Sorted(slices.Values(sns[cfg.Volume]))
		for i, sn := range got {
			if sn != wire.SN(i+1) {
				t.Fatalf("volume %d: update SNs %v, want 1..%d once each", cfg.Volume, got, updates[cfg.Volume])
			}
		}
		want := n.servers[cfg.Head()].Snapshot(cfg.Volume)
		for _, id := range cfg.Chain {
			s := n.servers[id]
			if s.AppliedSN(cfg.Volume) != wire.SN(updates[cfg.Volume]) || s.CommittedSN(cfg.Volume) != s.AppliedSN(cfg.Volume) {
				t.Fatalf("%s volume %d: applied %d committed %d, want %d", id, cfg.Volume, s.AppliedSN(cfg.Volume), s.CommittedSN(cfg.Volume), updates[cfg.Volume])
			}
			if got := s.Snapshot(cfg.Volume); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("volume %d: %s holds %v, primary %s holds %v", cfg.Volume, id, got, cfg.Head(), want)
			}
			if s.HeldQueries(cfg.Volume) != 0 {
				t.Fatalf("%s volume %d still holds queries", id, cfg.Volume)
			}
		}
	}
	if res, _ := check.Linearizable(history, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable (%v)", len(history), res)
	}
	return trace.String()
}
