package resp_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
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
	// A cursor is good for one page: handed back twice, it is refused.
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
