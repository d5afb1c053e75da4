// Package sites is how a chain's updates are identified and replicated
// across sites (ChainReaction §V; docs/adr/0013-sites-and-geo-causal.md),
// on the chain core (internal/chain):
//
//   - Versions: the head stamps every update it sequences for a client
//     with its site, the next number of that site's updates of the
//     volume (Stamp.N), and a hybrid timestamp above the prior version of
//     the key, the client's causal past (ClientRequest.TS) and every
//     update this replica applied. Every member counts what it applied
//     per origin site (the version vector, ChainReaction's per chain)
//     and stores objects with their stamps; a deletion leaves a
//     tombstone. A causal keyspace of one site stamps its updates the
//     same way (origin 0), so its versions compare as remote ones do
//     (GET-TRANSACTION).
//   - Shipping: every member keeps the updates its site originated in a
//     durable shipping log. The tail ships them, once stable here, to
//     the head of the sibling chain at every other site (Ship), in
//     Stamp.N order, a window at a time; the receiver answers how many it
//     has taken (ShipAck), so a new tail or a new receiving head resumes
//     without loss or duplicate. What every other site holds stable is
//     trimmed from the logs (Ack.Shipped).
//   - Applying: the receiving head queues a site's updates in order and
//     sequences each, as an update of its own chain, once every
//     dependency it names (Update.Deps: the client's last write and what
//     it read since) is stable at this site (SiteView.StableCount). Last
//     writer wins by (TS, site): an update older than the key's version
//     is sequenced without changing the value (Changed false), so it
//     still counts in the vector and nobody waits for it forever.
//
// The causal mode (internal/chain/causal) ships this way across sites;
// hierarchical control (internal/chain/hierarchical) ships its strong
// chains' updates this way too, with relaying (Options.Relays) and the
// decisions of its control (Policy).
package sites

import (
	"fmt"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Versions is a stamped volume's versions: the stamps its head gives
// updates and the version vector of what a replica applied.
type Versions struct {
	core *chain.Core
	// own is this server's site (0 in a deployment of one site).
	own wire.SiteID
	// dependencies: stamped updates carry their dependencies (a causal
	// keyspace's; a hierarchical one's depend on nothing).
	dependencies bool
	// vector counts the applied updates per origin site.
	// INVARIANT: each origin's updates are applied in Stamp.N order with
	// no gap, so vector[s] = n means updates 1..n of site s are applied.
	vector wire.Vector
	// lastTS is the largest timestamp applied.
	lastTS uint64
}

// NewVersions returns the versions of core's replica at site own; with
// dependencies the updates it stamps carry their causal dependencies.
func NewVersions(core *chain.Core, own wire.SiteID, dependencies bool) *Versions {
	return &Versions{core: core, own: own, dependencies: dependencies}
}

// Own returns this server's site.
func (v *Versions) Own() wire.SiteID { return v.own }

// Vector returns the applied updates per origin site.
func (v *Versions) Vector() wire.Vector { return slices.Clone(v.vector) }

// Applied returns how many of site's updates this replica applied.
func (v *Versions) Applied(site wire.SiteID) uint64 { return v.vector.Get(site) }

// Stable returns the updates per origin site that this member knows are
// processed by the tail: the vector without the updates applied after
// the committed SN (on Sent: INVARIANT Sent).
func (v *Versions) Stable() wire.Vector {
	out := slices.Clone(v.vector)
	if v.core.Committed() >= v.core.Applied() {
		return out
	}
	for u := range v.core.Uncommitted() {
		if u.Stamp.IsZero() {
			continue
		}
		// Updates of one origin are in N order: the first one after
		// committed bounds what is stable.
		if n := u.Stamp.N - 1; n < out.Get(u.Stamp.Origin) {
			out = out.Set(u.Stamp.Origin, n)
		}
	}
	return out
}

// tsMax bounds a client's causal timestamp: beyond it the head's clock
// arithmetic could wrap. (No bound relative to this head's clock holds
// across sites, whose clocks may be skewed by any amount; a forged
// timestamp makes its writes win conflicts, which authentication, not the
// protocol, must prevent.)
const tsMax = uint64(1) << 62

// CheckRequest refuses a stamped update whose dependencies or timestamp
// cannot be right; it changes nothing.
func (v *Versions) CheckRequest(req *wire.ClientRequest) wire.ErrCode {
	if len(req.Deps) > v.core.Limits().DepsMax {
		return wire.ErrBadRequest
	}
	for _, d := range req.Deps {
		if d.N == 0 || d.Key == "" || len(d.Key) > kv.KeySizeMax {
			return wire.ErrBadRequest
		}
	}
	if req.TS >= tsMax {
		return wire.ErrBadRequest
	}
	return wire.ErrNone
}

// Stamp gives an update the head sequences for a client its identity
// across sites and its dependencies; prior is the stamp of the version it
// replaces.
func (v *Versions) Stamp(u *wire.Update, req *wire.ClientRequest, prior wire.Stamp) {
	now := v.core.Now()
	ts := max(uint64(max(now, 0)), prior.TS+1, req.TS+1, v.lastTS+1)
	if mutation.Enabled && v.core.Mutations().GeoPhysicalTime {
		ts = uint64(max(now, 1))
	}
	u.Stamp = wire.Stamp{Origin: v.own, N: v.vector.Get(v.own) + 1, TS: ts}
	u.Result.Stamp = u.Stamp
	if !v.dependencies {
		// A hierarchical volume's updates depend on nothing: one site
		// writes a key at a time, control moves only once the view holds
		// the old primary's writes, and the stamps order them (ADR 16).
		return
	}
	u.Deps = slices.Clone(req.Deps)
	if !prior.IsZero() && prior.Origin != v.own {
		// The new version is computed from (or replaces) the prior one:
		// another site must hold that first. (Of this site's own updates
		// FIFO shipping takes care.)
		u.Deps = append(u.Deps, wire.Dep{Key: u.Key, Origin: prior.Origin, N: prior.N})
	}
}

// Apply counts a stamped update the replica applies.
func (v *Versions) Apply(u *wire.Update) {
	if u.Stamp.IsZero() {
		return
	}
	if want := v.vector.Get(u.Stamp.Origin) + 1; u.Stamp.N != want {
		panic(fmt.Sprintf("INVARIANT origin order: %s volume %d applying update %d of site %d, expected %d",
			v.core.ID(), v.core.Volume(), u.Stamp.N, u.Stamp.Origin, want))
	}
	v.vector = v.vector.Set(u.Stamp.Origin, u.Stamp.N)
	v.lastTS = max(v.lastTS, u.Stamp.TS)
}

// Remote reports whether an update originated at another site.
func (v *Versions) Remote(u *wire.Update) bool {
	return !u.Stamp.IsZero() && u.Stamp.Origin != v.own
}

// Restore takes the vector a previous process saved.
func (v *Versions) Restore(m storage.Meta) { v.vector = m.Vector }

// SaveMeta saves the vector with the replica's meta.
func (v *Versions) SaveMeta(m *storage.Meta) { m.Vector = v.vector }

// FillSnapshot adds the vector to a snapshot's last chunk.
func (v *Versions) FillSnapshot(last *wire.SnapshotChunk) { last.Vector = slices.Clone(v.vector) }

// Installed takes the vector of an installed snapshot.
func (v *Versions) Installed(last *wire.SnapshotChunk) { v.vector = last.Vector }

// Reset drops the versions with the replica's state.
func (v *Versions) Reset() { v.vector, v.lastTS = nil, 0 }
