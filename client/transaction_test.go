package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/catena-kv/catena/client"
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
