package master

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// timingOptions are testOptions without settings or chains: what a master
// restarted with only -listen and -data has.
func timingOptions() Options {
	o := testOptions()
	o.Settings, o.Chains = Settings{}, nil
	return o
}

// shortChainState returns the saved state of a master of t=3 that removed
// b from a→b→c and had no spare to extend the chain with.
func shortChainState(t *testing.T) State {
	t.Helper()
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	heartbeatAll(m, 0, 1, "a", "b", "c")
	for now := 100 * wire.Millisecond; now <= 600*wire.Millisecond; now += 100 * wire.Millisecond {
		heartbeatAll(m, now, 1, "a", "c")
		m.Tick(now)
	}
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c"}) || c.Joining != "" {
		t.Fatalf("config %v: want b removed and no spare to extend with", c)
	}
	return m.State()
}

// saveAndLoad passes s through master.json.
func saveAndLoad(t *testing.T, s State) State {
	t.Helper()
	path := filepath.Join(t.TempDir(), "master.json")
	if err := SaveState(path, s); err != nil {
		t.Fatal(err)
	}
	loaded, ok, err := LoadState(path)
	if err != nil || !ok {
		t.Fatalf("LoadState: %v, %v", ok, err)
	}
	return loaded
}

// A master restarted without settings takes t from its saved state, not
// from the chains' lengths: it extends the short chain back to 3 with a
// spare.
func TestRestoredMasterExtendsShortChainToSavedT(t *testing.T) {
	saved := saveAndLoad(t, shortChainState(t))
	m, err := Restore("m", timingOptions(), saved)
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{ReplicationFactor: 3, Placement: placement.Random, Volumes: 1}
	if got := m.State().Settings; !got.Equal(want) {
		t.Fatalf("restored settings %+v, want %+v", got, want)
	}
	// b, dead, counts as alive for a failure timeout after the restart;
	// once it is suspected the spare d is the only target.
	var now wire.Time
	for ; now <= wire.Second && m.Config(0).Joining != "d"; now += 100 * wire.Millisecond {
		heartbeatAll(m, now, 1, "a", "c", "d")
		m.Tick(now)
	}
	c := m.Config(0)
	if c.Joining != "d" {
		t.Fatalf("config %v: want the spare d joining the short chain", c)
	}
	m.Step(now, "c", &wire.Heartbeat{Incarnation: 1, Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: c.Epoch, JoinerReady: true}}})
	if c := m.Config(0); !slices.Equal(c.Chain, []wire.NodeID{"a", "c", "d"}) {
		t.Fatalf("config %v: want the chain back to 3", c)
	}
}

// Settings given to a restarted master must equal the saved ones; equal
// ones are accepted.
func TestRestoreChecksGivenSettings(t *testing.T) {
	saved := shortChainState(t)
	o := timingOptions()
	o.ReplicationFactor, o.Placement, o.Volumes = 3, placement.Random, 1
	if _, err := Restore("m", o, saved); err != nil {
		t.Fatalf("equal settings refused: %v", err)
	}
	o.ReplicationFactor, o.Placement = 2, placement.Ring
	_, err := Restore("m", o, saved)
	for _, want := range []string{"ReplicationFactor: saved 3, given 2", "Placement: saved random, given ring"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Restore with contradicting settings: %v, want an error containing %q", err, want)
		}
	}
}

// A master.json saved before settings were part of it needs them once
// from the options; without them Restore says so.
func TestRestoreStateWithoutSettings(t *testing.T) {
	data, err := json.Marshal(shortChainState(t))
	if err != nil {
		t.Fatal(err)
	}
	var old map[string]any
	json.Unmarshal(data, &old)
	delete(old, "Settings")
	data, _ = json.Marshal(old)
	path := filepath.Join(t.TempDir(), "master.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	legacy, _, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore("m", timingOptions(), legacy); err == nil || !strings.Contains(err.Error(), "no cluster settings") {
		t.Fatalf("Restore without settings: %v, want an error saying the state has none", err)
	}
	o := timingOptions()
	o.ReplicationFactor = 3
	m, err := Restore("m", o, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.State().Settings; s.ReplicationFactor != 3 || s.Volumes != 1 || s.Placement != placement.Random {
		t.Fatalf("settings %+v: want the given t=3 with the defaults", s)
	}
}
