package master

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// heartbeatSpeaking delivers a heartbeat from each server, saying it
// speaks the protocol versions p, and returns the replies by server.
func heartbeatSpeaking(m *Master, now wire.Time, p release.Range, ids ...wire.NodeID) map[wire.NodeID]*wire.HeartbeatReply {
	replies := map[wire.NodeID]*wire.HeartbeatReply{}
	for _, id := range ids {
		hb := &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now, MinProtocol: p.Min, MaxProtocol: p.Max}
		if m.Config(0).Contains(id) {
			hb.Volumes = []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch}}
		}
		for _, env := range m.Step(now, id, hb) {
			if r, ok := env.Msg.(*wire.HeartbeatReply); ok && env.To == id {
				replies[id] = r
			}
		}
	}
	return replies
}

// askVersion sends req from an admin and returns the master's answer
// (nil if none).
func askVersion(m *Master, now wire.Time, req *wire.VersionRequest) *wire.VersionReply {
	for _, env := range m.Step(now, "admin", req) {
		if r, ok := env.Msg.(*wire.VersionReply); ok && env.To == "admin" {
			return r
		}
	}
	return nil
}

// The cluster version is raised only to a version every server in a
// chain speaks, never lowered, carried in every heartbeat reply and kept
// in the durable state; a master that cannot speak it stops.
func TestFinalizeRaisesTheClusterVersion(t *testing.T) {
	// A cluster created by a release that speaks protocol 1 only...
	o := testOptions()
	o.Protocol = release.Range{Min: 1, Max: 1}
	created, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	heartbeatSpeaking(created, 0, o.Protocol, "a", "b", "c")
	// ...its master upgraded to one that speaks 1-2.
	o.Protocol = release.Range{Min: 1, Max: 2}
	m, err := Restore("m", o, created.State())
	if err != nil {
		t.Fatal(err)
	}
	now := wire.Time(0)
	if r := askVersion(m, now, &wire.VersionRequest{}); r == nil || r.ClusterVersion != 1 || r.MaxProtocol != 2 || r.Release != release.Version {
		t.Fatalf("query: %+v", r)
	}
	steps := []struct {
		name    string
		servers map[wire.NodeID]release.Range // heartbeats before the request
		target  uint32
		wantErr string // "" : accepted
		want    uint32 // cluster version after
	}{
		{"a server in a chain unheard", map[wire.NodeID]release.Range{"a": {Min: 1, Max: 2}, "b": {Min: 1, Max: 2}}, 2, "server c is in a chain but has not been heard", 1},
		{"a server still on the old release", map[wire.NodeID]release.Range{"c": {Min: 1, Max: 1}}, 2, "server c speaks protocol 1, not 2", 1},
		{"beyond this master", map[wire.NodeID]release.Range{"c": {Min: 1, Max: 3}}, 3, "this master (release " + release.Version + ") speaks protocol 1-2, not 3", 1},
		{"every server upgraded", map[wire.NodeID]release.Range{"a": {Min: 1, Max: 2}, "b": {Min: 1, Max: 2}, "c": {Min: 1, Max: 2}}, 2, "", 2},
		{"again: done already", nil, 2, "", 2},
		{"never lowered", nil, 1, "never lowered", 2},
	}
	for _, s := range steps {
		now += 10 * wire.Millisecond
		for id, p := range s.servers {
			heartbeatSpeaking(m, now, p, id)
		}
		r := askVersion(m, now, &wire.VersionRequest{Finalize: s.target})
		switch {
		case r == nil:
			t.Fatalf("%s: no answer", s.name)
		case s.wantErr == "" && r.Err != "", s.wantErr != "" && !strings.Contains(r.Err, s.wantErr):
			t.Fatalf("%s: error %q, want %q", s.name, r.Err, s.wantErr)
		case m.ClusterVersion() != s.want || r.ClusterVersion != s.want:
			t.Fatalf("%s: cluster version %d (reply %d), want %d", s.name, m.ClusterVersion(), r.ClusterVersion, s.want)
		}
	}
	if r := heartbeatSpeaking(m, now, release.Range{Min: 1, Max: 2}, "a")["a"]; r == nil || r.ClusterVersion != 2 {
		t.Fatalf("heartbeat reply after finalizing: %+v", r)
	}
	saved := m.State()
	if saved.ClusterVersion != 2 {
		t.Fatalf("durable state holds cluster version %d", saved.ClusterVersion)
	}
	if err := m.Incompatible(); err != nil {
		t.Fatalf("a master that speaks 2: %v", err)
	}
	// The previous release's master, started on this state, stops.
	o.Protocol = release.Range{Min: 1, Max: 1}
	old, err := Restore("m", Options{Protocol: o.Protocol, FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration,
		ClockDriftMax: o.ClockDriftMax, ExtensionTimeout: o.ExtensionTimeout}, saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Incompatible(); err == nil || !strings.Contains(err.Error(), "runs at protocol version 2") {
		t.Fatalf("an older master on a finalized cluster: %v", err)
	}
}

// A new cluster starts at the newest protocol version of the release
// that creates it; a cluster an older release created does not.
func TestNewClusterStartsAtItsReleasesVersion(t *testing.T) {
	o := testOptions()
	o.Protocol = release.Range{Min: 1, Max: 2}
	m, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	if m.ClusterVersion() != 2 || m.State().ClusterVersion != 2 {
		t.Fatalf("a new cluster of a release speaking 1-2 runs at %d", m.ClusterVersion())
	}
	o.Protocol = release.Range{Min: 1, Max: 1}
	old, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	heartbeatSpeaking(old, 0, o.Protocol, "a")
	o.Protocol = release.Range{Min: 1, Max: 2}
	upgraded, err := Restore("m", o, old.State())
	if err != nil {
		t.Fatal(err)
	}
	if upgraded.ClusterVersion() != 1 {
		t.Fatalf("an upgraded cluster runs at %d before its finalize", upgraded.ClusterVersion())
	}
}

// A command of a kind this release does not know (a newer release's,
// proposed too early) stops the member rather than leave its state
// behind the others'.
func TestUnknownCommandStopsTheMember(t *testing.T) {
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	m.Apply(0, Command{Kind: CmdClusterVersion, Version: 1})
	if err := m.Incompatible(); err != nil {
		t.Fatalf("after a known command: %v", err)
	}
	m.Apply(0, Command{Kind: 200})
	if err := m.Incompatible(); err == nil || !strings.Contains(err.Error(), "command of kind 200") {
		t.Fatalf("after a command of kind 200: %v", err)
	}
}
