package resp_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/testcluster"
)

// SCAN, KEYS, DBSIZE and RANDOMKEY through a Redis client: go-redis's
// iterator walks a scan over a pool of connections (each page may go on
// another), MATCH and COUNT narrow and size the pages, TYPE string lists
// every key and any other type none, and a cursor the proxy did not hand
// out is refused.
func TestScanCommands(t *testing.T) {
	addr := startProxy(t)
	ctx := testCtx(t)
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, MaxRetries: -1, ReadTimeout: testTimeout, WriteTimeout: testTimeout})
	t.Cleanup(func() { rc.Close() })
	var want []string
	for i := range 30 {
		key := fmt.Sprintf("scan:%02d", i)
		if err := rc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	scanned := func(match, typ string, count int64) []string {
		t.Helper()
		var keys []string
		it := rc.ScanType(ctx, 0, match, count, typ).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			t.Fatalf("SCAN MATCH %q TYPE %q COUNT %d: %v", match, typ, count, err)
		}
		slices.Sort(keys)
		return keys
	}
	if got := scanned("scan:*", "", 4); !slices.Equal(got, want) {
		t.Fatalf("SCAN MATCH scan:* COUNT 4 listed %q; want %q", got, want)
	}
	if got := scanned("scan:1?", "string", 0); !slices.Equal(got, want[10:20]) {
		t.Fatalf("SCAN MATCH scan:1? TYPE string listed %q; want %q", got, want[10:20])
	}
	if got := scanned("scan:*", "hash", 100); len(got) != 0 {
		t.Fatalf("SCAN TYPE hash listed %q; want nothing", got)
	}
	keys, err := rc.Keys(ctx, "scan:2*").Result()
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, want[20:30]) {
		t.Fatalf("KEYS scan:2* = %q, %v; want %q", keys, err, want[20:30])
	}
	all, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != int64(len(all)) || n < 30 {
		t.Fatalf("DBSIZE = %d, %v; KEYS * lists %d", n, err, len(all))
	}
	if k, err := rc.RandomKey(ctx).Result(); err != nil || !slices.Contains(all, k) {
		t.Fatalf("RANDOMKEY = %q, %v; want one of KEYS *", k, err)
	}

	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"SCAN", "12345"}, "ERR invalid cursor"},
		{[]any{"SCAN", "x"}, "ERR invalid cursor"},
		{[]any{"SCAN", "0", "COUNT", "0"}, "ERR syntax error"},
		{[]any{"SCAN", "0", "COUNT", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"SCAN", "0", "MATCH"}, "ERR syntax error"},
		{[]any{"SCAN", "0", "BOGUS", "1"}, "ERR syntax error"},
		{[]any{"SCAN", "0", "MATCH", strings.Repeat("*", 5000)}, "ERR pattern too long"},
		{[]any{"KEYS"}, "ERR wrong number of arguments for 'keys' command"},
		{[]any{"DBSIZE", "x"}, "ERR wrong number of arguments for 'dbsize' command"},
	} {
		if err := rc.Do(ctx, bad.args...).Err(); err == nil || !strings.HasPrefix(err.Error(), bad.want) {
			t.Errorf("%v: %v; want %q", bad.args, err, bad.want)
		}
	}
	// A cursor is good until its page is answered: handed back again, it
	// is refused.
	_, next, err := rc.Scan(ctx, 0, "scan:*", 2).Result()
	if err != nil || next == 0 {
		t.Fatalf("SCAN 0 COUNT 2: cursor %d, %v", next, err)
	}
	if err := rc.Scan(ctx, next, "", 2).Err(); err != nil {
		t.Fatalf("SCAN %d: %v", next, err)
	}
	if err := rc.Scan(ctx, next, "", 2).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR invalid cursor") {
		t.Fatalf("SCAN %d again: %v; want ERR invalid cursor", next, err)
	}
}

// SCAN through go-redis lists every key of several keyspaces' volumes,
// each once, while a server is stopped midway and the chains are
// reconfigured: a page refused meanwhile is asked again with the same
// cursor.
func TestScanAcrossAReconfiguration(t *testing.T) {
	c := testcluster.Start(t, 3)
	cl := c.Dial(t)
	ctx := testCtx(t)
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "logs", Prefix: "l/", Mode: "strong", Replicas: 3, Volumes: 4}); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, resp.Options{Store: c.Dial(t)})
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, MaxRetries: -1, ReadTimeout: testTimeout, WriteTimeout: testTimeout})
	t.Cleanup(func() { rc.Close() })
	var want []string
	for i := range 60 {
		key := fmt.Sprintf("l/%02d", i)
		if i%3 == 0 {
			key = fmt.Sprintf("d/%02d", i)
		}
		if err := rc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	slices.Sort(want)
	var got []string
	cursor, failed := uint64(0), 0
	for page := 0; ; page++ {
		if page == 4 {
			c.Stop(2)
		}
		keys, next, err := rc.Scan(ctx, cursor, "[dl]/*", 5).Result()
		if err != nil {
			// Refused while the chain is reconfigured: the cursor stays
			// good, and the page is asked for again.
			if failed++; failed > 20 {
				t.Fatalf("page %d: %v (and %d failures before)", page, err, failed-1)
			}
			t.Logf("page %d: %v", page, err)
			continue
		}
		got = append(got, keys...)
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("SCAN listed %d keys %q; want the %d keys set, each once", len(got), got, len(want))
	}
}
