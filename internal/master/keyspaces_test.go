package master

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

func TestValidateKeyspace(t *testing.T) {
	existing := []wire.Keyspace{
		{Name: "default", ReplicationFactor: 3, Volumes: 2},
		{Name: "sessions", Prefix: "s/", Mode: wire.ModeCausal, K: 2, ReplicationFactor: 3, FirstVolume: 2, Volumes: 4},
	}
	ks := func(name, prefix string, mode wire.Mode, k, t, volumes int) wire.Keyspace {
		return wire.Keyspace{Name: name, Prefix: prefix, Mode: mode, K: k, ReplicationFactor: t, Volumes: volumes}
	}
	for _, tc := range []struct {
		name   string
		k      wire.Keyspace
		exists bool
		err    string // a substring of the error; "" for none
	}{
		{"a new strong keyspace", ks("users", "u/", wire.ModeStrong, 0, 3, 1), false, ""},
		{"a new causal keyspace", ks("feed", "f/", wire.ModeCausal, 1, 5, 8), false, ""},
		{"the same again is a retry", ks("sessions", "s/", wire.ModeCausal, 2, 3, 4), true, ""},
		{"same name, other settings", ks("sessions", "s/", wire.ModeCausal, 3, 3, 4), false, "exists with other settings"},
		{"prefix inside another", ks("x", "s/a", wire.ModeStrong, 0, 3, 1), false, "overlaps"},
		{"prefix around another", ks("x", "s", wire.ModeStrong, 0, 3, 1), false, "overlaps"},
		{"k above t", ks("x", "x/", wire.ModeCausal, 4, 3, 1), false, "k=4 outside 1..t"},
		{"k zero in causal mode", ks("x", "x/", wire.ModeCausal, 0, 3, 1), false, "k=0 outside"},
		{"k in strong mode", ks("x", "x/", wire.ModeStrong, 2, 3, 1), false, "strong keyspace"},
		{"unknown mode", ks("x", "x/", wire.Mode(7), 0, 3, 1), false, "unknown mode"},
		{"empty prefix", ks("x", "", wire.ModeStrong, 0, 3, 1), false, "empty prefix"},
		{"empty name", ks("", "x/", wire.ModeStrong, 0, 3, 1), false, "empty keyspace name"},
		{"bad name", ks("a b", "x/", wire.ModeStrong, 0, 3, 1), false, "keyspace name"},
		{"no volumes", ks("x", "x/", wire.ModeStrong, 0, 3, 0), false, "volumes outside"},
		{"no replicas", ks("x", "x/", wire.ModeStrong, 0, 0, 1), false, "replication factor 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exists, err := ValidateKeyspace(existing, tc.k)
			if exists != tc.exists {
				t.Errorf("exists = %v, want %v", exists, tc.exists)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// A keyspace created through the master gets the next volumes, Fresh
// first configurations with its k, and survives in the saved state.
func TestCreateKeyspace(t *testing.T) {
	o := testOptions()
	m, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []wire.NodeID{"s1", "s2", "s3"} {
		m.Step(0, id, &wire.Heartbeat{Incarnation: 1})
	}
	out := m.Step(1, "c", &wire.KeyspaceRequest{Create: wire.Keyspace{Name: "feed", Prefix: "f/", Mode: wire.ModeCausal, K: 2, ReplicationFactor: 3, Volumes: 2}})
	var reply *wire.KeyspaceReply
	for _, env := range out {
		if r, ok := env.Msg.(*wire.KeyspaceReply); ok && env.To == "c" {
			reply = r
		}
	}
	if reply == nil || reply.Err != "" || len(reply.Keyspaces) != 2 {
		t.Fatalf("reply %+v, want the default keyspace and feed", reply)
	}
	feed := reply.Keyspaces[1]
	first := wire.VolumeID(len(o.Chains))
	if feed.FirstVolume != first {
		t.Fatalf("feed starts at volume %d, want %d", feed.FirstVolume, first)
	}
	for v := first; v < first+2; v++ {
		cfg := m.Config(v)
		if cfg.Epoch != 1 || !cfg.Fresh || cfg.K != 2 || len(cfg.Chain) != 3 {
			t.Errorf("volume %d: %v (fresh %v), want a fresh epoch-1 chain of 3 with k=2", v, cfg, cfg.Fresh)
		}
	}
	restored, err := Restore("m", Options{FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration, ClockDriftMax: o.ClockDriftMax, ExtensionTimeout: o.ExtensionTimeout}, m.State())
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Keyspaces(); len(got) != 2 || !got[1].Equal(feed) {
		t.Fatalf("restored keyspaces %+v", got)
	}
	// Refused: nothing changes.
	out = m.Step(2, "c", &wire.KeyspaceRequest{Create: wire.Keyspace{Name: "x", Prefix: "f/x", ReplicationFactor: 3, Volumes: 1}})
	if len(out) != 1 || !strings.Contains(out[0].Msg.(*wire.KeyspaceReply).Err, "overlaps") || len(m.Keyspaces()) != 2 {
		t.Fatalf("overlapping keyspace: %v, keyspaces %v", out, m.Keyspaces())
	}
}
