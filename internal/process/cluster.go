package process

import (
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"strings"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// ClusterSpec is how a master creates its cluster, or checks that it
// resumes the one it saved: the settings `catena master`'s creating
// flags give (-servers, -replicas, -volumes, -placement, -default-k,
// -site, -sites, -default-sites, -cluster), whose names the errors use.
type ClusterSpec struct {
	// Given holds the settings given; a zero field is not given. A
	// master that saved settings resumes with them, and any given must
	// equal them; one that saved none creates the cluster from them and
	// needs Servers.
	Given master.Settings
	// Volumes, Replicas and Placement create the cluster (the flags'
	// values, defaults included): Replicas 0 means every server, at most
	// 3 with more than one volume.
	Volumes, Replicas int
	Placement         placement.Strategy
}

// settingFlags names the flag of each master.Settings field.
var settingFlags = map[string]string{"ReplicationFactor": "-replicas", "Placement": "-placement", "Servers": "-servers", "Volumes": "-volumes",
	"DefaultK": "-default-k", "Site": "-site", "Sites": "-sites", "DefaultSites": "-default-sites", "Cluster": "-cluster"}

// Complete fills opts for a master whose state holds the settings saved
// (zero: none, a new cluster or state saved by an older catena). With
// saved settings the master resumes with them, and the settings given
// must agree; without, the spec describes the cluster and Given.Servers
// is required.
func (c ClusterSpec) Complete(opts *master.Options, saved master.Settings) error {
	given := c.Given
	if given.Cluster != "" && len(given.Sites) == 0 && saved.IsZero() {
		return errors.New("-cluster needs -sites: it names a deployment of several sites")
	}
	if !saved.IsZero() {
		var contradictions []string
		for _, c := range saved.Contradictions(given) {
			contradictions = append(contradictions, fmt.Sprintf("%s %s (saved: %s)", settingFlags[c.Setting], c.Given, c.Saved))
		}
		if len(contradictions) > 0 {
			return fmt.Errorf("flags contradict the cluster's saved settings, which are fixed when it is created (leave them out on a restart): %s", strings.Join(contradictions, "; "))
		}
		return nil
	}
	if len(given.Servers) == 0 {
		return errors.New("-servers is required when no cluster settings are saved yet (a new cluster; or state saved by an older catena: give the flags it was created with, once)")
	}
	opts.Settings = master.Settings{Servers: given.Servers, DefaultK: given.DefaultK, Site: given.Site, Sites: given.Sites, DefaultSites: given.DefaultSites,
		Cluster: given.Cluster}
	if opts.Settings.Cluster == "" && len(given.Sites) > 0 {
		opts.Settings.Cluster = master.DefaultCluster(given.Sites)
	}
	opts.Placement = c.Placement
	return initialChains(opts, c.Volumes, c.Replicas)
}

// initialChains places the volumes on the servers. The placement draws
// from a generator seeded by the server list, so every member of a
// replicated master computes the same chains.
func initialChains(o *master.Options, volumes, replicas int) error {
	if volumes < 1 {
		return errors.New("-volumes must be at least 1")
	}
	if replicas == 0 {
		replicas = len(o.Servers)
		if volumes > 1 {
			replicas = min(replicas, 3)
		}
	}
	o.ReplicationFactor = replicas
	o.Volumes = volumes
	if volumes == 1 && (o.Placement == placement.Random || o.Placement == placement.RandomSeq) {
		if replicas > len(o.Servers) {
			return fmt.Errorf("-replicas %d exceeds the %d servers", replicas, len(o.Servers))
		}
		o.Chains = map[wire.VolumeID][]wire.NodeID{0: o.Servers[:replicas]}
		return nil
	}
	h := fnv.New64a()
	for _, s := range o.Servers {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	seed := h.Sum64()
	chains, err := placement.Initial(o.Placement, o.Servers, volumes, replicas, mrand.New(mrand.NewPCG(seed, uint64(volumes))))
	if err != nil {
		return err
	}
	o.Chains = chains
	return nil
}
