package client

import "github.com/catena-kv/catena/internal/wire"

// PastOf makes a causal past of deps, as a client of another site would
// hand over (tests only).
func PastOf(deps []wire.Dep, ts uint64) CausalPast { return CausalPast{deps: deps, ts: ts} }
