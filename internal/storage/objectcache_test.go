package storage

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// The object cache stays within its bytes by dropping its oldest entries,
// forgets a reset volume, and hands out Values the caller may change.
func TestObjectCache(t *testing.T) {
	value := func(b byte) []byte {
		v := make([]byte, 100)
		for i := range v {
			v[i] = b
		}
		return v
	}
	per := entryBytes(cacheKey{0, "k0"}, kv.Object{Value: value(0)})
	hits, misses := 0, 0
	c := newObjectCache(3*per, func(hit bool) {
		if hit {
			hits++
		} else {
			misses++
		}
	})
	for i := range 5 {
		c.put(0, string(rune('a'+i)), kv.Object{Value: value(byte(i)), Exists: true})
		if c.bytes > c.max {
			t.Fatalf("after %d puts: %d bytes, bound %d", i+1, c.bytes, c.max)
		}
	}
	for key, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true} {
		if _, ok := c.get(0, key); ok != want {
			t.Errorf("get(%q) cached %v, want %v (the oldest go first)", key, ok, want)
		}
	}

	if hits != 3 || misses != 2 {
		t.Errorf("counted %d hits and %d misses, want 3 and 2", hits, misses)
	}
	got, _ := c.get(0, "e")
	got.Value[0] = 'x'
	if again, _ := c.get(0, "e"); again.Value[0] != 4 {
		t.Error("changing a Value get returned changed the cache")
	}

	c.put(1, "e", kv.Object{Value: value(9), Exists: true})
	c.dropVolume(0)
	if _, ok := c.get(0, "e"); ok {
		t.Error("a reset volume's entry is still cached")
	}
	if o, ok := c.get(1, "e"); !ok || o.Value[0] != 9 {
		t.Error("another volume's entry was dropped with the reset one")
	}
	if want := entryBytes(cacheKey{1, "e"}, kv.Object{Value: value(9)}); c.bytes != want {
		t.Errorf("%d bytes counted for one entry of %d", c.bytes, want)
	}
	var none *objectCache // no cache: everything misses
	none.put(0, "a", kv.Object{Exists: true})
	if _, ok := none.get(0, "a"); ok {
		t.Error("a nil cache returned an entry")
	}
}

// Siblings share the database, each with its own batch: what each
// committed is there after a reopen.
func TestPebbleSiblings(t *testing.T) {
	o := PebbleOptions{Dir: t.TempDir(), Sync: true, ObjectCacheBytes: 1 << 20}
	e := openPebble(t, o)
	sibling := e.Sibling()
	e.Volume(0).Set("k", kv.Object{Value: []byte("loop 0"), Exists: true})
	sibling.Volume(1).Set("k", kv.Object{Value: []byte("loop 1"), Exists: true})
	if err := sibling.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := sibling.Close(); err != nil {
		t.Fatal(err)
	}
	closePebble(t, e)
	e = openPebble(t, o)
	defer closePebble(t, e)
	for v, want := range map[wire.VolumeID]string{0: "loop 0", 1: "loop 1"} {
		if got := e.Volume(v).Get("k"); string(got.Value) != want {
			t.Errorf("volume %d holds %q after a reopen, want %q", v, got.Value, want)
		}
	}
}

// A Pebble store's Cached answers from the object cache only: an object
// written or read since it opened, not one only on disk (after a reopen),
// and nothing without a cache; a Memory answers for half its keys (the
// simulator's stand-in for misses).
func TestCached(t *testing.T) {
	for _, cache := range []int64{0, 1 << 20} {
		o := PebbleOptions{Dir: t.TempDir(), ObjectCacheBytes: cache}
		e := openPebble(t, o)
		s := e.Volume(0)
		s.Set("written", kv.Object{Value: []byte("w"), Exists: true})
		if got, ok := s.Cached("written"); ok != (cache > 0) || ok && string(got.Value) != "w" {
			t.Errorf("cache %d: Cached(written) = %q, %v", cache, got.Value, ok)
		}
		if _, ok := s.Cached("absent"); ok {
			t.Errorf("cache %d: an absent key never read is cached", cache)
		}
		if err := e.Commit(); err != nil {
			t.Fatal(err)
		}
		closePebble(t, e)
		e = openPebble(t, o)
		s = e.Volume(0)
		if _, ok := s.Cached("written"); ok {
			t.Errorf("cache %d: an object only on disk is cached after a reopen", cache)
		}
		s.Get("written")
		if got, ok := s.Cached("written"); ok != (cache > 0) || ok && string(got.Value) != "w" {
			t.Errorf("cache %d: after a read Cached(written) = %q, %v", cache, got.Value, ok)
		}
		closePebble(t, e)
	}
	m := NewMemory()
	cached := 0
	for i := range 100 {
		key := fmt.Sprint("k", i)
		m.Set(key, kv.Object{Value: []byte(key), Exists: true})
		if got, ok := m.Cached(key); ok {
			cached++
			if string(got.Value) != key {
				t.Errorf("Memory.Cached(%s) = %q", key, got.Value)
			}
		}
	}
	if cached < 30 || cached > 70 {
		t.Errorf("a Memory reports %d of 100 keys cached, want about half", cached)
	}
}

// BenchmarkPebbleGet reads 1 KB objects of 10,000 keys, written and
// committed before (so they sit in the memtable, as a hot working set
// does), with and without the object cache: the tail's read path.
func BenchmarkPebbleGet(b *testing.B) {
	for _, cache := range []int64{0, 32 << 20} {
		b.Run(fmt.Sprintf("object-cache=%dMiB", cache>>20), func(b *testing.B) {
			e := openPebble(b, PebbleOptions{Dir: b.TempDir(), ObjectCacheBytes: cache, MemTableBytes: 64 << 20})
			defer closePebble(b, e)
			s := e.Volume(0)
			const keys = 10000
			value := make([]byte, 1000)
			for i := range keys {
				s.Set(fmt.Sprint("user", i), kv.Object{Value: value, Exists: true})
			}
			if err := e.Commit(); err != nil {
				b.Fatal(err)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if !s.Get(fmt.Sprint("user", i%keys)).Exists {
					b.Fatal("a written object is missing")
				}
				i += 7919 // a prime: spread over the keys
			}
		})
	}
}
