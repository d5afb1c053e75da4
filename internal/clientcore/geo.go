package clientcore

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction across sites (docs/adr/0013-sites-and-geo-causal.md): on
// a geo volume every version has a Stamp. The core keeps the client's
// nearest dependencies, the versions another site must hold before it
// may show this client's next write: its last write and what it read
// since. A site applies each origin's updates of a volume in order, so
// per (volume, origin site) the newest version stands for the older ones
// (a site that holds it stable holds them stable), with one exception
// that keeps a second entry: a site need not wait for a dependency on an
// earlier version of the written key itself (ADR 24), and then that
// entry covers nothing else. The core therefore keeps, per (volume,
// origin), the newest version and the newest on any other key; the
// second is what a write of the first one's key must wait for. (With
// the newest alone, `catena-lab sim -faults -mode causal -sites 3 -seed
// 24` once showed a reader another writer's update while an earlier one
// of its session, on another key, was not yet at the reader's site's
// tail.) Every update on a geo volume carries them
// (ClientRequest.Deps), with the largest timestamp the client has seen
// (ClientRequest.TS), so the update's timestamp exceeds everything in
// its causal past.

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
	// deps holds per (volume, origin) the newest version the client
	// depends on and, if there is one, the newest on another key
	// (geoNearest).
	deps map[geoKey][]geoDep
	// inherited is the causal past a session brought from another site
	// (Options.After), kept until its first write here covers it.
	inherited []wire.Dep
	maxTS     uint64
	// seq numbers what the session learns, so that a write's answer
	// drops only the dependencies the write carried.
	seq uint64
}

func newGeoSession() geoSession { return geoSession{deps: map[geoKey][]geoDep{}} }

// geoNearest reduces the dependencies of one (volume, origin) to the
// newest and the newest on another key than the newest's (if any), in
// ds's own storage: it runs on every answer a geo client takes.
func geoNearest(ds []geoDep) []geoDep {
	if len(ds) == 0 {
		return nil
	}
	newest := 0
	for i := range ds {
		if ds[i].dep.N > ds[newest].dep.N {
			newest = i
		}
	}
	other := -1
	for i := range ds {
		if ds[i].dep.Key != ds[newest].dep.Key && (other < 0 || ds[i].dep.N > ds[other].dep.N) {
			other = i
		}
	}
	if other < 0 {
		ds[0] = ds[newest]
		return ds[:1]
	}
	ds[0], ds[1] = ds[newest], ds[other]
	return ds[:2]
}

// list returns the dependencies to send, in a fixed order.
func (g *geoSession) list() []wire.Dep {
	if len(g.deps) == 0 {
		return slices.Clone(g.inherited)
	}
	keys := slices.SortedFunc(maps.Keys(g.deps), func(a, b geoKey) int {
		return cmp.Or(cmp.Compare(a.volume, b.volume), cmp.Compare(a.origin, b.origin))
	})
	out := slices.Clone(g.inherited)
	for _, k := range keys {
		for _, d := range g.deps[k] {
			out = append(out, d.dep)
		}
	}
	return out
}

// inherit takes the causal past of a session that moved here (added to
// what it already holds).
func (g *geoSession) inherit(deps []wire.Dep, ts uint64) {
	g.inherited, g.maxTS = append(g.inherited, deps...), max(g.maxTS, ts)
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
		for k, ds := range g.deps {
			ds = geoNearest(slices.DeleteFunc(ds, func(d geoDep) bool { return d.seq <= sentSeq }))
			if len(ds) == 0 {
				delete(g.deps, k)
			} else {
				g.deps[k] = ds
			}
		}
		g.inherited = nil // every write carried it
	}
	k := geoKey{volume: volume, origin: st.Origin}
	ds := g.deps[k]
	if slices.ContainsFunc(ds, func(d geoDep) bool { return d.dep.Key == key && d.dep.N >= st.N }) {
		return // nothing new: it holds this version of the key or a later one
	}
	g.seq++
	g.deps[k] = geoNearest(append(ds, geoDep{dep: wire.Dep{Key: key, Origin: st.Origin, N: st.N}, seq: g.seq}))
}

// GeoDependencies returns the client's nearest dependencies across sites
// (what its next write on a geo volume carries).
func (c *Core) GeoDependencies() []wire.Dep { return c.geo.list() }

// CausalPast returns what a session that moves to another site takes
// with it (Options.After and AfterTS of its core there): its nearest
// dependencies across sites and the largest timestamp it has seen.
func (c *Core) CausalPast() ([]wire.Dep, uint64) { return c.geo.list(), c.geo.maxTS }

// Arriving reports whether the core still waits for the causal past it
// brought from another site to be stable here.
func (c *Core) Arriving() bool { return len(c.arrivals) > 0 }

// MoveError is why an operation of a session that moved here from
// another site (Options.After, StartMove) did not start before its
// deadline: part of the causal past it brought is not yet stable at
// this site. It wraps Cause (ErrDeadline, or the cause given to Cancel).
type MoveError struct {
	// Missing are the dependencies not yet stable here, in the order
	// the session brought them.
	Missing []wire.Dep
	// Here names this site and Sites the other sites by id, for the
	// message; a driver that knows them sets them (else "this site",
	// "site N").
	Here  string
	Sites map[wire.SiteID]string
	Cause error
}

func (e *MoveError) Error() string {
	here := cmp.Or(e.Here, "this site")
	if len(e.Missing) == 0 {
		return fmt.Sprintf("session move: %s: %v", here, e.Cause)
	}
	d := e.Missing[0]
	from := cmp.Or(e.Sites[d.Origin], fmt.Sprintf("site %d", d.Origin))
	more := ""
	if len(e.Missing) > 1 {
		more = fmt.Sprintf(" (and %d more of the session's past)", len(e.Missing)-1)
	}
	return fmt.Sprintf("session move: %s has not yet received update %d from %s (key %q)%s: %v", here, d.N, from, d.Key, more, e.Cause)
}

func (e *MoveError) Unwrap() error { return e.Cause }

// StartMove moves the causal past of a session from another site
// (CausalPast there) into this running core, as Options.After does for
// a new one, and returns an operation that finishes OK once all of it,
// and any past still arriving, is stable here: at its deadline it
// finishes Unavailable with a *MoveError naming what is missing.
// Operations started meanwhile wait for the past too.
func (c *Core) StartMove(now wire.Time, deps []wire.Dep, ts uint64, call CallOptions) OpID {
	deps = slices.Clone(deps)
	c.geo.inherit(deps, ts)
	for i := range deps {
		c.send(now, c.startArrivalWait(&deps[i]))
	}
	id := c.nextID
	c.nextID++
	o := &operation{id: id, reqNo: uint64(id), op: wire.Op{Kind: wire.OpWaitStable}, call: call, move: true}
	c.ops[id] = o
	c.order = append(c.order, id)
	if call.Deadline != 0 {
		if now >= call.Deadline {
			c.giveUp(now, o, ErrDeadline)
			return id
		}
		c.armAt(call.Deadline)
	}
	if !c.holdForArrival(o) {
		c.finish(now, o, Done{Outcome: OK})
	}
	return id
}

// moveError wraps why an operation held for the session's arriving past
// gave up (nil if it was not held so).
func (c *Core) moveError(o *operation, cause error) error {
	if !o.heldForMove || o.attempts > 0 || len(c.arrivals) == 0 {
		return nil
	}
	e := &MoveError{Cause: cause}
	for _, id := range c.arrivals {
		if w := c.ops[id]; w != nil && w.arrival != nil {
			e.Missing = append(e.Missing, *w.arrival)
		}
	}
	return e
}

// startArrivalWait starts the internal operation that waits until d is
// stable at this site (a session moving here). It is sent once the core
// knows the configurations.
func (c *Core) startArrivalWait(d *wire.Dep) *operation {
	id := c.nextID
	c.nextID++
	w := &operation{id: id, reqNo: uint64(id), op: wire.Op{Kind: wire.OpWaitStable, Key: d.Key}, internal: true, arrival: d}
	c.ops[id] = w
	c.order = append(c.order, id)
	c.internal++
	c.arrivals = append(c.arrivals, id)
	// Due at once: sent at the first tick or configuration.
	w.state, w.retryAt = opQueued, 1
	c.armAt(1)
	return w
}

// holdForArrival holds an operation started while the session's causal
// past from another site is not yet stable here; it reports whether it
// did. The arrival waits send it when they are all answered.
func (c *Core) holdForArrival(o *operation) bool {
	if len(c.arrivals) == 0 {
		return false
	}
	for _, id := range c.arrivals {
		c.ops[id].dependents = append(c.ops[id].dependents, o.id)
		o.blockedOn++
	}
	o.state, o.retryAt, o.heldForMove = opQueued, 0, true
	return true
}

// finishArrival forgets an arrival wait that ended.
func (c *Core) finishArrival(w *operation) {
	c.arrivals = slices.DeleteFunc(c.arrivals, func(id OpID) bool { return id == w.id })
}

// Durability across sites (ADR 13): an update with CallOptions.Sites > 1
// on a geo volume is answered here once this site's first k members hold
// it; the core then asks the volume's tail, which ships it, to say when
// enough sites hold it stable (an internal OpWaitShipped), and only then
// reports the update done. A deadline that passes meanwhile makes it
// Ambiguous: it is applied here, and perhaps not yet there.

// awaitShipped starts the wait for an answered update that asks for
// several sites; it reports whether it did (the update is not done yet).
func (c *Core) awaitShipped(now wire.Time, o *operation, answer Done) bool {
	cfg := c.configs[o.volume]
	st := answer.Result.Stamp
	if !o.isUpdate || o.call.Sites < 2 || !cfg.Geo() || st.IsZero() || o.shipWait != 0 {
		return false
	}
	id := c.nextID
	c.nextID++
	w := &operation{id: id, reqNo: uint64(id), internal: true, shippedFor: o.id, volume: o.volume, routed: o.routed,
		op:      wire.Op{Kind: wire.OpWaitShipped, Key: o.op.Key, Delta: int64(min(o.call.Sites, len(cfg.Sites)))},
		shipped: &wire.Dep{Key: o.op.Key, Origin: st.Origin, N: st.N}}
	c.ops[id] = w
	c.order = append(c.order, id)
	c.internal++
	// The update waits, sent and answered: nothing resends it.
	o.shipWait, o.shipAnswer = id, answer
	o.state, o.retryAt, o.blockedOn = opQueued, 0, 1
	c.send(now, w)
	return true
}

// tooManySites says why the head refused o (ErrTooManySites): how many
// sites it asked for, and which sites replicate the key's keyspace.
func (c *Core) tooManySites(o *operation) error {
	cfg := c.configs[o.volume]
	held := "this site only"
	if len(cfg.Sites) > 1 {
		held = fmt.Sprintf("%d sites (%s)", len(cfg.Sites), siteList(cfg.Sites))
	}
	return fmt.Errorf("%w: the write asked for %d sites, but %s is replicated by %s; nothing was applied", ErrTooManySites, o.call.Sites, c.keyspaceOf(o.volume), held)
}

// keyspaceOf names the keyspace of volume v for a message.
func (c *Core) keyspaceOf(v wire.VolumeID) string {
	for _, ks := range c.keyspaces {
		if ks.HasVolume(v) {
			return fmt.Sprintf("keyspace %q", ks.Name)
		}
	}
	return "the key's keyspace"
}

// siteList is sites as "1,2,3".
func siteList(sites []wire.SiteID) string {
	ids := make([]string, len(sites))
	for i, s := range sites {
		ids[i] = strconv.FormatUint(uint64(s), 10)
	}
	return strings.Join(ids, ",")
}

// KeyspaceMissingError says why a hierarchical keyspace's key cannot be
// served: so many of the sites it names have not created it that the
// others are no majority (wire.ErrKeyspaceMissing). It matches
// ErrKeyspaceMissing.
type KeyspaceMissingError struct {
	// Keyspace names the keyspace (`keyspace "builds"`); Missing are
	// the sites that lack it, Sites all it names.
	Keyspace       string
	Missing, Sites []wire.SiteID
}

func (e *KeyspaceMissingError) Error() string {
	return fmt.Sprintf("%v: %s is not created at site(s) %s of its sites %s, and without them the others are no majority: create it there too (catena keyspace create, with the same settings, at each)",
		ErrKeyspaceMissing, e.Keyspace, siteList(e.Missing), siteList(e.Sites))
}

func (e *KeyspaceMissingError) Unwrap() error { return ErrKeyspaceMissing }

// finishShipWait ends an update whose wait for other sites ended: done
// as answered if they hold it, Ambiguous otherwise.
func (c *Core) finishShipWait(now wire.Time, w *operation, outcome Outcome) {
	o := c.ops[w.shippedFor]
	if o == nil || o.shipWait != w.id {
		return // the update ended first (its deadline)
	}
	o.shipWait, o.blockedOn = 0, 0
	if outcome == OK {
		c.finish(now, o, o.shipAnswer)
		return
	}
	c.finish(now, o, Done{Outcome: Ambiguous, Err: ErrNotShipped})
}

// dropShipWait ends the wait of an update that ended without it.
func (c *Core) dropShipWait(now wire.Time, o *operation) {
	if w := c.ops[o.shipWait]; o.shipWait != 0 && w != nil {
		o.shipWait = 0
		c.finish(now, w, Done{Outcome: Unavailable})
	}
}
