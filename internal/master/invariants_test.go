package master

import (
	"fmt"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// TestInvariantsCatchBrokenState: a master's state after failures and
// recovery passes its invariant checks, and each kind of corruption of
// the state is reported, naming its invariant.
func TestInvariantsCatchBrokenState(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		corrupt    func(m *Master)
	}{
		{"duplicate member", "INVARIANT chain", func(m *Master) {
			c := m.configs[0]
			c.Chain = append(c.Chain, c.Chain[0])
		}},
		{"joining member", "INVARIANT chain", func(m *Master) { m.configs[0].Joining = m.configs[0].Chain[0] }},
		{"moved without joiner", "INVARIANT chain", func(m *Master) { m.configs[0].Moved = true }},
		{"epoch 0", "INVARIANT chain", func(m *Master) { m.configs[0].Epoch = 0 }},
		{"wrong mode", "INVARIANT volumes", func(m *Master) { m.configs[0].Mode = wire.ModeCausal }},
		{"missing volume", "INVARIANT volumes", func(m *Master) { delete(m.configs, 0) }},
		{"index lacks a member", "INVARIANT index", func(m *Master) {
			delete(m.byServer[m.configs[0].Chain[0]], 0)
		}},
		{"index names a stranger", "INVARIANT index", func(m *Master) {
			m.byServer["stranger"] = map[wire.VolumeID]bool{0: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New("m", testOptions())
			if err != nil {
				t.Fatal(err)
			}
			heartbeatAll(m, 0, 1, "a", "b", "c", "d")
			m.Tick(wire.Second) // (every server silent: removals and recovery run)
			if err := m.CheckInvariants(); err != nil {
				t.Fatalf("before the corruption: %v", err)
			}
			tc.corrupt(m)
			if err := m.CheckInvariants(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckInvariants() = %v, want %q", err, tc.want)
			}
			// A master that asserts them stops at its next step.
			m.opts.CheckInvariants = true
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
					t.Fatalf("a checking master's tick panicked with %v, want %q", p, tc.want)
				}
			}()
			m.Tick(2 * wire.Second)
		})
	}
}
