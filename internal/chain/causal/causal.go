// Package causal is ChainReaction (Almeida, Leitão, Rodrigues: causal+
// chain replication, §III) as a mode of the chain core (internal/chain;
// docs/adr/0010-causal-mode.md): a volume of a causal keyspace, whose
// configuration carries ChainReaction's k (wire.Config.K).
//
//   - Writes: the head sequences and applies an update as in CR; the
//     member at index K−1 answers the client once it applied it (the
//     eager phase: the first K members hold it); the update goes on to
//     the tail, whose acknowledgement makes it stable everywhere on its
//     way back (committed). With fewer than K members the head accepts no
//     update: an answer promises K copies.
//   - Lazy propagation (§III-B): once an update is on the first K
//     members the client has its answer and the rest of the chain
//     receives it lazily, so the members from index K−1 on forward at
//     low priority (chain.Traits.LazyFrom).
//   - Reads in one site (docs/adr/0023-causal-reads-as-of.md): a member
//     answers a read as of SN max(committed, MinVersion), the key's
//     object after every update up to it (Core.GetAsOf: the members keep
//     the versions of keys with updates in flight, Traits.KeepsVersions).
//     MinVersion is the greater of the client's unstable version of the
//     key and the highest SN it knows every member applied (its floor),
//     so the answer is never older than what the client saw; everything
//     up to the committed SN is on every member, and the client's own
//     unstable versions on K, so no answer can be lost to k − 1
//     failures. The answer is stable unless it is of the client's own
//     unstable version, so clients keep almost no metadata and read at
//     any member. A member that has not applied MinVersion passes the
//     read up (QueryUp): by Update Propagation its predecessor holds at
//     least as much.
//   - Dependency stabilisation in one site: OpWaitStable(key, v) is
//     answered once every member knows v is committed, which the head
//     knows last (acknowledgements travel from the tail to the head):
//     clients ask it, and it holds the request until then. A write is
//     applied only after its dependencies are, so every member answers
//     a read as of an SN at or after them.
//   - Across sites (geo) members keep ChainReaction's reads: any member
//     whose applied SN reaches the client's version answers with its
//     newest version, which the client records with its position unless
//     it is stable, and OpWaitStable is the tail's (it knows first),
//     until the sites' visibility rule moves to committed-everywhere
//     too.
//   - Across sites (§V) the volume's updates ship to its sibling chains
//     at the keyspace's other sites (internal/chain/sites).
//
// Completeness (wire.VolumeStatus.Complete). An update is answered once
// the first K members hold it, so they, and for sure only they, hold
// every answered update; the master never removes a failed member that
// may be the last one known to (master.lastComplete), or an answered
// update could be lost to a partition the chain would have outlived by
// waiting. A member stays complete while it stays in the first K:
// members only move towards the head, and every update answered later
// reaches it first. One that moved into the first K because members
// before it left lacks what its predecessor had not forwarded yet: a
// complete predecessor answers its SyncRequest with the SN it applied,
// which no update answered so far exceeds, so the member is complete
// once it applied that SN.
package causal

import (
	"cmp"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/sites"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Mode is a causal volume's mode.
type Mode struct {
	chain.Strong
	core     *chain.Core
	versions *sites.Versions
	// shipping is the volume's replication to its keyspace's other
	// sites; nil with one site.
	shipping *sites.Shipping
	// stableWaiters are, at the tail, OpWaitStable requests for versions
	// not yet applied, by increasing MinVersion.
	stableWaiters []stableWaiter
}

// stableWaiter is an OpWaitStable request held until its version is
// committed.
type stableWaiter struct {
	replyTo wire.NodeID
	req     wire.ClientRequest
}

// New returns the causal mode of core's replica, for a volume whose
// configuration is c: across c's sites if the server has a site view,
// else in this site only.
func New(core *chain.Core, c wire.Config) *Mode {
	m := &Mode{Strong: chain.Strong{Core: core}, core: core}
	own := wire.SiteID(0)
	if core.Sites() != nil {
		own = core.Sites().Site()
	}
	m.versions = sites.NewVersions(core, own, true)
	if c.Geo() && core.Sites() != nil {
		m.shipping = sites.NewShipping(core, m.versions, sites.Options{})
	}
	return m
}

// Versions returns the volume's versions.
func (m *Mode) Versions() *sites.Versions { return m.versions }

// Shipping returns the volume's shipping to other sites (nil with one
// site).
func (m *Mode) Shipping() *sites.Shipping { return m.shipping }

// Traits implements chain.Mode: the member at index K−1 answers updates,
// and the members from there on forward lazily; a chain shorter than K
// takes no write; updates are stamped; a volume of several sites takes
// snapshots only (its shipping log is not part of a catch-up); one of a
// single site keeps versions for reads as of an SN.
func (m *Mode) Traits(c wire.Config) chain.Traits {
	answerer := c.K - 1
	if mutation.Enabled && m.core.Mutations().CausalRepliesEarly && answerer > 0 {
		answerer--
	}
	t := chain.Traits{Answerer: answerer, LazyFrom: c.K - 1, WritesPaused: len(c.Chain) < c.K, Stamps: true, CatchesUp: !c.Geo(), KeepsVersions: !c.Geo()}
	// The member that answers dependency waits (waitStable) tells each
	// writer when its update is stable (docs/adr/0025), unless the
	// answer is already: across sites the tail, in one site the head.
	switch tail := len(c.Chain) - 1; {
	case c.Geo() && answerer < tail:
		t.StableNotice = chain.StableNoticeAtTail
	case !c.Geo() && tail > 0:
		t.StableNotice = chain.StableNoticeAtHead
	}
	return t
}

// readsAsOf reports whether the volume answers reads as of an SN and
// dependencies once every member knows them committed (one site; the
// package comment).
func (m *Mode) readsAsOf() bool { return !m.core.Config().Geo() }

// Query implements chain.Mode: every query is ChainReaction's.
func (m *Mode) Query(from wire.NodeID, req *wire.ClientRequest) bool {
	if req.Op.Kind == wire.OpWaitShipped {
		if m.shipping == nil {
			m.core.Reply(from, req, wire.ErrBadRequest, wire.Result{})
		} else {
			m.shipping.HandleWaitShipped(from, req)
		}
		return true
	}
	m.query(from, req)
	return true
}

// query answers a read, or passes it up. replyTo is the client (the query
// may have come up from a successor).
func (m *Mode) query(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := m.core
	if !c.IsMember() {
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
		return
	}
	if req.Op.Kind == wire.OpWaitStable {
		m.waitStable(replyTo, req)
		return
	}
	if m.readsAsOf() && m.readAsOf(replyTo, req) {
		return
	}
	if req.MinVersion > c.Applied() {
		if c.IsHead() {
			// Nobody holds it: the head has applied every update of the
			// chain that survives.
			c.Reply(replyTo, req, wire.ErrUnknownVersion, wire.Result{})
			return
		}
		c.Send(c.Config().Predecessor(c.ID()), &wire.QueryUp{Volume: c.Volume(), Epoch: c.Epoch(), ReplyTo: replyTo, Request: *req})
		return
	}
	version, dirty := c.NewestOnSent(req.Op.Key)
	stable := !dirty || version <= c.Committed()
	eager := min(c.Config().K, len(c.Config().Chain)) - 1 // the last member of the eager phase
	if !stable && c.Position() < eager && version > req.MinVersion {
		// The key's newest version here may not have reached K members
		// yet: if this member failed now, it could be lost, after a
		// client had read it. Members from index K−1 on hold only
		// versions on K members (Update Propagation); the client asks
		// there. (A gap in ChainReaction, which lets any member up to
		// the client's position answer with its newest version.)
		c.Reply(replyTo, req, wire.ErrDirty, wire.Result{})
		return
	}
	result := kv.Read(req.Op, c.Get(req.Op.Key))
	if stable {
		// Every version of the key this member holds is stable; the
		// committed SN bounds them.
		version = c.Committed()
	}
	result.SN = version
	c.ReplyAs(replyTo, req, wire.ErrNone, result, stable)
}

// readAsOf answers a read as of SN max(committed, MinVersion) if this
// member applied it and knows the key's object then; it reports whether
// it answered.
func (m *Mode) readAsOf(replyTo wire.NodeID, req *wire.ClientRequest) bool {
	c := m.core
	asOf := max(c.Committed(), req.MinVersion)
	if mutation.Enabled && c.Mutations().CausalReadsOwnCommitted {
		asOf = c.Committed()
	}
	obj, known := c.GetAsOf(req.Op.Key, asOf)
	if !known {
		return false
	}
	result := kv.Read(req.Op, obj)
	result.SN = asOf
	c.ReplyAs(replyTo, req, wire.ErrNone, result, asOf <= c.Committed())
	return true
}

// waitStable answers OpWaitStable(key, v) once v is committed. In one
// site the head answers, once every member knows (the package comment);
// across sites the tail, which knows first. Any member that knows
// answers at once; the one that answers holds the request until it
// knows; others send the client to it.
func (m *Mode) waitStable(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := m.core
	if len(req.Deps) > 0 {
		// A dependency across sites (Deps[0]).
		if m.shipping == nil {
			c.Reply(replyTo, req, wire.ErrBadRequest, wire.Result{})
		} else {
			m.shipping.HandleWaitStable(replyTo, req)
		}
		return
	}
	if m.readsAsOf() && !(mutation.Enabled && c.Mutations().CausalStableAtTail) {
		m.waitStableAtHead(replyTo, req)
		return
	}
	switch {
	case req.MinVersion <= c.Committed():
		c.ReplyStable(replyTo, req, wire.Result{SN: req.MinVersion})
	case !c.IsTail():
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case req.MinVersion > c.Applied()+wire.SN(c.Limits().SentMax):
		// No chain member holds it: the head admits no update while
		// SentMax of them are unacknowledged, so the tail is never
		// further behind than that. A forged version would hold a
		// waiter until the tail changes.
		c.Reply(replyTo, req, wire.ErrUnknownVersion, wire.Result{})
	default:
		m.holdStableWaiter(replyTo, req)
	}
}

// waitStableAtHead answers OpWaitStable(key, v) at the head once it
// knows v committed, and so every member does.
func (m *Mode) waitStableAtHead(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := m.core
	switch {
	case !c.IsHead():
		c.Reply(replyTo, req, wire.ErrNotTail, wire.Result{})
	case req.MinVersion <= c.Committed():
		c.ReplyStable(replyTo, req, wire.Result{SN: req.MinVersion})
	case req.MinVersion > c.Applied():
		// The head applied every update of the chain that survives.
		c.Reply(replyTo, req, wire.ErrUnknownVersion, wire.Result{})
	default:
		m.holdStableWaiter(replyTo, req)
	}
}

// holdStableWaiter keeps an OpWaitStable request until its version is
// committed, or refuses it when too many wait.
func (m *Mode) holdStableWaiter(replyTo wire.NodeID, req *wire.ClientRequest) {
	c := m.core
	if len(m.stableWaiters) >= c.Limits().WaitersMax {
		c.Reply(replyTo, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	w := stableWaiter{replyTo: replyTo, req: *req}
	i, _ := slices.BinarySearchFunc(m.stableWaiters, req.MinVersion, func(w stableWaiter, v wire.SN) int {
		return cmp.Compare(w.req.MinVersion, v)
	})
	m.stableWaiters = slices.Insert(m.stableWaiters, i, w)
}

// answerStableWaiters answers the waits for versions now committed.
func (m *Mode) answerStableWaiters() {
	n := 0
	for n < len(m.stableWaiters) && m.stableWaiters[n].req.MinVersion <= m.core.Committed() {
		w := &m.stableWaiters[n]
		m.core.ReplyStable(w.replyTo, &w.req, wire.Result{SN: w.req.MinVersion})
		n++
	}
	m.stableWaiters = slices.Delete(m.stableWaiters, 0, n)
}

// AdmitUpdate implements chain.Mode: an update that depends on a version
// of this volume the head has not applied (lost to more failures than k
// tolerates) is refused, as applying it would make it visible without
// its dependency (clientcore.waitForDependencies); so is one whose
// dependencies or timestamp cannot be right.
func (m *Mode) AdmitUpdate(req *wire.ClientRequest) wire.ErrCode {
	if req.MinVersion > m.core.Applied() {
		return wire.ErrUnknownVersion
	}
	return m.versions.CheckRequest(req)
}

// Stamp implements chain.Mode.
func (m *Mode) Stamp(u *wire.Update, req *wire.ClientRequest, prior wire.Stamp) {
	m.versions.Stamp(u, req, prior)
}

// RecordsSession implements chain.Mode: another site's update comes
// without its session.
func (m *Mode) RecordsSession(u *wire.Update) bool { return !m.versions.Remote(u) }

// Applied implements chain.Mode.
func (m *Mode) Applied(u *wire.Update) {
	m.versions.Apply(u)
	if m.shipping != nil {
		m.shipping.Applied(u)
	}
}

// Urgent implements chain.Mode: another site's update is forwarded at
// once past the lazy phase. No client here waits for it, and updates
// that depend on it (at this site's other volumes, ADR 13's visibility
// rule) wait until it is stable here: held back with this site's own
// updates, it made every causal step through this site as slow as the
// lazy phase, and remote visibility fell behind under write-heavy load
// for good (docs/experiments.md, chainreaction-fig3).
func (m *Mode) Urgent(u *wire.Update) bool {
	return m.shipping != nil && m.versions.Remote(u)
}

// HoldsAnswer implements chain.Mode; it holds nothing, but for the
// mutation that calls an answer stable before the tail has it.
func (m *Mode) HoldsAnswer(u *wire.Update) bool {
	if mutation.Enabled && m.core.Mutations().CausalStableEarly && !m.core.IsTail() {
		m.core.AnswerUpdate(u, true)
		return true
	}
	return false
}

// TailApplied implements chain.Mode: the waits for versions now
// committed are answered.
func (m *Mode) TailApplied() {
	m.answerStableWaiters()
	if m.shipping != nil {
		m.shipping.TailApplied()
	}
}

// AfterApply implements chain.Mode: the tail ships what became stable.
func (m *Mode) AfterApply() {
	if m.shipping != nil {
		m.shipping.ShipTo(m.core.Now(), true)
	}
}

// Committed implements chain.Mode: at the head, dependencies in this
// volume may be stable now.
func (m *Mode) Committed() {
	if m.core.IsHead() {
		m.answerStableWaiters()
	}
	if m.shipping != nil && m.core.IsHead() {
		m.shipping.SequenceInbound()
		m.shipping.ReportStable(m.core.Now())
	}
}

// Step implements chain.Mode: a read passed up, and the shipping's
// messages.
func (m *Mode) Step(from wire.NodeID, msg wire.Message) bool {
	switch msg := msg.(type) {
	case *wire.QueryUp:
		c := m.core
		if msg.Request.Volume != c.Volume() || msg.Request.Epoch != c.Epoch() {
			c.ProtocolError("successor passed up a query for volume %d epoch %d", msg.Request.Volume, msg.Request.Epoch)
			return true
		}
		m.query(msg.ReplyTo, &msg.Request)
		return true
	case *wire.Ship:
		if m.shipping != nil {
			m.shipping.HandleShip(from, msg)
			return true
		}
	case *wire.ShipAck:
		if m.shipping != nil {
			m.shipping.HandleShipAck(m.core.Now(), msg)
			return true
		}
	}
	return false
}

// AckNews implements chain.Mode.
func (m *Mode) AckNews() bool { return m.shipping != nil && m.shipping.AckNews() }

// FillAck implements chain.Mode.
func (m *Mode) FillAck(a *wire.Ack) {
	if m.shipping != nil {
		m.shipping.FillAck(a)
	}
}

// AckReceived implements chain.Mode.
func (m *Mode) AckReceived(a *wire.Ack) bool { return m.shipping != nil && m.shipping.AckReceived(a) }

// Tick implements chain.Mode.
func (m *Mode) Tick(now wire.Time) {
	if m.shipping != nil {
		m.shipping.SequenceInbound()
		m.shipping.ReportStable(now)
		m.shipping.ShipTo(now, false)
	}
}

// Completeness implements chain.Mode (the package comment).
func (m *Mode) Completeness(prev wire.Config, wasMember bool, catchUpTo wire.SN) wire.SN {
	c := m.core
	cfg := c.Config()
	switch i := c.Position(); {
	case i < 0 || i >= cfg.K:
		return storage.NeverCaughtUp
	case cfg.Fresh || prev.Epoch == 0 && cfg.Epoch == 1:
		return 0 // the chain begins, empty: nothing was answered
	case prev.Causal() && wasMember && prev.Index(c.ID()) < prev.K:
		return catchUpTo // still in the first K: complete, or catching up as before
	}
	return storage.NeverCaughtUp
}

// SyncReplied implements chain.Mode: once this member of the first K
// applied what a complete predecessor had, it is complete.
func (m *Mode) SyncReplied(r *wire.SyncReply) {
	c := m.core
	if r.PredecessorComplete && !c.Complete() && c.Position() >= 0 && c.Position() < c.Config().K {
		c.SetCatchUpTo(min(c.CatchUpTo(), r.PredecessorAppliedSN))
	}
}

// Adopted implements chain.Mode: a member no longer the head sends the
// waits it held (one site) to the new one.
func (m *Mode) Adopted() {
	if m.readsAsOf() && !m.core.IsHead() {
		m.releaseStableWaiters()
	}
	if m.shipping != nil {
		m.shipping.Adopted()
	}
}

// ReleaseTailRequests implements chain.Mode.
func (m *Mode) ReleaseTailRequests(answer bool) {
	if !answer {
		m.stableWaiters = nil
		return
	}
	if !m.readsAsOf() {
		m.releaseStableWaiters()
	}
	if m.shipping != nil {
		m.shipping.ReleaseTailRequests()
	}
}

// releaseStableWaiters tells the clients whose waits this member held
// to ask the member that answers them now.
func (m *Mode) releaseStableWaiters() {
	for i := range m.stableWaiters {
		w := &m.stableWaiters[i]
		m.core.Reply(w.replyTo, &w.req, wire.ErrNotTail, wire.Result{})
	}
	m.stableWaiters = nil
}

// Status implements chain.Mode.
func (m *Mode) Status(st *wire.VolumeStatus) {
	if m.shipping != nil {
		m.shipping.Status(st)
	}
}

// Restore implements chain.Mode.
func (m *Mode) Restore(meta storage.Meta) {
	m.versions.Restore(meta)
	if m.shipping != nil {
		m.shipping.Restore()
	}
}

// SaveMeta implements chain.Mode.
func (m *Mode) SaveMeta(meta *storage.Meta) { m.versions.SaveMeta(meta) }

// Reset implements chain.Mode.
func (m *Mode) Reset() {
	m.versions.Reset()
	if m.shipping != nil {
		m.shipping.Reset()
	}
	m.stableWaiters = nil
}

// SnapshotStarted implements chain.Mode.
func (m *Mode) SnapshotStarted() {
	m.versions.Reset()
	if m.shipping != nil {
		m.shipping.SnapshotStarted()
	}
}

// FillSnapshot implements chain.Mode.
func (m *Mode) FillSnapshot(last *wire.SnapshotChunk) {
	m.versions.FillSnapshot(last)
	if m.shipping != nil {
		m.shipping.FillSnapshot(last)
	}
}

// Installed implements chain.Mode.
func (m *Mode) Installed(last *wire.SnapshotChunk) {
	m.versions.Installed(last)
	if m.shipping != nil {
		m.shipping.Installed(last)
	}
}

// Vector returns the applied updates per origin site.
func (m *Mode) Vector() wire.Vector { return m.versions.Vector() }

// Shipper returns the volume's shipping as the server sees it (nil with
// one site).
func (m *Mode) Shipper() chain.Shipper {
	if m.shipping == nil {
		return nil
	}
	return m.shipping
}
