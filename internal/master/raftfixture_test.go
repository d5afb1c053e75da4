package master

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// A replicated master's Raft log written by an earlier release must
// open in this one (issue 33): testdata/raft holds one per release, the
// Pebble directory of a one-member replicated master that registered
// three servers and created a causal keyspace, written once with
// -write-state. Frozen: never changed after.

// raftFixtureKeyspace is the keyspace the fixture's log creates.
var raftFixtureKeyspace = wire.Keyspace{Name: "sessions", Prefix: "s/", Mode: wire.ModeCausal, K: 2, ReplicationFactor: 3, Volumes: 2}

// startFixtureMember starts the fixture's one member on log.
func startFixtureMember(t *testing.T, log raftlog.Log, o Options) *Replicated {
	t.Helper()
	r, err := NewReplicated(RaftOptions{ID: "m1", Members: []wire.NodeID{"m1"}, Master: o, Log: log,
		HeartbeatInterval: 20 * wire.Millisecond, ElectionTimeout: 60 * wire.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// stepFixture delivers what r sent itself, until it sends itself nothing.
func stepFixture(r *Replicated, now wire.Time, out []wire.Envelope) {
	for len(out) > 0 {
		var next []wire.Envelope
		for _, e := range out {
			if e.To == "m1" {
				next = append(next, r.Step(now, "m1", e.Msg)...)
			}
		}
		out = next
	}
}

// writeRaftFixture writes the fixture's log into dir.
func writeRaftFixture(t *testing.T, dir string) {
	log, err := raftlog.OpenPebble(dir, vfs.Default, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r := startFixtureMember(t, log, testOptions())
	now := wire.Time(0)
	for step := 0; step < 200 && !(r.Leading() && len(r.Master().Keyspaces()) > 1 && r.Master().State().Incarnations["c"] == 1); step++ {
		now += 10 * wire.Millisecond
		out := r.Tick(now)
		if r.Leading() {
			for _, id := range []wire.NodeID{"a", "b", "c"} {
				out = append(out, r.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now,
					MinProtocol: release.ProtocolMin, MaxProtocol: release.ProtocolMax})...)
			}
			if step%10 == 0 && r.Master().State().Incarnations["c"] == 1 {
				out = append(out, r.Step(now, "admin", &wire.KeyspaceRequest{Create: raftFixtureKeyspace})...)
			}
		}
		if err := log.Commit(); err != nil {
			t.Fatal(err)
		}
		stepFixture(r, now, out)
		if err := log.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	checkRaftFixture(t, r)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkRaftFixture checks a member holds what the fixture's log made.
func checkRaftFixture(t *testing.T, r *Replicated) {
	t.Helper()
	s := r.Master().State()
	if s.Settings.ReplicationFactor != 3 || !slices.Equal(s.Configs[0].Chain, []wire.NodeID{"a", "b", "c"}) {
		t.Errorf("settings %+v, volume 0 %v", s.Settings, s.Configs[0])
	}
	for _, id := range []wire.NodeID{"a", "b", "c"} {
		if s.Incarnations[id] != 1 {
			t.Errorf("server %s: incarnation %d, want 1", id, s.Incarnations[id])
		}
	}
	i := slices.IndexFunc(s.Keyspaces, func(k wire.Keyspace) bool { return k.Name == raftFixtureKeyspace.Name })
	if i < 0 || s.Keyspaces[i].Prefix != "s/" || s.Keyspaces[i].Mode != wire.ModeCausal || s.Keyspaces[i].Volumes != 2 || len(s.Configs) != 3 {
		t.Errorf("keyspaces %+v, %d volumes: want %s with its 2 volumes", s.Keyspaces, len(s.Configs), raftFixtureKeyspace.Name)
	}
}

func TestRaftLogOfEveryReleaseOpens(t *testing.T) {
	current := filepath.Join("testdata", "raft", release.Version)
	if _, err := os.Stat(current); err != nil {
		if !*writeState {
			t.Errorf("%s is missing: this release has no Raft log fixture (go test ./internal/master -run TestRaftLogOfEveryReleaseOpens -write-state writes it)", current)
		} else {
			writeRaftFixture(t, current)
		}
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "raft", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no Raft log fixtures: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			copied := filepath.Join(t.TempDir(), "raft")
			if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			log, err := raftlog.OpenPebble(copied, vfs.Default, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatalf("opening the Raft log of release %s: %v", filepath.Base(dir), err)
			}
			defer log.Close()
			// Restarted with timing alone: the settings come from the log,
			// the rest from its committed entries, which raft hands back
			// at the first steps.
			r := startFixtureMember(t, log, timingOptions())
			for now := wire.Time(0); now < 100*wire.Millisecond; now += 10 * wire.Millisecond {
				stepFixture(r, now, r.Tick(now))
			}
			checkRaftFixture(t, r)
		})
	}
}
