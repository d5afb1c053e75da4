package storage

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// The event loops of a server process write at once, each through its
// own sibling engine of one database (node.Pool): what siblings share
// (the database, the commit failure, the write options and callbacks)
// must be safe across goroutines. Here three siblings set, read and
// commit at once: under go test -race, a write to shared state without
// a lock fails the test. Then every commit is there after a reopen.
func TestPebbleSiblingsConcurrently(t *testing.T) {
	const loops, rounds = 3, 50
	var commits, reads atomic.Int64
	o := PebbleOptions{Dir: t.TempDir(), ObjectCacheBytes: 1 << 20,
		OnCommit: func(time.Duration, int) { commits.Add(1) }, OnCacheRead: func(bool) { reads.Add(1) }}
	e := openPebble(t, o)
	engines := []*PebbleEngine{e, e.Sibling(), e.Sibling()}
	var wg sync.WaitGroup
	for i, engine := range engines {
		wg.Go(func() {
			s := engine.Volume(wire.VolumeID(i))
			for r := range rounds {
				key := fmt.Sprint("k", r)
				s.Set(key, kv.Object{Value: []byte(fmt.Sprint("loop ", i)), Exists: true})
				if !s.Get(key).Exists {
					t.Errorf("loop %d does not read its own write of %s", i, key)
				}
				if err := engine.Commit(); err != nil {
					t.Errorf("loop %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := commits.Load(); got != loops*rounds {
		t.Errorf("%d commits reported, want %d", got, loops*rounds)
	}
	if reads.Load() == 0 {
		t.Error("no read went through the object cache")
	}
	for _, sibling := range engines[1:] {
		if err := sibling.Close(); err != nil {
			t.Fatal(err)
		}
	}
	closePebble(t, e)

	e = openPebble(t, o)
	defer closePebble(t, e)
	for v := range wire.VolumeID(loops) {
		want := fmt.Sprint("loop ", v)
		for r := range rounds {
			if got := e.Volume(v).Get(fmt.Sprint("k", r)); string(got.Value) != want {
				t.Fatalf("volume %d holds %q at k%d after a reopen, want %q", v, got.Value, r, want)
			}
		}
	}
}
