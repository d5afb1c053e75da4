package master

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// A single master's state file written by an earlier release must load
// in this one (issue 33): testdata/state holds one per release, written
// once with -write-state from fixtureState and never changed.

var writeState = flag.Bool("write-state", false, "write this release's master state fixture (testdata/state/RELEASE/master.json) if it is missing")

// fixtureState is what every release's fixture holds: a strong and a
// causal keyspace beside the default one, users and roles, a finalized
// cluster version. Frozen: earlier releases' fixtures were written from
// it.
func fixtureState() State {
	return State{
		Settings: Settings{ReplicationFactor: 3, Placement: "random", Volumes: 1},
		Configs: []wire.Config{
			{Volume: 0, Epoch: 4, Chain: []wire.NodeID{"10.0.0.1:7101", "10.0.0.2:7101", "10.0.0.3:7101"}},
			{Volume: 1, Epoch: 1, Chain: []wire.NodeID{"10.0.0.2:7101", "10.0.0.3:7101", "10.0.0.1:7101"}, Mode: wire.ModeCausal, K: 2},
		},
		Incarnations:      map[wire.NodeID]uint64{"10.0.0.1:7101": 2, "10.0.0.2:7101": 1, "10.0.0.3:7101": 1},
		FirstIncarnations: map[wire.NodeID]uint64{"10.0.0.1:7101": 1, "10.0.0.2:7101": 1, "10.0.0.3:7101": 1},
		Keyspaces:         []wire.Keyspace{{Name: "sessions", Prefix: "s/", Mode: wire.ModeCausal, K: 2, ReplicationFactor: 3, FirstVolume: 1, Volumes: 1}},
		Auth: &wire.AuthTable{Version: 3,
			Users: []wire.User{{Name: "alice", PasswordHash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", Roles: []string{"admin"}}},
			Roles: []wire.Role{{Name: "readers", Grants: []wire.Grant{{Keyspace: "sessions", Access: wire.AccessRead}}}}},
		ClusterVersion: 1,
	}
}

func TestStateFileOfEveryReleaseLoads(t *testing.T) {
	current := filepath.Join("testdata", "state", release.Version, "master.json")
	if _, err := os.Stat(current); err != nil {
		if !*writeState {
			t.Errorf("%s is missing: this release has no master state fixture (go test ./internal/master -run TestStateFileOfEveryReleaseLoads -write-state writes it)", current)
		} else if err := os.MkdirAll(filepath.Dir(current), 0o755); err != nil {
			t.Fatal(err)
		} else if err := SaveState(current, fixtureState()); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "state", "*", "master.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no master state fixtures: %v", err)
	}
	for _, f := range files {
		s, ok, err := LoadState(f)
		if err != nil || !ok {
			t.Fatalf("%s: %v, %v", f, ok, err)
		}
		if !s.Equal(fixtureState()) {
			t.Errorf("%s loads as %+v", f, s)
		}
		m, err := Restore("m", timingOptions(), s)
		if err != nil {
			t.Fatalf("restoring %s: %v", f, err)
		}
		if !m.State().Equal(fixtureState()) || m.ClusterVersion() != 1 || len(m.Keyspaces()) != 2 {
			t.Errorf("%s restores as %+v", f, m.State())
		}
	}
}
