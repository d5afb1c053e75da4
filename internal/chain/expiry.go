package chain

import (
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Keys that expire (docs/adr/0028-expiry.md). The head assigns each
// deadline once, by its clock, as it sequences the update (kv.Resolve);
// every member decides whether a key has expired by its own clock, which
// the server checks against the master's at each heartbeat; and the head
// alone reclaims expired keys, with replicated deletes, so a replica's
// content stays a function of its SN.

// ExpiryVersion is the cluster protocol version from which deadlines may
// be set: release 0.1.0 would skip the appended fields and keep the key
// for ever (docs/upgrades.md).
const ExpiryVersion = release.ProtocolExpiry

// DefaultClockOffsetMax is the bound on each clock's offset from true
// time that servers assume (CockroachDB's --max-offset is 250 ms too).
const DefaultClockOffsetMax = 250 * wire.Millisecond

// reclaimBatch bounds the expired keys the head deletes per tick.
const reclaimBatch = 64

// serverClock is what a server knows that decides whether its replicas
// may use deadlines: the cluster version, and whether the last check of
// its clock against the master's found it within the bound.
type serverClock struct {
	// version is the cluster protocol version (0: 1).
	version uint32
	// offsetMax is ClockOffsetMax: the server trusts its clock while
	// its measured offset from the master's, plus the measurement's
	// uncertainty, is within offsetMax/2.
	offsetMax wire.Time
	// trustedUntil is when the last passing check stops counting.
	trustedUntil wire.Time
	// offset is the last offset measured (master's clock minus this
	// server's), and measured whether there was one.
	offset   wire.Time
	measured bool
	// ignoreBound is the ExpiryTrustsClock mutation.
	ignoreBound bool
}

// clockCheckValid is how long a passing check counts: a clock drifts
// far less than the bound in that time, and heartbeats renew it.
func (c *serverClock) clockCheckValid(heartbeat wire.Time) wire.Time {
	return max(10*heartbeat, 2*wire.Second)
}

// measure takes a heartbeat reply: the master's clock read WallTime
// between the heartbeat's sending (sentAt, this server's clock) and now.
// A reply that took longer than the bound allows tells nothing.
func (c *serverClock) measure(now, sentAt, wallTime, heartbeat wire.Time) {
	if wallTime == 0 || now < sentAt {
		return
	}
	rtt := now - sentAt
	if rtt > c.offsetMax/2 {
		return
	}
	c.offset, c.measured = wallTime-(sentAt+rtt/2), true
	if abs(c.offset)+rtt/2 <= c.offsetMax/2 {
		c.trustedUntil = now + c.clockCheckValid(heartbeat)
	} else {
		c.trustedUntil = 0
	}
}

func abs(t wire.Time) wire.Time {
	if t < 0 {
		return -t
	}
	return t
}

// trusted reports whether the server may decide by its clock whether
// keys have expired, at now.
func (c *serverClock) trusted(now wire.Time) bool {
	return c == nil || now < c.trustedUntil || mutation.Enabled && c.ignoreBound
}

// expiryAllowed says whether the head may sequence an update that sets,
// keeps or removes a deadline (wire.Op.SetsExpiry): ErrNone if so.
func (r *Replica) expiryAllowed() wire.ErrCode {
	switch {
	case r.modeOf != wire.ModeStrong || r.traits.Stamps:
		// Causal and hierarchical keyspaces refuse deadlines (ADR 28
		// point 6, docs/operations.md).
		return wire.ErrBadRequest
	case r.clock != nil && max(1, r.clock.version) < ExpiryVersion:
		// The client core sends none before the master said the cluster
		// runs at it: this server has not heard yet. Retry.
		return wire.ErrUnavailable
	case !r.clock.trusted(r.now):
		return wire.ErrUnavailable
	}
	return wire.ErrNone
}

// admitDeadlines checks an update request at the head: one that uses
// deadlines must be allowed (expiryAllowed), and any other that reads
// a key with a deadline needs a trusted clock to tell whether it has
// expired (rule 3: that decision is the head's, by its clock).
func (r *Replica) admitDeadlines(op wire.Op) wire.ErrCode {
	if op.Kind.IsHash() {
		if code := r.hashesAllowed(); code != wire.ErrNone {
			return code
		}
	}
	if op.SetsExpiry() {
		return r.expiryAllowed()
	}
	if r.clock.trusted(r.now) || !kv.ReadsPrior(op) {
		return wire.ErrNone
	}
	if r.store.Get(op.Key).Expires != 0 {
		return wire.ErrUnavailable
	}
	return wire.ErrNone
}

// hashesAllowed says whether the head may sequence a hash operation
// (docs/adr/0029): once the cluster runs at release.ProtocolHashes (a
// server of 0.1.0 would store a hash as a string), and not in a volume
// whose updates are stamped and shipped to other sites (their shipping
// log keeps no type yet).
func (r *Replica) hashesAllowed() wire.ErrCode {
	switch {
	case r.traits.Stamps:
		return wire.ErrBadRequest
	case r.clock != nil && max(1, r.clock.version) < release.ProtocolHashes:
		return wire.ErrUnavailable // (the client core sends none before; this server has not heard yet)
	}
	return wire.ErrNone
}

// liveObject returns the replica's object of key as it stands at this
// step's clock reading, and false if the key has a deadline and the
// server's clock is not trusted: then nothing is answered about it.
func (r *Replica) liveObject(key string) (kv.Object, bool) {
	o := r.store.Get(key)
	if o.Expires == 0 {
		return o, true
	}
	if !r.clock.trusted(r.now) {
		return kv.Object{}, false
	}
	return kv.Live(o, r.now), true
}

// Reclaim runs the head's reclamation (reclaim) at now. The server
// calls it on ticks while it holds its lease.
func (r *Replica) Reclaim(now wire.Time) []wire.Envelope {
	if r.phase == phaseWedged {
		return nil
	}
	r.now = now
	r.reclaim()
	return r.flush().Messages
}

// reclaim is the head's reclamation: a replicated delete of each key
// whose deadline passed more than the clock bound ago by its clock, so
// that every member finds it expired too (ADR 28 rule 4). It runs on
// ticks, within the backpressure updates have.
func (r *Replica) reclaim() {
	if !r.role.isHead() || r.phase != phaseRunning || r.modeOf != wire.ModeStrong || r.traits.Stamps || !r.clock.trusted(r.now) {
		return
	}
	margin := DefaultClockOffsetMax
	if r.clock != nil {
		margin = r.clock.offsetMax
	}
	var due []storage.KeyDeadline
	for _, d := range r.store.Deadlines(reclaimBatch) {
		if d.Expires > r.now-margin {
			break
		}
		due = append(due, d)
	}
	if len(due) == 0 {
		return
	}
	for _, d := range due {
		if !r.admitsUpdate() {
			break
		}
		sn := r.applied + 1
		u := wire.Update{SN: sn, Key: d.Key, Changed: true, Deleted: true, Epoch: r.config.Epoch,
			Result: wire.Result{Status: wire.StatusOK, Found: true, SN: sn}}
		r.apply(&u)
	}
	r.afterApply()
}
