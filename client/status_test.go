package client

import (
	"slices"
	"strings"
	"testing"

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
// site holds stable; other members' reports and stale epochs do not count.
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
				{Volume: 0, Epoch: 2, Stable: wire.Vector{{Site: 1, N: 10}, {Site: 2, N: 4}}, Shipped: wire.Vector{{Site: 2, N: 7}}},
				{Volume: 1, Epoch: 1},
			}},
		},
	}
	got := statusOf(r).Shipping
	want := []ShippingLag{{Volume: 0, To: 2, Originated: 10, Shipped: 7, Lag: 3}, {Volume: 0, To: 3, Originated: 10, Shipped: 0, Lag: 10}}
	if !slices.Equal(got, want) {
		t.Fatalf("shipping %+v, want %+v", got, want)
	}
	r.Servers[1].Volumes[0].Epoch = 1 // the tail has not reported the current epoch
	if got := statusOf(r).Shipping; len(got) != 0 {
		t.Fatalf("shipping %+v from a stale report", got)
	}
}
