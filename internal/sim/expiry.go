package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Keys that expire (Options.Expiry; docs/adr/0028-expiry.md). The
// read-write clients of a strong keyspace also write keys of their own
// with TTLs of a few hundred milliseconds, each key once, and read them
// back around their deadlines. Every node's clock starts up to a quarter
// of the bound off true time and drifts little; ClockSkewed puts one
// server's far beyond it. The run checks ADR 28's rules against true
// (simulated) time, with the bound M the servers assume:
//
//   - the head assigned each deadline D from its clock: D lies within
//     [put called + TTL - M, put returned + TTL + M];
//   - a read called after D + M never found the key;
//   - a read that returned before D - M always found it;
//   - once the run settled, every member of every chain holds no key
//     whose deadline passed long ago: the head reclaimed it.
//
// Clients also renew their keys as a lease's holder does (client.KeepAlive:
// EXPIRE with the same TTL, only if the key still has a deadline). A
// renewal only moves a deadline later, so the rules hold with the latest
// deadline a read could have met (every renewal called before the read
// returned: a read is not checked against a renewal whose outcome is
// unknown) and the earliest it must have (renewals answered before the
// read was called).
//
// The keys are never written again, so the rule is all there is to
// check of them: they stay out of the linearizability checker's history.

// skewClock starts node n's clock off true time, in runs with keys that
// expire: up to a quarter of the bound ahead, or ClockSkewed ahead for
// the second server (a middle member at first: a head with such a clock
// refuses every deadline, and the run would check few).
func (c *Cluster) skewClock(n *node) {
	if !c.opts.Expiry {
		return
	}
	n.clockOffset = c.w.between(0, c.opts.ClockBound/4)
	if c.opts.ClockSkewed != 0 && len(c.servers) > 1 && n.id == c.servers[1] {
		n.clockOffset = c.opts.ClockSkewed
	}
}

// expiryKeyPrefix starts the keys that expire: no other key has it.
const expiryKeyPrefix = "ttl/"

// expiryPut is a client's write of a key with a TTL.
type expiryPut struct {
	key       string
	ttl       wire.Time
	call, ret wire.Time
	// deadline is the one the answer carries; 0 while unanswered, or
	// if the outcome is unknown.
	deadline wire.Time
	// renewals are the key's renewals, in the order called.
	renewals []*expiryRenewal
}

// expiryRenewal is a renewal of a key's deadline by its TTL.
type expiryRenewal struct {
	call, ret wire.Time
	// deadline is the one an applied renewal's answer carries; 0 if it
	// found the key gone (nothing changed) or is unanswered.
	deadline wire.Time
	// unknown: the client gave up on it; it may have applied.
	unknown bool
}

// expiryRead is a read of such a key.
type expiryRead struct {
	key       string
	client    wire.NodeID
	call, ret wire.Time
	found     bool
}

// expiryRecord is what the clients of a run did with keys that expire.
type expiryRecord struct {
	puts  map[string]*expiryPut
	reads []expiryRead
	// refused counts TTL writes the client core refused because it had
	// not yet heard that the cluster runs at protocol 2 (a new Raft
	// master's first moments).
	refused int
}

// expiryOp is an expiry operation a client has in flight.
type expiryOp struct {
	key  string
	read bool
	// renewal, when set, is the renewal it is.
	renewal *expiryRenewal
}

// nextExpiryOp returns, for roughly one operation in five, a write of a
// new key with a TTL of 100-600 ms or a read of one of the client's
// recent ones; ok false otherwise.
func (c *client) nextExpiryOp() (op wire.Op, ok bool) {
	p := c.rng.IntN(100)
	switch {
	case p < 8:
		key := fmt.Sprintf("%s%s.%d", expiryKeyPrefix, c.id, c.started)
		ttl := wire.Time(100+c.rng.IntN(500)) * wire.Millisecond
		c.expiryRecord.puts[key] = &expiryPut{key: key, ttl: ttl, call: c.realTime()}
		return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("t"), TTL: ttl}, true
	case p < 22 && len(c.expiryKeys) > 0:
		recent := c.expiryKeys[max(0, len(c.expiryKeys)-4):]
		return wire.Op{Kind: wire.OpGet, Key: recent[c.rng.IntN(len(recent))]}, true
	case p < 27 && len(c.expiryKeys) > 0:
		recent := c.expiryKeys[max(0, len(c.expiryKeys)-4):]
		put := c.expiryRecord.puts[recent[c.rng.IntN(len(recent))]]
		r := &expiryRenewal{call: c.realTime()}
		put.renewals = append(put.renewals, r)
		c.renewing = r
		return wire.Op{Kind: wire.OpExpire, Key: put.key, TTL: put.ttl, Expiry: wire.ExpiryXX}, true
	}
	return wire.Op{}, false
}

// recordExpiry records a finished expiry operation; false if d is not
// one.
func (c *client) recordExpiry(d clientcore.Done) bool {
	e, ok := c.expiryOps[d.ID]
	if !ok {
		return false
	}
	delete(c.expiryOps, d.ID)
	call := c.calls[d.ID]
	delete(c.calls, d.ID)
	r := c.expiryRecord
	if e.renewal != nil {
		switch {
		case d.Outcome == clientcore.OK && d.Result.Status == wire.StatusOK:
			e.renewal.ret, e.renewal.deadline = c.realTime(), d.Result.Expires
		case d.Outcome == clientcore.OK:
			e.renewal.ret = c.realTime() // (the key was gone: nothing changed)
		default:
			e.renewal.unknown = true
		}
		return true
	}
	if !e.read {
		p := r.puts[e.key]
		switch d.Outcome {
		case clientcore.OK:
			p.ret, p.deadline = c.realTime(), d.Result.Expires
			c.expiryKeys = append(c.expiryKeys, e.key)
			if d.Result.Expires == 0 {
				c.failure(fmt.Sprintf("client %s: put of %s with TTL %v answered without a deadline", c.id, e.key, p.ttl))
			}
		case clientcore.Invalid:
			r.refused++
			delete(r.puts, e.key)
		default:
			delete(r.puts, e.key) // unknown: the deadline is not known
		}
		return true
	}
	if d.Outcome == clientcore.OK {
		r.reads = append(r.reads, expiryRead{key: e.key, client: c.id, call: call, ret: c.realTime(), found: d.Result.Found})
	}
	return true
}

// checkExpiry checks the reads and deadlines against rule 2 with bound
// m, and that the reclaimed keys are gone from every chain member.
func (c *Cluster) checkExpiry() []error {
	r := c.expiryRecord
	if r == nil {
		return nil
	}
	m := c.opts.ClockBound
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(r.puts)) {
		p := r.puts[key]
		if p.deadline == 0 {
			continue
		}
		if lo, hi := p.call+p.ttl-m, p.ret+p.ttl+m; p.deadline < lo || p.deadline > hi {
			errs = append(errs, fmt.Errorf("expiry: %s put with TTL %v in [%.3fs, %.3fs] got the deadline %.3fs, outside [%.3fs, %.3fs]: the head's clock is beyond the bound",
				key, p.ttl, secs(p.call), secs(p.ret), secs(p.deadline), secs(lo), secs(hi)))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(r.puts)) {
		p := r.puts[key]
		for _, rn := range p.renewals {
			if lo, hi := rn.call+p.ttl-m, rn.ret+p.ttl+m; rn.deadline != 0 && (rn.deadline < lo || rn.deadline > hi) {
				errs = append(errs, fmt.Errorf("expiry: %s renewed with TTL %v in [%.3fs, %.3fs] got the deadline %.3fs, outside [%.3fs, %.3fs]: the head's clock is beyond the bound",
					key, p.ttl, secs(rn.call), secs(rn.ret), secs(rn.deadline), secs(lo), secs(hi)))
			}
		}
	}
	for _, rd := range r.reads {
		p := r.puts[rd.key]
		if p == nil || p.deadline == 0 || rd.call < p.ret {
			continue
		}
		// latest: the latest deadline the read could meet (unknown if a
		// renewal it may follow has an unknown outcome); earliest: the
		// latest one certainly applied before it.
		latest, earliest, known := p.deadline, p.deadline, true
		for _, rn := range p.renewals {
			if rn.call < rd.ret {
				latest, known = max(latest, rn.deadline), known && !rn.unknown && rn.ret != 0
			}
			if rn.ret != 0 && rn.ret < rd.call {
				earliest = max(earliest, rn.deadline)
			}
		}
		switch {
		case rd.found && known && rd.call > latest+m:
			errs = append(errs, fmt.Errorf("expiry: a read of %s by %s called at %.3fs found it, after its deadline %.3fs plus the bound %v", rd.key, rd.client, secs(rd.call), secs(latest), m))
		case !rd.found && rd.ret < earliest-m:
			errs = append(errs, fmt.Errorf("expiry: a read of %s by %s returned at %.3fs without it, before its deadline %.3fs less the bound %v", rd.key, rd.client, secs(rd.ret), secs(earliest), m))
		}
		if len(errs) > 5 {
			break
		}
	}
	// Reclamation: after the run settled, no member of a chain holds a
	// key whose deadline passed more than a second ago.
	for _, v := range c.volumes() {
		cfg := c.VolumeConfig(v)
		if c.opts.ClockSkewed != 0 && cfg.Head() == c.servers[1] {
			continue // a head whose clock fails its check reclaims nothing
		}
		for _, id := range cfg.Chain {
			s := c.server(id)
			if s == nil {
				continue
			}
			rep := s.Replica(wire.VolumeID(v))
			if rep == nil {
				continue
			}
			now := c.w.nodes[id].localTime(c.w.now)
			if d := rep.Store().Deadlines(1); len(d) > 0 && d[0].Expires < now-wire.Second {
				errs = append(errs, fmt.Errorf("expiry: %s still holds %s of volume %d, whose deadline %.3fs passed more than a second ago: not reclaimed", id, d[0].Key, v, secs(d[0].Expires)))
			}
		}
	}
	return errs
}

func secs(t wire.Time) float64 { return float64(t) / 1e9 }
