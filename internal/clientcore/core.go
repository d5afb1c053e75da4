// Package clientcore is Catena's client as a deterministic state machine,
// in the manner of etcd raft's RawNode: operations (with deadlines),
// replies, configurations and ticks go in; requests to send and finished
// operations with typed outcomes come out. It does no I/O, reads no clock
// and draws randomness only from the source it is given, so the Go
// client (package client), the simulator's clients and every front end
// run the same code, and the simulator checks the code users run.
//
// The core owns everything a client must get right for chain
// replication's guarantees to reach the user:
//
//   - routing: a key's volume, the volume's configuration, and the member
//     the request goes to (Routing, per request Consistency);
//   - request ids: each operation gets a request number once, and every
//     retry reuses it, so the chain applies an update exactly once
//     (docs/adr/0003-exactly-once-and-extension.md);
//   - the exactly-once window: AckedBelow tells the chain which outcomes
//     it may forget, and no update is sent beyond the window the chain
//     keeps outcomes for;
//   - retries: resend after an attempt timeout, back off exponentially
//     after error replies, go to the tail when a member finds a key dirty;
//   - configuration refresh: adopt a newer configuration a server sends
//     with ErrWrongEpoch, and ask the master when none came;
//   - outcomes: an update whose outcome is unknown when its deadline
//     passes is Ambiguous, never reported failed.
//
// A driver feeds the core (Start, Step, Tick, Cancel) and after each call
// takes its output with Ready: the messages to send, the operations that
// finished, and the configurations adopted (so it can open connections to
// their members). NextTimer says when the driver must call Tick next.
package clientcore

import (
	"errors"
	"fmt"
	"github.com/catena-kv/catena/internal/release"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// OpID identifies an operation of one client. It is the request number
// the chain sees: numbered from 1, never reused, the same on every retry.
type OpID uint64

// Outcome is how an operation ended.
type Outcome uint8

const (
	// OK: the chain executed the operation; Done.Result holds what it
	// returned (its Status may still say compare-failed, not-integer...).
	OK Outcome = iota + 1
	// Ambiguous: an update was sent but its outcome is unknown (deadline,
	// cancellation, or the chain forgot the client's session): it may or
	// may not have been applied, now or later. The rule: an update given
	// up on is Ambiguous once an attempt of it left the core, unless its
	// only attempt was refused by an error that applies nothing
	// (refusal); a refusal of a retry, or one a head sends for a write it
	// forwarded to another site, proves nothing about the other attempts.
	Ambiguous
	// Unavailable: nothing was applied. No server answered a query, or an
	// update never left the client, before the deadline; or a
	// GET-TRANSACTION gave up (Err is ErrContention: its rounds never
	// agreed, though servers answered).
	Unavailable
	// Invalid: the operation was refused as malformed; retrying will not help.
	Invalid
	// Refused: authorization is on and a server refused the operation:
	// its user may not run it (ErrDenied), or is not a user the cluster
	// knows (ErrUnauthenticated). Nothing was applied; retrying will not
	// help until an administrator changes the user's roles.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Ambiguous:
		return "ambiguous"
	case Unavailable:
		return "unavailable"
	case Invalid:
		return "invalid"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Done is a finished operation.
type Done struct {
	ID      OpID
	Op      wire.Op
	Outcome Outcome
	// Result is what the chain returned (Outcome OK).
	Result wire.Result
	// Err says why an operation did not end OK: ErrDeadline, the cause
	// given to Cancel, ErrSessionLost, or why it is invalid.
	Err error
	// Volume is the volume the key belongs to (valid once the core knew
	// the configuration); From the member that answered (OK).
	Volume wire.VolumeID
	From   wire.NodeID
	// Attempts counts the requests sent for the operation (for a
	// GET-TRANSACTION, its rounds).
	Attempts int
	// Txn is a finished GET-TRANSACTION's result (StartTransaction).
	Txn *TxnResult
	// Watch is a watch's page, Result.Value decoded (StartWatch; nil if
	// it did not decode).
	Watch *wire.WatchPage
}

// CallOptions tune one operation.
type CallOptions struct {
	// Deadline ends the operation (Ambiguous or Unavailable) if it has no
	// answer by then; 0 retries until answered.
	Deadline wire.Time
	// Consistency says which replicas may answer a read; updates ignore it.
	Consistency Consistency
	// User is the user a proxy sends the operation for (the Redis user
	// its connection authenticated as; wire.ClientRequest.User); empty:
	// the client's own, its certificate's.
	User string
	// Sites, for an update of a keyspace replicated by several sites, is
	// how many sites (this one included) must hold it stable before it
	// is answered (durability across sites, geo.go). More than the
	// keyspace's sites is refused by the head (ErrTooManySites, nothing
	// applied). 0 and 1: this site's k replicas, the default. Queries
	// ignore it.
	Sites int
}

// Causes in Done.Err.
var (
	// ErrDeadline: the operation's deadline passed without an answer.
	ErrDeadline = errors.New("deadline passed")
	// ErrSessionLost: the chain no longer holds the client's exactly-once
	// session (evicted, or the request is older than the outcomes kept).
	ErrSessionLost = errors.New("the chain no longer holds this client's session")
	// ErrNotShipped: an update that asked for several sites was applied
	// here, but its wait for the other sites was refused (Ambiguous).
	ErrNotShipped = errors.New("applied at this site, but not confirmed at the sites it asked for")
	// ErrExpiryUnsupported: the operation sets a deadline, and the
	// cluster does not run at the protocol version that brings them yet,
	// or the key's keyspace is not strong (docs/adr/0028).
	ErrExpiryUnsupported = errors.New("keys cannot expire here")
	// ErrHashesUnsupported: the operation is a hash's, and the cluster
	// does not run at the protocol version that brings them yet, or the
	// key's keyspace spans sites (docs/adr/0029).
	ErrHashesUnsupported = errors.New("hashes are not available here")
	// ErrExportUnsupported: an export (a backup's read) before the
	// cluster runs at the protocol version that brings it.
	ErrExportUnsupported = errors.New("exports are not available here")
	// ErrWatchUnsupported: a watch before the cluster runs at the
	// protocol version that brings them, or of a keyspace that is not
	// strong (docs/adr/0032).
	ErrWatchUnsupported = errors.New("watches are not available here")
	// ErrRefused: a server refused the request as malformed.
	ErrRefused = errors.New("refused by the server as malformed")
	// ErrUnknownVersion: a causal read asked for a version of the key
	// that no member of its chain holds: the client's metadata named
	// updates the chain lost. The core forgets the key's metadata.
	ErrUnknownVersion = errors.New("no replica holds the version of the key this client has seen (updates lost to more than k-1 failures)")
	// ErrDenied: the operation's user may not read (or write) the key.
	ErrDenied = errors.New("permission denied: the user may not do this to the key (catena role grant)")
	// ErrUnauthenticated: the operation's user is not a user of the
	// cluster (deleted, or the client has no certificate) while
	// authorization is on.
	ErrUnauthenticated = errors.New("not authenticated: the cluster has users and this client's certificate names none of them")
	// ErrTooManySites: an update asked for more sites (CallOptions.Sites)
	// than replicate its keyspace; the head refused it, nothing was
	// applied (Invalid). The error names the keyspace and its sites.
	ErrTooManySites = errors.New("too many sites")
	// ErrKeyspaceMissing: a hierarchical keyspace is not created at
	// enough of the sites it names for any to serve its keys; nothing
	// was applied (Unavailable; the error is a *KeyspaceMissingError
	// naming them).
	ErrKeyspaceMissing = errors.New("keyspace missing at its sites")
	// ErrInFlightLimit: the client's connection to the server had as
	// many requests waiting there as the server allows one connection
	// (catena server -client-inflight-max); the server refused the
	// request unread.
	ErrInFlightLimit = errors.New("too many requests in flight: the server refused the request, this connection had as many waiting there as it allows one")
)

// Options configure a Core. Zero durations take the defaults below.
type Options struct {
	// Client identifies the client's exactly-once session: unique among
	// the clients of a cluster.
	Client wire.ClientID
	// Masters are the master members to ask for configurations; the
	// core adds the members the masters name.
	Masters []wire.NodeID
	// Configs are configurations known from the start (experiments
	// without a master); normally the core learns them from the master.
	Configs []wire.Config
	// Volumes is the number of volumes keys hash to; 0: as many as the
	// configurations the master sends.
	Volumes int
	// VolumeOf, when set, replaces the key hash (experiments that place
	// objects on volumes themselves).
	VolumeOf func(key string) wire.VolumeID
	// Routing picks members; nil is chain replication's.
	Routing Routing
	// Rand draws the member an AnyMember read goes to. Required.
	Rand *rand.Rand
	// AttemptTimeout: an attempt unanswered this long is sent again and
	// the configuration refreshed. Negative: never resend an unanswered
	// attempt (experiments whose clients wait for their deadline).
	AttemptTimeout wire.Time
	// RetryBackoff is the wait after an error reply before the first
	// retry; it doubles per further error of the same operation, up to
	// RetryBackoffMax.
	RetryBackoff    wire.Time
	RetryBackoffMax wire.Time
	// ConfigRefreshMin spaces requests for the configuration.
	ConfigRefreshMin wire.Time
	// WindowMax is how many request numbers above the lowest unanswered
	// update the chain keeps outcomes for (chain.Limits.
	// OutcomesPerClientMax): an update further up waits. 0: 1024.
	WindowMax uint64
	// After is the causal past across sites of a session that moves here
	// from another site (Core.CausalPast there): the core waits until
	// all of it is stable at this site before it sends any operation, so
	// the session reads its own writes and never goes back in time
	// (docs/adr/0013-sites-and-geo-causal.md). AfterTS goes with it.
	After   []wire.Dep
	AfterTS uint64
	// TxnRoundsMax bounds the rounds of a GET-TRANSACTION; 0: 8.
	TxnRoundsMax int
	// SkipDependencyWait: causal writes go to the head without waiting
	// for the versions they depend on to be stable. An ablation for the
	// experiments (what the wait costs); it breaks causal+ across
	// failures, which the simulator's checker shows. Clients never set it.
	SkipDependencyWait bool
	// CausalReadsAtTail: reads of causal volumes go to the chain's tail,
	// as in ChainReaction's CR-L with k = R (linearizable in the site):
	// an experiment's variant (chainreaction-fig3), not a consistency a
	// deployment offers.
	CausalReadsAtTail bool
	// Mutations deliberately break the core (checker tests only).
	Mutations Mutations
}

// Mutations deliberately break the client core, so tests can show that
// the simulator's checkers catch each kind of client bug. Clients never
// set them.
type Mutations struct {
	// FreshRequestNumberOnRetry: a retry goes out under a new request
	// number, so the chain cannot tell it from a new update.
	FreshRequestNumberOnRetry bool
	// StrongReadsAtHead: strong reads go to the head instead of the tail.
	StrongReadsAtHead bool
	// AmbiguousAsUnavailable: an update given up on after it was sent is
	// reported as not applied.
	AmbiguousAsUnavailable bool
	// CausalReadsAnywhere: causal reads go to any member of the chain
	// without the version the client has seen, as if it kept no
	// metadata.
	CausalReadsAnywhere bool
	// CausalStableAtTail: in a causal volume of one site the client asks
	// the tail, not the head, whether its dependencies are stable (with
	// chain.Mutations.CausalStableAtTail, the tail answers).
	CausalStableAtTail bool
	// CausalNoFloor: causal reads in one site carry only the key's
	// unstable version, not the SN the client knows every member applied.
	CausalNoFloor bool
	// TxnOneRound: a GET-TRANSACTION returns the values of its first
	// round of reads, unchecked.
	TxnOneRound bool
}

// Defaults for Options.
const (
	DefaultAttemptTimeout = 500 * wire.Millisecond
	DefaultRetryBackoff   = 20 * wire.Millisecond
	DefaultWindowMax      = 1024
	retryBackoffMaxFactor = 8
)

// opState is where an operation stands.
type opState uint8

const (
	// opQueued: not sent; waits for a configuration, for the window to
	// move, or for retryAt.
	opQueued opState = iota
	// opSent: a request is out since sentAt.
	opSent
	// opBackoff: an error reply came; the next attempt goes at retryAt.
	opBackoff
)

type operation struct {
	id OpID
	// reqNo is the request number on the wire: id, unless a mutation
	// renumbered the operation.
	reqNo    uint64
	op       wire.Op
	isUpdate bool
	call     CallOptions
	// versionWaitUntil is, for an operation that needs a newer cluster
	// version than the masters said, when the core stops waiting for
	// them to say it (newFeatureRefused).
	versionWaitUntil wire.Time
	state            opState
	sentAt           wire.Time
	// sentTo is the server the last attempt went to.
	sentTo   wire.NodeID
	retryAt  wire.Time
	attempts int
	// errors counts error replies in a row, for the backoff.
	errors int
	// strong: a member found the key dirty or was not a member: read at
	// the Strong target from now on.
	strong bool
	volume wire.VolumeID
	routed bool

	// Causal writes (causal.go): deps are the unstable versions the
	// update depends on (the client's metadata when it started); it is
	// sent once the waits for them, blockedOn, are all answered.
	deps      map[string]KeyVersion
	blockedOn int
	// ownVersion is the unstable version of the written key the update
	// depends on (in volume ownVolume): ordered by SN, so not waited
	// for; the head must have applied it (sent as MinVersion).
	ownVolume  wire.VolumeID
	ownVersion wire.SN
	// geoDeps and geoTS are, for an update on a geo volume, the causal
	// past across sites its attempts carry (fixed at the first), geoSeq
	// how much of the session's it was.
	geoFrozen bool
	geoDeps   []wire.Dep
	geoTS     uint64
	geoSeq    uint64
	// An internal operation waits for one version to be stable
	// (OpWaitStable) on behalf of the updates in dependents; it is not
	// reported in Ready.Done.
	internal   bool
	dependents []OpID
	waitFor    wire.SN
	// arrival is, for an internal wait of a session that moved here, the
	// dependency it waits to see stable (Options.After).
	arrival *wire.Dep
	// shipped is, for an internal OpWaitShipped, the update it waits
	// for enough sites to hold, and shippedFor the operation that wrote
	// it; an update that waits for one has it in shipWait and keeps its
	// answer in shipAnswer until it is done (geo.go).
	shipped    *wire.Dep
	shippedFor OpID
	shipWait   OpID
	shipAnswer Done
	// txn is, for a read of a GET-TRANSACTION, the transaction (txn.go).
	txn OpID
	// heldForMove: the operation waited for the causal past of a
	// session that moved here (geo.go); move: it is that wait itself
	// (StartMove), done once the past is here.
	heldForMove bool
	move        bool
	// scans names, for an operation on a volume (an OpScan, OpExport or
	// OpWatch), the volume (scan.go).
	scans wire.VolumeID
	// compacted lists, for a watch, the members that answered it
	// Compacted, and oldest the page of the one holding the oldest
	// revision (watch.go).
	compacted []wire.NodeID
	oldest    *Done
}

// Ready is the core's output since the last call to Ready.
type Ready struct {
	// Messages are requests to send.
	Messages []wire.Envelope
	// Done are the operations that finished, in the order they did.
	Done []Done
	// Configs are configurations adopted: the driver opens connections
	// to their members (servers answer a client only on a connection the
	// client opened, and the tail answers updates sent to the head).
	Configs []wire.Config
	// Timer is the earliest time a timer was set for since the last
	// Ready (0: none). A driver whose timer fires later re-arms it, with
	// NextTimer or at this time; it need not scan otherwise.
	Timer wire.Time
}

// Core is one client's state machine. It is not safe for concurrent use.
type Core struct {
	opts    Options
	routing Routing
	masters []wire.NodeID
	configs map[wire.VolumeID]wire.Config
	// keyspaces route keys to volumes once the master named them.
	keyspaces []wire.Keyspace
	// clusterVersion is the protocol version the cluster runs at, as
	// the masters last said (0: not said; a 0.1.0 master: 1).
	clusterVersion uint32
	// notMasters holds nodes asked as masters that answered as servers,
	// with the masters they named.
	notMasters map[wire.NodeID][]wire.NodeID
	nextID     OpID
	ops        map[OpID]*operation
	// order holds the ids of ops in increasing order (deterministic scans).
	order []OpID
	// updates holds the ids of unfinished updates in increasing order:
	// the first is the lowest request whose outcome the chain must keep.
	updates []OpID
	// windowSent is the window's end when sendWaitingForWindow last ran:
	// every update waiting for the window to move is at or above it.
	windowSent uint64
	// sessions holds the volumes whose chain answered one of this
	// client's updates: each volume keeps its own session table, and a
	// request expecting a session the volume lacks is told it expired.
	sessions map[wire.VolumeID]bool
	// configAskedAt is when configurations were last requested (-1: never).
	configAskedAt wire.Time
	metadata      keyMetadata
	// floors holds, per causal volume of one site, the highest SN the
	// client learned the tail committed (a stable answer's), so every
	// member applied: its reads there ask for no older snapshot
	// (causalTarget), and its updates elsewhere wait until every member
	// knows it committed (waitForDependencies).
	floors map[wire.VolumeID]floor
	// suspects holds the servers an attempt went unanswered at, and until
	// when causal reads, which any of several members may answer, go to
	// the others (the server may be down until the master removes it).
	suspects map[wire.NodeID]wire.Time
	// geo is the causal past across sites (geo.go).
	geo geoSession
	// waits maps a version some update waits to see stable to the
	// internal operation waiting for it.
	waits map[waitKey]OpID
	// notices are the client's own unstable updates whose stable notice
	// it expects (notice.go).
	notices stableNotices
	// arrivals are the internal waits of a session that moved here from
	// another site (geo.go).
	arrivals []OpID
	// txns are the GET-TRANSACTIONs under way, txnOf the transaction of
	// each read of theirs, startingTxn the one whose read Start starts.
	txns        map[OpID]*txn
	txnOf       map[OpID]OpID
	startingTxn OpID
	// internal counts the internal operations in ops.
	internal int
	// renumbered maps request numbers a mutation gave retries to their
	// operations.
	renumbered map[uint64]OpID

	out Ready
}

// New returns a core with no operation.
func New(o Options) (*Core, error) {
	if o.Rand == nil {
		return nil, errors.New("clientcore: Options.Rand is required")
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.RetryBackoffMax < o.RetryBackoff {
		o.RetryBackoffMax = retryBackoffMaxFactor * o.RetryBackoff
	}
	if o.ConfigRefreshMin <= 0 {
		o.ConfigRefreshMin = o.RetryBackoff
	}
	if o.WindowMax == 0 {
		o.WindowMax = DefaultWindowMax
	}
	if o.TxnRoundsMax <= 0 {
		o.TxnRoundsMax = DefaultTxnRoundsMax
	}
	c := &Core{
		opts: o, routing: o.Routing, masters: slices.Clone(o.Masters),
		configs: map[wire.VolumeID]wire.Config{}, notMasters: map[wire.NodeID][]wire.NodeID{},
		nextID: 1, ops: map[OpID]*operation{}, sessions: map[wire.VolumeID]bool{},
		configAskedAt: -1, metadata: newKeyMetadata(), floors: map[wire.VolumeID]floor{}, suspects: map[wire.NodeID]wire.Time{}, geo: newGeoSession(), renumbered: map[uint64]OpID{}, waits: map[waitKey]OpID{}, notices: newStableNotices(),
	}
	if c.routing == nil {
		c.routing = ChainRouting{}
	}
	for _, cfg := range o.Configs {
		c.adopt(cfg)
	}
	c.out.Configs = nil // known from the start: nothing to announce
	after := slices.Clone(o.After)
	c.geo.inherit(after, o.AfterTS)
	for i := range after {
		c.startArrivalWait(&after[i])
	}
	return c, nil
}

// Ready returns the output accumulated since the last call and clears it.
func (c *Core) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	return rd
}

// Start begins an operation and returns its id. An invalid operation, or
// one whose deadline has passed, finishes at once.
func (c *Core) Start(now wire.Time, op wire.Op, call CallOptions) OpID {
	o := c.newOperation(op, call)
	if op.Kind.NamesVolume() {
		c.finish(now, o, Done{Outcome: Invalid, Err: fmt.Errorf("%w: a %s names its volume (StartScan, StartExport)", kv.ErrBadOp, op.Kind)})
		return o.id
	}
	return c.begin(now, o)
}

// newOperation numbers a new operation.
func (c *Core) newOperation(op wire.Op, call CallOptions) *operation {
	id := c.nextID
	c.nextID++
	return &operation{id: id, reqNo: uint64(id), op: op, isUpdate: !op.Kind.IsQuery(), call: call, txn: c.startingTxn}
}

// begin checks and starts a new operation and returns its id.
func (c *Core) begin(now wire.Time, o *operation) OpID {
	id, op, call := o.id, o.op, o.call
	if err := kv.Validate(op); err != nil {
		c.finish(now, o, Done{Outcome: Invalid, Err: err})
		return id
	}
	if !call.Consistency.Valid() {
		c.finish(now, o, Done{Outcome: Invalid, Err: fmt.Errorf("unknown consistency %d", call.Consistency)})
		return id
	}
	if call.Deadline != 0 && now >= call.Deadline {
		c.finish(now, o, Done{Outcome: Unavailable, Err: ErrDeadline})
		return id
	}
	c.ops[id] = o
	c.order = append(c.order, id)
	if call.Deadline != 0 {
		c.armAt(call.Deadline)
	}
	if o.isUpdate {
		c.updates = append(c.updates, id)
	}
	if c.holdForArrival(o) {
		return id
	}
	if o.isUpdate && c.waitForDependencies(now, o) {
		return id
	}
	c.send(now, o)
	return id
}

// versionError is a refusal for the cluster version: the masters may
// yet raise it (a new cluster's first moments).
type versionError struct{ error }

func (e versionError) Unwrap() error { return e.error }

// versionWait is how long an operation that needs a newer cluster
// version waits for the masters to say it before it is refused.
const versionWait = 2 * wire.Second

// newFeatureRefused says why an operation that sets a deadline, or a
// hash's, may not be sent to the chain cfg: a server of release 0.1.0
// would drop the deadline and keep the key for ever, or store a hash as
// a string, so none is sent before the cluster runs at the protocol
// version that brings it; deadlines are for strong keyspaces only, and
// hashes not for keyspaces of several sites.
func (c *Core) newFeatureRefused(op wire.Op, cfg wire.Config) error {
	v := max(1, c.clusterVersion)
	if op.Kind == wire.OpExport && v < release.ProtocolExport {
		return versionError{fmt.Errorf("%w: the cluster runs at protocol version %d and exports need %d: finish the upgrade with catena upgrade finalize (docs/upgrades.md)",
			ErrExportUnsupported, v, release.ProtocolExport)}
	}
	if op.Kind == wire.OpWatch {
		switch {
		case v < release.ProtocolWatch:
			return versionError{fmt.Errorf("%w: the cluster runs at protocol version %d and watches need %d: finish the upgrade with catena upgrade finalize (docs/upgrades.md)",
				ErrWatchUnsupported, v, release.ProtocolWatch)}
		case cfg.Mode != wire.ModeStrong:
			return fmt.Errorf("%w: keys of %s keyspaces cannot be watched yet (docs/adr/0032)", ErrWatchUnsupported, cfg.Mode)
		}
	}
	if op.Kind.IsHash() {
		switch {
		case v < release.ProtocolHashes:
			return versionError{fmt.Errorf("%w: the cluster runs at protocol version %d and hashes need %d: finish the upgrade with catena upgrade finalize (docs/upgrades.md)",
				ErrHashesUnsupported, v, release.ProtocolHashes)}
		case len(cfg.Sites) > 1:
			return fmt.Errorf("%w: keyspaces of several sites hold strings only (docs/adr/0029)", ErrHashesUnsupported)
		}
	}
	if !op.SetsExpiry() {
		return nil
	}
	if v < release.ProtocolExpiry {
		return versionError{fmt.Errorf("%w: the cluster runs at protocol version %d and deadlines need %d: finish the upgrade with catena upgrade finalize (docs/upgrades.md)",
			ErrExpiryUnsupported, v, release.ProtocolExpiry)}
	}
	if cfg.Mode != wire.ModeStrong || len(cfg.Sites) > 1 {
		return fmt.Errorf("%w: keys of %s keyspaces do not expire (docs/adr/0028)", ErrExpiryUnsupported, cfg.Mode)
	}
	return nil
}

// Cancel ends an operation or a GET-TRANSACTION now, as its deadline
// would, with cause as Done.Err: Ambiguous for an update that was sent,
// Unavailable otherwise. Unknown ids are ignored.
func (c *Core) Cancel(now wire.Time, id OpID, cause error) {
	if o := c.ops[id]; o != nil {
		c.giveUp(now, o, cause)
		return
	}
	if t := c.txns[id]; t != nil {
		c.endTxn(now, t, Done{Outcome: Unavailable, Err: cause})
	}
}

// Pending returns the number of unfinished operations.
func (c *Core) Pending() int { return len(c.ops) - c.internal }

// Masters returns the master members known.
func (c *Core) Masters() []wire.NodeID { return slices.Clone(c.masters) }

// Volumes returns the number of volumes keys hash to, 0 until known.
func (c *Core) Volumes() int {
	if c.opts.Volumes > 0 {
		return c.opts.Volumes
	}
	if len(c.keyspaces) > 0 {
		n := 0
		for _, ks := range c.keyspaces {
			n += ks.Volumes
		}
		return n
	}
	return len(c.configs)
}

// Keyspaces returns the keyspaces the master named, the default first.
func (c *Core) Keyspaces() []wire.Keyspace { return slices.Clone(c.keyspaces) }

// NotMaster returns the nodes asked as masters that answered as servers,
// with the masters each named.
func (c *Core) NotMaster() map[wire.NodeID][]wire.NodeID { return c.notMasters }

// KeyVersion returns the client's unstable version of key (see
// KeyVersion), if it has one.
func (c *Core) KeyVersion(key string) (KeyVersion, bool) { return c.metadata.lookup(key) }

// UnstableKeys returns how many keys the client holds metadata for.
func (c *Core) UnstableKeys() int { return c.metadata.len() }

// MetadataSize is how many per-key metadata entries (KeyVersion) a
// client's causal session holds: ChainReaction's client state, one entry
// per key whose newest version it saw is not yet known stable.
type MetadataSize struct {
	// Entries is the number held now; Peak the most held at once since
	// the core was made or ResetMetadataPeak last ran.
	Entries, Peak int
}

// MetadataSize returns the current and peak size of the client's
// per-key metadata (always zero for strong and CRAQ volumes).
func (c *Core) MetadataSize() MetadataSize {
	return MetadataSize{Entries: c.metadata.len(), Peak: c.metadata.peak}
}

// ResetMetadataPeak makes the peak start again from the current size
// (a benchmark measures each phase on its own).
func (c *Core) ResetMetadataPeak() { c.metadata.resetPeak() }

// RequestConfig asks the masters for the configurations now, unless it
// asked within ConfigRefreshMin.
func (c *Core) RequestConfig(now wire.Time) {
	if c.configAskedAt >= 0 && now-c.configAskedAt < c.opts.ConfigRefreshMin {
		return
	}
	c.configAskedAt = now
	for _, m := range c.masters {
		c.emit(m, &wire.ConfigRequest{})
	}
}

// ackedBelow is the AckedBelow requests carry: every request below the
// lowest unfinished update has its answer (or was given up on, so the
// chain need not keep its outcome).
func (c *Core) ackedBelow() uint64 {
	if len(c.updates) > 0 {
		return uint64(c.updates[0])
	}
	return uint64(c.nextID)
}

// volumeOf returns the key's volume; ok is false until the number of
// volumes is known.
func (c *Core) volumeOf(key string) (wire.VolumeID, bool) {
	if c.opts.VolumeOf != nil {
		return c.opts.VolumeOf(key), true
	}
	if len(c.keyspaces) > 0 {
		return placement.Route(c.keyspaces, key)
	}
	n := c.Volumes()
	if n == 0 {
		return 0, false
	}
	return placement.VolumeOf(key, n), true
}

// send makes one attempt at an operation, or queues it until it can.
func (c *Core) send(now wire.Time, o *operation) {
	if o.move {
		c.finish(now, o, Done{Outcome: OK}) // the session's past is here
		return
	}
	v, ok := c.volumeOf(o.op.Key)
	if o.op.Kind.NamesVolume() {
		v, ok = o.scans, true
	}
	cfg := c.configs[v]
	if !ok || len(cfg.Chain) == 0 {
		// No route yet: ask the master, and try again after a backoff
		// or as soon as a configuration arrives.
		o.state, o.retryAt = opQueued, now+c.opts.RetryBackoff
		c.armAt(o.retryAt)
		c.RequestConfig(now)
		return
	}
	o.volume, o.routed = v, true
	if o.op.SetsExpiry() || o.op.Kind.IsHash() || o.op.Kind == wire.OpExport || o.op.Kind == wire.OpWatch {
		if err := c.newFeatureRefused(o.op, cfg); err != nil {
			if errors.As(err, new(versionError)) {
				// A new cluster's first leader raises the version just
				// after it is elected: ask the masters again for a while
				// before refusing.
				if o.versionWaitUntil == 0 {
					o.versionWaitUntil = now + versionWait
				}
				if now < o.versionWaitUntil {
					o.state, o.retryAt = opQueued, now+c.opts.RetryBackoff
					c.armAt(o.retryAt)
					c.RequestConfig(now)
					return
				}
			}
			c.finish(now, o, Done{Outcome: Invalid, Err: err})
			return
		}
	}
	if o.isUpdate && uint64(o.id) >= c.ackedBelow()+c.opts.WindowMax {
		// Beyond the chain's exactly-once window: wait for lower
		// updates to finish (the lowest is always inside it).
		o.state, o.retryAt = opQueued, 0
		return
	}
	var to wire.NodeID
	var minVersion wire.SN
	switch {
	case o.op.Kind == wire.OpExport:
		to = cfg.Answerer() // (chain.Replica.handleExport)
	case o.op.Kind == wire.OpScan:
		to = cfg.Tail() // in every mode (chain.Replica.handleScan)
	case o.op.Kind == wire.OpWatch:
		to = c.watchTarget(cfg, o) // (chain.Replica.handleWatch: any member)
	case o.isUpdate:
		to = c.routing.Update(cfg)
		if v == o.ownVolume {
			minVersion = o.ownVersion
		}
	case cfg.Causal():
		to, minVersion = c.causalTarget(now, cfg, o)
	case mutation.Enabled && c.opts.Mutations.StrongReadsAtHead:
		to = cfg.Head()
	case o.strong:
		to = c.routing.Query(cfg, Strong, c.opts.Rand.IntN)
	default:
		to = c.routing.Query(cfg, o.call.Consistency, c.opts.Rand.IntN)
	}
	if o.attempts > 0 && mutation.Enabled && c.opts.Mutations.FreshRequestNumberOnRetry {
		c.renumber(o)
	}
	o.state, o.sentAt, o.sentTo, o.retryAt = opSent, now, to, 0
	o.attempts++
	if c.opts.AttemptTimeout > 0 {
		c.armAt(now + c.attemptTimeout(o))
	}
	req := &wire.ClientRequest{
		Volume: v, Epoch: cfg.Epoch, Client: c.opts.Client, ReqNo: o.reqNo,
		AckedBelow: c.ackedBelow(), ExpectSession: c.sessions[v], Op: o.op, MinVersion: minVersion,
		Keyspaces: wire.KeyspacesVersion(c.keyspaces), User: o.call.User,
	}
	if o.isUpdate && o.call.Sites > 1 {
		req.Sites = uint32(min(o.call.Sites, math.MaxUint32))
	}
	if o.arrival != nil {
		req.Deps = []wire.Dep{*o.arrival}
	}
	if o.shipped != nil {
		req.Deps = []wire.Dep{*o.shipped}
	}
	if o.isUpdate && cfg.Geo() {
		if !o.geoFrozen {
			// Every attempt carries what the first did, so the answer
			// drops exactly the dependencies the update holds.
			o.geoFrozen, o.geoDeps, o.geoTS, o.geoSeq = true, c.geo.list(), c.geo.maxTS, c.geo.seq
		}
		req.Deps, req.TS = o.geoDeps, o.geoTS
	}
	c.emit(to, req)
}

// armAt notes that Tick has work at t.
func (c *Core) armAt(t wire.Time) {
	if c.out.Timer == 0 || t < c.out.Timer {
		c.out.Timer = t
	}
}

func (c *Core) emit(to wire.NodeID, m wire.Message) {
	c.out.Messages = append(c.out.Messages, wire.Envelope{To: to, Msg: m})
}

// Step handles a message from a server or master.
func (c *Core) Step(now wire.Time, from wire.NodeID, m wire.Message) {
	switch m := m.(type) {
	case *wire.ClientReply:
		c.handleReply(now, from, m)
	case *wire.ConfigReply:
		if len(m.Configs) == 0 && !slices.Contains(m.Masters, from) {
			// A server answers a ConfigRequest by naming its masters.
			c.notMasters[from] = slices.Clone(m.Masters)
			return
		}
		for _, id := range m.Masters {
			if !slices.Contains(c.masters, id) {
				c.masters = append(c.masters, id)
			}
		}
		c.clusterVersion = max(c.clusterVersion, m.ClusterVersion)
		c.adoptKeyspaces(m.Keyspaces)
		c.adoptAll(now, m.Configs)
	case *wire.StatusReply:
		c.clusterVersion = max(c.clusterVersion, m.ClusterVersion)
		c.adoptKeyspaces(m.Keyspaces)
		c.adoptAll(now, m.Configs)
	case *wire.KeyspaceReply:
		c.adoptKeyspaces(m.Keyspaces)
	}
}

// adoptAll adopts configurations and sends the operations that waited
// for a route.
func (c *Core) adoptAll(now wire.Time, configs []wire.Config) {
	adopted := false
	for _, cfg := range configs {
		adopted = c.adopt(cfg) || adopted
	}
	if !adopted {
		return
	}
	for _, id := range slices.Clone(c.order) {
		if o := c.ops[id]; o != nil && o.state == opQueued && o.retryAt != 0 {
			c.send(now, o)
		}
	}
}

// adoptKeyspaces takes the master's keyspaces when they are news
// (wire.NewerKeyspaces: a member that lags may send older ones).
func (c *Core) adoptKeyspaces(ks []wire.Keyspace) {
	if wire.NewerKeyspaces(c.keyspaces, ks) {
		c.keyspaces = slices.Clone(ks)
	}
}

// adopt installs a configuration newer than the one known for its volume.
func (c *Core) adopt(cfg wire.Config) bool {
	if cur, ok := c.configs[cfg.Volume]; ok && cfg.Epoch <= cur.Epoch {
		return false
	}
	cfg = cfg.Clone()
	c.configs[cfg.Volume] = cfg
	c.out.Configs = append(c.out.Configs, cfg)
	return true
}

func (c *Core) handleReply(now wire.Time, from wire.NodeID, m *wire.ClientReply) {
	id := OpID(m.ReqNo)
	if renumbered, ok := c.renumbered[m.ReqNo]; ok {
		id = renumbered
	}
	o := c.ops[id]
	if o == nil && m.Client == c.opts.Client {
		c.handleStableNotice(now, from, m)
		return
	}
	if o == nil || m.Client != c.opts.Client || o.shipWait != 0 {
		return // a duplicate, or an answer to an operation given up on (or answered, waiting for other sites)
	}
	newer := m.Config != nil && c.adopt(*m.Config)
	switch m.Err {
	case wire.ErrNone:
		if o.isUpdate {
			c.sessions[m.Volume] = true
		}
		c.observe(o, from, m)
		d := Done{Outcome: OK, Result: m.Result, From: from}
		if o.op.Kind == wire.OpWatch {
			var again bool
			if d, again = c.watchAnswered(now, o, d); again {
				return
			}
		}
		if c.awaitShipped(now, o, d) {
			return
		}
		c.finish(now, o, d)
		return
	case wire.ErrSessionExpired:
		c.finish(now, o, Done{Outcome: Ambiguous, Err: ErrSessionLost})
		return
	case wire.ErrBadRequest:
		c.finish(now, o, Done{Outcome: Invalid, Err: ErrRefused})
		return
	case wire.ErrTooManySites:
		c.finish(now, o, c.refusal(o, Invalid, c.tooManySites(o)))
		return
	case wire.ErrKeyspaceMissing:
		// Unavailable even after several attempts: keyspaces are never
		// removed, so a keyspace too few sites have now never let any
		// site be elected to apply a write of it.
		err := &KeyspaceMissingError{Keyspace: c.keyspaceOf(o.volume), Missing: slices.Clone(m.Sites), Sites: slices.Clone(c.configs[o.volume].Sites)}
		c.finish(now, o, Done{Outcome: Unavailable, Err: err})
		return
	case wire.ErrUnknownVersion:
		c.metadata.forget(o.op.Key)
		c.finish(now, o, Done{Outcome: Invalid, Err: ErrUnknownVersion})
		return
	case wire.ErrDenied, wire.ErrUnauthenticated:
		err := ErrDenied
		if m.Err == wire.ErrUnauthenticated {
			err = ErrUnauthenticated
		}
		c.finish(now, o, c.refusal(o, Refused, err))
		return
	case wire.ErrInFlightLimit:
		if !o.internal {
			c.finish(now, o, c.refusal(o, Unavailable, ErrInFlightLimit))
			return
		}
		// A wait the core started for an update's dependencies backs
		// off and retries, as after ErrUnavailable: its update waits.
	case wire.ErrDirty:
		if !o.strong {
			// CRAQ: the key has an update in flight; the tail answers at
			// once, so no backoff.
			o.strong = true
			c.send(now, o)
			return
		}
	case wire.ErrNotTail:
		// A read reached a server that is not the tail (or not a member):
		// the configuration is stale. Ask the Strong target from now on.
		o.strong = true
	}
	if o.state != opSent {
		return // already waiting to retry
	}
	// The configuration moved on: a failure or a repair changed this
	// chain, and likely others (a server is in many). Retry at once in
	// the newer configuration, and refresh the rest from the master.
	// Epochs only grow, so this cannot repeat without end.
	if newer && m.Err == wire.ErrWrongEpoch {
		c.RequestConfig(now)
		c.send(now, o)
		return
	}
	// Every other error says the configuration is stale or the server
	// cannot serve now: back off, and refresh the configuration.
	o.errors++
	backoff := c.opts.RetryBackoff << min(o.errors-1, 16)
	o.state, o.retryAt = opBackoff, now+min(backoff, c.opts.RetryBackoffMax)
	c.armAt(o.retryAt)
	c.RequestConfig(now)
}

// refusal is how an operation a server refused ends: with outcome and
// err, unless it is an update an earlier attempt of which may have been
// applied (Ambiguous).
func (c *Core) refusal(o *operation, outcome Outcome, err error) Done {
	if o.isUpdate && o.attempts > 1 && !(mutation.Enabled && c.opts.Mutations.AmbiguousAsUnavailable) {
		return Done{Outcome: Ambiguous, Err: err}
	}
	return Done{Outcome: outcome, Err: err}
}

// observe records what a successful answer teaches about the key's
// version: ChainReaction's metadata update (§III-C). Every answer in
// strong and CRAQ modes is of a version the tail processed (see
// keyMetadata), so it is stable; a causal volume's answer says.
func (c *Core) observe(o *operation, from wire.NodeID, m *wire.ClientReply) {
	if o.op.Kind == wire.OpWaitShipped || o.op.Kind.NamesVolume() {
		return // says where an update is, or is about a volume: not a key's version
	}
	cfg := c.configs[m.Volume]
	stable := m.Stable || !cfg.Causal()
	if cfg.Causal() && !cfg.Geo() {
		stable = c.observeFloor(o, m)
	}
	c.metadata.observe(o.op.Key, KeyVersion{Volume: m.Volume, Epoch: m.Epoch, Version: m.Result.SN, Position: m.Position}, stable)
	if o.isUpdate && !stable && cfg.Causal() {
		c.expectNotice(o.reqNo, m.Volume, o.op.Key, m.Result.SN)
	}
	if c.configs[m.Volume].Geo() && o.op.Kind != wire.OpWaitStable {
		c.geo.observe(m.Volume, o.op.Key, m.Result.Stamp, o.isUpdate, o.geoSeq)
	}
}

// attemptTimeout returns how long an attempt at o may go unanswered: a
// watch may be held that much longer (Op.TTL, StartWatch).
func (c *Core) attemptTimeout(o *operation) wire.Time {
	if o.op.Kind == wire.OpWatch {
		return c.opts.AttemptTimeout + o.op.TTL
	}
	return c.opts.AttemptTimeout
}

// suspectFactor is how many attempt timeouts causal reads avoid a server
// that left an attempt unanswered.
const suspectFactor = 4

// Tick ends operations whose deadline passed and retries those due.
func (c *Core) Tick(now wire.Time) {
	maps.DeleteFunc(c.suspects, func(_ wire.NodeID, until wire.Time) bool { return until <= now })
	refresh := false
	for _, id := range slices.Clone(c.order) {
		o := c.ops[id]
		if o == nil {
			continue
		}
		switch {
		case o.call.Deadline != 0 && now >= o.call.Deadline:
			c.giveUp(now, o, ErrDeadline)
		case o.state == opSent && c.opts.AttemptTimeout > 0 && now-o.sentAt >= c.attemptTimeout(o):
			// No answer: the request, its reply or a server was lost, or
			// the configuration moved. Resend, and refresh.
			refresh = true
			c.suspects[o.sentTo] = now + suspectFactor*c.opts.AttemptTimeout
			c.send(now, o)
		case o.state != opSent && o.retryAt != 0 && now >= o.retryAt:
			c.send(now, o)
		}
	}
	if refresh {
		c.RequestConfig(now)
	}
}

// NextTimer returns when Tick has work next: the earliest deadline,
// attempt timeout or retry. ok is false when nothing waits on time.
func (c *Core) NextTimer() (at wire.Time, ok bool) {
	consider := func(t wire.Time) {
		if !ok || t < at {
			at, ok = t, true
		}
	}
	for _, o := range c.ops {
		if o.call.Deadline != 0 {
			consider(o.call.Deadline)
		}
		switch {
		case o.state == opSent && c.opts.AttemptTimeout > 0:
			consider(o.sentAt + c.attemptTimeout(o))
		case o.state != opSent && o.retryAt != 0:
			consider(o.retryAt)
		}
	}
	return at, ok
}

// giveUp ends an operation without an answer. The client will not retry
// it, so the chain need not keep its outcome: finishing it lets
// AckedBelow move past it.
func (c *Core) giveUp(now wire.Time, o *operation, cause error) {
	if err := c.moveError(o, cause); err != nil {
		cause = err
	}
	if o.isUpdate && o.attempts > 0 && !(mutation.Enabled && c.opts.Mutations.AmbiguousAsUnavailable) {
		c.finish(now, o, Done{Outcome: Ambiguous, Err: cause})
		return
	}
	c.finish(now, o, Done{Outcome: Unavailable, Err: cause})
}

// finish removes an operation and reports it.
func (c *Core) finish(now wire.Time, o *operation, d Done) {
	d.ID, d.Op, d.Attempts = o.id, o.op, o.attempts
	if o.routed {
		d.Volume = o.volume
	}
	if o.txn != 0 {
		// A read of a GET-TRANSACTION: the transaction reports.
		if _, ok := c.ops[o.id]; ok {
			delete(c.ops, o.id)
			c.order = removeID(c.order, o.id)
		}
		c.finishTxnRead(now, o, d)
		return
	}
	if _, ok := c.ops[o.id]; ok {
		delete(c.ops, o.id)
		c.order = removeID(c.order, o.id)
		if o.internal {
			c.finishWait(now, o, d.Outcome)
			return
		}
		c.releaseWaits(now, o)
		c.dropShipWait(now, o)
		if o.isUpdate {
			lowest := len(c.updates) > 0 && c.updates[0] == o.id
			c.updates = removeID(c.updates, o.id)
			if lowest {
				c.sendWaitingForWindow(now)
			}
		}
	}
	c.out.Done = append(c.out.Done, d)
}

// sendWaitingForWindow sends the updates that waited for the window to
// move. They were queued without a retry time, each at or above the
// window's end then, which only grows: only those from where the last
// call stopped can be due (the others are in flight, and there may be a
// thousand).
func (c *Core) sendWaitingForWindow(now wire.Time) {
	limit := c.ackedBelow() + c.opts.WindowMax
	from, _ := slices.BinarySearch(c.updates, OpID(c.windowSent))
	c.windowSent = max(c.windowSent, limit)
	for _, id := range c.updates[from:] {
		if uint64(id) >= limit {
			break
		}
		if o := c.ops[id]; o.state == opQueued && o.retryAt == 0 && o.blockedOn == 0 {
			c.send(now, o)
		}
	}
}

// renumber sends an operation's next attempt under a fresh request
// number (the FreshRequestNumberOnRetry mutation).
func (c *Core) renumber(o *operation) {
	o.reqNo = uint64(c.nextID)
	c.nextID++
	c.renumbered[o.reqNo] = o.id
}

// removeID removes id from the sorted slice ids. Operations mostly
// finish in the order they started: the first goes without moving the
// others.
func removeID(ids []OpID, id OpID) []OpID {
	if len(ids) > 0 && ids[0] == id {
		return ids[1:]
	}
	if i, found := slices.BinarySearch(ids, id); found {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}
