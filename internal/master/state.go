package master

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// State is what the master must not forget across a restart: every
// volume's configuration (so epochs only grow) and each server's
// incarnation (so a server that restarted while the master was down is
// still recognised as restarted).
type State struct {
	Configs      []wire.Config
	Incarnations map[wire.NodeID]uint64
}

// State returns the master's durable state.
func (m *Master) State() State {
	return State{Configs: m.Configs(), Incarnations: maps.Clone(m.incarnations)}
}

// Equal reports whether two states are the same.
func (s State) Equal(o State) bool {
	if !maps.Equal(s.Incarnations, o.Incarnations) || len(s.Configs) != len(o.Configs) {
		return false
	}
	for i := range s.Configs {
		a, b := s.Configs[i], o.Configs[i]
		if a.Volume != b.Volume || a.Epoch != b.Epoch || a.Joining != b.Joining || a.Fresh != b.Fresh || !slices.Equal(a.Chain, b.Chain) {
			return false
		}
	}
	return true
}

// Restore returns a single master that resumes from a saved state. Every
// known server gets a full failure timeout from now (time 0 of the new
// process) before it can be suspected; any lease the previous process
// granted has expired by then.
func Restore(id wire.NodeID, o Options, s State) (*Master, error) {
	m, err := New(id, o)
	if err != nil {
		return nil, err
	}
	m.resetConfigs(s.Configs)
	m.incarnations = maps.Clone(s.Incarnations)
	if m.incarnations == nil {
		m.incarnations = map[wire.NodeID]uint64{}
	}
	m.SetLeader(0, false, "")
	m.SetLeader(0, true, id)
	return m, nil
}

// SaveState writes the state to path atomically and durably.
func SaveState(path string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// LoadState reads a state saved by SaveState; ok is false if there is none.
func LoadState(path string) (s State, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, false, fmt.Errorf("master state %s: %w", path, err)
	}
	return s, true, nil
}

// loadState replaces the durable state (a Raft snapshot).
func (m *Master) loadState(s State) {
	m.resetConfigs(s.Configs)
	m.incarnations = maps.Clone(s.Incarnations)
	if m.incarnations == nil {
		m.incarnations = map[wire.NodeID]uint64{}
	}
}
