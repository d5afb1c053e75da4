package master

import (
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

func testOptions() Options {
	return Options{
		Settings:         Settings{ReplicationFactor: 3},
		Chains:           map[wire.VolumeID][]wire.NodeID{0: {"a", "b", "c"}},
		FailureTimeout:   400 * wire.Millisecond,
		LeaseDuration:    300 * wire.Millisecond,
		ClockDriftMax:    0.01,
		ExtensionTimeout: 3 * wire.Second,
	}
}

// New refuses options it cannot run safely with (Validate) and a cluster
// it cannot create (newCluster).
func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"valid", func(*Options) {}, ""},
		{"no volumes", func(o *Options) { o.Chains = nil }, "no volumes"},
		{"repeated server", func(o *Options) { o.Chains[0] = []wire.NodeID{"a", "a"} }, "repeated"},
		{"lease outlasts failure timeout", func(o *Options) { o.LeaseDuration = 399 * wire.Millisecond }, "must exceed the lease guard"},
		{"drift too large", func(o *Options) { o.ClockDriftMax = 0.7 }, "clock drift"},
		{"replication factor", func(o *Options) { o.ReplicationFactor = 0 }, "replication factor"},
		{"placement", func(o *Options) { o.Placement = "diagonal" }, "unknown placement"},
		{"volume outside the volumes", func(o *Options) { o.Volumes = 1; o.Chains[1] = []wire.NodeID{"a"} }, "outside the 1 volumes"},
		{"repeated ring server", func(o *Options) { o.Servers = []wire.NodeID{"a", "b", "a"} }, "repeated server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			tc.change(&o)
			_, err := New("m", o)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("New() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// heartbeatAll delivers a heartbeat from each server at now, reporting the
// given epoch, and returns the replies by server. Replies arrive at once:
// each server has heard every earlier one.
func heartbeatAll(m *Master, now wire.Time, incarnation uint64, ids ...wire.NodeID) map[wire.NodeID]*wire.HeartbeatReply {
	replies := map[wire.NodeID]*wire.HeartbeatReply{}
	for _, id := range ids {
		hb := &wire.Heartbeat{Incarnation: incarnation, SentAt: now, Heard: now}
		if st, ok := m.ServerStatus(id, 0); ok || m.Config(0).Contains(id) {
			st.Volume, st.Epoch = 0, m.Config(0).Epoch
			hb.Volumes = []wire.VolumeStatus{st}
		}
		for _, env := range m.Step(now, id, hb) {
			if r, ok := env.Msg.(*wire.HeartbeatReply); ok && env.To == id {
				replies[id] = r
			}
		}
	}
	return replies
}

func TestFailureDetectionRemovesAndExtends(t *testing.T) {
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	replies := heartbeatAll(m, 0, 1, "a", "b", "c", "d")
	if !replies["a"].LeaseGranted || replies["a"].LeaseFor != 300*wire.Millisecond {
		t.Fatalf("no lease granted: %+v", replies["a"])
	}
	// b stops; the others keep heartbeating.
	for now := 100 * wire.Millisecond; now <= 500*wire.Millisecond; now += 100 * wire.Millisecond {
		heartbeatAll(m, now, 1, "a", "c", "d")
		m.Tick(now)
	}
	c := m.Config(0)
	if !slices.Equal(c.Chain, []wire.NodeID{"a", "c"}) || c.Joining != "d" {
		t.Fatalf("config %v: want b removed and d joining", c)
	}
	// The tail reports its joiner ready: d becomes the tail.
	m.Step(600*wire.Millisecond, "c", &wire.Heartbeat{Incarnation: 1, Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: c.Epoch, JoinerReady: true}}})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c", "d"}) || c.Joining != "" {
		t.Fatalf("config %v: want d promoted to tail", c)
	}
}

// A server whose heartbeats arrive but that hears none of the replies (a
// one-way fault) is granted no lease once the master has been answering
// it unheard for the failure timeout, and is removed like a silent
// server. When it hears again, it counts as alive and is leased again.
func TestServerThatHearsNoRepliesIsRemoved(t *testing.T) {
	o := testOptions()
	m, _ := New("m", o)
	heartbeatAll(m, 0, 1, "a", "b", "c", "d")
	deafHeartbeat := func(now wire.Time, heard wire.Time) *wire.HeartbeatReply {
		hb := &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: heard, Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch}}}
		for _, env := range m.Step(now, "b", hb) {
			if r, ok := env.Msg.(*wire.HeartbeatReply); ok && env.To == "b" {
				return r
			}
		}
		t.Fatalf("no reply to b at %d", now)
		return nil
	}
	var lastGrant wire.Time
	removedAt := wire.Time(-1)
	for now := 100 * wire.Millisecond; now <= 2*wire.Second; now += 100 * wire.Millisecond {
		heartbeatAll(m, now, 1, "a", "c", "d")
		if deafHeartbeat(now, 0).LeaseGranted {
			lastGrant = now
		}
		m.Tick(now)
		if removedAt < 0 && m.Config(0).Index("b") < 0 {
			removedAt = now
		}
	}
	if removedAt < 0 {
		t.Fatalf("b, hearing nothing, still in %v", m.Config(0))
	}
	if lastGrant > o.FailureTimeout+100*wire.Millisecond || removedAt-lastGrant <= o.LeaseGuard() {
		t.Fatalf("b's last lease at %d, removed at %d (lease guard %d)", lastGrant, removedAt, o.LeaseGuard())
	}
	if st := m.Status(); slices.ContainsFunc(st.Servers, func(s wire.ServerStatus) bool { return s.ID == "b" && s.Alive }) {
		t.Fatal("b, hearing nothing, counts as alive")
	}
	// b hears the reply to its heartbeat of 2s: alive and leased again.
	if r := deafHeartbeat(2100*wire.Millisecond, 2*wire.Second); !r.LeaseGranted {
		t.Fatalf("b hears again but gets no lease: %+v", r)
	}
	if st := m.Status(); !slices.ContainsFunc(st.Servers, func(s wire.ServerStatus) bool { return s.ID == "b" && s.Alive }) {
		t.Fatal("b hears again but does not count as alive")
	}
}

func TestRestartedServerRemovedAtOnce(t *testing.T) {
	m, _ := New("m", testOptions())
	heartbeatAll(m, 0, 1, "a", "b", "c")
	epoch := m.Config(0).Epoch
	heartbeatAll(m, 10*wire.Millisecond, 2, "b") // b restarted
	if c := m.Config(0); c.Index("b") >= 0 || c.Epoch != epoch+1 {
		t.Fatalf("config %v: want b removed in the next epoch", c)
	}
}

// A server whose data directory was wiped starts a new count of its
// incarnations (from the wall clock, above any count of an earlier
// directory) and says its directory is new: the master, which knew the
// server, treats it as restarted (it leaves its chains at once, and may
// be extended onto them later) and tells it it is returning, so it does
// not take membership while empty. Before, its count restarted at 1,
// below what the master knew, and the master ignored it for good.
func TestWipedServerIsRemovedAndTold(t *testing.T) {
	replyIn := func(out []wire.Envelope) *wire.HeartbeatReply {
		for _, e := range out {
			if r, ok := e.Msg.(*wire.HeartbeatReply); ok {
				return r
			}
		}
		t.Fatalf("no heartbeat reply in %v", out)
		return nil
	}
	m, _ := New("m", testOptions())
	heartbeatAll(m, 0, 1, "a", "b", "c")
	epoch := m.Config(0).Epoch
	wiped := uint64(1_790_000_000_000_000) // a wall-clock count
	out := m.Step(20*wire.Millisecond, "b", &wire.Heartbeat{Incarnation: wiped, SentAt: 20 * wire.Millisecond, NewDataDir: true})
	if reply := replyIn(out); !reply.Returning {
		t.Fatalf("reply to the wiped server: %+v, want Returning", reply)
	}
	if c := m.Config(0); c.Index("b") >= 0 || c.Epoch != epoch+1 {
		t.Fatalf("config %v: want the wiped b removed in the next epoch", c)
	}
	if got := m.State().Incarnations["b"]; got != wiped {
		t.Fatalf("b's incarnation %d, want the wiped directory's %d", got, wiped)
	}
	// A new server is told it is not returning; so is a's first process.
	out = m.Step(30*wire.Millisecond, "d", &wire.Heartbeat{Incarnation: wiped, SentAt: 30 * wire.Millisecond, NewDataDir: true})
	if reply := replyIn(out); reply.Returning {
		t.Fatalf("reply to a new server: Returning")
	}
	out = m.Step(30*wire.Millisecond, "a", &wire.Heartbeat{Incarnation: 1, SentAt: 30 * wire.Millisecond})
	if reply := replyIn(out); reply.Returning {
		t.Fatalf("reply to a's first process: Returning")
	}
	if s := m.State(); s.FirstIncarnations["d"] != wiped || s.FirstIncarnations["a"] != 1 || s.FirstIncarnations["b"] != 1 {
		t.Fatalf("first incarnations %v", s.FirstIncarnations)
	}
}

func TestLastMemberNeverRemoved(t *testing.T) {
	o := testOptions()
	o.Chains[0] = []wire.NodeID{"a"}
	o.ReplicationFactor = 1
	m, _ := New("m", o)
	heartbeatAll(m, 0, 1, "a")
	m.Tick(10 * wire.Second)
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a"}) {
		t.Fatalf("config %v: the last member must stay", c)
	}
}

func TestStaleServerGetsCurrentConfig(t *testing.T) {
	m, _ := New("m", testOptions())
	heartbeatAll(m, 0, 1, "a", "b", "c", "d")
	out := m.Step(0, "a", &wire.Heartbeat{Incarnation: 1, Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: 0}}})
	reply := out[0].Msg.(*wire.HeartbeatReply)
	if len(reply.Configs) != 1 || reply.Configs[0].Epoch != m.Config(0).Epoch {
		t.Fatalf("reply %+v: want the current configuration", reply)
	}
}

// The master extends shortened chains exactly as the placement policy
// decides (placement.Cluster.Recover), which fig7 runs too: the same
// volumes, onto the same targets.
func TestRecoveryFollowsThePlacementPolicy(t *testing.T) {
	servers := []wire.NodeID{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	for _, s := range []placement.Strategy{placement.Ring, placement.RandomSeq, placement.Random} {
		o := testOptions()
		o.Placement, o.Servers, o.RecoveryPerServerMax = s, servers, 2
		// Consecutive servers, 24 volumes each: balanced, so nothing
		// rebalances before the failure.
		o.Chains = map[wire.VolumeID][]wire.NodeID{}
		for v := range 64 {
			o.Chains[wire.VolumeID(v)] = []wire.NodeID{servers[v%8], servers[(v+1)%8], servers[(v+2)%8]}
		}
		m, err := New("m", o)
		if err != nil {
			t.Fatal(err)
		}
		heartbeatAll(m, 0, 1, servers...)
		up := slices.DeleteFunc(slices.Clone(servers), func(id wire.NodeID) bool { return id == "s3" })
		for now := 100 * wire.Millisecond; now <= 500*wire.Millisecond; now += 100 * wire.Millisecond {
			heartbeatAll(m, now, 1, up...)
			m.Tick(now)
		}
		// The policy's decision on the configurations the removal left.
		cluster := placement.NewCluster(s, 3, 2, len(servers))
		var chains []placement.Chain
		joining := map[wire.VolumeID]wire.NodeID{}
		for _, c := range m.Configs() {
			if c.Contains("s3") {
				t.Fatalf("%s: %v still names the failed s3", s, c)
			}
			ch := placement.Chain{Volume: c.Volume, Joining: placement.None}
			for _, id := range c.Chain {
				ch.Members = append(ch.Members, slices.Index(servers, id))
			}
			chains = append(chains, ch)
			if c.Joining != "" {
				joining[c.Volume] = c.Joining
			}
		}
		for i, id := range servers {
			cluster.Live[i] = id != "s3"
		}
		cluster.Count(chains)
		want := cluster.Recover(chains)
		if len(want) < 3 || cluster.Short <= len(want) {
			t.Fatalf("%s: the policy extends %d of %d short chains; the test wants some held back by the limits", s, len(want), cluster.Short)
		}
		if len(joining) != len(want) {
			t.Errorf("%s: the master extends %d chains %v, the policy %d %v", s, len(joining), joining, len(want), want)
		}
		for _, ch := range want {
			if ch.Kind != placement.Extend || joining[ch.Volume] != servers[ch.Server] {
				t.Errorf("%s: the policy extends volume %d onto %s, the master onto %q", s, ch.Volume, servers[ch.Server], joining[ch.Volume])
			}
		}
	}
}

// In a causal chain the master removes a failed member only if another
// live member reported holding every answered update (Complete); a
// member that may be the last such one stays, and the chain waits for it
// (chain/causal.go, lastComplete).
func TestCausalFailureKeepsTheLastCompleteMember(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete map[wire.NodeID]bool // what each server reports
		failed   wire.NodeID
		removed  bool
	}{
		{"head fails, the second of k=2 is complete", map[wire.NodeID]bool{"a": true, "b": true}, "a", true},
		{"the only complete member fails", map[wire.NodeID]bool{"a": true}, "a", false},
		{"a member catching up fails", map[wire.NodeID]bool{"a": true}, "b", true},
		{"the tail beyond k fails", map[wire.NodeID]bool{"a": true, "b": true}, "c", true},
		{"no other member reported complete", map[wire.NodeID]bool{"b": true}, "b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.DefaultK = 2
			m, err := New("m", o)
			if err != nil {
				t.Fatal(err)
			}
			for now := wire.Time(0); now <= 600*wire.Millisecond; now += 100 * wire.Millisecond {
				for _, id := range []wire.NodeID{"a", "b", "c"} {
					if id == tc.failed && now > 0 {
						continue
					}
					m.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now,
						Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch, Complete: tc.complete[id]}}})
				}
				m.Tick(now)
			}
			if removed := m.Config(0).Index(tc.failed) < 0; removed != tc.removed {
				t.Fatalf("%s removed: %v, want %v (chain %v)", tc.failed, removed, tc.removed, m.Config(0).Chain)
			}
		})
	}
}

// A restarted member of a causal chain leads it back alone only if it
// holds every answered update and no other intact member does.
func TestCausalRestartSurvivesOnlyIfComplete(t *testing.T) {
	for _, tc := range []struct {
		name          string
		restarted     bool // the restarted server reports Complete
		otherComplete bool // b, intact, reports Complete
		survives      bool
	}{
		{"complete, the intact member is not", true, false, true},
		{"complete, and so is the intact member", true, true, false},
		{"not complete", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.DefaultK = 1
			m, _ := New("m", o)
			for _, id := range []wire.NodeID{"a", "b", "c"} {
				m.Step(0, id, &wire.Heartbeat{Incarnation: 1, Heard: 0,
					Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch, Complete: id == "a" || id == "b" && tc.otherComplete}}})
			}
			m.Step(10*wire.Millisecond, "a", &wire.Heartbeat{Incarnation: 2, Heard: 0,
				Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch, Complete: tc.restarted}}})
			c := m.Config(0)
			if survived := slices.Equal(c.Chain, []wire.NodeID{"a"}); survived != tc.survives {
				t.Fatalf("chain %v after a's restart: a alone %v, want %v", c.Chain, survived, tc.survives)
			}
		})
	}
}

// A server that is the tail of every chain it holds (as one that rejoined
// is) gives up a tail role once chains are whole and loads even: the
// master takes another member out of its place and adds it back at the
// tail (CmdMoveToTail), keeping who holds the volume, as the placement
// policy (BalanceRoles) decides.
func TestBalancedLoadsStillMoveRoles(t *testing.T) {
	servers := []wire.NodeID{"s0", "s1", "s2", "s3"}
	o := testOptions()
	o.Servers = servers
	o.Chains = map[wire.VolumeID][]wire.NodeID{
		0: {"s0", "s1", "s3"}, 1: {"s1", "s2", "s3"}, 2: {"s2", "s0", "s3"}, 3: {"s0", "s1", "s2"},
	}
	m, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	before := m.Configs()
	heartbeatAll(m, 0, 1, servers...)
	m.Tick(100 * wire.Millisecond)
	moved := 0
	for i, c := range m.Configs() {
		if c.Joining == "" {
			if !slices.Equal(c.Chain, before[i].Chain) {
				t.Errorf("volume %d: chain %v, was %v", c.Volume, c.Chain, before[i].Chain)
			}
			continue
		}
		moved++
		if before[i].Tail() != "s3" || c.Tail() != "s3" || !slices.Contains(before[i].Chain, c.Joining) || len(c.Chain) != 2 {
			t.Errorf("volume %d: %v joining %s, was %v; want a member other than the tail s3 joining again", c.Volume, c.Chain, c.Joining, before[i].Chain)
		}
	}
	if moved != 1 {
		t.Fatalf("%d role moves, want one at a time", moved)
	}

	o.FixedRoles = true // catena master -fixed-roles
	if m, err = New("m", o); err != nil {
		t.Fatal(err)
	}
	heartbeatAll(m, 0, 1, servers...)
	m.Tick(100 * wire.Millisecond)
	for _, c := range m.Configs() {
		if c.Joining != "" {
			t.Errorf("with fixed roles: volume %d moves %s", c.Volume, c.Joining)
		}
	}
}

// CmdMoveToTail applies only to the configuration it was decided on, and
// never moves the tail, nor a member of a causal or geo volume.
func TestMoveToTailPreconditions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(c *wire.Config)
		server wire.NodeID
		epoch  wire.Epoch
		moves  bool
	}{
		{"the head", func(*wire.Config) {}, "a", 1, true},
		{"a middle member", func(*wire.Config) {}, "b", 1, true},
		{"the tail", func(*wire.Config) {}, "c", 1, false},
		{"another epoch", func(*wire.Config) {}, "a", 2, false},
		{"not a member", func(*wire.Config) {}, "x", 1, false},
		{"a causal volume", func(c *wire.Config) { c.Mode, c.K = wire.ModeCausal, 1 }, "b", 1, false},
		{"a geo volume", func(c *wire.Config) { c.Sites = []wire.SiteID{1, 2} }, "a", 1, false},
	} {
		m, err := New("m", testOptions())
		if err != nil {
			t.Fatal(err)
		}
		c := m.configs[0]
		tc.edit(c)
		m.Apply(0, Command{Kind: CmdMoveToTail, Volume: 0, Server: tc.server, Epoch: tc.epoch})
		got := m.Config(0)
		if moved := got.Joining == tc.server; moved != tc.moves {
			t.Errorf("%s: %v joining %q, want moved %v", tc.name, got.Chain, got.Joining, tc.moves)
		}
		if tc.moves && (!got.Contains(tc.server) || got.Index(tc.server) >= 0 || got.Epoch != 2 || !got.Moved) {
			t.Errorf("%s: %+v, want %s only joining, moved, in epoch 2", tc.name, got, tc.server)
		}
	}
}

// While a member moves to the tail (wire.Config.Moved) it holds every
// update the chain answered: a failed member's removal lets the move go
// on, and when the last member fails the moved one takes its place. Its
// own failure ends the move, and so does the tail's: a new tail may hold
// updates the moved member lacks.
func TestMovedMemberOutlastsTheOthers(t *testing.T) {
	move := func() *Master {
		m, err := New("m", testOptions())
		if err != nil {
			t.Fatal(err)
		}
		m.Apply(0, Command{Kind: CmdMoveToTail, Volume: 0, Server: "a", Epoch: 1})
		if c := m.Config(0); c.Joining != "a" || !c.Moved {
			t.Fatalf("after the move: %v", c)
		}
		return m
	}
	m := move()
	m.Apply(0, Command{Kind: CmdRemove, Server: "b"})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"c"}) || c.Joining != "a" || !c.Moved {
		t.Fatalf("b removed: %v moved %v; want [c] with a still moving", c, c.Moved)
	}
	m.Apply(0, Command{Kind: CmdRemove, Server: "c"})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a"}) || c.Joining != "" || c.Moved {
		t.Fatalf("c, the last member, removed: %v moved %v; want a the only member", c, c.Moved)
	}

	m = move()
	m.Apply(0, Command{Kind: CmdRemove, Server: "a"})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"b", "c"}) || c.Joining != "" || c.Moved {
		t.Fatalf("the moved member removed: %v moved %v; want [b c] and no move", c, c.Moved)
	}
	m = move()
	m.Apply(0, Command{Kind: CmdRemove, Server: "c"})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"b"}) || c.Joining != "" || c.Moved {
		t.Fatalf("the tail removed: %v moved %v; want [b] and no move", c, c.Moved)
	}
}
