// Package wire holds the messages that Catena's state machines exchange:
// client requests and replies, the chain's forward/ack traffic, the
// predecessor/successor synchronisation of CR §3 Fig. 3, state transfer for
// chain extension, and the master's heartbeats and configurations.
//
// Every message is a plain value. Transports (the simulator now, TCP later)
// move them between nodes; the state machines never see a socket.
package wire

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// NodeID names a node (server, master or client) and is its address.
type NodeID string

// VolumeID names a volume: a set of keys replicated by one chain.
type VolumeID uint32

// Epoch numbers the configurations of one volume. The master increments it
// on every change of the chain; every chain message carries the sender's
// epoch and is rejected by a receiver in another epoch.
type Epoch uint64

// SN is a per-volume update sequence number assigned by the head. The first
// update of a volume has SN 1; SN 0 means "nothing".
type SN uint64

// ClientID identifies a client session for exactly-once updates.
type ClientID uint64

// NoClient is the ClientID of updates no client asked for: the deletes a
// head sequences to reclaim expired keys (docs/adr/0028). No session
// records them, and nobody is answered.
const NoClient ClientID = 0

// Time is a node's local clock reading in nanoseconds. In the simulator it
// is virtual time (possibly drifting per node); in real servers, monotonic
// time. State machines only compare and add Times.
type Time int64

// String formats t as a duration ("1.5s"), so errors, logs and traces
// show Times in units people read. %d still formats nanoseconds.
func (t Time) String() string { return time.Duration(t).String() }

// Common durations, in Time units.
const (
	Microsecond Time = 1000
	Millisecond Time = 1000 * Microsecond
	Second      Time = 1000 * Millisecond
)

// Config is one configuration of one volume's chain.
//
// INVARIANT: Chain holds distinct servers; Joining, when set, is not in Chain.
type Config struct {
	Volume VolumeID
	Epoch  Epoch
	// Chain lists the members from head (index 0) to tail.
	Chain []NodeID
	// Joining is a server being added at the tail (CR §3 "Extending a
	// Chain"). It receives a snapshot and then the stream of updates from
	// the tail, but it is not a member: it answers no client and its
	// progress does not commit anything.
	Joining NodeID
	// Fresh says the volume holds no data anywhere: an empty replica may
	// become a member (normally only a server's first process may). The
	// master sets it for one epoch when every member is alive and holds
	// nothing, which, with durable storage, means no member ever adopted
	// the volume and so no update was ever acknowledged.
	Fresh bool
	// Mode is the volume's keyspace's mode: which protocol its chain runs
	// on CR §3's core (internal/chain, docs/adr/0021-modes-as-strategies.md).
	// A causal volume whose Sites name several sites runs ChainReaction
	// across them; a hierarchical one always names several. It is the
	// keyspace's and never changes.
	Mode Mode `json:",omitempty"`
	// Moved says Joining was a member until this change: a role move
	// (the master's CmdMoveToTail). The tail applies nothing its joining
	// server lacks until the joiner is the tail, so the joiner holds
	// every acknowledged update throughout, and the master may make it a
	// member if the others fail. Set with Joining only.
	Moved bool `json:",omitempty"`
	// K is ChainReaction's k for a volume of a causal keyspace: an
	// update is answered once the first K members applied it, and goes on
	// to the tail lazily; any member answers reads the client's metadata
	// allows (docs/adr/0010-causal-mode.md). 0 for a strong volume, where
	// the tail answers (CR §2). It is the keyspace's and never changes.
	K int
	// Sites are the sites that replicate the volume's keyspace, in
	// increasing order (docs/adr/0013-sites-and-geo-causal.md); empty
	// for a keyspace of this site only. It is the keyspace's.
	Sites []SiteID
	// FromSplit says this is the first configuration of a split's new
	// volume (split.go): its members are the servers that seeded it,
	// and a server named without a seed refuses to be a member, even in
	// its first process. It lasts one epoch.
	FromSplit bool `json:",omitempty"`
	// Split is the volume's part in its keyspace's latest split
	// (split.go): the keys it no longer holds, and from which epoch.
	// The master keeps it in every later configuration of the volume.
	Split Split `json:",omitzero"`
}

// Geo reports whether the volume is replicated across sites.
func (c Config) Geo() bool { return len(c.Sites) > 1 }

// Causal reports whether the volume belongs to a causal keyspace.
func (c Config) Causal() bool { return c.Mode == ModeCausal }

// ImpliedMode is the mode of a volume described by ChainReaction's k and
// its sites alone, as configurations were before they named their mode
// (Config.Mode): causal with a k, else hierarchical across several sites,
// else strong. Decoders of state written before then use it; everything
// else reads Config.Mode.
func ImpliedMode(k int, sites []SiteID) Mode {
	switch {
	case k > 0:
		return ModeCausal
	case len(sites) > 1:
		return ModeHierarchical
	}
	return ModeStrong
}

// Head returns the chain's head, or "" for an empty chain.
func (c Config) Head() NodeID {
	if len(c.Chain) == 0 {
		return ""
	}
	return c.Chain[0]
}

// Tail returns the chain's tail, or "" for an empty chain.
func (c Config) Tail() NodeID {
	if len(c.Chain) == 0 {
		return ""
	}
	return c.Chain[len(c.Chain)-1]
}

// Answerer returns the member that answers the chain's updates: in a
// causal chain the k-th (the tail of a shorter chain), else the tail. It
// holds every acknowledged update and, of those it applied, only
// acknowledged ones: where an export reads (docs/adr/0030).
func (c Config) Answerer() NodeID {
	if c.Causal() && c.K >= 1 && c.K < len(c.Chain) {
		return c.Chain[c.K-1]
	}
	return c.Tail()
}

// Index returns the position of id in the chain, or -1.
func (c Config) Index(id NodeID) int { return slices.Index(c.Chain, id) }

// Contains reports whether id is a member or the joining server.
func (c Config) Contains(id NodeID) bool { return c.Index(id) >= 0 || (id != "" && c.Joining == id) }

// Predecessor returns the server that forwards updates to id: the previous
// member, or the tail for the joining server.
func (c Config) Predecessor(id NodeID) NodeID {
	if id != "" && id == c.Joining {
		return c.Tail()
	}
	if i := c.Index(id); i > 0 {
		return c.Chain[i-1]
	}
	return ""
}

// Successor returns the server id forwards updates to: the next member, or
// the joining server for the tail.
func (c Config) Successor(id NodeID) NodeID {
	i := c.Index(id)
	switch {
	case i < 0:
		return ""
	case i+1 < len(c.Chain):
		return c.Chain[i+1]
	default:
		return c.Joining
	}
}

// Clone returns a deep copy.
func (c Config) Clone() Config {
	c.Chain = slices.Clone(c.Chain)
	c.Sites = slices.Clone(c.Sites)
	return c
}

func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d@e%d[", c.Volume, c.Epoch)
	for i, id := range c.Chain {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(id))
	}
	if c.Joining != "" {
		fmt.Fprintf(&b, " +%s", c.Joining)
		if c.Moved {
			b.WriteString(" moved")
		}
	}
	b.WriteString("]")
	if c.K > 0 {
		fmt.Fprintf(&b, "k%d", c.K)
	}
	return b.String()
}

// Mode is a keyspace's consistency mode.
type Mode uint8

const (
	// ModeStrong: chain replication (CR §2): updates answered by the
	// tail, reads linearizable.
	ModeStrong Mode = iota
	// ModeCausal: ChainReaction's causal+ (updates answered after K
	// members, reads at any member the client's metadata allows).
	ModeCausal
	// ModeHierarchical: single-copy semantics across sites by the NFSv4
	// paper's hierarchical replication control: a site elected primary
	// for a key or a key prefix orders its writes, the other sites
	// forward to it (docs/adr/0016-hierarchical-replication-control.md).
	ModeHierarchical
)

func (m Mode) String() string {
	switch m {
	case ModeStrong:
		return "strong"
	case ModeCausal:
		return "causal"
	case ModeHierarchical:
		return "hierarchical"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "strong", "causal" or "hierarchical".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "strong":
		return ModeStrong, nil
	case "causal":
		return ModeCausal, nil
	case "hierarchical":
		return ModeHierarchical, nil
	}
	return 0, fmt.Errorf("unknown mode %q (want strong, causal or hierarchical)", s)
}

// DefaultKeyspace names the keyspace of every key no other keyspace's
// prefix matches.
const DefaultKeyspace = "default"

// Keyspace is a named key prefix with its own volumes, chain length and
// mode, kept in the master's replicated state. Keys route to the
// keyspace whose prefix they start with (prefixes of keyspaces do not
// overlap), else to the default keyspace (prefix ""), and within it to
// one of its volumes by hash.
type Keyspace struct {
	Name   string
	Prefix string
	Mode   Mode
	// K is ChainReaction's k for a causal keyspace (1 ≤ K ≤
	// ReplicationFactor); 0 for a strong one.
	K int
	// ReplicationFactor is t, the chain length the master keeps.
	ReplicationFactor int
	// FirstVolume and Volumes give the keyspace's volumes:
	// FirstVolume, FirstVolume+1, ..., FirstVolume+Volumes−1, until it
	// is split; then VolumeIDs lists them (Volume, VolumeList).
	FirstVolume VolumeID
	Volumes     int
	// Splits counts the times the keyspace's volumes were doubled
	// (catena keyspace split, split.go); VolumeIDs, set once it was
	// split, lists its Volumes volumes by index: a key lies in
	// VolumeIDs[hash mod Volumes]. The first Volumes/2 are the volumes
	// before the last split, in their order.
	Splits    int        `json:",omitempty"`
	VolumeIDs []VolumeID `json:",omitempty"`
	// Sites are the sites that replicate the keyspace, in increasing
	// order; empty: this site only. Every site named keeps the keyspace
	// with the same name, prefix, mode and number of volumes, so a key
	// has a sibling chain at each (docs/adr/0013-sites-and-geo-causal.md).
	Sites []SiteID
	// PartitionDepth is, for a hierarchical keyspace, how many leading
	// segments of a key's path (the key without the keyspace's prefix)
	// choose its volume: every key under a prefix of at least that many
	// segments lies in one volume, which may control the prefix as a
	// whole (ADR 16). 0 for other modes: the whole key is hashed.
	PartitionDepth int
	// Relaxed is, for a hierarchical keyspace, the paper's durability: a
	// write is answered once the primary site holds it, not a majority
	// of the sites.
	Relaxed bool
	// Idle is, for a hierarchical keyspace, how long a site keeps
	// control of a key or prefix no write touches (0: 1 s).
	Idle Time
	// Grace is, for a hierarchical keyspace, the sites an operator last
	// forced the active view to at this site after a majority of its
	// sites failed at once (catena keyspace grace, NFSv4 §2.3's grace
	// period): the head of each of its volumes adopts, once per
	// generation, the view of those sites numbered after its own,
	// without a majority, and sends it to the other sites. Zero: never.
	Grace Override
	// Reassign is, for a relaxed hierarchical keyspace, the sites
	// outside the view whose keys an operator last reassigned at this
	// site (catena keyspace reassign): the writes only they held are
	// given up, and this site takes their keys over as durable mode
	// does for every removed site. Zero: never.
	Reassign Override
}

// Override is an operator's decision about a hierarchical keyspace's
// sites, kept by the master (Keyspace.Grace, Keyspace.Reassign): its
// generation (1, 2, ... per kind at a site) and the sites it names.
type Override struct {
	Generation uint64
	Sites      []SiteID
}

// Path returns key's path within the keyspace: the key without the
// keyspace's prefix.
func (k Keyspace) Path(key string) string { return strings.TrimPrefix(key, k.Prefix) }

// HasVolume reports whether v is one of the keyspace's volumes.
func (k Keyspace) HasVolume(v VolumeID) bool {
	_, ok := k.IndexOf(v)
	return ok
}

// Overlaps reports whether the two keyspaces' prefixes could both match
// one key (one is a prefix of the other). The default keyspace's empty
// prefix overlaps nothing: it takes only what no other matches.
func (k Keyspace) Overlaps(o Keyspace) bool {
	if k.Prefix == "" || o.Prefix == "" {
		return false
	}
	return strings.HasPrefix(k.Prefix, o.Prefix) || strings.HasPrefix(o.Prefix, k.Prefix)
}

// OpKind names a client operation.
type OpKind uint8

// The operations of CR §2: one query and the pre-programmed updates.
const (
	OpGet OpKind = iota + 1
	OpPut
	OpDelete
	OpCompareAndSet
	OpIncrement
	OpAppend
	// OpWaitStable is a query that waits until the key's version
	// ClientRequest.MinVersion is stable (processed by the tail) and then
	// answers with no value: ChainReaction's dependency stabilisation,
	// which the client core runs before a causal write.
	OpWaitStable
	// OpSwap sets the value and returns the prior one (Redis GETSET).
	OpSwap
	// OpReplace sets the value only if the key exists, and returns the
	// prior value (Redis SET XX).
	OpReplace
	// OpWaitShipped is a query on a geo volume, answered by the tail at
	// the update's origin site once Delta sites (this one included) hold
	// stable the update ClientRequest.Deps[0] names (this site's N-th of
	// the volume): the second step of a write durable across sites.
	OpWaitShipped
	// OpScan is a query of a volume rather than of a key: the tail
	// answers with the volume's keys from Key on (Key itself included;
	// empty: from the first), examining at most Delta of them, with those that match the Redis
	// glob pattern Value (empty: all) in Result.Value (EncodeScanPage).
	// The client routes it to the volume (ClientRequest.Volume).
	OpScan
	// OpExpire changes a key's deadline (Redis EXPIRE, PERSIST, GETEX):
	// to Op.Expires or now+Op.TTL, or none with ExpiryPersist, if the
	// conditions of Op.Expiry hold. It answers the value, and Status
	// StatusCompareFailed when the key is absent or a condition failed.
	// A deadline not after the head's clock deletes the key, as Redis's
	// does (docs/adr/0028). Release 0.1.0 refuses it as unknown.
	OpExpire
	// Hash operations (docs/adr/0029-hashes.md). Value holds fields
	// encoded as kv.EncodeFields does. OpHashSet sets each field to its
	// value (answers how many fields it added); OpHashSetNX sets its one
	// field only if absent (1 or 0); OpHashDelete removes the fields
	// named (how many it removed; the last one removed deletes the key);
	// OpHashIncrement adds Delta to its one field's decimal integer (the
	// new value). OpHashGet is a query: the fields named that the hash
	// has, with their values (none named: every field). On a key that
	// holds a string they answer StatusWrongType and change nothing.
	OpHashSet
	OpHashSetNX
	OpHashDelete
	OpHashIncrement
	OpHashGet
	// OpExport is, like OpScan, a query of a volume: the chain's
	// answerer (Config.Answerer: the tail, or a causal chain's k-th
	// member) answers with a page of the volume's objects (keys, values, deadlines,
	// types) from Key on (included), read from one frozen state of the
	// volume it keeps under the export id Delta (nonzero, chosen by the
	// caller) while pages are asked for: a backup's read
	// (docs/adr/0030-backup-and-restore.md). Result.Value holds an
	// ExportPage (EncodeExportPage). Release 0.1.0 refuses it as
	// unknown.
	OpExport
	// OpWatch is, like OpScan, a query of a volume, which any member of
	// its chain answers: the committed updates after revision Delta (the
	// volume's SN; WatchFromNow: none) to the keys Key prefixes (to Key
	// alone with WatchExactKey in Value), in a WatchPage
	// (EncodeWatchPage), held up to TTL (≤ WatchHoldMax) while there is
	// nothing to send (docs/adr/0032-watch-and-leases.md). Strong
	// keyspaces only. Release 0.1.0 refuses it as unknown.
	OpWatch
)

// ObjectType is the type of a key's value (docs/adr/0029).
type ObjectType uint8

// Object types.
const (
	// TypeString: a byte string, the zero value, so every object stored
	// before hashes is one.
	TypeString ObjectType = iota
	// TypeHash: fields and their values, encoded as kv.EncodeFields.
	TypeHash
)

func (t ObjectType) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeHash:
		return "hash"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// IsHash reports whether k is a hash operation.
func (k OpKind) IsHash() bool { return k >= OpHashSet && k <= OpHashGet }

var opNames = map[OpKind]string{
	OpGet: "get", OpPut: "put", OpDelete: "delete", OpCompareAndSet: "cas",
	OpIncrement: "incr", OpAppend: "append", OpWaitStable: "wait-stable",
	OpSwap: "swap", OpReplace: "replace", OpWaitShipped: "wait-shipped",
	OpScan: "scan", OpExpire: "expire", OpExport: "export", OpWatch: "watch",
	OpHashSet: "hset", OpHashSetNX: "hsetnx", OpHashDelete: "hdel", OpHashIncrement: "hincrby", OpHashGet: "hget",
}

func (k OpKind) String() string {
	if s, ok := opNames[k]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// IsQuery reports whether the operation reads without changing anything.
func (k OpKind) IsQuery() bool {
	return k == OpGet || k == OpWaitStable || k == OpWaitShipped || k == OpScan || k == OpHashGet || k == OpExport || k == OpWatch
}

// NamesVolume reports whether the operation is about a volume rather
// than a key (ClientRequest.Volume names it; Key is where it starts).
func (k OpKind) NamesVolume() bool { return k == OpScan || k == OpExport || k == OpWatch }

// Valid reports whether k is a known operation.
func (k OpKind) Valid() bool { _, ok := opNames[k]; return ok }

// Op is one client operation on one key.
type Op struct {
	Kind OpKind
	Key  string
	// Value is the new value (put, swap, replace), the suffix (append) or
	// the replacement (compare-and-set).
	Value []byte
	// Expected is the value compare-and-set requires; ExpectAbsent requires
	// the key to be absent instead.
	Expected     []byte
	ExpectAbsent bool
	// Delta is added by increment.
	Delta int64

	// Fields appended after release 0.1.0 (docs/adr/0028-expiry.md),
	// behind protocol version 2: the key's deadline. Expires is
	// absolute (Unix nanoseconds; EXAT, PXAT, EXPIREAT); TTL is
	// relative, and the head turns it into its clock reading plus TTL
	// when it sequences the update, once. Neither: a put, swap,
	// replace or compare-and-set leaves the key without a deadline
	// (unless Expiry has ExpiryKeep); increment and append keep the
	// key's.
	Expires Time
	TTL     Time
	Expiry  ExpiryFlags
}

// ExpiryFlags qualify an operation's deadline (Op.Expiry).
type ExpiryFlags uint8

// Expiry flags.
const (
	// ExpiryKeep: a put, swap, replace or compare-and-set keeps the
	// key's deadline (Redis KEEPTTL).
	ExpiryKeep ExpiryFlags = 1 << iota
	// ExpiryPersist: OpExpire removes the key's deadline (PERSIST).
	ExpiryPersist
	// ExpiryNX, ExpiryXX, ExpiryGT, ExpiryLT: OpExpire sets the
	// deadline only if the key has none, has one, the new one is later
	// (no deadline counts as infinitely late), or is earlier.
	ExpiryNX
	ExpiryXX
	ExpiryGT
	ExpiryLT

	expiryKnown = ExpiryKeep | ExpiryPersist | ExpiryNX | ExpiryXX | ExpiryGT | ExpiryLT
)

// Valid reports whether f holds only known flags.
func (f ExpiryFlags) Valid() bool { return f&^expiryKnown == 0 }

// SetsExpiry reports whether the operation sets, keeps or removes a
// deadline: one that needs protocol version 2 (docs/adr/0028).
func (o Op) SetsExpiry() bool {
	if o.Kind == OpWatch {
		return false // (its TTL is how long a member may hold it)
	}
	return o.Kind == OpExpire || o.Expires != 0 || o.TTL != 0 || o.Expiry != 0
}

func (o Op) String() string {
	switch o.Kind {
	case OpGet, OpDelete, OpWaitStable:
		return fmt.Sprintf("%s(%s)", o.Kind, o.Key)
	case OpWaitShipped:
		return fmt.Sprintf("%s(%s, %d sites)", o.Kind, o.Key, o.Delta)
	case OpScan:
		return fmt.Sprintf("scan(from %q, match %q, count %d)", o.Key, o.Value, o.Delta)
	case OpExport:
		return fmt.Sprintf("export(%d, from %q)", o.Delta, o.Key)
	case OpCompareAndSet:
		if o.ExpectAbsent {
			return fmt.Sprintf("cas(%s, absent→%q)", o.Key, o.Value)
		}
		return fmt.Sprintf("cas(%s, %q→%q)", o.Key, o.Expected, o.Value)
	case OpIncrement:
		return fmt.Sprintf("incr(%s, %d)", o.Key, o.Delta)
	default:
		return fmt.Sprintf("%s(%s, %q)", o.Kind, o.Key, o.Value)
	}
}

// Status is the outcome of an operation that the chain executed. It is part
// of the replicated outcome record, so a retry returns the same Status.
type Status uint8

// Outcomes of executed operations.
const (
	StatusOK Status = iota
	// StatusCompareFailed: compare-and-set found another value; nothing changed.
	StatusCompareFailed
	// StatusNotInteger: increment found a value that is not a decimal
	// integer; nothing changed.
	StatusNotInteger
	// StatusValueTooLarge: append would exceed the value size limit; nothing changed.
	StatusValueTooLarge
	// StatusOverflow: increment found a decimal integer outside int64, or
	// its sum would be; nothing changed.
	StatusOverflow
	// StatusWrongType: the key holds a value of another type than the
	// operation works on (a hash operation on a string, or a string's on
	// a hash: Redis's WRONGTYPE); nothing changed.
	StatusWrongType
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusCompareFailed:
		return "compare-failed"
	case StatusNotInteger:
		return "not-integer"
	case StatusValueTooLarge:
		return "value-too-large"
	case StatusOverflow:
		return "overflow"
	case StatusWrongType:
		return "wrong-type"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Result is what an executed operation returns to the client.
type Result struct {
	Status Status
	// Found reports whether the key held a value before the operation (get,
	// delete, compare-and-set, swap, replace) or after it (put, increment,
	// append).
	Found bool
	// Value is the value read (get), the current value when
	// compare-and-set fails, the prior value (swap, replace), or the new
	// value (increment, append).
	Value []byte
	// SN is the update's sequence number, or for a query the SN of the
	// last update the tail had applied.
	SN SN
	// Stamp identifies the version written or read across sites (geo
	// keyspaces; zero otherwise).
	Stamp Stamp
	// Expires is the key's deadline after an update, or as read (Unix
	// nanoseconds; 0: none). Appended after release 0.1.0.
	Expires Time
	// Type is the type of the value read (OpGet). Appended after
	// release 0.1.0.
	Type ObjectType
}

// ErrCode says why a server did not execute a request. Nothing changed; the
// client may retry, after refreshing its configuration where the code says so.
type ErrCode uint8

// Request errors.
const (
	ErrNone ErrCode = iota
	// ErrWrongEpoch: the request's epoch is not the server's. Reply.Config
	// holds the server's configuration when it is newer.
	ErrWrongEpoch
	// ErrNotHead / ErrNotTail: the server holds no such role for the volume.
	ErrNotHead
	ErrNotTail
	// ErrUnavailable: the server cannot serve the volume now (no lease from
	// the master, state transfer in progress, or no such volume here).
	ErrUnavailable
	// ErrSessionExpired: the client's exactly-once session was evicted or
	// the request is older than the outcomes kept; its outcome is unknown.
	ErrSessionExpired
	// ErrTooManyInFlight: the client has more unanswered updates than the
	// session keeps outcomes for.
	ErrTooManyInFlight
	// ErrBadRequest: malformed request (unknown operation, key or value over
	// the limits). Retrying will not help.
	ErrBadRequest
	// ErrDirty: a query reached a member other than the tail while the key
	// has an update the tail has not yet processed (CRAQ's dirty object):
	// ask the tail.
	ErrDirty
	// ErrKeyspaces: the client routed the request with fewer keyspaces
	// than the server knows (one was created since): refresh them.
	ErrKeyspaces
	// ErrUnknownVersion: a causal read asked for a version (MinVersion)
	// that no member of the chain holds, not even the head: the client's
	// metadata is forged, or names updates the chain lost (more than k−1
	// failures). Retrying will not help; the client drops the metadata.
	ErrUnknownVersion
	// ErrWrongCluster: a Ship came from a site of another deployment
	// (Ship.Cluster is not the receiver's): nothing was applied
	// (ShipAck only).
	ErrWrongCluster
	// ErrDenied: authorization is on and the request's user may not do
	// this (read, or write, the key's keyspace or prefix): nothing was
	// done. Retrying will not help until an administrator grants it.
	ErrDenied
	// ErrUnauthenticated: authorization is on and the request names no
	// user the cluster knows (a connection without a client certificate,
	// or a user deleted since): nothing was done.
	ErrUnauthenticated
	// ErrInFlightLimit: the client's connection has as many requests
	// waiting at the server as the server allows one connection; the
	// server refused this one unread. Nothing was done.
	ErrInFlightLimit
	// ErrNotInView: a hierarchical-control message came from a site
	// outside the receiver's active view, or was meant for another site
	// (Control only): nothing changed.
	ErrNotInView
	// ErrStaleView: a proposed view change does not follow the
	// receiver's view (an older number, or one the receiver has not
	// reached): the reply carries the receiver's view (Control only).
	ErrStaleView
	// ErrTooManySites: an update asked for more sites
	// (ClientRequest.Sites) than replicate its volume's keyspace: nothing
	// was applied. Retrying will not help.
	ErrTooManySites
	// ErrKeyspaceMissing: the request's keyspace is hierarchical and so
	// many of the sites it names have not created it (ClientReply.Sites)
	// that the others are no majority: no site can control its keys
	// until they do. Nothing was done.
	ErrKeyspaceMissing
)

func (e ErrCode) String() string {
	switch e {
	case ErrNone:
		return "none"
	case ErrWrongEpoch:
		return "wrong-epoch"
	case ErrNotHead:
		return "not-head"
	case ErrNotTail:
		return "not-tail"
	case ErrUnavailable:
		return "unavailable"
	case ErrSessionExpired:
		return "session-expired"
	case ErrTooManyInFlight:
		return "too-many-in-flight"
	case ErrBadRequest:
		return "bad-request"
	case ErrDirty:
		return "dirty"
	case ErrKeyspaces:
		return "stale-keyspaces"
	case ErrUnknownVersion:
		return "unknown-version"
	case ErrWrongCluster:
		return "wrong-cluster"
	case ErrDenied:
		return "denied"
	case ErrUnauthenticated:
		return "unauthenticated"
	case ErrInFlightLimit:
		return "in-flight-limit"
	case ErrNotInView:
		return "not-in-view"
	case ErrStaleView:
		return "stale-view"
	case ErrTooManySites:
		return "too-many-sites"
	case ErrKeyspaceMissing:
		return "keyspace-missing"
	}
	return fmt.Sprintf("err(%d)", uint8(e))
}

// Update is one sequenced update as it travels down the chain: the head
// computed its effect once; other replicas only store the resulting value
// and the outcome record.
type Update struct {
	SN  SN
	Key string
	// Changed is false for an update whose outcome left the object as it
	// was (a failed compare-and-set); Value and Deleted are then unused.
	Changed bool
	Deleted bool
	Value   []byte
	// Client, ReqNo and AckedBelow identify the request for exactly-once
	// execution; ReplyTo is where the tail sends the reply.
	Client     ClientID
	ReqNo      uint64
	AckedBelow uint64
	ReplyTo    NodeID
	Result     Result
	// Stamp is the version's identity across sites, and Deps the
	// versions it depends on (geo keyspaces; zero and nil otherwise). A
	// site applies an update that originated elsewhere only once each
	// dependency is stable there.
	Stamp Stamp
	Deps  []Dep
	// Epoch is the epoch whose head sequenced the update. One head
	// sequences per epoch and only appends, so (SN, Epoch) names a whole
	// history prefix: two replicas whose updates at SN n carry the same
	// Epoch hold the same updates 1..n (catch-up, docs/adr/0003).
	Epoch Epoch
	// Expires is the object's deadline the head assigned (Unix
	// nanoseconds; 0: none). Appended after release 0.1.0.
	Expires Time
	// Type is the object's type (TypeString unless a hash). Appended
	// after release 0.1.0.
	Type ObjectType
}

// Message is anything a node sends to another.
type Message interface{ messageName() string }

// Envelope is a message with its destination, as state machines emit it.
//
// Early says the message may leave the process before the storage writes
// of the step that emitted it are durable (a Forward of a pipelined
// chain, chain/durable.go); every other message waits for the commit
// that follows its step, so nothing else reveals state a crash could
// still take back. A process keeps each destination's messages in the
// order they were emitted: an Early message behind one that waits,
// waits too.
type Envelope struct {
	To    NodeID
	Msg   Message
	Early bool
}

// SendEarly passes send the Early envelopes of out that no waiting
// message to the same destination precedes (in waiting, or earlier in
// out), in order, and returns waiting with the others of out appended, to
// be sent once the steps' storage writes are durable. Per destination,
// what is sent and what waits together keep the order of out.
func SendEarly(waiting, out []Envelope, send func(Envelope)) []Envelope {
	var blocked []NodeID // destinations with a waiting message; few
	for _, env := range waiting {
		if !slices.Contains(blocked, env.To) {
			blocked = append(blocked, env.To)
		}
	}
	for _, env := range out {
		if env.Early && !slices.Contains(blocked, env.To) {
			send(env)
			continue
		}
		if !slices.Contains(blocked, env.To) {
			blocked = append(blocked, env.To)
		}
		waiting = append(waiting, env)
	}
	return waiting
}

func (e Envelope) String() string {
	return fmt.Sprintf("→%s %s%+v", e.To, e.Msg.messageName(), e.Msg)
}

// MessageName returns a short name of m's type, for logs and metrics.
func MessageName(m Message) string { return m.messageName() }

// VolumeOf returns the volume a message is about, for the messages that
// concern one volume.
func VolumeOf(m Message) (VolumeID, bool) {
	switch m := m.(type) {
	case *ClientRequest:
		return m.Volume, true
	case *ClientReply:
		return m.Volume, true
	case *Forward:
		return m.Volume, true
	case *Ack:
		return m.Volume, true
	case *QueryUp:
		return m.Volume, true
	case *SyncRequest:
		return m.Volume, true
	case *SyncReply:
		return m.Volume, true
	case *Durable:
		return m.Volume, true
	case *SnapshotChunk:
		return m.Volume, true
	case *NewConfig:
		return m.Config.Volume, true
	case *Ship:
		return m.Volume, true
	case *ShipAck:
		return m.Volume, true
	case *Fetch:
		return m.Volume, true
	case *Fetched:
		return m.Volume, true
	}
	return 0, false
}

// ClientRequest asks the chain to execute one operation: an update at the
// head, a query at the tail.
type ClientRequest struct {
	Volume VolumeID
	Epoch  Epoch
	Client ClientID
	// ReqNo numbers the client's requests from 1; a retry reuses it.
	ReqNo uint64
	// AckedBelow tells the chain the client has received replies for every
	// request numbered below it, so their outcomes may be forgotten.
	AckedBelow uint64
	// ExpectSession is set once the client has received a reply to one of
	// its updates: the chain then knows it, and a missing session means it
	// was evicted (ErrSessionExpired) rather than new.
	ExpectSession bool
	Op            Op
	// MinVersion is, for a query on a causal volume, the newest version
	// of the key the client has seen (an SN; 0: none). A member that has
	// not applied it passes the query to its predecessor (ChainReaction
	// §III-C); OpWaitStable waits until it is stable.
	MinVersion SN
	// Keyspaces is the version of the keyspace list the client routed
	// the key with (KeyspacesVersion: the number of keyspaces and of
	// their splits; 0: routed without keyspaces, as experiments do). A
	// server that knows another version refuses the request (ErrKeyspaces, or
	// ErrUnavailable while it is the one behind), so no key is served by
	// a volume of the wrong keyspace.
	Keyspaces uint32
	// Deps are, for an update on a geo volume, the versions it depends
	// on (the client's nearest dependencies: its last write and what it
	// read since); TS is the largest timestamp in the client's causal
	// past, so the update's is larger (docs/adr/0013-sites-and-geo-causal.md).
	Deps []Dep
	TS   uint64
	// User is the user a proxy sends the request for (the Redis user its
	// connection authenticated as); empty: the sender's own. Servers
	// honour it only from a proxy's certificate (Caller.Principal).
	User string
	// FromSite is set on a request the head of a hierarchical volume
	// forwarded to the head of its sibling at the key's primary site: the
	// forwarding site (0: the request comes from a client). The receiver
	// answers the forwarding head, which answers the client, and forwards
	// it no further (docs/adr/0016-hierarchical-replication-control.md).
	FromSite SiteID
	// Sites is, for an update, how many sites (this one included) must
	// hold it stable before it is answered (durability across sites;
	// 0 and 1: this site's). A head whose volume's keyspace is
	// replicated by fewer sites refuses it (ErrTooManySites).
	Sites uint32
	// Caller is who sent the request, as the receiving transport proved
	// it. It is not part of the encoding.
	Caller Caller
}

// ClientReply answers a ClientRequest.
type ClientReply struct {
	Volume VolumeID
	Client ClientID
	ReqNo  uint64
	Err    ErrCode
	Result Result
	// Config is the server's configuration, sent with ErrWrongEpoch when
	// the server's is newer than the client's.
	Config *Config
	// Epoch and Position say which member answered (its index in the
	// chain of that epoch); Stable that the version answered, Result.SN,
	// is processed by the tail. Causal clients keep them as metadata
	// (ChainReaction's version and chainIndex).
	Epoch    Epoch
	Position int
	Stable   bool
	// Sites are, with ErrKeyspaceMissing, the sites of the volume's
	// keyspace whose masters have no such keyspace.
	Sites []SiteID
}

// Forward carries updates from a replica to its successor, in SN order.
type Forward struct {
	Volume  VolumeID
	Epoch   Epoch
	Updates []Update
}

// Ack tells a predecessor that every update up to SN was processed by the
// tail (cumulative). It travels from the tail to the head.
type Ack struct {
	Volume VolumeID
	Epoch  Epoch
	SN     SN
	// Shipped is, in a geo volume, how many of this site's updates of
	// the volume every other site holds stable: members drop them from
	// their shipping logs.
	Shipped uint64
	// ShippedTo is, in a hierarchical volume, the same per other site,
	// as the tail knows it: the head releases control once every site
	// of the active view holds its updates, whatever a site outside it
	// lacks (empty elsewhere).
	ShippedTo Vector
	// Relayed is, in a hierarchical volume, per other origin site, how
	// many of its updates every site holds stable as the tail knows it:
	// members drop them from their relay logs (ADR 16).
	Relayed Vector
}

// SyncRequest opens a predecessor link in an epoch (CR §3 Fig. 3, message
// 2): the successor reports the last SN it has, so the predecessor resends
// the rest of its Sent list. A joining server asks for a snapshot instead.
// The successor repeats it until answered.
type SyncRequest struct {
	Volume       VolumeID
	Epoch        Epoch
	AppliedSN    SN
	CommittedSN  SN
	NeedSnapshot bool
	// AppliedEpoch is the Update.Epoch of the update at AppliedSN (0:
	// unknown). A joining server that kept its state (a restart, a
	// removal) sets it with NeedSnapshot: the predecessor sends only the
	// updates after AppliedSN when its own update there carries the
	// same epoch and it still holds the rest (catch-up), a snapshot
	// otherwise.
	AppliedEpoch Epoch
	// Transfer names, with NeedSnapshot, the state transfer the joining
	// server asks for. Repeats of a request (every SyncRetryInterval
	// until an answer arrives) carry the same name, and the predecessor
	// answers a name once per epoch: each answer is a whole snapshot,
	// and a predecessor slower to send one than its joiner is to ask
	// again would otherwise never finish any. The joiner names a new
	// transfer when it gives one up (a chunk lost, the link reset, no
	// answer for a while).
	Transfer TransferID
}

// TransferID names one state transfer (a snapshot or a catch-up) a
// joining server asked for: its process's incarnation and a count of the
// transfers that process asked for. The zero value names none.
type TransferID struct {
	Incarnation uint64
	Attempt     uint64
}

// SyncReply answers a SyncRequest. Forwards follow it on the FIFO link.
// PredecessorAppliedSN is what the predecessor had applied when it
// answered; a newly promoted tail serves queries only once it has applied
// that much (the extension hand-off).
type SyncReply struct {
	Volume               VolumeID
	Epoch                Epoch
	PredecessorAppliedSN SN
	// PredecessorComplete says the predecessor holds every update the
	// chain has answered (VolumeStatus.Complete): a causal successor
	// that holds PredecessorAppliedSN then holds them too.
	PredecessorComplete bool
	// CatchUp answers a joining server's SyncRequest: its state at
	// AppliedSN is a prefix of the predecessor's history, and forwards
	// of the updates after it follow instead of a snapshot.
	CatchUp bool
	// Transfer is, in an answer that starts a state transfer (a snapshot
	// or a catch-up), the SyncRequest.Transfer it answers; the zero value
	// otherwise. A joining server takes only the transfer it asked for
	// last.
	Transfer TransferID
	// PredecessorDurableSN is the Durable.SN the predecessor would send
	// now: the successor's starting point in this epoch.
	PredecessorDurableSN SN
}

// KeyValue is one stored object in a snapshot. In a geo volume Deleted
// objects (tombstones) travel too, with their Stamp.
type KeyValue struct {
	Key     string
	Value   []byte
	Deleted bool
	Stamp   Stamp
	// Expires is the object's deadline (0: none), Type its type.
	// Appended after release 0.1.0.
	Expires Time
	Type    ObjectType
}

// SessionRecord is one client's exactly-once state in a snapshot.
type SessionRecord struct {
	Client     ClientID
	AckedBelow uint64
	LastSN     SN
	Outcomes   []Outcome
}

// Outcome is the recorded result of one executed update.
type Outcome struct {
	ReqNo  uint64
	Result Result
}

// SnapshotChunk carries part of a volume's state from the tail to a joining
// server (CR §3 "Extending a Chain"). Chunks of one transfer share
// SnapshotSN and are numbered from 0; the last one has Last set.
type SnapshotChunk struct {
	Volume     VolumeID
	Epoch      Epoch
	SnapshotSN SN
	Seq        int
	Objects    []KeyValue
	Sessions   []SessionRecord
	Last       bool
	// Vector (in the last chunk) is the snapshot's version vector, and
	// ShipLog the updates of this site not yet stable at every other
	// site (geo volumes).
	Vector  Vector
	ShipLog []Update
	// SnapshotEpoch is the Update.Epoch of the update at SnapshotSN.
	SnapshotEpoch Epoch
	// Split (in the last chunk) is where the snapshot's history passed
	// the volume's latest split, if it did: a joining server reports it
	// as its own (VolumeStatus.Split), so the master learns the point
	// from a chain whose members all joined after it (chain/split.go).
	Split SplitPoint
}

// Seed reports whether the status is of a split's seed that has not
// started (VolumeStatus.Split): the state of volume Volume at Split.SN−1,
// waiting for the master's first configuration of it.
func (s VolumeStatus) Seed() bool { return s.Split.Into == s.Volume && !s.Split.IsZero() }

// VolumeStatus is a server's report on one volume, in heartbeats.
type VolumeStatus struct {
	Volume      VolumeID
	Epoch       Epoch
	AppliedSN   SN
	CommittedSN SN
	// JoinerReady is set by the tail when its joining server has installed
	// the snapshot and caught up: the master may make it the tail.
	JoinerReady bool
	// Complete says this member holds every update the chain has
	// answered (always, in a strong chain, where nothing is answered
	// before the tail has it). In a causal chain only the first k
	// members are sure to; one that moved into the first k because
	// members before it left is complete once it caught up with its
	// predecessor. The master never removes a failed member that may be
	// the last complete one (docs/adr/0010-causal-mode.md).
	Complete bool
	// Stable is, in a geo volume, the version vector of the updates this
	// member knows are stable (processed by the tail).
	Stable Vector
	// Shipped is, at the tail of a geo volume, how many of this site's
	// updates each other site holds stable, as its head last answered
	// (ShipAck.Stable): the shipping lag to site s is Stable[own] −
	// Shipped[s]. Empty at other members.
	Shipped Vector
	// StalledFor is, at a head or middle member, how long it has held
	// updates for its successor without the acknowledgements from down
	// the chain advancing (since the epoch began, since its Sent list was
	// last empty, or since the last acknowledgement that advanced, the
	// latest of the three); 0 when it holds none, and at the tail. A link
	// to the successor that carries nothing in either direction stalls
	// it, and so does any link further down: the master cuts the last
	// member reporting a stall from its successor (master/links.go).
	StalledFor Time
	// Control is, at the head of a hierarchical volume, the keys and
	// prefixes some site controls (a primary elected for them), in path
	// order, at most ControlReportMax of them. Empty elsewhere.
	Control []PathControl
	// ShippingAge is, at the tail of a geo volume, per other site in
	// site order, how long ago the oldest of this site's updates that
	// site does not hold stable was written (0: it holds them all): the
	// shipping lag in time. Empty at other members.
	ShippingAge []SiteTime
	// Split is where this replica's history passed the volume's latest
	// split (chain/split.go), whether it seeded the sibling there (a
	// member then) or not (a joining server, or one that joined later);
	// zero if it has not passed it. A status whose Split.Into is its
	// own Volume reports a split's seed instead (Seed): the master starts
	// the sibling's chain on the servers holding a seed at the point the
	// parent's tail reports.
	Split SplitPoint
	// Watches is how many watches (OpWatch long polls) the replica holds
	// (chain/watch.go), for the status page.
	Watches uint64
}

// ControlReportMax bounds VolumeStatus.Control.
const ControlReportMax = 16

// PathControl is one key, or (Deep) one prefix of keys, that Site
// controls in a hierarchical keyspace: the primary the other sites
// forward its reads and writes to.
type PathControl struct {
	// Path is the key or prefix, the keyspace's prefix included.
	Path string
	Site SiteID
	Deep bool
}

// Heartbeat tells the master a server is alive and asks for a lease.
type Heartbeat struct {
	// Incarnation changes each time the server process starts.
	Incarnation uint64
	// SentAt is the server's clock when sending; the lease it obtains runs
	// from SentAt, so it never outlasts what the master granted.
	SentAt  Time
	Volumes []VolumeStatus
	// Heard is the SentAt that the newest HeartbeatReply the server has
	// received echoed (0 before the first): the master tells from it a
	// server that reaches it but does not hear its replies.
	Heard Time
	// AuthVersion is the version of the users and roles the server
	// holds (AuthTable.Version; 0: none): the master sends a newer table
	// with its reply.
	AuthVersion uint64
	// NewDataDir says this process created the server's data directory:
	// a master that never heard of the server registers it as new; one
	// that did knows the directory was wiped or replaced, and removes the
	// server from its chains like any restarted one.
	NewDataDir bool
	// MinProtocol and MaxProtocol bound the protocol versions the
	// server speaks (internal/release): the master raises the cluster
	// version only to one every server speaks.
	MinProtocol, MaxProtocol uint32
}

// HeartbeatReply grants (or refuses) a lease and sends the configurations
// the server is missing.
type HeartbeatReply struct {
	SentAt Time // echoed from the Heartbeat
	// LeaseGranted promises the master installs no configuration without
	// this server before the lease has expired.
	LeaseGranted bool
	LeaseFor     Time
	Configs      []Config
	// Keyspaces are every keyspace, the default first: servers check
	// requests against them (ClientRequest.Keyspaces).
	Keyspaces []Keyspace
	// Sites are the sites of the deployment (empty: one site).
	Sites []Site
	// Stable is, for the geo volumes, what the site's members reported
	// stable (the master's soft state): heads apply an update from
	// another site once its dependencies are stable by this table.
	Stable []VolumeVector
	// Cluster is the deployment's name (empty: one site): a server
	// sends it with what it sends to other sites, and refuses what
	// comes from another deployment.
	Cluster string
	// Auth is the master's users and roles (without password hashes),
	// sent when the heartbeat's AuthVersion is older; nil otherwise.
	Auth *AuthTable
	// Returning says the master knew an earlier process of this server:
	// this one is not its first, so it may become a member of a chain
	// only through a snapshot, never while it holds nothing of the volume
	// (a server whose data directory was wiped believes it starts anew).
	Returning bool
	// ClusterVersion is the protocol version the cluster runs at (the
	// master's, raised by catena upgrade finalize): a behaviour that
	// needs version v is used only once it is at least v. A server that
	// speaks no version this high stops (docs/upgrades.md).
	ClusterVersion uint32
	// WallTime is the master's clock when it replied (0 from release
	// 0.1.0): with SentAt the server measures its clock's offset from
	// the master's, and answers nothing about deadlines while it is
	// beyond the bound (docs/adr/0028). Appended after release 0.1.0.
	WallTime Time
}

// NewConfig pushes a volume's new configuration to a server.
type NewConfig struct{ Config Config }

// ConfigRequest asks the master for the current configurations. A
// server asking another site's masters names its deployment (Cluster); a
// master of another deployment refuses it (its ConfigReply carries no
// configuration, and its own Cluster). Clients leave it empty.
type ConfigRequest struct {
	Cluster string
}

// ConfigReply answers ConfigRequest. Masters lists the master's members
// and Leader the one the answering member believes leads ("" if none), so
// a client that knows one member's address finds them all.
type ConfigReply struct {
	Configs []Config
	Masters []NodeID
	Leader  NodeID
	// Keyspaces route keys to volumes (the default keyspace first).
	Keyspaces []Keyspace
	// Cluster is the answering master's deployment name (empty: one
	// site); a server ignores another site's reply of another deployment.
	Cluster string
	// ClusterVersion is the protocol version the cluster runs at (0
	// from a master of release 0.1.0: version 1). A client sends no
	// operation that needs a later version before it is reached.
	ClusterVersion uint32
}

// StatusRequest asks the master for the cluster's state (catena status).
type StatusRequest struct{}

// ServerStatus is the master's view of one server.
type ServerStatus struct {
	ID          NodeID
	Alive       bool
	Incarnation uint64
	Volumes     []VolumeStatus
	// MinProtocol and MaxProtocol are the versions its last heartbeat
	// said it speaks (0: none heard).
	MinProtocol, MaxProtocol uint32
}

// StatusReply answers StatusRequest with the answering master member's
// view; the leader's view of servers is the current one.
type StatusReply struct {
	Configs   []Config
	Servers   []ServerStatus
	Masters   []NodeID
	Leader    NodeID
	Keyspaces []Keyspace
	// Site is the answering master's site and Sites the deployment's
	// (0 and empty: one site).
	Site  SiteID
	Sites []Site
	// Cluster is the deployment's name (empty: one site), which every
	// site's masters share (Ship.Cluster).
	Cluster string
	// ClusterVersion is the protocol version the cluster runs at.
	ClusterVersion uint32
}

// Hello is the first frame on every connection: it names the node that
// opened it, so replies and resets can be attributed, and the protocol
// versions it speaks (internal/release). The accepting end answers with
// a Hello of its own; either end closes a connection whose ranges do not
// meet (docs/adr/0026, step 4).
type Hello struct {
	From NodeID
	// MinProtocol and MaxProtocol bound the versions From speaks.
	MinProtocol, MaxProtocol uint32
}

// PeerReset is delivered by the transport, not sent by a node: the link to
// Peer broke and was re-established, so messages in flight may be lost.
// The chain protocol re-synchronises the link (the reliable FIFO channel of
// CR §3 is built from this and SyncRequest).
type PeerReset struct{ Peer NodeID }

// RaftMessage carries one Raft message between master members; Data is
// the raftpb.Message encoding.
type RaftMessage struct{ Data []byte }

// QueryUp passes a causal query up the chain: the member that received
// it has not applied the version the client requires (ChainReaction
// §III-C: after a reconfiguration a client's chain position may name a
// member that lacks its version). The predecessor answers the client,
// ReplyTo, or passes it further up.
type QueryUp struct {
	Volume  VolumeID
	Epoch   Epoch
	ReplyTo NodeID
	Request ClientRequest
}

// KeyspaceRequest asks the master leader to create a keyspace (catena
// keyspace create). Name, Prefix, Mode, K, ReplicationFactor and Volumes
// are the request; the master chooses FirstVolume. Creating a keyspace
// that exists with the same settings succeeds again (a retry).
type KeyspaceRequest struct {
	Create Keyspace
	// Override, when set, asks instead for an operator's override of
	// an existing hierarchical keyspace (Keyspace.Grace or Reassign);
	// Create is then not used.
	Override *OverrideRequest
	// Split, when set, names a keyspace whose volumes to double instead
	// (catena keyspace split, docs/adr/0031), from Create.Splits splits
	// to one more: a request repeated after it was applied splits
	// nothing again. The reply comes once the split began: every volume
	// refuses the keys that move, and their new volumes start as soon as
	// each volume's chain has split.
	Split string
	// Caller is who sent the request, as the receiving transport proved
	// it (with users, only a user with role admin may create a
	// keyspace); not part of the encoding.
	Caller Caller
}

// OverrideRequest asks for the next generation (one more than the
// keyspace's) of an operator's override of a hierarchical keyspace: its
// grace view (Reassign false: this site and a majority of the
// keyspace's sites) or the sites whose keys it reassigns (Reassign: a
// relaxed keyspace's sites, not this one). A request repeated after it
// was applied changes nothing.
type OverrideRequest struct {
	Keyspace string
	Reassign bool
	Override Override
}

// KeyspaceReply answers a KeyspaceRequest once the keyspace is in the
// master's state (Err empty; Keyspaces holds every keyspace), or says
// why it was refused (Err; nothing changed).
type KeyspaceReply struct {
	Err       string
	Keyspaces []Keyspace
}

// Ship carries updates that originated at site Origin from the tail of a
// volume's chain there (OriginVolume) to the head of its sibling chain at
// another site (Volume), in the order of Stamp.N with no gap.
type Ship struct {
	Volume       VolumeID
	Origin       SiteID
	OriginVolume VolumeID
	Updates      []Update
	// Cluster is the shipper's deployment name: a head of another
	// deployment applies nothing and answers ErrWrongCluster.
	Cluster string
	// Sender is the shipping site: Origin, or in a hierarchical volume a
	// member of the active view relaying the updates of a site outside
	// it (ADR 16). A receiver refuses a sender outside its view.
	Sender SiteID
	// View is the number of the sender's active view (hierarchical
	// volumes): a receiver refuses a shipment older than the view that
	// last admitted its sender, which a returning site may have sent
	// before it left (docs/adr/0016).
	View uint64
}

// ShipAck answers Ship, to the shipper's volume (Volume): Received is how
// many of the shipper's site's updates site Site has applied or queued
// (the shipper goes on after it), Stable how many are stable there (the
// origin drops them from its shipping log). ErrUnavailable: a gap, the
// shipper goes back to Received. A receiver that is not the head says
// ErrNotHead, with its configuration when it has one.
type ShipAck struct {
	Volume   VolumeID
	Site     SiteID
	Err      ErrCode
	Received uint64
	Stable   uint64
	Config   *Config
	// Origin is the site whose updates Received and Stable count: the
	// Ship's Origin (another than the shipper's when it relays).
	Origin SiteID
}

// AuthRequest asks the master leader to change the users and roles, or
// for them (catena user, catena role, a proxy fetching the users it
// authenticates): Change says what. ID identifies the request across
// the client's retries. A change is answered once it is in the master's
// state, or refused with the reason (nothing changed).
type AuthRequest struct {
	ID     uint64
	Change AuthChange
	// Caller is who sent the request, as the receiving transport proved
	// it; not part of the encoding.
	Caller Caller
}

// AuthReply answers an AuthRequest: Err says why it was refused (nothing
// changed), or Table holds the users and roles after it (password hashes
// redacted, except for a proxy's AuthFetch).
type AuthReply struct {
	ID    uint64
	Err   string
	Table AuthTable
}

// NewAuth pushes the master's users and roles (without password hashes)
// to a server when they change.
type NewAuth struct{ Table AuthTable }

// Control is one hierarchical-control message between two sites'
// replicas of a control domain (a keyspace's volume: Keyspace and
// Domain name it, since each site numbers its volumes itself).
type Control struct {
	Kind     ControlKind
	Keyspace string
	Domain   uint32
	// From is the sending site, To the receiving one: a site refuses a
	// message from a site outside its active view, or meant for another.
	From, To SiteID
	Ballot   Ballot
	// Path is a key, or a prefix ending in PathSeparator (deep control).
	Path string
	Deep bool
	// Granted, Holder and HolderBallot: a vote's answer (ControlVote,
	// ControlAccepted).
	Granted      bool
	Holder       SiteID
	HolderBallot Ballot
	// Err says why a message was refused (ControlVote, ControlAccepted): a sender outside
	// the view, a bad path. Nothing changed at the receiver.
	Err ErrCode
	// View is the proposed view (a Propose or Accept on ViewPath, echoed
	// by a refused Vote and by Accepted), the view accepted before (a
	// promise: a granted Vote on ViewPath with HolderBallot set), the
	// decided one (ControlView), or the sender's (a refusal with
	// ErrNotInView or ErrStaleView, ControlJoin, ControlJoined).
	View View
	// Vector is, on a lease request, the asking tail's updates per
	// origin site, and on a grant the granting head's stable ones: the
	// sites learn what each holds (resynchronisation, relay logs).
	Vector Vector
}

// Fetch asks the tail of a hierarchical volume at another site for its
// copies of some keys: a returning site restores the keys its writes
// that the other sites gave up touched (rejoin.go). Cluster is the
// asker's deployment, as in Ship.
type Fetch struct {
	Volume       VolumeID
	Site         SiteID
	OriginVolume VolumeID
	Keys         []string
	Cluster      string
}

// Fetched answers Fetch, to the asker's volume: the answerer's copies of
// the keys (a missing key as deleted, with no stamp), and its applied
// updates per origin site when it read them.
type Fetched struct {
	Volume  VolumeID
	Site    SiteID
	Objects []KeyValue
	Vector  Vector
}

// Moved answers a message another site sent to the head or the tail of
// a volume at site Site (Control, Fetch) when the receiver holds that
// role no more: Config is the volume's configuration as the receiver
// knows it, so the sender routes its next message to the new head or
// tail at once instead of after rounds of silence.
type Moved struct {
	Site   SiteID
	Config Config
}

// Durable tells the successor, in a chain whose members forward updates
// before their own commit (chain/durable.go), that the sender and every
// member before it hold every update up to SN on disk. The tail answers
// an update only once its own disk and this report both cover it.
type Durable struct {
	Volume VolumeID
	Epoch  Epoch
	SN     SN
}

// VersionRequest asks a master member which release and protocol
// versions it speaks, and the cluster version (Finalize 0: any member
// answers for itself); or, with Finalize, asks the leader to raise the
// cluster version to Finalize (an admin's request: catena upgrade
// finalize), which it does only when every server speaks it.
type VersionRequest struct {
	Finalize uint32
	// Caller is who sent it, as the transport's certificate check found
	// (not encoded).
	Caller Caller
}

// VersionReply answers a VersionRequest: the answering member's release
// and protocol range, the cluster version, and the leader as it knows
// it; Err says why a finalize was refused.
type VersionReply struct {
	Err                      string
	Release                  string
	MinProtocol, MaxProtocol uint32
	ClusterVersion           uint32
	Leader                   NodeID
}

func (*Ship) messageName() string            { return "Ship" }
func (*ShipAck) messageName() string         { return "ShipAck" }
func (*ClientRequest) messageName() string   { return "ClientRequest" }
func (*ClientReply) messageName() string     { return "ClientReply" }
func (*Forward) messageName() string         { return "Forward" }
func (*Ack) messageName() string             { return "Ack" }
func (*QueryUp) messageName() string         { return "QueryUp" }
func (*KeyspaceRequest) messageName() string { return "KeyspaceRequest" }
func (*KeyspaceReply) messageName() string   { return "KeyspaceReply" }
func (*SyncRequest) messageName() string     { return "SyncRequest" }
func (*SyncReply) messageName() string       { return "SyncReply" }
func (*SnapshotChunk) messageName() string   { return "SnapshotChunk" }
func (*Heartbeat) messageName() string       { return "Heartbeat" }
func (*HeartbeatReply) messageName() string  { return "HeartbeatReply" }
func (*NewConfig) messageName() string       { return "NewConfig" }
func (*ConfigRequest) messageName() string   { return "ConfigRequest" }
func (*ConfigReply) messageName() string     { return "ConfigReply" }
func (*PeerReset) messageName() string       { return "PeerReset" }
func (*StatusRequest) messageName() string   { return "StatusRequest" }
func (*StatusReply) messageName() string     { return "StatusReply" }
func (*Hello) messageName() string           { return "Hello" }
func (*RaftMessage) messageName() string     { return "RaftMessage" }
func (*AuthRequest) messageName() string     { return "AuthRequest" }
func (*AuthReply) messageName() string       { return "AuthReply" }
func (*NewAuth) messageName() string         { return "NewAuth" }
func (*Control) messageName() string         { return "Control" }
func (*Fetch) messageName() string           { return "Fetch" }
func (*Fetched) messageName() string         { return "Fetched" }
func (*Moved) messageName() string           { return "Moved" }
func (*Durable) messageName() string         { return "Durable" }
func (*VersionRequest) messageName() string  { return "VersionRequest" }
func (*VersionReply) messageName() string    { return "VersionReply" }
