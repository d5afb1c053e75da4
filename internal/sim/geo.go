package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/wire"
)

// Runs of several sites (Options.Sites): ChainReaction's geo mode. Each
// site is a whole cluster of the options' shape (its masters, servers and
// clients, node ids prefixed "a/", "b/", ...) in one simulated world, the
// links between sites slower (Options.WAN ± WANJitter). The default
// keyspace is causal and replicated by every site; clients at every site
// put unique values to the same keys and get them. Besides each site's
// own checks (its chains' invariants, I1–I5, convergence within the site,
// no acknowledged update lost) the run asserts, as it goes:
//
//	G1 Remote visibility: a head applies another site's update only once
//	   every dependency it carries is applied at the tail of the
//	   dependency's volume at this site (NOTES A4.3 I2 across sites), or,
//	   for a dependency on an earlier version of the update's own key
//	   from its origin, at this head (ADR 24).
//
// and at the end, after healing: every site converged to the same state
// (equal version vectors and equal objects, stamps included, for every
// volume), and the history of every site's clients together is causal+
// (check.CausalConvergence). Faults: each site's own, and partitions
// between sites.

// geoRun is a run of several sites.
type geoRun struct {
	o        Options
	w        *world
	clusters []*Cluster
	// history is every site's clients' operations; applied, in
	// hierarchical mode, the updates any replica applied.
	history []check.Operation
	applied map[check.UpdateID]bool
	// views are the active views the sites adopted, by number, and
	// controlCheckedAt when checkControl last looked (hierarchical mode).
	views            control.Views
	controlCheckedAt wire.Time
	faults           []string
	// moves counts the clients moved, to name their new processes.
	moves int
	// skews describes the sites' clock offsets, for the fault list.
	skews []string
}

// siteName returns the name and node-id prefix of the i-th site.
func siteName(i int) string { return string(rune('a' + i)) }

// sites returns the deployment's sites, as the masters' settings.
func (g *geoRun) sites() []wire.Site {
	var out []wire.Site
	for i, c := range g.clusters {
		out = append(out, wire.Site{ID: c.site, Name: siteName(i), Masters: slices.Clone(c.masters)})
	}
	return out
}

// siteIDs returns the ids of every site.
func (g *geoRun) siteIDs() []wire.SiteID {
	var out []wire.SiteID
	for _, c := range g.clusters {
		out = append(out, c.site)
	}
	return out
}

// clusterOf returns the site a node belongs to, or nil.
func (g *geoRun) clusterOf(id wire.NodeID) *Cluster {
	if i := strings.IndexByte(string(id), '/'); i > 0 {
		for _, c := range g.clusters {
			if c.prefix == string(id[:i+1]) {
				return c
			}
		}
	}
	return nil
}

// historyOf returns the history a site's clients record into.
func (c *Cluster) historyOf() *[]check.Operation {
	if c.geo != nil {
		return &c.geo.history
	}
	return &c.history
}

func runGeo(o Options) (res Result) {
	g := &geoRun{o: o, w: newWorld(o.Seed, o.Network)}
	g.w.traceLog = o.Trace
	g.w.network.LinkLatency = wanLatency(o.WAN, o.WANJitter)
	for i := range o.Sites {
		c := newCluster(o)
		c.w, c.geo, c.site, c.prefix = g.w, g, wire.SiteID(i+1), siteName(i)+"/"
		g.clusters = append(g.clusters, c)
	}
	// Every site's masters must be known before any master starts.
	for _, c := range g.clusters {
		if o.Masters == 1 {
			c.masters = []wire.NodeID{wire.NodeID(c.prefix + "m")}
		} else {
			for j := range o.Masters {
				c.masters = append(c.masters, wire.NodeID(fmt.Sprintf("%sm%d", c.prefix, j+1)))
			}
		}
	}
	res.Seed = o.Seed
	defer func() {
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("panic at %v: %v", g.w.now, p)
		}
		res.Faults = g.allFaults()
		res.Trace = g.w.trace
		res.Elapsed = g.w.now
	}()
	for _, c := range g.clusters {
		c.build()
		// Clock skew between sites: each site's clocks start up to
		// SiteSkewMax ahead (the clocks within a site drift as usual).
		skew := g.w.between(0, o.SiteSkewMax)
		for id, n := range g.w.nodes {
			if g.clusterOf(id) == c {
				n.clockOffset = skew
			}
		}
		g.skews = append(g.skews, fmt.Sprintf("0.000s clocks of site %s %v ahead", siteName(len(g.skews)), skew))
	}
	g.w.afterStep = func(n *node) {
		if c := g.clusterOf(n.id); c != nil {
			c.checkStep(n)
		}
	}
	g.w.beforeSend = func(n *node, env wire.Envelope) {
		if c := g.clusterOf(n.id); c != nil {
			c.checkCausalReply(n, env)
		}
	}
	start := 200 * wire.Millisecond
	g.w.at(start, func() {
		for _, c := range g.clusters {
			for _, cl := range c.clients {
				cl.issuing = true
			}
		}
	})
	healed := start + o.FaultPhase
	if !o.Hierarchical {
		// (A strong client needs no causal past to move: its session
		// is the same at every site.)
		g.scheduleMoves(start+300*wire.Millisecond, start+o.FaultPhase+o.RecoveryTime)
	}
	if o.Faults {
		for _, c := range g.clusters {
			c.scheduleRandomFaults(start+100*wire.Millisecond, healed)
		}
		g.scheduleSitePartitions(start+100*wire.Millisecond, healed)
		// A whole site's crash, with its Raft masters: its master
		// cannot reconfigure its chains while every server is down.
		// (A master that stays up removes the dead servers one by one
		// and gives up what only the first k members held: a causal
		// chain answers after k copies and tolerates k−1 failures.)
		if o.Durable && o.Masters > 1 && g.w.rng.IntN(2) == 0 {
			g.w.at(start+g.w.between(300*wire.Millisecond, o.FaultPhase-wire.Second), g.crashSite)
		}
	}
	for _, c := range g.clusters {
		c.healed = healed
		g.w.at(healed, c.healAll)
	}
	stopAt := healed + o.RecoveryTime
	g.w.at(stopAt, func() {
		for _, c := range g.clusters {
			for _, cl := range c.clients {
				cl.issuing = false
			}
		}
	})
	g.w.run(stopAt + 3*wire.Second)
	var errs []error
	for _, c := range g.clusters {
		if err := c.finalReads(); err != nil {
			c.fail(err.Error())
		}
	}
	for _, c := range g.clusters {
		for _, err := range c.verifySite() {
			errs = append(errs, fmt.Errorf("site %s: %w", strings.TrimSuffix(c.prefix, "/"), err))
		}
	}
	if err := g.checkSitesConverged(); err != nil {
		errs = append(errs, err)
	}
	if o.Hierarchical {
		if err := g.checkLinearizable(); err != nil {
			errs = append(errs, err)
		}
	} else if v := check.CausalConvergence(g.history); v != nil {
		errs = append(errs, fmt.Errorf("history of %d operations at %d sites is not causal+: %w", len(g.history), o.Sites, v))
	}
	res.Err = errors.Join(errs...)
	res.Operations = len(g.history)
	for _, op := range g.history {
		if op.Unknown {
			res.Unknown++
		}
	}
	return res
}

// allFaults lists every site's faults and the partitions between sites,
// in time order.
func (g *geoRun) allFaults() []string {
	out := append(slices.Clone(g.skews), g.faults...)
	for _, c := range g.clusters {
		for _, f := range c.faults {
			out = append(out, c.prefix+" "+f)
		}
	}
	slices.Sort(out)
	return out
}

// scheduleSitePartitions cuts every link between two sites now and then.
func (g *geoRun) scheduleSitePartitions(from, until wire.Time) {
	if len(g.clusters) < 2 || g.w.rng.IntN(10) < 3 {
		return
	}
	for t := from + g.w.between(0, 500*wire.Millisecond); t < until-100*wire.Millisecond; t += g.w.between(800*wire.Millisecond, 2*wire.Second) {
		g.w.at(t, func() {
			i := g.w.rng.IntN(len(g.clusters))
			j := (i + 1 + g.w.rng.IntN(len(g.clusters)-1)) % len(g.clusters)
			a, b := g.clusters[i], g.clusters[j]
			d := g.w.between(200*wire.Millisecond, 1500*wire.Millisecond)
			g.faults = append(g.faults, fmt.Sprintf("%.3fs cut site %s from site %s for %.0fms", float64(g.w.now)/1e9,
				strings.TrimSuffix(a.prefix, "/"), strings.TrimSuffix(b.prefix, "/"), float64(d)/1e6))
			for _, x := range a.nodes() {
				for _, y := range b.nodes() {
					g.w.breakLinks(x, y)
				}
			}
			g.w.at(g.w.now+d, func() {
				for _, x := range a.nodes() {
					for _, y := range b.nodes() {
						g.w.healLinks(x, y)
					}
				}
			})
		})
	}
}

// checkRemoteApplied asserts G1 when a head of this site applies another
// site's update: each of its dependencies is at the tail of its volume
// here (stable at this site), or applied at this head if it is an
// earlier version of the same key from the same origin.
func (c *Cluster) checkRemoteApplied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	if c.geo == nil || u.Stamp.IsZero() || u.Stamp.Origin == c.site {
		return
	}
	s := c.server(node)
	if s == nil || s.Replica(v) == nil || !s.Replica(v).IsHead() {
		return
	}
	for _, d := range u.Deps {
		vol := c.volumeOf(d.Key)
		cfg := c.VolumeConfig(vol)
		tail := c.member(cfg.Tail(), vol, cfg.Epoch)
		if d.Key == u.Key && d.Origin == u.Stamp.Origin {
			tail = s.Replica(v) // the head: the queue's order suffices
		}
		if tail == nil {
			continue
		}
		if got := tail.Vector().Get(d.Origin); got < d.N {
			panic(fmt.Sprintf("INVARIANT G1 remote visibility: %s applies site %d's update %v of %s while its dependency %s (site %d #%d) is not at the tail of volume %d (%v)",
				node, u.Stamp.Origin, u.Stamp, u.Key, d.Key, d.Origin, d.N, vol, tail.Vector()))
		}
	}
}

// writeSites returns how many sites the run's clients' writes may ask
// for (1: none).
func (c *Cluster) writeSites() int {
	if c.geo == nil || c.opts.NoWritesForSites || c.opts.Hierarchical {
		return 1
	}
	return len(c.geo.clusters)
}

// checkDurableAcrossSites asserts G2 when a write that asked for several
// sites is answered: that many sites hold it stable (a live server of
// its volume's chain there applied it, which its tail did first; it may
// not have adopted the newest configuration yet).
func (c *Cluster) checkDurableAcrossSites(d clientcore.Done, sites int) {
	st := d.Result.Stamp
	if c.geo == nil || st.IsZero() {
		return
	}
	held := 0
	for _, site := range c.geo.clusters {
		cfg := site.VolumeConfig(d.Volume)
		if slices.ContainsFunc(cfg.Chain, func(id wire.NodeID) bool {
			if s := site.server(id); s != nil {
				return s.Replica(d.Volume) != nil && s.Replica(d.Volume).Vector().Get(st.Origin) >= st.N
			}
			// A crashed server holds on a durable disk what it committed
			// (a whole site may be down at once: crash-all).
			if !site.opts.Durable || !site.down[id] || site.engines[id] == nil {
				return false
			}
			meta, ok := site.engines[id].DurableMeta(d.Volume)
			return ok && meta.Vector.Get(st.Origin) >= st.N
		}) {
			held++
		}
	}
	if held < min(sites, len(c.geo.clusters)) {
		c.fail(fmt.Sprintf("INVARIANT G2 durability across sites: %v of %s at site %d answered for %d sites, held by %d",
			d.Op, st, c.site, sites, held))
	}
}

// scheduleMoves moves a client now and then to another site: its
// session goes on there, after waiting for its causal past to be stable
// there (clientcore Options.After), and the checker sees one session.
func (g *geoRun) scheduleMoves(from, until wire.Time) {
	for t := from + g.w.between(0, 300*wire.Millisecond); t < until; t += g.w.between(200*wire.Millisecond, 800*wire.Millisecond) {
		g.w.at(t, func() {
			a := g.clusters[g.w.rng.IntN(len(g.clusters))]
			var movable []*client
			for _, cl := range a.clients {
				if !cl.readOnly && cl.core.Pending() == 0 {
					movable = append(movable, cl)
				}
			}
			if len(movable) == 0 {
				return
			}
			cl := movable[g.w.rng.IntN(len(movable))]
			b := g.clusters[(slices.Index(g.clusters, a)+1+g.w.rng.IntN(len(g.clusters)-1))%len(g.clusters)]
			g.move(cl, a, b)
		})
	}
}

// move moves a client from site a to site b.
func (g *geoRun) move(cl *client, a, b *Cluster) {
	after, ts := cl.core.CausalPast()
	b.sessions++
	cid := b.clientIDBase() + wire.ClientID(2000+b.sessions)
	g.faults = append(g.faults, fmt.Sprintf("%.3fs move client %s (session %d) from site %s to site %s as client %d with %d dependencies",
		float64(g.w.now)/1e9, cl.id, cl.session, strings.TrimSuffix(a.prefix, "/"), strings.TrimSuffix(b.prefix, "/"), cid, len(after)))
	cl.core, cl.clientID = b.newCore(cid, cl.timeouts, after, ts), cid
	cl.acked, cl.onStart, cl.failure = &b.acked, b.started, b.fail
	cl.newSession = func() (*clientcore.Core, wire.ClientID) {
		b.sessions++
		cid := b.clientIDBase() + wire.ClientID(2000+b.sessions)
		return b.newCore(cid, cl.timeouts, nil, 0), cid
	}
	a.clients = slices.DeleteFunc(a.clients, func(x *client) bool { return x == cl })
	b.clients = append(b.clients, cl)
	// A new process at the new site: nothing still in flight to or from
	// the old one reaches the new core.
	g.w.crash(cl.id)
	g.moves++
	cl.id = wire.NodeID(fmt.Sprintf("%s%s~%d", b.prefix, cl.id[strings.IndexByte(string(cl.id), '/')+1:], g.moves))
	if i := strings.IndexByte(string(cl.id), '~'); i > 0 && strings.Count(string(cl.id), "~") > 1 {
		cl.id = cl.id[:i] + cl.id[strings.LastIndexByte(string(cl.id), '~'):]
	}
	g.w.addNode(cl.id, cl, g.o.TickInterval, 1)
}

// crashSite crashes every server of one site at once, and its masters
// too when they are a Raft group (they restart from their logs; a single
// master keeps no state across a restart, so it stays up), and restarts
// them together a little later. Storage is durable in such runs: the
// site comes back with its data and catches up on what it missed.
func (g *geoRun) crashSite() {
	c := g.clusters[g.w.rng.IntN(len(g.clusters))]
	down := g.w.between(300*wire.Millisecond, 1500*wire.Millisecond)
	g.faults = append(g.faults, fmt.Sprintf("%.3fs crash the whole site %s for %.0fms",
		float64(g.w.now)/1e9, strings.TrimSuffix(c.prefix, "/"), float64(down)/1e6))
	victims := slices.Clone(c.servers)
	if len(c.masters) > 1 {
		victims = append(victims, c.masters...)
	}
	for _, id := range victims {
		if n := g.w.nodes[id]; n != nil && n.up {
			g.w.crash(id)
			c.down[id] = true
		}
	}
	g.w.at(g.w.now+down, func() {
		for _, id := range victims {
			c.restart(id)
		}
	})
}

// nodes returns the site's masters and servers.
func (c *Cluster) nodes() []wire.NodeID {
	return append(slices.Clone(c.masters), c.servers...)
}

// checkSitesConverged asserts that every site ended in the same state:
// for every volume, the same version vector at every site's tail and the
// same objects, stamps included.
func (g *geoRun) checkSitesConverged() error {
	first := g.clusters[0]
	for _, v := range first.volumes() {
		var want []string
		for i, c := range g.clusters {
			cfg := c.VolumeConfig(v)
			r := c.member(cfg.Tail(), v, cfg.Epoch)
			if r == nil {
				return fmt.Errorf("convergence across sites: site %s's tail of volume %d is down", siteName(i), v)
			}
			got := []string{fmt.Sprint(r.Vector())}
			for k := range c.opts.Keys {
				key := c.keyName(k)
				if vol := c.volumeOf(key); vol != v {
					continue
				}
				o := r.Object(key)
				got = append(got, fmt.Sprintf("%s=%q/%v/%v", key, o.Value, o.Exists, o.Stamp))
			}
			if i == 0 {
				want = got
			} else if !slices.Equal(got, want) {
				return fmt.Errorf("convergence across sites: volume %d at site %s holds %v, at site a %v", v, siteName(i), got, want)
			}
		}
	}
	return nil
}
