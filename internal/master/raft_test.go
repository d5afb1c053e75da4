package master

import (
	"encoding/json"
	"fmt"
	"github.com/catena-kv/catena/internal/release"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/wire"
)

// members runs replicated master members in memory: a message between
// members arrives at once, a message to a server is dropped, and each
// member's log outlives its process.
type members struct {
	t             *testing.T
	ids           []wire.NodeID
	now           wire.Time
	snapshotEvery int
	logs          map[wire.NodeID]*raftlog.Memory
	up            map[wire.NodeID]*Replicated
	// cut holds the links that lose every message, both ways.
	cut map[[2]wire.NodeID]bool
}

func newMembers(t *testing.T, snapshotEvery int, ids ...wire.NodeID) *members {
	return &members{t: t, ids: ids, snapshotEvery: snapshotEvery, logs: map[wire.NodeID]*raftlog.Memory{}, up: map[wire.NodeID]*Replicated{}}
}

// start starts a member from its log (empty on its first start).
func (n *members) start(id wire.NodeID, o Options) error {
	if n.logs[id] == nil {
		n.logs[id] = raftlog.NewMemory()
	}
	r, err := NewReplicated(RaftOptions{
		ID: id, Members: n.ids, Master: o, Log: n.logs[id],
		HeartbeatInterval: 20 * wire.Millisecond, ElectionTimeout: 60 * wire.Millisecond,
		Rand: rand.New(rand.NewPCG(uint64(len(n.up)), uint64(n.now))), SnapshotEvery: n.snapshotEvery,
	})
	if err == nil {
		n.up[id] = r
	}
	return err
}

// startAll starts every member with o, and fails the test if one fails.
func (n *members) startAll(o Options) {
	n.t.Helper()
	for _, id := range n.ids {
		if err := n.start(id, o); err != nil {
			n.t.Fatalf("starting %s: %v", id, err)
		}
	}
}

// stopAll stops every member; their logs stay.
func (n *members) stopAll() { clear(n.up) }

func (n *members) deliver(from wire.NodeID, envs []wire.Envelope) {
	type msg struct {
		from wire.NodeID
		env  wire.Envelope
	}
	var queue []msg
	for _, e := range envs {
		queue = append(queue, msg{from, e})
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if n.cut[[2]wire.NodeID{m.from, m.env.To}] || n.cut[[2]wire.NodeID{m.env.To, m.from}] {
			continue
		}
		if r := n.up[m.env.To]; r != nil {
			for _, e := range r.Step(n.now, m.from, m.env.Msg) {
				queue = append(queue, msg{m.env.To, e})
			}
		}
	}
}

// leader returns the member that leads, or nil.
func (n *members) leader() *Replicated {
	for _, id := range n.ids {
		if r := n.up[id]; r != nil && r.Leading() {
			return r
		}
	}
	return nil
}

// run advances time by d in 10ms steps: servers heartbeat every member
// (reporting the leader's epoch of volume 0, and a joiner ready), and
// every member ticks.
func (n *members) run(d wire.Time, servers ...wire.NodeID) {
	for end := n.now + d; n.now < end; {
		n.now += 10 * wire.Millisecond
		if l := n.leader(); l != nil {
			cfg := l.Master().Config(0)
			for _, id := range servers {
				hb := &wire.Heartbeat{Incarnation: 1, SentAt: n.now, Heard: n.now} // replies arrive at once
				if cfg.Contains(id) {
					hb.Volumes = []wire.VolumeStatus{{Volume: 0, Epoch: cfg.Epoch, JoinerReady: cfg.Tail() == id && cfg.Joining != ""}}
				}
				for _, m := range n.ids {
					n.deliver(id, []wire.Envelope{{To: m, Msg: hb}})
				}
			}
		}
		for _, id := range n.ids {
			if r := n.up[id]; r != nil {
				n.deliver(id, r.Tick(n.now))
			}
		}
	}
}

// A replicated master restarted from its Raft logs alone, while a chain
// is short, takes t from the log and extends the chain back to 3 with a
// spare; with a snapshot every command, the settings come from the
// latest snapshot rather than the first.
func TestReplicatedMasterRestartedWithoutSettingsExtendsShortChain(t *testing.T) {
	for _, every := range []int{1000, 1} {
		n := newMembers(t, every, "m1", "m2", "m3")
		n.startAll(testOptions())
		n.run(300*wire.Millisecond, "a", "b", "c")
		n.run(wire.Second, "a", "c") // b fails; there is no spare
		for _, id := range n.ids {
			if c := n.up[id].Master().Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c"}) || c.Joining != "" {
				t.Fatalf("snapshot every %d: %s has %v, want a→c", every, id, c)
			}
		}

		n.stopAll()
		_, snap, _, _ := n.logs["m1"].Load()
		if index := snap.GetMetadata().GetIndex(); (every == 1) != (index > 1) {
			t.Fatalf("snapshot every %d: m1's snapshot is at index %d", every, index)
		}
		n.startAll(timingOptions())
		n.run(2*wire.Second, "a", "c", "d")
		for _, id := range n.ids {
			m := n.up[id].Master()
			if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c", "d"}) {
				t.Fatalf("snapshot every %d: %s has %v, want the spare d added at the tail", every, id, c)
			}
			if s := m.State().Settings; s.ReplicationFactor != 3 || s.Volumes != 1 {
				t.Fatalf("snapshot every %d: %s has settings %+v", every, id, s)
			}
		}
	}
}

// A member's first start needs the cluster's settings; a restarted member
// refuses settings that contradict its log's.
func TestReplicatedMasterSettingsOnStart(t *testing.T) {
	n := newMembers(t, 1000, "m1", "m2", "m3")
	if err := n.start("m1", timingOptions()); err == nil || !strings.Contains(err.Error(), "no volumes") {
		t.Fatalf("first start without settings: %v, want an error", err)
	}
	n.startAll(testOptions())
	n.run(300*wire.Millisecond, "a", "b", "c")
	n.stopAll()
	o := timingOptions()
	o.ReplicationFactor = 2
	if err := n.start("m1", o); err == nil || !strings.Contains(err.Error(), "ReplicationFactor: saved 3, given 2") {
		t.Fatalf("restart with t=2: %v, want an error naming the saved and given t", err)
	}
	if err := n.start("m1", testOptions()); err != nil {
		t.Fatalf("restart with the settings it was created with: %v", err)
	}
	if s, err := SavedSettings(n.logs["m2"]); err != nil || s.ReplicationFactor != 3 {
		t.Fatalf("SavedSettings = %+v, %v", s, err)
	}
}

// A Raft log written before settings were part of the state (raft's
// Bootstrap entries, then commands) resumes with the settings given once,
// and records them in a snapshot: the next start needs none.
func TestReplicatedMasterLogWithoutSettings(t *testing.T) {
	log := raftlog.NewMemory()
	addNode, err := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: proto.Uint64(1)})
	if err != nil {
		t.Fatal(err)
	}
	register, _ := json.Marshal(Command{Kind: CmdRegister, Server: "a", Incarnation: 1})
	log.Save(&pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(3)}, nil, []*pb.Entry{
		{Term: proto.Uint64(1), Index: proto.Uint64(1), Type: pb.EntryType_EntryConfChange.Enum(), Data: addNode},
		{Term: proto.Uint64(2), Index: proto.Uint64(2), Type: pb.EntryType_EntryNormal.Enum()},
		{Term: proto.Uint64(2), Index: proto.Uint64(3), Type: pb.EntryType_EntryNormal.Enum(), Data: register},
	})
	n := newMembers(t, 1000, "m1")
	n.logs["m1"] = log
	if err := n.start("m1", timingOptions()); err == nil || !strings.Contains(err.Error(), "no cluster settings") {
		t.Fatalf("old log without settings: %v, want an error saying so", err)
	}
	n.startAll(testOptions())
	n.run(300 * wire.Millisecond)
	n.stopAll()
	n.startAll(timingOptions())
	m := n.up["m1"].Master()
	if s := m.State().Settings; s.ReplicationFactor != 3 {
		t.Fatalf("settings %+v: want t=3 from the snapshot", s)
	}
	if st := m.State(); st.Incarnations["a"] != 1 || !slices.Equal(st.Configs[0].Chain, []wire.NodeID{"a", "b", "c"}) {
		t.Fatalf("state %+v: want the old log's registration and chain", st)
	}
}

// A member that stops hearing the leader, cut off from everyone or only
// from the leader (a bridge: it still reaches the third member), does not
// depose the leader when it campaigns, nor when the fault heals: it asks
// for pre-votes, which members that hear the leader refuse. Without
// that, it raised the term at every campaign and the leader stepped down
// on seeing it, so a bridge kept the master without a leader.
func TestCutMemberDoesNotDeposeTheLeader(t *testing.T) {
	for _, bridge := range []bool{false, true} {
		n := newMembers(t, 0, "a", "b", "c")
		n.startAll(testOptions())
		n.run(time2(500))
		l := n.leader()
		if l == nil {
			t.Fatal("no leader")
		}
		term, leader := l.Term(), l.opts.ID
		var victim wire.NodeID
		for _, id := range n.ids {
			if id != leader {
				victim = id
				break
			}
		}
		n.cut = map[[2]wire.NodeID]bool{{victim, leader}: true}
		if !bridge {
			for _, id := range n.ids {
				n.cut[[2]wire.NodeID{victim, id}] = true
			}
		}
		n.run(time2(1000)) // many election timeouts
		n.cut = nil
		n.run(time2(500))
		if l := n.leader(); l == nil || l.opts.ID != leader || l.Term() != term {
			got := "none"
			if l != nil {
				got = fmt.Sprintf("%s in term %d", l.opts.ID, l.Term())
			}
			t.Errorf("bridge %v: leader %s in term %d before %s was cut; after: %s", bridge, leader, term, victim, got)
		}
	}
}

func time2(ms int) wire.Time { return wire.Time(ms) * wire.Millisecond }

// A new replicated cluster starts at its release's newest protocol
// version, through its log, so every member holds it; one restarted
// from its logs afterwards, with servers registered, is not new.
func TestReplicatedNewClusterStartsAtItsReleasesVersion(t *testing.T) {
	o := testOptions()
	o.Protocol = release.Range{Min: 1, Max: 2}
	n := newMembers(t, 1000, "m1", "m2", "m3")
	n.startAll(o)
	n.run(time2(500), "a", "b", "c")
	for _, id := range n.ids {
		if v := n.up[id].Master().ClusterVersion(); v != 2 {
			t.Errorf("member %s of a new cluster runs at %d, want 2", id, v)
		}
	}
}

// A leader cut off from the other members does not answer keyspace
// requests: its state may lack what the leader elected meanwhile
// applied. In catena-lab torture -sites 3 -split (seed 3), a member cut
// off while leader, and not yet deposed, answered a request for a second
// split of the default keyspace with "was split 0 times, not 1" (it had
// not seen the first), while the new leader applied the request: the
// operator was told "refused" for a split that happened.
func TestCutOffLeaderDoesNotAnswerKeyspaceRequests(t *testing.T) {
	n := newMembers(t, 0, "m1", "m2", "m3")
	n.startAll(testOptions())
	n.run(time2(500), "a", "b", "c")
	old := n.leader()
	if old == nil {
		t.Fatal("no leader")
	}
	n.cut = map[[2]wire.NodeID]bool{}
	for _, id := range n.ids {
		n.cut[[2]wire.NodeID{old.opts.ID, id}] = true
	}
	n.run(time2(1000), "a", "b", "c")
	var current *Replicated
	for _, id := range n.ids {
		if r := n.up[id]; r != old && r.Leading() {
			current = r
		}
	}
	if current == nil || !old.Leading() {
		t.Fatalf("want a new leader beside the cut-off one still leading (new %v, old leading %v)", current != nil, old.Leading())
	}
	split := &wire.KeyspaceRequest{Split: wire.DefaultKeyspace}
	n.deliver("admin", []wire.Envelope{{To: current.opts.ID, Msg: split}})
	n.run(time2(200), "a", "b", "c")
	if ks := current.Master().Keyspaces()[0]; ks.Splits != 1 {
		t.Fatalf("the new leader did not split the default keyspace: %+v", ks)
	}
	// The operator asks again, with the split count it now sees: every
	// member gets the request. The cut-off leader must not answer.
	again := &wire.KeyspaceRequest{Split: wire.DefaultKeyspace, Create: wire.Keyspace{Splits: 1}}
	for _, e := range old.Step(n.now, "admin", again) {
		if r, ok := e.Msg.(*wire.KeyspaceReply); ok && e.To == "admin" {
			t.Errorf("the cut-off leader answered %+v (its default keyspace: %+v)", r, old.Master().Keyspaces()[0])
		}
	}
}
