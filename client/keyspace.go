package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Keyspace is a named key prefix with its own volumes, chain length and
// mode. Keys starting with Prefix belong to it; keys no keyspace's
// prefix matches belong to the default keyspace (prefix "").
type Keyspace struct {
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
	// Mode is "strong" (chain replication: linearizable), "causal"
	// (ChainReaction: causal+, writes answered after the first K
	// replicas, reads from any replica the client may safely use) or
	// "hierarchical" (single-copy semantics across sites: a site elected
	// primary for a key or a key prefix orders its writes, the NFSv4
	// paper's replication control; docs/adr/0016).
	Mode string `json:"mode"`
	// K is the causal mode's k (1 ≤ K ≤ Replicas); 0 in strong mode.
	K int `json:"k"`
	// Replicas is the chain length t.
	Replicas int `json:"replicas"`
	// Volumes is the number of volumes (chains) the keyspace's keys hash
	// to; FirstVolume is the first of them (the master chooses it).
	// Once the keyspace was split (SplitKeyspace), Splits counts the
	// splits and VolumeIDs lists its volumes (VolumeList).
	Volumes     int      `json:"volumes"`
	FirstVolume uint32   `json:"first_volume"`
	Splits      int      `json:"splits,omitempty"`
	VolumeIDs   []uint32 `json:"volume_ids,omitempty"`
	// Sites lists the sites that replicate the keyspace, in increasing
	// order (empty: this site only); several need mode causal or
	// hierarchical (docs/adr/0013-sites-and-geo-causal.md).
	Sites []uint32 `json:"sites,omitempty"`
	// PartitionDepth, Relaxed and Idle are a hierarchical keyspace's: a
	// key's volume is chosen by its first PartitionDepth path segments
	// ('/' separates them; 0: 1), so deep control is for prefixes of at
	// least that many; Relaxed answers a write once its primary site
	// holds it (the paper's) instead of a majority of the sites; a site
	// gives up control after Idle without writes (0: 1 s).
	PartitionDepth int           `json:"partition_depth,omitempty"`
	Relaxed        bool          `json:"relaxed,omitempty"`
	Idle           time.Duration `json:"idle,omitempty"`
	// GraceGeneration and GraceSites are a hierarchical keyspace's last
	// view forced by an operator at this site (ForceView): how many were
	// forced, and the last one's sites; ReassignGeneration and
	// ReassignSites its last reassignment (Reassign). Set by the master
	// only.
	GraceGeneration    uint64   `json:"grace_generation,omitempty"`
	GraceSites         []uint32 `json:"grace_sites,omitempty"`
	ReassignGeneration uint64   `json:"reassign_generation,omitempty"`
	ReassignSites      []uint32 `json:"reassign_sites,omitempty"`
}

func keyspaceOf(k wire.Keyspace) Keyspace {
	return Keyspace{Name: k.Name, Prefix: k.Prefix, Mode: k.Mode.String(), K: k.K, Replicas: k.ReplicationFactor,
		Volumes: k.Volumes, FirstVolume: uint32(k.FirstVolume), Splits: k.Splits, Sites: siteIDsOf(k.Sites),
		PartitionDepth: k.PartitionDepth, Relaxed: k.Relaxed, Idle: time.Duration(k.Idle),
		GraceGeneration: k.Grace.Generation, GraceSites: siteIDsOf(k.Grace.Sites),
		ReassignGeneration: k.Reassign.Generation, ReassignSites: siteIDsOf(k.Reassign.Sites), VolumeIDs: volumeIDsOf(k.VolumeIDs)}
}

func volumeIDsOf(ids []wire.VolumeID) []uint32 {
	var out []uint32
	for _, id := range ids {
		out = append(out, uint32(id))
	}
	return out
}

// VolumeList returns the keyspace's volumes: FirstVolume and those
// after it, or VolumeIDs once the keyspace was split.
func (k Keyspace) VolumeList() []uint32 {
	if k.VolumeIDs != nil {
		return slices.Clone(k.VolumeIDs)
	}
	out := make([]uint32, k.Volumes)
	for i := range out {
		out[i] = k.FirstVolume + uint32(i)
	}
	return out
}

// HasVolume reports whether volume v is one of the keyspace's.
func (k Keyspace) HasVolume(v uint32) bool { return slices.Contains(k.VolumeList(), v) }

func siteIDsOf(ids []wire.SiteID) []uint32 {
	var out []uint32
	for _, id := range ids {
		out = append(out, uint32(id))
	}
	return out
}

func keyspacesOf(ks []wire.Keyspace) []Keyspace {
	var out []Keyspace
	for _, k := range ks {
		out = append(out, keyspaceOf(k))
	}
	return out
}

// ErrRefused wraps the master's reason for refusing a request (a keyspace
// that overlaps another, k > t, ...). Nothing changed.
var ErrRefused = errors.New("refused by the master")

// CreateKeyspace asks the master to create a keyspace and returns every
// keyspace once it exists. Creating one that exists with the same
// settings succeeds (a retry); one whose name, prefix or settings
// conflict is refused with ErrRefused and the reason.
func (c *Client) CreateKeyspace(ctx context.Context, k Keyspace) ([]Keyspace, error) {
	mode, err := wire.ParseMode(k.Mode)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if mode == wire.ModeHierarchical && k.PartitionDepth == 0 {
		k.PartitionDepth = 1
	}
	req := &wire.KeyspaceRequest{Create: wire.Keyspace{Name: k.Name, Prefix: k.Prefix, Mode: mode, K: k.K,
		ReplicationFactor: k.Replicas, Volumes: k.Volumes, PartitionDepth: k.PartitionDepth, Relaxed: k.Relaxed, Idle: wire.Time(k.Idle)}}
	for _, id := range k.Sites {
		req.Create.Sites = append(req.Create.Sites, wire.SiteID(id))
	}
	return c.askKeyspaces(ctx, req)
}

// askKeyspaces sends a keyspace request to the masters and returns every
// keyspace from the leader's answer, or its refusal as ErrRefused.
func (c *Client) askKeyspaces(ctx context.Context, req *wire.KeyspaceRequest) ([]Keyspace, error) {
	var out []Keyspace
	err := askMasters(ctx, c, req, &c.keyspaceWaiters, "no master leader answered", func(r keyspaceFrom) (bool, error) {
		if r.reply.Err != "" {
			return true, fmt.Errorf("%w: %s", ErrRefused, r.reply.Err)
		}
		c.withCore(func(now wire.Time) { c.core.RequestConfig(now) })
		out = keyspacesOf(r.reply.Keyspaces)
		return true, nil
	}, nil)
	return out, err
}

// ForceView forces the active view of the hierarchical keyspace name to
// sites (this site and a majority of the keyspace's sites among them),
// without the majority a view change needs: the operator's grace period
// of NFSv4 §2.3, after a majority of the sites failed at once and no
// view change can complete. The heads of the keyspace's volumes at the
// master's site adopt it and send it to the other sites. Only an admin
// may; the sites left out must be resynchronised before they rejoin
// (docs/operations.md). It returns every keyspace once the master holds
// the request; a concurrent ForceView of the same keyspace makes it
// ErrRefused (look again and retry).
func (c *Client) ForceView(ctx context.Context, name string, sites []uint32) ([]Keyspace, error) {
	return c.override(ctx, name, false, sites)
}

// Reassign gives up, at the master's site, the writes that only the
// given sites of the relaxed hierarchical keyspace name hold, sites
// outside the active view (failed): this site takes their keys over once
// it holds as many of their updates as the other sites do, and they give
// up those writes when they return (NFSv4 §2.3: the administrator
// re-configures the system). Run it at every other site of the view.
// Only an admin may; errors as ForceView.
func (c *Client) Reassign(ctx context.Context, name string, sites []uint32) ([]Keyspace, error) {
	return c.override(ctx, name, true, sites)
}

// override asks the master for the keyspace's next override of a kind.
func (c *Client) override(ctx context.Context, name string, reassign bool, sites []uint32) ([]Keyspace, error) {
	i := slices.IndexFunc(c.Keyspaces(), func(k Keyspace) bool { return k.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: no keyspace %q", ErrInvalid, name)
	}
	k := c.Keyspaces()[i]
	o := wire.OverrideRequest{Keyspace: name, Reassign: reassign, Override: wire.Override{Generation: k.GraceGeneration + 1}}
	if reassign {
		o.Override.Generation = k.ReassignGeneration + 1
	}
	for _, id := range slices.Sorted(slices.Values(sites)) {
		o.Override.Sites = append(o.Override.Sites, wire.SiteID(id))
	}
	return c.askKeyspaces(ctx, &wire.KeyspaceRequest{Override: &o})
}

// SplitKeyspace doubles the volumes of keyspace name while it serves
// (docs/adr/0031): each volume hands half of its keys to a new volume,
// which starts on the same servers once every member of the volume's
// chain has split its copy, and the placement policy then spreads the
// new volumes over the servers. splits is how many times the keyspace
// was split before (Keyspace.Splits, as the caller saw it): asking
// again after the split applied splits nothing more, and a keyspace
// split since is refused (ErrRefused). Only an admin may; only strong
// keyspaces of one site split. It returns the keyspace once the split
// began; the new volumes serve soon after (SplitDone tells).
func (c *Client) SplitKeyspace(ctx context.Context, name string, splits int) (Keyspace, error) {
	all, err := c.askKeyspaces(ctx, &wire.KeyspaceRequest{Split: name, Create: wire.Keyspace{Splits: splits}})
	if err != nil {
		return Keyspace{}, err
	}
	for _, k := range all {
		if k.Name == name {
			return k, nil
		}
	}
	return Keyspace{}, fmt.Errorf("%w: the master's answer lacks keyspace %q", ErrRefused, name)
}

// SplitDone reports, from a cluster status, how many of keyspace k's
// volumes have a chain: all of them once its last split finished.
func SplitDone(st *ClusterStatus, k Keyspace) (started, volumes int) {
	chains := map[uint32]bool{}
	for _, v := range st.Volumes {
		chains[v.Volume] = len(v.Chain) > 0
	}
	for _, v := range k.VolumeList() {
		if chains[v] {
			started++
		}
	}
	return started, k.Volumes
}

// Keyspaces returns the keyspaces the client routes by (the default one
// first), as the master last told it.
func (c *Client) Keyspaces() []Keyspace {
	c.mu.Lock()
	defer c.mu.Unlock()
	return keyspacesOf(c.core.Keyspaces())
}

type keyspaceFrom struct {
	from  wire.NodeID
	reply *wire.KeyspaceReply
}

// MetadataSize is how many per-key metadata entries the client's causal
// session holds: for each key of a causal keyspace whose newest version
// it read or wrote is not yet known stable, the version and the chain
// position known to hold it (ChainReaction's client metadata). Reads of
// the key go only to members that hold that version, and the client's
// next write waits until every such version is stable. Strong keyspaces
// leave it empty.
type MetadataSize struct {
	// Entries is the number held now; Peak the most held at once since
	// the client was dialled or ResetCausalMetadataPeak last ran.
	Entries int `json:"entries"`
	Peak    int `json:"peak"`
}

// CausalMetadata returns the size of the client's causal metadata.
func (c *Client) CausalMetadata() MetadataSize {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.core.MetadataSize()
	return MetadataSize{Entries: m.Entries, Peak: m.Peak}
}

// ResetCausalMetadataPeak makes CausalMetadata's peak start again from
// the current size.
func (c *Client) ResetCausalMetadataPeak() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.core.ResetMetadataPeak()
}
