package resp_test

import (
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/chain"
)

// A key set with a short PX is found by a read that returns before its
// deadline less the clock bound, and missing from one that starts after
// the deadline plus the bound, at every consistency (docs/adr/0028 rule
// 2). The deadline is the one the head assigned (PEXPIRETIME); the test
// runs on the servers' machine, so its clock is theirs. A read that
// returns late on a busy machine is not held to "found": only the
// reads the rule speaks of are checked.
func TestKeysExpireWithinTheClockBoundAtEveryConsistency(t *testing.T) {
	addr := startProxy(t)
	ctx := testCtx(t)
	rc := newRedis(t, addr, 3)
	bound := time.Duration(chain.DefaultClockOffsetMax)
	for _, consistency := range []string{"strong", "any-member"} {
		if err := rc.Do(ctx, "CLIENT", "CONSISTENCY", consistency).Err(); err != nil {
			t.Fatal(err)
		}
		key := "px:" + consistency
		if err := rc.Do(ctx, "SET", key, "v", "PX", "1500").Err(); err != nil {
			t.Fatal(err)
		}
		ms, err := rc.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.UnixMilli(ms)
		if d := time.Until(deadline); d > 1500*time.Millisecond || d < -bound {
			t.Fatalf("%s: the deadline is %v away, for PX 1500", consistency, d)
		}
		checked := 0
		for time.Now().Before(deadline.Add(-bound)) {
			v, err := rc.Get(ctx, key).Result()
			if time.Now().Before(deadline.Add(-bound)) {
				checked++
				if err != nil || v != "v" {
					t.Fatalf("%s: read before the deadline less the bound: %q, %v", consistency, v, err)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Until(deadline.Add(bound)))
		n, err := rc.Exists(ctx, key).Result()
		if err != nil || n != 0 {
			t.Fatalf("%s: read after the deadline plus the bound found the key: %d, %v", consistency, n, err)
		}
		if ttl, err := rc.Do(ctx, "PTTL", key).Int64(); err != nil || ttl != -2 {
			t.Fatalf("%s: PTTL after the deadline = %d, %v; want -2", consistency, ttl, err)
		}
		t.Logf("%s: %d reads before the deadline less the bound found the key", consistency, checked)
	}
}
