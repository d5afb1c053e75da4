package wire

import (
	"cmp"
	"fmt"
	"slices"
)

// Sites: a site is a whole Catena cluster (its masters, servers and
// chains); a keyspace may be replicated by several, each with a sibling
// chain per volume, in ChainReaction's geo mode
// (docs/adr/0013-sites-and-geo-causal.md).

// SiteID identifies a site among the sites of a deployment; 0 is no site
// (a deployment of one site). Larger ids win ties.
type SiteID uint32

// Site is one site of a deployment, as the master's state holds it.
type Site struct {
	ID   SiteID
	Name string
	// Masters are the site's master members: another site asks them for
	// the site's configurations.
	Masters []NodeID
}

// Stamp identifies a version of an object across sites: the site whose
// head first applied the update (Origin), its number among that site's
// updates of the volume (N, from 1), and its hybrid timestamp (TS), which
// exceeds the timestamp of every version in the update's causal past.
// Concurrent versions of an object are ordered by (TS, Origin): a total
// order that extends causality whatever the clocks' skew (NOTES A3.10),
// and the version that comes last wins (last writer wins).
type Stamp struct {
	Origin SiteID
	N      uint64
	TS     uint64
}

// IsZero reports whether s names no version (single-site keyspaces).
func (s Stamp) IsZero() bool { return s == Stamp{} }

// After reports whether s wins over o in last-writer-wins order.
func (s Stamp) After(o Stamp) bool {
	if s.TS != o.TS {
		return s.TS > o.TS
	}
	return s.Origin > o.Origin
}

func (s Stamp) String() string { return fmt.Sprintf("s%d#%d@%d", s.Origin, s.N, s.TS) }

// Dep names a version an update depends on: the N-th update site Origin
// originated in the volume Key belongs to. Keys, not volume ids, name
// the volume, since sites number their volumes independently. It is
// satisfied at a site once that volume's chain there has N of Origin's
// updates stable (FIFO per origin makes one number enough).
type Dep struct {
	Key    string
	Origin SiteID
	N      uint64
}

// SiteTime is a duration per site (VolumeStatus.ShippingAge).
type SiteTime struct {
	Site SiteID
	Age  Time
}

// SiteCount is one entry of a Vector.
type SiteCount struct {
	Site SiteID
	N    uint64
}

// Vector counts, per origin site, the updates of one volume a replica
// holds (or knows stable): ChainReaction's version vector, kept per
// chain. Entries are in increasing Site order, without zero counts.
type Vector []SiteCount

// Get returns the count for site s.
func (v Vector) Get(s SiteID) uint64 {
	if i, ok := slices.BinarySearchFunc(v, s, func(e SiteCount, s SiteID) int { return cmp.Compare(e.Site, s) }); ok {
		return v[i].N
	}
	return 0
}

// Set returns v with site s's count set to n (v may be modified).
func (v Vector) Set(s SiteID, n uint64) Vector {
	i, ok := slices.BinarySearchFunc(v, s, func(e SiteCount, s SiteID) int { return cmp.Compare(e.Site, s) })
	switch {
	case ok && n == 0:
		return slices.Delete(v, i, i+1)
	case ok:
		v[i].N = n
		return v
	case n == 0:
		return v
	}
	return slices.Insert(v, i, SiteCount{Site: s, N: n})
}

// Merge returns the entry-wise maximum of v and o, in a new vector.
func (v Vector) Merge(o Vector) Vector {
	out := slices.Clone(v)
	for _, e := range o {
		if e.N > out.Get(e.Site) {
			out = out.Set(e.Site, e.N)
		}
	}
	return out
}

// Valid reports whether v's entries are in increasing site order without
// zero counts.
func (v Vector) Valid() bool {
	for i, e := range v {
		if e.N == 0 || i > 0 && v[i-1].Site >= e.Site {
			return false
		}
	}
	return true
}

// VolumeVector is one volume's vector in a table.
type VolumeVector struct {
	Volume VolumeID
	Vector Vector
}

// Equal reports whether two keyspaces are the same.
func (k Keyspace) Equal(o Keyspace) bool {
	return k.Name == o.Name && k.Prefix == o.Prefix && k.Mode == o.Mode && k.K == o.K &&
		k.ReplicationFactor == o.ReplicationFactor && k.FirstVolume == o.FirstVolume && k.Volumes == o.Volumes &&
		slices.Equal(k.Sites, o.Sites) && k.PartitionDepth == o.PartitionDepth && k.Relaxed == o.Relaxed && k.Idle == o.Idle &&
		k.Grace.Equal(o.Grace) && k.Reassign.Equal(o.Reassign) && k.Splits == o.Splits && slices.Equal(k.VolumeIDs, o.VolumeIDs)
}

// NewerKeyspaces reports whether a master's keyspace list got is newer
// than have: keyspaces are only ever added and split, and a hierarchical
// one's overrides only ever advance, so got is newer when its version
// is higher (KeyspacesVersion) or it advances some keyspace's override
// (an older master's answer, still in flight, is not).
func NewerKeyspaces(have, got []Keyspace) bool {
	if g, h := KeyspacesVersion(got), KeyspacesVersion(have); g != h {
		return g > h
	}
	for i := range got {
		if got[i].Name == have[i].Name && (got[i].Grace.Generation > have[i].Grace.Generation || got[i].Reassign.Generation > have[i].Reassign.Generation) {
			return true
		}
	}
	return false
}

// Equal reports whether two overrides are the same.
func (o Override) Equal(p Override) bool {
	return o.Generation == p.Generation && slices.Equal(o.Sites, p.Sites)
}
