package client

import (
	"strings"
	"testing"
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
