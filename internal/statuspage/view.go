package statuspage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/release"
)

// volumesShownMax bounds the volumes the page lists one by one.
const volumesShownMax = 256

// view is what the page template renders.
type view struct {
	Self           string
	Generated      string
	RefreshSeconds int
	Error          string

	Leader  string
	Masters []masterRow
	// ClusterVersion is the protocol version the cluster runs at
	// (docs/upgrades.md).
	ClusterVersion uint32
	Keyspaces      []keyspaceRow
	// Throughput is the cluster's committed updates per second, or ""
	// while there is no earlier sample to compare with.
	Throughput string
	Servers    []serverRow
	Volumes    []volumeRow
	// VolumesHidden counts the volumes beyond volumesShownMax.
	VolumesHidden    int
	Reconfigurations []reconfigurationRow
	// Sites are the deployment's sites (none with one site), Shipping
	// each geo volume's shipping lag to each other site (at most
	// volumesShownMax rows; ShippingHidden counts the others).
	Sites          []siteRow
	Shipping       []client.ShippingLag
	ShippingHidden int
	// Control is which site controls which keys and prefixes of the
	// hierarchical keyspaces (at most volumesShownMax rows;
	// ControlHidden counts the others).
	Control       []controlRow
	ControlHidden int
}

// controlRow is a key or prefix a site controls.
type controlRow struct {
	Path, Keyspace, Site, Scope string
}

// siteRow is one site of the deployment.
type siteRow struct {
	ID      uint32
	Name    string
	Masters string
	// Self: the site of the master serving the page.
	Self bool
}

type masterRow struct {
	Addr         string
	Leader, Self bool
}

// keyspaceRow is one keyspace.
type keyspaceRow struct {
	Name, Prefix, Mode string
	Replicas           int
	// Volumes describes its volumes ("64 (volumes 0–63)").
	Volumes string
}

type serverRow struct {
	Addr        string
	Alive       bool
	Incarnation uint64
	// Protocol is the protocol versions it speaks ("1", "1-2"; "?"
	// before the master heard it say).
	Protocol                             string
	Heads, Middles, Tails, Joining, Sole int
}

type volumeRow struct {
	Volume   uint32
	Keyspace string
	Epoch    uint64
	Replicas []replicaRow
	// Rate is the volume's committed updates per second ("" unknown).
	Rate string
	// Watches is how many watches its members hold, as last reported.
	Watches uint64
}

// replicaRow is one server's replica of a volume, as it last reported.
type replicaRow struct {
	Addr, Role string
	// Epoch and Applied are as reported; Reported is false if the
	// server has not reported the volume.
	Epoch, Applied uint64
	Reported       bool
	// Lag is how many updates the replica has applied fewer than the
	// chain's head, as last reported.
	Lag uint64
	// Watches is how many watches it holds, as last reported.
	Watches uint64
	// Health is "ok", or what is wrong; Class is its style: ok, warn, bad.
	Health, Class string
}

type reconfigurationRow struct {
	Ago, Kind, Chain, Joining, Removed string
	Volume                             uint32
	Epoch                              uint64
}

// keyspaces returns the cluster's keyspaces as the page lists them.
func keyspaces(st *client.ClusterStatus) []keyspaceRow {
	var out []keyspaceRow
	for _, ks := range st.Keyspaces {
		row := keyspaceRow{Name: ks.Name, Prefix: ks.Prefix, Mode: ks.Mode, Replicas: ks.Replicas}
		if ks.Mode == "causal" {
			row.Mode = fmt.Sprintf("causal, k=%d", ks.K)
		}
		if len(ks.Sites) > 0 {
			var ids []string
			for _, id := range ks.Sites {
				ids = append(ids, fmt.Sprint(id))
			}
			row.Mode += ", sites " + strings.Join(ids, ",")
		}
		switch {
		case ks.Volumes == 0:
			row.Volumes = "none"
		case ks.Volumes == 1:
			row.Volumes = fmt.Sprintf("1 (volume %d)", ks.FirstVolume)
		case len(ks.VolumeIDs) > 0:
			row.Volumes = fmt.Sprintf("%d (split %d times)", ks.Volumes, ks.Splits)
		default:
			row.Volumes = fmt.Sprintf("%d (volumes %d–%d)", ks.Volumes, ks.FirstVolume, ks.FirstVolume+uint32(ks.Volumes)-1)
		}
		out = append(out, row)
	}
	return out
}

// keyspaceOf returns the name of the keyspace volume v belongs to.
func keyspaceOf(st *client.ClusterStatus, v uint32) string {
	for _, ks := range st.Keyspaces {
		if ks.HasVolume(v) {
			return ks.Name
		}
	}
	return ""
}

// buildView lays out st for the page; rates holds the throughput
// measured from earlier samples.
func buildView(st *client.ClusterStatus, self string, rates throughput) *view {
	v := &view{Leader: st.Leader, Keyspaces: keyspaces(st), ClusterVersion: max(1, st.ClusterVersion)}
	for _, site := range st.Sites {
		v.Sites = append(v.Sites, siteRow{ID: site.ID, Name: site.Name, Masters: strings.Join(site.Masters, ", "), Self: site.ID == st.Site})
	}
	v.Shipping = st.Shipping[:min(len(st.Shipping), volumesShownMax)]
	v.ShippingHidden = len(st.Shipping) - len(v.Shipping)
	for _, c := range st.Control[:min(len(st.Control), volumesShownMax)] {
		row := controlRow{Path: c.Path, Keyspace: c.Keyspace, Site: fmt.Sprint(c.Site), Scope: "key"}
		for _, site := range st.Sites {
			if site.ID == c.Site {
				row.Site += " " + site.Name
			}
		}
		if c.Deep {
			row.Scope = "prefix"
		}
		v.Control = append(v.Control, row)
	}
	v.ControlHidden = len(st.Control) - len(v.Control)
	for _, m := range st.Masters {
		v.Masters = append(v.Masters, masterRow{Addr: m, Leader: m == st.Leader, Self: m == self})
	}
	if rates.known {
		v.Throughput = fmt.Sprintf("%.1f", rates.total)
	}
	servers := map[string]client.ServerStatus{}
	for _, s := range st.Servers {
		servers[s.Addr] = s
	}
	roles := map[string]*serverRow{}
	for _, s := range st.Servers {
		roles[s.Addr] = &serverRow{Addr: s.Addr, Alive: s.Alive, Incarnation: s.Incarnation, Protocol: "?"}
		if s.MaxProtocol > 0 {
			roles[s.Addr].Protocol = release.Range{Min: s.MinProtocol, Max: s.MaxProtocol}.String()
		}
	}
	for i, cfg := range st.Volumes {
		members := slices.Clone(cfg.Chain)
		if cfg.Joining != "" {
			members = append(members, cfg.Joining)
		}
		for _, id := range members {
			row := roles[id]
			if row == nil {
				continue
			}
			switch cfg.Role(id) {
			case "head":
				row.Heads++
			case "middle":
				row.Middles++
			case "tail":
				row.Tails++
			case "head+tail":
				row.Sole++
			case "joining":
				row.Joining++
			}
		}
		if i >= volumesShownMax {
			v.VolumesHidden++
			continue
		}
		vr := volumeRow{Volume: cfg.Volume, Keyspace: keyspaceOf(st, cfg.Volume), Epoch: cfg.Epoch}
		if r, ok := rates.volumes[cfg.Volume]; ok {
			vr.Rate = fmt.Sprintf("%.1f", r)
		}
		var headApplied uint64
		if len(cfg.Chain) > 0 {
			if rep, ok := reported(servers[cfg.Chain[0]], cfg.Volume); ok {
				headApplied = rep.Applied
			}
		}
		for _, id := range members {
			row := replicaOf(cfg, servers[id], id, headApplied)
			vr.Replicas = append(vr.Replicas, row)
			vr.Watches += row.Watches
		}
		v.Volumes = append(v.Volumes, vr)
	}
	for _, s := range st.Servers {
		v.Servers = append(v.Servers, *roles[s.Addr])
	}
	return v
}

// reported returns what server last reported of volume.
func reported(s client.ServerStatus, volume uint32) (client.ReplicaStatus, bool) {
	for _, r := range s.Volumes {
		if r.Volume == volume {
			return r, true
		}
	}
	return client.ReplicaStatus{}, false
}

// replicaOf describes server id's replica in cfg; headApplied is what the
// chain's head last reported applying.
func replicaOf(cfg client.VolumeConfig, s client.ServerStatus, id string, headApplied uint64) replicaRow {
	row := replicaRow{Addr: id, Role: cfg.Role(id), Health: "ok", Class: "ok"}
	rep, ok := reported(s, cfg.Volume)
	if ok {
		row.Reported, row.Epoch, row.Applied, row.Watches = true, rep.Epoch, rep.Applied, rep.Watches
		if headApplied > rep.Applied {
			row.Lag = headApplied - rep.Applied
		}
	}
	switch {
	case s.Addr == "" || !s.Alive:
		row.Health, row.Class = "down", "bad"
	case !ok:
		row.Health, row.Class = "no report", "warn"
	case rep.Epoch < cfg.Epoch:
		row.Health, row.Class = fmt.Sprintf("at epoch %d", rep.Epoch), "warn"
	case row.Role == "joining":
		row.Health, row.Class = "catching up", "warn"
	}
	return row
}

func reconfigurationRows(rs []metrics.Reconfiguration, now time.Time) []reconfigurationRow {
	var out []reconfigurationRow
	for _, r := range rs {
		row := reconfigurationRow{
			Ago: now.Sub(r.At).Round(time.Second).String() + " ago", Kind: r.Kind,
			Volume: r.Volume, Epoch: r.Epoch, Joining: r.Joining,
		}
		row.Chain = joinArrow(r.Chain)
		for i, id := range r.Removed {
			if i > 0 {
				row.Removed += ", "
			}
			row.Removed += id
		}
		out = append(out, row)
	}
	return out
}

func joinArrow(ids []string) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += " → "
		}
		s += id
	}
	return s
}
