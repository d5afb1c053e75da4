// Package modes makes the chain core's Mode for each keyspace mode
// (internal/chain/mode.go, docs/adr/0021-modes-as-strategies.md): strong
// (the core's own), causal+ (internal/chain/causal, across sites with
// internal/chain/sites) and hierarchical control
// (internal/chain/hierarchical). It is the one place that knows them
// all; a server passes New as chain.ServerOptions.Modes.
package modes

import (
	"fmt"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/causal"
	"github.com/catena-kv/catena/internal/chain/hierarchical"
	"github.com/catena-kv/catena/internal/wire"
)

// New makes the Mode of a volume whose configuration is c (chain.Modes).
// A hierarchical volume needs a server that knows its site.
func New(core *chain.Core, c wire.Config) (chain.Mode, error) {
	switch c.Mode {
	case wire.ModeStrong:
		return chain.NewStrong(core), nil
	case wire.ModeCausal:
		return causal.New(core, c), nil
	case wire.ModeHierarchical:
		if core.Sites() == nil {
			return nil, fmt.Errorf("volume %d is hierarchical, and this server belongs to no site (catena server -site)", c.Volume)
		}
		return hierarchical.New(core), nil
	}
	return nil, fmt.Errorf("volume %d has an unknown mode %s", c.Volume, c.Mode)
}

var _ chain.Modes = New
