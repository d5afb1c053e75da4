package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// The faults a run injects: the primitives a script calls (Crash,
// Partition, ...) with the guards that keep a fault from taking data a
// chain cannot lose, and the random schedule, a different mix per seed.

// losingLosesData reports whether losing a server (a crash, or a cut from
// the master, which then removes it) would leave some chain it is a
// member of without a live member holding the data (up and in touch
// with the master, or the master will remove it: mayBeRemoved). Without durable
// storage that is more failures than a chain tolerates, so the random
// faults avoid it.
func (c *Cluster) losingLosesData(id wire.NodeID) bool {
	for _, v := range c.volumes() {
		cfg := c.VolumeConfig(v)
		if cfg.Index(id) < 0 {
			continue
		}
		live := 0
		for _, m := range cfg.Chain {
			if m != id && !c.mayBeRemoved(m) && c.server(m) != nil && c.server(m).Replica(cfg.Volume) != nil {
				live++
			}
		}
		if live == 0 {
			return true
		}
	}
	return false
}

// Crash crashes a server if the chain keeps a live member with the data;
// it restarts empty after restartAfter. It reports whether it crashed.
func (c *Cluster) Crash(id wire.NodeID, why string, restartAfter wire.Time) bool {
	if c.server(id) == nil {
		return false
	}
	if !c.opts.Durable && c.losingLosesData(id) || c.causal() && c.causalLosesData(id) {
		return false
	}
	c.faults = append(c.faults, fmt.Sprintf("%.3fs crash %s (%s)", float64(c.w.now)/1e9, id, why))
	c.w.crash(id) // (startServer's crashed: the histories lose what the disk did)
	c.down[id] = true
	c.w.at(c.w.now+restartAfter, func() { c.restart(id) })
	return true
}

// CrashMaster crashes a master member; it restarts from its Raft log
// after restartAfter. At most a minority of members is down at once.
func (c *Cluster) CrashMaster(id wire.NodeID, why string, restartAfter wire.Time) bool {
	down := 0
	for _, m := range c.masters {
		if !c.w.nodes[m].up {
			down++
		}
	}
	if !c.w.nodes[id].up || len(c.masters) == 1 || down+1 > (len(c.masters)-1)/2 {
		return false
	}
	c.faults = append(c.faults, fmt.Sprintf("%.3fs crash master %s (%s)", float64(c.w.now)/1e9, id, why))
	c.w.crash(id)
	c.down[id] = true
	c.w.at(c.w.now+restartAfter, func() { c.restart(id) })
	return true
}

func (c *Cluster) restart(id wire.NodeID) {
	if slices.Contains(c.masters, id) {
		if c.down[id] {
			delete(c.down, id)
			c.faults = append(c.faults, fmt.Sprintf("%.3fs restart master %s", float64(c.w.now)/1e9, id))
			c.w.restart(id, c.newMaster(id))
		}
		return
	}
	if !c.down[id] {
		return
	}
	delete(c.down, id)
	n := c.w.nodes[id]
	c.faults = append(c.faults, fmt.Sprintf("%.3fs restart %s", float64(c.w.now)/1e9, id))
	c.w.restart(id, c.newServer(id, n.incarnation))
	c.startServer(n)
	c.redialed(id)
}

// redialed tells the servers that had sent to a restarted server, each
// after a while, that their link to it was reset: the transport redials
// a broken connection with a backoff of up to a second and reports a
// PeerReset to the dialling side once it succeeds, while the restarted
// process, whose connection from them is its first, learns of no break
// (transport/conn.go, dialLoop). What they send meanwhile arrives.
// Without it a tail that answered a restarted joiner before its own
// PeerReset never stalled here (issue 32 item 6).
func (c *Cluster) redialed(id wire.NodeID) {
	incarnation := c.w.nodes[id].incarnation
	for _, peer := range c.servers {
		if peer == id || c.w.links[linkKey{peer, id}] == nil {
			continue
		}
		c.w.at(c.w.now+c.w.between(0, wire.Second), func() {
			if n := c.w.nodes[id]; n.up && n.incarnation == incarnation {
				c.w.deliverLocal(peer, &wire.PeerReset{Peer: id})
			}
		})
	}
}

// Partition cuts the links between a and b for a while.
func (c *Cluster) Partition(a, b wire.NodeID, why string, duration wire.Time) {
	c.faults = append(c.faults, fmt.Sprintf("%.3fs cut %s-%s for %.0fms (%s)", float64(c.w.now)/1e9, a, b, float64(duration)/1e6, why))
	c.w.breakLinks(a, b)
	c.w.at(c.w.now+duration, func() { c.w.healLinks(a, b) })
}

// LoseMessages loses every message from one node to another for a while,
// while messages the other way still arrive: a one-way link fault.
func (c *Cluster) LoseMessages(from, to wire.NodeID, why string, duration wire.Time) {
	c.faults = append(c.faults, fmt.Sprintf("%.3fs lose %s→%s for %.0fms (%s)", float64(c.w.now)/1e9, from, to, float64(duration)/1e6, why))
	c.w.breakLink(from, to)
	c.w.at(c.w.now+duration, func() { c.w.healLink(from, to) })
}

// loseChainLink loses every message from one chain neighbour to the
// other for a while (LoseMessages), and counts both as servers the
// master may remove (mayBeRemoved) until a failure timeout after it
// healed: the master cuts one end of a link that carries nothing
// (master/links.go), and may still do so on reports sent before the heal.
func (c *Cluster) loseChainLink(from, to wire.NodeID, why string, duration wire.Time) {
	c.LoseMessages(from, to, why, duration)
	c.linkFaulted[from]++
	c.linkFaulted[to]++
	c.w.at(c.w.now+duration+c.opts.FailureTimeout, func() {
		c.linkFaulted[from]--
		c.linkFaulted[to]--
	})
}

// cutFromMasters reports whether a server cannot reach a majority of the
// master's members (or they it): the master will remove it.
func (c *Cluster) cutFromMasters(id wire.NodeID) bool {
	cut := 0
	for _, m := range c.masters {
		if c.w.link(id, m).down || c.w.link(m, id).down {
			cut++
		}
	}
	return cut > len(c.masters)/2
}

// mayBeRemoved reports whether the master may remove a live server from
// a chain it belongs to: it is cut from the masters, or is an end of a
// one-way fault between chain neighbours (loseChainLink). The fault
// guards count on no such server to hold a chain's data.
func (c *Cluster) mayBeRemoved(id wire.NodeID) bool {
	return c.cutFromMasters(id) || c.linkFaulted[id] > 0
}

func (c *Cluster) healAll() {
	keys := slices.SortedFunc(maps.Keys(c.w.links), func(a, b linkKey) int {
		return strings.Compare(string(a.from)+"→"+string(a.to), string(b.from)+"→"+string(b.to))
	})
	for _, k := range keys {
		if c.w.links[k].down {
			c.w.healLinks(k.from, k.to)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.down)) {
		c.restart(id)
	}
}

// faultKind is one kind of fault the random schedule injects.
type faultKind int

const (
	crashHead faultKind = iota
	crashMiddle
	crashTail
	crashDuringRecovery
	crashJoiner
	falseSuspicion
	brokenLink
	oneWayLink
	crashAll // durable runs only: every member at once
	// Replicated master only:
	crashMasterLeader
	partitionMasterLeader
	restartMaster
	faultKinds
)

var faultNames = [...]string{"crash-head", "crash-middle", "crash-tail", "crash-during-recovery", "crash-joiner", "false-suspicion", "broken-link", "one-way-link", "crash-all",
	"crash-master-leader", "partition-master-leader", "restart-master"}

func (k faultKind) mastersOnly() bool { return k >= crashMasterLeader }

func (k faultKind) String() string { return faultNames[k] }

// scheduleRandomFaults draws this seed's fault mix (swarm testing: each
// kind is enabled or not per seed) and schedules faults through the fault
// phase.
func (c *Cluster) scheduleRandomFaults(from, until wire.Time) {
	var enabled []faultKind
	for k := range faultKinds {
		if k == crashAll && !c.opts.Durable || k.mastersOnly() && len(c.masters) == 1 {
			continue
		}
		if c.w.rng.IntN(10) < 7 {
			enabled = append(enabled, k)
		}
	}
	if len(enabled) == 0 {
		enabled = append(enabled, faultKind(c.w.rng.IntN(int(faultKinds))))
	}
	for t := from + c.w.between(0, 300*wire.Millisecond); t < until-100*wire.Millisecond; t += c.w.between(300*wire.Millisecond, 1200*wire.Millisecond) {
		k := enabled[c.w.rng.IntN(len(enabled))]
		c.w.at(t, func() { c.inject(k) })
	}
}

func (c *Cluster) restartDelay() wire.Time {
	return c.w.between(300*wire.Millisecond, 2*wire.Second)
}

// randomMember returns a random member of a chain at an index in
// [lo, hi), or "".
func (c *Cluster) randomMember(cfg wire.Config, lo, hi int) wire.NodeID {
	chain := cfg.Chain
	hi = min(hi, len(chain))
	if lo >= hi {
		return ""
	}
	return chain[lo+c.w.rng.IntN(hi-lo)]
}

// randomVolume returns the configuration of a random volume.
func (c *Cluster) randomVolume() wire.Config {
	volumes := c.volumes()
	return c.VolumeConfig(volumes[c.w.rng.IntN(len(volumes))])
}

func (c *Cluster) inject(k faultKind) {
	cfg := c.randomVolume()
	n := len(cfg.Chain)
	switch k {
	case crashHead:
		c.Crash(cfg.Head(), k.String(), c.restartDelay())
	case crashTail:
		c.Crash(cfg.Tail(), k.String(), c.restartDelay())
	case crashMiddle:
		if id := c.randomMember(cfg, 1, n-1); id != "" {
			c.Crash(id, k.String(), c.restartDelay())
		}
	case crashDuringRecovery:
		if !c.Crash(c.randomMember(cfg, 0, n), k.String(), c.restartDelay()) {
			return
		}
		// A second crash while the master removes the first server or
		// extends the chain again.
		c.w.at(c.w.now+c.w.between(c.opts.FailureTimeout/2, c.opts.FailureTimeout+400*wire.Millisecond), func() {
			cfg := c.VolumeConfig(cfg.Volume)
			victim := c.randomMember(cfg, 0, len(cfg.Chain))
			if cfg.Joining != "" && c.w.rng.IntN(2) == 0 {
				victim = cfg.Joining
			}
			c.Crash(victim, "second crash during recovery", c.restartDelay())
		})
	case crashJoiner:
		c.crashJoinerWithin(20)
	case falseSuspicion:
		// Alive and reachable by clients and peers, cut off from the
		// master long enough to be removed. The master cannot tell it
		// from a crash: without durable storage, not when the chain's
		// other members are gone already (seed 288: the other member
		// had just crashed, the master kept it as the last member and
		// removed this one, and the crashed one came back empty).
		if id := c.randomMember(cfg, 0, n); id != "" && (c.opts.Durable || !c.losingLosesData(id)) && !(c.causal() && c.causalCutLosesData(id)) {
			d := c.opts.FailureTimeout + c.w.between(100*wire.Millisecond, 800*wire.Millisecond)
			for _, m := range c.masters {
				c.Partition(id, m, k.String(), d)
			}
		}
	case crashAll:
		for _, id := range cfg.Chain {
			c.Crash(id, k.String(), c.restartDelay())
		}
	case crashMasterLeader:
		if l := c.Leader(); l != "" {
			c.CrashMaster(l, k.String(), c.w.between(100*wire.Millisecond, 1500*wire.Millisecond))
		}
	case partitionMasterLeader:
		if l := c.Leader(); l != "" {
			d := c.w.between(100*wire.Millisecond, 1500*wire.Millisecond)
			for _, m := range c.masters {
				if m != l {
					c.Partition(l, m, k.String(), d)
				}
			}
		}
	case restartMaster:
		c.CrashMaster(c.masters[c.w.rng.IntN(len(c.masters))], k.String(), c.w.between(10*wire.Millisecond, 300*wire.Millisecond))
	case oneWayLink:
		// Chain neighbours that both talk to the master, one losing
		// everything the other sends (forwards and SyncReplies, or
		// acknowledgements and SyncRequests), for a while that may
		// outlast the failure timeout. The master cuts one end of the
		// link from this chain (master/links.go), so the fault must not
		// lose data if either end goes.
		if n < 2 {
			return
		}
		i := c.w.rng.IntN(n - 1)
		pred, succ := cfg.Chain[i], cfg.Chain[i+1]
		from, to := pred, succ
		if c.w.rng.IntN(2) == 0 {
			from, to = succ, pred
		}
		d := c.w.between(100*wire.Millisecond, c.opts.FailureTimeout+1500*wire.Millisecond)
		for _, id := range []wire.NodeID{pred, succ} {
			if !c.opts.Durable && c.losingLosesData(id) || c.causal() && c.causalLosesData(id) {
				return
			}
		}
		c.loseChainLink(from, to, k.String(), d)
	case brokenLink:
		members := append(cfg.Chain, cfg.Joining)
		if cfg.Joining == "" {
			members = cfg.Chain
		}
		if len(members) >= 2 {
			i := c.w.rng.IntN(len(members) - 1)
			c.Partition(members[i], members[i+1], k.String(), c.w.between(5*wire.Millisecond, 300*wire.Millisecond))
		}
	}
}

// crashJoinerWithin crashes the joining server once there is one, checking
// every 50ms up to tries times.
func (c *Cluster) crashJoinerWithin(tries int) {
	for _, v := range c.volumes() {
		if j := c.VolumeConfig(v).Joining; j != "" {
			c.Crash(j, fmt.Sprintf("%s during state transfer", crashJoiner), c.restartDelay())
			return
		}
	}
	if tries > 0 {
		c.w.at(c.w.now+50*wire.Millisecond, func() { c.crashJoinerWithin(tries - 1) })
	}
}
