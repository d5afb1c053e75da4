package chain

import (
	"fmt"
	"iter"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Core is a mode's handle on its replica (mode.go): what the chain core
// lets a mode read and do. A mode calls it only while the replica runs
// one of its methods, inside one of the replica's steps.
type Core struct{ r *Replica }

// ID returns this server's id.
func (c *Core) ID() wire.NodeID { return c.r.id }

// Volume returns the replica's volume.
func (c *Core) Volume() wire.VolumeID { return c.r.volume }

// Config returns the adopted configuration (read only: its slices are the
// replica's).
func (c *Core) Config() *wire.Config { return &c.r.config }

// Epoch returns the adopted configuration's epoch.
func (c *Core) Epoch() wire.Epoch { return c.r.config.Epoch }

// Now returns the clock reading of the input being handled.
func (c *Core) Now() wire.Time { return c.r.now }

// Limits returns the replica's limits.
func (c *Core) Limits() *Limits { return &c.r.limits }

// Mutations returns the deliberate protocol bugs the replica runs with
// (tests only).
func (c *Core) Mutations() *Mutations { return &c.r.mutations }

// Store returns the replica's storage.
func (c *Core) Store() storage.Store { return c.r.store }

// Sites returns the server's view of the sites (nil with one site).
func (c *Core) Sites() SiteView { return c.r.sites }

// IsHead reports whether the replica is the head (of a chain of one too).
func (c *Core) IsHead() bool { return c.r.role.isHead() }

// IsTail reports whether the replica is the tail (of a chain of one too).
func (c *Core) IsTail() bool { return c.r.role.isTail() }

// IsMember reports whether the replica is a member (not the joining
// server, not outside the chain).
func (c *Core) IsMember() bool { return c.r.role.isMember() }

// Position returns the replica's index in its chain, or -1.
func (c *Core) Position() int { return c.r.position() }

// Wedged reports whether the replica takes part in nothing (restored, and
// waiting for the master's next configuration).
func (c *Core) Wedged() bool { return c.r.phase == phaseWedged }

// Applied returns the SN of the last update applied.
func (c *Core) Applied() wire.SN { return c.r.applied }

// Committed returns the highest SN known processed by the tail.
func (c *Core) Committed() wire.SN { return c.r.committed }

// SetCatchUpTo records the SN from which this member holds every update
// the chain answered (Mode.Completeness), and saves it.
func (c *Core) SetCatchUpTo(sn wire.SN) {
	c.r.catchUpTo = sn
	c.r.saveMeta()
}

// CatchUpTo returns the SN from which this member holds every update the
// chain answered.
func (c *Core) CatchUpTo() wire.SN { return c.r.catchUpTo }

// Complete reports whether this member holds every update the chain
// answered.
func (c *Core) Complete() bool { return c.r.complete() }

// Uncommitted returns the updates this replica applied after its
// committed SN that it still holds on Sent, in SN order (a member's
// Sent holds every one: INVARIANT Sent).
func (c *Core) Uncommitted() iter.Seq[*wire.Update] {
	return func(yield func(*wire.Update) bool) {
		r := c.r
		for sn := max(r.committed+1, r.sent.firstSN()); r.sent.holds(sn); sn++ {
			if !yield(r.sent.at(sn)) {
				return
			}
		}
	}
}

// NewestOnSent returns the SN of the newest update to key on Sent, if
// any.
func (c *Core) NewestOnSent(key string) (wire.SN, bool) { return c.r.sent.newestOf(key) }

// GetAsOf returns the object key held as of SN sn, from the committed
// SN to the applied one, and whether the replica knows it (a volume
// whose mode KeepsVersions, for a key whose versions since the committed
// one it kept).
func (c *Core) GetAsOf(key string, sn wire.SN) (kv.Object, bool) {
	r := c.r
	if sn < r.committed || sn > r.applied {
		return kv.Object{}, false
	}
	current := r.store.Get(key)
	// Sent must hold every update after the committed SN: a list emptied
	// by a reconfiguration or refilled for a joiner may not.
	covers := r.sent.len() == 0 && r.committed == r.applied ||
		r.sent.len() > 0 && r.sent.firstSN() <= r.committed+1 && r.sent.lastSN() == r.applied
	if sn == r.applied || !r.sent.keepsVersions() || !covers {
		return current, sn == r.applied
	}
	return r.sent.asOf(key, sn, current)
}

// Get returns the replica's copy of key.
func (c *Core) Get(key string) kv.Object { return c.r.store.Get(key) }

// Send sends m to another node once the step's storage writes are
// durable.
func (c *Core) Send(to wire.NodeID, m wire.Message) { c.r.send(to, m) }

// Reply answers a client's request.
func (c *Core) Reply(to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result) {
	c.r.reply(to, req, code, result)
}

// ReplyStable answers a client's request with a result whose version is
// processed by the tail.
func (c *Core) ReplyStable(to wire.NodeID, req *wire.ClientRequest, result wire.Result) {
	c.r.replyAs(to, req, wire.ErrNone, result, true)
}

// ReplyAs answers a request; stable says the version answered
// (result.SN) is processed by the tail.
func (c *Core) ReplyAs(to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result, stable bool) {
	c.r.replyAs(to, req, code, result, stable)
}

// ClientReply returns the replica's answer to a request.
func (c *Core) ClientReply(req *wire.ClientRequest, code wire.ErrCode, result wire.Result, stable bool) *wire.ClientReply {
	return c.r.clientReply(req, code, result, stable)
}

// AnswerUpdate sends the client the outcome of its update u, which this
// replica applied; stable says the tail processed it.
func (c *Core) AnswerUpdate(u *wire.Update, stable bool) { c.r.answerUpdate(u, stable) }

// ProtocolError records a message from a peer that contradicted the
// protocol; it was dropped.
func (c *Core) ProtocolError(format string, args ...any) { c.r.protocolError(format, args...) }

// Apply applies an update the mode sequences at the head (another site's
// update, a record of its own): u.SN must be Applied()+1 and u.Epoch the
// adopted epoch. Call AfterApply once the step's updates are applied.
func (c *Core) Apply(u *wire.Update) {
	if u.SN != c.r.applied+1 || u.Epoch != c.r.config.Epoch {
		panic(fmt.Sprintf("INVARIANT mode apply: %s volume %d sequencing SN %d of epoch %d after %d in epoch %d",
			c.r.id, c.r.volume, u.SN, u.Epoch, c.r.applied, c.r.config.Epoch))
	}
	c.r.apply(u)
}

// NextUpdate returns an update of key for the head to sequence next
// (Apply): the next SN, in the adopted epoch.
func (c *Core) NextUpdate(key string) wire.Update {
	return wire.Update{SN: c.r.applied + 1, Key: key, Epoch: c.r.config.Epoch}
}

// AfterApply forwards and acknowledges what the step applied.
func (c *Core) AfterApply() { c.r.afterApply() }

// AckUpstream tells the predecessor how far the tail has processed, and
// the mode's news (Mode.FillAck).
func (c *Core) AckUpstream() { c.r.ackUpstream() }

// AdmitsUpdate reports whether the head may sequence another update now
// (the backpressure of Update Processing).
func (c *Core) AdmitsUpdate() bool { return c.r.admitsUpdate() }

// HandleUpdateRequest runs a client's update request through the head's
// admission again (one the mode held).
func (c *Core) HandleUpdateRequest(from wire.NodeID, req *wire.ClientRequest) {
	c.r.handleUpdateRequest(from, req)
}

// ForgetOutcome drops the recorded outcome of client's request reqNo if
// it is the update stamped s.
func (c *Core) ForgetOutcome(client wire.ClientID, reqNo uint64, s wire.Stamp) {
	c.r.sessions.forget(client, reqNo, s)
}

// Mode returns the replica's mode.
func (c *Core) Mode() Mode { return c.r.mode }
