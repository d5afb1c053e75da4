package master

import (
	"errors"
	"fmt"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// CheckInvariants verifies the master's durable state: what every member
// applies from the log. The simulator calls it after every step, and so
// do real masters that run with invariant checks (catena master
// -check-invariants). It costs a pass over the configurations.
//
//   - INVARIANT volumes: the configurations are exactly the keyspaces'
//     volumes, each with its keyspace's mode, k and sites, but for a
//     split's new volumes that have not started yet (split.go): their
//     parents' configurations split into them.
//   - INVARIANT chain: a configuration's members are distinct, its joining
//     server is none of them, its epoch is at least 1, and only a joining
//     server is ever Moved.
//   - INVARIANT index: byServer names, for every server, exactly the
//     volumes whose configuration names it (member or joining), and
//     volumeIDs (when built) the configured volumes in order.
func (m *Master) CheckInvariants() error {
	var errs []error
	starting := 0
	for _, ks := range m.keyspaces {
		for i := range ks.Volumes {
			v := ks.Volume(i)
			c := m.configs[v]
			if _, ok := m.splitParent(v); c == nil && ok {
				starting++
				continue
			}
			switch {
			case c == nil:
				errs = append(errs, fmt.Errorf("INVARIANT volumes: volume %d of keyspace %s has no configuration", v, ks.Name))
			case c.Mode != ks.Mode || c.K != ks.K || !slices.Equal(c.Sites, ks.Sites):
				errs = append(errs, fmt.Errorf("INVARIANT volumes: %v is %s k=%d sites %v, its keyspace %s is %s k=%d sites %v",
					c, c.Mode, c.K, c.Sites, ks.Name, ks.Mode, ks.K, ks.Sites))
			}
		}
	}
	if n := volumeCount(m.keyspaces); n != len(m.configs)+starting {
		errs = append(errs, fmt.Errorf("INVARIANT volumes: %d configurations and %d split volumes starting for the %d volumes of %d keyspaces", len(m.configs), starting, n, len(m.keyspaces)))
	}
	for v, c := range m.configs {
		if err := checkConfig(v, c); err != nil {
			errs = append(errs, err)
		}
		for _, id := range append(slices.Clone(c.Chain), c.Joining) {
			if id != "" && !m.byServer[id][v] {
				errs = append(errs, fmt.Errorf("INVARIANT index: %v names %s, the index of %s's volumes does not", c, id, id))
			}
		}
	}
	for id, vs := range m.byServer {
		for v := range vs {
			if c := m.configs[v]; c == nil || !c.Contains(id) {
				errs = append(errs, fmt.Errorf("INVARIANT index: the index of %s's volumes names volume %d, whose configuration %v does not name it", id, v, c))
			}
		}
	}
	if m.volumeIDs != nil && (len(m.volumeIDs) != len(m.configs) || !slices.IsSorted(m.volumeIDs)) {
		errs = append(errs, fmt.Errorf("INVARIANT index: %d volume ids (sorted %v) for %d configurations",
			len(m.volumeIDs), slices.IsSorted(m.volumeIDs), len(m.configs)))
	}
	return errors.Join(errs...)
}

// assertInvariants panics if the state breaks an invariant, when the
// master checks them (Options.CheckInvariants).
func (m *Master) assertInvariants() {
	if !m.opts.CheckInvariants {
		return
	}
	if err := m.CheckInvariants(); err != nil {
		panic(fmt.Sprintf("master %s: %v", m.id, err))
	}
}

// checkConfig checks INVARIANT chain for the configuration of volume v.
func checkConfig(v wire.VolumeID, c *wire.Config) error {
	switch {
	case c.Volume != v:
		return fmt.Errorf("INVARIANT chain: volume %d's configuration is %v", v, c)
	case c.Epoch < 1:
		return fmt.Errorf("INVARIANT chain: %v has epoch 0", c)
	case c.Moved && c.Joining == "":
		return fmt.Errorf("INVARIANT chain: %v moves a member without a joining server", c)
	case c.Joining != "" && slices.Contains(c.Chain, c.Joining):
		return fmt.Errorf("INVARIANT chain: %v's joining server is a member", c)
	}
	for i, id := range c.Chain {
		if id == "" || slices.Contains(c.Chain[i+1:], id) {
			return fmt.Errorf("INVARIANT chain: %v names member %q twice, or none", c, id)
		}
	}
	return nil
}
