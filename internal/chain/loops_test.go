package chain

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

func TestLoopRouter(t *testing.T) {
	auth := &wire.NewAuth{}
	for _, tc := range []struct {
		name  string
		m     wire.Message
		count int
		want  int
	}{
		{"one loop takes everything", &wire.Forward{Volume: 5}, 1, 0},
		{"a volume's message goes to its loop", &wire.Forward{Volume: 5}, 4, 1},
		{"a client request goes to its volume's loop", &wire.ClientRequest{Volume: 7}, 4, 3},
		{"a configuration goes to its volume's loop", &wire.NewConfig{Config: wire.Config{Volume: 6}}, 4, 2},
		{"users and roles go to every loop", auth, 3, -1},
		{"a link's reset goes to every loop", &wire.PeerReset{}, 2, -1},
		{"a heartbeat reply goes to every loop", &wire.HeartbeatReply{}, 2, -1},
		{"a message of no volume goes to loop 0", &wire.ConfigRequest{}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (LoopRouter{Count: tc.count}).Inbox(tc.m); got != tc.want {
				t.Fatalf("Inbox = %d, want %d", got, tc.want)
			}
		})
	}
	if got := (LoopRouter{Count: 3}).Copy(auth, 2); got != auth {
		t.Errorf("loop 2 got %v of the users and roles, want them", got)
	}
	t.Run("each loop gets a heartbeat reply with its own configurations", func(t *testing.T) {
		reply := &wire.HeartbeatReply{SentAt: 7, LeaseGranted: true, Configs: []wire.Config{{Volume: 0}, {Volume: 1}, {Volume: 4}}}
		want := [][]wire.VolumeID{{0}, {1, 4}, nil}
		for i := range 3 {
			r := (LoopRouter{Count: 3}).Copy(reply, i).(*wire.HeartbeatReply)
			var volumes []wire.VolumeID
			for _, c := range r.Configs {
				volumes = append(volumes, c.Volume)
			}
			if r.SentAt != 7 || !r.LeaseGranted || !slices.Equal(volumes, want[i]) {
				t.Errorf("loop %d got %+v with configurations of volumes %v, want %v", i, r, volumes, want[i])
			}
		}
		if len(reply.Configs) != 3 {
			t.Errorf("the original reply changed: %+v", reply)
		}
	})
}

// loopServers returns the two loops of server "s", which the master made
// the only member of volumes 0–3 with a lease, each loop with the
// master's reply as LoopRouter gives it.
func loopServers(t *testing.T) ([]*Server, *LoopStatuses) {
	t.Helper()
	statuses := NewLoopStatuses(2)
	loops := make([]*Server, 2)
	for i := range loops {
		loops[i] = NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
			Limits: DefaultLimits, Engine: storage.NewMemoryEngine(), Loop: LoopOptions{Index: i, Count: 2, Statuses: statuses}})
	}
	reply := &wire.HeartbeatReply{SentAt: 0, LeaseGranted: true, LeaseFor: 1000 * wire.Second, Keyspaces: loopKeyspaces}
	for v := range wire.VolumeID(4) {
		reply.Configs = append(reply.Configs, wire.Config{Volume: v, Epoch: 1, Chain: []wire.NodeID{"s"}})
	}
	for i, s := range loops {
		s.Step(0, "m", LoopRouter{Count: 2}.Copy(reply, i))
	}
	return loops, statuses
}

var loopKeyspaces = []wire.Keyspace{{Name: wire.DefaultKeyspace, ReplicationFactor: 1, Volumes: 4}}

// heartbeatVolumes returns the volumes of the heartbeat among out; false
// if there is none.
func heartbeatVolumes(out []wire.Envelope) ([]wire.VolumeID, bool) {
	for _, env := range out {
		if hb, ok := env.Msg.(*wire.Heartbeat); ok {
			var volumes []wire.VolumeID
			for _, s := range hb.Volumes {
				volumes = append(volumes, s.Volume)
			}
			return volumes, true
		}
	}
	return nil, false
}

// Two loops of one server process split its volumes and share its
// duties: each holds its own volumes, only loop 0 sends heartbeats, and
// those report every loop's volumes, but not before every loop published
// its statuses; the lease loop 0 asked for reaches loop 1.
func TestLoopsShareOneServersDuties(t *testing.T) {
	loops, statuses := loopServers(t)
	if got := loops[0].Volumes(); !slices.Equal(got, []wire.VolumeID{0, 2}) {
		t.Fatalf("loop 0 holds volumes %v, want 0 and 2", got)
	}
	if got := loops[1].Volumes(); !slices.Equal(got, []wire.VolumeID{1, 3}) {
		t.Fatalf("loop 1 holds volumes %v, want 1 and 3", got)
	}

	now := 2 * wire.Second
	if _, sent := heartbeatVolumes(loops[1].Tick(now)); sent {
		t.Fatal("loop 1 sent a heartbeat: only loop 0 speaks to the master")
	}
	statuses.Publish(0, loops[0].Statuses(now), now)
	if _, sent := heartbeatVolumes(loops[0].Tick(now)); sent {
		t.Fatal("loop 0 sent a heartbeat before loop 1 published its volumes: a restarted server would leave them out")
	}
	statuses.Publish(1, loops[1].Statuses(now), now)
	got, sent := heartbeatVolumes(loops[0].Tick(now))
	if !sent || !slices.Equal(got, []wire.VolumeID{0, 1, 2, 3}) {
		t.Fatalf("loop 0's heartbeat reports volumes %v (sent %v), want 0–3 in order", got, sent)
	}

	// A heartbeat loop 1 needs (a joining server became ready) is asked
	// of loop 0.
	if out := loops[1].heartbeat(now); out != nil || !statuses.TakeWanted(1) || statuses.TakeWanted(1) {
		t.Fatalf("loop 1's heartbeat: %v; want none, and one request to loop 0", out)
	}
	if _, sent := heartbeatVolumes(loops[0].Nudge(now)); !sent {
		t.Fatal("loop 0 sent no heartbeat when nudged")
	}

	// Loop 1 serves with the lease from the reply to loop 0's heartbeat.
	key := keyOfVolume(t, 1)
	req := &wire.ClientRequest{Volume: 1, Epoch: 1, Client: 9, ReqNo: 1, AckedBelow: 1, Keyspaces: uint32(len(loopKeyspaces)),
		Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v")}}
	for _, env := range loops[1].Step(now, "c", req) {
		if r, ok := env.Msg.(*wire.ClientReply); ok && r.Err != wire.ErrNone {
			t.Fatalf("loop 1 refused a write of its volume: %v", r.Err)
		}
	}
	if got := loops[1].Replica(1).AppliedSN(); got != 1 {
		t.Fatalf("loop 1 applied up to %d, want 1", got)
	}

	// A configuration of another loop's volume is not this loop's.
	loops[0].Step(now, "m", &wire.NewConfig{Config: wire.Config{Volume: 5, Epoch: 1, Chain: []wire.NodeID{"s"}}})
	if loops[0].Replica(5) != nil {
		t.Fatal("loop 0 took volume 5, loop 1's")
	}
}

// A loop that hangs keeps its volumes in chains it no longer serves
// while loop 0 heartbeats for the process: loop 0 stops heartbeating
// once another loop has published nothing for SilenceMax, so the master
// takes the server out as it would a crashed one, and starts again when
// the loop runs again.
func TestHeartbeatsStopWhileALoopIsSilent(t *testing.T) {
	loops, statuses := loopServers(t)
	now := 2 * wire.Second
	statuses.Publish(0, loops[0].Statuses(now), now)
	statuses.Publish(1, loops[1].Statuses(now), now)
	if _, sent := heartbeatVolumes(loops[0].Tick(now)); !sent {
		t.Fatal("loop 0 sent no heartbeat with both loops publishing")
	}

	at := now + DefaultLoopSilenceMax // loop 1 silent for exactly SilenceMax: still alive
	statuses.Publish(0, loops[0].Statuses(at), at)
	if _, sent := heartbeatVolumes(loops[0].Tick(at)); !sent {
		t.Fatal("loop 0 withheld its heartbeat with loop 1 silent for SilenceMax, not longer")
	}
	at += wire.Second
	if _, sent := heartbeatVolumes(loops[0].Tick(at)); sent {
		t.Fatal("loop 0 sent a heartbeat with loop 1 silent for longer than SilenceMax")
	}
	if silence, hung := loops[0].Silence(); !hung || silence.Loop != 1 || silence.For != DefaultLoopSilenceMax+wire.Second {
		t.Fatalf("loop 0 reports the silence %+v (hung %v), want loop 1 for SilenceMax+1s", silence, hung)
	}

	statuses.Publish(1, loops[1].Statuses(at), at) // loop 1 runs again
	if _, sent := heartbeatVolumes(loops[0].Tick(at)); !sent {
		t.Fatal("loop 0 sent no heartbeat once loop 1 published again")
	}
	if silence, hung := loops[0].Silence(); hung {
		t.Fatalf("loop 0 still reports the silence %+v", silence)
	}
}

// A restarted process's loops each restore their own volumes from the
// one database.
func TestLoopsRestoreTheirOwnVolumes(t *testing.T) {
	engine := storage.NewMemoryEngine()
	one := NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: engine})
	reply := &wire.HeartbeatReply{LeaseGranted: true, LeaseFor: wire.Second, Keyspaces: loopKeyspaces}
	for v := range wire.VolumeID(4) {
		reply.Configs = append(reply.Configs, wire.Config{Volume: v, Epoch: 1, Chain: []wire.NodeID{"s"}})
	}
	one.Step(0, "m", reply)
	if err := engine.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]wire.VolumeID{{0, 2}, {1, 3}} {
		s := NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 2, HeartbeatInterval: wire.Second,
			Limits: DefaultLimits, Engine: engine, Loop: LoopOptions{Index: i, Count: 2, Statuses: NewLoopStatuses(2)}})
		if got := s.Volumes(); !slices.Equal(got, want) {
			t.Errorf("loop %d restored volumes %v, want %v", i, got, want)
		}
	}
}

// keyOfVolume returns a key loopKeyspaces routes to volume v.
func keyOfVolume(t *testing.T, v wire.VolumeID) string {
	t.Helper()
	for i := range 1000 {
		key := fmt.Sprintf("k%d", i)
		if got, ok := placement.Route(loopKeyspaces, key); ok && got == v {
			return key
		}
	}
	t.Fatalf("no key routes to volume %d", v)
	return ""
}

// The loops of one server process share the messages LoopRouter hands to
// every loop (the users and roles, a link's reset, and of a heartbeat
// reply all but its configurations) on the promise that loops only read
// them. Here three loops step the same messages at once, each on its own
// goroutine as node.Pool runs them, then serve a write of each of their
// volumes and publish their statuses: under go test -race, a loop that
// wrote to a shared message (or to another loop's state) fails the test.
func TestLoopsOnlyReadTheMessagesTheyShare(t *testing.T) {
	const count = 3
	statuses := NewLoopStatuses(count)
	router := LoopRouter{Count: count}
	loops := make([]*Server, count)
	for i := range loops {
		loops[i] = NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
			Limits: DefaultLimits, Engine: storage.NewMemoryEngine(), Loop: LoopOptions{Index: i, Count: count, Statuses: statuses}})
	}
	table := wire.AuthTable{Version: 1, Users: []wire.User{{Name: "alice", Roles: []string{"writer"}}},
		Roles: []wire.Role{{Name: "writer", Grants: []wire.Grant{{Prefix: "k", Access: wire.AccessReadWrite}}}}}
	reply := &wire.HeartbeatReply{LeaseGranted: true, LeaseFor: 1000 * wire.Second, Keyspaces: loopKeyspaces, Auth: &table}
	for v := range wire.VolumeID(4) {
		reply.Configs = append(reply.Configs, wire.Config{Volume: v, Epoch: 1, Chain: []wire.NodeID{"s"}})
	}
	newer := table.Clone()
	newer.Version = 2
	shared := []struct {
		from wire.NodeID
		m    wire.Message
	}{{"m", reply}, {"m", &wire.NewAuth{Table: newer}}, {"t", &wire.PeerReset{Peer: "t"}}}
	keys := make([]string, 4)
	for v := range keys {
		keys[v] = keyOfVolume(t, wire.VolumeID(v))
	}

	var wg sync.WaitGroup
	for i, s := range loops {
		wg.Go(func() {
			now := wire.Second
			for _, in := range shared {
				if got := router.Inbox(in.m); got != -1 {
					t.Errorf("%T goes to loop %d, want every loop", in.m, got)
				}
				s.Step(now, in.from, router.Copy(in.m, i))
			}
			for _, v := range s.Volumes() {
				req := &wire.ClientRequest{Volume: v, Epoch: 1, Client: 9, ReqNo: 1, AckedBelow: 1, Keyspaces: uint32(len(loopKeyspaces)),
					Caller: wire.Caller{Name: "alice"}, Op: wire.Op{Kind: wire.OpPut, Key: keys[v], Value: []byte("v")}}
				for _, env := range s.Step(now, wire.ClientPrefix+"alice", req) {
					if r, ok := env.Msg.(*wire.ClientReply); ok && r.Err != wire.ErrNone {
						t.Errorf("loop %d refused a write of volume %d: %v", i, v, r.Err)
					}
				}
				if got := s.Replica(v).AppliedSN(); got != 1 {
					t.Errorf("loop %d applied volume %d up to %d, want 1", i, v, got)
				}
			}
			statuses.Publish(i, s.Statuses(now), now)
			s.Tick(now + wire.Second)
		})
	}
	wg.Wait()

	for i, s := range loops {
		if got := s.AuthVersion(); got != newer.Version {
			t.Errorf("loop %d holds users and roles of version %d, want %d", i, got, newer.Version)
		}
	}
	got, sent := heartbeatVolumes(loops[0].Tick(3 * wire.Second))
	if !sent || !slices.Equal(got, []wire.VolumeID{0, 1, 2, 3}) {
		t.Errorf("loop 0's heartbeat reports volumes %v (sent %v), want 0–3", got, sent)
	}
	if len(reply.Configs) != 4 || reply.Auth.Version != 1 || len(reply.Keyspaces) != len(loopKeyspaces) {
		t.Errorf("the shared reply changed: %+v", reply)
	}
}
