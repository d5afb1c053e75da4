package clientcore

import (
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// Scans. A scan lists one volume at a time, a page per request, at the
// volume's tail (chain.Replica.handleScan); a cursor is the volume and
// the last key a page examined, so a scan resumes at whichever member is
// tail by then and returns every key present for the whole scan at least
// once (Redis's SCAN guarantee). The caller walks the volumes in order
// (ScanVolumes).

// StartScan begins a scan request of volume: up to count keys from from
// on (from included; empty: the first), those that match the Redis glob pattern
// match (empty: all). Done.Result.Value holds a wire.ScanPage
// (wire.DecodeScanPage).
func (c *Core) StartScan(now wire.Time, volume wire.VolumeID, from, match string, count int, call CallOptions) OpID {
	o := c.newOperation(wire.Op{Kind: wire.OpScan, Key: from, Value: []byte(match), Delta: int64(count)}, call)
	o.scans = volume
	return c.begin(now, o)
}

// StartExport asks for a page of an export of volume (chain.Replica.
// handleExport): the objects from from on (included) of the state the
// tail froze under id (nonzero; the tail freezes one if it holds none
// under id). Done.Result.Value holds a wire.ExportPage
// (wire.DecodeExportPage).
func (c *Core) StartExport(now wire.Time, volume wire.VolumeID, id int64, from string, call CallOptions) OpID {
	o := c.newOperation(wire.Op{Kind: wire.OpExport, Key: from, Delta: id}, call)
	o.scans = volume
	return c.begin(now, o)
}

// ScanVolumes returns the volumes a scan of the whole database walks, in
// order: every keyspace's, or 0 .. Volumes()-1 when keyspaces are not
// known. Empty until the core knows the volumes.
func (c *Core) ScanVolumes() []wire.VolumeID {
	var out []wire.VolumeID
	if len(c.keyspaces) > 0 && c.opts.Volumes == 0 {
		for _, ks := range c.keyspaces {
			out = append(out, ks.VolumeList()...)
		}
		slices.Sort(out)
		return out
	}
	for v := range c.Volumes() {
		out = append(out, wire.VolumeID(v))
	}
	return out
}
