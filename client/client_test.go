package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/wire"
)

// waitFor bounds operations that should take milliseconds; it is
// generous so a loaded machine does not fail tests.
const waitFor = 10 * time.Second

// largestValueWait bounds the put and read of the largest value.
const largestValueWait = time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// start runs a three-server cluster and returns it with a client.
func start(t *testing.T) (*testcluster.Cluster, *client.Client) {
	t.Helper()
	c := testcluster.Start(t, 3)
	return c, c.Dial(t)
}

func mustGet(t *testing.T, cl *client.Client, key string) ([]byte, bool) {
	t.Helper()
	v, found, err := cl.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v, found
}

func wantValue(t *testing.T, cl *client.Client, key string, want []byte) {
	t.Helper()
	v, found := mustGet(t, cl, key)
	if !found || !bytes.Equal(v, want) {
		t.Fatalf("Get(%q) = %q, found=%v; want %q", key, v, found, want)
	}
}

func wantAbsent(t *testing.T, cl *client.Client, key string) {
	t.Helper()
	if v, found := mustGet(t, cl, key); found {
		t.Fatalf("Get(%q) = %q; want absent", key, v)
	}
}

func TestPutGetDelete(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	wantAbsent(t, cl, "k")
	if err := cl.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, cl, "k", []byte("v1"))
	if err := cl.Put(ctx, "k", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, cl, "k", []byte("v2"))

	found, err := cl.Delete(ctx, "k")
	if err != nil || !found {
		t.Fatalf("Delete(k) = %v, %v; want found", found, err)
	}
	wantAbsent(t, cl, "k")
	found, err = cl.Delete(ctx, "k")
	if err != nil || found {
		t.Fatalf("Delete(k) again = %v, %v; want not found", found, err)
	}
	found, err = cl.Delete(ctx, "never-written")
	if err != nil || found {
		t.Fatalf("Delete(never-written) = %v, %v; want not found", found, err)
	}

	// An empty value is a value; binary values survive the round trip.
	if err := cl.Put(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, found := mustGet(t, cl, "empty"); !found || len(v) != 0 {
		t.Fatalf("Get(empty) = %q, found=%v; want an empty value", v, found)
	}
	bin := []byte{0, 1, 0xff, 0, '\n'}
	if err := cl.Put(ctx, "bin\x00key", bin); err != nil {
		t.Fatal(err)
	}
	wantValue(t, cl, "bin\x00key", bin)

	// The largest key and value are accepted. Their put and read have
	// a deadline of their own, and a long one: a megabyte through the
	// chain and back can take over 10 s under go test -race on a busy
	// machine.
	bigKey := strings.Repeat("k", kv.KeySizeMax)
	bigValue := bytes.Repeat([]byte{'v'}, kv.ValueSizeMax)
	bigCtx, cancel := context.WithTimeout(context.Background(), largestValueWait)
	defer cancel()
	if err := cl.Put(bigCtx, bigKey, bigValue); err != nil {
		t.Fatalf("Put(KeySizeMax key, ValueSizeMax value): %v", err)
	}
	if v, found, err := cl.Get(bigCtx, bigKey); err != nil || !found || !bytes.Equal(v, bigValue) {
		t.Fatalf("Get(KeySizeMax key) = %d bytes, found=%v, %v; want the ValueSizeMax value", len(v), found, err)
	}
}

func TestCompareAndSet(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)

	// PutIfAbsent: set only if absent.
	put, cur, err := cl.PutIfAbsent(ctx, "k", []byte("a"))
	if err != nil || !put || cur != nil {
		t.Fatalf("PutIfAbsent(k, a) = %v, %q, %v; want put", put, cur, err)
	}
	wantValue(t, cl, "k", []byte("a"))
	put, cur, err = cl.PutIfAbsent(ctx, "k", []byte("b"))
	if err != nil || put || string(cur) != "a" {
		t.Fatalf("PutIfAbsent(k, b) on a = %v, %q, %v; want not put, current a", put, cur, err)
	}

	// Wrong expected value: fails, returns the current value.
	swapped, cur, found, err := cl.CompareAndSet(ctx, "k", []byte("x"), []byte("b"))
	if err != nil || swapped || !found || string(cur) != "a" {
		t.Fatalf("CAS(x→b) on a = %v, %q, %v, %v; want failed with current a", swapped, cur, found, err)
	}
	wantValue(t, cl, "k", []byte("a"))

	// Right expected value: swaps.
	swapped, _, found, err = cl.CompareAndSet(ctx, "k", []byte("a"), []byte("b"))
	if err != nil || !swapped || !found {
		t.Fatalf("CAS(a→b) on a = %v, %v, %v; want swapped, found", swapped, found, err)
	}
	wantValue(t, cl, "k", []byte("b"))

	// Any expected value on an absent key fails, nil included.
	for _, expected := range [][]byte{[]byte("a"), nil, {}} {
		swapped, cur, found, err = cl.CompareAndSet(ctx, "absent", expected, []byte("b"))
		if err != nil || swapped || found || cur != nil {
			t.Fatalf("CAS(%q→b) on absent = %v, %q, %v, %v; want failed, not found", expected, swapped, cur, found, err)
		}
	}
	wantAbsent(t, cl, "absent")

	// An empty expected value, nil or not, matches an existing empty value.
	for _, expected := range [][]byte{nil, {}} {
		if err := cl.Put(ctx, "e", nil); err != nil {
			t.Fatal(err)
		}
		swapped, _, _, err = cl.CompareAndSet(ctx, "e", expected, []byte("full"))
		if err != nil || !swapped {
			t.Fatalf("CAS(%#v→full) on empty = %v, %v; want swapped", expected, swapped, err)
		}
		wantValue(t, cl, "e", []byte("full"))
	}
}

// Reading a value and swapping it works for an existing empty value too:
// Get returns it as found and empty, and CompareAndSet with what Get
// returned swaps. (It never did when nil meant "absent" to CompareAndSet
// and Get returned nil for an empty value.)
func TestCompareAndSetAfterGetOfEmptyValue(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	if err := cl.Put(ctx, "empty", []byte{}); err != nil {
		t.Fatal(err)
	}
	v, found, err := cl.Get(ctx, "empty")
	if err != nil || !found || v == nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %#v, %v, %v; want a non-nil empty value, found", v, found, err)
	}
	swapped, cur, _, err := cl.CompareAndSet(ctx, "empty", v, []byte("next"))
	if err != nil || !swapped {
		t.Fatalf("CompareAndSet(empty, %#v, next) = %v (current %q), %v; want swapped", v, swapped, cur, err)
	}
	wantValue(t, cl, "empty", []byte("next"))
}

func TestIncrement(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	n, err := cl.Increment(ctx, "n", 5)
	if err != nil || n != 5 {
		t.Fatalf("Increment(absent, 5) = %d, %v; want 5", n, err)
	}
	for i := 1; i <= 3; i++ {
		n, err = cl.Increment(ctx, "n", 10)
		if err != nil || n != int64(5+10*i) {
			t.Fatalf("Increment #%d = %d, %v; want %d", i, n, err, 5+10*i)
		}
	}
	n, err = cl.Increment(ctx, "n", -40)
	if err != nil || n != -5 {
		t.Fatalf("Increment(-40) = %d, %v; want -5", n, err)
	}
	wantValue(t, cl, "n", []byte("-5"))

	// A value that is not a decimal integer is left alone.
	if err := cl.Put(ctx, "s", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Increment(ctx, "s", 1); !errors.Is(err, client.ErrNotInteger) {
		t.Fatalf("Increment(abc) error = %v; want ErrNotInteger", err)
	}
	wantValue(t, cl, "s", []byte("abc"))

	// Overflow is refused with its own error.
	if err := cl.Put(ctx, "max", []byte(strconv.FormatInt(math.MaxInt64, 10))); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Increment(ctx, "max", 1); !errors.Is(err, client.ErrOverflow) {
		t.Fatalf("Increment(MaxInt64, 1) error = %v; want ErrOverflow", err)
	}
	wantValue(t, cl, "max", []byte(strconv.FormatInt(math.MaxInt64, 10)))
}

func TestAppend(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	v, err := cl.Append(ctx, "log", []byte("a"))
	if err != nil || string(v) != "a" {
		t.Fatalf("Append(absent, a) = %q, %v; want a", v, err)
	}
	v, err = cl.Append(ctx, "log", []byte("bc"))
	if err != nil || string(v) != "abc" {
		t.Fatalf("Append(bc) = %q, %v; want abc", v, err)
	}
	wantValue(t, cl, "log", []byte("abc"))

	// Beyond the value limit: refused, unchanged.
	full := bytes.Repeat([]byte{'x'}, kv.ValueSizeMax)
	if err := cl.Put(ctx, "full", full); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Append(ctx, "full", []byte("y")); !errors.Is(err, client.ErrValueTooLarge) {
		t.Fatalf("Append beyond ValueSizeMax error = %v; want ErrValueTooLarge", err)
	}
	wantValue(t, cl, "full", full)
}

func TestSwapAndReplace(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	prior, found, err := cl.Swap(ctx, "k", []byte("a"))
	if err != nil || found || prior != nil {
		t.Fatalf("Swap(absent, a) = %q, %v, %v; want nothing prior", prior, found, err)
	}
	prior, found, err = cl.Swap(ctx, "k", []byte{})
	if err != nil || !found || string(prior) != "a" {
		t.Fatalf("Swap(a, empty) = %q, %v, %v; want prior a", prior, found, err)
	}
	prior, found, err = cl.Swap(ctx, "k", []byte("b"))
	if err != nil || !found || prior == nil || len(prior) != 0 {
		t.Fatalf("Swap(empty, b) = %#v, %v, %v; want a non-nil empty prior value", prior, found, err)
	}
	wantValue(t, cl, "k", []byte("b"))

	replaced, prior, err := cl.Replace(ctx, "absent", []byte("x"))
	if err != nil || replaced || prior != nil {
		t.Fatalf("Replace(absent) = %v, %q, %v; want not replaced", replaced, prior, err)
	}
	wantAbsent(t, cl, "absent")
	replaced, prior, err = cl.Replace(ctx, "k", []byte("c"))
	if err != nil || !replaced || string(prior) != "b" {
		t.Fatalf("Replace(b, c) = %v, %q, %v; want replaced, prior b", replaced, prior, err)
	}
	wantValue(t, cl, "k", []byte("c"))
}

func TestInvalidRequests(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	if err := cl.Put(ctx, "k", []byte("orig")); err != nil {
		t.Fatal(err)
	}
	longKey := strings.Repeat("k", kv.KeySizeMax+1)
	bigValue := make([]byte, kv.ValueSizeMax+1)
	ops := []struct {
		name string
		do   func() error
	}{
		{"Get empty key", func() error { _, _, err := cl.Get(ctx, ""); return err }},
		{"Put empty key", func() error { return cl.Put(ctx, "", []byte("v")) }},
		{"Delete empty key", func() error { _, err := cl.Delete(ctx, ""); return err }},
		{"CAS empty key", func() error { _, _, _, err := cl.CompareAndSet(ctx, "", nil, []byte("v")); return err }},
		{"Increment empty key", func() error { _, err := cl.Increment(ctx, "", 1); return err }},
		{"Append empty key", func() error { _, err := cl.Append(ctx, "", []byte("v")); return err }},
		{"Get long key", func() error { _, _, err := cl.Get(ctx, longKey); return err }},
		{"Put long key", func() error { return cl.Put(ctx, longKey, []byte("v")) }},
		{"Delete long key", func() error { _, err := cl.Delete(ctx, longKey); return err }},
		{"Increment long key", func() error { _, err := cl.Increment(ctx, longKey, 1); return err }},
		{"Put big value", func() error { return cl.Put(ctx, "k", bigValue) }},
		{"Append big value", func() error { _, err := cl.Append(ctx, "k", bigValue); return err }},
		{"CAS big value", func() error { _, _, _, err := cl.CompareAndSet(ctx, "k", []byte("orig"), bigValue); return err }},
		{"CAS big expected", func() error { _, _, _, err := cl.CompareAndSet(ctx, "k", bigValue, []byte("v")); return err }},
	}
	for _, op := range ops {
		if err := op.do(); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: error %v; want ErrInvalid", op.name, err)
		}
	}
	// Nothing changed: the key is as it was, no truncated long key exists,
	// and the client still works.
	wantValue(t, cl, "k", []byte("orig"))
	wantAbsent(t, cl, longKey[:kv.KeySizeMax])
	if err := cl.Put(ctx, "k", []byte("next")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, cl, "k", []byte("next"))
}

// Concurrent operations on one client are pipelined, and each increment
// is applied exactly once.
func TestConcurrentIncrements(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	const goroutines, each = 8, 50
	results := make(chan int64, goroutines*each)
	errs := make(chan error, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				n, err := cl.Increment(ctx, "counter", 1)
				if err != nil {
					errs <- err
					return
				}
				results <- n
			}
		})
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("Increment: %v", err)
	}
	// Every increment saw a distinct value: 1..400, each once.
	var seen []int64
	for n := range results {
		seen = append(seen, n)
	}
	slices.Sort(seen)
	for i, n := range seen {
		if n != int64(i+1) {
			t.Fatalf("increment results %v...; want each of 1..%d once", seen[:min(len(seen), i+3)], goroutines*each)
		}
	}
	wantValue(t, cl, "counter", []byte(strconv.Itoa(goroutines*each)))
}

// Several clients work on one cluster at once.
func TestManyClients(t *testing.T) {
	c, _ := start(t)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		cl := c.Dial(t)
		wg.Go(func() {
			for j := range 20 {
				if _, err := cl.Append(ctx, "shared", []byte{byte('a' + i)}); err != nil {
					errs <- err
					return
				}
				if err := cl.Put(ctx, fmt.Sprintf("c%d/%d", i, j), []byte("x")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cl := c.Dial(t)
	v, _ := mustGet(t, cl, "shared")
	if len(v) != 80 {
		t.Fatalf("shared has %d bytes; want 80", len(v))
	}
	for i := range 4 {
		if n := bytes.Count(v, []byte{byte('a' + i)}); n != 20 {
			t.Errorf("client %d appended %d times; want 20", i, n)
		}
	}
}

func TestStatus(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	// Under heavy load a stalled server may be suspected and the chain
	// repaired meanwhile: wait for a full chain of live servers.
	var st *client.ClusterStatus
	for {
		var err error
		if st, err = cl.Status(ctx); err != nil {
			t.Fatalf("Status: %v (last %+v)", err, st)
		}
		alive := 0
		for _, s := range st.Servers {
			if s.Alive {
				alive++
			}
		}
		reported := 0
		for _, s := range st.Servers {
			if len(s.Volumes) == 1 {
				reported++
			}
		}
		if len(st.Volumes) == 1 && len(st.Volumes[0].Chain) == 3 && st.Volumes[0].Joining == "" && alive == 3 && reported == 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg := st.Volumes[0]
	want := c.ServerAddrs()
	if cfg.Epoch == 1 && !slices.Equal(cfg.Chain, want) {
		t.Errorf("initial chain %v; want %v", cfg.Chain, want)
	}
	if got := slices.Sorted(slices.Values(cfg.Chain)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("chain %v; want the servers %v", cfg.Chain, want)
	}
	if head, tail := cfg.Role(cfg.Chain[0]), cfg.Role(cfg.Chain[2]); head != "head" || tail != "tail" || cfg.Role(cfg.Chain[1]) != "middle" || cfg.Role("nobody") != "" {
		t.Errorf("roles in %v: head %q, middle %q, tail %q", cfg.Chain, head, cfg.Role(cfg.Chain[1]), tail)
	}
	var servers []string
	for _, s := range st.Servers {
		servers = append(servers, s.Addr)
		if s.Incarnation == 0 {
			t.Errorf("server %s reports no incarnation", s.Addr)
		}
		if len(s.Volumes) != 1 || s.Volumes[0].Volume != 0 || s.Volumes[0].Epoch == 0 {
			t.Errorf("server %s reports volumes %+v; want volume 0 in an epoch", s.Addr, s.Volumes)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(servers)), slices.Sorted(slices.Values(want))) {
		t.Errorf("servers %v; want %v", servers, want)
	}
	if len(st.Masters) != 1 || st.Masters[0] != c.MasterAddr() || st.Leader != st.Masters[0] {
		t.Errorf("masters %v, leader %q; want the one master %s leading", st.Masters, st.Leader, c.MasterAddr())
	}
}

func ids(addrs []string) []wire.NodeID {
	var out []wire.NodeID
	for _, a := range addrs {
		out = append(out, wire.NodeID(a))
	}
	return out
}

// putUntil retries a Put until it succeeds or the deadline passes.
func putUntil(t *testing.T, cl *client.Client, key string, value []byte, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err = cl.Put(ctx, key, value)
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("Put(%q) did not succeed within %v: %v", key, within, err)
}

func testCrash(t *testing.T, server int) {
	c, cl := start(t)
	ctx := testCtx(t)
	for i := range 10 {
		if err := cl.Put(ctx, fmt.Sprintf("before/%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Increment(ctx, "n", 1); err != nil {
		t.Fatal(err)
	}
	c.Stop(server)
	putUntil(t, cl, "after", []byte("crash"), 5*time.Second)
	wantValue(t, cl, "after", []byte("crash"))
	for i := range 10 {
		wantValue(t, cl, fmt.Sprintf("before/%d", i), []byte("x"))
	}
	// The increment before the crash was applied once.
	n, err := cl.Increment(ctx, "n", 1)
	if err != nil || n != 2 {
		t.Fatalf("Increment after the crash = %d, %v; want 2", n, err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	crashed := wire.NodeID(c.ServerAddrs()[server])
	if cfg := testcluster.WireStatus(st).Configs[0]; cfg.Contains(crashed) || len(cfg.Chain) == 0 {
		t.Errorf("chain after the crash %v; want it without %s", cfg, crashed)
	}
	if errs := c.ProtocolErrors(); len(errs) > 0 {
		t.Errorf("protocol errors: %v", errs)
	}
}

func TestHeadCrash(t *testing.T) { testCrash(t, 0) }

func TestMiddleCrash(t *testing.T) { testCrash(t, 1) }

func TestTailCrash(t *testing.T) { testCrash(t, 2) }

// A server one of whose event loops hangs (CR §2 assumes fail-stop
// servers; a hung loop is neither running nor stopped) stops
// heartbeating, so the master takes it out of its chains as it would a
// crashed one: the hung loop's volumes serve again without it, and its
// other loops' volumes too.
func TestHungLoopTakesItsServerOut(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	// Volumes 1-3 (the default keyspace has volume 0), on loops 1, 2
	// and 0 of each server.
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "spread", Prefix: "s/", Mode: "strong", Replicas: 3, Volumes: 3}); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("s/%d", i)
		putUntil(t, cl, keys[i], []byte("before"), 5*time.Second)
	}

	c.StallLoop(0, 1)
	for _, key := range keys {
		putUntil(t, cl, key, []byte("after"), testcluster.LoopSilenceMax+5*time.Second)
		wantValue(t, cl, key, []byte("after"))
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hung := wire.NodeID(c.ServerAddrs()[0])
	for _, cfg := range testcluster.WireStatus(st).Configs {
		if chain.LoopOf(cfg.Volume, testcluster.Loops) == 1 && cfg.Contains(hung) {
			t.Errorf("volume %d's chain %v still holds %s, whose loop 1 hangs", cfg.Volume, cfg, hung)
		}
	}
}

func TestAllServersDown(t *testing.T) {
	c, cl := start(t)
	for i := range c.ServerAddrs() {
		c.Stop(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := cl.Put(ctx, "k", []byte("v")); !errors.Is(err, client.ErrAmbiguous) {
		t.Errorf("Put with every server down: %v; want ErrAmbiguous", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, _, err := cl.Get(ctx, "k"); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Get with every server down: %v; want ErrUnavailable", err)
	}

	// An operation waiting for an answer ends with ErrClosed when the
	// client is closed.
	done := make(chan error, 1)
	go func() {
		_, _, err := cl.Get(testCtx(t), "k")
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it send
	cl.Close()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("Get interrupted by Close: %v; want ErrClosed", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Get did not return after Close")
	}
}

func TestClosed(t *testing.T) {
	c, _ := start(t)
	cl := c.Dial(t)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := testCtx(t)
	type check struct {
		name string
		err  error
	}
	var checks []check
	add := func(name string, err error) { checks = append(checks, check{name, err}) }
	_, _, err := cl.Get(ctx, "k")
	add("Get", err)
	add("Put", cl.Put(ctx, "k", []byte("v")))
	_, err = cl.Delete(ctx, "k")
	add("Delete", err)
	_, _, _, err = cl.CompareAndSet(ctx, "k", nil, []byte("v"))
	add("CompareAndSet", err)
	_, err = cl.Increment(ctx, "k", 1)
	add("Increment", err)
	_, err = cl.Append(ctx, "k", []byte("v"))
	add("Append", err)
	_, err = cl.Status(ctx)
	add("Status", err)
	for _, ch := range checks {
		if !errors.Is(ch.err, client.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", ch.name, ch.err)
		}
	}
	// Nothing was written by the closed client.
	wantAbsent(t, c.Dial(t), "k")
}

// Dial to a wrong address fails with the cause as soon as it is known,
// not when the context ends (the context here is a minute long; an error
// at its end would say "deadline exceeded" and not the cause).
func TestDialFailsFastWithTheCause(t *testing.T) {
	c := testcluster.Start(t, 3)
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close() // nobody listens there after this
		return ln.Addr().String()
	}()
	// A service that is not Catena: it answers the Hello with text and
	// hangs up, as an HTTP server does.
	notCatena := serve(t, func(nc net.Conn) {
		nc.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
	})
	for _, tc := range []struct {
		name, addr string
		is         error
		want       string
	}{
		{"nothing listening", refused, client.ErrUnavailable, "connection refused"},
		{"a server's port", c.ServerAddrs()[0], client.ErrUnavailable, "is a Catena server, not a master (its masters: " + c.MasterAddr() + ")"},
		{"not a Catena node", notCatena, client.ErrUnavailable, "closed the connection before sending anything"},
		{"no port", "127.0.0.1", client.ErrInvalid, "bad master address"},
		{"port not a number", "127.0.0.1:http-alt", client.ErrInvalid, "bad master address"},
		{"port out of range", "127.0.0.1:70000", client.ErrInvalid, "bad master address"},
		{"no host", ":7100", client.ErrInvalid, "missing host"},
		{"empty", " , ", client.ErrInvalid, "no master address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl, err := client.Dial(ctx, tc.addr)
			if err == nil {
				cl.Close()
				t.Fatalf("Dial(%q) succeeded", tc.addr)
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Dial(%q) = %v; want %v saying %q", tc.addr, err, tc.is, tc.want)
			}
		})
	}
	// A listener that accepts and never answers: the cause is known only
	// when the context ends, and the error says what happened.
	silent := serve(t, func(nc net.Conn) { time.Sleep(time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if cl, err := client.Dial(ctx, silent); err == nil {
		cl.Close()
		t.Fatal("Dial to a silent listener succeeded")
	} else if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "accepted the connection but did not answer") {
		t.Fatalf("Dial to a silent listener: %v", err)
	}
}

// serve listens on loopback and runs handle on every connection until
// the test ends; it returns the address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				handle(nc)
			}()
		}
	}()
	return ln.Addr().String()
}

// rawClient speaks the wire protocol to one server over a hand-made
// connection.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

func dialRawClient(t *testing.T, addr string, id wire.NodeID) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	rc.send(&wire.Hello{From: id, MinProtocol: release.ProtocolMin, MaxProtocol: release.ProtocolMax})
	return rc
}

func (rc *rawClient) send(m wire.Message) {
	rc.t.Helper()
	if err := wire.WriteFrame(rc.w, m); err != nil {
		rc.t.Fatal(err)
	}
	if err := rc.w.Flush(); err != nil {
		rc.t.Fatal(err)
	}
}

// reply reads the next ClientReply, waiting at most d.
func (rc *rawClient) reply(d time.Duration) (*wire.ClientReply, error) {
	rc.nc.SetReadDeadline(time.Now().Add(d))
	for {
		m, _, err := wire.ReadFrame(rc.r, nil)
		if err != nil {
			return nil, err
		}
		if r, ok := m.(*wire.ClientReply); ok {
			return r, nil
		}
	}
}

// waitClosed reads until the server closes the connection.
func (rc *rawClient) waitClosed() {
	rc.t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(waitFor))
	buf := make([]byte, 4096)
	for {
		_, err := rc.r.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			rc.t.Fatal("the server kept a connection that sent garbage")
		}
		return
	}
}

// badRequest is a malformed or misdirected request and the answer it
// must get.
type badRequest struct {
	name   string
	atTail bool
	req    *wire.ClientRequest
	want   wire.ErrCode
	// key is a key the request must not have written, if any.
	key string
}

// rawAttempt is one run of the bad requests against one configuration.
type rawAttempt struct {
	head, tail *rawClient
	bad        []badRequest
	replies    []*wire.ClientReply
	// before and after are the SNs of the valid updates around the bad
	// requests.
	before, after wire.SN
}

// runRawAttempt sends, over raw connections to the head and the tail of
// cfg, as a new client: a valid update, the bad requests, another valid update. It returns
// an error when the chain did not hold still (lease lost, configuration
// changed, reply lost), so the caller may try again.
func runRawAttempt(t *testing.T, attempt int, addrs map[wire.NodeID]string, cfg wire.Config) (*rawAttempt, error) {
	// A new client each attempt: request numbers start again at 1.
	rawID := wire.NodeID(fmt.Sprintf("client/raw%d", attempt))
	clientID := wire.ClientID(0xbad00 + attempt)
	a := &rawAttempt{
		head: dialRawClient(t, addrs[cfg.Head()], rawID),
		// The tail answers updates, over a connection the client opened.
		tail: dialRawClient(t, addrs[cfg.Tail()], rawID),
	}
	reqNo := uint64(0)
	req := func(epoch wire.Epoch, op wire.Op) *wire.ClientRequest {
		reqNo++
		return &wire.ClientRequest{Volume: 0, Epoch: epoch, Client: clientID, ReqNo: reqNo, AckedBelow: 1, Op: op}
	}
	call := func(rc *rawClient, r *wire.ClientRequest) (*wire.ClientReply, error) {
		rc.send(r)
		rep, err := rc.reply(3 * time.Second)
		if err != nil {
			return nil, fmt.Errorf("no reply to %v: %w", r.Op, err)
		}
		if rep.ReqNo != r.ReqNo || rep.Client != r.Client {
			t.Fatalf("reply %+v to request %d of client %d", rep, r.ReqNo, r.Client)
		}
		return rep, nil
	}
	// A query confirms the tail knows the connection before updates rely
	// on it.
	if r, err := call(a.tail, req(cfg.Epoch, wire.Op{Kind: wire.OpGet, Key: "raw/before"})); err != nil || r.Err != wire.ErrNone {
		return nil, fmt.Errorf("Get at the tail: %+v, %v", r, err)
	}
	update := func(key string) (wire.SN, error) {
		a.head.send(req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("1")}))
		r, err := a.tail.reply(3 * time.Second)
		if err != nil || r.Err != wire.ErrNone || r.ReqNo != reqNo {
			return 0, fmt.Errorf("valid Put(%s): %+v, %v", key, r, err)
		}
		return r.Result.SN, nil
	}
	var err error
	if a.before, err = update("raw/before"); err != nil {
		return nil, err
	}
	volume5 := req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Key: "raw/v", Value: []byte("x")})
	volume5.Volume = 5
	a.bad = []badRequest{
		{"unknown operation", false, req(cfg.Epoch, wire.Op{Kind: 99, Key: "raw/a", Value: []byte("x")}), wire.ErrBadRequest, "raw/a"},
		{"2 KiB key", false, req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Key: strings.Repeat("b", 2048), Value: []byte("x")}), wire.ErrBadRequest, ""},
		{"empty key", false, req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Value: []byte("x")}), wire.ErrBadRequest, ""},
		{"oversized value", false, req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Key: "raw/big", Value: make([]byte, kv.ValueSizeMax+1)}), wire.ErrBadRequest, "raw/big"},
		{"oversized append", false, req(cfg.Epoch, wire.Op{Kind: wire.OpAppend, Key: "raw/app", Value: make([]byte, kv.ValueSizeMax+1)}), wire.ErrBadRequest, "raw/app"},
		{"unknown operation at the tail", true, req(cfg.Epoch, wire.Op{Kind: 0, Key: "raw/a0"}), wire.ErrBadRequest, "raw/a0"},
		{"future epoch", false, req(cfg.Epoch+100, wire.Op{Kind: wire.OpPut, Key: "raw/c", Value: []byte("x")}), wire.ErrWrongEpoch, "raw/c"},
		{"epoch 0", false, req(0, wire.Op{Kind: wire.OpPut, Key: "raw/c0", Value: []byte("x")}), wire.ErrWrongEpoch, "raw/c0"},
		{"update at the tail", true, req(cfg.Epoch, wire.Op{Kind: wire.OpPut, Key: "raw/t", Value: []byte("x")}), wire.ErrNotHead, "raw/t"},
		{"unknown volume", false, volume5, wire.ErrUnavailable, "raw/v"},
	}
	for _, b := range a.bad {
		rc := a.head
		if b.atTail {
			rc = a.tail
		}
		r, err := call(rc, b.req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		if r.Err == wire.ErrUnavailable && b.want != wire.ErrUnavailable {
			return nil, fmt.Errorf("%s: server unavailable (lease lost?)", b.name)
		}
		a.replies = append(a.replies, r)
	}
	if a.after, err = update("raw/after"); err != nil {
		return nil, err
	}
	return a, nil
}

// A server answers malformed requests with an error and changes nothing,
// drops a connection that sends garbage, and keeps serving.
func TestServerRejectsBadRequests(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	addrs := map[wire.NodeID]string{}
	for _, a := range c.ServerAddrs() {
		addrs[wire.NodeID(a)] = a
	}
	// The chain must hold still during an attempt; under heavy load a
	// stalled process can be suspected and the chain reconfigured. Try
	// again then.
	var a *rawAttempt
	var cfg wire.Config
	for attempt := 1; a == nil; attempt++ {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg = testcluster.WireStatus(st).Configs[0]
		if cfg.Joining != "" || len(cfg.Chain) < 2 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		a, err = runRawAttempt(t, attempt, addrs, cfg)
		if err == nil {
			if st, err = cl.Status(ctx); err != nil || st.Volumes[0].Epoch != uint64(cfg.Epoch) {
				a, err = nil, fmt.Errorf("configuration changed during the attempt")
			}
		}
		if err != nil {
			t.Logf("attempt %d with %v: %v", attempt, cfg, err)
			if attempt == 5 {
				t.Fatal("the chain did not hold still for 5 attempts")
			}
		}
	}
	for i, b := range a.bad {
		r := a.replies[i]
		if r.Err != b.want {
			t.Errorf("%s: reply error %v; want %v", b.name, r.Err, b.want)
		}
		switch {
		case b.want == wire.ErrWrongEpoch && b.req.Epoch < cfg.Epoch:
			if r.Config == nil || r.Config.Epoch != cfg.Epoch {
				t.Errorf("%s: reply config %v; want the server's (epoch %d)", b.name, r.Config, cfg.Epoch)
			}
		case r.Config != nil:
			t.Errorf("%s: reply carries config %v", b.name, r.Config)
		}
	}
	// No bad request was sequenced: the second update directly follows
	// the first.
	if a.after != a.before+1 {
		t.Errorf("Put after the bad requests has SN %d; want %d (nothing sequenced in between)", a.after, a.before+1)
	}

	// Garbage closes the connection (here a known message cut short in
	// its fields, and a length over the frame limit); a frame of an
	// unknown type would only be skipped (a newer release's message).
	ack, err := wire.Marshal(&wire.Ack{})
	if err != nil {
		t.Fatal(err)
	}
	a.head.nc.Write([]byte{0, 0, 0, 2, ack[0], 0x80})
	a.head.waitClosed()
	a.tail.nc.Write([]byte{0xff, 0xff, 0xff, 0xff})
	a.tail.waitClosed()

	// The cluster still serves, and only the valid updates were written.
	cl2 := c.Dial(t)
	for _, k := range []string{"raw/before", "raw/after"} {
		if _, found := mustGet(t, cl2, k); !found {
			t.Errorf("%s missing", k)
		}
	}
	for _, b := range a.bad {
		if b.key != "" {
			wantAbsent(t, cl2, b.key)
		}
	}
	if err := cl2.Put(ctx, "after-garbage", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, cl, "after-garbage", []byte("ok"))
	if errs := c.ProtocolErrors(); len(errs) > 0 {
		t.Errorf("protocol errors: %v", errs)
	}
}

// Regression test. A client's update is answered by the tail, and a
// server can send to a client only over a connection that client opened.
// The client calls Transport.Connect(head and tail) when it adopts a
// configuration, but Connect only starts an asynchronous dial, so a fresh
// client's first update could reach the tail before the tail's transport
// had read the client's Hello. The tail's reply was then dropped (about
// one fresh client in ten on 2 cores), and the client learned the outcome
// only by retrying after AttemptTimeout; with a long attempt timeout, as
// here, the Put ended ErrAmbiguous although it was applied. Fixed by the
// transport holding replies for a client whose connection has not arrived
// yet (holdForClientLocked).
func TestUpdateAnsweredWithoutPriorQuery(t *testing.T) {
	c := testcluster.Start(t, 3)
	// Each fresh client's first update races its connection to the tail;
	// try many.
	for i := range 100 {
		// A dropped reply waits the minute-long attempt timeout; 10 s
		// tells it apart and leaves room for a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl, err := client.Dial(ctx, c.MasterAddr(), client.Options{AttemptTimeout: time.Minute})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		err = cl.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"))
		cl.Close()
		cancel()
		if err != nil {
			t.Fatalf("first Put of fresh client %d: %v", i, err)
		}
	}
}

// Regression test. An update that ended ErrAmbiguous used to stay in the
// client's unansweredUpdates forever, so every later request carried
// AckedBelow = that request number and the head's session window
// (OutcomesPerClientMax = 1024 request numbers, which queries consume
// too) stopped moving: about 1024 requests later the head answered every
// update ErrTooManyInFlight, and every update failed with ErrAmbiguous
// until the client was re-dialled. Fixed by the client forgetting an
// update it gives up on (gaveUp).
func TestAmbiguousUpdateDoesNotBlockLaterUpdates(t *testing.T) {
	c, cl := start(t)
	// A context already over sends nothing.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cl.Put(cancelled, "never", []byte("x")); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Put with a cancelled context: %v, want ErrUnavailable", err)
	}
	// An update sent to a head that just died, abandoned before the
	// master repairs the chain, ends ambiguous.
	c.Stop(0)
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := cl.Put(short, "abandoned", []byte("x"))
	cancelShort()
	if !errors.Is(err, client.ErrAmbiguous) {
		t.Fatalf("Put to a dead head: %v, want ErrAmbiguous", err)
	}
	ctx := testCtx(t)
	// Right after it, updates still work: the window is not used up yet.
	if err := cl.Put(ctx, "soon", []byte("y")); err != nil {
		t.Fatalf("Put right after an ambiguous one: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 140 {
				cl.Get(ctx, "k")
			}
		})
	}
	wg.Wait()
	putCtx, cancelPut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelPut()
	if err := cl.Put(putCtx, "later", []byte("y")); err != nil {
		t.Fatalf("Put 1120 requests after an ambiguous one: %v", err)
	}
}

// Reads from any chain member (CRAQ) stay linearizable while a writer
// keeps the key dirty: every read returns at least the last value
// acknowledged before it started, and a reader never goes back.
func TestReadFromAnyMember(t *testing.T) {
	c, writer := start(t)
	reader := c.Dial(t, client.Options{Consistency: client.AnyMember})
	ctx := testCtx(t)
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := writer.Increment(ctx, "craq", 1)
			if err != nil {
				t.Errorf("Increment: %v", err)
				return
			}
			acked.Store(n)
		}
	})
	last := int64(0)
	for range 300 {
		floor := acked.Load()
		v, found, err := reader.Get(ctx, "craq")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		n := int64(0)
		if found {
			if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				t.Fatalf("Get = %q: %v", v, err)
			}
		}
		if n < floor || n < last {
			t.Fatalf("read %d after the writer's %d was acknowledged and an earlier read of %d", n, floor, last)
		}
		last = n
	}
	close(stop)
	wg.Wait()
	if last == 0 {
		t.Fatal("the writer made no progress")
	}
}

// A write asking for more sites than replicate its keyspace (here any
// above 1: the cluster is one site) fails with ErrTooManySites, which
// names the keyspace's sites, and applies nothing; asking for 1 is the
// default.
func TestWriteForMoreSitesThanTheKeyspaceHasIsRefused(t *testing.T) {
	_, cl := start(t)
	ctx := testCtx(t)
	err := cl.Put(client.WithSites(ctx, 3), "k", []byte("v"))
	if !errors.Is(err, client.ErrTooManySites) || !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("put asking for 3 sites of 1: %v; want ErrTooManySites (and ErrInvalid)", err)
	}
	if want := `asked for 3 sites, but keyspace "default" is replicated by this site only`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	wantAbsent(t, cl, "k")
	if err := cl.Put(client.WithSites(ctx, 1), "k", []byte("v")); err != nil {
		t.Fatalf("put asking for 1 site: %v", err)
	}
}
