package client

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// TestReady checks each thing Ready requires: a configuration, every
// named server alive, and every chain member at its volume's epoch.
func TestReady(t *testing.T) {
	servers := []string{"s1", "s2", "s3"}
	ready := func() *ClusterStatus {
		return &ClusterStatus{
			Volumes: []VolumeConfig{{Volume: 0, Epoch: 4, Chain: []string{"s1", "s2", "s3"}}},
			Servers: []ServerStatus{
				{Addr: "s1", Alive: true, Volumes: []ReplicaStatus{{Volume: 0, Epoch: 4}}},
				{Addr: "s2", Alive: true, Volumes: []ReplicaStatus{{Volume: 0, Epoch: 4}}},
				{Addr: "s3", Alive: true, Volumes: []ReplicaStatus{{Volume: 0, Epoch: 4}}},
			},
		}
	}
	for _, tc := range []struct {
		name    string
		change  func(*ClusterStatus)
		missing string // "" when ready
	}{
		{"ready", func(*ClusterStatus) {}, ""},
		{"no configuration", func(s *ClusterStatus) { s.Volumes = nil }, "no configuration"},
		{"a server down", func(s *ClusterStatus) { s.Servers[1].Alive = false }, "not heard from s2"},
		{"a server unknown", func(s *ClusterStatus) { s.Servers = s.Servers[:2] }, "not heard from s3"},
		{"a member behind", func(s *ClusterStatus) { s.Servers[2].Volumes[0].Epoch = 3 }, "s3 does not run volume 0's configuration (epoch 4)"},
		{"a member without the volume", func(s *ClusterStatus) { s.Servers[0].Volumes = nil }, "s1 does not run volume 0's"},
		{"a joining server is no member", func(s *ClusterStatus) {
			s.Volumes[0].Chain, s.Volumes[0].Joining = []string{"s1", "s2"}, "s3"
			s.Servers[2].Volumes[0].Epoch = 1
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ready()
			tc.change(s)
			ok, missing := s.Ready(servers)
			if ok != (tc.missing == "") || !strings.Contains(missing, tc.missing) || ok && missing != "" {
				t.Errorf("Ready = %v, %q; want missing %q", ok, missing, tc.missing)
			}
		})
	}
}

// TestShippingLag: the lag to each other site is what the tail of the
// current configuration reports, its originated updates less what that
// site holds stable, with the age of the oldest update it lacks; other
// members' reports and stale epochs do not count.
func TestShippingLag(t *testing.T) {
	r := &wire.StatusReply{
		Site: 1,
		Configs: []wire.Config{
			{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"a", "b"}, K: 1, Sites: []wire.SiteID{1, 2, 3}},
			{Volume: 1, Epoch: 1, Chain: []wire.NodeID{"a", "b"}, K: 1}, // one site: no shipping
		},
		Servers: []wire.ServerStatus{
			{ID: "a", Alive: true, Volumes: []wire.VolumeStatus{
				{Volume: 0, Epoch: 2, Stable: wire.Vector{{Site: 1, N: 99}}, Shipped: wire.Vector{{Site: 2, N: 1}}},
			}},
			{ID: "b", Alive: true, Volumes: []wire.VolumeStatus{
				{Volume: 0, Epoch: 2, Stable: wire.Vector{{Site: 1, N: 10}, {Site: 2, N: 4}}, Shipped: wire.Vector{{Site: 2, N: 7}},
					ShippingAge: []wire.SiteTime{{Site: 2, Age: 250 * wire.Millisecond}, {Site: 3, Age: 2 * wire.Second}}},
				{Volume: 1, Epoch: 1},
			}},
		},
	}
	got := statusOf(r).Shipping
	want := []ShippingLag{{Volume: 0, To: 2, Originated: 10, Shipped: 7, Lag: 3, AgeSeconds: 0.25}, {Volume: 0, To: 3, Originated: 10, Shipped: 0, Lag: 10, AgeSeconds: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("shipping %+v, want %+v", got, want)
	}
	r.Servers[1].Volumes[0].Epoch = 1 // the tail has not reported the current epoch
	if got := statusOf(r).Shipping; len(got) != 0 {
		t.Fatalf("shipping %+v from a stale report", got)
	}
}

// TestQuiet checks each thing Quiet requires of a keyspace: it exists,
// its chains' members applied and committed the same updates, and in a
// keyspace of several sites no update is still to ship. Volumes of other
// keyspaces do not count.
func TestQuiet(t *testing.T) {
	quiet := func() *ClusterStatus {
		return &ClusterStatus{
			Site:      1,
			Keyspaces: []Keyspace{{Name: "default", Volumes: 1}, {Name: "geo", Volumes: 1, FirstVolume: 1, Sites: []uint32{1, 2}}},
			Volumes: []VolumeConfig{
				{Volume: 0, Epoch: 1, Chain: []string{"s1", "s2"}},
				{Volume: 1, Epoch: 1, Chain: []string{"s1", "s2"}, Sites: []uint32{1, 2}},
			},
			Servers: []ServerStatus{
				{Addr: "s1", Alive: true, Volumes: []ReplicaStatus{{Volume: 0, Epoch: 1, Applied: 5, Committed: 5}, {Volume: 1, Epoch: 1, Applied: 7, Committed: 7}}},
				{Addr: "s2", Alive: true, Volumes: []ReplicaStatus{{Volume: 0, Epoch: 1, Applied: 5, Committed: 5}, {Volume: 1, Epoch: 1, Applied: 7, Committed: 7}}},
			},
			Shipping: []ShippingLag{{Volume: 1, To: 2, Originated: 4, Shipped: 4}},
		}
	}
	for _, tc := range []struct {
		name     string
		keyspace string
		change   func(*ClusterStatus)
		why      string // "" when quiet
	}{
		{"quiet", "geo", func(*ClusterStatus) {}, ""},
		{"no such keyspace", "nope", func(*ClusterStatus) {}, `no keyspace "nope"`},
		{"an update in flight", "geo", func(s *ClusterStatus) { s.Servers[1].Volumes[1].Applied = 6 }, "volume 1: s2 applied 6, committed 7; the head applied 7"},
		{"a commit not yet known", "geo", func(s *ClusterStatus) { s.Servers[0].Volumes[1].Committed = 6 }, "volume 1: s1 applied 7, committed 6"},
		{"another keyspace's volume busy", "geo", func(s *ClusterStatus) { s.Servers[1].Volumes[0].Applied = 4 }, ""},
		{"still shipping", "geo", func(s *ClusterStatus) { s.Shipping[0].Shipped, s.Shipping[0].Lag = 3, 1 }, "site 2 holds 3 of this site's 4 updates stable"},
		{"no shipping report", "geo", func(s *ClusterStatus) { s.Shipping = nil }, "no shipping report from its tail for site 2"},
		{"a volume without a chain", "default", func(s *ClusterStatus) { s.Volumes[0].Chain = nil }, "volume 0 has no chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := quiet()
			tc.change(s)
			if why := s.Quiet(tc.keyspace); why != tc.why && (tc.why == "" || !strings.Contains(why, tc.why)) {
				t.Errorf("Quiet(%q) = %q, want %q", tc.keyspace, why, tc.why)
			}
		})
	}
}

// A GET-TRANSACTION whose rounds never agreed fails with ErrContention,
// not ErrUnavailable: the servers answered; the keys kept changing.
func TestTransactionContentionIsItsOwnError(t *testing.T) {
	_, err := txnItems([]string{"a", "b"}, clientcore.Done{Outcome: clientcore.Unavailable, Err: clientcore.ErrContention, Attempts: 8})
	if !errors.Is(err, ErrContention) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v: want ErrContention and not ErrUnavailable", err)
	}
	if want := "catena: contention: GET-TRANSACTION: the keys kept changing; no two rounds of reads agreed (8 rounds of reads)"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	_, err = txnItems([]string{"a"}, clientcore.Done{Outcome: clientcore.Unavailable, Err: clientcore.ErrDeadline})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrContention) {
		t.Fatalf("a deadline: error %v, want ErrUnavailable", err)
	}
}

// TestControl takes, per hierarchical volume, what the head of its
// current configuration reports of the sites controlling its keys;
// other members' reports and stale epochs do not count.
func TestControl(t *testing.T) {
	r := &wire.StatusReply{
		Site:      2,
		Keyspaces: []wire.Keyspace{{Name: "default", Volumes: 1}, {Name: "builds", Prefix: "b/", Mode: wire.ModeHierarchical, FirstVolume: 1, Volumes: 1, Sites: []wire.SiteID{1, 2, 3}}},
		Configs: []wire.Config{
			{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"a", "b"}},
			{Volume: 1, Epoch: 2, Chain: []wire.NodeID{"a", "b"}, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2, 3}},
		},
		Servers: []wire.ServerStatus{
			{ID: "a", Alive: true, Volumes: []wire.VolumeStatus{
				{Volume: 1, Epoch: 2, Control: []wire.PathControl{{Path: "b/src/", Site: 1, Deep: true}, {Path: "b/x", Site: 3}}},
			}},
			{ID: "b", Alive: true, Volumes: []wire.VolumeStatus{
				{Volume: 1, Epoch: 2, Control: []wire.PathControl{{Path: "b/other", Site: 2}}},
			}},
		},
	}
	got := statusOf(r).Control
	want := []PathControl{{Keyspace: "builds", Volume: 1, Path: "b/src/", Site: 1, Deep: true}, {Keyspace: "builds", Volume: 1, Path: "b/x", Site: 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("control %+v, want %+v", got, want)
	}
	r.Servers[0].Volumes[0].Epoch = 1 // the head has not reported the current epoch
	if got := statusOf(r).Control; len(got) != 0 {
		t.Fatalf("control %+v from a stale report", got)
	}
}
