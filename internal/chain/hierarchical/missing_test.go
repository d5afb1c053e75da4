package hierarchical

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/wire"
)

// A hierarchical keyspace that two of its three sites have not created
// cannot elect or lease anything: a write and a read at the third are
// answered within a few ticks with ErrKeyspaceMissing naming the two,
// and nothing is applied; with one lacking it the others are a majority
// and nothing is refused for it. Once all have it, the write goes
// through.
func TestHierarchicalKeyspaceMissingAtSitesIsNamed(t *testing.T) {
	n := newSites(t, 3, false, chain.Mutations{})
	other := slices.Clone(n.Keyspaces)
	other[0].Volumes = 1 // not the same keyspace
	n.RemoteKeyspaces = map[wire.SiteID][]wire.Keyspace{2: other, 3: other}
	key := n.KeyIn(0)
	r := n.TryPutFor(1, 7, 1, key, "v", 50)
	if r == nil || r.Err != wire.ErrKeyspaceMissing || !slices.Equal(r.Sites, []wire.SiteID{2, 3}) {
		t.Fatalf("a write while sites 2 and 3 lack the keyspace: %+v; want ErrKeyspaceMissing naming 2 and 3", r)
	}
	if v, st := n.Object(1, key); v != "" || !st.IsZero() {
		t.Fatalf("the refused write is at site 1: %q %v", v, st)
	}
	r = n.Get(1, 8, key)
	for i := 0; i < 20 && r.Err == wire.ErrUnavailable; i++ { // (the client retries while the tail asks)
		n.Tick()
		r = n.Get(1, 8, key)
	}
	if r.Err != wire.ErrKeyspaceMissing || !slices.Equal(r.Sites, []wire.SiteID{2, 3}) {
		t.Fatalf("a read while sites 2 and 3 lack the keyspace: %+v; want ErrKeyspaceMissing naming 2 and 3", r)
	}
	delete(n.RemoteKeyspaces, 2) // site 2 creates it: 1 and 2 are a majority, not refused
	n.Settle()
	if r := n.TryPutFor(1, 7, 2, key, "v", 5); r != nil && r.Err == wire.ErrKeyspaceMissing {
		t.Fatalf("a write while only site 3 lacks the keyspace: %+v; want it not refused for that", r)
	}
	n.RemoteKeyspaces = nil // site 3 creates it
	n.Settle()              // (site 1 asks their masters again)
	var got *wire.ClientReply
	for reqNo := uint64(3); reqNo < 10 && (got == nil || got.Err != wire.ErrNone); reqNo++ {
		got = n.TryPutFor(1, 7, reqNo, key, "v", 50)
	}
	if got == nil || got.Err != wire.ErrNone {
		t.Fatalf("a write once every site has the keyspace: %+v", got)
	}
}
