package chain

import (
	"slices"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

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
	remote map[wire.SiteID]*remoteSite
	stable map[wire.VolumeID]wire.Vector
}

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
}

func newSiteView(s *Server, own wire.SiteID) *siteView {
	return &siteView{server: s, own: own, remote: map[wire.SiteID]*remoteSite{}, stable: map[wire.VolumeID]wire.Vector{}}
}

// Site implements SiteView.
func (v *siteView) Site() wire.SiteID { return v.own }

// StableCount implements SiteView: the master's table, or this server's
// own replica of the volume if it knows more.
func (v *siteView) StableCount(key string, site wire.SiteID) uint64 {
	vol, ok := placement.Route(v.server.keyspaces, key)
	if !ok {
		return 0
	}
	n := v.stable[vol].Get(site)
	if r := v.server.replicas[vol]; r != nil && r.geo() {
		n = max(n, r.StableCount(site))
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

// Route implements SiteView: the sibling of volume vol is the volume of
// the same index in the keyspace of the same name at the other site.
func (v *siteView) Route(site wire.SiteID, vol wire.VolumeID) (wire.NodeID, wire.VolumeID, bool) {
	rs := v.site(site)
	i := slices.IndexFunc(v.server.keyspaces, func(k wire.Keyspace) bool { return k.HasVolume(vol) })
	j := -1
	if i >= 0 {
		j = slices.IndexFunc(rs.keyspaces, func(k wire.Keyspace) bool { return k.Name == v.server.keyspaces[i].Name })
	}
	if j < 0 || rs.keyspaces[j].Volumes != v.server.keyspaces[i].Volumes {
		rs.wanted = true
		return "", 0, false
	}
	sibling := rs.keyspaces[j].FirstVolume + (vol - v.server.keyspaces[i].FirstVolume)
	head := rs.configs[sibling].Head()
	if head == "" {
		rs.wanted = true
		return "", 0, false
	}
	return head, sibling, true
}

// Learn implements SiteView.
func (v *siteView) Learn(site wire.SiteID, c wire.Config) {
	rs := v.site(site)
	if c.Epoch > rs.configs[c.Volume].Epoch {
		rs.configs[c.Volume] = c.Clone()
	}
}

// Refresh implements SiteView.
func (v *siteView) Refresh(site wire.SiteID) { v.site(site).wanted = true }

// tick asks the masters of the sites whose configurations are wanted.
func (v *siteView) tick(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for _, st := range v.sites {
		rs := v.remote[st.ID]
		if st.ID == v.own || rs == nil || !rs.wanted || len(st.Masters) == 0 || now-rs.askedAt < siteRefreshInterval {
			continue
		}
		rs.askedAt = now
		out = append(out, wire.Envelope{To: st.Masters[rs.next%len(st.Masters)], Msg: &wire.ConfigRequest{}})
		rs.next++
	}
	return out
}

// learnReply takes another site's master's answer.
func (v *siteView) learnReply(from wire.NodeID, m *wire.ConfigReply) {
	for _, st := range v.sites {
		if st.ID == v.own || !slices.Contains(st.Masters, from) {
			continue
		}
		rs := v.site(st.ID)
		for _, c := range m.Configs {
			v.Learn(st.ID, c)
		}
		if len(m.Keyspaces) >= len(rs.keyspaces) {
			rs.keyspaces = slices.Clone(m.Keyspaces)
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
}
