package master

import (
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// askSplit sends a split request and returns the master's answer.
func askSplit(t *testing.T, m *Master, now wire.Time, name string, splits int) *wire.KeyspaceReply {
	t.Helper()
	for _, env := range m.Step(now, "admin", &wire.KeyspaceRequest{Split: name, Create: wire.Keyspace{Splits: splits}}) {
		if r, ok := env.Msg.(*wire.KeyspaceReply); ok && env.To == "admin" {
			return r
		}
	}
	t.Fatalf("no answer to the split of %s", name)
	return nil
}

// reportSplit delivers a heartbeat from id reporting volume v in epoch
// at applied, its history past the split at point (zero: not yet), with
// no seed (a member that joined after the point).
func reportSplit(m *Master, now wire.Time, id wire.NodeID, v wire.VolumeID, epoch wire.Epoch, applied wire.SN, point wire.SplitPoint) {
	m.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now,
		Volumes: []wire.VolumeStatus{{Volume: v, Epoch: epoch, AppliedSN: applied, CommittedSN: applied, Complete: true, Split: point}}})
}

// reportSeeded is reportSplit from a member that seeded the sibling at
// point: its heartbeat reports the seed too (wire.VolumeStatus.Seed).
// With epoch 0 it reports only the seed (a server no longer in v's
// chain).
func reportSeeded(m *Master, now wire.Time, id wire.NodeID, v wire.VolumeID, epoch wire.Epoch, applied wire.SN, point wire.SplitPoint) {
	var volumes []wire.VolumeStatus
	if epoch != 0 {
		volumes = append(volumes, wire.VolumeStatus{Volume: v, Epoch: epoch, AppliedSN: applied, CommittedSN: applied, Complete: true, Split: point})
	}
	seed := wire.VolumeStatus{Volume: point.Into, AppliedSN: point.SN - 1, CommittedSN: point.SN - 1, Complete: true, Split: point}
	m.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now, Volumes: append(volumes, seed)})
}

// A split through the master (docs/adr/0031): the keyspace's volumes
// double at once, each old volume's next configuration splits it, the
// new volumes start only once their parent's tail applied the split
// point, on the servers that report a seed made there, and a request
// repeated after it applied splits nothing more.
func TestSplitKeyspaceThroughTheMaster(t *testing.T) {
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	heartbeatAll(m, 0, 1, "a", "b", "c")
	r := askSplit(t, m, 1, wire.DefaultKeyspace, 0)
	if r.Err != "" || len(r.Keyspaces) != 1 {
		t.Fatalf("split: %+v", r)
	}
	ks := r.Keyspaces[0]
	if ks.Volumes != 2 || ks.Splits != 1 || ks.Volume(0) != 0 || ks.Volume(1) != 1 {
		t.Fatalf("the default keyspace after a split: %+v", ks)
	}
	cfg := m.Config(0)
	if want := (wire.Split{Into: 1, Epoch: 2, Modulus: 2, Keep: 0}); cfg.Epoch != 2 || cfg.Split != want {
		t.Fatalf("volume 0 after the split: %v, split %v; want epoch 2 split %v", cfg, cfg.Split, want)
	}
	if m.Config(1).Epoch != 0 {
		t.Fatalf("volume 1 has a configuration before any member split: %v", m.Config(1))
	}
	if r := askSplit(t, m, 2, wire.DefaultKeyspace, 0); r.Err != "" || r.Keyspaces[0].Volumes != 2 {
		t.Errorf("the same request again: %+v, want the keyspace as split once", r)
	}
	if r := askSplit(t, m, 2, wire.DefaultKeyspace, 1); !strings.Contains(r.Err, "still splitting") {
		t.Errorf("a second split before the first finished: %q", r.Err)
	}

	// The head and the middle split at SN 8 of epoch 2; c, the tail, has
	// not applied it yet: nothing starts.
	point := wire.SplitPoint{Into: 1, SN: 8, Epoch: 2}
	reportSeeded(m, 3, "a", 0, 2, 9, point)
	reportSeeded(m, 3, "b", 0, 2, 8, point)
	reportSplit(m, 3, "c", 0, 2, 7, wire.SplitPoint{})
	m.Tick(4)
	if m.Config(1).Epoch != 0 {
		t.Fatalf("volume 1 started before the tail applied the split: %v", m.Config(1))
	}
	// The tail passed the point without seeding (it was joining then):
	// the new volume starts on the two that seeded.
	reportSplit(m, 5, "c", 0, 2, 9, point)
	m.Tick(6)
	if got := m.Config(1); got.Epoch != 1 || !got.FromSplit || strings.Join(nodeIDs(got.Chain), ",") != "a,b" {
		t.Fatalf("volume 1's first configuration: %v (from split %v), want a,b", got, got.FromSplit)
	}
	if err := m.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Finished: the keyspace splits again, from 1 split.
	if r := askSplit(t, m, 7, wire.DefaultKeyspace, 1); r.Err != "" || r.Keyspaces[0].Volumes != 4 || r.Keyspaces[0].Volume(3) != 3 {
		t.Fatalf("the second split: %+v", r)
	}
	if want := (wire.Split{Into: 3, Epoch: 2, Modulus: 4, Keep: 1}); m.Config(1).Split != want {
		t.Errorf("volume 1's split: %v, want %v", m.Config(1).Split, want)
	}
}

// A split's new volume starts on every member of its parent's chain that
// seeded it, not only on those whose latest heartbeat already says so: a
// member's report may predate the tail's (it applied the split point in
// between) or the parent's latest configuration (its next heartbeat
// reports the new epoch). Starting without them left the new volume's
// keys on one server of three until extensions copied them again (found
// by TestSplitUnderLoadWithAMemberKilled in internal/integration: the
// tail of a splitting chain killed, the new volume started on one of the
// two members left).
func TestSplitStartsOnEverySeededMember(t *testing.T) {
	point := wire.SplitPoint{Into: 1, SN: 8, Epoch: 2}
	split := func(t *testing.T) *Master {
		m, err := New("m", testOptions())
		if err != nil {
			t.Fatal(err)
		}
		heartbeatAll(m, 0, 1, "a", "b", "c")
		if r := askSplit(t, m, 1, wire.DefaultKeyspace, 0); r.Err != "" {
			t.Fatalf("split: %s", r.Err)
		}
		return m
	}
	started := func(t *testing.T, m *Master, want string) {
		t.Helper()
		if got := m.Config(1); strings.Join(nodeIDs(got.Chain), ",") != want {
			t.Fatalf("volume 1: %v, want a chain of %q", got, want)
		}
	}

	t.Run("a report from before the member applied the point", func(t *testing.T) {
		m := split(t)
		reportSplit(m, 2, "a", 0, 2, 7, wire.SplitPoint{}) // sent just before a split
		reportSeeded(m, 2, "b", 0, 2, 8, point)
		reportSeeded(m, 2, "c", 0, 2, 8, point)
		m.Tick(3)
		started(t, m, "")
		reportSeeded(m, 4, "a", 0, 2, 9, point)
		m.Tick(5)
		started(t, m, "a,b,c")
	})

	t.Run("a report from the parent's previous configuration", func(t *testing.T) {
		m := split(t)
		reportSeeded(m, 2, "a", 0, 2, 8, point)
		reportSeeded(m, 2, "b", 0, 2, 8, point)
		// c, the tail, stops before applying the point and is removed: b
		// is the tail of epoch 3, and a has not reported that epoch yet.
		now := wire.Time(0)
		for now = 100 * wire.Millisecond; m.Config(0).Index("c") >= 0; now += 100 * wire.Millisecond {
			if now > 2*wire.Second {
				t.Fatalf("c not removed: %v", m.Config(0))
			}
			reportSeeded(m, now, "a", 0, 2, 8, point)
			reportSeeded(m, now, "b", 0, 2, 8, point)
			m.Tick(now)
		}
		epoch := m.Config(0).Epoch
		reportSeeded(m, now, "b", 0, epoch, 8, point)
		m.Tick(now)
		started(t, m, "")
		reportSeeded(m, now+1, "a", 0, epoch, 8, point)
		m.Tick(now + 1)
		started(t, m, "a,b")
		if err := m.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})

	// The parent's chain lost its only seeded member before the new
	// volume started; its members joined after the point (the joiner
	// learns it with the snapshot) and hold no seed. The server that
	// seeded comes back, out of the chain, and reports its seed: the new
	// volume starts there. Before, the master asked only the parent's
	// members, and the new volume never started (catena-lab sim -seed 2
	// -faults -scans -splits: the seeded member moved off by rebalance).
	t.Run("a seed on a server no longer in the parent's chain", func(t *testing.T) {
		m := split(t)
		reportSplit(m, 2, "a", 0, 2, 8, point) // (say a, b joined after the point)
		reportSplit(m, 2, "b", 0, 2, 8, point)
		reportSplit(m, 2, "c", 0, 2, 7, wire.SplitPoint{}) // c seeds after this report, then stops
		var now wire.Time
		for now = 100 * wire.Millisecond; m.Config(0).Index("c") >= 0; now += 100 * wire.Millisecond {
			if now > 2*wire.Second {
				t.Fatalf("c not removed: %v", m.Config(0))
			}
			reportSplit(m, now, "a", 0, 2, 8, point)
			reportSplit(m, now, "b", 0, 2, 8, point)
			m.Tick(now)
		}
		started(t, m, "")
		epoch := m.Config(0).Epoch
		reportSplit(m, now, "a", 0, epoch, 8, point)
		reportSplit(m, now, "b", 0, epoch, 8, point)
		m.Tick(now)
		started(t, m, "")
		// c is back, out of the chain (the master may add it back as a
		// joiner meanwhile, a new epoch the members report).
		for end := now + wire.Second; m.Config(1).Epoch == 0 && now < end; now += 50 * wire.Millisecond {
			reportSeeded(m, now, "c", 0, 0, 0, point)
			reportSplit(m, now, "a", 0, m.Config(0).Epoch, 8, point)
			reportSplit(m, now, "b", 0, m.Config(0).Epoch, 8, point)
			m.Tick(now)
		}
		started(t, m, "c")
		if err := m.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// Keyspaces that cannot split yet are refused and nothing changes.
func TestSplitRefusals(t *testing.T) {
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	heartbeatAll(m, 0, 1, "a", "b", "c")
	feed := wire.KeyspaceRequest{Create: wire.Keyspace{Name: "feed", Prefix: "f/", Mode: wire.ModeCausal, K: 2, ReplicationFactor: 3, Volumes: 2}}
	m.Step(1, "admin", &feed)
	for _, tc := range []struct {
		name, keyspace string
		splits         int
		want           string
	}{
		{"a causal keyspace", "feed", 0, "only strong keyspaces split"},
		{"no such keyspace", "nothing", 0, `no keyspace "nothing"`},
		{"a stale split count", wire.DefaultKeyspace, 3, "was split 0 times, not 3"},
	} {
		if r := askSplit(t, m, 2, tc.keyspace, tc.splits); !strings.Contains(r.Err, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, r.Err, tc.want)
		}
	}
	if ks := m.Keyspaces(); ks[0].Volumes != 1 || ks[1].Volumes != 2 {
		t.Errorf("refusals changed the keyspaces: %+v", ks)
	}
}

func nodeIDs(ids []wire.NodeID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// A master restarted from a state saved while the default keyspace's
// split starts, or after it started, resumes with the keyspace split: the
// state keeps the default keyspace once split (State.Keyspaces holds only
// the created ones), and a split's new volumes have no configuration
// until they start. Without it, in catena-lab torture -split, two of
// three master members restarted after a kill (from Raft snapshots taken
// after three splits of the default keyspace) exited at once with "saved
// master state: 66 configurations for 10 volumes", at every restart: the
// cluster had no master quorum from then on.
func TestRestoreAfterSplit(t *testing.T) {
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	heartbeatAll(m, 0, 1, "a", "b", "c")
	restored := func(when string) *Master {
		t.Helper()
		r, err := Restore("m", timingOptions(), saveAndLoad(t, m.State()))
		if err != nil {
			t.Fatalf("%s: restoring: %v", when, err)
		}
		if got, want := r.Keyspaces(), m.Keyspaces(); !slices.EqualFunc(got, want, wire.Keyspace.Equal) {
			t.Fatalf("%s: restored keyspaces %+v, want %+v", when, got, want)
		}
		if err := r.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if !r.State().Equal(m.State()) {
			t.Fatalf("%s: restored state %+v, want %+v", when, r.State(), m.State())
		}
		return r
	}
	if r := askSplit(t, m, 1, wire.DefaultKeyspace, 0); r.Err != "" {
		t.Fatalf("split: %s", r.Err)
	}
	if r := restored("the split starting"); r.Config(1).Epoch != 0 || r.Config(0).Split.Into != 1 {
		t.Fatalf("the split starting: restored volume 0 %v (split %v), volume 1 %v", r.Config(0), r.Config(0).Split, r.Config(1))
	}
	point := wire.SplitPoint{Into: 1, SN: 8, Epoch: 2}
	for _, id := range []wire.NodeID{"a", "b", "c"} {
		reportSeeded(m, 3, id, 0, 2, 9, point)
	}
	m.Tick(4)
	if m.Config(1).Epoch != 1 {
		t.Fatalf("volume 1 did not start: %v", m.Config(1))
	}
	if r := restored("the split started"); r.Config(1).Epoch != 1 {
		t.Fatalf("the split started: restored volume 1 %v", r.Config(1))
	}
	// A created keyspace (saved in State.Keyspaces) split and starting.
	m.Step(5, "admin", &wire.KeyspaceRequest{Create: wire.Keyspace{Name: "kv", Prefix: "k/", Mode: wire.ModeStrong, ReplicationFactor: 3, Volumes: 1}})
	if r := askSplit(t, m, 6, "kv", 0); r.Err != "" || r.Keyspaces[1].Volumes != 2 {
		t.Fatalf("split of kv: %+v", r)
	}
	restored("kv's split starting")
	// A state whose default keyspace does not follow from its settings is
	// refused.
	s := m.State()
	s.Default.Volumes = 3
	if _, err := Restore("m", timingOptions(), s); err == nil {
		t.Error("a state whose default keyspace has 3 volumes after 1 split of 1 restored")
	}
}
