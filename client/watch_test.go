package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
)

// watched collects a watcher's events per key until stop says enough.
func watched(t *testing.T, w *client.Watcher, into map[string][]client.Event, stop func() bool) {
	t.Helper()
	deadline := time.After(waitFor)
	for !stop() {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch ended: %v", w.Err())
			}
			into[e.Key] = append(into[e.Key], e)
		case <-deadline:
			t.Fatalf("the watch delivered %d keys' events within %v; still waiting", len(into), waitFor)
		}
	}
}

// A watch of a prefix delivers every acknowledged write of its keys, once
// and in each key's order, while a server of the chains stops midway; a
// watch resumed from the first one's position goes on from there with
// nothing lost or repeated; keys outside the prefix are not delivered.
func TestWatchDeliversEveryWriteOnceAcrossAFailureAndAResume(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "cfg", Prefix: "cfg/", Mode: "strong", Replicas: 3, Volumes: 2}); err != nil {
		t.Fatal(err)
	}
	putUntil(t, cl, "cfg/ready", []byte("x"), waitFor)
	w, err := cl.Watch(ctx, "cfg/a")
	if err != nil {
		t.Fatal(err)
	}
	// acked[k] lists the values acknowledged for key k, in order.
	acked := map[string][]string{}
	write := func(from, to int) {
		for i := from; i < to; i++ {
			key := fmt.Sprintf("cfg/a%d", i%5)
			value := fmt.Sprint(i)
			if i%7 == 6 {
				if _, err := cl.Delete(ctx, key); err == nil {
					acked[key] = append(acked[key], "<deleted>")
				}
				continue
			}
			if err := cl.Put(ctx, key, []byte(value)); err == nil {
				acked[key] = append(acked[key], value)
			}
			if err := cl.Put(ctx, fmt.Sprintf("cfg/b%d", i%5), []byte(value)); err != nil {
				t.Logf("put outside the prefix: %v", err)
			}
		}
	}
	got := map[string][]client.Event{}
	complete := func() bool {
		for k, values := range acked {
			if len(got[k]) < len(values) {
				return false
			}
		}
		return true
	}
	write(0, 40)
	watched(t, w, got, complete)
	c.Stop(1) // the chains drop a member; the watch goes on elsewhere
	write(40, 80)
	watched(t, w, got, complete)
	pos := w.Position()
	w.Close()

	// Resumed: the changes made while no watch ran arrive.
	write(80, 120)
	w2, err := cl.Watch(ctx, "cfg/a", client.WatchFrom(pos))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	watched(t, w2, got, complete)
	for k, events := range got {
		var values []string
		for i, e := range events {
			if i > 0 && e.Revision <= events[i-1].Revision {
				t.Errorf("%s: revision %d after %d", k, e.Revision, events[i-1].Revision)
			}
			switch e.Kind {
			case client.EventPut:
				values = append(values, string(e.Value))
			case client.EventDelete:
				values = append(values, "<deleted>")
			default:
				t.Errorf("%s: event %v", k, e.Kind)
			}
		}
		if !slices.Equal(values, acked[k]) {
			t.Errorf("%s: watched %q, want the acknowledged %q", k, values, acked[k])
		}
	}
	if len(got) != 5 {
		t.Errorf("events of %d keys, want the 5 keys cfg/a0..4 only", len(got))
	}
}

// A watch of one key sees its put, its deletion and its expiry, and
// nothing of keys it prefixes.
func TestWatchOfOneKeySeesItsExpiry(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	putUntil(t, cl, "session", []byte("0"), waitFor)
	w, err := cl.Watch(ctx, "session", client.WatchKey())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.Put(ctx, "sessions", []byte("other key")))
	must(cl.Put(ctx, "session", []byte("1")))
	if _, err := cl.Delete(ctx, "session"); err != nil {
		t.Fatal(err)
	}
	must(cl.Put(ctx, "session", []byte("2"), client.WithTTL(200*time.Millisecond)))
	var kinds []string
	for len(kinds) < 4 {
		select {
		case e := <-w.Events():
			if e.Key != "session" {
				t.Fatalf("an event of %q in a watch of session", e.Key)
			}
			kinds = append(kinds, fmt.Sprintf("%v %s", e.Kind, e.Value))
			if e.Kind == client.EventPut && string(e.Value) == "2" && e.Expires.IsZero() {
				t.Errorf("the put with a TTL has no deadline")
			}
		case <-time.After(waitFor):
			t.Fatalf("events %q; waiting for the expiry", kinds)
		}
	}
	if want := []string{"put 1", "delete ", "put 2", "expire "}; !slices.Equal(kinds, want) {
		t.Errorf("events %q, want %q", kinds, want)
	}
}

// Bad watches are refused with a clear error, and one of a causal
// keyspace ends with the reason.
func TestWatchRefusals(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	if _, err := cl.Watch(ctx, "", client.WatchKey()); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a watch of the empty key: %v", err)
	}
	if _, err := cl.Watch(ctx, "k", client.WatchHold(time.Minute)); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a watch held a minute: %v", err)
	}
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "causal", K: 2, Replicas: 3, Volumes: 1}); err != nil {
		t.Fatal(err)
	}
	w, err := cl.Watch(ctx, "f/x", client.WatchKey())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	select {
	case _, ok := <-w.Events():
		if ok {
			t.Fatal("an event from a watch of a causal keyspace")
		}
	case <-wctx.Done():
		t.Fatal("a watch of a causal keyspace did not end")
	}
	if err := w.Err(); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a watch of a causal keyspace ended with %v, want ErrInvalid", err)
	}
}

// awaitChain waits until volume 0's chain, as the master's status shows
// it, satisfies cond.
func awaitChain(t *testing.T, cl *client.Client, what string, cond func(client.VolumeConfig) bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cl.Status(ctx)
		cancel()
		if err == nil && len(st.Volumes) > 0 && cond(st.Volumes[0]) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not within %v: %s", waitFor, what)
}

// startPosition returns w's position as Watch returned it, which knows
// every volume's revision (Watch waits for them).
func startPosition(t *testing.T, w *client.Watcher) client.WatchPosition {
	t.Helper()
	pos := w.Position()
	for v, at := range pos {
		if at < 0 {
			t.Fatalf("Watch returned before it knew volume %d's revision: %v", v, pos)
		}
	}
	if len(pos) == 0 {
		t.Fatal("Watch returned following no volume")
	}
	return pos
}

// positionNow returns the position of a watch of prefix started now: a
// WatchFrom that delivers every change made after it.
func positionNow(ctx context.Context, t *testing.T, cl *client.Client, prefix string) client.WatchPosition {
	t.Helper()
	w, err := cl.Watch(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return startPosition(t, w)
}

// A member that restarted with empty storage holds no updates from
// before its state transfer, and answers a watch from a revision before
// it Compacted; a member that did not restart still holds them. A watch
// resumed from there must be served by that one (ADR 32: "unless
// another member still holds the window (the client core tries the
// others first)"), here with two of the three members restarted: it
// ended with a CompactedError whenever it asked a restarted one (two
// times in three), and with 8 more tries, each of a member drawn at
// random, still (2/3)^9 of the time, 2.6%.
func TestWatchResumedFromBeforeMembersRestartedIsServedByAnother(t *testing.T) {
	c, cl := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	putUntil(t, cl, "w/ready", []byte("x"), waitFor)
	from := positionNow(ctx, t, cl, "w/k")
	var want []string
	for i := range 10 {
		v := fmt.Sprint("v", i)
		if err := cl.Put(ctx, "w/k", []byte(v)); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	addrs := c.ServerAddrs()
	for _, i := range []int{1, 2} {
		c.Stop(i)
		awaitChain(t, cl, "the stopped server removed", func(v client.VolumeConfig) bool { return !slices.Contains(v.Chain, addrs[i]) })
		c.Restart(i)
		awaitChain(t, cl, "the restarted server a member again", func(v client.VolumeConfig) bool {
			return len(v.Chain) == 3 && slices.Contains(v.Chain, addrs[i]) && v.Joining == ""
		})
		v := fmt.Sprint("after ", i)
		if err := cl.Put(ctx, "w/k", []byte(v)); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	// Each watch asks a member drawn at random first: 40 watches all
	// avoid the restarted ones with probability (1/3)^40.
	for i := range 40 {
		w, err := cl.Watch(ctx, "w/k", client.WatchFrom(from))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(got) < len(want) {
			select {
			case e, ok := <-w.Events():
				if !ok {
					t.Fatalf("watch %d from %v ended after %q: %v", i, from, got, w.Err())
				}
				got = append(got, string(e.Value))
			case <-time.After(waitFor):
				t.Fatalf("watch %d from %v: %q after %v", i, from, got, waitFor)
			}
		}
		w.Close()
		if !slices.Equal(got, want) {
			t.Fatalf("watch %d from %v delivered %q, want %q", i, from, got, want)
		}
	}
}

// Position is through the last event received from Events, not the
// events the watch has ready beyond it: a watcher that stops reading
// midway, takes its position and resumes from it gets the events it did
// not read, each once.
func TestWatchPositionIsThroughTheEventsReceived(t *testing.T) {
	_, cl := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	putUntil(t, cl, "w/ready", []byte("x"), waitFor)
	w, err := cl.Watch(ctx, "w/k")
	if err != nil {
		t.Fatal(err)
	}
	startPosition(t, w)
	var want []string
	for i := range 10 {
		v := fmt.Sprint("v", i)
		if err := cl.Put(ctx, "w/k", []byte(v)); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	receive := func(w *client.Watcher, n int) []string {
		t.Helper()
		var got []string
		for len(got) < n {
			select {
			case e, ok := <-w.Events():
				if !ok {
					t.Fatalf("the watch ended after %q: %v", got, w.Err())
				}
				got = append(got, string(e.Value))
			case <-time.After(5 * time.Second):
				t.Fatalf("%q received; waiting for %d events", got, n)
			}
		}
		return got
	}
	got := receive(w, 3)
	// The watch has the other 7 ready (Events is buffered) before the
	// position is taken.
	for deadline := time.Now().Add(waitFor); len(w.Events()) < 7 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	pos := w.Position()
	w.Close()
	w2, err := cl.Watch(ctx, "w/k", client.WatchFrom(pos))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	got = append(got, receive(w2, 7)...)
	if !slices.Equal(got, want) {
		t.Fatalf("received %q, then %q resumed from %v; want %q", got[:3], got[3:], pos, want)
	}
}

// A watch from now delivers the changes made after Watch returns, and
// none acknowledged before it was called: Watch returns once it knows
// where each volume stands, and asks the tail, whose committed revision
// covers every acknowledged change.
func TestWatchFromNowStartsAtTheCall(t *testing.T) {
	_, cl := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	putUntil(t, cl, "k", []byte("x"), waitFor)
	for i := range 20 {
		if err := cl.Put(ctx, "k", []byte(fmt.Sprint("before ", i))); err != nil {
			t.Fatal(err)
		}
		w, err := cl.Watch(ctx, "k", client.WatchKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Put(ctx, "k", []byte(fmt.Sprint("after ", i))); err != nil {
			t.Fatal(err)
		}
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch %d ended: %v", i, w.Err())
			}
			if want := fmt.Sprint("after ", i); string(e.Value) != want {
				t.Fatalf("watch %d, started between the puts of %q and %q, delivered %q first", i, fmt.Sprint("before ", i), want, e.Value)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch %d, started before the put of %q, delivered nothing within 5s (position %v)", i, fmt.Sprint("after ", i), w.Position())
		}
		w.Close()
	}
}

// The window a member serves watches from is a setting
// (-watch-window): with the latest 20 updates kept, a watch from before
// the last 20 is compacted, naming the oldest revision it may start at,
// and a watch from there delivers the rest.
func TestWatchWindowIsASetting(t *testing.T) {
	const window, writes = 20, 50
	c := testcluster.Start(t, 3, testcluster.WithWatchWindow(window))
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	putUntil(t, cl, "w/ready", []byte("x"), waitFor)
	from := positionNow(ctx, t, cl, "w/k")
	for i := range writes {
		if err := cl.Put(ctx, "w/k", []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cl.Watch(ctx, "w/k", client.WatchFrom(from))
	if err != nil {
		t.Fatal(err)
	}
	for range w.Events() {
		t.Fatal("a watch from before the window delivered an event")
	}
	var compacted *client.CompactedError
	if !errors.As(w.Err(), &compacted) {
		t.Fatalf("a watch from %v, %d updates ago, with a window of %d: %v, want a CompactedError", from, writes, window, w.Err())
	}
	if lo, hi := uint64(from[compacted.Volume])+writes-window, uint64(from[compacted.Volume])+writes; compacted.Oldest < lo || compacted.Oldest > hi {
		t.Fatalf("compacted at revision %d, want within the last %d updates (%d to %d)", compacted.Oldest, window, lo, hi)
	}

	w, err = cl.Watch(ctx, "w/k", client.WatchFrom(client.WatchPosition{compacted.Volume: int64(compacted.Oldest)}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := writes - int(compacted.Oldest-uint64(from[compacted.Volume]))
	for got := 0; got < want; got++ {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch from the oldest revision ended after %d events: %v", got, w.Err())
			}
			if v := fmt.Sprint("v", writes-want+got); string(e.Value) != v {
				t.Fatalf("event %d: %q, want %q", got, e.Value, v)
			}
		case <-time.After(waitFor):
			t.Fatalf("the watch from the oldest revision: %d of %d events after %v", got, want, waitFor)
		}
	}
}
