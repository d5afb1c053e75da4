package placement

import (
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// The recovery policy: which shortened chains are extended, from which
// member, onto which server, how many at once, and how load is evened out
// once no chain is short. It is a pure function of a Cluster and its
// chains, so the master (which applies its decisions to the real cluster)
// and the fig7 experiment (which applies them to a model of failures and
// transfers) run the very same policy.
//
// Servers are numbered: the policy sees server i as the i-th of the ring
// order, and the ring strategy's "next server" is i+1, wrapping.

// RecoveryPerServerDefault is how many state transfers a server takes part
// in at once, as source or target, when no budget is configured.
const RecoveryPerServerDefault = 4

// None stands for no server in a Chain or Change.
const None = -1

// Cluster is the state the recovery policy decides on: the servers, their
// load and their running transfers. Count fills the counts from the
// chains; Recover and Rebalance count the extensions they start, so a
// caller that keeps a Cluster up to date only has to count what it
// applies itself (promotions, removals, shrinks).
type Cluster struct {
	Strategy Strategy // "" means Random
	Replicas int      // t: the chain length recovery restores
	// PerServerMax bounds the transfers a server takes part in at once,
	// as source or target (the recovery bandwidth budget); 0 means
	// RecoveryPerServerDefault.
	PerServerMax int

	// Per server, in ring order.
	Live      []bool // may be a recovery target
	Load      []int  // chains it is a member of or joining
	Transfers []int  // running extensions it is the source or target of

	Active int // running extensions, cluster-wide
	Short  int // chains with fewer than Replicas members
}

// NewCluster returns a cluster of n servers, none live, nothing counted.
func NewCluster(s Strategy, t, perServerMax, n int) *Cluster {
	return &Cluster{Strategy: s, Replicas: t, PerServerMax: perServerMax,
		Live: make([]bool, n), Load: make([]int, n), Transfers: make([]int, n)}
}

// Chain is one volume's configuration as the policy sees it.
type Chain struct {
	Volume  wire.VolumeID
	Members []int // head first
	Joining int   // the server being added at the tail, or None
	// Blocked volumes are left alone: the caller changes them otherwise
	// this round, or a change to them is still pending.
	Blocked bool
	// Replicas is the chain length recovery restores for this volume
	// (its keyspace's t); 0: the cluster's Replicas.
	Replicas int
	// Keep is how many leading members a Shrink must keep: in a causal
	// chain with k, the first k hold the updates answered and not yet
	// at the tail, k copies that may each be the last after k−1
	// failures the master has not noticed yet
	// (docs/adr/0010-causal-mode.md). A member after them holds nothing
	// answered that they lack. 0 for a strong chain, whose tail holds
	// every answered update.
	Keep int
	// FixedRoles: BalanceRoles leaves the order of the members alone
	// (a geo volume, whose members rejoin only by snapshot).
	FixedRoles bool
}

// shrinkable returns the members a Shrink may remove: not the first Keep,
// and never the tail (a removed tail could serve reads until it learns it
// was removed).
func (c Chain) shrinkable() []int {
	n := len(c.Members)
	return c.Members[min(c.Keep, max(n-1, 0)):max(n-1, 0)]
}

// replicas returns the chain length recovery restores for ch.
func (c *Cluster) replicas(ch Chain) int {
	if ch.Replicas > 0 {
		return ch.Replicas
	}
	return c.Replicas
}

// Contains reports whether server i is a member or the joining server.
func (c Chain) Contains(i int) bool {
	return slices.Contains(c.Members, i) || (i != None && c.Joining == i)
}

// ChangeKind names a change the policy decides.
type ChangeKind uint8

// The changes.
const (
	// Extend starts adding Server at the tail of Volume's chain, copying
	// the volume from Source, the current tail.
	Extend ChangeKind = iota + 1
	// Shrink removes member Server, not the tail nor one of the first
	// Keep, from a chain longer than t: the end of a rebalancing move.
	Shrink
	// MoveToTail takes member Server, not the tail nor one of the first
	// Keep, out of its place and adds it back as the joining server, with
	// the state it holds, copied from Source, the tail: the members
	// behind it move up one place and it becomes the tail (roles.go).
	MoveToTail
)

// Change is one decision of the policy.
type Change struct {
	Kind   ChangeKind
	Volume wire.VolumeID
	Server int
	Source int // Extend and MoveToTail: the tail; None otherwise
}

// Count sets the counts from every chain of the cluster: a server's load
// is the chains it is a member of or joining; a running extension is a
// transfer of its tail and of its joining server.
func (c *Cluster) Count(chains []Chain) {
	clear(c.Load)
	clear(c.Transfers)
	c.Active, c.Short = 0, 0
	for _, ch := range chains {
		for _, i := range ch.Members {
			c.Load[i]++
		}
		if ch.Joining != None {
			c.Load[ch.Joining]++
			c.Transfers[ch.Joining]++
			c.Transfers[ch.Members[len(ch.Members)-1]]++
			c.Active++
		}
		if len(ch.Members) < c.replicas(ch) {
			c.Short++
		}
	}
}

func (c *Cluster) strategy() Strategy {
	if c.Strategy == "" {
		return Random
	}
	return c.Strategy
}

// RecoveriesMax is how many extensions may run at once cluster-wide: t
// for ring and random-seq (the paper's limit), no limit (0) otherwise,
// where only the per-server budget limits them.
func RecoveriesMax(s Strategy, t int) int {
	if s == Ring || s == RandomSeq {
		return t
	}
	return 0
}

func (c *Cluster) perServerMax() int {
	if c.PerServerMax == 0 {
		return RecoveryPerServerDefault
	}
	return c.PerServerMax
}

// busy reports whether server i has no recovery budget left.
func (c *Cluster) busy(i int) bool { return c.Transfers[i] >= c.perServerMax() }

// start counts an extension of a chain whose tail is source onto target.
func (c *Cluster) start(source, target int) {
	c.Active++
	c.Load[target]++
	c.Transfers[target]++
	c.Transfers[source]++
}

// Recover decides, for chains in volume order, which shortened chains to
// extend and which over-long ones to shrink. A chain shorter than t that
// is not being extended gets one extension at a time, copied from its
// tail, if the cluster-wide limit (RecoveriesMax) leaves room and neither
// the tail nor the target has used up its budget; the target is Target's.
// A chain longer than t sheds its most loaded member that is not the tail
// nor one of the first Keep (the first in chain order among equals), if
// it has one. Later chains see the
// extensions started for earlier ones; shrinks are not counted until the
// caller applies them. Chains that are joining, blocked or of length t are
// left alone.
func (c *Cluster) Recover(chains []Chain) []Change {
	limit := RecoveriesMax(c.strategy(), c.Replicas)
	var out []Change
	for _, ch := range chains {
		if ch.Blocked || ch.Joining != None {
			continue
		}
		switch n, t := len(ch.Members), c.replicas(ch); {
		case n < t:
			if limit > 0 && c.Active >= limit || n == 0 {
				continue
			}
			tail := ch.Members[n-1]
			if c.busy(tail) {
				continue
			}
			target := c.Target(ch.Members)
			if target == None {
				continue
			}
			out = append(out, Change{Kind: Extend, Volume: ch.Volume, Server: target, Source: tail})
			c.start(tail, target)
		case n > t:
			victim := None
			for _, i := range ch.shrinkable() {
				if victim == None || c.Load[i] > c.Load[victim] {
					victim = i
				}
			}
			if victim != None {
				out = append(out, Change{Kind: Shrink, Volume: ch.Volume, Server: victim, Source: None})
			}
		}
	}
	return out
}

// Target picks the server to extend a chain (its members, head first)
// with: a live server, not a member, with budget left. ring takes the
// first one after the tail in ring order (consistent hashing's next
// successor); the other strategies the least loaded one (the first in
// ring order among equals). It returns None if none qualifies.
func (c *Cluster) Target(members []int) int {
	n := len(c.Live)
	ok := func(i int) bool { return c.Live[i] && !c.busy(i) && !slices.Contains(members, i) }
	if c.strategy() == Ring && len(members) > 0 {
		tail := members[len(members)-1]
		for k := 1; k <= n; k++ {
			if i := (tail + k) % n; ok(i) {
				return i
			}
		}
		return None
	}
	best := None
	for i := range n {
		if ok(i) && (best == None || c.Load[i] < c.Load[best]) {
			best = i
		}
	}
	return best
}

// Idle reports whether no chain is short and no extension runs: the only
// time Rebalance may move a volume.
func (c *Cluster) Idle() bool { return c.Short == 0 && c.Active == 0 }

// Rebalance decides one move when the most and least loaded live servers
// (the first in ring order among equals) differ by two or more chains: the
// first chain of the most loaded server, in the order chainsOf gives (the
// chains that name it, by volume), that is not being extended, not
// blocked, does not hold the least loaded one and names the most loaded
// one after its first Keep members (so that Recover may shed it) is
// extended onto it, copied from its tail; Recover later shrinks it back
// to t. The caller checks Idle first. The move is counted like Recover's
// extensions.
func (c *Cluster) Rebalance(chainsOf func(server int) []Chain) (Change, bool) {
	most, least := None, None
	for i, live := range c.Live {
		if !live {
			continue
		}
		if most == None || c.Load[i] > c.Load[most] {
			most = i
		}
		if least == None || c.Load[i] < c.Load[least] {
			least = i
		}
	}
	if most == None || c.Load[most]-c.Load[least] < 2 {
		return Change{}, false
	}
	for _, ch := range chainsOf(most) {
		if slices.Index(ch.Members, most) >= ch.Keep && !ch.Contains(least) && ch.Joining == None && !ch.Blocked {
			tail := ch.Members[len(ch.Members)-1]
			c.start(tail, least)
			return Change{Kind: Extend, Volume: ch.Volume, Server: least, Source: tail}, true
		}
	}
	return Change{}, false
}
