package sim

import (
	"fmt"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Splits (Options.Splits): the default keyspace's volumes double during
// the fault phase, once or twice, while the clients read and write and
// the faults go on (docs/adr/0031). The operator's request goes to every
// master member, as catena keyspace split sends it. The run's checks
// cover the moved keys like any other: CR §3's invariants on every
// chain, the new volumes' first chains included (their histories start
// as their parent's at the split point: check.Histories.Seeded),
// linearizability of every key's history across the move, and no
// acknowledged write lost. The clients route with the keyspace list the
// masters give them, so those that have not heard of a split yet still
// send moved keys to the old volume, which must refuse them.

// splitOperator is the node id the operator's requests come from.
const splitOperator = wire.NodeID("operator")

// Split asks the masters to split keyspace name once more, as an
// operator does.
func (c *Cluster) Split(name string) {
	splits := 0
	for _, k := range c.keyspaces() {
		if k.Name == name {
			splits = k.Splits
		}
	}
	c.faults = append(c.faults, fmt.Sprintf("%.3fs split %s (split %d times before)", float64(c.w.now)/1e9, name, splits))
	for _, m := range c.masters {
		c.w.send(splitOperator, wire.Envelope{To: m, Msg: &wire.KeyspaceRequest{Split: name, Create: wire.Keyspace{Splits: splits}}})
	}
}

// scheduleSplits schedules one or two splits of the default keyspace in
// [from, until), the second after the first had time to finish (a
// request while volumes of the first still start is refused).
func (c *Cluster) scheduleSplits(from, until wire.Time) {
	splits := 1 + c.w.rng.IntN(2)
	span := (until - from) / wire.Time(splits)
	for i := range splits {
		at := from + wire.Time(i)*span + c.w.between(0, span/2)
		c.w.at(at, func() { c.Split(wire.DefaultKeyspace) })
	}
}

// coreVolumes is the Volumes a client core routes with before it knows
// the keyspaces: none with splits, so it routes and scans by the
// keyspaces the masters send (as split so far).
func (c *Cluster) coreVolumes() int {
	if c.opts.Splits {
		return 0
	}
	return c.opts.Volumes
}

// exportHolds reports whether the state of x's volume that x read holds
// key, by the keyspace list x's client routed with and, with splits, by
// where each split of the volume was applied: a split's moved keys are
// in the state iff it is older than the split point. sure is false when
// members seeded a split at different points (one from a history the
// chain lost) and the state lies between them.
func (c *Cluster) exportHolds(x exportRecord, key string) (held, sure bool) {
	if !c.opts.Splits {
		v, ok := placement.Route(x.keyspaces, key)
		return ok && v == x.volume, true
	}
	ks := c.keyspaces()
	if len(ks) == 0 {
		return false, false
	}
	k := ks[0]
	idx, ok := k.IndexOf(x.volume)
	if !ok {
		return false, true
	}
	h := wire.KeyHash(key)
	made := k.MadeAt(idx)
	if int(h%uint32(made)) != idx%made {
		return false, true
	}
	seeds := c.histories.Seeds()
	for m := 2 * made; m <= k.Volumes; m *= 2 {
		child := idx + m/2
		if int(h%uint32(m)) != child {
			continue
		}
		applied, pending := false, false
		for _, p := range seeds[k.Volume(child)] {
			if p.Parent != x.volume {
				continue
			}
			if x.sn > p.SN {
				applied = true
			} else {
				pending = true
			}
		}
		switch {
		case applied && pending:
			return false, false
		case applied:
			return false, true // (it moved before this state)
		}
	}
	return true, true
}
