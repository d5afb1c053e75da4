package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// A hash through the Go client: fields set, read, incremented and
// deleted, each an atomic update; WRONGTYPE both ways; TYPE; the key
// gone with its last field; a deadline kept by a hash's updates.
func TestHashes(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	f := func(name, value string) client.Field { return client.Field{Name: name, Value: []byte(value)} }
	if n, err := cl.HashSet(ctx, "user:1", f("name", "ada"), f("age", "36"), f("name", "Ada")); err != nil || n != 2 {
		t.Fatalf("HashSet: %d, %v", n, err)
	}
	got, exists, err := cl.HashGet(ctx, "user:1", nil, client.AnyMember)
	if err != nil || !exists || fmt.Sprint(got) != fmt.Sprint([]client.Field{f("age", "36"), f("name", "Ada")}) {
		t.Fatalf("HashGet of every field: %v, %v, %v", got, exists, err)
	}
	got, _, err = cl.HashGet(ctx, "user:1", []string{"name", "nosuch"})
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]client.Field{f("name", "Ada")}) {
		t.Fatalf("HashGet of two fields: %v, %v", got, err)
	}
	if n, err := cl.HashIncrement(ctx, "user:1", "age", 1); err != nil || n != 37 {
		t.Fatalf("HashIncrement: %d, %v", n, err)
	}
	if _, err := cl.HashIncrement(ctx, "user:1", "name", 1); !errors.Is(err, client.ErrNotInteger) {
		t.Fatalf("HashIncrement of a name: %v", err)
	}
	if ok, err := cl.HashSetIfAbsent(ctx, "user:1", "name", []byte("x")); err != nil || ok {
		t.Fatalf("HashSetIfAbsent of a present field: %v, %v", ok, err)
	}
	if typ, err := cl.TypeOf(ctx, "user:1"); err != nil || typ != "hash" {
		t.Fatalf("TypeOf a hash: %q, %v", typ, err)
	}
	if _, _, err := cl.Get(ctx, "user:1"); !errors.Is(err, client.ErrWrongType) {
		t.Fatalf("Get of a hash: %v", err)
	}
	if _, err := cl.Append(ctx, "user:1", []byte("x")); !errors.Is(err, client.ErrWrongType) {
		t.Fatalf("Append to a hash: %v", err)
	}
	if err := cl.Put(ctx, "plain", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.HashSet(ctx, "plain", f("a", "1")); !errors.Is(err, client.ErrWrongType) {
		t.Fatalf("HashSet on a string: %v", err)
	}
	if ok, err := cl.Expire(ctx, "user:1", time.Hour); err != nil || !ok {
		t.Fatalf("Expire of a hash: %v, %v", ok, err)
	}
	if _, err := cl.HashSet(ctx, "user:1", f("city", "London")); err != nil {
		t.Fatal(err)
	}
	if _, deadline, _, err := cl.Deadline(ctx, "user:1"); err != nil || time.Until(deadline) < 50*time.Minute {
		t.Fatalf("the hash's deadline after HashSet: %v, %v", deadline, err)
	}
	if n, err := cl.HashDelete(ctx, "user:1", "age", "name", "city", "nosuch"); err != nil || n != 3 {
		t.Fatalf("HashDelete: %d, %v", n, err)
	}
	if typ, err := cl.TypeOf(ctx, "user:1"); err != nil || typ != "none" {
		t.Fatalf("a hash without fields: %q, %v; want none", typ, err)
	}
}
