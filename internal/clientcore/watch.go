package clientcore

import (
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// Watches (docs/adr/0032-watch-and-leases.md). A watch follows each
// volume its keys can lie in with long polls (wire.OpWatch) to any member
// of the volume's chain, asking each time from the revision (the volume's
// SN) it delivered through. Positions are therefore one revision per
// volume (WatchPosition), and a watch resumed from a position after any
// failure (a member killed, the chain reconfigured, the client restarted)
// loses, repeats and reorders nothing: members deliver only committed
// updates, in SN order, and every member that holds them holds the same
// ones. A member whose window does not reach back to the revision asked
// for answers Compacted, and the watch asks the chain's other members
// before it ends so (watchAnswered). A volume that splits hands the watch of its moved keys to the new
// volume from the split point (WatchAdvance).

// WatchPosition is where a watch stands: per volume followed, the
// revision it delivered through (WatchFrom: not yet known, the volume is
// watched from its committed revision when first asked).
type WatchPosition map[wire.VolumeID]int64

// WatchFrom, as a volume's position, watches it from now.
const WatchFrom = wire.WatchFromNow

// Clone returns a copy of p.
func (p WatchPosition) Clone() WatchPosition {
	out := make(WatchPosition, len(p))
	for v, at := range p {
		out[v] = at
	}
	return out
}

// Volumes returns the volumes p follows, in order.
func (p WatchPosition) Volumes() []wire.VolumeID {
	out := make([]wire.VolumeID, 0, len(p))
	for v := range p {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// WatchStart returns the position that watches, from now, the keys with
// prefix (the key alone if exact): every volume of a strong keyspace such
// a key can lie in now. False while the core knows no volumes yet.
func (c *Core) WatchStart(prefix string, exact bool) (WatchPosition, bool) {
	p := WatchPosition{}
	if exact {
		v, ok := c.volumeOf(prefix)
		if !ok {
			return nil, false
		}
		p[v] = WatchFrom
		return p, true
	}
	if len(c.keyspaces) == 0 || c.opts.Volumes != 0 {
		n := c.Volumes()
		if n == 0 {
			return nil, false
		}
		for v := range n {
			p[wire.VolumeID(v)] = WatchFrom
		}
		return p, true
	}
	// Keyspaces that cannot be watched (not strong) are left out of a
	// prefix that spans others too; a prefix only they hold is watched
	// there, and the members refuse it with the reason.
	var unwatchable []wire.VolumeID
	for _, k := range c.keyspaces {
		if !watchCovers(c.keyspaces, k, prefix) {
			continue
		}
		for _, v := range k.VolumeList() {
			if k.Mode != wire.ModeStrong || len(k.Sites) > 1 {
				unwatchable = append(unwatchable, v)
			} else {
				p[v] = WatchFrom
			}
		}
	}
	if len(p) == 0 {
		for _, v := range unwatchable {
			p[v] = WatchFrom
		}
	}
	return p, len(p) > 0
}

// watchCovers reports whether keyspace k can hold a key with prefix
// among keyspaces ks: its prefix and the watched one are one the other's
// prefix, and for the default keyspace (empty prefix), no other
// keyspace takes every key with prefix.
func watchCovers(ks []wire.Keyspace, k wire.Keyspace, prefix string) bool {
	if k.Prefix != "" {
		return strings.HasPrefix(k.Prefix, prefix) || strings.HasPrefix(prefix, k.Prefix)
	}
	return !slices.ContainsFunc(ks, func(o wire.Keyspace) bool {
		return o.Prefix != "" && strings.HasPrefix(prefix, o.Prefix)
	})
}

// StartWatch asks a member of volume's chain for the committed updates
// after revision from (WatchFrom: none, only the revision to watch from)
// to the keys with prefix (the key alone if exact), held up to hold while
// there are none. Done.Result.Value holds a wire.WatchPage
// (wire.DecodeWatchPage).
func (c *Core) StartWatch(now wire.Time, volume wire.VolumeID, prefix string, exact bool, from int64, hold wire.Time, call CallOptions) OpID {
	op := wire.Op{Kind: wire.OpWatch, Key: prefix, Delta: from, TTL: min(max(hold, 0), wire.WatchHoldMax)}
	if exact {
		op.Value = []byte{wire.WatchExactKey}
	}
	o := c.newOperation(op, call)
	o.scans = volume
	return c.begin(now, o)
}

// watchTarget returns the member a watch's attempt goes to: a random one
// of the chain's members this core does not suspect (an attempt to it
// went unanswered), so watchers spread over the chain and an attempt
// after a failure tries another member; never one that answered this
// watch Compacted while another has not (watchAnswered). A watch from now
// asks the tail.
func (c *Core) watchTarget(cfg wire.Config, o *operation) wire.NodeID {
	if tail := cfg.Tail(); o.op.Delta == wire.WatchFromNow {
		// From now: the tail's committed revision covers every update
		// acknowledged so far (another member's lags by an
		// acknowledgement), unless it left an attempt unanswered.
		if _, suspect := c.suspects[tail]; !suspect && !(o.attempts > 0 && tail == o.sentTo && len(cfg.Chain) > 1) {
			return tail
		}
	}
	untried := func(id wire.NodeID) bool { return !slices.Contains(o.compacted, id) }
	var ok []wire.NodeID
	for _, id := range cfg.Chain {
		if _, suspect := c.suspects[id]; untried(id) && !suspect && !(o.attempts > 0 && id == o.sentTo && len(cfg.Chain) > 1) {
			ok = append(ok, id)
		}
	}
	if len(ok) == 0 {
		ok = slices.DeleteFunc(slices.Clone(cfg.Chain), func(id wire.NodeID) bool { return !untried(id) })
	}
	if len(ok) == 0 {
		ok = cfg.Chain
	}
	return ok[c.opts.Rand.IntN(len(ok))]
}

// watchAnswered takes a member's answer d to watch o, and reports
// whether the watch goes on (again) rather than finish with the answer
// it returns, its page decoded. Members keep their windows in memory,
// so one that restarted, or joined the chain with a snapshot, holds
// nothing before it, while the others may still hold the revision
// asked for: a page that says Compacted sends the watch on to a member
// of the chain that has not said so in this operation. Only when every
// member has does the watch end Compacted, with the page of the one
// that holds the oldest revision (ADR 32).
func (c *Core) watchAnswered(now wire.Time, o *operation, d Done) (Done, bool) {
	page, err := wire.DecodeWatchPage(d.Result.Value)
	if err != nil {
		return d, false // (the caller reports it)
	}
	d.Watch = &page
	if !page.Compacted {
		return d, false
	}
	if !slices.Contains(o.compacted, d.From) {
		o.compacted = append(o.compacted, d.From)
	}
	if o.oldest == nil || page.Oldest < o.oldest.Watch.Oldest {
		o.oldest = &d
	}
	if slices.ContainsFunc(c.configs[o.volume].Chain, func(id wire.NodeID) bool { return !slices.Contains(o.compacted, id) }) {
		c.send(now, o)
		return Done{}, true
	}
	return *o.oldest, false
}

// WatchAdvance returns the position after volume v's page: v's revision
// moves to the page's Through, and a split the page passed adds the
// volume its moved keys went to, from the split point (its seed's state)
// when the watch does not follow it yet. The page's events are the
// caller's to deliver first.
func WatchAdvance(p WatchPosition, v wire.VolumeID, page wire.WatchPage) WatchPosition {
	next := p.Clone()
	if at, ok := next[v]; ok && int64(page.Through) > at || !ok {
		next[v] = int64(page.Through)
	}
	if s := page.Split; !s.IsZero() {
		if _, ok := next[s.Into]; !ok {
			next[s.Into] = int64(s.SN - 1)
		}
	}
	return next
}
