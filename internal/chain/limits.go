package chain

import "github.com/catena-kv/catena/internal/wire"

// Limits bounds every queue and batch of a replica, in one place.
type Limits struct {
	// SessionsMax is how many client sessions the exactly-once table keeps.
	SessionsMax int
	// OutcomesPerClientMax is how many unacknowledged updates one client
	// may have; their outcomes are kept until the client acknowledges them.
	OutcomesPerClientMax int
	// ForwardBatchMax is how many updates one Forward message carries.
	ForwardBatchMax int
	// SnapshotChunkObjectsMax is how many objects one SnapshotChunk carries.
	SnapshotChunkObjectsMax int
	// ExportPageObjects is how many objects one page of an export (a
	// backup's read, export.go) carries at most; wire.ExportPageBytes
	// bounds its size too.
	ExportPageObjects int
	// WaitersMax bounds the retried requests the head holds until their
	// update commits.
	WaitersMax int
	// SyncRetryInterval is how long a successor waits for a SyncReply
	// before asking again.
	SyncRetryInterval wire.Time
	// TransferAnswerWait is how long a joining server waits for the
	// answer to a state transfer it asked for before it names a new one
	// (wire.SyncRequest.Transfer), doubling, up to 8 times as long, with
	// each transfer left unanswered: its repeats of one name are answered
	// once.
	TransferAnswerWait wire.Time
	// SentMax bounds the Sent list: the head refuses new updates
	// (ErrUnavailable) while its Sent list is this long, which pushes back
	// on clients when a successor is slow.
	SentMax int
	// HandoffLagMax: a tail pauses (applies nothing more) once its joining
	// server is this close behind, so the joiner catches up exactly.
	HandoffLagMax wire.SN
	// LazyBacklogMax bounds how far a causal volume's lazy phase may fall
	// behind: a member past the first K holds back at most this many
	// applied updates from its successor before forwarding them even
	// though eager work is waiting (Traits.LazyFrom, forwardsLazily).
	LazyBacklogMax wire.SN
	// InboundMax bounds, per other site, the updates a geo volume's head
	// holds until their dependencies are stable here (internal/chain/sites); beyond it
	// the shipper sends them again later.
	InboundMax int
	// ShipWindowMax bounds the updates a tail has shipped to another site
	// and not yet seen taken; ShipRetryInterval is how long it waits for
	// an answer before sending them again.
	ShipWindowMax     int
	ShipRetryInterval wire.Time
	// DepsMax bounds the dependencies one geo update may carry.
	DepsMax int
	// CatchUpLogMax and CatchUpLogBytesMax bound the catch-up log: the
	// updates a replica applied last, which it sends a joining server
	// that kept its state instead of a snapshot (catchup.go). The bytes
	// count keys and values plus a fixed cost per update. A log of 0
	// updates disables catch-up from this replica.
	CatchUpLogMax      int
	CatchUpLogBytesMax int
}

// DefaultLimits are the limits servers use unless configured otherwise.
var DefaultLimits = Limits{
	SessionsMax:             100_000,
	OutcomesPerClientMax:    1024,
	ForwardBatchMax:         256,
	SnapshotChunkObjectsMax: 512,
	ExportPageObjects:       wire.ExportPageObjects,
	WaitersMax:              10_000,
	SyncRetryInterval:       50 * wire.Millisecond,
	TransferAnswerWait:      wire.Second,
	SentMax:                 100_000,
	HandoffLagMax:           64,
	LazyBacklogMax:          256,
	InboundMax:              4096,
	ShipWindowMax:           1024,
	ShipRetryInterval:       time1s,
	DepsMax:                 8192,
	CatchUpLogMax:           100_000,
	CatchUpLogBytesMax:      32 << 20,
}

// time1s is one second in wire.Time.
const time1s = wire.Second
