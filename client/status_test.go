package client_test

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/client"
)

// Ready names what is missing: a server the master has not heard from, or
// a chain member not yet running its volume's configuration.
func TestStatusReady(t *testing.T) {
	ready := func() *client.ClusterStatus {
		return &client.ClusterStatus{
			Volumes: []client.VolumeConfig{{Volume: 0, Epoch: 3, Chain: []string{"a", "b"}}},
			Servers: []client.ServerStatus{
				{Addr: "a", Alive: true, Volumes: []client.ReplicaStatus{{Volume: 0, Epoch: 3}}},
				{Addr: "b", Alive: true, Volumes: []client.ReplicaStatus{{Volume: 0, Epoch: 3}}},
			},
		}
	}
	if ok, missing := ready().Ready([]string{"a", "b"}); !ok {
		t.Fatalf("not ready: %s", missing)
	}
	for _, tc := range []struct {
		name   string
		change func(*client.ClusterStatus)
		want   string
	}{
		{"no volumes", func(s *client.ClusterStatus) { s.Volumes = nil }, "no configuration"},
		{"dead server", func(s *client.ClusterStatus) { s.Servers[1].Alive = false }, "not heard from b"},
		{"unknown server", func(s *client.ClusterStatus) { s.Servers = s.Servers[:1] }, "not heard from b"},
		{"old epoch", func(s *client.ClusterStatus) { s.Servers[0].Volumes[0].Epoch = 2 }, "a does not run volume 0's configuration (epoch 3)"},
	} {
		s := ready()
		tc.change(s)
		ok, missing := s.Ready([]string{"a", "b"})
		if ok || !strings.Contains(missing, tc.want) {
			t.Errorf("%s: Ready = %v, %q; want false, %q", tc.name, ok, missing, tc.want)
		}
	}
}
