package wire

import (
	"fmt"
	"hash/fnv"
)

// A keyspace's volumes double while it serves (catena keyspace split,
// docs/adr/0031-splitting-volumes.md): with N volumes a key lies in the
// volume at index h mod N of the keyspace's list, h its hash; with 2N in
// the one at h mod 2N, which is either the same index (the key stays) or
// that index plus N (the key moves to the volume's sibling). Each member
// of a volume's chain splits its replica in place, at the same point of
// the volume's history, and the sibling starts on the same servers.

// Split is a volume's part in the latest split of its keyspace, in its
// configuration (Config.Split): from the first update sequenced in epoch
// Epoch or later, the volume holds only the keys whose hash modulo
// Modulus is Keep; those whose hash modulo Modulus is Keep+Modulus/2
// moved to volume Into. The zero value (Modulus 0): never split.
type Split struct {
	Into    VolumeID
	Epoch   Epoch
	Modulus uint32
	Keep    uint32
}

// IsZero reports whether s names no split.
func (s Split) IsZero() bool { return s.Modulus == 0 }

// Owns reports whether a volume whose latest split is s holds key: every
// key of a volume never split, else the half it kept.
func (s Split) Owns(key string) bool {
	return s.IsZero() || KeyHash(key)%s.Modulus == s.Keep
}

func (s Split) String() string {
	if s.IsZero() {
		return "none"
	}
	return fmt.Sprintf("into v%d from e%d (hash mod %d = %d stays)", s.Into, s.Epoch, s.Modulus, s.Keep)
}

// SplitPoint names the point of a volume's history where a member split
// its replica: the first update it applied sequenced in the split's
// epoch or later (SN and Epoch, which name that whole history prefix:
// Update.Epoch). The sibling Into was seeded with the state before it,
// at SN−1. The zero value: no split applied.
type SplitPoint struct {
	Into  VolumeID
	SN    SN
	Epoch Epoch
}

// IsZero reports whether p names no split.
func (p SplitPoint) IsZero() bool { return p.Epoch == 0 }

// KeyHash is the hash that places keys in volumes (FNV-1a, 32 bits).
func KeyHash(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

// Volume returns the keyspace's i-th volume (0 ≤ i < Volumes): a key
// whose hash modulo Volumes is i lies in it.
func (k Keyspace) Volume(i int) VolumeID {
	if k.VolumeIDs != nil {
		return k.VolumeIDs[i]
	}
	return k.FirstVolume + VolumeID(i)
}

// VolumeList returns the keyspace's volumes, by index.
func (k Keyspace) VolumeList() []VolumeID {
	out := make([]VolumeID, k.Volumes)
	for i := range out {
		out[i] = k.Volume(i)
	}
	return out
}

// IndexOf returns v's index among the keyspace's volumes.
func (k Keyspace) IndexOf(v VolumeID) (int, bool) {
	if k.VolumeIDs == nil {
		if v >= k.FirstVolume && uint64(v) < uint64(k.FirstVolume)+uint64(k.Volumes) {
			return int(v - k.FirstVolume), true
		}
		return 0, false
	}
	for i, id := range k.VolumeIDs {
		if id == v {
			return i, true
		}
	}
	return 0, false
}

// MadeAt returns the keyspace's volume count right after its i-th
// volume was made: the count it was created with, or the count after the
// split that made it.
func (k Keyspace) MadeAt(i int) int {
	made := max(1, k.Volumes>>k.Splits)
	for made <= i {
		made *= 2
	}
	return made
}

// Split returns the keyspace with its volumes doubled: into, of length
// Volumes, are the new volumes' ids, the i-th taking half of the keys of
// the i-th volume.
func (k Keyspace) Split(into []VolumeID) Keyspace {
	ids := append(k.VolumeList(), into...)
	k.VolumeIDs, k.Volumes, k.Splits = ids, len(ids), k.Splits+1
	return k
}

// KeyspacesVersion numbers a master's keyspace list: keyspaces are only
// ever added and split, and each adds one. Clients route a key with the
// list they know and say its version (ClientRequest.Keyspaces); a server
// that knows another refuses it.
func KeyspacesVersion(ks []Keyspace) uint32 {
	n := uint32(len(ks))
	for i := range ks {
		n += uint32(ks[i].Splits)
	}
	return n
}
