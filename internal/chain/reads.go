package chain

import (
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
	"strings"
)

// CR §3 Query Processing: queries go to the tail and are answered from
// its replica, so every query sees exactly the updates acknowledged so
// far. ReadMode adds CRAQ's clean reads at any member (docs/adr/0007) and
// CR §5.1's weak reads, a baseline for the experiments.

// ReadMode says which members of a chain answer queries.
type ReadMode uint8

const (
	// ReadsAtTail: only the tail answers queries (CR §2), so every query
	// sees exactly the updates acknowledged so far: linearizable.
	ReadsAtTail ReadMode = iota
	// ReadsAtAnyReplica: every member answers queries from its own state
	// (CR §5.1's weak-chain). Not linearizable: a member ahead of the tail
	// returns updates not yet acknowledged, one behind returns old values.
	// It is a baseline for the experiments, not a mode to serve users.
	ReadsAtAnyReplica
	// ReadsCleanAtAnyMember: CRAQ's apportioned queries. Every member
	// answers a query on a clean key (every update to it this member
	// applied is known processed by the tail) from its own state, and
	// refuses one on a dirty key with ErrDirty, sending the client to the
	// tail. Linearizable: by Update Propagation the tail holds no update
	// this member lacks, so a clean key's value here is the tail's; any
	// update acknowledged to a client has passed every member, and is
	// dirty here until its acknowledgement comes back.
	ReadsCleanAtAnyMember
)

// handleQuery answers a query if this replica's role and the read mode
// let it, and sends the client elsewhere otherwise.
func (r *Replica) handleQuery(from wire.NodeID, req *wire.ClientRequest) {
	switch req.Op.Kind {
	case wire.OpScan:
		r.handleScan(from, req)
		return
	case wire.OpExport:
		r.handleExport(from, req)
		return
	case wire.OpWatch:
		r.handleWatch(from, req)
		return
	}
	if r.refusesMoved(from, req) {
		return // (also a read parked before the split and retried after it)
	}
	if r.mode.Query(from, req) {
		return // (ChainReaction's reads, the waits of other modes)
	}
	switch {
	case r.role.isTail(), r.role.isMember() && r.reads == ReadsAtAnyReplica:
	case r.role.isMember() && r.reads == ReadsCleanAtAnyMember:
		if r.dirty(req.Op.Key) && !(mutation.Enabled && r.mutations.AnswerDirtyReads) {
			r.reply(from, req, wire.ErrDirty, wire.Result{})
			return
		}
	default:
		r.reply(from, req, wire.ErrNotTail, wire.Result{})
		return
	}
	if r.mode.RouteRead(from, req) {
		return // (hierarchical: another site is the key's primary)
	}
	if r.tailReadWaits(req.Op.Key) {
		r.parkRead(from, req)
		return
	}
	object, ok := r.liveObject(req.Op.Key)
	if !ok {
		// The key has a deadline and this server's clock failed its
		// check: whether it expired cannot be told (ADR 28 rule 2).
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	result := kv.Read(req.Op, object)
	result.SN = r.applied
	if r.mode.HoldRead(from, req, object.Stamp, result) {
		return
	}
	if r.pipelined() && r.reads != ReadsAtAnyReplica {
		// The key is clean here: its value is on every member's disk, so
		// the answer need not wait for this server's commit (durable.go).
		r.sendEarly(from, r.clientReply(req, wire.ErrNone, result, true))
		return
	}
	r.replyAs(from, req, wire.ErrNone, result, r.reads != ReadsAtAnyReplica)
}

// dirty reports whether this member applied an update to key that it
// does not know the tail processed. Such updates are on Sent: a member's
// Sent holds every update after committed (INVARIANT Sent).
func (r *Replica) dirty(key string) bool { return r.sent.updatesAfter(key, r.committed) }

// handleScan answers an OpScan at the tail, in every mode: the tail holds
// every update the chain acknowledged, so a key present when the scan
// began is on every later tail too, and a scan that resumes right after
// the last key it examined (wire.ScanAfter(ScanPage.Next)), at whichever member is tail
// by then, returns every key present throughout (Redis's SCAN guarantee).
// A page holding a key with an update not yet on every member's disk
// (durable.go) waits as a read of that key would. Keys with the reserved
// prefix are internal and never listed, but for leases' records, which a
// scan from wire.LeaseKeyPrefix on lists (and ends after).
func (r *Replica) handleScan(from wire.NodeID, req *wire.ClientRequest) {
	if !r.role.isTail() {
		r.reply(from, req, wire.ErrNotTail, wire.Result{})
		return
	}
	start := max(req.Op.Key, firstUserKey) // the reserved keys sort first
	leases := strings.HasPrefix(req.Op.Key, wire.LeaseKeyPrefix)
	if leases {
		start = req.Op.Key
	}
	keys, more := r.store.Keys(start, int(req.Op.Delta))
	expiring := len(r.store.Deadlines(1)) > 0 // (keys past their deadline are not listed)
	page := wire.ScanPage{Keys: make([]string, 0, len(keys)), Next: req.Op.Key, More: more}
	if s := r.config.Split; !s.IsZero() {
		// The splits this volume's history passed (split.go): the
		// latest, or until it passes it, the one before (which every
		// member passed before the master began the latest).
		if r.splitPending() {
			page.SplitModulus = s.Modulus / 2
		} else {
			page.SplitModulus, page.SplitInto = s.Modulus, s.Into
		}
	}
	pattern := string(req.Op.Value)
	for _, k := range keys {
		if leases && !strings.HasPrefix(k, wire.LeaseKeyPrefix) {
			page.More = false // (past the leases' records)
			break
		}
		if r.tailReadWaits(k) {
			r.parkRead(from, req)
			return
		}
		page.Next = k
		if expiring {
			o, ok := r.liveObject(k)
			if !ok {
				r.reply(from, req, wire.ErrUnavailable, wire.Result{})
				return
			}
			if !o.Exists {
				continue
			}
		}
		if pattern != "" && !kv.MatchGlob(pattern, k) || mutation.Enabled && r.mutations.ScanSkipsLastKey && k == keys[len(keys)-1] {
			continue
		}
		page.Keys = append(page.Keys, k)
	}
	r.replyAs(from, req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true, Value: wire.EncodeScanPage(page), SN: r.applied}, true)
}

// firstUserKey is where a scan starts: keys with the reserved prefix
// (the byte 0x00, refused in clients' keys) all sort before it.
const firstUserKey = "\x01"
