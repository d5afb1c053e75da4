package sim

import (
	"fmt"
	"hash/fnv"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Watches (Options.Watches; docs/adr/0032). Watchers, clients of their
// own, follow every volume of the database with the client core's long
// polls (clientcore.StartWatch, WatchAdvance), as client.Watch does,
// across the faults and splits. The run then checks each watcher's
// stream against the volumes' histories: a stream of a volume from
// revision a through revision b holds exactly the updates of the
// volume's final history at a+1 … b that changed a key, in SN order, each
// as it was (key, kind, value, deadline, type): nothing lost, repeated,
// reordered, or delivered that the chain then lost (an update a member
// delivered before the chain committed it may be lost with its head).

// watchersPerRun is how many watchers a run with Options.Watches has.
const watchersPerRun = 2

// watchHold is how long a simulated member may hold a watch: below the
// clients' attempt timeout, so both a held watch's answer and an attempt
// lost to a fault happen.
const watchHold = 40 * wire.Millisecond

// watchSegment is what a watcher received of one volume from one
// starting revision on: a watch that ends (compacted) starts another.
type watchSegment struct {
	watcher wire.NodeID
	volume  wire.VolumeID
	// started says from is known: the first page of a watch from now
	// names the revision it starts at.
	started       bool
	from, through wire.SN
	events        []wire.WatchEvent
	// at is when each event was received (real time).
	at []wire.Time
}

// watcher is a simulated watch client.
type watcher struct {
	id       wire.NodeID
	core     *clientcore.Core
	pos      clientcore.WatchPosition
	polls    map[clientcore.OpID]wire.VolumeID
	asking   map[wire.VolumeID]bool
	current  map[wire.VolumeID]*watchSegment
	segments *[]*watchSegment
	realTime func() wire.Time
	failure  func(string)
}

func (c *Cluster) newWatcher(id wire.NodeID, cid wire.ClientID) *watcher {
	timeouts := clientTimeouts{attempt: 60 * wire.Millisecond, backoff: 10 * wire.Millisecond}
	return &watcher{id: id, core: c.newCore(cid, timeouts, nil, 0), polls: map[clientcore.OpID]wire.VolumeID{},
		asking: map[wire.VolumeID]bool{}, current: map[wire.VolumeID]*watchSegment{}, segments: &c.watchSegments,
		realTime: func() wire.Time { return c.w.now }, failure: c.fail}
}

// Tick starts the watch once the core knows the volumes, and asks every
// volume followed that has no poll out.
func (w *watcher) Tick(now wire.Time) []wire.Envelope {
	if w.pos == nil {
		if pos, ok := w.core.WatchStart("", false); ok {
			w.pos = pos
			for _, v := range pos.Volumes() {
				w.segment(v, 0, false)
			}
		}
	}
	for _, v := range w.pos.Volumes() {
		if !w.asking[v] {
			id := w.core.StartWatch(now, v, "", false, w.pos[v], watchHold, clientcore.CallOptions{Deadline: now + 2*wire.Second})
			w.polls[id], w.asking[v] = v, true
		}
	}
	w.core.Tick(now)
	return w.ready()
}

// Step hands replies to the core.
func (w *watcher) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	w.core.Step(now, from, m)
	return w.ready()
}

// segment starts a segment of volume v: from revision from if started,
// else from what the first page names.
func (w *watcher) segment(v wire.VolumeID, from wire.SN, started bool) {
	s := &watchSegment{watcher: w.id, volume: v, from: from, through: from, started: started}
	w.current[v] = s
	*w.segments = append(*w.segments, s)
}

// ready takes the pages the core finished; the next poll of their volume
// goes out at the next tick.
func (w *watcher) ready() []wire.Envelope {
	var out []wire.Envelope
	for {
		rd := w.core.Ready()
		out = append(out, rd.Messages...)
		if len(rd.Done) == 0 {
			return out
		}
		for _, d := range rd.Done {
			v, ok := w.polls[d.ID]
			if !ok {
				continue
			}
			delete(w.polls, d.ID)
			w.asking[v] = false
			if d.Outcome == clientcore.OK {
				w.take(v, d.Result.Value)
			}
		}
	}
}

// take records one page of volume v.
func (w *watcher) take(v wire.VolumeID, value []byte) {
	page, err := wire.DecodeWatchPage(value)
	if err != nil {
		w.failure(fmt.Sprintf("watcher %s: a page of volume %d: %v", w.id, v, err))
		return
	}
	s := w.current[v]
	if page.Compacted {
		// The members no longer hold what follows the position: a new
		// watch from now (a caller re-reads the keys).
		w.pos[v] = clientcore.WatchFrom
		w.segment(v, 0, false)
		return
	}
	if !s.started {
		// The answer to a watch from now: where it starts.
		s.from, s.through, s.started = page.Through, page.Through, true
		if len(page.Events) > 0 {
			w.failure(fmt.Sprintf("watcher %s: a watch of volume %d from now answered with %d events", w.id, v, len(page.Events)))
		}
		w.pos[v] = int64(page.Through)
		return
	}
	for _, e := range page.Events {
		if e.SN <= s.through {
			w.failure(fmt.Sprintf("watcher %s: volume %d delivered revision %d after %d", w.id, v, e.SN, s.through))
		}
		s.events, s.at, s.through = append(s.events, e), append(s.at, w.realTime()), e.SN
	}
	s.through = max(s.through, page.Through)
	before := w.pos
	w.pos = clientcore.WatchAdvance(w.pos, v, page)
	if sp := page.Split; !sp.IsZero() {
		if _, followed := before[sp.Into]; !followed {
			w.segment(sp.Into, sp.SN-1, true)
		}
	}
}

// watchedUpdate is what the run recorded of an applied update, by the
// digest of the history up to it (check.Entry): the event a watch of
// its volume must deliver for it, if any.
type watchedUpdate struct {
	event   wire.WatchEvent
	changes bool
	value   uint64 // (a hash of the event's value)
}

// watchObserver records every applied update's event besides the
// histories (Options.Watches).
type watchObserver struct {
	*check.Histories
	c *Cluster
}

// Applied implements chain.Observer.
func (o watchObserver) Applied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	o.Histories.Applied(node, v, u)
	digest := o.Histories.Of(node, v)[u.SN-1].Digest
	if _, ok := o.c.watched[digest]; ok {
		return
	}
	e, changes := watchEventOf(u)
	o.c.watched[digest] = watchedUpdate{event: e, changes: changes, value: valueHash(e.Value)}
}

// watchEventOf is the event an update makes, as the members make it
// (chain.watchEvent), written again here so a bug there shows.
func watchEventOf(u *wire.Update) (wire.WatchEvent, bool) {
	if !u.Changed || u.Key == "" {
		return wire.WatchEvent{}, false
	}
	e := wire.WatchEvent{SN: u.SN, Key: u.Key, Kind: wire.WatchPut, Expires: u.Expires, Type: u.Type, Value: u.Value}
	switch {
	case u.Deleted && u.Client == wire.NoClient:
		e = wire.WatchEvent{SN: u.SN, Key: u.Key, Kind: wire.WatchExpire}
	case u.Deleted:
		e = wire.WatchEvent{SN: u.SN, Key: u.Key, Kind: wire.WatchDelete}
	}
	return e, true
}

func valueHash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// checkWatches checks every watcher's segments against the final
// histories (see above).
func (c *Cluster) checkWatches() error {
	for _, s := range c.watchSegments {
		if !s.started {
			continue // (never answered)
		}
		cfg := c.VolumeConfig(s.volume)
		if len(cfg.Chain) == 0 {
			return fmt.Errorf("watch: watcher %s followed volume %d, which has no chain", s.watcher, s.volume)
		}
		final := c.histories.Of(cfg.Tail(), s.volume)
		if int(s.through) > len(final) {
			return fmt.Errorf("watch: watcher %s received volume %d through revision %d; its tail's history ends at %d (an update the chain lost was delivered)",
				s.watcher, s.volume, s.through, len(final))
		}
		var want []wire.WatchEvent
		for sn := s.from + 1; sn <= s.through; sn++ {
			u, ok := c.watched[final[sn-1].Digest]
			if !ok {
				return fmt.Errorf("watch: no record of volume %d's update %d", s.volume, sn)
			}
			if u.changes {
				want = append(want, u.event)
			}
		}
		i := 0
		for ; i < len(want) && i < len(s.events); i++ {
			g, w := s.events[i], want[i]
			if g.SN != w.SN || g.Kind != w.Kind || g.Key != w.Key || valueHash(g.Value) != valueHash(w.Value) || g.Expires != w.Expires || g.Type != w.Type {
				return fmt.Errorf("watch: watcher %s, volume %d from revision %d: event %d is %s %q at %d (received at %.3fs), the volume's history has %s %q at %d",
					s.watcher, s.volume, s.from, i, g.Kind, g.Key, g.SN, float64(s.at[i])/1e9, w.Kind, w.Key, w.SN)
			}
		}
		if len(want) != len(s.events) {
			missing := "received"
			if len(want) > len(s.events) {
				missing = fmt.Sprintf("missed %s %q at %d", want[i].Kind, want[i].Key, want[i].SN)
			} else {
				missing = fmt.Sprintf("received %s %q at %d too", s.events[i].Kind, s.events[i].Key, s.events[i].SN)
			}
			return fmt.Errorf("watch: watcher %s, volume %d, revisions %d..%d: %d events, the volume's history has %d: %s",
				s.watcher, s.volume, s.from+1, s.through, len(s.events), len(want), missing)
		}
	}
	return nil
}

// watchedEvents counts the events the watchers received, for the result
// line.
func (c *Cluster) watchedEvents() int {
	n := 0
	for _, s := range c.watchSegments {
		n += len(s.events)
	}
	return n
}
