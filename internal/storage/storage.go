// Package storage holds the objects of the volumes a server replicates,
// with the replica state that must survive a restart: the configuration,
// the applied sequence number and the exactly-once records.
//
// Store is the boundary the replica state machine writes through; Engine
// holds the stores of one server and makes their changes durable together.
// Memory is the implementation for tests and the simulator; Pebble (in
// pebble.go) is the durable one.
package storage

import (
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Store holds one volume's replica state.
//
// Contract: calls come from one goroutine at a time (the server's event
// loop); reads see every earlier write, committed or not; nothing is
// durable until the Engine's Commit returns; byte slices passed in are not
// modified by the caller afterwards, and slices returned are the caller's.
type Store interface {
	Get(key string) kv.Object
	// Cached returns key's object if the store holds it in memory (the
	// object cache; every object of a Memory), without reading its disk:
	// ok is false if it would have to. The Value is shared: the caller
	// must not modify it.
	Cached(key string) (o kv.Object, ok bool)
	// Set stores object under key; an object with Exists false deletes
	// it, but one with a Stamp stays as a tombstone (geo volumes).
	Set(key string, object kv.Object)
	// Snapshot returns a point-in-time copy of every existing object and
	// tombstone, ordered by key.
	Snapshot() []KeyObject
	// Export returns a view of the volume's objects and applied SN
	// frozen at one state the store held at or after its last Commit
	// (Pebble: exactly the last Commit's), for a backup to read page by
	// page. Close it when done.
	Export() Export
	// Keys returns, in key order, up to max keys of existing objects (no
	// tombstones) that sort at or after from, and whether more such keys
	// follow the last one returned: a page of a scan of the volume.
	Keys(from string, max int) (keys []string, more bool)
	// Deadlines returns, earliest first, up to max existing objects
	// that have a deadline (kv.Object.Expires), with it: where the head
	// finds the keys it reclaims (docs/adr/0028). Nil if none has.
	Deadlines(max int) []KeyDeadline
	// Reset removes every object, session, the shipping log and the
	// metadata.
	Reset()

	// AppendShipLog records an update under its origin site and Stamp.N
	// until every other site holds it (geo volumes: the updates this site
	// originated; in a hierarchical volume also the other sites', which
	// it may have to relay). Each origin's log is in Stamp.N order.
	AppendShipLog(u wire.Update)
	// ShipLog returns up to max consecutive updates of origin's log, in
	// order, from the first one numbered from or above.
	ShipLog(origin wire.SiteID, from uint64, max int) []wire.Update
	// TrimShipLog drops origin's updates numbered up to through.
	TrimShipLog(origin wire.SiteID, through uint64)

	// SetMeta records the replica's configuration and applied SN.
	SetMeta(Meta)
	// Meta returns what SetMeta stored; false if nothing was.
	Meta() (Meta, bool)

	// SetSession records a client session's header.
	SetSession(client wire.ClientID, ackedBelow uint64, lastSN wire.SN)
	// SetOutcome records the result of one executed request.
	SetOutcome(client wire.ClientID, reqNo uint64, result wire.Result)
	// DeleteOutcome forgets one outcome (a blind delete: no read).
	DeleteOutcome(client wire.ClientID, reqNo uint64)
	// DeleteSession forgets a client session and its outcomes.
	DeleteSession(client wire.ClientID)
	// Sessions returns every session with its outcomes, ordered by client
	// and request number.
	Sessions() []wire.SessionRecord
}

// Meta is the replica state stored beside the objects.
type Meta struct {
	Config  wire.Config
	Applied wire.SN
	// Vector counts the applied updates per origin site (geo volumes).
	Vector wire.Vector
	// SnapshotInstalled is set on a joining server once it holds a whole
	// snapshot: before that its objects are a partial copy.
	SnapshotInstalled bool
	// CatchUpTo is, in a causal chain, the SN from which this member
	// holds every update the chain has answered (wire.VolumeStatus
	// Complete): 0 for one that always did, NeverCaughtUp for one that
	// does not know.
	CatchUpTo wire.SN
	// AppliedEpoch is the epoch that sequenced the update at Applied
	// (wire.Update.Epoch; 0: unknown). With Applied it names the
	// replica's history, so a restarted server can catch up from it.
	AppliedEpoch wire.Epoch
	// Split is where the replica split in its keyspace's latest split
	// (wire.SplitPoint; docs/adr/0031), seeding Split.Into's replica
	// on this server.
	Split wire.SplitPoint
	// Seeded says the replica was seeded by its parent volume's split
	// on this server and has adopted no configuration yet: its state is
	// the parent's moved keys and sessions at Applied, the same on
	// every member of the parent that split at the same point.
	Seeded bool
}

// NeverCaughtUp is Meta.CatchUpTo of a member that does not know it holds
// every answered update.
const NeverCaughtUp = ^wire.SN(0)

// KeyDeadline is an object's key and deadline.
type KeyDeadline struct {
	Key     string
	Expires wire.Time
}

// KeyObject is one entry of a snapshot.
type KeyObject struct {
	Key    string
	Object kv.Object
}

// VersionedEngine is an Engine that writes some records in a newer
// format once told the cluster runs at a protocol version that brings it
// (docs/upgrades.md): before, an older release must still open its
// directory. The version told is never lowered.
type VersionedEngine interface {
	SetClusterVersion(v uint32)
}

// Engine holds the stores of one server.
type Engine interface {
	// Volume returns the store of a volume, creating it empty.
	Volume(v wire.VolumeID) Store
	// Volumes returns the volumes that have metadata stored, in order.
	Volumes() []wire.VolumeID
	// Commit makes every change made so far durable, for all volumes at
	// once (group commit).
	Commit() error
	Close() error
}
