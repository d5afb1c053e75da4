// Package chaintest is test support for the chain core's mode packages
// (internal/chain/causal, sites, hierarchical): single replicas and
// servers driven message by message (this file), and sites of servers
// with their masters played by the test (Sites, sites.go). Only tests
// import it.
//
// It imports internal/chain, so the chain package's own tests (package
// chain) cannot use it and keep their helpers; and it imports no mode
// package, so a mode package's internal tests can (ModesOf gives their
// servers the mode under test, as internal/chain/modes, which imports
// them all, cannot be imported there).
package chaintest

import (
	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// ModesOf returns the chain.Modes of a server that runs strong volumes
// and volumes of mode, which newMode makes; it refuses every other mode.
func ModesOf(mode wire.Mode, newMode func(core *chain.Core, c wire.Config) chain.Mode) chain.Modes {
	return func(core *chain.Core, c wire.Config) (chain.Mode, error) {
		if c.Mode == mode {
			return newMode(core, c), nil
		}
		return chain.StrongOnly(core, c)
	}
}

// Replica returns the replica of volume 0 of server id, on store, with
// the default limits; firstStart says whether the server runs its first
// process ever; modes makes its mode.
func Replica(id wire.NodeID, store storage.Store, firstStart bool, reads chain.ReadMode, modes chain.Modes) *chain.Replica {
	return chain.NewReplica(chain.ReplicaOptions{ID: id, Volume: 0, Store: store, Limits: chain.DefaultLimits, FirstStart: firstStart,
		Reads: reads, Modes: modes})
}
