package chain

import (
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Pipelined durability (docs/adr/0017-pipelined-durability.md). A server
// commits its storage writes after each batch of steps, and a message
// waits for that commit unless it is Early (wire.Envelope). If every
// member made an update durable before forwarding it, a write would wait
// for t fsyncs in series. Instead, in a strong chain a member forwards
// updates at once (Early) and commits in parallel with its successors,
// and the chain learns what is on every disk from Durable reports:
//
//   - a member's durable SN is what it had applied when its last commit
//     began (Committed);
//   - the head's report is its durable SN; every other member's is the
//     minimum of its own and its predecessor's last report (SyncReply
//     starts each link's reports in an epoch, Durable carries the rest);
//   - the tail treats an update as processed (CR §3: reply, acknowledge,
//     trim) only once its own durable SN and its predecessor's report
//     cover it, and keeps the updates after committed on Sent meanwhile.
//
// INVARIANT durable answer: at a pipelined tail, committed ≤ durable and
// committed ≤ the predecessor's report. So an update answered to a client,
// acknowledged up the chain, or read at any member is on the disk of
// every member of the chain, and a crash of any set of servers (all of
// them at once included) loses no acknowledged write. What a crash loses
// is an update some member forwarded before its own commit: never
// answered and never read (the tail parks reads of keys with such updates,
// parkRead), so the chain may lose it as if it had never been sequenced.
//
// Other modes keep the simpler rule, their messages waiting for the
// commit (Traits.Pipelines false): their answers come from other members
// than the tail, or depend on other sites.

// pipelined reports whether this volume forwards before its own commit.
// Without CommitsLag every step's writes are durable when it returns (the
// experiments' model, which has no disk), and nothing needs reports.
func (r *Replica) pipelined() bool {
	return r.commitsLag && r.traits.Pipelines
}

// chainDurable returns the SN through which this member and every member
// before it hold every update on disk, as far as this member knows.
func (r *Replica) chainDurable() wire.SN {
	if !r.pipelined() {
		return r.applied
	}
	if r.predecessor == "" {
		return r.durable
	}
	return min(r.durable, r.upstreamDurable)
}

// Committed tells the replica that every storage write it made so far is
// durable: the node loop calls it after each commit, before it sends the
// messages that waited for the commit.
func (r *Replica) Committed(now wire.Time) Output {
	if r.durable == r.applied || r.phase == phaseWedged {
		r.durable = r.applied
		return Output{}
	}
	r.now = now
	r.durable = r.applied
	r.durabilityAdvanced()
	return r.flush()
}

// durabilityAdvanced passes a grown chainDurable on: the tail commits,
// another member reports to its successor.
func (r *Replica) durabilityAdvanced() {
	if !r.pipelined() || !r.role.isMember() {
		return
	}
	if r.role.isTail() {
		r.advanceCommitted()
		return
	}
	r.reportDurable()
}

// reportDurable sends the successor this member's chainDurable if it grew
// since the last report on the link.
func (r *Replica) reportDurable() {
	if r.downstream != successorStreaming {
		return // SyncReply starts the link's reports
	}
	if d := r.chainDurable(); d > r.reportedDurable {
		r.reportedDurable, r.reportedAt = d, r.now
		r.sendSettled(r.successor, &wire.Durable{Volume: r.volume, Epoch: r.config.Epoch, SN: d})
	}
}

// repeatDurableReport sends the last report again while the tail has not
// acknowledged what it covers, at most once a SyncRetryInterval: a lost
// report (a one-way link fault drops messages without breaking the link)
// would otherwise stall the chain until the next update or the master's
// reconfiguration.
func (r *Replica) repeatDurableReport(now wire.Time) {
	if !r.pipelined() || r.role.isTail() || !r.role.isMember() || r.downstream != successorStreaming ||
		r.reportedDurable <= r.committed || now-r.reportedAt < r.limits.SyncRetryInterval {
		return
	}
	r.reportedAt = now
	r.sendSettled(r.successor, &wire.Durable{Volume: r.volume, Epoch: r.config.Epoch, SN: r.reportedDurable})
}

// sendSettled sends a message that tells only of what every member of a
// pipelined chain holds on disk (a processed update's answer or
// acknowledgement, a durability report): a crash of this server can take
// none of it back, so it need not wait for this server's commit, which
// would delay every answer by a commit per member.
func (r *Replica) sendSettled(to wire.NodeID, m wire.Message) {
	if r.pipelined() && !(mutation.Enabled && r.mutations.TailAnswersBeforeDurable) {
		r.sendEarly(to, m)
		return
	}
	r.send(to, m)
}

// handleDurable: the predecessor's report.
func (r *Replica) handleDurable(m *wire.Durable) {
	if !r.pipelined() || r.upstream != predecessorSynced || m.SN <= r.upstreamDurable {
		return
	}
	r.upstreamDurable = m.SN
	r.durabilityAdvanced()
}

// advanceCommitted is the pipelined tail's processing of updates (CR §3
// Update Processing at the tail): every update every member holds on disk
// is answered, acknowledged and trimmed, and reads parked on it answered.
func (r *Replica) advanceCommitted() {
	if !r.pipelined() || !r.role.isTail() {
		return
	}
	c := min(r.applied, r.chainDurable())
	if c <= r.committed {
		return
	}
	if mutation.Enabled && r.mutations.TailAnswersBeforeDurable {
		c = r.applied
	}
	for sn := max(r.committed+1, r.sent.firstSN()); sn <= c && r.sent.holds(sn); sn++ {
		r.replyUpdate(r.sent.at(sn))
	}
	r.committed = c
	r.trimSent()
	r.answerWaiters()
	r.ackUpstream()
	r.retryParkedReads()
	r.reportJoinerReady()
}

// parkedRead is a query the pipelined tail holds: its key has an update
// not yet on every member's disk.
type parkedRead struct {
	from wire.NodeID
	req  *wire.ClientRequest
}

// parkRead holds a query on a key with an update after committed until
// the update is processed: answering from this replica now could show a
// write a crash may yet take back. Beyond WaitersMax held queries the
// client is told to retry.
func (r *Replica) parkRead(from wire.NodeID, req *wire.ClientRequest) {
	if len(r.parkedReads) >= r.limits.WaitersMax {
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	c := *req
	r.parkedReads = append(r.parkedReads, parkedRead{from: from, req: &c})
}

// retryParkedReads handles the held queries again: those whose key is
// clean now are answered, the others held again, and after a
// reconfiguration they go where the role says (ErrNotTail elsewhere).
func (r *Replica) retryParkedReads() {
	if len(r.parkedReads) == 0 {
		return
	}
	parked := r.parkedReads
	r.parkedReads = nil
	for _, p := range parked {
		r.handleQuery(p.from, p.req)
	}
}

// tailReadWaits reports whether the tail must park a query on key.
func (r *Replica) tailReadWaits(key string) bool {
	return r.pipelined() && r.role.isTail() && r.dirty(key) && !(mutation.Enabled && r.mutations.TailAnswersBeforeDurable)
}
