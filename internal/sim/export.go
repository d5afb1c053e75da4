package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Exports (Options.Backups): clients also read whole volumes as a
// backup does (clientcore.StartExport; docs/adr/0030), a page of
// chain.Limits.ExportPageObjects objects at a time at the chain's
// answerer, starting the volume over when the answerer lost the export.
// The run checks each read volume against the history: it holds every
// key some write created before the read began and no delete could have
// removed before it ended, and only keys some write created before it
// ended; its state's SN is at least that of every update of the volume
// answered before it began; every page of one read has one SN.

// exportRecord is one volume a client read whole.
type exportRecord struct {
	client    wire.NodeID
	volume    wire.VolumeID
	keyspaces []wire.Keyspace
	call, ret wire.Time
	keys      []string
	restarts  int
	// sn is the SN of the state read: it must cover every update of
	// the volume answered before the read began.
	sn wire.SN
}

// exportRead is a client's export in progress.
type exportRead struct {
	volume   wire.VolumeID
	id       int64
	from     string
	sn       wire.SN
	started  bool
	call     wire.Time
	keys     []string
	restarts int
	page     clientcore.OpID
}

// startExport begins reading a volume the core knows, drawn by the
// client's randomness; false if it knows none yet.
func (c *client) startExport(now wire.Time) bool {
	volumes := c.core.ScanVolumes()
	if len(volumes) == 0 || len(c.core.Keyspaces()) == 0 {
		return false
	}
	c.export = &exportRead{volume: volumes[c.rng.IntN(len(volumes))], id: c.rng.Int64() | 1, call: c.realTime()}
	c.askExportPage(now)
	return true
}

func (c *client) askExportPage(now wire.Time) {
	x := c.export
	x.page = c.core.StartExport(now, x.volume, x.id, x.from, clientcore.CallOptions{Deadline: now + c.timeouts.giveUp})
}

// exportPage takes the answer to the export's page.
func (c *client) exportPage(now wire.Time, d clientcore.Done) {
	x := c.export
	if d.Outcome != clientcore.OK {
		c.export = nil // not answered in time: a read the client abandons
		return
	}
	page, err := wire.DecodeExportPage(d.Result.Value)
	if err != nil {
		c.failure(fmt.Sprintf("client %s: an export page of volume %d: %v", c.id, x.volume, err))
		c.export = nil
		return
	}
	if x.started && page.Began {
		x.keys, x.restarts, x.started = nil, x.restarts+1, false
		if x.from != "" {
			// The answerer froze a new state for this page: read that
			// from its first key.
			x.from = ""
			c.askExportPage(now)
			return
		}
	}
	if x.started && !page.Began && page.SN != x.sn {
		c.failure(fmt.Sprintf("client %s: pages of one export of volume %d hold the states after SN %d and %d", c.id, x.volume, x.sn, page.SN))
	}
	x.started, x.sn = true, page.SN
	for _, o := range page.Objects {
		if !strings.HasPrefix(o.Key, expiryKeyPrefix) { // (checked by their own rule: expiry.go)
			x.keys = append(x.keys, o.Key)
		}
	}
	if page.More {
		x.from = wire.ScanAfter(page.Objects[len(page.Objects)-1].Key)
		c.askExportPage(now)
		return
	}
	*c.exports = append(*c.exports, exportRecord{client: c.id, volume: x.volume, keyspaces: c.core.Keyspaces(), call: x.call, ret: c.realTime(), keys: x.keys, restarts: x.restarts, sn: x.sn})
	c.export = nil
}

// checkExports checks every volume read against the history, as
// checkScans checks scans, on the keys the volume holds at the state
// read: holds says whether it does, or sure is false when the run
// cannot tell (splits.go).
func checkExports(exports []exportRecord, history []check.Operation, holds func(x exportRecord, key string) (held, sure bool)) error {
	created := map[string][]check.Operation{}
	deleted := map[string][]check.Operation{}
	for _, op := range history {
		switch {
		case op.Op.Kind == wire.OpDelete || op.Op.Kind == wire.OpHashDelete:
			deleted[op.Op.Key] = append(deleted[op.Op.Key], op)
		case createsKey(op):
			created[op.Op.Key] = append(created[op.Op.Key], op)
		}
	}
	for _, x := range exports {
		for _, op := range history {
			if op.Unknown || op.Op.Kind.IsQuery() || wire.Time(op.Return) >= x.call || op.Result.SN <= x.sn {
				continue
			}
			if held, sure := holds(x, op.Op.Key); held && sure {
				return fmt.Errorf("export of volume %d by %s [%.3fs, %.3fs] read the state after SN %d, without %v answered at %.3fs with SN %d",
					x.volume, x.client, float64(x.call)/1e9, float64(x.ret)/1e9, x.sn, op.Op, float64(op.Return)/1e9, op.Result.SN)
			}
		}
		s := scanRecord{client: x.client, call: x.call, ret: x.ret}
		held := map[string]bool{}
		for _, k := range x.keys {
			if held[k] {
				return fmt.Errorf("export of volume %d by %s [%.3fs, %.3fs] holds %q twice", x.volume, x.client, float64(x.call)/1e9, float64(x.ret)/1e9, k)
			}
			held[k] = true
			if !slices.ContainsFunc(created[k], func(c check.Operation) bool { return wire.Time(c.Call) < x.ret }) {
				return fmt.Errorf("export of volume %d by %s [%.3fs, %.3fs] holds %q, which no write created before it ended", x.volume, x.client, float64(x.call)/1e9, float64(x.ret)/1e9, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(created)) {
			if owned, sure := holds(x, k); held[k] || !owned || !sure {
				continue
			}
			for _, c := range created[k] {
				if presentThroughout(c, deleted[k], s) {
					return fmt.Errorf("export of volume %d by %s [%.3fs, %.3fs] lacks %q, which exists throughout: %v returned at %.3fs and no delete could follow before the export ended",
						x.volume, x.client, float64(x.call)/1e9, float64(x.ret)/1e9, k, c.Op, float64(c.Return)/1e9)
				}
			}
		}
	}
	return nil
}
