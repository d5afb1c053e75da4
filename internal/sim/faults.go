package sim

import (
	"fmt"

	"github.com/catena-kv/catena/internal/wire"
)

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
	return c.VolumeConfig(wire.VolumeID(c.w.rng.IntN(c.opts.Volumes)))
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
	for v := range c.opts.Volumes {
		if j := c.VolumeConfig(wire.VolumeID(v)).Joining; j != "" {
			c.Crash(j, fmt.Sprintf("%s during state transfer", crashJoiner), c.restartDelay())
			return
		}
	}
	if tries > 0 {
		c.w.at(c.w.now+50*wire.Millisecond, func() { c.crashJoinerWithin(tries - 1) })
	}
}
