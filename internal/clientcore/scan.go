package clientcore

import (
	"cmp"
	"slices"

	"github.com/catena-kv/catena/internal/placement"

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
// its order: keyspace by keyspace, in the order they were created, and
// within a keyspace in split order (scanOrder); 0 .. Volumes()-1 when
// keyspaces are not known. Empty until the core knows the volumes.
func (c *Core) ScanVolumes() []wire.VolumeID {
	var out []wire.VolumeID
	if len(c.keyspaces) > 0 && c.opts.Volumes == 0 {
		ks := slices.Clone(c.keyspaces)
		slices.SortFunc(ks, func(a, b wire.Keyspace) int { return cmp.Compare(a.FirstVolume, b.FirstVolume) })
		for _, k := range ks {
			out = append(out, scanOrder(k)...)
		}
		return out
	}
	for v := range c.Volumes() {
		out = append(out, wire.VolumeID(v))
	}
	return out
}

// scanOrder returns keyspace k's volumes in the order a scan walks them:
// by their index modulo the volumes k was created with, then by the
// bit-reversed number of the split that made them (Redis walks its hash
// table's buckets in the same order, so that a table that grows during
// a scan loses it nothing). A volume's descendants by later splits come
// right after it, together: a walk that finished a volume before it
// split need not read them, and one reading it when it split reads them
// next (ScanCursor).
func scanOrder(k wire.Keyspace) []wire.VolumeID {
	n0 := k.Volumes >> k.Splits
	if n0 < 1 {
		return k.VolumeList()
	}
	idx := make([]int, k.Volumes)
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) (int, uint) {
		return i % n0, reverseBits(uint(i/n0), k.Splits)
	}
	slices.SortFunc(idx, func(a, b int) int {
		ga, ra := key(a)
		gb, rb := key(b)
		return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(ra, rb))
	})
	out := make([]wire.VolumeID, len(idx))
	for j, i := range idx {
		out[j] = k.Volume(i)
	}
	return out
}

// reverseBits returns x's low bits bits in reverse order.
func reverseBits(x uint, bits int) uint {
	var r uint
	for range bits {
		r, x = r<<1|x&1, x>>1
	}
	return r
}

// ScanCursor is where a walk of every volume resumes (client.Cursor and
// the simulator's scans keep one): the volume being read and the key its
// next page starts at. Group is the volume the walk last took from the
// order, and Modulus its keyspace's volume count then; Pending are the
// volumes its read found it split into (wire.ScanPage.SplitInto), each
// with the key to read it from, and Read those it read so. A walk
// returns every key present for its whole duration, splits included,
// and none twice.
type ScanCursor struct {
	Started, Done bool
	Volume        wire.VolumeID
	From          string
	Group         wire.VolumeID
	Modulus       int
	Pending       []ScanPosition
	Read          []wire.VolumeID
}

// ScanPosition is a volume and the key a walk reads it from.
type ScanPosition struct {
	Volume wire.VolumeID
	From   string
}

// ScanStart returns a walk's first position; false while the core knows
// no volumes.
func (c *Core) ScanStart() (ScanCursor, bool) {
	order := c.ScanVolumes()
	if len(order) == 0 {
		return ScanCursor{}, false
	}
	return c.scanEnter(order[0]), true
}

// scanEnter returns the cursor at the start of volume v, taken from the
// order.
func (c *Core) scanEnter(v wire.VolumeID) ScanCursor {
	cur := ScanCursor{Started: true, Volume: v, Group: v}
	if ks, ok := placement.KeyspaceOfVolume(c.keyspaces, v); ok {
		cur.Modulus = ks.Volumes
	}
	return cur
}

// ScanAdvance returns where the walk goes after page, a page of cur's
// volume read from cur.From: on in the volume; to a volume the page
// says it split into, from where the page began, before anything else
// (a key that moved after the walk had read past it was listed
// already, one ahead of it was not); or to the next volume of the order
// that is not a descendant of the group (a descendant made after the
// walk finished the group holds only keys listed from it, or created
// since).
func (c *Core) ScanAdvance(cur ScanCursor, page wire.ScanPage) ScanCursor {
	next := cur
	next.Pending = slices.Clone(cur.Pending)
	if page.SplitInto != 0 && !slices.ContainsFunc(next.Pending, func(p ScanPosition) bool { return p.Volume == page.SplitInto }) {
		next.Pending = append(next.Pending, ScanPosition{Volume: page.SplitInto, From: cur.From})
	}
	if page.More {
		next.From = wire.ScanAfter(page.Next)
		return next
	}
	if len(next.Pending) > 0 {
		next.Volume, next.From, next.Pending = next.Pending[0].Volume, next.Pending[0].From, next.Pending[1:]
		next.Read = append(slices.Clone(cur.Read), next.Volume)
		return next
	}
	order := c.ScanVolumes()
	at := slices.Index(order, cur.Group)
	if at < 0 {
		// (Not among the volumes known now: go on by id, as a keyspace
		// created meanwhile adds volumes after the others.)
		at = slices.IndexFunc(order, func(v wire.VolumeID) bool { return v > cur.Group }) - 1
		if at < -1 {
			return ScanCursor{Started: true, Done: true}
		}
	}
	for _, v := range order[at+1:] {
		// (A volume the split made that was in the list when the walk
		// took the group, and that it read from where the split found
		// it, is no descendant, but read.)
		if !c.descends(v, cur.Group, cur.Modulus) && !slices.Contains(cur.Read, v) {
			return c.scanEnter(v)
		}
	}
	return ScanCursor{Started: true, Done: true}
}

// descends reports whether volume v was made by splitting volume group
// (or a volume made so) since group's keyspace had modulus volumes: v's
// index is group's modulo modulus.
func (c *Core) descends(v, group wire.VolumeID, modulus int) bool {
	ks, ok := placement.KeyspaceOfVolume(c.keyspaces, v)
	if !ok || modulus < 1 || !ks.HasVolume(group) {
		return false
	}
	i, _ := ks.IndexOf(v)
	g, _ := ks.IndexOf(group)
	return i != g && i%modulus == g%modulus
}
