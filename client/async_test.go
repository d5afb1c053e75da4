package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// startAll runs calls through Start and returns their results, in order.
func startAll(t *testing.T, ctx context.Context, cl *client.Client, calls []client.Call) []client.CallResult {
	t.Helper()
	results := make([]client.CallResult, len(calls))
	done := make(chan int, len(calls))
	for i := range calls {
		calls[i].Done = func(r client.CallResult) {
			results[i] = r
			done <- i
		}
	}
	cl.Start(ctx, calls)
	for range calls {
		select {
		case <-done:
		case <-time.After(2 * waitFor):
			t.Fatal("a call of Start never finished")
		}
	}
	return results
}

// Start's calls end as Get and Put do, the errors included.
func TestStart(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	if err := cl.Put(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	res := startAll(t, ctx, cl, []client.Call{
		{Kind: client.CallPut, Key: "a", Value: []byte("1")},
		{Kind: client.CallPut, Key: "b", Value: []byte("2")},
		{Kind: client.CallGet, Key: "missing"},
		{Kind: client.CallGet, Key: "empty", Consistency: client.AnyMember},
		{Kind: client.CallGet, Key: ""},
		{Kind: client.CallPut, Key: strings.Repeat("k", 100_000), Value: []byte("v")},
		{Kind: client.CallGet, Key: "a", Consistency: client.Consistency(9)},
	})
	for i, r := range res[:2] {
		if r.Err != nil {
			t.Errorf("put %d: %v", i, r.Err)
		}
	}
	if r := res[2]; r.Err != nil || r.Found || r.Value != nil {
		t.Errorf("get of a missing key: %+v; want not found", r)
	}
	if r := res[3]; r.Err != nil || !r.Found || r.Value == nil || len(r.Value) != 0 {
		t.Errorf("get of an empty value: %+v; want found, a non-nil empty value", r)
	}
	for i, r := range res[4:] {
		if !errors.Is(r.Err, client.ErrInvalid) {
			t.Errorf("invalid call %d: %v; want ErrInvalid", i, r.Err)
		}
	}
	// The same as Get's, for the same key and error.
	_, _, getErr := cl.Get(ctx, "")
	if getErr == nil || res[4].Err.Error() != getErr.Error() {
		t.Errorf("Start's error %q, Get's %q; want the same", res[4].Err, getErr)
	}
	res = startAll(t, ctx, cl, []client.Call{{Kind: client.CallGet, Key: "a"}, {Kind: client.CallGet, Key: "b"}})
	if !bytes.Equal(res[0].Value, []byte("1")) || !bytes.Equal(res[1].Value, []byte("2")) {
		t.Errorf("gets after the puts: %q, %q; want 1, 2", res[0].Value, res[1].Value)
	}

	// A context already ended: unavailable, nothing applied.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	res = startAll(t, ended, cl, []client.Call{{Kind: client.CallPut, Key: "c", Value: []byte("3")}})
	if !errors.Is(res[0].Err, client.ErrUnavailable) || !errors.Is(res[0].Err, context.Canceled) {
		t.Errorf("put with an ended context: %v; want ErrUnavailable and context.Canceled", res[0].Err)
	}

	// With every server down, a context that ends ends the calls: the
	// put is ambiguous, the get unavailable, as for Put and Get.
	for i := range c.ServerAddrs() {
		c.Stop(i)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res = startAll(t, short, cl, []client.Call{{Kind: client.CallPut, Key: "k", Value: []byte("v")}, {Kind: client.CallGet, Key: "k"}})
	if !errors.Is(res[0].Err, client.ErrAmbiguous) {
		t.Errorf("put with every server down: %v; want ErrAmbiguous", res[0].Err)
	}
	if !errors.Is(res[1].Err, client.ErrUnavailable) {
		t.Errorf("get with every server down: %v; want ErrUnavailable", res[1].Err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	results := make(chan client.CallResult, 1)
	cl.Start(cancelled, []client.Call{{Kind: client.CallGet, Key: "k", Done: func(r client.CallResult) { results <- r }}})
	cancel()
	select {
	case r := <-results:
		if !errors.Is(r.Err, client.ErrUnavailable) || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("get cancelled: %v; want ErrUnavailable and context.Canceled", r.Err)
		}
	case <-time.After(waitFor):
		t.Fatal("a cancelled call did not end")
	}

	// Close ends a call under way with ErrClosed, and one started after
	// it too.
	cl.Start(testCtx(t), []client.Call{{Kind: client.CallGet, Key: "k", Done: func(r client.CallResult) { results <- r }}})
	time.Sleep(50 * time.Millisecond) // let it send
	cl.Close()
	for _, when := range []string{"under way at Close", "after Close"} {
		select {
		case r := <-results:
			if !errors.Is(r.Err, client.ErrClosed) {
				t.Errorf("get %s: %v; want ErrClosed", when, r.Err)
			}
		case <-time.After(waitFor):
			t.Fatalf("get %s did not end", when)
		}
		if when == "under way at Close" {
			cl.Start(testCtx(t), []client.Call{{Kind: client.CallGet, Key: "k", Done: func(r client.CallResult) { results <- r }}})
		}
	}
}

// Start's hash calls end as HashSet and HashGet do, WRONGTYPE included.
func TestStartHashes(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	if err := cl.Put(ctx, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	f := func(name, value string) client.Field { return client.Field{Name: name, Value: []byte(value)} }
	res := startAll(t, ctx, cl, []client.Call{
		{Kind: client.CallHashSet, Key: "h", Fields: []client.Field{f("b", "2"), f("a", "1"), f("b", "3")}},
		{Kind: client.CallHashSet, Key: "s", Fields: []client.Field{f("a", "1")}},
		{Kind: client.CallHashSet, Key: "h2"},
	})
	if r := res[0]; r.Err != nil || r.Added != 2 {
		t.Errorf("hash set of two new fields: %+v; want 2 added", r)
	}
	if r := res[1]; !errors.Is(r.Err, client.ErrWrongType) {
		t.Errorf("hash set on a string: %v; want ErrWrongType", r.Err)
	}
	if r := res[2]; !errors.Is(r.Err, client.ErrInvalid) {
		t.Errorf("hash set of no field: %v; want ErrInvalid", r.Err)
	}
	res = startAll(t, ctx, cl, []client.Call{
		{Kind: client.CallHashGet, Key: "h", Names: []string{"b", "c", "a"}},
		{Kind: client.CallHashGet, Key: "h", Consistency: client.AnyMember},
		{Kind: client.CallHashGet, Key: "missing"},
		{Kind: client.CallHashGet, Key: "s"},
		{Kind: client.CallGet, Key: "h"},
	})
	got := func(fields []client.Field) string {
		var b strings.Builder
		for _, f := range fields {
			b.WriteString(f.Name + "=" + string(f.Value) + " ")
		}
		return b.String()
	}
	if r := res[0]; r.Err != nil || !r.Found || got(r.Fields) != "b=3 a=1 " {
		t.Errorf("hash get of b, c, a: %+v; want b=3 a=1, found", r)
	}
	want, _, err := cl.HashGet(ctx, "h", nil)
	if r := res[1]; err != nil || r.Err != nil || got(r.Fields) != got(want) || got(want) != "a=1 b=3 " {
		t.Errorf("hash get of every field: %+v; HashGet's %s (%v); want a=1 b=3", r, got(want), err)
	}
	if r := res[2]; r.Err != nil || r.Found || len(r.Fields) != 0 {
		t.Errorf("hash get of a missing key: %+v; want not found", r)
	}
	for i, r := range res[3:] {
		if !errors.Is(r.Err, client.ErrWrongType) {
			t.Errorf("read %d of the wrong type: %v; want ErrWrongType", i, r.Err)
		}
	}
}
