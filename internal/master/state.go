package master

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/catena-kv/catena/internal/durable"
	"github.com/catena-kv/catena/internal/wire"
)

// State is what the master must not forget across a restart: the
// cluster's settings (so a restarted master needs no flags to go on
// restoring chains to t), every volume's configuration (so epochs only
// grow) and each server's incarnation (so a server that restarted while
// the master was down is still recognised as restarted).
type State struct {
	// Settings are zero in a state saved before they were part of it.
	Settings     Settings
	Configs      []wire.Config
	Incarnations map[wire.NodeID]uint64
	// FirstIncarnations are the incarnations servers were registered
	// with (their first processes). A state saved without them takes
	// incarnation 1 as a server's first.
	FirstIncarnations map[wire.NodeID]uint64 `json:",omitempty"`
	// Keyspaces are the keyspaces created since the cluster was (the
	// default one follows from Settings).
	Keyspaces []wire.Keyspace `json:",omitempty"`
	// Default is the default keyspace once it was split (nil: never; it
	// follows from Settings).
	Default *wire.Keyspace `json:",omitempty"`
	// Auth holds the users and roles (nil: none ever).
	Auth *wire.AuthTable `json:",omitempty"`
	// ClusterVersion is the protocol version the cluster runs at (0:
	// never raised, version 1; upgrade.go).
	ClusterVersion uint32 `json:",omitempty"`
}

// State returns the master's durable state.
func (m *Master) State() State {
	s := State{Settings: m.opts.Settings.Clone(), Configs: m.Configs(), Incarnations: maps.Clone(m.incarnations),
		FirstIncarnations: maps.Clone(m.first), Keyspaces: m.createdKeyspaces(), ClusterVersion: m.clusterVersion}
	if m.auth.Version > 0 {
		t := m.auth.Clone()
		s.Auth = &t
	}
	if d := m.keyspaces[0]; d.Splits > 0 {
		d.VolumeIDs = slices.Clone(d.VolumeIDs)
		s.Default = &d
	}
	return s
}

// Equal reports whether two states are the same.
func (s State) Equal(o State) bool {
	if !s.Settings.Equal(o.Settings) || !maps.Equal(s.Incarnations, o.Incarnations) || !maps.Equal(s.FirstIncarnations, o.FirstIncarnations) || len(s.Configs) != len(o.Configs) ||
		!slices.EqualFunc(s.Keyspaces, o.Keyspaces, wire.Keyspace.Equal) || !authEqual(s.Auth, o.Auth) || s.ClusterVersion != o.ClusterVersion ||
		(s.Default == nil) != (o.Default == nil) || s.Default != nil && !s.Default.Equal(*o.Default) {
		return false
	}
	for i := range s.Configs {
		a, b := s.Configs[i], o.Configs[i]
		if a.Volume != b.Volume || a.Epoch != b.Epoch || a.Joining != b.Joining || a.Fresh != b.Fresh || a.Mode != b.Mode || a.K != b.K || a.Split != b.Split || a.FromSplit != b.FromSplit || !slices.Equal(a.Chain, b.Chain) || !slices.Equal(a.Sites, b.Sites) {
			return false
		}
	}
	return true
}

// Restore returns a single master that resumes from a saved state, with
// its saved settings: o needs none, and any it sets must equal the saved
// ones. A state saved without settings (by an older catena) takes o's,
// which must then describe the cluster as it was created. Every known
// server gets a full failure timeout from now (time 0 of the new process)
// before it can be suspected; any lease the previous process granted has
// expired by then.
func Restore(id wire.NodeID, o Options, s State) (*Master, error) {
	m, err := newMaster(id, o)
	if err != nil {
		return nil, err
	}
	if err := m.loadState(s); err != nil {
		return nil, err
	}
	if err := m.opts.Settings.checkGiven(o.Settings); err != nil {
		return nil, err
	}
	m.SetLeader(0, true, id)
	return m, nil
}

// SaveState writes the state to path atomically and durably.
func SaveState(path string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, data)
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

// loadState replaces the durable state (Restore, a Raft snapshot). A
// state without settings, saved before they were part of it, keeps the
// master's own, which must then be complete (from the options).
func (m *Master) loadState(s State) error {
	settings := s.Settings.Clone()
	if settings.IsZero() {
		settings = m.opts.Settings.withDefaults(len(s.Configs))
		if m.opts.Settings.IsZero() {
			return errors.New("the saved master state holds no cluster settings (saved by an older catena): give the settings the cluster was created with")
		}
	}
	if err := settings.Validate(); err != nil {
		return fmt.Errorf("saved master settings: %w", err)
	}
	def := defaultKeyspace(settings)
	if d := s.Default; d != nil {
		// Split since the cluster was created: as the settings made it
		// but for its volumes.
		split := def
		split.Volumes, split.Splits, split.VolumeIDs = d.Volumes, d.Splits, slices.Clone(d.VolumeIDs)
		if !d.Equal(split) || d.Splits < 1 || d.Volumes != def.Volumes<<d.Splits || len(d.VolumeIDs) != d.Volumes {
			return fmt.Errorf("saved master state: the default keyspace %+v is not the settings' %+v split %d times", *d, def, d.Splits)
		}
		def = split
	}
	keyspaces := append([]wire.Keyspace{def}, s.Keyspaces...)
	if err := checkConfigured(keyspaces, s.Configs); err != nil {
		return fmt.Errorf("saved master state: %w", err)
	}
	m.opts.Settings = settings
	m.keyspaces = keyspaces
	configs := slices.Clone(s.Configs)
	for i := range configs {
		// A state saved before configurations named their mode: each
		// takes its keyspace's.
		v := configs[i].Volume
		if k := slices.IndexFunc(keyspaces, func(k wire.Keyspace) bool { return k.HasVolume(v) }); k >= 0 {
			configs[i].Mode = keyspaces[k].Mode
		}
	}
	m.resetConfigs(configs)
	m.incarnations = maps.Clone(s.Incarnations)
	if m.incarnations == nil {
		m.incarnations = map[wire.NodeID]uint64{}
	}
	m.first = maps.Clone(s.FirstIncarnations)
	if m.first == nil {
		m.first = map[wire.NodeID]uint64{}
		for id := range m.incarnations {
			m.first[id] = 1 // saved before first incarnations were: 1 was every server's first
		}
	}
	m.auth = wire.AuthTable{}
	if s.Auth != nil {
		m.auth = s.Auth.Clone()
	}
	m.clusterVersion = s.ClusterVersion
	return nil
}

// checkConfigured reports unless configs hold one configuration for
// every volume of keyspaces and for no other volume, but for the new
// volumes of a split still starting: those have none until CmdSplitActivate
// (the parent's configuration splits into them, as splitParent finds).
func checkConfigured(keyspaces []wire.Keyspace, configs []wire.Config) error {
	byVolume := map[wire.VolumeID]*wire.Config{}
	for i := range configs {
		byVolume[configs[i].Volume] = &configs[i]
	}
	configured := 0
	for _, ks := range keyspaces {
		for j := range ks.Volumes {
			v := ks.Volume(j)
			if byVolume[v] != nil {
				configured++
				continue
			}
			if ks.Splits > 0 && j >= ks.Volumes/2 {
				if p := byVolume[ks.Volume(j-ks.Volumes/2)]; p != nil && p.Split.Into == v {
					continue // (starting)
				}
			}
			return fmt.Errorf("volume %d of keyspace %s has no configuration", v, ks.Name)
		}
	}
	if configured != len(configs) {
		return fmt.Errorf("%d configurations for %d configured volumes", len(configs), configured)
	}
	return nil
}

// authEqual reports whether two states' users and roles are the same.
func authEqual(a, b *wire.AuthTable) bool {
	var x, y wire.AuthTable
	if a != nil {
		x = *a
	}
	if b != nil {
		y = *b
	}
	return x.Version == y.Version &&
		slices.EqualFunc(x.Users, y.Users, func(u, v wire.User) bool {
			return u.Name == v.Name && u.PasswordHash == v.PasswordHash && slices.Equal(u.Roles, v.Roles)
		}) &&
		slices.EqualFunc(x.Roles, y.Roles, func(r, q wire.Role) bool { return r.Name == q.Name && slices.Equal(r.Grants, q.Grants) })
}
