package storage

import (
	"bytes"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// objectCache keeps the objects a PebbleEngine's stores last read or
// wrote, so that reads of hot keys skip Pebble: on the tail under YCSB A,
// a fifth of the server's CPU went to point reads seeking the memtable's
// skiplist. It is written through: every Set updates it together with the
// pending batch, and Reset drops the volume's entries, so it always holds
// what a read of the batch would return. It is bounded in bytes and drops
// its oldest entries first. Like the engine, it is used by one goroutine.
type objectCache struct {
	max, bytes int64
	// onRead, if set, learns whether each get hit.
	onRead func(hit bool)
	// entries point to the objects, so that a write to a cached key (the
	// usual one) updates its entry after one lookup of the map.
	entries map[cacheKey]*kv.Object
	// order holds the keys in the order they entered, from head on;
	// keys dropped by dropVolume are skipped when they come up.
	order []cacheKey
	head  int
}

type cacheKey struct {
	vol wire.VolumeID
	key string
}

// cacheEntryOverhead approximates an entry's bytes beyond its key and
// value: the map entry and the order slot.
const cacheEntryOverhead = 96

// newObjectCache returns a cache of up to max bytes, or nil (no cache)
// for max ≤ 0; onRead (if set) learns whether each get hit.
func newObjectCache(max int64, onRead func(hit bool)) *objectCache {
	if max <= 0 {
		return nil
	}
	return &objectCache{max: max, entries: map[cacheKey]*kv.Object{}, onRead: onRead}
}

// sibling returns an empty cache like c, for a sibling engine.
func (c *objectCache) sibling() *objectCache {
	if c == nil {
		return nil
	}
	return newObjectCache(c.max, c.onRead)
}

func entryBytes(k cacheKey, o kv.Object) int64 {
	return int64(len(k.key)+len(o.Value)) + cacheEntryOverhead
}

// get returns the cached object, its Value the caller's to keep.
func (c *objectCache) get(vol wire.VolumeID, key string) (kv.Object, bool) {
	if c == nil {
		return kv.Object{}, false
	}
	e := c.entries[cacheKey{vol, key}]
	if c.onRead != nil {
		c.onRead(e != nil)
	}
	if e == nil {
		return kv.Object{}, false
	}
	o := *e
	if o.Value != nil {
		o.Value = bytes.Clone(o.Value)
	}
	return o, true
}

// peek returns the cached object without counting a read, its Value
// shared with the cache (not to be modified).
func (c *objectCache) peek(vol wire.VolumeID, key string) (kv.Object, bool) {
	if c == nil {
		return kv.Object{}, false
	}
	if e := c.entries[cacheKey{vol, key}]; e != nil {
		return *e, true
	}
	return kv.Object{}, false
}

// put records o as key's object; o's Value must not change afterwards.
func (c *objectCache) put(vol wire.VolumeID, key string, o kv.Object) {
	if c == nil {
		return
	}
	k := cacheKey{vol, key}
	if e := c.entries[k]; e != nil {
		c.bytes += entryBytes(k, o) - entryBytes(k, *e)
		*e = o
	} else {
		c.order = append(c.order, k)
		e := new(kv.Object) // not &o: o would move to the heap on every call
		*e = o
		c.entries[k] = e
		c.bytes += entryBytes(k, o)
	}
	for c.bytes > c.max && c.head < len(c.order) {
		oldest := c.order[c.head]
		c.order[c.head] = cacheKey{}
		c.head++
		if e := c.entries[oldest]; e != nil {
			c.bytes -= entryBytes(oldest, *e)
			delete(c.entries, oldest)
		}
	}
	if c.head > len(c.order)/2 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
}

// dropVolume forgets every entry of vol.
func (c *objectCache) dropVolume(vol wire.VolumeID) {
	if c == nil {
		return
	}
	for k, o := range c.entries {
		if k.vol == vol {
			c.bytes -= entryBytes(k, *o)
			delete(c.entries, k)
		}
	}
}
