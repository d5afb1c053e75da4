package placement

// Role balance. Chain replication gives a chain's members different work:
// the head sequences every write, the tail answers every read and every
// write. Rebalance evens out how many chains each server is in, but a
// server only ever joins a chain at its tail, so a server that rejoins
// after a failure ends up the tail of every chain it holds (CR §5.3) and
// the head of none. BalanceRoles moves roles instead of data: it takes a
// member that is not the tail out of its place and adds it back at the
// tail with the state it holds (MoveToTail; the tail sends it only the
// updates it lacks, a catch-up). Everyone behind it moves up one place:
// the old tail becomes a middle member, and when the member moved was the
// head, its successor becomes the head. Nobody leaves the chain.
//
// The goal is that each server holds its share of each role: of a chain
// of n members, a member's share of the head role and of the tail role is
// 1/n. BalanceRoles picks the move that most reduces, summed over the
// servers and the two roles, the square of (roles held − share), and only
// a move that reduces it, so a sequence of moves ends. A move must also
// take a role from a server that holds more than its share by over a
// quarter (and one role), or give one to a server that holds less by as
// much: random placement's roles scatter by less (about √share), and a
// new cluster should not start by moving them.

// roleScale turns shares (1/n of a role per chain of n) into integers:
// a multiple of every chain length up to 10. Longer chains round.
const roleScale = 2520

// roleCounts is, per server, its share of each role and how far it is
// from it for the head and the tail role, in units of 1/roleScale of a
// role.
type roleCounts struct {
	share, head, tail []int64
}

func countRoles(n int, chains []Chain) roleCounts {
	rc := roleCounts{share: make([]int64, n), head: make([]int64, n), tail: make([]int64, n)}
	for _, ch := range chains {
		m := len(ch.Members)
		if m == 0 {
			continue
		}
		share := int64(roleScale / m)
		for _, i := range ch.Members {
			rc.share[i] += share
			rc.head[i] -= share
			rc.tail[i] -= share
		}
		rc.head[ch.Members[0]] += roleScale
		rc.tail[ch.Members[m-1]] += roleScale
	}
	return rc
}

// moveCost is the change in Σ dev² when one unit of a role goes from
// server from to server to, whose deviations are dev, and whether either
// of them is off its share by more than the slack.
func (rc roleCounts) moveCost(dev []int64, from, to int) (cost int64, needed bool) {
	if from == to {
		return 0, false
	}
	slack := func(i int) int64 { return rc.share[i]/4 + roleScale }
	return 2 * roleScale * (dev[to] - dev[from] + roleScale), dev[from] > slack(from) || dev[to] < -slack(to)
}

// BalanceRoles decides one MoveToTail over chains, every chain of the
// cluster, or none when no move reduces the imbalance. A chain qualifies
// when it has two members or more, all live, is not blocked, not being
// extended and does not fix its roles; its tail and the member moved must
// have recovery budget left, and the member moved is not one of the
// first Keep (a causal chain's first k hold updates its tail lacks). The
// caller checks Idle first. The move is counted like an extension (the
// member moved joins again).
func (c *Cluster) BalanceRoles(chains []Chain) (Change, bool) {
	rc := countRoles(len(c.Live), chains)
	best, bestCost := Change{}, int64(0)
	for _, ch := range chains {
		n := len(ch.Members)
		if n < 2 || ch.Blocked || ch.FixedRoles || ch.Joining != None || !c.allLive(ch.Members) {
			continue
		}
		head, tail := ch.Members[0], ch.Members[n-1]
		if c.busy(tail) {
			continue
		}
		for j := ch.Keep; j < n-1; j++ {
			mover := ch.Members[j]
			if c.busy(mover) {
				continue
			}
			cost, needed := rc.moveCost(rc.tail, tail, mover)
			if j == 0 {
				c, n := rc.moveCost(rc.head, head, ch.Members[1])
				cost, needed = cost+c, needed || n
			}
			if needed && cost < bestCost {
				best, bestCost = Change{Kind: MoveToTail, Volume: ch.Volume, Server: mover, Source: tail}, cost
			}
		}
	}
	if bestCost == 0 {
		return Change{}, false
	}
	c.Active++
	c.Transfers[best.Server]++
	c.Transfers[best.Source]++
	return best, true
}

func (c *Cluster) allLive(members []int) bool {
	for _, i := range members {
		if !c.Live[i] {
			return false
		}
	}
	return true
}
