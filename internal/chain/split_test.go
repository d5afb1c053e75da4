package chain

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// splitServer is one server's view of a split, stepped by hand: its
// master is "m", its clients send with the keyspace list's version.
type splitServer struct {
	t      *testing.T
	s      *Server
	engine *storage.MemoryEngine
	now    wire.Time
	reqNo  uint64
}

func newSplitServer(t *testing.T, id wire.NodeID, first bool) *splitServer {
	engine := storage.NewMemoryEngine()
	incarnation := uint64(1)
	if !first {
		incarnation = 2
	}
	s := NewServer(ServerOptions{ID: id, Masters: []wire.NodeID{"m"}, Incarnation: incarnation, Engine: engine,
		Limits: DefaultLimits, HeartbeatInterval: 50 * wire.Millisecond})
	return &splitServer{t: t, s: s, engine: engine, now: 1}
}

// master delivers a heartbeat reply with a long lease, the keyspaces
// and configs.
func (x *splitServer) master(ks []wire.Keyspace, configs ...wire.Config) {
	x.now++
	x.s.Step(x.now, "m", &wire.HeartbeatReply{SentAt: x.now, LeaseGranted: true, LeaseFor: 1000 * wire.Second, Keyspaces: ks, Configs: configs})
}

// request sends one request and returns the reply.
func (x *splitServer) request(v wire.VolumeID, epoch wire.Epoch, version uint32, reqNo uint64, op wire.Op) *wire.ClientReply {
	x.t.Helper()
	x.now++
	for _, env := range x.s.Step(x.now, "client", &wire.ClientRequest{Volume: v, Epoch: epoch, Client: 7, ReqNo: reqNo, AckedBelow: 1,
		Keyspaces: version, Op: op}) {
		if rep, ok := env.Msg.(*wire.ClientReply); ok {
			return rep
		}
	}
	x.t.Fatalf("no reply to %v on volume %d", op, v)
	return nil
}

// The split of a volume of one server, as CR §3's chain of one runs it:
// the new configuration makes the head sequence the split's marker, the
// replica moves the half of its keys whose hash's next bit is set into a
// seed of the sibling on the same server, with the client sessions,
// and refuses those keys from then on; the sibling's first
// configuration takes the seed as its state, and a retried write of a
// moved key finds its outcome there (exactly-once across the move).
func TestSplitSeedsTheSiblingWithTheMovedHalfAndTheSessions(t *testing.T) {
	x := newSplitServer(t, "s1", true)
	one := []wire.Keyspace{{Name: wire.DefaultKeyspace, ReplicationFactor: 1, Volumes: 1}}
	x.master(one, wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"s1"}, Fresh: true})
	keys := 20
	for i := range keys {
		x.reqNo++
		if rep := x.request(0, 1, 1, x.reqNo, wire.Op{Kind: wire.OpPut, Key: fmt.Sprint("k", i), Value: []byte(fmt.Sprint("v", i))}); rep.Err != wire.ErrNone {
			t.Fatalf("put k%d: %v", i, rep.Err)
		}
	}
	// The split's configuration comes before the new keyspace list (a
	// NewConfig), so the replica itself refuses the moved keys.
	split := wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}
	x.now++
	x.s.Step(x.now, "m", &wire.NewConfig{Config: wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"s1"}, Split: split}})

	r := x.s.Replica(0)
	if r.AppliedSN() != wire.SN(keys+1) {
		t.Fatalf("the head applied %d after the split configuration; want the marker at %d", r.AppliedSN(), keys+1)
	}
	if got, want := r.Status().Split, (wire.SplitPoint{Into: 1, SN: wire.SN(keys + 1), Epoch: 2}); got != want {
		t.Errorf("status reports the split point %+v, want %+v", got, want)
	}
	seed := x.engine.Volume(1)
	meta, ok := seed.Meta()
	if !ok || !meta.Seeded || meta.Applied != wire.SN(keys) {
		t.Fatalf("seed of volume 1: %+v, %v; want seeded at SN %d", meta, ok, keys)
	}
	if len(seed.Sessions()) != 1 {
		t.Errorf("seed holds %d sessions, want the one client's", len(seed.Sessions()))
	}
	moved := 0
	for i := range keys {
		k := fmt.Sprint("k", i)
		here, there := r.Object(k).Exists, seed.Get(k).Exists
		if split.Owns(k) != here || here == there {
			t.Errorf("%s: in volume 0 %v, in the seed %v; it stays: %v", k, here, there, split.Owns(k))
		}
		if !split.Owns(k) {
			moved++
			if rep := x.request(0, 2, 1, 100+uint64(i), wire.Op{Kind: wire.OpGet, Key: k}); rep.Err != wire.ErrKeyspaces {
				t.Errorf("volume 0 answers a read of moved key %s: %v", k, rep.Err)
			}
		}
	}
	if moved == 0 || moved == keys {
		t.Fatalf("%d of %d keys moved: the test's keys do not split", moved, keys)
	}

	// The master's next reply: the new list, with the sibling's first
	// configuration; the seed becomes its replica. Clients routing with
	// the old list are refused by the server now.
	two := []wire.Keyspace{one[0].Split([]wire.VolumeID{1})}
	x.master(two, wire.Config{Volume: 1, Epoch: 1, Chain: []wire.NodeID{"s1"}, FromSplit: true})
	if rep := x.request(0, 2, 1, 150, wire.Op{Kind: wire.OpGet, Key: "k0"}); rep.Err != wire.ErrKeyspaces {
		t.Errorf("a read routed with the old keyspace list: %v", rep.Err)
	}
	sib := x.s.Replica(1)
	if sib == nil || sib.AppliedSN() != wire.SN(keys) || sib.Role() != "head+tail" {
		t.Fatalf("volume 1's replica after its first configuration: %v", sib)
	}
	for i := range keys {
		k := fmt.Sprint("k", i)
		if split.Owns(k) {
			continue
		}
		rep := x.request(1, 1, 2, 200+uint64(i), wire.Op{Kind: wire.OpGet, Key: k})
		if rep.Err != wire.ErrNone || string(rep.Result.Value) != fmt.Sprint("v", i) {
			t.Errorf("volume 1 reads %s as %v %q", k, rep.Err, rep.Result.Value)
		}
		// The put of k, retried: its outcome from volume 0, not a new write.
		rep = x.request(1, 1, 2, uint64(i+1), wire.Op{Kind: wire.OpPut, Key: k, Value: []byte("again")})
		if rep.Err != wire.ErrNone || rep.Result.SN != wire.SN(i+1) {
			t.Errorf("a retried put of %s in volume 1: %v at SN %d, want its outcome at SN %d", k, rep.Err, rep.Result.SN, i+1)
		}
	}
}

// A server named in a split's first configuration without a seed (it
// lost it, or never split) does not become an empty member, even in its
// first process, where an empty replica otherwise may.
func TestSplitFirstConfigurationNeedsTheSeed(t *testing.T) {
	x := newSplitServer(t, "s2", true)
	ks := []wire.Keyspace{{Name: wire.DefaultKeyspace, ReplicationFactor: 1, Volumes: 2, Splits: 1, VolumeIDs: []wire.VolumeID{0, 1}}}
	x.master(ks, wire.Config{Volume: 1, Epoch: 1, Chain: []wire.NodeID{"s2", "s1"}, FromSplit: true})
	if r := x.s.Replica(1); r != nil {
		t.Fatalf("a server without a seed took a split's first configuration: %s at %d", r.Role(), r.AppliedSN())
	}
}

// A seed is reported by the server that holds it, as a status of the new
// volume naming the split point (wire.VolumeStatus.Seed), from the
// heartbeat after the split until the new volume's first configuration,
// also once the server has left the parent's chain: the master starts the
// new volume on the servers holding a seed, members of the parent or not
// (catena-lab sim -seed 2 -faults -scans -splits: the only seeded member
// moved off the parent's chain before the new volume started, which then
// never did).
func TestSplitSeedReportedByItsServerAfterItLeftTheParent(t *testing.T) {
	x := newSplitServer(t, "s1", true)
	one := []wire.Keyspace{{Name: wire.DefaultKeyspace, ReplicationFactor: 1, Volumes: 1}}
	x.master(one, wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"s1"}, Fresh: true})
	x.reqNo++
	if rep := x.request(0, 1, 1, x.reqNo, wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}); rep.Err != wire.ErrNone {
		t.Fatalf("put: %v", rep.Err)
	}
	x.now++
	x.s.Step(x.now, "m", &wire.NewConfig{Config: wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"s1"},
		Split: wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}}})
	point := wire.SplitPoint{Into: 1, SN: 2, Epoch: 2}
	seedReported := func(when string) {
		t.Helper()
		for _, st := range x.s.Statuses(x.now) {
			if st.Volume == 1 {
				if !st.Seed() || st.Split != point || st.AppliedSN != point.SN-1 || st.Epoch != 0 {
					t.Fatalf("%s: volume 1 reported as %+v, want a seed at %+v", when, st, point)
				}
				return
			}
		}
		t.Fatalf("%s: no status of volume 1's seed in %+v", when, x.s.Statuses(x.now))
	}
	seedReported("after the split")

	// The master moves the parent's chain to s2: s1 drops its replica of
	// volume 0, not the seed.
	x.now++
	x.s.Step(x.now, "m", &wire.NewConfig{Config: wire.Config{Volume: 0, Epoch: 3, Chain: []wire.NodeID{"s2"},
		Split: wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}}})
	if x.s.Replica(0) != nil {
		t.Fatalf("s1 kept volume 0 after leaving its chain")
	}
	seedReported("after leaving the parent's chain")

	// The new volume starts on s1: the seed is its replica, a member.
	two := []wire.Keyspace{one[0].Split([]wire.VolumeID{1})}
	x.master(two, wire.Config{Volume: 1, Epoch: 1, Chain: []wire.NodeID{"s1"}, FromSplit: true})
	for _, st := range x.s.Statuses(x.now) {
		if st.Volume == 1 && (st.Seed() || st.Epoch != 1 || st.AppliedSN != point.SN-1) {
			t.Fatalf("volume 1 after its first configuration: %+v", st)
		}
	}
	if rep := x.request(1, 1, 2, 10, wire.Op{Kind: wire.OpGet, Key: "k"}); wire.KeyHash("k")%2 == 1 && (rep.Err != wire.ErrNone || string(rep.Result.Value) != "v") {
		t.Errorf("volume 1 reads k as %v %q", rep.Err, rep.Result.Value)
	}
}

// A joining server learns where the history it receives passed the
// volume's latest split from the snapshot, and reports it: the master
// takes the point from the tail, which may have joined after it.
func TestSplitPointTravelsWithTheSnapshot(t *testing.T) {
	x := newSplitServer(t, "s2", false)
	split := wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}
	ks := []wire.Keyspace{{Name: wire.DefaultKeyspace, ReplicationFactor: 2, Volumes: 2, Splits: 1, VolumeIDs: []wire.VolumeID{0, 1}}}
	x.now++
	var transfer wire.TransferID
	for _, env := range x.s.Step(x.now, "m", &wire.HeartbeatReply{SentAt: x.now, LeaseGranted: true, LeaseFor: 1000 * wire.Second, Keyspaces: ks,
		Configs: []wire.Config{{Volume: 0, Epoch: 3, Chain: []wire.NodeID{"s1"}, Joining: "s2", Split: split}}}) {
		if m, ok := env.Msg.(*wire.SyncRequest); ok && env.To == "s1" {
			transfer = m.Transfer
		}
	}
	if transfer == (wire.TransferID{}) {
		t.Fatal("the joiner asked its tail for no transfer")
	}
	point := wire.SplitPoint{Into: 1, SN: 5, Epoch: 2}
	x.now++
	x.s.Step(x.now, "s1", &wire.SyncReply{Volume: 0, Epoch: 3, PredecessorAppliedSN: 9, Transfer: transfer})
	x.now++
	x.s.Step(x.now, "s1", &wire.SnapshotChunk{Volume: 0, Epoch: 3, SnapshotSN: 9, Last: true, SnapshotEpoch: 3, Split: point})
	r := x.s.Replica(0)
	if r == nil || r.AppliedSN() != 9 {
		t.Fatalf("the joiner after the snapshot: %v", r)
	}
	if got := r.Status().Split; got != point {
		t.Errorf("the joiner reports the split point %+v, want the snapshot's %+v", got, point)
	}
	for _, st := range x.s.Statuses(x.now) {
		if st.Volume == 1 {
			t.Errorf("the joiner reports a seed it does not hold: %+v", st)
		}
	}
}
