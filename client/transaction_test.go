package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// GetTransaction reads keys of a causal keyspace as one snapshot: after
// writes, it returns them; keys of a strong keyspace, or no key, are
// refused as invalid.
func TestGetTransaction(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "causal", K: 2, Replicas: 3, Volumes: 2}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cl.Put(ctx, fmt.Sprint("f/", i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	items, err := cl.GetTransaction(ctx, "f/0", "f/1", "f/2", "f/none")
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Item{{"f/0", []byte("v0"), true}, {"f/1", []byte("v1"), true}, {"f/2", []byte("v2"), true}, {"f/none", nil, false}}
	for i, it := range items {
		if it.Key != want[i].Key || string(it.Value) != string(want[i].Value) || it.Found != want[i].Found {
			t.Fatalf("item %d = %+v, want %+v", i, it, want[i])
		}
	}
	if err := cl.Put(ctx, "strong", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetTransaction(ctx, "f/0", "strong"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a key of a strong keyspace: error %v, want ErrInvalid", err)
	}
	if _, err := cl.GetTransaction(ctx); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("no key: error %v, want ErrInvalid", err)
	}
}

// WaitFor returns once this site holds the past a session brought from
// another site; while it does not, WaitFor and the operations waiting
// behind it fail at their deadline naming the move and the update
// missing, not with a bare deadline.
func TestWaitForNamesTheMoveWhenThePastIsLate(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "causal", K: 2, Replicas: 3, Volumes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "f/1", []byte("v")); err != nil {
		t.Fatal(err)
	}
	var releases []func()
	for i := range 3 { // no server answers: the past cannot arrive
		releases = append(releases, c.Stall(i))
	}
	past := client.PastOf([]wire.Dep{{Key: "f/1", Origin: 2, N: 5}}, 10)
	want := fmt.Sprintf(`session move: the site of master %s has not yet received update 5 from site 2 (key "f/1"): context deadline exceeded`, c.MasterAddr())
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := cl.WaitFor(short, past); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), want) {
		t.Fatalf("WaitFor: %v; want ErrUnavailable saying %q", err, want)
	}
	moved := c.Dial(t, client.Options{After: past}) // the same past, given to Dial
	short, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, _, err := moved.Get(short, "f/1"); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("a read waiting for the past: %v; want it to say %q", err, want)
	}
	for _, release := range releases {
		release()
	}
	if err := cl.WaitFor(ctx, past); err != nil {
		t.Fatalf("WaitFor once the servers answer: %v", err)
	}
	if _, _, err := moved.Get(ctx, "f/1"); err != nil {
		t.Fatal(err)
	}
}

// The ambiguity rule (docs/client.md#outcomes) holds when Close ends an
// update too: one already sent fails with ErrAmbiguous (and ErrClosed),
// one never sent (it waited for a moved session's past) with ErrClosed
// only, not ambiguous: nothing was applied.
func TestCloseEndsUpdatesByTheAmbiguityRule(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	if err := cl.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // no server answers
		c.Stall(i)
	}
	moved := c.Dial(t, client.Options{After: client.PastOf([]wire.Dep{{Key: "k", Origin: 2, N: 5}}, 10)})
	sent, unsent := make(chan error, 1), make(chan error, 1)
	go func() { sent <- cl.Put(ctx, "k", []byte("w")) }()
	go func() { unsent <- moved.Put(ctx, "k", []byte("x")) }()
	time.Sleep(200 * time.Millisecond) // let the first put leave
	cl.Close()
	moved.Close()
	if err := <-sent; !errors.Is(err, client.ErrAmbiguous) || !errors.Is(err, client.ErrClosed) {
		t.Errorf("a put sent, then closed: %v; want ErrAmbiguous and ErrClosed", err)
	}
	if err := <-unsent; !errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrAmbiguous) {
		t.Errorf("a put never sent, then closed: %v; want ErrClosed, not ErrAmbiguous", err)
	}
}
