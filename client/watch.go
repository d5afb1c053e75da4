package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Watches (docs/adr/0032-watch-and-leases.md): a stream of every change
// to a key or to the keys with a prefix, in each key's order, resumable
// from a position with nothing lost or repeated.

// EventKind says what a change did to its key.
type EventKind uint8

// Event kinds.
const (
	// EventPut: the key was written (a new value, deadline or type).
	EventPut EventKind = iota + 1
	// EventDelete: a client deleted the key.
	EventDelete
	// EventExpire: the key's deadline passed and it was removed.
	EventExpire
)

func (k EventKind) String() string { return wire.WatchEventKind(k).String() }

// Event is one committed change of a watched key.
type Event struct {
	Kind EventKind
	Key  string
	// Value, Expires (zero: none) and Hash (the value is a hash's
	// fields, as HashGet returns them encoded) are the key's after a put.
	Value   []byte
	Expires time.Time
	Hash    bool
	// Volume and Revision place the change: the update's sequence number
	// in the key's volume. Revisions of one key only grow, also across a
	// split of its keyspace.
	Volume   uint32
	Revision uint64
}

// WatchPosition is where a watch stands: per volume it follows, the
// revision it delivered through (-1: from the moment the volume was
// first asked). Pass it to WatchFrom to resume a watch.
type WatchPosition map[uint32]int64

// CompactedError ends a watch whose position is older than what every
// member of a volume still holds (members keep recent changes in memory:
// one that restarted or joined holds none from before; the watch asks
// the others first): read the keys again, then watch from Oldest
// (WatchFrom with the volume at Oldest).
type CompactedError struct {
	Volume uint32
	Oldest uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("catena: watch compacted: volume %d keeps the changes after revision %d", e.Volume, e.Oldest)
}

// ErrCompacted is what a CompactedError matches with errors.Is.
var ErrCompacted = errors.New("catena: watch compacted")

// Is reports whether target is ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	exact bool
	from  WatchPosition
	hold  time.Duration
}

// WatchKey watches the key itself rather than the keys it prefixes.
func WatchKey() WatchOption { return func(o *watchOptions) { o.exact = true } }

// WatchFrom resumes a watch from a position a watcher of the same key
// or prefix reported (Watcher.Position): it delivers every change after
// it.
func WatchFrom(p WatchPosition) WatchOption {
	return func(o *watchOptions) { o.from = p }
}

// WatchHold sets how long a member may hold a request with nothing to
// send (default 1s, at most 2s): shorter is quicker to notice a member
// gone quiet, longer costs fewer requests on an idle key.
func WatchHold(d time.Duration) WatchOption { return func(o *watchOptions) { o.hold = d } }

// Watcher is a running watch. Its events arrive on Events, in each key's
// order; the channel closes when the watch ends (its context ended, the
// client closed, or Err says why).
type Watcher struct {
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	// pos is where each volume's long polls stand: through the events put
	// on the channel. received is through the events the caller took
	// from it (Position): steps are what the watch put on the channel
	// (events, queued of them) and how its position moved after them,
	// not yet known received. An event and its step are added together,
	// under mu, so the events the channel holds are the last len(events)
	// of the steps' events.
	pos      clientcore.WatchPosition
	received clientcore.WatchPosition
	steps    []watchStep
	queued   int
	err      error
	wg       sync.WaitGroup
	// known is closed once pos holds a revision for every volume (Watch
	// returns then).
	known chan struct{}
}

// watchStep is an event put on a watcher's channel (event), or a page's
// end (the position after it, clientcore.WatchAdvance).
type watchStep struct {
	event  bool
	volume wire.VolumeID
	at     int64
	page   wire.WatchPage
}

// Events returns the stream of events.
func (w *Watcher) Events() <-chan Event { return w.events }

// Err returns why the watch ended (nil while it runs, or when its
// context ended): a *CompactedError, ErrClosed, or ErrInvalid for a
// watch the cluster cannot serve.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Position returns where the watch stands: through the last event
// received from Events, and past the changes to other keys examined
// before the next one; ask it on the goroutine that receives. A watch
// resumed from it (WatchFrom) delivers the events after those received,
// the ones Events still held included. Once Events is closed and
// drained, it is where the watch ended.
func (w *Watcher) Position() WatchPosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settle()
	out := WatchPosition{}
	for v, at := range w.received {
		out[uint32(v)] = at
	}
	return out
}

// settle moves received past the steps whose events the caller took from
// the channel, and the page ends after them. Under w.mu.
func (w *Watcher) settle() {
	taken := max(w.queued-len(w.events), 0)
	n := 0
	for ; n < len(w.steps); n++ {
		s := &w.steps[n]
		switch {
		case s.event && taken == 0:
			w.steps = w.steps[n:]
			return
		case s.event:
			taken--
			w.queued--
			w.received[s.volume] = s.at
		default:
			w.received = clientcore.WatchAdvance(w.received, s.volume, s.page)
		}
	}
	w.steps = w.steps[:0]
}

// deliver puts ev, volume v's event at revision at, on the channel and
// records it, waiting while the channel is full; false once ctx ended.
// The send does not block under w.mu (Position, on the receiving
// goroutine, takes it): while the channel is full it tries again after
// a pause that grows to watchFullWaitMax.
func (w *Watcher) deliver(ctx context.Context, ev Event, v wire.VolumeID, at int64) bool {
	pause := watchFullWait
	for {
		w.mu.Lock()
		w.settle() // (so steps stay about as long as the channel)
		select {
		case w.events <- ev:
			w.steps = append(w.steps, watchStep{event: true, volume: v, at: at})
			w.queued++
			w.pos[v] = at
			w.mu.Unlock()
			return true
		default:
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, watchFullWaitMax)
	}
}

// While a watcher's channel is full, its volumes' loops try again after
// watchFullWait, doubling up to watchFullWaitMax.
const (
	watchFullWait    = 50 * time.Microsecond
	watchFullWaitMax = 5 * time.Millisecond
)

// Close ends the watch and waits for it.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// Watch starts a watch of the keys with prefix (of key alone with
// WatchKey) from now, or from the position WatchFrom gives. From now, it
// returns once it knows where each volume stands (the tail's committed
// revision): it delivers every change made after it returns, and none
// acknowledged before it was called. Any member of
// a volume's chain may serve it, so watchers spread over the chain;
// after any failure the watch resumes from where it stood at another
// member. Strong keyspaces only. The volumes of the keyspaces that exist
// when it starts are watched, and the volumes splits make from them.
func (c *Client) Watch(ctx context.Context, prefix string, opts ...WatchOption) (*Watcher, error) {
	o := watchOptions{hold: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.hold <= 0 || o.hold > time.Duration(wire.WatchHoldMax) {
		return nil, fmt.Errorf("%w: a watch is held at most %v, not %v", ErrInvalid, time.Duration(wire.WatchHoldMax), o.hold)
	}
	if o.exact && prefix == "" {
		return nil, fmt.Errorf("%w: a watch of one key needs the key", ErrInvalid)
	}
	var pos clientcore.WatchPosition
	if o.from != nil {
		pos = clientcore.WatchPosition{}
		for v, at := range o.from {
			if at < wire.WatchFromNow {
				return nil, fmt.Errorf("%w: watch volume %d from revision %d", ErrInvalid, v, at)
			}
			pos[wire.VolumeID(v)] = at
		}
	} else {
		if err := c.waitForVolumes(ctx); err != nil {
			return nil, err
		}
		ok := false
		c.withCore(func(wire.Time) { pos, ok = c.core.WatchStart(prefix, o.exact) })
		if !ok {
			return nil, fmt.Errorf("%w: the client knows no volumes yet", ErrUnavailable)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watcher{events: make(chan Event, 64), cancel: cancel, done: make(chan struct{}), pos: pos, received: pos.Clone(), known: make(chan struct{})}
	w.noteKnown()
	for _, v := range pos.Volumes() {
		w.follow(wctx, c, v, prefix, o)
	}
	go func() {
		<-wctx.Done()
		w.wg.Wait()
		close(w.events)
		close(w.done)
	}()
	select {
	case <-w.known:
	case <-w.done: // (Err says why)
	case <-ctx.Done():
		w.Close()
		return nil, fmt.Errorf("%w: the watch's start: %w", ErrUnavailable, ctx.Err())
	}
	return w, nil
}

// noteKnown closes known once every volume's revision is (not
// WatchFrom). Under w.mu, or before the volumes' loops start.
func (w *Watcher) noteKnown() {
	select {
	case <-w.known:
		return
	default:
	}
	for _, at := range w.pos {
		if at < 0 {
			return
		}
	}
	close(w.known)
}

// waitForVolumes waits until the client knows the cluster's volumes.
func (c *Client) waitForVolumes(ctx context.Context) error {
	for {
		known := false
		c.withCore(func(now wire.Time) {
			if known = c.core.Volumes() > 0; !known {
				c.core.RequestConfig(now)
			}
		})
		if known {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-c.done:
			return ErrClosed
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// follow runs the long polls of volume v on a goroutine of its own, so
// each volume's events keep their order.
func (w *Watcher) follow(ctx context.Context, c *Client, v wire.VolumeID, prefix string, o watchOptions) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.poll(ctx, c, v, prefix, o)
	}()
}

// poll is volume v's loop: ask from the position, deliver the page's
// events, advance, and follow the volume a split hands keys to.
func (w *Watcher) poll(ctx context.Context, c *Client, v wire.VolumeID, prefix string, o watchOptions) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		w.mu.Lock()
		from := w.pos[v]
		w.mu.Unlock()
		page, err := c.watchPage(ctx, v, prefix, o.exact, from, o.hold)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrDenied):
			w.fail(err)
			return
		case err != nil:
			// Unavailable for now (no member answers, the chain is
			// reconfiguring): ask again, from the same position.
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		case page.Compacted:
			// Every member of the chain said so (the core asks each once:
			// clientcore.Core.watchAnswered).
			w.fail(&CompactedError{Volume: uint32(v), Oldest: uint64(page.Oldest)})
			return
		}
		backoff = 10 * time.Millisecond
		for _, e := range page.Events {
			ev := Event{Kind: EventKind(e.Kind), Key: e.Key, Value: e.Value, Hash: e.Type == wire.TypeHash, Volume: uint32(v), Revision: uint64(e.SN)}
			if e.Expires != 0 {
				ev.Expires = time.Unix(0, int64(e.Expires))
			}
			if !w.deliver(ctx, ev, v, int64(e.SN)) {
				return
			}
		}
		w.mu.Lock()
		before := w.pos
		w.pos = clientcore.WatchAdvance(w.pos, v, page)
		w.steps = append(w.steps, watchStep{volume: v, page: wire.WatchPage{Through: page.Through, Split: page.Split}})
		w.settle()
		w.noteKnown()
		added := !page.Split.IsZero() && !slices.Contains(before.Volumes(), page.Split.Into)
		w.mu.Unlock()
		if added {
			w.follow(ctx, c, page.Split.Into, prefix, o)
		}
	}
}

// fail ends the watch with err.
func (w *Watcher) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.cancel()
}

// watchPage asks a member of volume's chain for one page.
func (c *Client) watchPage(ctx context.Context, volume wire.VolumeID, prefix string, exact bool, from int64, hold time.Duration) (wire.WatchPage, error) {
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		call.User = userOf(ctx)
		return c.core.StartWatch(now, volume, prefix, exact, from, wire.Time(hold), call)
	})
	if err != nil {
		return wire.WatchPage{}, err
	}
	r, err := result(d)
	if err != nil {
		return wire.WatchPage{}, err
	}
	if d.Watch != nil {
		return *d.Watch, nil // (decoded by the core: clientcore.Core.watchAnswered)
	}
	page, err := wire.DecodeWatchPage(r.Value)
	if err != nil {
		return wire.WatchPage{}, fmt.Errorf("%w: volume %d answered a watch with %w", ErrUnavailable, volume, err)
	}
	return page, nil
}
