package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/wire"
)

// A lease's keys live while it is renewed, are listed with it, go when
// it is revoked, and expire, seen by a watch, when renewals stop.
func TestLeaseKeysLiveWhileRenewed(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	putUntil(t, cl, "svc/ready", []byte("x"), waitFor)
	w, err := cl.Watch(ctx, "svc/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	id, first, err := cl.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"svc/a", "svc/b"} {
		if err := cl.Put(ctx, k, []byte(k), client.WithLease(id)); err != nil {
			t.Fatal(err)
		}
		if _, deadline, _, _ := cl.Deadline(ctx, k); !deadline.Equal(first) {
			t.Errorf("%s's deadline %v, want the lease's %v", k, deadline, first)
		}
	}
	leases, err := cl.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(leases, func(l client.LeaseInfo) bool { return l.ID == id })
	if i < 0 || leases[i].TTL != time.Second || !slices.Equal(sortedCopy(leases[i].Keys), []string{"svc/a", "svc/b"}) {
		t.Fatalf("leases %+v; want %s with TTL 1s and keys svc/a, svc/b", leases, id)
	}

	// Renewed past its first deadline, the keys stay.
	for time.Now().Before(first.Add(300 * time.Millisecond)) {
		if _, err := cl.KeepAlive(ctx, id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, found, err := cl.Get(ctx, "svc/a"); err != nil || !found {
		t.Fatalf("svc/a after renewals past the first deadline: %v, %v", found, err)
	}
	// A key written again without the lease is detached: it stays.
	if err := cl.Put(ctx, "svc/b", []byte("mine now")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.KeepAlive(ctx, id); err != nil {
		t.Fatal(err)
	}
	// No more renewals: svc/a expires, and the watch sees it.
	deadline := time.After(waitFor)
	for expired := false; !expired; {
		select {
		case e := <-w.Events():
			expired = e.Key == "svc/a" && e.Kind == client.EventExpire
		case <-deadline:
			t.Fatal("svc/a did not expire after its lease stopped being renewed")
		}
	}
	if _, err := cl.KeepAlive(ctx, id); !errors.Is(err, client.ErrLeaseExpired) {
		t.Errorf("renewing an expired lease: %v, want ErrLeaseExpired", err)
	}
	if v, found, _ := cl.Get(ctx, "svc/b"); !found || string(v) != "mine now" {
		t.Errorf("the detached key: %q %v", v, found)
	}

	// Revoked: its keys go at once.
	id2, _, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "svc/c", []byte("c"), client.WithLease(id2)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Revoke(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := cl.Get(ctx, "svc/c"); found {
		t.Error("svc/c outlived its revoked lease")
	}
	if err := cl.Put(ctx, "svc/d", nil, client.WithLease(id2)); !errors.Is(err, client.ErrLeaseExpired) {
		t.Errorf("a put under a revoked lease: %v", err)
	}
	if _, _, err := cl.Grant(ctx, time.Millisecond); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a lease of 1ms: %v", err)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A lock is held by one holder at a time, checked by the fencing tokens a
// protected register accepts: each holder, under its own renewed lease,
// writes the register only with a token at least the register's, while a
// server of the chains is cut off by a partition (the master takes it
// out) and comes back, and then another stops. A holder whose lease expired behind
// its back (a pause) and whose lock another took is refused by the
// register: its token is lower.
func TestLockExcludesByFencingTokens(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	putUntil(t, cl, "reg", []byte("0:0"), waitFor)

	// write is the protected register: value "token:count", a write
	// accepted only with a token at least the register's.
	write := func(token uint64) (bool, error) {
		for {
			v, _, err := cl.Get(ctx, "reg")
			if err != nil {
				return false, err
			}
			tokStr, countStr, _ := strings.Cut(string(v), ":")
			tok, _ := strconv.ParseUint(tokStr, 10, 64)
			count, _ := strconv.Atoi(countStr)
			if token < tok {
				return false, nil
			}
			swapped, _, _, err := cl.CompareAndSet(ctx, "reg", v, fmt.Appendf(nil, "%d:%d", token, count+1))
			if err != nil || swapped {
				return swapped, err
			}
		}
	}

	// The holders take turns until the faults are over, at least rounds
	// times each.
	const holders, rounds = 3, 4
	var faultsOver atomic.Bool
	var mu sync.Mutex
	inside, accepted := 0, 0
	var tokens []uint64
	var wg sync.WaitGroup
	errs := make(chan error, 4*holders*rounds) // (never blocks a holder)
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, _, err := cl.Grant(ctx, 2*time.Second)
			if err != nil {
				errs <- err
				return
			}
			kctx, stop := context.WithCancel(ctx)
			defer stop()
			go cl.KeepAliveLoop(kctx, id)
			m := cl.NewMutex("locks/reg", id)
			for round := 0; round < rounds || !faultsOver.Load(); round++ {
				token, err := m.Lock(ctx)
				if err != nil {
					errs <- fmt.Errorf("holder %d: %w", h, err)
					return
				}
				mu.Lock()
				inside++
				if inside > 1 {
					errs <- fmt.Errorf("holder %d entered with %d inside", h, inside)
				}
				tokens = append(tokens, token)
				mu.Unlock()
				ok, err := write(token)
				mu.Lock()
				inside--
				if ok {
					accepted++
				}
				mu.Unlock()
				if err != nil || !ok {
					errs <- fmt.Errorf("holder %d: the register refused token %d: %v", h, token, err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("holder %d: unlock: %w", h, err)
					return
				}
			}
		}()
	}
	// A partition cuts a server off from the master and the other
	// servers (the master takes it out of the chains), then heals (it
	// joins again); then a server stops. The holders go on.
	time.Sleep(100 * time.Millisecond)
	heal := c.Isolate(2)
	isolated := wire.NodeID(c.ServerAddrs()[2])
	for deadline := time.Now().Add(waitFor); ; time.Sleep(50 * time.Millisecond) {
		st, err := cl.Status(ctx)
		if err == nil && !testcluster.WireStatus(st).Configs[0].Contains(isolated) {
			break // the master took it out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the isolated server %s still in the chain after %s (%v)", isolated, waitFor, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	heal()
	time.Sleep(500 * time.Millisecond)
	c.Stop(1)
	time.Sleep(300 * time.Millisecond)
	faultsOver.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if accepted != len(tokens) || accepted < holders*rounds {
		t.Errorf("%d writes accepted of %d acquisitions, want every one and at least %d", accepted, len(tokens), holders*rounds)
	}
	t.Logf("%d acquisitions through a partition and a stopped server", accepted)
	if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
		t.Errorf("tokens in acquisition order %v: not increasing", tokens)
	}

	// A paused holder: its lease is revoked behind its back (as its
	// expiry would), another takes the lock; its late write is refused.
	paused, _, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pm := cl.NewMutex("locks/reg", paused)
	stale, err := pm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Revoke(ctx, paused); err != nil {
		t.Fatal(err)
	}
	other, _, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	om := cl.NewMutex("locks/reg", other)
	fresh, err := om.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fresh <= stale {
		t.Fatalf("the new holder's token %d is not above the paused one's %d", fresh, stale)
	}
	if ok, err := write(fresh); !ok || err != nil {
		t.Fatalf("the holder's write: %v %v", ok, err)
	}
	if ok, err := write(stale); ok || err != nil {
		t.Errorf("the paused holder's late write with token %d was accepted (%v)", stale, err)
	}
	if err := pm.Unlock(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Errorf("the paused holder's unlock: %v, want ErrNotHeld", err)
	}
	if err := om.Unlock(ctx); err != nil {
		t.Errorf("unlock: %v", err)
	}
}

// An election: one leader at a time, announced by its value; a
// resignation lets the next candidate lead.
func TestElectionOneLeaderAtATime(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	putUntil(t, cl, "ready", []byte("x"), waitFor)
	a, _, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ea, eb := cl.NewElection("leader", a), cl.NewElection("leader", b)
	if _, err := ea.Campaign(ctx, []byte("a:7000")); err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() {
		_, err := eb.Campaign(ctx, []byte("b:7000"))
		won <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if v, ok, err := ea.Leader(ctx); err != nil || !ok || string(v) != "a:7000" {
		t.Fatalf("leader %q %v %v, want a:7000", v, ok, err)
	}
	select {
	case err := <-won:
		t.Fatalf("b led while a did: %v", err)
	default:
	}
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("b did not lead after a resigned")
	}
	if v, _, _ := eb.Leader(ctx); string(v) != "b:7000" {
		t.Errorf("leader %q after a resigned, want b:7000", v)
	}
}
