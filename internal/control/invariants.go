package control

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// CheckSite checks one site's invariant: its ancestry table equals the
// one recomputed from its votes (NOTES B4.2), and its votes never name
// two holders for a path and one of its prefixes held deep.
func (m *Machine) CheckSite() error {
	want := map[string]map[wire.SiteID]int{}
	for p, v := range m.votes {
		for _, a := range wire.Ancestors(p) {
			if want[a] == nil {
				want[a] = map[wire.SiteID]int{}
			}
			want[a][v.Holder]++
		}
		for _, a := range wire.Ancestors(p) {
			if av, ok := m.votes[a]; ok && av.Deep && av.Holder != v.Holder {
				return fmt.Errorf("INVARIANT control: site %d acknowledged %d for %q and %d for deep control of %q above it",
					m.cfg.Self, v.Holder, p, av.Holder, a)
			}
		}
	}
	if !maps.EqualFunc(want, m.ancestry, maps.Equal) {
		return fmt.Errorf("INVARIANT ancestry: site %d's ancestry table %v, recomputed from its votes %v", m.cfg.Self, m.ancestry, want)
	}
	for p, h := range m.holds {
		if v, ok := m.votes[p]; !ok || v.Holder != m.cfg.Self || v.Ballot != h.ballot {
			return fmt.Errorf("INVARIANT control: site %d holds %q (ballot %v) without its own vote for it (%+v)", m.cfg.Self, p, h.ballot, v)
		}
	}
	return nil
}

// Check checks the global invariants over every site's machine of one
// domain (NOTES B4.1): each site's own (CheckSite); at most one site
// controls any key, counting deep control of a prefix above it; and a
// site holds a control only while a majority of sites acknowledge its
// ballot. A crashed site's machine counts with the votes it persisted.
func Check(ms []*Machine) error {
	if len(ms) == 0 {
		return nil
	}
	majority := ms[0].majority
	// acks[path][ballot] = the sites acknowledging that ballot for path.
	acks := map[string]map[wire.Ballot]int{}
	for _, m := range ms {
		if err := m.CheckSite(); err != nil {
			return err
		}
		for p, v := range m.votes {
			if acks[p] == nil {
				acks[p] = map[wire.Ballot]int{}
			}
			acks[p][v.Ballot]++
		}
	}
	// elected[path] = the holder a majority acknowledges.
	elected := map[string]wire.Ballot{}
	for _, p := range slices.Sorted(maps.Keys(acks)) {
		for b, n := range acks[p] {
			if n < majority {
				continue
			}
			if old, ok := elected[p]; ok && old.Site != b.Site {
				return fmt.Errorf("INVARIANT election: %q has two primaries acknowledged by a majority: %v and %v", p, old, b)
			}
			elected[p] = b
		}
	}
	for _, p := range slices.Sorted(maps.Keys(elected)) {
		for _, a := range wire.Ancestors(p) {
			if b, ok := elected[a]; ok && wire.IsPrefixPath(a) && b.Site != elected[p].Site {
				return fmt.Errorf("INVARIANT election: site %d controls %q while site %d has deep control of %q above it",
					elected[p].Site, p, b.Site, a)
			}
		}
	}
	for _, m := range ms {
		for p, h := range m.holds {
			if acks[p][h.ballot] < majority {
				return fmt.Errorf("INVARIANT election: site %d holds %q (ballot %v) acknowledged by %d sites, fewer than a majority",
					m.cfg.Self, p, h.ballot, acks[p][h.ballot])
			}
		}
	}
	return nil
}
