package placement

import (
	"slices"
	"testing"
)

// moveToTail applies a MoveToTail to chains, joining and promotion at
// once.
func moveToTail(chains []Chain, ch Change) {
	for i := range chains {
		if chains[i].Volume == ch.Volume {
			m := slices.DeleteFunc(slices.Clone(chains[i].Members), func(s int) bool { return s == ch.Server })
			chains[i].Members = append(m, ch.Server)
		}
	}
}

// balanceRoles applies BalanceRoles' moves until it finds none, and
// returns how many it made.
func balanceRoles(t *testing.T, live []bool, chains []Chain) int {
	t.Helper()
	for moves := 0; ; moves++ {
		c := cluster(Random, 3, 0, len(live), chains)
		copy(c.Live, live)
		ch, ok := c.BalanceRoles(chains)
		if !ok {
			return moves
		}
		if ch.Kind != MoveToTail {
			t.Fatalf("change %+v, want a MoveToTail", ch)
		}
		if moves > 10*len(chains) {
			t.Fatalf("%d moves and counting: the moves do not converge", moves)
		}
		moveToTail(chains, ch)
	}
}

// roles returns how many chains server s heads and is the tail of.
func roles(chains []Chain, s int) (heads, tails int) {
	for _, ch := range chains {
		if ch.Members[0] == s {
			heads++
		}
		if ch.Members[len(ch.Members)-1] == s {
			tails++
		}
	}
	return heads, tails
}

// CR §5.3: a server that rejoins after a failure gets each chain at its
// tail, so it ends up the tail of every chain it holds and the head of
// none. BalanceRoles gives it its share of both roles back, moving no
// data.
func TestBalanceRolesGivesARejoinedServerItsShareOfRoles(t *testing.T) {
	// Six servers, 24 chains of 3 in a ring; server 5 failed, was
	// removed from its 12 chains, and rejoined the tail of 6 of them.
	var chains []Chain
	for v := range 24 {
		a := v % 6
		members := []int{a, (a + 1) % 6, (a + 2) % 6}
		if slices.Contains(members, 5) {
			members = slices.DeleteFunc(members, func(s int) bool { return s == 5 })
			if v < 12 {
				members = append(members, 5)
			} else {
				members = append(members, 4-members[0]%2) // repaired elsewhere
				if slices.Index(members, members[2]) < 2 {
					members[2] = 3
				}
			}
		}
		chains = append(chains, chain(v, members...))
	}
	heads, tails := roles(chains, 5)
	if heads != 0 || tails == 0 {
		t.Fatalf("setup: server 5 heads %d, tail of %d; want 0 and some", heads, tails)
	}
	held := 0
	for _, ch := range chains {
		if ch.Contains(5) {
			held++
		}
	}
	if tails != held {
		t.Fatalf("setup: server 5 is the tail of %d of its %d chains", tails, held)
	}
	live := []bool{true, true, true, true, true, true}
	moves := balanceRoles(t, live, chains)
	heads, tails = roles(chains, 5)
	share := float64(held) / 3
	if float64(heads) < share-1 || float64(heads) > share+1 || float64(tails) < share-1 || float64(tails) > share+1 {
		t.Errorf("after %d moves server 5 heads %d and is the tail of %d of its %d chains; want about %.1f each",
			moves, heads, tails, held, share)
	}
	for _, ch := range chains {
		if len(ch.Members) != 3 {
			t.Errorf("volume %d has members %v: a role move changed who holds it", ch.Volume, ch.Members)
		}
	}
}

// A chain in ring order already gives every server its share: no move.
func TestBalanceRolesLeavesBalancedRolesAlone(t *testing.T) {
	var chains []Chain
	for v := range 12 {
		chains = append(chains, chain(v, v%4, (v+1)%4, (v+2)%4))
	}
	if moves := balanceRoles(t, []bool{true, true, true, true}, chains); moves != 0 {
		t.Errorf("%d moves in a balanced cluster", moves)
	}
}

// What BalanceRoles may not move: the first Keep of a causal chain, a
// chain that is blocked, being extended, fixes its roles, has a member
// down or is down to one member, or whose tail or candidate has no
// recovery budget left.
func TestBalanceRolesSkips(t *testing.T) {
	// Server 2 is the tail of everything; 0 and 1 could take it over.
	base := func() []Chain {
		return []Chain{chain(0, 0, 1, 2), chain(1, 1, 0, 2), chain(2, 0, 1, 2)}
	}
	for _, tc := range []struct {
		name  string
		edit  func(c *Cluster, chains []Chain)
		want  Change
		moves bool
	}{
		{"moves the head of the first chain", func(*Cluster, []Chain) {}, Change{Kind: MoveToTail, Volume: 0, Server: 0, Source: 2}, true},
		{"keep 1 moves the second member", func(_ *Cluster, chs []Chain) {
			for i := range chs {
				chs[i].Keep = 1
			}
		}, Change{Kind: MoveToTail, Volume: 0, Server: 1, Source: 2}, true},
		{"keep 2 moves nothing", func(_ *Cluster, chs []Chain) {
			for i := range chs {
				chs[i].Keep = 2
			}
		}, Change{}, false},
		// Server 1 is now furthest below its share of tails.
		{"blocked, extending: the third chain", func(_ *Cluster, chs []Chain) {
			chs[0].Blocked = true
			chs[1].Joining = 3
			chs[1].Members = chs[1].Members[:2]
		}, Change{Kind: MoveToTail, Volume: 2, Server: 1, Source: 2}, true},
		{"fixed roles everywhere", func(_ *Cluster, chs []Chain) {
			for i := range chs {
				chs[i].FixedRoles = true
			}
		}, Change{}, false},
		{"a member down", func(c *Cluster, _ []Chain) { c.Live[1] = false }, Change{}, false},
		{"tail without budget", func(c *Cluster, _ []Chain) { c.Transfers[2] = 4 }, Change{}, false},
		{"server 0 without budget", func(c *Cluster, _ []Chain) { c.Transfers[0] = 4 },
			Change{Kind: MoveToTail, Volume: 0, Server: 1, Source: 2}, true},
	} {
		chains := base()
		c := cluster(Random, 3, 0, 4, chains)
		tc.edit(c, chains)
		active := c.Active
		got, ok := c.BalanceRoles(chains)
		if ok != tc.moves || got != tc.want {
			t.Errorf("%s: move %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.moves)
		}
		if ok && (c.Active != active+1 || c.Transfers[got.Server] == 0) {
			t.Errorf("%s: the move is not counted as a transfer: active %d, transfers %v", tc.name, c.Active, c.Transfers)
		}
	}
}
