package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/catena-kv/catena/internal/wire"
)

// Key layout of the Pebble engine.
//
// Every key starts with a one-byte kind and the volume id as 4 big-endian
// bytes, so each kind of each volume is one contiguous key range, volumes
// sort in numeric order, and Reset is one range deletion per kind:
//
//	'o' vol(4) key             → the object's value bytes (raw)
//	'm' vol(4)                 → Meta, encoded (see encodeMeta)
//	's' vol(4) client(8)       → session header: ackedBelow, lastSN
//	'r' vol(4) client(8) req(8) → outcome: wire.Result, encoded; or
//	                             (outcomes v2, release 0.2.0) the
//	                             client's outcomes of one commit, req
//	                             at most the first (pebble_outcomes.go)
//	'g' vol(4) key             → the object's Stamp (geo volumes); with no
//	                             'o' key beside it, a tombstone
//	'l' vol(4) origin(4) n(8)  → shipping log: the update of site origin
//	                             with Stamp.N n (geo volumes)
//	'x' vol(4) key             → the object's deadline (keys that
//	                             expire; release 0.2.0)
//	'e' vol(4) deadline(8) key → nothing: the deadlines in time order,
//	                             where the head finds keys to reclaim
//	'y' vol(4) key             → the object's type, one byte, for an
//	                             object that is not a string (a hash;
//	                             release 0.2.0)
//	'v'                        → the highest cluster version an engine
//	                             was told, once it is at least
//	                             OutcomeGroupsVersion: the records it
//	                             may hold (release 0.2.0)
//
// client and req are big-endian, so a volume's sessions iterate in client
// order and a client's outcomes in request-number order. The key of an
// object is stored as is after the prefix; an absent object has no key.
// Only Reset writes range deletions; pruning outcomes and deleting
// sessions, which happen on every update, delete each key (see deleteEach).
const (
	kindObject  byte = 'o'
	kindMeta    byte = 'm'
	kindSession byte = 's'
	kindOutcome byte = 'r'
	kindStamp   byte = 'g'
	kindShipLog byte = 'l'
	// kindDeadline and kindDeadlineIndex hold the deadlines of keys
	// that expire (docs/adr/0028): read only in a volume that holds one.
	kindDeadline      byte = 'x'
	kindDeadlineIndex byte = 'e'
	// kindType holds the types of objects that are not strings
	// (docs/adr/0029): read only in a volume that holds one.
	kindType byte = 'y'
	// kindVersion is the one key that records the cluster version
	// (pebble_outcomes.go).
	kindVersion byte = 'v'
)

// typeKey is where an object's type is stored.
func typeKey(v wire.VolumeID, key string) []byte {
	return keyOf(kindType, v, key)
}

// deadlineKey is where an object's deadline is stored.
func deadlineKey(v wire.VolumeID, key string) []byte {
	return keyOf(kindDeadline, v, key)
}

// deadlineIndexKey orders a volume's keys by deadline (never negative,
// so big-endian bytes sort as the times do).
func deadlineIndexKey(v wire.VolumeID, t wire.Time, key string) []byte {
	k := make([]byte, 0, 13+len(key))
	k = append(k, kindDeadlineIndex)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	k = binary.BigEndian.AppendUint64(k, uint64(t))
	return append(k, key...)
}

// keyOf is the key of a record of kind about key of volume v: the kind,
// the volume, the key (objects, stamps, deadlines, types).
func keyOf(kind byte, v wire.VolumeID, key string) []byte {
	k := make([]byte, 0, 5+len(key))
	k = append(k, kind)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return append(k, key...)
}

func volumePrefix(kind byte, v wire.VolumeID) []byte {
	return binary.BigEndian.AppendUint32([]byte{kind}, uint32(v))
}

func objectKey(v wire.VolumeID, key string) []byte {
	return keyOf(kindObject, v, key)
}

func stampKey(v wire.VolumeID, key string) []byte {
	return keyOf(kindStamp, v, key)
}

// shipLogPrefix is where origin's shipping log of volume v lies: its
// updates follow by Stamp.N, big-endian.
func shipLogPrefix(v wire.VolumeID, origin wire.SiteID) []byte {
	return binary.BigEndian.AppendUint32(volumePrefix(kindShipLog, v), uint32(origin))
}

// shipLogPrefixLen is the length of a shipLogPrefix.
const shipLogPrefixLen = 1 + 4 + 4

func shipLogKey(v wire.VolumeID, origin wire.SiteID, n uint64) []byte {
	return binary.BigEndian.AppendUint64(shipLogPrefix(v, origin), n)
}

func sessionKey(v wire.VolumeID, client wire.ClientID) []byte {
	k := make([]byte, 0, 13)
	k = append(k, kindSession)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return binary.BigEndian.AppendUint64(k, uint64(client))
}

func outcomePrefix(v wire.VolumeID, client wire.ClientID) []byte {
	k := make([]byte, 0, 21)
	k = append(k, kindOutcome)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return binary.BigEndian.AppendUint64(k, uint64(client))
}

func outcomeKey(v wire.VolumeID, client wire.ClientID, reqNo uint64) []byte {
	return binary.BigEndian.AppendUint64(outcomePrefix(v, client), reqNo)
}

// prefixEnd returns the smallest key above every key starting with prefix.
// The prefixes used here start with a kind byte below 0xff, so it exists.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic(fmt.Sprintf("storage: no key follows the prefix %x", prefix))
}
