package hierarchical

import (
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/chaintest"
	"github.com/catena-kv/catena/internal/wire"
)

// The head of a hierarchical volume reports which site controls which
// key (VolumeStatus.Control, for catena status), at both sites; other
// members report nothing, and nothing once control is released.
func TestHierarchicalHeadReportsControl(t *testing.T) {
	n := newSites(t, 2, true, chain.Mutations{})
	key := n.KeyIn(0)
	n.Hold = func(m chaintest.Msg) bool { _, ok := m.Msg.(*wire.Ship); return ok }
	n.Put(1, 7, 1, key, "v1", nil, 0)
	for _, site := range []wire.SiteID{1, 2} {
		cfg := n.Configs[site][0]
		head := n.Servers[cfg.Head()].Replica(0).Status()
		if len(head.Control) != 1 || head.Control[0] != (wire.PathControl{Path: key, Site: 1}) {
			t.Fatalf("site %d's head reports control %+v, want site 1 controlling %s", site, head.Control, key)
		}
		if tail := n.Servers[cfg.Tail()].Replica(0).Status(); len(tail.Control) != 0 {
			t.Fatalf("site %d's tail reports control %+v, want none", site, tail.Control)
		}
	}
	n.Hold = func(chaintest.Msg) bool { return false }
	n.Release(func(chaintest.Msg) bool { return true })
	for range 100 { // idle past the release
		n.Tick()
	}
	if c := n.Servers[n.Configs[1][0].Head()].Replica(0).Status().Control; len(c) != 0 {
		t.Fatalf("after the release site 1's head reports control %+v, want none", c)
	}
}
