package chain

import (
	"fmt"
	"math"
	"slices"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// SiteView is what a server knows of its site and the others, for the
// replicas of geo volumes. The server implements it.
type SiteView interface {
	// Site is this server's site.
	Site() wire.SiteID
	// Cluster is the deployment's name, sent with every Ship.
	Cluster() string
	// StableCount returns how many of site's updates to the volume key
	// belongs to are known stable at this site.
	StableCount(key string, site wire.SiteID) uint64
	// Route returns where a message to the sibling of volume v at site
	// goes: the sibling's head and its volume id; ok false while the
	// server does not know (it asks that site's masters).
	Route(site wire.SiteID, v wire.VolumeID) (head wire.NodeID, volume wire.VolumeID, ok bool)
	// RouteTail is Route for the sibling's tail (reads forwarded to a
	// hierarchical key's primary site).
	RouteTail(site wire.SiteID, v wire.VolumeID) (tail wire.NodeID, volume wire.VolumeID, ok bool)
	// Learn records a configuration of a volume at another site (sent
	// back with ErrNotHead).
	Learn(site wire.SiteID, c wire.Config)
	// Stale says the server's configuration of the sibling of volume v
	// at site is out of date (a shipment went unanswered, or reached a
	// server that is not the head): it is dropped until site's masters
	// tell a newer one.
	Stale(site wire.SiteID, v wire.VolumeID)
	// Await says a queued update waits for d to be stable at this site:
	// the server asks the tail of d's volume to say when it is.
	Await(d wire.Dep)
	// Keyspace returns the keyspace volume v belongs to, as the server
	// knows the keyspaces.
	Keyspace(v wire.VolumeID) (wire.Keyspace, bool)
	// Lacking returns the sites of volume v's keyspace whose masters
	// answered without it (or with another number of volumes), and asks
	// again those and the sites not heard from yet.
	Lacking(v wire.VolumeID) []wire.SiteID
	// Relaying says the head of volume v forwarded client's request
	// reqNo to another site (internal/chain/hierarchical): the server hands that
	// site's answer to v's replica.
	Relaying(client wire.ClientID, reqNo uint64, v wire.VolumeID, now wire.Time)
}

// Shipper is what a mode that ships updates between sites
// (internal/chain/sites) tells the server: its site view's table of
// stable updates, the heads' progress, the metrics.
type Shipper interface {
	// StableCount returns how many of site's updates this member knows
	// are stable.
	StableCount(site wire.SiteID) uint64
	// HasInbound reports whether the head holds updates of other sites.
	HasInbound() bool
	// SequenceInbound sequences, at the head, the queued updates of
	// other sites whose dependencies are stable here.
	SequenceInbound()
	// ShippingLag returns, at the tail, how many of this site's updates
	// each other site does not hold stable yet (nil at other members).
	ShippingLag() []wire.SiteCount
	// ShippingAge returns, at the tail, how long ago the oldest of this
	// site's updates each other site does not hold stable was written
	// (0: it holds them all; nil at other members).
	ShippingAge(now wire.Time) []wire.SiteTime
}

// RelayKeep is how long a head remembers a request it forwarded to
// another site whose answer has not come: the client will have asked
// again, or given up.
const RelayKeep = 10 * wire.Second

// siteRefreshInterval spaces a server's requests for another site's
// configurations.
const siteRefreshInterval = 200 * wire.Millisecond

// siteView is a server's knowledge of the sites, for its geo replicas
// (SiteView): its own site, the deployment's sites (from its master), the
// configurations and keyspaces of other sites it asked their masters for,
// and its site's table of stable updates per geo volume (from its master,
// which gathers the members' reports).
type siteView struct {
	server *Server
	own    wire.SiteID
	sites  []wire.Site
	// cluster is the deployment's name, from the master's heartbeat
	// replies: sent with what goes to other sites, and required of what
	// comes from them.
	cluster string
	remote  map[wire.SiteID]*remoteSite
	stable  map[wire.VolumeID]wire.Vector
	// local holds this site's configurations of every volume, asked of
	// its masters, for the waits below.
	local *remoteSite
	// waits are the dependencies heads of this server wait for, by the
	// volume and site they name (the largest N wanted), with the request
	// asking the volume's tail about each.
	waits map[geoWaitKey]*geoWait
	// requests maps the request numbers of the waits to their keys.
	requests  map[uint64]geoWaitKey
	nextReqNo uint64
	// tableGrew: stable grew since the heads last looked.
	tableGrew bool
	// relays are the requests this server's hierarchical heads forwarded
	// to other sites, with the volume whose replica relays the answer
	// and when they were forwarded.
	relays map[relayKey]relayEntry
}

// relayKey names a forwarded request.
type relayKey struct {
	client wire.ClientID
	reqNo  uint64
}

// relayEntry is where a forwarded request's answer goes.
type relayEntry struct {
	volume wire.VolumeID
	at     wire.Time
}

// geoWaitKey names what a wait is about.
type geoWaitKey struct {
	volume wire.VolumeID
	origin wire.SiteID
}

// geoWait is one wait for a dependency to be stable at this site.
type geoWait struct {
	dep    wire.Dep
	reqNo  uint64
	sentAt wire.Time
	sent   bool
}

// geoWaitRetry is how long a wait's request goes unanswered before it is
// sent again (with the configuration refreshed).
const geoWaitRetry = 500 * wire.Millisecond

// remoteSite is what a server knows of another site.
type remoteSite struct {
	configs   map[wire.VolumeID]wire.Config
	keyspaces []wire.Keyspace
	// wanted: a replica needs a configuration the server lacks, or found
	// one out of date; askedAt is when a master was last asked, next
	// which master is asked next.
	wanted  bool
	askedAt wire.Time
	next    int
	// doubts are the keyspaces Lacking found missing at the site: false
	// until an answer of its masters came since (what the server knew
	// may predate their creation there), true once one did.
	doubts map[string]bool
}

func newSiteView(s *Server, own wire.SiteID) *siteView {
	return &siteView{server: s, own: own, remote: map[wire.SiteID]*remoteSite{}, stable: map[wire.VolumeID]wire.Vector{},
		local:    &remoteSite{configs: map[wire.VolumeID]wire.Config{}, askedAt: -siteRefreshInterval},
		waits:    map[geoWaitKey]*geoWait{},
		requests: map[uint64]geoWaitKey{},
		relays:   map[relayKey]relayEntry{},
	}
}

// Relaying implements SiteView.
func (v *siteView) Relaying(client wire.ClientID, reqNo uint64, vol wire.VolumeID, now wire.Time) {
	v.relays[relayKey{client, reqNo}] = relayEntry{volume: vol, at: now}
}

// relayed returns, and forgets, the volume whose head forwarded the
// request a reply answers.
func (v *siteView) relayed(m *wire.ClientReply) (wire.VolumeID, bool) {
	k := relayKey{m.Client, m.ReqNo}
	e, ok := v.relays[k]
	delete(v.relays, k)
	return e.volume, ok
}

// Site implements SiteView.
func (v *siteView) Site() wire.SiteID { return v.own }

// Cluster implements SiteView.
func (v *siteView) Cluster() string { return v.cluster }

// StableCount implements SiteView: the master's table, or this server's
// own replica of the volume if it knows more.
//
// A key of a keyspace this site does not replicate from site (at this
// site the key belongs to another keyspace, or its keyspace does not
// name site) names nothing a reader here can see: such a dependency is
// met at once, or an update depending on it would wait forever.
func (v *siteView) StableCount(key string, site wire.SiteID) uint64 {
	ks, ok := placement.KeyspaceOf(v.server.keyspaces, key)
	if !ok {
		return 0
	}
	if !slices.Contains(ks.Sites, site) {
		return math.MaxUint64
	}
	if ks.Volumes < 1 {
		return 0
	}
	vol := placement.VolumeIn(ks, key)
	n := v.stable[vol].Get(site)
	if r := v.server.replicas[vol]; r != nil {
		if here, ok := r.stableCount(site); ok {
			n = max(n, here)
		}
	}
	return n
}

func (v *siteView) site(id wire.SiteID) *remoteSite {
	rs := v.remote[id]
	if rs == nil {
		rs = &remoteSite{configs: map[wire.VolumeID]wire.Config{}, askedAt: -siteRefreshInterval}
		v.remote[id] = rs
	}
	return rs
}

// sibling returns the volume at site that is the sibling of volume vol:
// the volume of the same index in the keyspace of the same name.
func (v *siteView) sibling(rs *remoteSite, vol wire.VolumeID) (wire.VolumeID, bool) {
	i := slices.IndexFunc(v.server.keyspaces, func(k wire.Keyspace) bool { return k.HasVolume(vol) })
	j := -1
	if i >= 0 {
		j = slices.IndexFunc(rs.keyspaces, func(k wire.Keyspace) bool { return k.Name == v.server.keyspaces[i].Name })
	}
	if j < 0 || rs.keyspaces[j].Volumes != v.server.keyspaces[i].Volumes {
		return 0, false
	}
	return rs.keyspaces[j].FirstVolume + (vol - v.server.keyspaces[i].FirstVolume), true
}

// Keyspace implements SiteView.
func (v *siteView) Keyspace(vol wire.VolumeID) (wire.Keyspace, bool) {
	i := slices.IndexFunc(v.server.keyspaces, func(k wire.Keyspace) bool { return k.HasVolume(vol) })
	if i < 0 {
		return wire.Keyspace{}, false
	}
	return v.server.keyspaces[i], true
}

// Lacking implements SiteView.
func (v *siteView) Lacking(vol wire.VolumeID) []wire.SiteID {
	ks, ok := v.Keyspace(vol)
	if !ok {
		return nil
	}
	var out []wire.SiteID
	for _, id := range ks.Sites {
		if id == v.own {
			continue
		}
		rs := v.site(id)
		if _, ok := v.sibling(rs, vol); ok {
			delete(rs.doubts, ks.Name)
			continue
		}
		rs.wanted = true // (asked again: it may have been created since)
		if rs.doubts == nil {
			rs.doubts = map[string]bool{}
		}
		if rs.doubts[ks.Name] {
			out = append(out, id)
		} else {
			rs.doubts[ks.Name] = false
		}
	}
	return out
}

// Route implements SiteView.
func (v *siteView) Route(site wire.SiteID, vol wire.VolumeID) (wire.NodeID, wire.VolumeID, bool) {
	return v.route(site, vol, wire.Config.Head)
}

// RouteTail implements SiteView.
func (v *siteView) RouteTail(site wire.SiteID, vol wire.VolumeID) (wire.NodeID, wire.VolumeID, bool) {
	return v.route(site, vol, wire.Config.Tail)
}

// route returns the member of the sibling of volume vol at site that
// member picks, and the sibling; false (and the site's configurations
// wanted) while the server does not know them.
func (v *siteView) route(site wire.SiteID, vol wire.VolumeID, member func(wire.Config) wire.NodeID) (wire.NodeID, wire.VolumeID, bool) {
	rs := v.site(site)
	sibling, ok := v.sibling(rs, vol)
	if !ok {
		rs.wanted = true
		return "", 0, false
	}
	node := member(rs.configs[sibling])
	if node == "" {
		rs.wanted = true
		return "", 0, false
	}
	return node, sibling, true
}

// Learn implements SiteView.
func (v *siteView) Learn(site wire.SiteID, c wire.Config) {
	rs := v.site(site)
	if c.Epoch > rs.configs[c.Volume].Epoch {
		rs.configs[c.Volume] = c.Clone()
	}
}

// moved takes a Moved: the configuration of a volume at site as its
// server that was addressed knows it, or, without members, word that the
// server does not serve the volume and the site's masters must be asked.
func (v *siteView) moved(site wire.SiteID, c wire.Config) {
	if c.Head() != "" {
		v.Learn(site, c)
		return
	}
	rs := v.site(site)
	delete(rs.configs, c.Volume)
	rs.wanted = true
}

// Stale implements SiteView.
func (v *siteView) Stale(site wire.SiteID, vol wire.VolumeID) {
	rs := v.site(site)
	if sibling, ok := v.sibling(rs, vol); ok {
		delete(rs.configs, sibling)
	}
	rs.wanted = true
}

// Await implements SiteView.
func (v *siteView) Await(d wire.Dep) {
	vol, ok := placement.Route(v.server.keyspaces, d.Key)
	if !ok {
		return
	}
	k := geoWaitKey{volume: vol, origin: d.Origin}
	if w := v.waits[k]; w != nil {
		if d.N < w.dep.N {
			// Ask for the earlier one: a head may wait for several
			// updates of the volume (ADR 24), and the answer to each lets
			// it look again.
			w.dep, w.sent = d, false
		}
		return
	}
	v.waits[k] = &geoWait{dep: d}
}

// sendWaits sends the waits not sent yet, or unanswered too long, to the
// tails of their volumes (this site's configurations, from its masters).
func (v *siteView) sendWaits(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for _, k := range sortedWaitKeys(v.waits) {
		w := v.waits[k]
		if v.stable[k.volume].Get(k.origin) >= w.dep.N {
			delete(v.waits, k)
			delete(v.requests, w.reqNo)
			continue
		}
		if w.sent && now-w.sentAt < geoWaitRetry {
			continue
		}
		if w.sent {
			v.local.wanted = true // unanswered: the tail may have moved
		}
		cfg := v.local.configs[k.volume]
		if r := v.server.replicas[k.volume]; r != nil && r.Config().Epoch > cfg.Epoch {
			cfg = r.Config()
		}
		if cfg.Tail() == "" {
			v.local.wanted = true
			continue
		}
		delete(v.requests, w.reqNo)
		v.nextReqNo++
		w.reqNo, w.sent, w.sentAt = v.nextReqNo, true, now
		v.requests[w.reqNo] = k
		out = append(out, wire.Envelope{To: cfg.Tail(), Msg: &wire.ClientRequest{
			Volume: k.volume, Epoch: cfg.Epoch, Client: v.clientID(), ReqNo: w.reqNo,
			Op: wire.Op{Kind: wire.OpWaitStable, Key: w.dep.Key}, Deps: []wire.Dep{w.dep},
			Keyspaces: wire.KeyspacesVersion(v.server.keyspaces),
		}})
	}
	return out
}

// clientID is the client id of this server's waits: they are queries, so
// no exactly-once session is ever made for it.
func (v *siteView) clientID() wire.ClientID {
	h := uint64(14695981039346656037)
	for _, c := range []byte(v.server.opts.ID) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return wire.ClientID(h | 1<<63)
}

// learnWaitReply takes a tail's answer to a wait; it reports whether the
// reply was one.
func (v *siteView) learnWaitReply(m *wire.ClientReply) bool {
	k, ok := v.requests[m.ReqNo]
	if !ok || m.Client != v.clientID() {
		return false
	}
	w := v.waits[k]
	switch {
	case m.Err == wire.ErrNone:
		st := m.Result.Stamp
		if st.Origin == k.origin && st.N > v.stable[k.volume].Get(k.origin) {
			v.stable[k.volume] = v.stable[k.volume].Set(k.origin, st.N)
			v.tableGrew = true
		}
	case m.Config != nil:
		if m.Config.Epoch > v.local.configs[k.volume].Epoch {
			v.local.configs[k.volume] = m.Config.Clone()
		}
		w.sent = false // again, at once
	default:
		w.sentAt = -geoWaitRetry // again at the next tick, after a refresh
		v.local.wanted = true
	}
	return true
}

func sortedWaitKeys(m map[geoWaitKey]*geoWait) []geoWaitKey {
	keys := make([]geoWaitKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b geoWaitKey) int {
		if a.volume != b.volume {
			return int(a.volume) - int(b.volume)
		}
		return int(a.origin) - int(b.origin)
	})
	return keys
}

// tick asks the masters of the sites whose configurations are wanted.
func (v *siteView) tick(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	if v.local.wanted && now-v.local.askedAt >= siteRefreshInterval && len(v.server.opts.Masters) > 0 {
		v.local.askedAt = now
		out = append(out, wire.Envelope{To: v.server.opts.Masters[v.local.next%len(v.server.opts.Masters)], Msg: &wire.ConfigRequest{}})
		v.local.next++
	}
	out = append(out, v.sendWaits(now)...)
	for k, e := range v.relays {
		if now-e.at > RelayKeep {
			delete(v.relays, k) // the answer was lost: the client asked again, or gave up
		}
	}
	for _, st := range v.sites {
		rs := v.remote[st.ID]
		if st.ID == v.own || rs == nil || !rs.wanted || len(st.Masters) == 0 || now-rs.askedAt < siteRefreshInterval {
			continue
		}
		rs.askedAt = now
		out = append(out, wire.Envelope{To: st.Masters[rs.next%len(st.Masters)], Msg: &wire.ConfigRequest{Cluster: v.cluster}})
		rs.next++
	}
	return out
}

// learnReply takes a master's answer: this site's or another's.
func (v *siteView) learnReply(from wire.NodeID, m *wire.ConfigReply) {
	if slices.Contains(v.server.opts.Masters, from) {
		for _, c := range m.Configs {
			if c.Epoch > v.local.configs[c.Volume].Epoch {
				v.local.configs[c.Volume] = c.Clone()
			}
		}
		if len(m.Configs) > 0 {
			v.local.wanted = false
		}
		return
	}
	for _, st := range v.sites {
		if st.ID == v.own || !slices.Contains(st.Masters, from) {
			continue
		}
		if m.Cluster != v.cluster {
			v.server.refuse(fmt.Sprintf("ignored the configurations of %s, a master of site %d of deployment %q: this is %q", from, st.ID, m.Cluster, v.cluster))
			return
		}
		rs := v.site(st.ID)
		for _, c := range m.Configs {
			v.Learn(st.ID, c)
		}
		if len(m.Keyspaces) >= len(rs.keyspaces) {
			rs.keyspaces = slices.Clone(m.Keyspaces)
			for name := range rs.doubts {
				rs.doubts[name] = true // (confirmed, or resolved: Lacking looks again)
			}
		}
		if len(m.Configs) > 0 {
			rs.wanted = false
		}
	}
}

// learnTable takes the master's table of stable updates.
func (v *siteView) learnTable(table []wire.VolumeVector) {
	for _, e := range table {
		v.stable[e.Volume] = v.stable[e.Volume].Merge(e.Vector)
	}
	v.tableGrew = true
}

// stepFromSites handles the messages of a deployment of several sites:
// other sites' shipments, control messages and requests for keys, their
// answers, and the answers of masters and tails to this server's own
// questions.
func (s *Server) stepFromSites(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	switch m := m.(type) {
	case *wire.Ship:
		r := s.replicas[m.Volume]
		if s.sites != nil && s.sites.cluster != "" && m.Cluster != s.sites.cluster {
			// A site of another deployment: apply nothing. (Before the
			// first heartbeat reply the deployment is unknown, and so is
			// the lease: ErrNotHead below.)
			s.refuse(fmt.Sprintf("refused %d updates shipped by %s, site %d of deployment %q: this is %q", len(m.Updates), from, m.Origin, m.Cluster, s.sites.cluster))
			return []wire.Envelope{{To: from, Msg: &wire.ShipAck{Volume: m.OriginVolume, Site: s.opts.Site, Err: wire.ErrWrongCluster, Origin: m.Origin}}}
		}
		if s.sites == nil || r == nil || !(s.HasLease(now) || mutation.Enabled && s.opts.Mutations.IgnoreLease) {
			return []wire.Envelope{{To: from, Msg: &wire.ShipAck{Volume: m.OriginVolume, Site: s.opts.Site, Err: wire.ErrNotHead, Origin: m.Origin}}}
		}
		return append(s.stepReplica(now, from, r, m), s.sites.sendWaits(now)...)
	case *wire.Control:
		// Another site's control message for the head of a hierarchical
		// volume, named by keyspace and index (internal/chain/hierarchical).
		if s.sites == nil {
			return nil
		}
		i := slices.IndexFunc(s.keyspaces, func(k wire.Keyspace) bool { return k.Name == m.Keyspace })
		if i < 0 || uint64(m.Domain) >= uint64(s.keyspaces[i].Volumes) || m.To != s.opts.Site {
			return nil
		}
		vol := s.keyspaces[i].FirstVolume + wire.VolumeID(m.Domain)
		if s.replicas[vol] == nil || !(s.HasLease(now) || mutation.Enabled && s.opts.Mutations.IgnoreLease) {
			// Not this server's volume (any more), or without a lease
			// (it serves nothing): the sender asks this site's masters.
			return []wire.Envelope{{To: from, Msg: &wire.Moved{Site: s.opts.Site, Config: wire.Config{Volume: vol}}}}
		}
		return s.toReplica(now, from, vol, m)
	case *wire.Fetch:
		// A returning site's request for this site's copies of keys
		// (internal/chain/hierarchical): of this deployment only, and served with a lease.
		r := s.replicas[m.Volume]
		if s.sites == nil || m.Cluster != s.sites.cluster {
			return nil
		}
		if r == nil || !(s.HasLease(now) || mutation.Enabled && s.opts.Mutations.IgnoreLease) {
			return []wire.Envelope{{To: from, Msg: &wire.Moved{Site: s.opts.Site, Config: wire.Config{Volume: m.Volume}}}}
		}
		return s.stepReplica(now, from, r, m)
	case *wire.Moved:
		if s.sites != nil && m.Site != s.opts.Site {
			s.sites.moved(m.Site, m.Config)
		}
		return nil
	case *wire.Fetched:
		return s.toReplica(now, from, m.Volume, m)
	case *wire.ShipAck:
		if m.Err == wire.ErrWrongCluster {
			s.refuse(fmt.Sprintf("%s, site %d, refused this site's shipment of volume %d: it belongs to another deployment than %q", from, m.Site, m.Volume, s.siteCluster()))
			return nil
		}
		return s.toReplica(now, from, m.Volume, m)
	case *wire.ConfigReply:
		if s.sites != nil {
			s.sites.learnReply(from, m)
		}
	case *wire.ClientReply:
		if s.sites != nil && s.sites.learnWaitReply(m) {
			return s.geoProgress(now)
		}
		if s.sites != nil {
			if v, ok := s.sites.relayed(m); ok {
				return s.toReplica(now, from, v, m) // another site's answer to a forwarded write
			}
		}
	}
	return nil
}

// geoProgress lets the geo heads sequence what the site's table of stable
// updates now allows, and sends the waits they start.
func (s *Server) geoProgress(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	if s.sites.tableGrew {
		s.sites.tableGrew = false
		for _, r := range s.ordered {
			if r.HasInbound() {
				out = append(out, r.GeoProgress()...)
				s.assertInvariants(r)
			}
		}
	}
	return append(out, s.sites.sendWaits(now)...)
}
