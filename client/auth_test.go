package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/transport"
)

// eventually retries f until it returns nil or waitFor passes: what the
// master changed reaches the servers at once, but the test's next
// request may overtake it.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantErr checks err is target, with a message that says so.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

// Users and roles over a TLS cluster: the first user is the caller's
// own admin; a user without permission reading or writing a keyspace is
// refused with a clear error and nothing changes; a certificate that
// names no user is refused; a user without role admin cannot change
// users, roles or keyspaces; and a user whose role is revoked, then who
// is deleted, loses access on the connection it has open.
func TestUsersAndRoles(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.WithTLS())
	ctx := testCtx(t)
	root := c.DialAs(t, "root")
	bob := c.DialAs(t, "bob")
	// Without users, everyone may do anything.
	if err := bob.Put(ctx, "f/1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := root.AddUser(ctx, "alice", "", client.AdminRole); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "own certificate user \"root\"") {
		t.Fatalf("a first user other than the caller: %v", err)
	}
	if _, err := root.AddUser(ctx, "root", "", client.AdminRole); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "strong", Replicas: 3, Volumes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.AddRole(ctx, "readers"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.GrantRole(ctx, "readers", client.Grant{Keyspace: "feed", Access: "read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.GrantRole(ctx, "readers", client.Grant{Prefix: "pub/", Access: "readwrite"}); err != nil {
		t.Fatal(err)
	}
	auth, err := root.AddUser(ctx, "bob", "", "readers")
	if err != nil {
		t.Fatal(err)
	}
	if len(auth.Users) != 2 || auth.Users[0].Name != "bob" || len(auth.Roles) != 1 || len(auth.Roles[0].Grants) != 2 {
		t.Fatalf("users and roles %+v", auth)
	}
	if err := root.Put(ctx, "f/1", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// bob reads feed and writes under pub/, and nothing else.
	eventually(t, "bob's read of feed", func() error {
		v, _, err := bob.Get(ctx, "f/1")
		if err == nil && string(v) != "v1" {
			t.Fatalf("bob read %q, want v1", v)
		}
		return err
	})
	err = bob.Put(ctx, "f/1", []byte("bob was here"))
	wantErr(t, "bob's write to feed", err, client.ErrDenied)
	if !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the error does not say what is wrong: %v", err)
	}
	wantErr(t, "bob's read of the default keyspace", func() error { _, _, err := bob.Get(ctx, "x"); return err }(), client.ErrDenied)
	wantErr(t, "bob's increment in feed", func() error { _, err := bob.Increment(ctx, "f/n", 1); return err }(), client.ErrDenied)
	if err := bob.Put(ctx, "pub/a", []byte("hello")); err != nil {
		t.Fatalf("bob's write under pub/: %v", err)
	}
	if v, _, err := root.Get(ctx, "f/1"); err != nil || string(v) != "v1" {
		t.Fatalf("after bob's refused write f/1 holds %q (%v), want v1", v, err)
	}
	if _, found, err := root.Get(ctx, "f/n"); err != nil || found {
		t.Fatalf("after bob's refused increment f/n exists: %v (%v)", found, err)
	}
	// A certificate that names no user.
	mallory := c.DialAs(t, "mallory")
	wantErr(t, "mallory's read", func() error { _, _, err := mallory.Get(ctx, "pub/a"); return err }(), client.ErrUnauthenticated)
	// bob administers nothing.
	if _, err := bob.GrantUser(ctx, "bob", client.AdminRole); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "needs role admin") {
		t.Fatalf("bob granting himself admin: %v", err)
	}
	if _, err := bob.CreateKeyspace(ctx, client.Keyspace{Name: "mine", Prefix: "m/", Mode: "strong", Replicas: 1, Volumes: 1}); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("bob creating a keyspace: %v", err)
	}
	if _, err := bob.Auth(ctx); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("bob listing users: %v", err)
	}

	// Revoked: bob's open client loses access at its next request.
	if _, err := root.RevokeUser(ctx, "bob", "readers"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bob's read after his role was revoked", func() error {
		_, _, err := bob.Get(ctx, "f/1")
		if errors.Is(err, client.ErrDenied) {
			return nil
		}
		return errors.New("still allowed")
	})
	if _, err := root.GrantUser(ctx, "bob", "readers"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bob's read after his role was given back", func() error { _, _, err := bob.Get(ctx, "f/1"); return err })
	// Deleted: the same.
	if _, err := root.DeleteUser(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bob's read after he was deleted", func() error {
		_, _, err := bob.Get(ctx, "pub/a")
		if errors.Is(err, client.ErrUnauthenticated) {
			return nil
		}
		return errors.New("still allowed")
	})
	if _, err := root.DeleteUser(ctx, "root"); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "last user with role admin") {
		t.Fatalf("deleting the last admin: %v", err)
	}
}

// A client over a server's in-flight limit gets ErrInFlightLimit for the
// requests beyond it, at once; its requests within the limit, and
// another client's, are served.
func TestInFlightLimit(t *testing.T) {
	const limit = 4
	c := testcluster.Start(t, 1, testcluster.WithTransportOptions(transport.WithClientInFlightMax(limit)))
	// Attempts are not resent while the server is stalled (each resend
	// would count).
	opts := client.Options{AttemptTimeout: time.Minute}
	flood, other := c.Dial(t, opts), c.Dial(t, opts)
	ctx := testCtx(t)
	for _, cl := range []*client.Client{flood, other} {
		if err := cl.Put(ctx, "k", []byte("v")); err != nil { // connected
			t.Fatal(err)
		}
	}
	release := c.Stall(0)
	const n = 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _, err := flood.Get(ctx, "k")
			errs <- err
		})
	}
	otherErr := make(chan error, 1)
	// The refusals come at once, while the server is stalled.
	refused := 0
	for refused < n-limit {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrInFlightLimit) || !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("a request over the limit: %v, want ErrInFlightLimit", err)
			}
			refused++
		case <-ctx.Done():
			t.Fatalf("%d refusals while stalled, want %d", refused, n-limit)
		}
	}
	go func() {
		_, _, err := other.Get(ctx, "k")
		otherErr <- err
	}()
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a request within the limit: %v", err)
		}
	}
	if err := <-otherErr; err != nil {
		t.Fatalf("the other client: %v", err)
	}
	if _, _, err := flood.Get(context.Background(), "k"); err != nil {
		t.Fatalf("the flooding client once the server caught up: %v", err)
	}
}
