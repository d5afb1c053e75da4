package hierarchical

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/sites"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// New returns the hierarchical mode of core's replica; its server must
// know its site (Core.Sites).
func New(core *chain.Core) *Mode {
	h := &Mode{Strong: chain.Strong{Core: core}, core: core, sites: core.Sites()}
	h.versions = sites.NewVersions(core, h.sites.Site(), false)
	h.shipping = sites.NewShipping(core, h.versions, sites.Options{Relays: true, Policy: policy{h}})
	return h
}

// ControlMachine returns the control machine of the volume's head as it
// runs now (nil elsewhere, or before its first use), for the simulator's
// checks across sites.
func (h *Mode) ControlMachine() *control.Machine {
	if !h.core.IsHead() {
		return nil
	}
	return h.machine
}

// Shipping returns the volume's shipping to the other sites.
func (h *Mode) Shipping() *sites.Shipping { return h.shipping }

// Versions returns the volume's versions.
func (h *Mode) Versions() *sites.Versions { return h.versions }

// Traits implements chain.Mode: a strong chain whose updates are stamped,
// whose messages wait for each member's commit (answers depend on other
// sites), and whose joining servers take snapshots (the shipping log is
// not part of a catch-up).
func (h *Mode) Traits(c wire.Config) chain.Traits {
	t := chain.StrongTraits(c)
	t.Stamps, t.Pipelines, t.CatchesUp = true, false, false
	return t
}

// AdmitForwarded implements chain.Mode: a write or read another site's
// head forwarded here, as the key's primary, is taken from a member of
// the active view (ADR 16) whatever its epoch.
func (h *Mode) AdmitForwarded(req *wire.ClientRequest) wire.ErrCode {
	if !h.inView(req.FromSite) {
		return wire.ErrUnavailable
	}
	return wire.ErrNone
}

// Query implements chain.Mode: a write's wait for other sites is
// answered by the shipping; a wait for a dependency is refused (the
// updates depend on nothing: Versions).
func (h *Mode) Query(from wire.NodeID, req *wire.ClientRequest) bool {
	switch req.Op.Kind {
	case wire.OpWaitShipped:
		h.shipping.HandleWaitShipped(from, req)
	case wire.OpWaitStable:
		h.core.Reply(from, req, wire.ErrBadRequest, wire.Result{})
	default:
		return false
	}
	return true
}

// RouteRead implements chain.Mode: a read of a key another site is the
// primary of goes to that site's tail.
func (h *Mode) RouteRead(from wire.NodeID, req *wire.ClientRequest) bool {
	site, ok := h.controlledElsewhere(req.Op.Key)
	if ok {
		h.forwardRead(from, req, site)
	}
	return ok
}

// HoldRead implements chain.Mode (holdRead).
func (h *Mode) HoldRead(from wire.NodeID, req *wire.ClientRequest, s wire.Stamp, result wire.Result) bool {
	return h.holdRead(from, req, s, result)
}

// AdmitUpdate implements chain.Mode: a stamped update's timestamp and
// dependencies must be right.
func (h *Mode) AdmitUpdate(req *wire.ClientRequest) wire.ErrCode { return h.versions.CheckRequest(req) }

// SessionRequest implements chain.Mode: a client's writes run at
// whichever site controls their keys, and its session reaches the others
// with the shipped writes, so one this site lacks may still be on its
// way, not evicted.
func (h *Mode) SessionRequest(req *wire.ClientRequest) *wire.ClientRequest {
	if !req.ExpectSession {
		return req
	}
	c := *req
	c.ExpectSession = false
	return &c
}

// Repeatable implements chain.Mode: in durable mode a recorded write is
// answered again only once every site holds it (durableHere).
func (h *Mode) Repeatable(result wire.Result) bool { return h.durableHere(result.Stamp) }

// Sequence implements chain.Mode: the control machine decides.
func (h *Mode) Sequence(from wire.NodeID, req *wire.ClientRequest) bool {
	return h.controlWrite(from, req) // (else waiting for an election, or refused)
}

// Stamp implements chain.Mode.
func (h *Mode) Stamp(u *wire.Update, req *wire.ClientRequest, prior wire.Stamp) {
	h.versions.Stamp(u, req, prior)
}

// RecordsSession implements chain.Mode: a write's session travels with
// it; the records and a returning site's restored keys have none.
func (h *Mode) RecordsSession(u *wire.Update) bool { return u.Client != 0 && !isControlUpdate(u) }

// Applied implements chain.Mode.
func (h *Mode) Applied(u *wire.Update) {
	h.versions.Apply(u)
	h.shipping.Applied(u)
	h.applyControl(u)
}

// HoldsAnswer implements chain.Mode (holdAnswer).
func (h *Mode) HoldsAnswer(u *wire.Update) bool { return h.holdAnswer(u) }

// TailApplied implements chain.Mode.
func (h *Mode) TailApplied() { h.shipping.TailApplied() }

// AfterApply implements chain.Mode: the tail ships what became stable.
func (h *Mode) AfterApply() { h.shipping.ShipTo(h.core.Now(), true) }

// Committed implements chain.Mode: the machine's messages whose records
// the tail processed go; at the head, other sites' updates may be
// sequenced, and their shippers hear what is stable here.
func (h *Mode) Committed() {
	h.releaseControl()
	if h.core.IsHead() {
		h.shipping.SequenceInbound()
		h.reportStable()
	}
}

// Step implements chain.Mode: the shipping's messages, the control
// machines' and the answers to what this site forwarded or fetched.
func (h *Mode) Step(from wire.NodeID, m wire.Message) bool {
	switch m := m.(type) {
	case *wire.Ship:
		h.shipping.HandleShip(from, m)
	case *wire.ShipAck:
		h.shipping.HandleShipAck(h.core.Now(), m)
	case *wire.Fetch:
		h.handleFetch(from, m)
	case *wire.Fetched:
		h.handleFetched(m)
	case *wire.Control:
		h.handleControl(from, m)
	case *wire.ClientReply:
		h.handleRelayedReply(m)
	default:
		return false
	}
	return true
}

// AckNews implements chain.Mode.
func (h *Mode) AckNews() bool { return h.shipping.AckNews() }

// FillAck implements chain.Mode.
func (h *Mode) FillAck(a *wire.Ack) { h.shipping.FillAck(a) }

// AckReceived implements chain.Mode.
func (h *Mode) AckReceived(a *wire.Ack) bool { return h.shipping.AckReceived(a) }

// Tick implements chain.Mode.
func (h *Mode) Tick(now wire.Time) {
	h.shipping.SequenceInbound()
	h.tickControl(now)
	h.shipping.ShipTo(now, false)
}

// Adopted implements chain.Mode: what a new configuration's role no
// longer needs goes (the tail's relays and leases, the head's machine).
func (h *Mode) Adopted() {
	h.shipping.Adopted()
	if !h.core.IsTail() {
		h.holds, h.leaseSince = nil, 0
	}
	h.adoptHier()
}

// ReleaseTailRequests implements chain.Mode: the tail's waits go back to
// their clients; the answers it held are dropped (their clients ask
// again: the head answers once every site holds them).
func (h *Mode) ReleaseTailRequests(bool) {
	h.shipping.ReleaseTailRequests()
	h.heldAnswers = nil
}

// BecameTail implements chain.Mode.
func (h *Mode) BecameTail() { h.releaseControl() }

// Status implements chain.Mode: the head also reports which site
// controls which keys and prefixes (catena status).
func (h *Mode) Status(st *wire.VolumeStatus) {
	h.shipping.Status(st)
	if !h.core.IsHead() || h.machine == nil {
		return
	}
	for _, path := range slices.Sorted(maps.Keys(h.state.Votes)) {
		if len(st.Control) == wire.ControlReportMax {
			break
		}
		v := h.state.Votes[path]
		st.Control = append(st.Control, wire.PathControl{Path: h.prefix + path, Site: v.Holder, Deep: v.Deep})
	}
}

// Restore implements chain.Mode.
func (h *Mode) Restore(meta storage.Meta) {
	h.versions.Restore(meta)
	h.loadControlState()
	h.shipping.Restore()
}

// SaveMeta implements chain.Mode.
func (h *Mode) SaveMeta(meta *storage.Meta) { h.versions.SaveMeta(meta) }

// Reset implements chain.Mode.
func (h *Mode) Reset() {
	h.versions.Reset()
	h.shipping.Reset()
	h.hierState = hierState{}
	h.heldAnswers, h.shippers = nil, nil
}

// SnapshotStarted implements chain.Mode: the versions and shipping go,
// and what the tail and head held of them; the control state stays
// until the snapshot's records replace it.
func (h *Mode) SnapshotStarted() {
	h.versions.Reset()
	h.shipping.SnapshotStarted()
	h.heldAnswers, h.shippers = nil, nil
}

// FillSnapshot implements chain.Mode.
func (h *Mode) FillSnapshot(last *wire.SnapshotChunk) {
	h.versions.FillSnapshot(last)
	h.shipping.FillSnapshot(last)
}

// Installed implements chain.Mode.
func (h *Mode) Installed(last *wire.SnapshotChunk) {
	h.versions.Installed(last)
	h.shipping.Installed(last)
	h.loadControlState()
}

// policy is the shipping's Policy: what hierarchical control decides
// about it.
type policy struct{ h *Mode }

// RefusesShipment implements sites.Policy (refusesShipment).
func (p policy) RefusesShipment(m *wire.Ship) bool { return p.h.refusesShipment(m) }

// ShipmentTaken implements sites.Policy (noteShipper).
func (p policy) ShipmentTaken(from wire.NodeID, m *wire.Ship, stable uint64) {
	p.h.noteShipper(from, m, stable)
}

// Barrier implements sites.Policy (restoreBarrier).
func (p policy) Barrier(site wire.SiteID) uint64 { return p.h.restoreBarrier(site) }

// View implements sites.Policy: the view of the site's records.
func (p policy) View() uint64 { return p.h.state.View.N }

// Outgoing implements sites.Policy: this site's updates the others gave
// up ship as no-ops (rejoin.go).
func (p policy) Outgoing(origin wire.SiteID, u *wire.Update) {
	if origin == p.h.sites.Site() && p.h.expiredUpdate(u.Stamp.N) {
		*u = asNoOp(*u)
	}
}

// Relay implements sites.Policy (relayTo).
func (p policy) Relay(now wire.Time, idleOnly bool) { p.h.relayTo(now, idleOnly) }

// ShipmentAcked implements sites.Policy (answerHeldAnswers).
func (p policy) ShipmentAcked() { p.h.answerHeldAnswers() }

var (
	_ chain.Mode   = (*Mode)(nil)
	_ sites.Policy = policy{}
)

// Vector returns the applied updates per origin site.
func (h *Mode) Vector() wire.Vector { return h.versions.Vector() }

// Shipper returns the volume's shipping as the server sees it.
func (h *Mode) Shipper() chain.Shipper { return h.shipping }
