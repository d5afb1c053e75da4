package placement

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// cluster returns n live servers of strategy s with the counts of chains.
func cluster(s Strategy, t, budget, n int, chains []Chain) *Cluster {
	c := NewCluster(s, t, budget, n)
	for i := range c.Live {
		c.Live[i] = true
	}
	c.Count(chains)
	return c
}

func chain(v int, members ...int) Chain {
	return Chain{Volume: wire.VolumeID(v), Members: members, Joining: None}
}

func TestCountLoadTransfersActiveShort(t *testing.T) {
	joining := chain(1, 0, 1)
	joining.Joining = 2
	c := cluster(Random, 3, 0, 4, []Chain{chain(0, 0, 1, 2), joining, chain(2, 3)})
	if want := []int{2, 2, 2, 1}; !slices.Equal(c.Load, want) {
		t.Errorf("load %v, want %v (members and joining)", c.Load, want)
	}
	if want := []int{0, 1, 1, 0}; !slices.Equal(c.Transfers, want) {
		t.Errorf("transfers %v, want %v (the tail and the joining server)", c.Transfers, want)
	}
	if c.Active != 1 || c.Short != 2 {
		t.Errorf("active %d, short %d; want 1 and 2", c.Active, c.Short)
	}
}

// ring extends a chain with the next live server after its tail; the
// others with the least loaded live server not in the chain and with
// budget left, the first in ring order among equals.
func TestTarget(t *testing.T) {
	c := cluster(Ring, 3, 0, 6, nil)
	c.Live[4] = false
	if got := c.Target([]int{2, 3}); got != 5 {
		t.Errorf("ring target %d, want 5 (4 is down)", got)
	}
	if got := c.Target([]int{5, 0}); got != 1 {
		t.Errorf("ring target %d, want 1 (wrapping)", got)
	}
	c = cluster(Random, 3, 2, 6, nil)
	c.Live[4] = false
	copy(c.Load, []int{5, 2, 9, 9, 0, 2})
	if got := c.Target([]int{2, 3}); got != 1 {
		t.Errorf("random target %d, want 1: least loaded, before 5 in ring order", got)
	}
	c.Transfers[1] = 2
	if got := c.Target([]int{2, 3}); got != 5 {
		t.Errorf("random target %d, want 5 (1 has no budget left)", got)
	}
	c.Transfers[5], c.Transfers[0] = 2, 2
	if got := c.Target([]int{2, 3}); got != None {
		t.Errorf("random target %d, want None: every candidate is down or busy", got)
	}
}

// Recover extends short chains in the order given, from their tails, as
// the cluster-wide limit and the budgets allow, counting each extension
// for the next; it shrinks a long chain's most loaded non-tail member.
func TestRecoverLimitsAndOrder(t *testing.T) {
	short := func(v int, members ...int) Chain { return chain(v, members...) }
	chains := []Chain{short(0, 0, 1), short(1, 0, 2), short(2, 1, 2), short(3, 2, 1), short(4, 3, 4)}

	// random-seq: at most t = 3 at once cluster-wide.
	c := cluster(RandomSeq, 3, 0, 6, chains)
	got := c.Recover(chains)
	if len(got) != 3 || c.Active != 3 {
		t.Fatalf("random-seq started %v (active %d), want 3", got, c.Active)
	}
	for i, ch := range got {
		if ch.Kind != Extend || ch.Volume != wire.VolumeID(i) || ch.Source != chains[i].Members[1] {
			t.Errorf("change %d: %+v, want an extension of volume %d from its tail", i, ch, i)
		}
	}
	// Loads 2, 3, 3, 1, 1, 0: the empty server 5 takes the first; counted,
	// it ties with 3 and 4, and the next go to them in ring order.
	if got[0].Server != 5 || got[1].Server != 3 || got[2].Server != 4 {
		t.Errorf("targets %v: want 5, 3, 4", got)
	}

	// random: no cluster-wide limit, but a budget of 1 transfer per
	// server: volumes 2 and 3 wait, their tails 2 and 1 are busy.
	c = cluster(Random, 3, 1, 6, chains)
	got = c.Recover(chains)
	want := []Change{{Extend, 0, 5, 1}, {Extend, 1, 3, 2}, {Extend, 4, 0, 4}}
	if !slices.Equal(got, want) {
		t.Errorf("random with a budget of 1: %v, want %v", got, want)
	}
	if want := []int{1, 1, 1, 1, 1, 1}; !slices.Equal(c.Transfers, want) || c.Active != 3 {
		t.Errorf("transfers %v, active %d; want one each, 3", c.Transfers, c.Active)
	}

	// Blocked, joining and full chains are left alone; a long chain sheds
	// its most loaded non-tail member, the first among equals.
	blocked := short(0, 0, 1)
	blocked.Blocked = true
	joining := short(1, 0, 1)
	joining.Joining = 2
	long := chain(2, 3, 4, 0, 5)
	all := []Chain{blocked, joining, chain(3, 1, 2, 3), long}
	c = cluster(Random, 3, 0, 6, all)
	got = c.Recover(all)
	if len(got) != 1 || got[0] != (Change{Kind: Shrink, Volume: 2, Server: 0, Source: None}) {
		t.Errorf("changes %v, want only volume 2 shrinking by server 0 (load 3)", got)
	}
}

// A returned, empty server is where random recovery goes first, up to its
// budget.
func TestRecoverFillsTheEmptyServerUpToItsBudget(t *testing.T) {
	var chains []Chain
	for v := range 8 {
		chains = append(chains, chain(v, v%4, (v+1)%4))
	}
	c := cluster(Random, 3, 2, 5, chains)
	got := c.Recover(chains)
	to4 := 0
	for _, ch := range got {
		if ch.Server == 4 {
			to4++
		}
	}
	if to4 != 2 || c.Transfers[4] != 2 {
		t.Errorf("the empty server 4 got %d extensions (%v), want its budget, 2", to4, got)
	}
}

// Rebalance moves a volume of the most loaded live server onto the least
// loaded one when they differ by two or more, and only then.
func TestRebalance(t *testing.T) {
	chains := []Chain{chain(0, 0, 1), chain(1, 0, 2), chain(2, 0, 1), chain(3, 1, 2)}
	byServer := func(i int) []Chain {
		var out []Chain
		for _, ch := range chains {
			if ch.Contains(i) {
				out = append(out, ch)
			}
		}
		return out
	}
	c := cluster(Random, 2, 0, 4, chains)
	if !c.Idle() {
		t.Fatal("no chain short, none extending: want idle")
	}
	move, ok := c.Rebalance(byServer)
	if !ok || move != (Change{Kind: Extend, Volume: 0, Server: 3, Source: 1}) {
		t.Fatalf("move %+v %v, want volume 0 (server 0's first) onto server 3 from its tail 1", move, ok)
	}
	if c.Active != 1 || c.Load[3] != 1 {
		t.Errorf("the move is not counted: active %d, load %v", c.Active, c.Load)
	}
	chains[0].Blocked = true
	c = cluster(Random, 2, 0, 4, chains)
	if move, _ := c.Rebalance(byServer); move.Volume != 1 {
		t.Errorf("move %+v, want volume 1: volume 0 is blocked", move)
	}
	c = cluster(Random, 2, 0, 4, chains)
	c.Live[3] = false
	if move, ok := c.Rebalance(byServer); ok {
		t.Errorf("move %+v: loads 3, 3, 2 differ by less than 2 among live servers", move)
	}
}

// An over-long chain sheds a member after its first Keep (a causal
// chain's first k hold the updates answered and not yet at the tail), and
// never the tail; with no such member it sheds nothing. Rebalance moves
// only a chain it can later shed the most loaded server from.
func TestShrinkKeepsTheFirstK(t *testing.T) {
	over := chain(0, 0, 1, 2, 3) // t = 3; server 0 is the most loaded
	others := []Chain{chain(1, 0, 4, 5), chain(2, 0, 4, 5)}
	for _, tc := range []struct {
		keep int
		want []Change
	}{
		{0, []Change{{Kind: Shrink, Volume: 0, Server: 0, Source: None}}},
		{1, []Change{{Kind: Shrink, Volume: 0, Server: 1, Source: None}}},
		{2, []Change{{Kind: Shrink, Volume: 0, Server: 2, Source: None}}},
		{3, nil}, // only the tail is after the first 3
	} {
		ch := over
		ch.Keep = tc.keep
		chains := append([]Chain{ch}, others...)
		if got := cluster(Random, 3, 0, 7, chains).Recover(chains); !slices.Equal(got, tc.want) {
			t.Errorf("keep %d: changes %+v, want %+v", tc.keep, got, tc.want)
		}
	}

	// Server 0 is the most loaded (3) and 6 the least (0). It heads
	// volume 0 and is second in volume 1.
	chains := []Chain{chain(0, 0, 1, 2), chain(1, 3, 0, 4), chain(2, 0, 5, 1)}
	byServer := func(i int) []Chain {
		var out []Chain
		for _, ch := range chains {
			if ch.Contains(i) {
				out = append(out, ch)
			}
		}
		return out
	}
	for _, tc := range []struct {
		keep   int
		volume wire.VolumeID
		ok     bool
	}{{0, 0, true}, {1, 1, true}, {2, 0, false}} {
		for i := range chains {
			chains[i].Keep = tc.keep
		}
		move, ok := cluster(Random, 3, 0, 7, chains).Rebalance(byServer)
		if ok != tc.ok || ok && move.Volume != tc.volume {
			t.Errorf("keep %d: move %+v %v, want volume %d %v", tc.keep, move, ok, tc.volume, tc.ok)
		}
	}
}
