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
	hier := func(change func(*wire.Keyspace)) wire.Keyspace {
		k := wire.Keyspace{Name: "builds", Prefix: "b/", Mode: wire.ModeHierarchical, ReplicationFactor: 3, Volumes: 8,
			Sites: []wire.SiteID{1, 2, 3}, PartitionDepth: 1, Idle: 100 * wire.Millisecond}
		change(&k)
		return k
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
		{"several sites, causal", func() wire.Keyspace {
			k := ks("g", "g/", wire.ModeCausal, 1, 3, 2)
			k.Sites = []wire.SiteID{1, 2}
			return k
		}(), false, ""},
		{"several sites, strong", func() wire.Keyspace {
			k := ks("g", "g/", wire.ModeStrong, 0, 3, 2)
			k.Sites = []wire.SiteID{1, 2}
			return k
		}(), false, "must be causal or hierarchical"},
		{"hierarchical across sites", hier(func(k *wire.Keyspace) {}), false, ""},
		{"hierarchical, prefix without a slash", hier(func(k *wire.Keyspace) { k.Prefix = "b" }), false, "must end in"},
		{"hierarchical, prefix with an empty segment", hier(func(k *wire.Keyspace) { k.Prefix = "b//" }), false, "empty segment"},
		{"hierarchical, no partition depth", hier(func(k *wire.Keyspace) { k.PartitionDepth = 0 }), false, "partition depth 0"},
		{"hierarchical, idle too short", hier(func(k *wire.Keyspace) { k.Idle = wire.Millisecond }), false, "idle time"},
		{"hierarchical, with k", hier(func(k *wire.Keyspace) { k.K = 1 }), false, "k=1 given for a hierarchical"},
		{"hierarchical settings on a causal keyspace", func() wire.Keyspace {
			k := ks("g", "g/", wire.ModeCausal, 1, 3, 2)
			k.Relaxed = true
			return k
		}(), false, "are for hierarchical keyspaces"},
		{"sites out of order", func() wire.Keyspace {
			k := ks("g", "g/", wire.ModeCausal, 1, 3, 2)
			k.Sites = []wire.SiteID{2, 1}
			return k
		}(), false, "increasing order"},
		{"site zero", func() wire.Keyspace {
			k := ks("g", "g/", wire.ModeCausal, 1, 3, 2)
			k.Sites = []wire.SiteID{0, 1}
			return k
		}(), false, "non-zero"},
		{"other sites than the existing one", func() wire.Keyspace {
			k := ks("sessions", "s/", wire.ModeCausal, 2, 3, 4)
			k.Sites = []wire.SiteID{1, 2}
			return k
		}(), false, "exists with other settings"},
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

// The sites of a deployment: distinct increasing ids with names and
// masters, this site among them; the default keyspace's sites known and
// causal.
func TestSettingsValidateSites(t *testing.T) {
	sites := []wire.Site{{ID: 1, Name: "a", Masters: []wire.NodeID{"ma"}}, {ID: 2, Name: "b", Masters: []wire.NodeID{"mb"}}}
	base := Settings{ReplicationFactor: 3, Placement: "random", Volumes: 2, DefaultK: 1, Site: 1, Sites: sites, DefaultSites: []wire.SiteID{1, 2}}
	for _, tc := range []struct {
		name   string
		change func(s *Settings)
		err    string
	}{
		{"valid", func(*Settings) {}, ""},
		{"one site", func(s *Settings) { *s = Settings{ReplicationFactor: 3, Placement: "random", Volumes: 2} }, ""},
		{"this site unknown", func(s *Settings) { s.Site = 3 }, "not among the sites"},
		{"repeated id", func(s *Settings) { s.Sites = []wire.Site{sites[0], sites[0]}; s.DefaultSites = []wire.SiteID{1} }, "increasing order"},
		{"no masters", func(s *Settings) { s.Sites = []wire.Site{sites[0], {ID: 2, Name: "b"}} }, "no masters"},
		{"repeated name", func(s *Settings) { s.Sites = []wire.Site{sites[0], {ID: 2, Name: "a", Masters: []wire.NodeID{"x"}}} }, "repeated name"},
		{"strong default of several sites", func(s *Settings) { s.DefaultK = 0 }, "must be causal"},
		{"default sites unknown", func(s *Settings) { s.DefaultSites = []wire.SiteID{1, 5} }, "known sites"},
		{"default sites without this one", func(s *Settings) { s.DefaultSites = []wire.SiteID{2} }, "leave out this site"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base.Clone()
			tc.change(&s)
			err := s.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// An operator's override (catena keyspace grace, reassign): the
// keyspace's next generation of its kind; a grace keeps this site and a
// majority of the keyspace's sites, in order; a reassignment is of a
// relaxed keyspace and names other sites; a retry of the one applied
// changes nothing.
func TestValidateOverride(t *testing.T) {
	existing := []wire.Keyspace{
		{Name: "default", ReplicationFactor: 3, Volumes: 2},
		{Name: "builds", Prefix: "b/", Mode: wire.ModeHierarchical, ReplicationFactor: 3, FirstVolume: 2, Volumes: 2,
			Sites: []wire.SiteID{1, 2, 3, 4, 5}, PartitionDepth: 1, Grace: wire.Override{Generation: 2, Sites: []wire.SiteID{1, 2, 3}}},
		{Name: "cache", Prefix: "c/", Mode: wire.ModeHierarchical, ReplicationFactor: 3, FirstVolume: 4, Volumes: 1,
			Sites: []wire.SiteID{1, 2, 3}, PartitionDepth: 1, Relaxed: true, Reassign: wire.Override{Generation: 1, Sites: []wire.SiteID{3}}},
	}
	grace := func(name string, gen uint64, sites ...wire.SiteID) wire.OverrideRequest {
		return wire.OverrideRequest{Keyspace: name, Override: wire.Override{Generation: gen, Sites: sites}}
	}
	reassign := func(name string, gen uint64, sites ...wire.SiteID) wire.OverrideRequest {
		r := grace(name, gen, sites...)
		r.Reassign = true
		return r
	}
	for _, tc := range []struct {
		name string
		r    wire.OverrideRequest
		done bool
		err  string // a substring of the error; "" for none
	}{
		{"grace: the next generation", grace("builds", 3, 1, 2, 4), false, ""},
		{"grace: a retry of the last", grace("builds", 2, 1, 2, 3), true, ""},
		{"grace: an old generation", grace("builds", 2, 1, 2, 4), false, "is at generation 2"},
		{"grace: a generation skipped", grace("builds", 4, 1, 2, 4), false, "is at generation 2"},
		{"grace: no such keyspace", grace("nope", 1, 1, 2, 3), false, "no keyspace"},
		{"grace: not hierarchical", grace("default", 1, 1, 2, 3), false, "for hierarchical keyspaces"},
		{"grace: without this site", grace("builds", 3, 2, 3, 4), false, "leaves out this site"},
		{"grace: no majority", grace("builds", 3, 1, 2), false, "no majority"},
		{"grace: a site not of the keyspace", grace("builds", 3, 1, 2, 9), false, "distinct sites"},
		{"grace: out of order", grace("builds", 3, 1, 4, 2), false, "increasing order"},
		{"grace: repeated", grace("builds", 3, 1, 2, 2), false, "distinct sites"},
		{"reassign: the next generation", reassign("cache", 2, 2, 3), false, ""},
		{"reassign: a retry of the last", reassign("cache", 1, 3), true, ""},
		{"reassign: this site", reassign("cache", 2, 1), false, "include this site"},
		{"reassign: no sites", reassign("cache", 2), false, "names sites"},
		{"reassign: a durable keyspace", reassign("builds", 1, 4), false, "is durable"},
		{"reassign: an old generation", reassign("cache", 1, 2), false, "is at generation 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, err := ValidateOverride(existing, tc.r, 1)
			if done != tc.done {
				t.Errorf("done = %v, want %v", done, tc.done)
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

// siteOneMaster returns the master of site 1 of three, which heard from
// its servers s1, s2 and s3, and its options.
func siteOneMaster(t *testing.T) (*Master, Options) {
	t.Helper()
	o := testOptions()
	o.Settings.Site = 1
	o.Settings.Sites = []wire.Site{{ID: 1, Name: "a", Masters: []wire.NodeID{"m"}}, {ID: 2, Name: "b", Masters: []wire.NodeID{"mb"}}, {ID: 3, Name: "c", Masters: []wire.NodeID{"mc"}}}
	m, err := New("m", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []wire.NodeID{"s1", "s2", "s3"} {
		m.Step(0, id, &wire.Heartbeat{Incarnation: 1})
	}
	return m, o
}

// A grace request through the master: applied, answered with the
// keyspaces, kept in the saved state; a bad one refused, nothing changed;
// a create request cannot set one.
func TestGraceThroughTheMaster(t *testing.T) {
	m, o := siteOneMaster(t)
	reply := func(out []wire.Envelope) *wire.KeyspaceReply {
		t.Helper()
		for _, env := range out {
			if r, ok := env.Msg.(*wire.KeyspaceReply); ok && env.To == "c" {
				return r
			}
		}
		t.Fatalf("no reply in %v", out)
		return nil
	}
	builds := wire.Keyspace{Name: "builds", Prefix: "b/", Mode: wire.ModeHierarchical, ReplicationFactor: 3, Volumes: 1, Sites: []wire.SiteID{1, 2, 3}, PartitionDepth: 1}
	if r := reply(m.Step(1, "c", &wire.KeyspaceRequest{Create: builds})); r.Err != "" {
		t.Fatalf("create: %s", r.Err)
	}
	withGrace := builds
	withGrace.Name, withGrace.Prefix, withGrace.Grace = "other", "o/", wire.Override{Generation: 1, Sites: []wire.SiteID{1, 2}}
	if r := reply(m.Step(2, "c", &wire.KeyspaceRequest{Create: withGrace})); !strings.Contains(r.Err, "without overrides") {
		t.Fatalf("create with a grace view: %+v", r)
	}
	bad := &wire.KeyspaceRequest{Override: &wire.OverrideRequest{Keyspace: "builds", Override: wire.Override{Generation: 1, Sites: []wire.SiteID{2, 3}}}}
	if r := reply(m.Step(3, "c", bad)); !strings.Contains(r.Err, "leaves out this site") {
		t.Fatalf("grace without this site: %+v", r)
	}
	good := &wire.KeyspaceRequest{Override: &wire.OverrideRequest{Keyspace: "builds", Override: wire.Override{Generation: 1, Sites: []wire.SiteID{1, 3}}}}
	r := reply(m.Step(4, "c", good))
	want := wire.Override{Generation: 1, Sites: []wire.SiteID{1, 3}}
	if r.Err != "" || len(r.Keyspaces) != 2 || r.Keyspaces[1].Grace.Generation != 1 {
		t.Fatalf("grace: %+v", r)
	}
	restored, err := Restore("m", Options{FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration, ClockDriftMax: o.ClockDriftMax, ExtensionTimeout: o.ExtensionTimeout, Settings: o.Settings}, m.State())
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Keyspaces()[1].Grace; !got.Equal(want) {
		t.Fatalf("restored grace %+v, want %+v", got, want)
	}
}

// A message the master sent is the transport's: its writer goroutine
// encodes it while the master goes on stepping. A heartbeat reply
// carries the keyspaces, which an override then changes in the master:
// the reply must not share them (under go test -race, the encoding and
// the override race if it does).
func TestHeartbeatReplySharesNoKeyspacesWithTheMaster(t *testing.T) {
	m, _ := siteOneMaster(t)
	builds := wire.Keyspace{Name: "builds", Prefix: "b/", Mode: wire.ModeHierarchical, ReplicationFactor: 3, Volumes: 1, Sites: []wire.SiteID{1, 2, 3}, PartitionDepth: 1}
	m.Step(1, "c", &wire.KeyspaceRequest{Create: builds})
	var reply *wire.HeartbeatReply
	for _, env := range m.Step(2, "s1", &wire.Heartbeat{Incarnation: 1, SentAt: 2}) {
		if r, ok := env.Msg.(*wire.HeartbeatReply); ok {
			reply = r
		}
	}
	if reply == nil || len(reply.Keyspaces) != 2 {
		t.Fatalf("the heartbeat reply %+v carries no keyspace builds", reply)
	}

	encoded := make(chan error)
	go func() {
		_, err := wire.AppendMessage(nil, reply)
		encoded <- err
	}()
	override := &wire.KeyspaceRequest{Override: &wire.OverrideRequest{Keyspace: "builds", Override: wire.Override{Generation: 1, Sites: []wire.SiteID{1, 3}}}}
	m.Step(3, "c", override)
	if err := <-encoded; err != nil {
		t.Fatal(err)
	}
	if got := m.Keyspaces()[1].Grace.Generation; got != 1 {
		t.Fatalf("the override was not applied: grace generation %d", got)
	}
	if got := reply.Keyspaces[1].Grace; got.Generation != 0 {
		t.Errorf("the reply sent before the override changed with it: grace %+v", got)
	}
}
