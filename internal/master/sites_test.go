package master

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// sitesOptions are the options of site 1's master in a deployment of two
// sites named cluster ("" : derived from the sites).
func sitesOptions(cluster string) Options {
	o := testOptions()
	o.Settings = Settings{ReplicationFactor: 3, DefaultK: 1, Site: 1, DefaultSites: []wire.SiteID{1, 2}, Cluster: cluster,
		Sites: []wire.Site{{ID: 1, Name: "lisbon", Masters: []wire.NodeID{"m"}}, {ID: 2, Name: "oslo", Masters: []wire.NodeID{"n"}}}}
	return o
}

// Bad input across sites gets a clear error and changes nothing: a
// keyspace naming a site the deployment does not have, and a server of
// another deployment asking for configurations (refused, with the
// master's deployment name, and recorded for the log). A client's
// request (no name) and one of this deployment are answered.
func TestSitesRefuseUnknownSiteAndAnotherDeployment(t *testing.T) {
	m, err := New("m", sitesOptions("prod"))
	if err != nil {
		t.Fatal(err)
	}
	m.SetLeader(0, true, "m")
	before := m.Keyspaces()
	out := m.Step(1, "c", &wire.KeyspaceRequest{Create: wire.Keyspace{Name: "g", Prefix: "g/", Mode: wire.ModeCausal, K: 1, ReplicationFactor: 3, Volumes: 1,
		Sites: []wire.SiteID{1, 3}}})
	if len(out) != 1 || !strings.Contains(out[0].Msg.(*wire.KeyspaceReply).Err, "site 3 is unknown (sites: 1 lisbon, 2 oslo)") {
		t.Fatalf("keyspace naming site 3: %v", out)
	}
	if got := m.Keyspaces(); len(got) != len(before) {
		t.Fatalf("keyspaces after the refusal: %v, before %v", got, before)
	}

	for _, tc := range []struct {
		cluster string
		refused bool
	}{{"", false}, {"prod", false}, {"staging", true}} {
		out := m.Step(2, "s", &wire.ConfigRequest{Cluster: tc.cluster})
		if len(out) != 1 {
			t.Fatalf("ConfigRequest of %q: %v", tc.cluster, out)
		}
		reply := out[0].Msg.(*wire.ConfigReply)
		if reply.Cluster != "prod" || (len(reply.Configs) == 0) != tc.refused || (len(reply.Keyspaces) == 0) != tc.refused {
			t.Errorf("ConfigRequest of %q answered %+v (refused: %v)", tc.cluster, reply, tc.refused)
		}
		refusals := m.Refusals()
		if tc.refused != (len(refusals) == 1) || tc.refused && !strings.Contains(refusals[0], `from s of deployment "staging": this is "prod"`) {
			t.Errorf("ConfigRequest of %q: refusals %q", tc.cluster, refusals)
		}
	}

	out = m.Step(3, "s", &wire.Heartbeat{Incarnation: 1, SentAt: 3})
	replies := 0
	for _, e := range out {
		if r, ok := e.Msg.(*wire.HeartbeatReply); ok {
			replies++
			if r.Cluster != "prod" {
				t.Errorf("heartbeat reply names deployment %q, want %q", r.Cluster, "prod")
			}
		}
	}
	if replies != 1 {
		t.Errorf("%d heartbeat replies, want 1", replies)
	}
}

// The deployment's name: given, or derived from the sites alike at every
// site; checked; fixed once the cluster exists.
func TestSettingsCluster(t *testing.T) {
	derived := sitesOptions("").Settings
	if got := derived.ClusterName(); !strings.HasPrefix(got, "sites-") || got != DefaultCluster(derived.Sites) {
		t.Errorf("derived name %q", got)
	}
	other := sitesOptions("").Settings
	other.Sites[1].Masters = []wire.NodeID{"n2"}
	if DefaultCluster(other.Sites) == derived.ClusterName() {
		t.Errorf("two deployments with other masters derive the same name %q", derived.ClusterName())
	}
	if got := (Settings{Cluster: ""}).ClusterName(); got != "" {
		t.Errorf("one site: name %q", got)
	}
	for _, tc := range []struct {
		name string
		s    Settings
		err  string
	}{
		{"named", sitesOptions("prod-eu").Settings, ""},
		{"space", sitesOptions("prod eu").Settings, "without spaces"},
		{"too long", sitesOptions(strings.Repeat("x", ClusterNameMax+1)).Settings, "longer than"},
		{"without sites", Settings{ReplicationFactor: 3, Placement: "random", Volumes: 1, Cluster: "prod"}, "without sites"},
	} {
		s := tc.s
		if s.Placement == "" {
			s.Placement, s.Volumes = "random", 1
		}
		err := s.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
	saved := sitesOptions("prod").Settings
	if c := saved.Contradictions(Settings{Cluster: "staging"}); len(c) != 1 || c[0].Setting != "Cluster" {
		t.Errorf("contradictions of another name: %v", c)
	}
	if c := saved.Contradictions(Settings{Cluster: "prod"}); len(c) != 0 {
		t.Errorf("contradictions of the same name: %v", c)
	}
}
