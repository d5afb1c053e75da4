package chain

import "github.com/catena-kv/catena/internal/control"

// Mutations deliberately break the protocol, so tests can show that the
// simulator's checkers catch each kind of bug. Servers never set them.
type Mutations struct {
	// HeadRepliesEarly: the head answers an update as soon as it applied
	// it, before the tail has processed it.
	HeadRepliesEarly bool
	// SkipResendOnSync: a predecessor does not resend its Sent list to a
	// new successor (CR §3 Fig. 3 without message 3).
	SkipResendOnSync bool
	// IgnoreLease: a server serves clients without a valid lease.
	IgnoreLease bool
	// ScanSkipsLastKey: a scan page leaves out the last key it examined,
	// though the next page resumes after it.
	ScanSkipsLastKey bool
	// NoHandoffPause: the tail keeps applying updates after reporting its
	// joining server ready, so the joiner may become the tail without
	// updates the old tail acknowledged.
	NoHandoffPause bool
	// AnswerDirtyReads: with ReadsCleanAtAnyMember, a member answers
	// queries on dirty keys too.
	AnswerDirtyReads bool
	// CausalRepliesEarly: in a causal volume the member at index K−2
	// answers updates, before K members hold them.
	CausalRepliesEarly bool
	// CausalStableEarly: in a causal volume the member that answers an
	// update calls it stable before the tail has it.
	CausalStableEarly bool
	// CausalNoticeEarly: in a causal volume the member that answers an
	// update also tells the writer it is stable (Traits.StableNotice)
	// before the tail has it.
	CausalNoticeEarly bool
	// CausalStableAtTail: in a causal volume of one site the tail
	// answers a dependency's wait once it committed the version, before
	// the other members know (they answer reads as of their committed
	// SN).
	CausalStableAtTail bool
	// ExportUnfrozen: each page of an export reads the volume as it is
	// when the page is asked for, not the state its first page froze.
	ExportUnfrozen bool
	// WatchDeliversUncommitted: a member answers a watch with the updates
	// it applied, not only those it knows the chain committed.
	WatchDeliversUncommitted bool
	// WatchResumesLate: a member answers a watch from one revision after
	// the one asked for, so a watch resumed there misses an update.
	WatchResumesLate bool
	// CausalReadsOwnCommitted: in a causal volume of one site a member
	// answers a read as of its own committed SN, ignoring the client's
	// version and floor.
	CausalReadsOwnCommitted bool
	// GeoSkipDependencies: a geo head sequences other sites' updates
	// without waiting for their dependencies to be stable here.
	GeoSkipDependencies bool
	// GeoOverwrite: a geo head applies other sites' updates whatever
	// their stamps (no last-writer-wins).
	GeoOverwrite bool
	// GeoDropLosers: a geo head drops another site's update that loses
	// to the key's version instead of sequencing it as a no-op (the
	// paper's "discarded"), so its origin's count never covers it.
	GeoDropLosers bool
	// GeoVolumeOrderOnly: a geo head takes any dependency on an earlier
	// update of the same origin in its own volume as met by the queue's
	// order, not only one on the same key (ADR 24): a reader who saw the
	// update may then read the dependency's key at a member it has not
	// reached.
	GeoVolumeOrderOnly bool
	// GeoPhysicalTime: a head stamps updates with its clock alone, not
	// above the prior version and the client's causal past (the paper's
	// physical-time last-writer-wins).
	GeoPhysicalTime bool
	// GeoShippedEarly: a tail answers a write's wait for other sites
	// (OpWaitShipped) once the write is stable here, before they hold it.
	GeoShippedEarly bool
	// CatchUpAnyHistory: a tail lets a joining server catch up from any
	// SN it holds the updates after, whatever history the joiner's
	// state comes from.
	CatchUpAnyHistory bool
	// TailAnswersBeforeDurable: a pipelined tail answers, acknowledges
	// and reads updates once it applied them, before every member holds
	// them on disk (durable.go).
	TailAnswersBeforeDurable bool
	// HierarchicalReadsLocal: a hierarchical tail reads its own copy of a
	// key another site controls instead of forwarding the read.
	HierarchicalReadsLocal bool
	// HierarchicalReleaseUnshipped: a hierarchical primary releases
	// control without waiting for the other sites to hold its updates.
	HierarchicalReleaseUnshipped bool
	// HierarchicalResyncEarly: in durable mode a site takes over the keys
	// of a site removed from the view without first holding every
	// update of it that the other members hold.
	HierarchicalResyncEarly bool
	// HierarchicalReadsUndurable: a durable primary's tail answers a
	// read of its own write before a majority of the sites hold it.
	HierarchicalReadsUndurable bool
	// HierarchicalRejoinKeepsGivenUp: a site returning to the view keeps
	// its writes the others gave up (no restore, shipped as they are).
	HierarchicalRejoinKeepsGivenUp bool
	// ExpiryTrustsClock: a server decides whether keys have expired by
	// its clock even when the heartbeat's check found it beyond the
	// bound (docs/adr/0028 rule 2 without its check).
	ExpiryTrustsClock bool
	// SplitKeepsServing: a volume goes on answering for the keys that
	// moved to its sibling in its keyspace's split (split.go), and its
	// server takes requests routed with an older keyspace list.
	SplitKeepsServing bool
	// Control: mutations of the hierarchical control machines (the
	// elections of Fig. 1 and 2), which every head runs with.
	Control control.Mutations
}
