package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// A watch of a prefix on real processes (docs/adr/0032) while writers
// put unique values to its keys and to keys outside it: the chain's tail
// is killed with SIGKILL under load and restarted, then the member that
// holds the watch's long poll (the one whose heartbeats report it, in
// the master's status, while the watched keys' writers pause) is killed
// and restarted. The watch delivers every acknowledged
// write exactly once, each key's writes in the order its writer made
// them (a write whose outcome is unknown at most once, in its place),
// no write the client reported unapplied, no key outside the prefix,
// and revisions that grow per key; and a second watch started from the
// first one's initial position, after both restarts, delivers the very
// same events (a member that holds them serves it).
func TestWatchAcrossKilledTailAndWatchServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	at := func() time.Duration { return time.Since(began).Round(time.Millisecond) }
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchClient, _ := dial(t, c.mAddr)
	w, err := watchClient.Watch(ctx, watchPrefix, client.WatchHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	from := w.Position() // (known: Watch waits for every volume's revision)
	got := collectWatch(w)
	t.Logf("%s: cluster of 3 running, watching %q from %v", at(), watchPrefix, from)

	writers := startWatchWriters(t, c.mAddr, watchPrefix, 2, 4)
	others := startWatchWriters(t, c.mAddr, "other/", 1, 4)
	writers.awaitAcked(t, 30)

	// The tail, under load.
	cfg := c.awaitChain(3)
	c.killAndRestart(cfg.Tail(), writers)
	t.Logf("%s: the tail %s killed, restarted and back in the chain", at(), cfg.Tail())

	// The member holding the watch: with the watched keys' writers
	// paused (the other keys' go on), the watch's long poll waits at one
	// member for up to its 2 s hold.
	c.awaitChain(3)
	writers.pause()
	victim, err := c.watchHolder(5 * time.Second)
	if err != nil {
		writers.resume()
		t.Fatal(err)
	}
	c.kill(c.server(string(victim)))
	writers.resume()
	t.Logf("%s: killed %s, which held the watch", at(), victim)
	c.awaitChain(2, func(cfg wire.Config) bool { return cfg.Index(victim) < 0 })
	writers.awaitAcked(t, 10)
	c.start(c.server(string(victim)))
	c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(victim) >= 0 })
	writers.awaitAcked(t, 20)
	t.Logf("%s: %s restarted and back in the chain", at(), victim)

	writers.finish()
	others.finish()
	final := writers.finalValues(t, c.mAddr)
	events := got.await(t, final)
	w.Close()
	if err := got.err(); err != nil {
		t.Fatalf("the watch ended: %v", err)
	}
	writers.check(t, events, final)
	t.Logf("%s: the watch delivered %d events of %d keys: %s", at(), count(events), len(events), writers.summary())

	// From the start again, after both restarts.
	w2, err := watchClient.Watch(ctx, watchPrefix, client.WatchFrom(from))
	if err != nil {
		t.Fatal(err)
	}
	again := collectWatch(w2).await(t, final)
	w2.Close()
	for key, want := range events {
		if i := firstDifference(again[key], want); i >= 0 {
			t.Errorf("%s: a watch from %v after the restarts delivered %s from its event %d, the first one %s", key, from, describe(again[key][i:]), i, describe(want[i:]))
		}
	}
	t.Logf("%s: a watch from %v after the restarts delivered the same %d events", at(), from, count(again))
}

// watchPrefix is what the watch test watches.
const watchPrefix = "watch/"

// killAndRestart kills the chain member id, waits until the master
// removed it and w had 10 more writes acknowledged, restarts it and waits
// until it is a member again and 10 more were.
func (c *cluster) killAndRestart(id wire.NodeID, w *watchWriters) {
	c.t.Helper()
	p := c.server(string(id))
	c.kill(p)
	c.awaitChain(2, func(cfg wire.Config) bool { return cfg.Index(id) < 0 })
	w.awaitAcked(c.t, 10)
	c.start(p)
	c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(id) >= 0 })
	w.awaitAcked(c.t, 10)
}

// watchHolder returns the server whose replicas hold a watch, as its
// heartbeats report (wire.VolumeStatus.Watches) in the master's status,
// once exactly one does, the same in two statuses a few heartbeats
// apart (the watch's hold is longer), within d.
func (c *cluster) watchHolder(d time.Duration) (wire.NodeID, error) {
	deadline := time.Now().Add(d)
	last := "no status"
	var seen wire.NodeID
	var seenAt time.Time
	for time.Now().Before(deadline) {
		s, err := c.status()
		if err != nil {
			last = err.Error()
			continue
		}
		var holders []wire.NodeID
		var counts []string
		for _, srv := range s.Servers {
			n := uint64(0)
			for _, v := range srv.Volumes {
				n += v.Watches
			}
			counts = append(counts, fmt.Sprintf("%s: %d", srv.ID, n))
			if n > 0 && srv.Alive {
				holders = append(holders, srv.ID)
			}
		}
		switch {
		case len(holders) != 1:
			seen = ""
		case holders[0] != seen:
			seen, seenAt = holders[0], time.Now()
		case time.Since(seenAt) >= 150*time.Millisecond:
			return seen, nil
		}
		last = strings.Join(counts, ", ")
		time.Sleep(10 * time.Millisecond)
	}
	return "", fmt.Errorf("no single server held the watch within %s (last: %s)", d, last)
}

// watchCollector reads a watch's events into per-key lists.
type watchCollector struct {
	w    *client.Watcher
	mu   sync.Mutex
	keys map[string][]client.Event
	done bool
}

func collectWatch(w *client.Watcher) *watchCollector {
	g := &watchCollector{w: w, keys: map[string][]client.Event{}}
	go func() {
		for e := range w.Events() {
			g.mu.Lock()
			g.keys[e.Key] = append(g.keys[e.Key], e)
			g.mu.Unlock()
		}
		g.mu.Lock()
		g.done = true
		g.mu.Unlock()
	}()
	return g
}

// await waits until the last event of every key in final carries the
// value the final read found there (values are unique: the watch has
// delivered every write of it), and returns the events so far.
func (g *watchCollector) await(t *testing.T, final map[string]string) map[string][]client.Event {
	t.Helper()
	deadline := time.Now().Add(chainRepairWait)
	for {
		g.mu.Lock()
		var behind []string
		for key, v := range final {
			if events := g.keys[key]; len(events) == 0 || string(events[len(events)-1].Value) != v {
				behind = append(behind, key)
			}
		}
		done := g.done
		out := map[string][]client.Event{}
		for key, events := range g.keys {
			out[key] = slices.Clone(events)
		}
		g.mu.Unlock()
		switch {
		case len(behind) == 0:
			return out
		case done:
			t.Fatalf("the watch ended (%v) without the final value of %v", g.w.Err(), behind)
		case time.Now().After(deadline):
			slices.Sort(behind)
			t.Fatalf("the watch did not deliver the final value of %v within %s", behind, chainRepairWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// err is why the watch ended, if it did.
func (g *watchCollector) err() error { return g.w.Err() }

// watchWriters run one client each, putting unique values to keys only it
// writes, one put at a time, and record each put's outcome.
type watchWriters struct {
	stop chan struct{}
	wg   sync.WaitGroup
	// gate is held (read) through each put; pause takes it.
	gate sync.RWMutex
	mu   sync.Mutex
	// puts are each key's puts in the order its writer made them.
	puts  map[string][]watchPut
	acked int
}

// watchPut is one put and what its writer learned.
type watchPut struct {
	value string
	// outcome: acknowledged, unknown (it may or may not have been
	// applied) or failed (the client said it was not applied).
	outcome string
}

const (
	putAcked   = "acknowledged"
	putUnknown = "unknown"
	putFailed  = "failed"
)

// startWatchWriters starts writers clients, each putting to keysEach keys
// under prefix in turn.
func startWatchWriters(t *testing.T, masterAddr, prefix string, writers, keysEach int) *watchWriters {
	t.Helper()
	w := &watchWriters{stop: make(chan struct{}), puts: map[string][]watchPut{}}
	for i := range writers {
		var keys []string
		for j := range keysEach {
			keys = append(keys, fmt.Sprintf("%s%d/%d", prefix, i, j))
		}
		cl, _ := dial(t, masterAddr)
		w.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				w.put(cl, keys[n%len(keys)], fmt.Sprintf("w%d-%d", i, n))
			}
		})
	}
	return w
}

// put writes value to key and records the outcome.
func (w *watchWriters) put(cl *client.Client, key, value string) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
	err := cl.Put(ctx, key, []byte(value))
	cancel()
	outcome := putAcked
	switch {
	case errors.Is(err, client.ErrUnavailable):
		outcome = putFailed
	case err != nil:
		outcome = putUnknown
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.puts[key] = append(w.puts[key], watchPut{value: value, outcome: outcome})
	if outcome == putAcked {
		w.acked++
	}
}

// pause waits for the puts in progress and holds the others until resume.
func (w *watchWriters) pause()  { w.gate.Lock() }
func (w *watchWriters) resume() { w.gate.Unlock() }

// awaitAcked waits until n more puts have been acknowledged.
func (w *watchWriters) awaitAcked(t *testing.T, n int) {
	t.Helper()
	awaitGrowth(t, "puts acknowledged", n, func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.acked
	})
}

func (w *watchWriters) finish() { close(w.stop); w.wg.Wait() }

// finalValues reads every key once the writers stopped.
func (w *watchWriters) finalValues(t *testing.T, masterAddr string) map[string]string {
	t.Helper()
	cl, _ := dial(t, masterAddr)
	out := map[string]string{}
	for key := range w.puts {
		ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
		v, found, err := cl.Get(ctx, key)
		cancel()
		if err != nil {
			t.Fatalf("final read of %s: %v", key, err)
		}
		if found {
			out[key] = string(v)
		}
	}
	return out
}

// check compares the events of each key with its puts: every event a
// put, of a value its writer put and the client did not report unapplied,
// each value once, in the order the writer put them, every acknowledged
// put among them, revisions growing; no event of a key nobody wrote; the
// last event the final value.
func (w *watchWriters) check(t *testing.T, events map[string][]client.Event, final map[string]string) {
	t.Helper()
	for key, list := range events {
		puts, ok := w.puts[key]
		if !ok {
			t.Errorf("%s: %d events of a key no writer of %q wrote: %s", key, len(list), watchPrefix, describe(list))
			continue
		}
		next := 0 // the index in puts after the last event's
		for i, e := range list {
			if i > 0 && e.Revision <= list[i-1].Revision {
				t.Errorf("%s: event %d at revision %d after revision %d", key, i, e.Revision, list[i-1].Revision)
			}
			if e.Kind != client.EventPut {
				t.Errorf("%s: event %d is a %v; the writers only put", key, i, e.Kind)
				continue
			}
			j := slices.IndexFunc(puts, func(p watchPut) bool { return p.value == string(e.Value) })
			switch {
			case j < 0:
				t.Errorf("%s: event %d delivers %q, which its writer never put", key, i, e.Value)
			case puts[j].outcome == putFailed:
				t.Errorf("%s: event %d delivers %q, whose put the client reported unapplied", key, i, e.Value)
			case j < next:
				t.Errorf("%s: event %d delivers %q (put %d) after put %d's value: twice, or out of the writer's order", key, i, e.Value, j, next-1)
			default:
				for k := next; k < j; k++ {
					if puts[k].outcome == putAcked {
						t.Errorf("%s: the acknowledged put %d of %q is missing before event %d's %q (put %d)", key, k, puts[k].value, i, e.Value, j)
					}
				}
				next = j + 1
			}
		}
		for k := next; k < len(puts); k++ {
			if puts[k].outcome == putAcked {
				t.Errorf("%s: the acknowledged put %d of %q is missing after the last event", key, k, puts[k].value)
			}
		}
		if v, ok := final[key]; ok && string(list[len(list)-1].Value) != v {
			t.Errorf("%s: the last event delivers %q, the final read found %q", key, list[len(list)-1].Value, v)
		}
	}
	for key, puts := range w.puts {
		if _, ok := events[key]; !ok && slices.ContainsFunc(puts, func(p watchPut) bool { return p.outcome == putAcked }) {
			t.Errorf("%s: no event, though %d puts were acknowledged", key, len(puts))
		}
	}
}

// summary counts the puts by outcome.
func (w *watchWriters) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := map[string]int{}
	for _, puts := range w.puts {
		for _, p := range puts {
			n[p.outcome]++
		}
	}
	return fmt.Sprintf("%d puts acknowledged, %d unknown, %d failed", n[putAcked], n[putUnknown], n[putFailed])
}

// firstDifference returns the index of the first event in which a and b
// differ (-1: none).
func firstDifference(a, b []client.Event) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) {
			return i
		}
		x, y := a[i], b[i]
		if x.Kind != y.Kind || x.Key != y.Key || string(x.Value) != string(y.Value) || x.Volume != y.Volume || x.Revision != y.Revision {
			return i
		}
	}
	return -1
}

// describe lists the first events as kind value@revision.
func describe(events []client.Event) string {
	var out []string
	for i, e := range events {
		if i == 5 {
			out = append(out, fmt.Sprintf("... (%d in all)", len(events)))
			break
		}
		out = append(out, fmt.Sprintf("%v %q@%d", e.Kind, e.Value, e.Revision))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func count(events map[string][]client.Event) int {
	n := 0
	for _, list := range events {
		n += len(list)
	}
	return n
}
