package client

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// ClusterStatus is a master's view of the cluster (catena status; its
// JSON, with the field names of the tags, is what catena status --json
// prints and the master's /status.json serves).
type ClusterStatus struct {
	// Masters lists the master's members; Leader is the one that leads,
	// as the answering member believes ("" if none).
	Masters []string `json:"masters"`
	Leader  string   `json:"leader"`
	// ClusterVersion is the protocol version the cluster runs at
	// (docs/upgrades.md).
	ClusterVersion uint32 `json:"cluster_version,omitempty"`
	// Volumes holds every volume's configuration, by volume.
	Volumes []VolumeConfig `json:"volumes"`
	// Servers holds what the master knows of each server.
	Servers []ServerStatus `json:"servers"`
	// Keyspaces holds every keyspace, the default one first.
	Keyspaces []Keyspace `json:"keyspaces"`
	// Site is this cluster's site and Sites the deployment's, in a
	// deployment of several sites (0 and empty: one site).
	Site  uint32 `json:"site,omitempty"`
	Sites []Site `json:"sites,omitempty"`
	// Deployment is the name the sites of one deployment share (empty:
	// one site); a site refuses shipments from another deployment.
	Deployment string `json:"deployment,omitempty"`
	// Shipping is, per volume replicated by several sites and per other
	// site, how far shipping this site's updates there has got, as the
	// volume's tail reports it.
	Shipping []ShippingLag `json:"shipping,omitempty"`
	// Control is, per volume of a hierarchical keyspace, the keys and
	// prefixes a site controls (its elected primary), as the volume's
	// head reports them (at most 16 per volume).
	Control []PathControl `json:"control,omitempty"`
}

// PathControl says that a site controls a key, or (Deep) every key under
// a prefix, of a hierarchical keyspace: the other sites forward its
// reads and writes there until it releases control.
type PathControl struct {
	Keyspace string `json:"keyspace"`
	Volume   uint32 `json:"volume"`
	Path     string `json:"path"`
	Site     uint32 `json:"site"`
	Deep     bool   `json:"deep,omitempty"`
}

// Site is one site of a deployment of several: a whole Catena cluster.
type Site struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	// Masters are the site's master members' addresses.
	Masters []string `json:"masters"`
}

// ShippingLag is how far one volume's tail has shipped this site's
// updates to one other site.
type ShippingLag struct {
	Volume uint32 `json:"volume"`
	// To is the other site.
	To uint32 `json:"to"`
	// Originated counts this site's updates of the volume the tail holds
	// (all stable here); Shipped how many of them site To holds stable,
	// as its head last answered; Lag is the difference: updates site To
	// does not hold stable yet.
	Originated uint64 `json:"originated"`
	Shipped    uint64 `json:"shipped"`
	Lag        uint64 `json:"lag"`
	// AgeSeconds is how long ago the oldest update site To does not
	// hold stable was written (0: it holds them all), as the tail last
	// reported: the lag in time.
	AgeSeconds float64 `json:"age_seconds"`
}

// SiteCount is one site's entry in a version vector.
type SiteCount struct {
	Site uint32 `json:"site"`
	N    uint64 `json:"n"`
}

// VolumeConfig is one volume's chain.
type VolumeConfig struct {
	Volume uint32 `json:"volume"`
	// Epoch numbers the volume's configurations; it grows on every change.
	Epoch uint64 `json:"epoch"`
	// Chain lists the members from head to tail.
	Chain []string `json:"chain"`
	// Joining is a server being added at the tail ("" if none).
	Joining string `json:"joining"`
	// Sites lists the sites with a sibling chain of the volume (empty:
	// this site only).
	Sites []uint32 `json:"sites,omitempty"`
}

// Role returns what server is in the volume's chain: "head", "middle",
// "tail", "head+tail" (a chain of one), "joining", or "" if none.
func (v VolumeConfig) Role(server string) string {
	i := slices.Index(v.Chain, server)
	switch {
	case server == "":
		return ""
	case v.Joining == server:
		return "joining"
	case i < 0:
		return ""
	case len(v.Chain) == 1:
		return "head+tail"
	case i == 0:
		return "head"
	case i == len(v.Chain)-1:
		return "tail"
	}
	return "middle"
}

// ServerStatus is the master's view of one server.
type ServerStatus struct {
	Addr  string `json:"addr"`
	Alive bool   `json:"alive"`
	// Incarnation counts the server's process starts.
	Incarnation uint64 `json:"incarnation"`
	// Volumes is what the server last reported of each volume it holds.
	Volumes []ReplicaStatus `json:"volumes"`
	// MinProtocol and MaxProtocol bound the protocol versions the
	// server said it speaks (0: not heard).
	MinProtocol uint32 `json:"min_protocol,omitempty"`
	MaxProtocol uint32 `json:"max_protocol,omitempty"`
}

// ReplicaStatus is one server's replica of one volume, as last reported.
type ReplicaStatus struct {
	Volume uint32 `json:"volume"`
	Epoch  uint64 `json:"epoch"`
	// Applied is the sequence number of the last update the replica
	// applied; Committed the highest it knows the tail processed.
	Applied   uint64 `json:"applied"`
	Committed uint64 `json:"committed"`
	// Stable is, in a volume of several sites, how many updates of each
	// origin site the replica knows stable here (its version vector).
	Stable []SiteCount `json:"stable,omitempty"`
	// Shipped is, at the tail of such a volume, how many of this site's
	// updates each other site holds stable.
	Shipped []SiteCount `json:"shipped,omitempty"`
	// Watches is how many watches (Client.Watch's long polls) the
	// replica held when it last reported.
	Watches uint64 `json:"watches,omitempty"`
}

// Ready reports whether the status shows each of servers alive and every
// chain member running its volume's configuration (reporting the volume's
// epoch), or else what is missing, for a person to read. catena dev waits
// for it before announcing a cluster. A server still joining a chain
// does not make the status unready: check VolumeConfig.Joining for that.
func (s *ClusterStatus) Ready(servers []string) (bool, string) {
	if len(s.Volumes) == 0 {
		return false, "no configuration"
	}
	epochs := map[string]map[uint32]uint64{}
	for _, srv := range s.Servers {
		if !srv.Alive {
			continue
		}
		epochs[srv.Addr] = map[uint32]uint64{}
		for _, v := range srv.Volumes {
			epochs[srv.Addr][v.Volume] = v.Epoch
		}
	}
	var silent []string
	for _, addr := range servers {
		if epochs[addr] == nil {
			silent = append(silent, addr)
		}
	}
	if len(silent) > 0 {
		return false, "the master has not heard from " + strings.Join(silent, ", ")
	}
	for _, c := range s.Volumes {
		for _, id := range c.Chain {
			if epochs[id][c.Volume] != c.Epoch {
				return false, fmt.Sprintf("%s does not run volume %d's configuration (epoch %d) yet", id, c.Volume, c.Epoch)
			}
		}
	}
	return true, ""
}

// Quiet says why the keyspace called name is not quiet in the status, or
// "" if it is: every member of each of its chains has applied and
// committed the same updates (none is in flight), and in a keyspace of
// several sites, each volume's tail reports every other site holding
// every update of this site stable (no shipping lag). When every site of
// a keyspace is quiet, the sites hold the same updates: final reads
// anywhere return the same values. Tests and fault harnesses wait for it.
func (s *ClusterStatus) Quiet(name string) string {
	var ks *Keyspace
	for i := range s.Keyspaces {
		if s.Keyspaces[i].Name == name {
			ks = &s.Keyspaces[i]
		}
	}
	if ks == nil {
		return fmt.Sprintf("no keyspace %q", name)
	}
	reported := map[string]map[uint32]ReplicaStatus{}
	for _, srv := range s.Servers {
		reported[srv.Addr] = map[uint32]ReplicaStatus{}
		for _, v := range srv.Volumes {
			reported[srv.Addr][v.Volume] = v
		}
	}
	for _, v := range s.Volumes {
		if !ks.HasVolume(v.Volume) {
			continue
		}
		if len(v.Chain) == 0 {
			return fmt.Sprintf("volume %d has no chain", v.Volume)
		}
		applied := reported[v.Chain[0]][v.Volume].Applied
		for _, m := range v.Chain {
			if r := reported[m][v.Volume]; r.Applied != applied || r.Committed != applied {
				return fmt.Sprintf("volume %d: %s applied %d, committed %d; the head applied %d", v.Volume, m, r.Applied, r.Committed, applied)
			}
		}
		for _, to := range v.Sites {
			if to == s.Site {
				continue
			}
			i := slices.IndexFunc(s.Shipping, func(l ShippingLag) bool { return l.Volume == v.Volume && l.To == to })
			switch {
			case i < 0:
				return fmt.Sprintf("volume %d: no shipping report from its tail for site %d", v.Volume, to)
			case s.Shipping[i].Lag > 0:
				return fmt.Sprintf("volume %d: site %d holds %d of this site's %d updates stable", v.Volume, to, s.Shipping[i].Shipped, s.Shipping[i].Originated)
			}
		}
	}
	return ""
}

type statusFrom struct {
	from  wire.NodeID
	reply *wire.StatusReply
}

// Status returns the master's view of the cluster: the leader's, or if
// no leader answers within an attempt, any member's.
func (c *Client) Status(ctx context.Context) (*ClusterStatus, error) {
	var out, anyReply *wire.StatusReply
	err := askMasters(ctx, c, &wire.StatusRequest{}, &c.statusWaiters, "master did not answer", func(s statusFrom) (bool, error) {
		if s.reply.Leader == s.from {
			out = s.reply
			return true, nil
		}
		anyReply = s.reply
		return false, nil
	}, func() (bool, error) {
		out = anyReply
		return anyReply != nil, nil
	})
	if err != nil {
		return nil, err
	}
	return statusOf(out), nil
}

func statusOf(r *wire.StatusReply) *ClusterStatus {
	s := &ClusterStatus{Leader: string(r.Leader), Keyspaces: keyspacesOf(r.Keyspaces), Site: uint32(r.Site), Deployment: r.Cluster, ClusterVersion: r.ClusterVersion}
	for _, m := range r.Masters {
		s.Masters = append(s.Masters, string(m))
	}
	for _, st := range r.Sites {
		site := Site{ID: uint32(st.ID), Name: st.Name}
		for _, m := range st.Masters {
			site.Masters = append(site.Masters, string(m))
		}
		s.Sites = append(s.Sites, site)
	}
	for _, cfg := range r.Configs {
		v := VolumeConfig{Volume: uint32(cfg.Volume), Epoch: uint64(cfg.Epoch), Joining: string(cfg.Joining), Sites: siteIDsOf(cfg.Sites)}
		for _, id := range cfg.Chain {
			v.Chain = append(v.Chain, string(id))
		}
		s.Volumes = append(s.Volumes, v)
	}
	for _, srv := range r.Servers {
		st := ServerStatus{Addr: string(srv.ID), Alive: srv.Alive, Incarnation: srv.Incarnation, MinProtocol: srv.MinProtocol, MaxProtocol: srv.MaxProtocol}
		for _, vs := range srv.Volumes {
			st.Volumes = append(st.Volumes, ReplicaStatus{Volume: uint32(vs.Volume), Epoch: uint64(vs.Epoch), Applied: uint64(vs.AppliedSN), Committed: uint64(vs.CommittedSN),
				Stable: siteCountsOf(vs.Stable), Shipped: siteCountsOf(vs.Shipped), Watches: vs.Watches})
		}
		s.Servers = append(s.Servers, st)
	}
	s.Shipping = shippingOf(r)
	s.Control = controlOf(r)
	return s
}

// controlOf gathers what the head of each hierarchical volume reports
// of the sites controlling its keys (nothing while the head has not
// reported the current configuration).
func controlOf(r *wire.StatusReply) []PathControl {
	var out []PathControl
	for _, cfg := range r.Configs {
		if cfg.Mode != wire.ModeHierarchical {
			continue
		}
		name := ""
		for _, k := range r.Keyspaces {
			if k.HasVolume(cfg.Volume) {
				name = k.Name
			}
		}
		for _, srv := range r.Servers {
			if srv.ID != cfg.Head() || !srv.Alive {
				continue
			}
			for _, v := range srv.Volumes {
				if v.Volume != cfg.Volume || v.Epoch != cfg.Epoch {
					continue
				}
				for _, c := range v.Control {
					out = append(out, PathControl{Keyspace: name, Volume: uint32(cfg.Volume), Path: c.Path, Site: uint32(c.Site), Deep: c.Deep})
				}
			}
		}
	}
	return out
}

func siteCountsOf(v wire.Vector) []SiteCount {
	var out []SiteCount
	for _, e := range v {
		out = append(out, SiteCount{Site: uint32(e.Site), N: e.N})
	}
	return out
}

// shippingOf computes each geo volume's shipping lag to each other site
// from its tail's report (none while the tail has not reported the
// current configuration).
func shippingOf(r *wire.StatusReply) []ShippingLag {
	var out []ShippingLag
	for _, cfg := range r.Configs {
		if !cfg.Geo() || r.Site == 0 {
			continue
		}
		var tail *wire.VolumeStatus
		for i := range r.Servers {
			if r.Servers[i].ID != cfg.Tail() || !r.Servers[i].Alive {
				continue
			}
			for j := range r.Servers[i].Volumes {
				if v := &r.Servers[i].Volumes[j]; v.Volume == cfg.Volume && v.Epoch == cfg.Epoch {
					tail = v
				}
			}
		}
		if tail == nil {
			continue
		}
		originated := tail.Stable.Get(r.Site)
		for _, to := range cfg.Sites {
			if to == r.Site {
				continue
			}
			shipped := min(tail.Shipped.Get(to), originated)
			lag := ShippingLag{Volume: uint32(cfg.Volume), To: uint32(to), Originated: originated, Shipped: shipped, Lag: originated - shipped}
			for _, a := range tail.ShippingAge {
				if a.Site == to {
					lag.AgeSeconds = float64(a.Age) / float64(wire.Second)
				}
			}
			out = append(out, lag)
		}
	}
	return out
}
