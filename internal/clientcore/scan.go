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
// the simulator's scans keep one): the volume being read, the key its
// next page starts at, and Passed, the keyspace's volume count after the
// last split the volume had passed when the walk began it (0 before its
// first page). Group is the volume the walk last took from the order;
// Pending are the volumes a read found its volume split into meanwhile
// (wire.ScanPage), each with the key to read it from; Read are the
// volumes read for the group, with their Passed. A walk returns every
// key present for its whole duration, splits included, and none twice.
type ScanCursor struct {
	Started, Done bool
	Volume        wire.VolumeID
	From          string
	Passed        uint32
	Group         wire.VolumeID
	Pending       []ScanPosition
	Read          []ScanPosition
}

// ScanPosition is a volume and the key a walk reads it from; in
// ScanCursor.Read, the volume and what its read had Passed.
type ScanPosition struct {
	Volume wire.VolumeID
	From   string
	Passed uint32
}

// ScanStart returns a walk's first position; false while the core knows
// no volumes.
func (c *Core) ScanStart() (ScanCursor, bool) {
	order := c.ScanVolumes()
	if len(order) == 0 {
		return ScanCursor{}, false
	}
	return ScanCursor{Started: true, Volume: order[0], Group: order[0]}, true
}

// ScanAdvance returns where the walk goes after page, a page of cur's
// volume read from cur.From:
//
//   - on in the volume;
//   - to a volume the volume split into while the walk read it (the
//     page has passed a split its first page had not), from where this
//     page began, before anything else: a key that moved after the walk
//     had read past it was listed already, one ahead of it was not;
//   - or to the next volume of the order that is none of those read for
//     the group, nor made by a split of one of them that its read had not
//     passed when it began: such a volume's keys were in the one read, or
//     were written since.
func (c *Core) ScanAdvance(cur ScanCursor, page wire.ScanPage) ScanCursor {
	next := cur
	next.Pending, next.Read = slices.Clone(cur.Pending), slices.Clone(cur.Read)
	passed := max(page.SplitModulus, c.madeAt(cur.Volume))
	switch {
	case cur.Passed == 0:
		next.Passed = passed
	case passed > cur.Passed && page.SplitInto != 0:
		next.Passed = passed
		next.Pending = append(next.Pending, ScanPosition{Volume: page.SplitInto, From: cur.From})
	}
	if page.More {
		next.From = wire.ScanAfter(page.Next)
		return next
	}
	next.Read = append(next.Read, ScanPosition{Volume: cur.Volume, Passed: firstPassed(cur, next)})
	if len(next.Pending) > 0 {
		next.Volume, next.From, next.Passed, next.Pending = next.Pending[0].Volume, next.Pending[0].From, 0, next.Pending[1:]
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
		if !c.covered(v, next.Read) {
			return ScanCursor{Started: true, Volume: v, Group: v}
		}
	}
	return ScanCursor{Started: true, Done: true}
}

// ScanBehind reports whether a page of volume v tells of a split the
// keyspace list the core routes by does not hold yet: the walk must
// learn the newer list (RequestConfig) before it advances past the page.
func (c *Core) ScanBehind(v wire.VolumeID, page wire.ScanPage) bool {
	if page.SplitModulus == 0 {
		return false
	}
	ks, ok := placement.KeyspaceOfVolume(c.keyspaces, v)
	return !ok || uint32(ks.Volumes) < page.SplitModulus || page.SplitInto != 0 && !ks.HasVolume(page.SplitInto)
}

// firstPassed is what the volume's read had passed at its first page.
func firstPassed(cur, next ScanCursor) uint32 {
	if cur.Passed != 0 {
		return cur.Passed
	}
	return next.Passed
}

// covered reports whether the walk need not read volume v: it read it
// for the group, or v was made by splitting a volume r it read (or a
// volume made so) in a split r's read had not passed when it began.
func (c *Core) covered(v wire.VolumeID, read []ScanPosition) bool {
	ks, ok := placement.KeyspaceOfVolume(c.keyspaces, v)
	if !ok {
		return false
	}
	i, _ := ks.IndexOf(v)
	for _, r := range read {
		g, ok := ks.IndexOf(r.Volume)
		switch {
		case r.Volume == v:
			return true
		case !ok:
			continue
		}
		made := int(c.madeAt(r.Volume))
		if i < made || i%made != g%made {
			continue // not made from r
		}
		// The count after the split that parted v's keys from r's: the
		// first, from r's making on, at which their indexes differ.
		parted := 2 * made
		for i%parted == g%parted {
			parted *= 2
		}
		if uint32(parted) > r.Passed {
			return true
		}
	}
	return false
}

// madeAt returns the keyspace's volume count right after volume v was
// made: the count it was created with, or the count after the split
// that made v (1 if v is no keyspace's).
func (c *Core) madeAt(v wire.VolumeID) uint32 {
	ks, ok := placement.KeyspaceOfVolume(c.keyspaces, v)
	if !ok {
		return 1
	}
	i, _ := ks.IndexOf(v)
	return uint32(ks.MadeAt(i))
}
