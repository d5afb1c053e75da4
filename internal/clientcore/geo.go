package clientcore

import (
	"cmp"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction across sites (docs/adr/0013-sites-and-geo-causal.md): on
// a geo volume every version has a Stamp. The core keeps the client's
// nearest dependencies, the versions another site must hold before it
// may show this client's next write: its last write and what it read
// since, one entry per (volume, origin site), since a site applies each
// origin's updates of a volume in order. Every update on a geo volume
// carries them (ClientRequest.Deps), with the largest timestamp the
// client has seen (ClientRequest.TS), so the update's timestamp exceeds
// everything in its causal past.

// geoKey names one entry of the nearest dependencies.
type geoKey struct {
	volume wire.VolumeID
	origin wire.SiteID
}

// geoDep is one nearest dependency and when it was learnt.
type geoDep struct {
	dep wire.Dep
	seq uint64
}

// geoSession is a client's causal past across sites.
type geoSession struct {
	deps  map[geoKey]geoDep
	maxTS uint64
	// seq numbers what the session learns, so that a write's answer
	// drops only the dependencies the write carried.
	seq uint64
}

func newGeoSession() geoSession { return geoSession{deps: map[geoKey]geoDep{}} }

// list returns the dependencies to send, in a fixed order.
func (g *geoSession) list() []wire.Dep {
	if len(g.deps) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(g.deps), func(a, b geoKey) int {
		return cmp.Or(cmp.Compare(a.volume, b.volume), cmp.Compare(a.origin, b.origin))
	})
	out := make([]wire.Dep, len(keys))
	for i, k := range keys {
		out[i] = g.deps[k].dep
	}
	return out
}

// observe records a version the client read or wrote. A write's answer
// first drops the dependencies the write carried (learnt up to sentSeq):
// the write depends on them, so depending on the write covers them.
func (g *geoSession) observe(volume wire.VolumeID, key string, st wire.Stamp, write bool, sentSeq uint64) {
	if st.IsZero() {
		return
	}
	g.maxTS = max(g.maxTS, st.TS)
	if write {
		maps.DeleteFunc(g.deps, func(_ geoKey, d geoDep) bool { return d.seq <= sentSeq })
	}
	k := geoKey{volume: volume, origin: st.Origin}
	if d, ok := g.deps[k]; !ok || st.N > d.dep.N {
		g.seq++
		g.deps[k] = geoDep{dep: wire.Dep{Key: key, Origin: st.Origin, N: st.N}, seq: g.seq}
	}
}

// GeoDependencies returns the client's nearest dependencies across sites
// (what its next write on a geo volume carries).
func (c *Core) GeoDependencies() []wire.Dep { return c.geo.list() }
