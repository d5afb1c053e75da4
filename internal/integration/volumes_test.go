package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// awaitStatus waits until cond holds of the master's status.
func (c *cluster) awaitStatus(what string, cond func(*wire.StatusReply) bool) *wire.StatusReply {
	c.t.Helper()
	return c.awaitStatusWithin(what, 30*time.Second, cond)
}

// awaitStatusWithin waits up to d until cond holds of the master's status.
func (c *cluster) awaitStatusWithin(what string, d time.Duration, cond func(*wire.StatusReply) bool) *wire.StatusReply {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s, err := c.status(); err == nil && cond(s) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("not within %s: %s", d, what)
	return nil
}

// hosted counts the volumes each server is a member of.
func hosted(s *wire.StatusReply) map[wire.NodeID]int {
	n := map[wire.NodeID]int{}
	for _, cfg := range s.Configs {
		for _, id := range cfg.Chain {
			n[id]++
		}
	}
	return n
}

// headsAndTails counts the volumes each server heads and is the tail of.
func headsAndTails(s *wire.StatusReply) (heads, tails map[wire.NodeID]int) {
	heads, tails = map[wire.NodeID]int{}, map[wire.NodeID]int{}
	for _, cfg := range s.Configs {
		heads[cfg.Head()]++
		tails[cfg.Tail()]++
	}
	return heads, tails
}

// allVolumesHealthy: every volume has t members, none of them excluded,
// and no extension is in progress.
func allVolumesHealthy(t int, excluded ...wire.NodeID) func(*wire.StatusReply) bool {
	return func(s *wire.StatusReply) bool {
		for _, cfg := range s.Configs {
			if len(cfg.Chain) != t || cfg.Joining != "" || slices.ContainsFunc(cfg.Chain, func(id wire.NodeID) bool { return slices.Contains(excluded, id) }) {
				return false
			}
		}
		return true
	}
}

// 6 servers, 64 volumes of 3 replicas placed at random: kill -9 one server
// under load and every affected volume is back to 3 replicas; then start
// a new server and volumes move onto it. It joins each at the tail, and
// role moves (docs/adr/0018-role-balance.md) give it its share of heads
// and tails. The history stays linearizable and no acknowledged write is
// lost.
func TestManyVolumesRecoveryAndRebalancing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const volumes, replicas = 64, 3
	saved := masterTiming
	masterTiming = append(slices.Clone(masterTiming), "-volumes", fmt.Sprint(volumes), "-replicas", fmt.Sprint(replicas), "-placement", "random")
	defer func() { masterTiming = saved }()
	c := startClusterWithMasters(t, 1, 6)
	w := startWorkload(t, c.mAddr, 4, keys(128))
	w.awaitAcked(t, 25)

	victim := c.servers[2]
	before := hosted(c.awaitStatus("all volumes healthy", allVolumesHealthy(replicas)))
	c.kill(victim)
	s := c.awaitStatus("every volume back to 3 replicas without "+victim.args[2], allVolumesHealthy(replicas, wire.NodeID(victim.args[2])))
	t.Logf("%d volumes lost a replica on %s; all back to %d replicas", before[wire.NodeID(victim.args[2])], victim.args[2], replicas)

	// A new server joins: volumes move onto it until load is even.
	addr := freePort(t)
	p := &process{name: "s7", args: append([]string{"server", "-listen", addr, "-master", c.mAddr, "-data", filepath.Join(c.dir, "s7")}, slices.Concat(serverTiming, serverLoops)...)}
	c.servers = append(c.servers, p)
	c.start(p)
	share := volumes * replicas / 6 // five old servers and the new one
	s = c.awaitStatus(fmt.Sprintf("the new server hosting %d volumes", share-1), func(s *wire.StatusReply) bool {
		return hosted(s)[wire.NodeID(addr)] >= share-1 && allVolumesHealthy(replicas, wire.NodeID(victim.args[2]))(s)
	})
	t.Logf("after rebalancing: %v", hosted(s))
	id := wire.NodeID(addr)
	s = c.awaitStatusWithin("the new server holding its share of heads and tails", 60*time.Second, func(s *wire.StatusReply) bool {
		heads, tails := headsAndTails(s)
		share := float64(hosted(s)[id]) / replicas
		slack := share/4 + 1 // the policy's (placement.Cluster.BalanceRoles)
		return allVolumesHealthy(replicas, wire.NodeID(victim.args[2]))(s) &&
			float64(tails[id]) <= share+slack && float64(heads[id]) >= share-slack
	})
	heads, tails := headsAndTails(s)
	t.Logf("the new server: %d volumes, head of %d, tail of %d", hosted(s)[id], heads[id], tails[id])
	w.awaitAcked(t, 25)

	w.finish()
	w.finalReads(t, c.mAddr)
	w.checkLinearizable(t)
}
