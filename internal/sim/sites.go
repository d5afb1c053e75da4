package sim

import (
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// What runs of several sites share, the correctness runs (geo.go) and
// the load runs (load.go): a node's site is the prefix of its id up to
// the first '/' ("a/" of "a/s1", siteName), and the links between nodes
// of different sites have the WAN's latency.

// sitePrefix returns the site prefix of a node id ("a/" of "a/s1"), or ""
// for an id without one.
func sitePrefix(id wire.NodeID) string {
	if i := strings.IndexByte(string(id), '/'); i > 0 {
		return string(id[:i+1])
	}
	return ""
}

// wanLatency returns a NetworkModel.LinkLatency that gives every link
// between nodes of different sites a one-way latency of wan ± jitter;
// links within a site, and those of a node without a site, keep the
// model's LAN latency.
func wanLatency(wan, jitter wire.Time) func(from, to wire.NodeID) (lo, hi wire.Time, ok bool) {
	return func(from, to wire.NodeID) (wire.Time, wire.Time, bool) {
		a, b := sitePrefix(from), sitePrefix(to)
		if a == "" || b == "" || a == b {
			return 0, 0, false
		}
		return wan - jitter, wan + jitter, true
	}
}

// loadSite is one site of a load run (a run of one site has one, with no
// prefix; a site has an id only when the sites replicate a keyspace
// together): its master, its servers and their chains, the
// configurations its clients start with.
type loadSite struct {
	id      wire.SiteID
	prefix  string
	masters []wire.NodeID
	chains  map[wire.VolumeID][]wire.NodeID
	servers []wire.NodeID // the chains' servers in id order, then the spares
	configs map[wire.VolumeID]wire.Config
	// position is each server's index in each volume's initial chain.
	position map[wire.NodeID]map[wire.VolumeID]int
}

// loadSites returns the sites of a load run: one, with Chains and Spares
// as given, or o.Sites, each with every id prefixed with its site's;
// geo: the sites replicate the default keyspace together.
func loadSites(o *LoadOptions, chainProtocol, geo bool) []*loadSite {
	n := max(o.Sites, 1)
	var out []*loadSite
	for i := range n {
		s := &loadSite{chains: map[wire.VolumeID][]wire.NodeID{}, configs: map[wire.VolumeID]wire.Config{},
			position: map[wire.NodeID]map[wire.VolumeID]int{}}
		if n > 1 {
			s.prefix = siteName(i) + "/"
		}
		if geo {
			s.id = wire.SiteID(i + 1)
		}
		named := func(id wire.NodeID) wire.NodeID { return wire.NodeID(s.prefix) + id }
		for v, members := range o.Chains {
			for j, id := range members {
				id = named(id)
				s.chains[v] = append(s.chains[v], id)
				if s.position[id] == nil {
					s.position[id] = map[wire.VolumeID]int{}
				}
				s.position[id][v] = j
			}
		}
		s.servers = serversOf(s.chains)
		for _, id := range o.Spares {
			s.servers = append(s.servers, named(id))
		}
		if chainProtocol {
			s.masters = []wire.NodeID{named("m")}
		}
		for v, members := range s.chains {
			s.configs[v] = wire.Config{Volume: v, Epoch: 1, Chain: slices.Clone(members), Mode: wire.ImpliedMode(o.K, nil), K: o.K}
		}
		out = append(out, s)
	}
	if geo {
		for _, s := range out {
			for v, c := range s.configs {
				c.Sites = siteIDs(out)
				c.Mode = wire.ImpliedMode(c.K, c.Sites)
				s.configs[v] = c
			}
		}
	}
	return out
}

// sitesSettings returns the deployment's sites, as the masters'
// settings name them.
func sitesSettings(sites []*loadSite) []wire.Site {
	var out []wire.Site
	for i, s := range sites {
		out = append(out, wire.Site{ID: s.id, Name: siteName(i), Masters: slices.Clone(s.masters)})
	}
	return out
}

// siteIDs returns the ids of the sites.
func siteIDs(sites []*loadSite) []wire.SiteID {
	var out []wire.SiteID
	for _, s := range sites {
		out = append(out, s.id)
	}
	return out
}

// lagObserver measures, in a load run of several sites, how long each
// update takes to reach the other sites (LoadResult.ShipLag and
// VisibleLag), from what the servers apply (chain.Observer). Positions
// are those of the initial chains: the load runs that measure lags have
// no failures.
type lagObserver struct {
	k      int
	sites  int
	siteOf map[wire.NodeID]*loadSite
	res    *LoadResult
	now    func() wire.Time
	// answered is when the origin answered each update not yet visible
	// at every other site, and visible at how many it is.
	answered map[lagKey]*lagState
}

type lagKey struct {
	origin wire.SiteID
	volume wire.VolumeID
	n      uint64
}

type lagState struct {
	at               wire.Time
	shipped, visible int // the other sites whose head, member k−1 applied it
}

func newLagObserver(o *LoadOptions, sites []*loadSite, siteOf map[wire.NodeID]*loadSite, res *LoadResult, now func() wire.Time) *lagObserver {
	return &lagObserver{k: o.K, sites: len(sites), siteOf: siteOf, res: res, now: now, answered: map[lagKey]*lagState{}}
}

// Applied notes when the origin's member at index k−1 and another site's
// head and member at index k−1 apply an update of a geo volume.
func (l *lagObserver) Applied(node wire.NodeID, volume wire.VolumeID, u *wire.Update) {
	s := l.siteOf[node]
	if u.Stamp.IsZero() || s == nil {
		return
	}
	pos, ok := s.position[node][volume]
	if !ok {
		return
	}
	key := lagKey{u.Stamp.Origin, volume, u.Stamp.N}
	now := l.now()
	if s.id == u.Stamp.Origin {
		if pos == l.k-1 {
			l.answered[key] = &lagState{at: now}
		}
		return
	}
	st := l.answered[key]
	if st == nil {
		return // answered before the observer knew (not in a load run without failures)
	}
	if pos == 0 {
		l.res.ShipLag = append(l.res.ShipLag, Sample{At: st.at, D: now - st.at})
		st.shipped++
	}
	if pos == l.k-1 {
		l.res.VisibleLag = append(l.res.VisibleLag, Sample{At: st.at, D: now - st.at})
		if st.visible++; st.visible == l.sites-1 {
			delete(l.answered, key)
		}
	}
}

// SnapshotInstalled is part of chain.Observer.
func (l *lagObserver) SnapshotInstalled(wire.NodeID, wire.VolumeID, wire.NodeID, wire.SN) {}

// Reset is part of chain.Observer.
func (l *lagObserver) Reset(wire.NodeID, wire.VolumeID) {}

// CaughtUp is part of chain.Observer.
func (l *lagObserver) CaughtUp(wire.NodeID, wire.VolumeID, wire.NodeID, wire.SN) {}
func (l *lagObserver) Seeded(wire.NodeID, wire.VolumeID, wire.VolumeID, wire.SN) {}

// finish records, at the end of a run, the (update, site) pairs not yet
// applied at the other site's head (ShipPending) and member k−1
// (VisiblePending), with how long they have waited so far.
func (l *lagObserver) finish() {
	now := l.now()
	for _, st := range l.answered {
		for range l.sites - 1 - st.shipped {
			l.res.ShipPending = append(l.res.ShipPending, Sample{At: st.at, D: now - st.at})
		}
		for range l.sites - 1 - st.visible {
			l.res.VisiblePending = append(l.res.VisiblePending, Sample{At: st.at, D: now - st.at})
		}
	}
	slices.SortFunc(l.res.ShipPending, func(a, b Sample) int { return int(a.At - b.At) })
	slices.SortFunc(l.res.VisiblePending, func(a, b Sample) int { return int(a.At - b.At) })
}

// SiteName returns the name of the i-th site of a run with sites ("a",
// "b", ...): its nodes' ids start with it and '/'.
func SiteName(i int) string { return siteName(i) }
