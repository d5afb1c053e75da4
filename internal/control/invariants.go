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
	// The view: a majority of the configured sites (§2.3); acceptor
	// state and this site's own view change only for the next number,
	// nothing accepted above the promise; a site that knows it is outside
	// its view controls and proposes nothing (its controls were released
	// when it learned it).
	if err := m.checkView(m.view); err != nil {
		return fmt.Errorf("INVARIANT view: site %d adopted %v", m.cfg.Self, err)
	}
	if a := m.acceptor; a != nil {
		switch {
		case a.N != m.view.N+1:
			return fmt.Errorf("INVARIANT view: site %d at %v is an acceptor of view number %d", m.cfg.Self, m.view, a.N)
		case a.Promised.Less(a.Accepted):
			return fmt.Errorf("INVARIANT view: site %d accepted ballot %v above its promise %v", m.cfg.Self, a.Accepted, a.Promised)
		case a.Accepted.IsZero() != (a.View.N == 0) || !a.Accepted.IsZero() && a.View.N != a.N:
			return fmt.Errorf("INVARIANT view: site %d's acceptor of number %d accepted %v with ballot %v", m.cfg.Self, a.N, a.View, a.Accepted)
		}
	}
	if c := m.change; c != nil && (c.own.N != m.view.N+1 || c.value.N != c.own.N || !m.members[m.cfg.Self]) {
		return fmt.Errorf("INVARIANT view: site %d at %v proposes %v (value %v)", m.cfg.Self, m.view, c.own, c.value)
	}
	if !m.members[m.cfg.Self] {
		if len(m.holds) > 0 || len(m.elections) > 0 {
			return fmt.Errorf("INVARIANT view: site %d is outside its %v but holds %v, elects %d paths", m.cfg.Self, m.view, m.Holds(), len(m.elections))
		}
		for p, v := range m.votes {
			if v.Holder == m.cfg.Self {
				return fmt.Errorf("INVARIANT view: site %d is outside its %v but votes for itself for %q", m.cfg.Self, m.view, p)
			}
		}
	}
	return nil
}

// Views records the members of every view any site adopted, by number,
// to check that no two sites ever adopt different views with one number.
type Views map[uint64][]wire.SiteID

// Check records the views of ms and returns an error if one differs from
// a view recorded before with its number.
func (h Views) Check(ms []*Machine) error {
	for _, m := range ms {
		v := m.view
		old, ok := h[v.N]
		if ok && !slices.Equal(old, v.Members) {
			return fmt.Errorf("INVARIANT view: site %d adopted view %d with members %v, another site %v", m.cfg.Self, v.N, v.Members, old)
		}
		if !ok {
			h[v.N] = slices.Clone(v.Members)
		}
	}
	return nil
}

// Check checks the global invariants over every site's machine of one
// domain (NOTES B4.1): each site's own (CheckSite); at most one site
// controls any key, counting deep control of a prefix above it; a site
// of the newest view holds a control only while a majority of sites
// acknowledge its ballot, and holds it ready only if every member of its
// own view acknowledges it or has left the newest view (§2.3). A crashed
// site's machine counts with the votes it persisted. A site outside the
// newest view is fenced off (members refuse it), whatever it holds.
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
	newest := ms[0].view
	bySite := map[wire.SiteID]*Machine{}
	for _, m := range ms {
		bySite[m.cfg.Self] = m
		if m.view.N > newest.N {
			newest = m.view
		}
	}
	for _, m := range ms {
		if !newest.Has(m.cfg.Self) {
			continue
		}
		for p, h := range m.holds {
			if !h.ready {
				continue
			}
			for _, s := range m.view.Members {
				o := bySite[s]
				if s == m.cfg.Self || o == nil || !newest.Has(s) {
					continue
				}
				if v, ok := o.votes[p]; !ok || v.Holder != m.cfg.Self || v.Ballot != h.ballot {
					return fmt.Errorf("INVARIANT view: site %d holds %q (ballot %v) ready, but site %d of its %v acknowledges %+v",
						m.cfg.Self, p, h.ballot, s, m.view, v)
				}
			}
		}
		for p, h := range m.holds {
			if acks[p][h.ballot] < majority {
				return fmt.Errorf("INVARIANT election: site %d holds %q (ballot %v) acknowledged by %d sites, fewer than a majority",
					m.cfg.Self, p, h.ballot, acks[p][h.ballot])
			}
		}
	}
	return nil
}
