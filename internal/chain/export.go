package chain

import (
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Exports: a backup reads each volume as one frozen state at the member
// that answers its updates (wire.Config.Answerer: the tail, or a causal
// chain's k-th member; docs/adr/0030-backup-and-restore.md). The first
// page of an export freezes the volume's state (storage.Store.Export, as
// of the member's last commit) under the id the caller chose; later
// pages read on from that state, so every page of a volume comes from
// the state after one SN, whatever the chain applies meanwhile. The
// answerer holds every acknowledged update (once complete: a causal
// member that moved into the first k catches up first), so the state
// holds every update acknowledged before the export began.

const (
	// exportsMax bounds the exports a tail holds for one volume; beyond
	// it a new one is refused (ErrUnavailable: try again later).
	exportsMax = 4
	// exportIdle is how long a tail keeps an export no page was asked
	// of: a backup that stopped, or one whose last answer was lost.
	exportIdle = wire.Time(30e9)
)

// heldExport is an export an answerer holds.
type heldExport struct {
	view   storage.Export
	usedAt wire.Time
}

// handleExport answers an OpExport: a page of the export named
// Op.Delta from Op.Key on, freezing the volume's state first if this
// tail holds no export under that id (the page then says Began). The
// last page ends the export.
func (r *Replica) handleExport(from wire.NodeID, req *wire.ClientRequest) {
	switch {
	case !r.exportsHere():
		r.reply(from, req, wire.ErrNotTail, wire.Result{})
		return
	case !r.complete():
		r.reply(from, req, wire.ErrUnavailable, wire.Result{})
		return
	}
	id := req.Op.Delta
	held, began := r.exports[id], false
	if held == nil {
		if len(r.exports) >= exportsMax {
			r.reply(from, req, wire.ErrUnavailable, wire.Result{})
			return
		}
		if r.exports == nil {
			r.exports = map[int64]*heldExport{}
		}
		held, began = &heldExport{view: r.store.Export()}, true
		r.exports[id] = held
	}
	if mutation.Enabled && r.mutations.ExportUnfrozen && !began {
		held.view.Close()
		held.view = r.store.Export()
	}
	held.usedAt = r.now
	start := max(req.Op.Key, firstUserKey) // the reserved keys sort first
	objects, more := held.view.Page(start, min(max(r.limits.ExportPageObjects, 1), wire.ExportPageObjects), wire.ExportPageBytes)
	page := wire.ExportPage{SN: held.view.Applied(), Objects: make([]wire.ExportObject, 0, len(objects)), More: more, Began: began}
	for _, o := range objects {
		page.Objects = append(page.Objects, wire.ExportObject{Key: o.Key, Value: o.Object.Value, Expires: o.Object.Expires, Type: o.Object.Type})
	}
	if !more {
		r.closeExport(id)
	}
	// The state's SN is stable (processed by the tail) only where the
	// tail answers: a causal chain's k-th member must not call it so.
	r.replyAs(from, req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true, Value: wire.EncodeExportPage(page), SN: page.SN}, r.role.isTail())
}

// exportsHere reports whether this replica answers exports: it is the
// chain's answerer.
func (r *Replica) exportsHere() bool { return r.role.isMember() && r.config.Answerer() == r.id }

// closeExport releases one export.
func (r *Replica) closeExport(id int64) {
	if held := r.exports[id]; held != nil {
		held.view.Close()
		delete(r.exports, id)
	}
}

// dropExports releases the exports no page was asked of for exportIdle,
// or every one (all) when this replica stops being the answerer or drops
// its state.
func (r *Replica) dropExports(now wire.Time, all bool) {
	for id, held := range r.exports {
		if all || now-held.usedAt >= exportIdle {
			r.closeExport(id)
		}
	}
}

// Exports returns how many exports the replica holds (metrics, tests).
func (r *Replica) Exports() int { return len(r.exports) }
