package storage

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/cockroachdb/pebble/v2"
)

// Export is a point-in-time view of one volume's objects and applied
// sequence number, read page by page while the store goes on changing:
// what a backup reads (docs/adr/0030-backup-and-restore.md). Its pages
// all come from the one state it was taken at. Close releases it.
type Export interface {
	// Applied is the SN of the last update the view holds (0: none).
	Applied() wire.SN
	// Page returns, in key order, the existing objects (tombstones are
	// left out) whose keys sort at or after from: at least one if any,
	// then more until max objects or maxBytes of keys and values would
	// be passed. more says whether objects follow the last one.
	Page(from string, max, maxBytes int) (objects []KeyObject, more bool)
	Close()
}

// pageFull reports whether a page of n objects holding size bytes may
// take one more of next bytes.
func pageFull(n, size, next, max, maxBytes int) bool {
	return n > 0 && (n >= max || size+next > maxBytes)
}

// memoryExport is a Memory store's export: a copy of its objects.
type memoryExport struct {
	applied wire.SN
	objects []KeyObject
}

// Export implements Store. The view is the store as it is now (a memory
// store has no commits to wait for), copied.
func (m *Memory) Export() Export {
	x := &memoryExport{}
	if meta, ok := m.Meta(); ok {
		x.applied = meta.Applied
	}
	for _, o := range m.Snapshot() {
		if o.Object.Exists {
			x.objects = append(x.objects, o)
		}
	}
	return x
}

func (x *memoryExport) Applied() wire.SN { return x.applied }

func (x *memoryExport) Page(from string, max, maxBytes int) ([]KeyObject, bool) {
	var out []KeyObject
	size := 0
	for _, o := range x.objects {
		if o.Key < from {
			continue
		}
		next := len(o.Key) + len(o.Object.Value)
		if pageFull(len(out), size, next, max, maxBytes) {
			return out, true
		}
		o.Object.Value = bytes.Clone(o.Object.Value)
		out = append(out, o)
		size += next
	}
	return out, false
}

func (x *memoryExport) Close() { x.objects = nil }

// pebbleExport is a Pebble store's export: a Pebble snapshot of the
// database, so the view is the volume as of its last commit (its
// objects, deadlines, types and meta were committed together).
type pebbleExport struct {
	s       *pebbleStore
	snap    *pebble.Snapshot
	applied wire.SN
}

// openSnapshots are the exports of an engine and its siblings not yet
// closed: the database cannot close while one is open, so Close closes
// what is left.
type openSnapshots struct {
	mu   sync.Mutex
	open map[*pebble.Snapshot]bool
}

func (o *openSnapshots) add(s *pebble.Snapshot) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil {
		o.open = map[*pebble.Snapshot]bool{}
	}
	o.open[s] = true
}

// remove forgets s and reports whether it was open.
func (o *openSnapshots) remove(s *pebble.Snapshot) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	was := o.open[s]
	delete(o.open, s)
	return was
}

// closeAll closes every snapshot still open.
func (o *openSnapshots) closeAll() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for s := range o.open {
		errs = append(errs, s.Close())
	}
	clear(o.open)
	return errors.Join(errs...)
}

// Export implements Store: the view is what the last Commit made
// durable (pending writes are not in it).
func (s *pebbleStore) Export() Export {
	snap := s.e.db.NewSnapshot()
	s.e.snapshots.add(snap)
	x := &pebbleExport{s: s, snap: snap}
	value, closer, err := snap.Get(volumePrefix(kindMeta, s.vol))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		s.fail("export meta", err)
	default:
		meta, err := decodeMeta(value)
		closer.Close()
		if err != nil {
			s.fail("export meta", err)
		}
		x.applied = meta.Applied
	}
	return x
}

func (x *pebbleExport) Applied() wire.SN { return x.applied }

// Page implements Export: one bounded walk of the objects, then one of
// each kind of per-key record the volume may hold over the same keys.
func (x *pebbleExport) Page(from string, max, maxBytes int) ([]KeyObject, bool) {
	s := x.s
	prefix := volumePrefix(kindObject, s.vol)
	var out []KeyObject
	more, size := false, 0
	x.walk("export objects", objectKey(s.vol, from), prefixEnd(prefix), func(key, value []byte) bool {
		next := len(key) - len(prefix) + len(value)
		if pageFull(len(out), size, next, max, maxBytes) {
			more = true
			return false
		}
		out = append(out, KeyObject{Key: string(key[len(prefix):]), Object: kv.Object{Value: bytes.Clone(value), Exists: true}})
		size += next
		return true
	})
	if len(out) == 0 {
		return out, false
	}
	last := out[len(out)-1].Key
	merge := func(kind byte, op string, take func(o *kv.Object, value []byte)) {
		kp := volumePrefix(kind, s.vol)
		i := 0
		x.walk(op, keyOf(kind, s.vol, from), keyOf(kind, s.vol, last+"\x00"), func(key, value []byte) bool {
			k := string(key[len(kp):])
			for i < len(out) && out[i].Key < k {
				i++
			}
			if i < len(out) && out[i].Key == k {
				take(&out[i].Object, value)
			}
			return true
		})
	}
	merge(kindDeadline, "export deadlines", func(o *kv.Object, value []byte) {
		t, err := decodeDeadline(value)
		if err != nil {
			s.fail("export deadlines", err)
		}
		o.Expires = t
	})
	merge(kindType, "export types", func(o *kv.Object, value []byte) {
		if len(value) != 1 || wire.ObjectType(value[0]) != wire.TypeHash {
			s.fail("export types", fmt.Errorf("corrupt type record %x", value))
		}
		o.Type = wire.ObjectType(value[0])
	})
	merge(kindStamp, "export stamps", func(o *kv.Object, value []byte) { o.Stamp = s.stamp(value) })
	return out, more
}

// walk calls f with the snapshot's keys in [lower, upper) in order, until
// it returns false.
func (x *pebbleExport) walk(op string, lower, upper []byte, f func(key, value []byte) bool) {
	it, err := x.snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		x.s.fail(op, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			x.s.fail(op, err)
		}
		if !f(it.Key(), value) {
			break
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		x.s.fail(op, err)
	}
}

func (x *pebbleExport) Close() {
	if x.s.e.snapshots.remove(x.snap) {
		if err := x.snap.Close(); err != nil {
			x.s.fail("close export", err)
		}
	}
}
