// Package placement maps keys to volumes and volumes to chains of
// servers (CR §5.2–5.4, and bidirectional chains from the BCR paper).
//
// A strategy decides where each volume's replicas go when the cluster is
// created, and where a shortened chain is extended after a failure:
//
//	ring           consistent hashing: a volume's replicas are t consecutive
//	               servers on a ring (CFS, PAST); recovery extends a chain
//	               with the next live server after its tail on the ring, at
//	               most t extensions at once cluster-wide
//	random         uniform random placement, balanced; recovery picks the
//	               least-loaded live server, as many in parallel as the
//	               per-server budget allows (the paper's rndpar)
//	random-seq     random placement, at most t recoveries at once (rndseq)
//	bidirectional  servers form replica groups of t; a group's volumes run
//	               its order forwards or backwards by volume, so both end
//	               servers head half of them (BCR); recovery as random
//	rotated        like bidirectional with all t rotations of the order:
//	               every server of a group heads 1/t of its volumes
//
// Initial places the volumes; the recovery policy (recovery.go) decides
// every later change of placement, for the master and for the fig7
// experiment alike.
package placement

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// Strategy names a placement strategy.
type Strategy string

// The strategies.
const (
	Ring          Strategy = "ring"
	Random        Strategy = "random"
	RandomSeq     Strategy = "random-seq"
	Bidirectional Strategy = "bidirectional"
	Rotated       Strategy = "rotated"
)

// Strategies lists every strategy.
var Strategies = []Strategy{Ring, Random, RandomSeq, Bidirectional, Rotated}

// Parse returns the strategy named s.
func Parse(s string) (Strategy, error) {
	if slices.Contains(Strategies, Strategy(s)) {
		return Strategy(s), nil
	}
	return "", fmt.Errorf("unknown placement %q (want one of %v)", s, Strategies)
}

// VolumeOf returns the volume a key belongs to, among volumes volumes.
func VolumeOf(key string, volumes int) wire.VolumeID {
	return wire.VolumeID(wire.KeyHash(key) % uint32(volumes))
}

// KeyspaceOf returns the keyspace a key belongs to: the one whose prefix
// the key starts with (prefixes of keyspaces do not overlap), else the
// default keyspace (prefix ""). ok is false when none matches.
func KeyspaceOf(keyspaces []wire.Keyspace, key string) (ks wire.Keyspace, ok bool) {
	for _, k := range keyspaces {
		if strings.HasPrefix(key, k.Prefix) && (!ok || len(k.Prefix) > len(ks.Prefix)) {
			ks, ok = k, true
		}
	}
	return ks, ok
}

// KeyspaceOfVolume returns the keyspace whose volumes include v.
func KeyspaceOfVolume(keyspaces []wire.Keyspace, v wire.VolumeID) (wire.Keyspace, bool) {
	for _, k := range keyspaces {
		if k.HasVolume(v) {
			return k, true
		}
	}
	return wire.Keyspace{}, false
}

// Route returns the volume a key belongs to: one of its keyspace's
// volumes, by hash.
func Route(keyspaces []wire.Keyspace, key string) (wire.VolumeID, bool) {
	ks, ok := KeyspaceOf(keyspaces, key)
	if !ok || ks.Volumes < 1 {
		return 0, false
	}
	return VolumeIn(ks, key), true
}

// VolumeIn returns the volume of keyspace ks that key belongs to, by
// hash: of the whole key, or in a keyspace with a partition depth d, of
// its path's first d segments, so every key under a prefix of d or more
// segments lies in one volume (ADR 16). REQUIRES: ks has a volume.
func VolumeIn(ks wire.Keyspace, key string) wire.VolumeID {
	if ks.PartitionDepth > 0 {
		key = PartitionKey(ks.Path(key), ks.PartitionDepth)
	}
	return ks.Volume(int(VolumeOf(key, ks.Volumes)))
}

// PartitionKey returns the part of path that chooses its volume at
// partition depth d: its first d segments (the whole path if it has no
// more).
func PartitionKey(path string, d int) string {
	end := 0
	for range d {
		i := strings.Index(path[end:], wire.PathSeparator)
		if i < 0 {
			return path
		}
		end += i + 1
	}
	return path[:end]
}

// Initial returns the chains of volumes volumes of t replicas over
// servers (t ≤ len(servers)), head first. Random strategies draw from rng.
func Initial(s Strategy, servers []wire.NodeID, volumes, t int, rng *rand.Rand) (map[wire.VolumeID][]wire.NodeID, error) {
	n := len(servers)
	if t < 1 || t > n || volumes < 1 {
		return nil, fmt.Errorf("placement: %d volumes of %d replicas over %d servers", volumes, t, n)
	}
	chains := map[wire.VolumeID][]wire.NodeID{}
	switch s {
	case Ring:
		// Volume v starts at the server its hash falls on; ring order is
		// the server list's order.
		for v := range volumes {
			start := int(hashOf(uint32(v)) % uint32(n))
			chain := make([]wire.NodeID, t)
			for i := range t {
				chain[i] = servers[(start+i)%n]
			}
			chains[wire.VolumeID(v)] = chain
		}
	case Random, RandomSeq:
		// Each volume takes t distinct servers, the least loaded first
		// (ties broken at random: the servers in a random order, stably
		// sorted by load), then shuffles them: uniform and balanced.
		load := make([]int, n)
		order := make([]int, n)
		for v := range volumes {
			for i := range order {
				order[i] = i
			}
			rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
			// The first t of the stable sort by load, without sorting: the
			// least loaded servers in shuffled order, then the next load.
			picked := make([]int, 0, t)
			for level := slices.Min(load); len(picked) < t; level++ {
				for _, i := range order {
					if load[i] == level && len(picked) < t {
						picked = append(picked, i)
					}
				}
			}
			chain := make([]wire.NodeID, t)
			for k, i := range picked {
				chain[k] = servers[i]
				load[i]++
			}
			rng.Shuffle(t, func(i, j int) { chain[i], chain[j] = chain[j], chain[i] })
			chains[wire.VolumeID(v)] = chain
		}
	case Bidirectional, Rotated:
		// Servers form groups of t (the last group takes the remainder
		// servers' volumes too by wrapping); volumes go round the groups.
		groups := n / t
		for v := range volumes {
			g := v % groups
			group := servers[g*t : g*t+t]
			k := v / groups
			chain := slices.Clone(group)
			if s == Bidirectional {
				if k%2 == 1 {
					slices.Reverse(chain)
				}
			} else {
				r := k % t
				chain = append(slices.Clone(group[r:]), group[:r]...)
			}
			chains[wire.VolumeID(v)] = chain
		}
	default:
		return nil, fmt.Errorf("placement: unknown strategy %q", s)
	}
	return chains, nil
}

func hashOf(x uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)})
	return h.Sum32()
}
