package resp

import (
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// The cursor table is shared by every connection's workers: numbers are
// distinct and nonzero, each is good until forgotten, an expired one is
// refused, and the oldest goes beyond cursorsMax. Run under -race.
func TestCursorTable(t *testing.T) {
	tab := newCursorTable()
	now := time.Now()
	var wg sync.WaitGroup
	numbers := make(chan uint64, 800)
	for range 8 {
		wg.Go(func() {
			for range 100 {
				n := tab.save(client.Cursor{}, now)
				if _, ok := tab.get(n, now); !ok {
					t.Errorf("cursor %d not found right after it was saved", n)
				}
				tab.forget(n)
				numbers <- tab.save(client.Cursor{}, now)
			}
		})
	}
	wg.Wait()
	close(numbers)
	seen := map[uint64]bool{}
	for n := range numbers {
		if n == 0 || n > 1<<63-1 || seen[n] {
			t.Fatalf("cursor number %d: zero, beyond int64 or handed out twice", n)
		}
		seen[n] = true
		if _, ok := tab.get(n, now); !ok {
			t.Fatalf("cursor %d lost", n)
		}
		tab.forget(n)
		if _, ok := tab.get(n, now); ok {
			t.Fatalf("cursor %d good after it was forgotten", n)
		}
	}
	old := tab.save(client.Cursor{}, now)
	if _, ok := tab.get(old, now.Add(cursorTTL+time.Second)); ok {
		t.Fatal("an expired cursor was taken")
	}
	first := tab.save(client.Cursor{}, now)
	for range cursorsMax {
		tab.save(client.Cursor{}, now)
	}
	if _, ok := tab.get(first, now); ok {
		t.Fatalf("the oldest of %d cursors was kept", cursorsMax+1)
	}
}
