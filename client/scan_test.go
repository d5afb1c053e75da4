package client_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/catena-kv/catena/client"
)

// A scan lists every key of every keyspace and volume once, a page at a
// time, including across a server's crash and the chains' reconfiguration
// midway; a pattern narrows it; a causal keyspace's keys are listed too.
func TestScanListsEveryKeyOnce(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "logs", Prefix: "l/", Mode: "strong", Replicas: 3, Volumes: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "causal", K: 2, Replicas: 3, Volumes: 2}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 40 {
		for _, prefix := range []string{"l/", "f/", "d/"} {
			key := fmt.Sprintf("%s%02d", prefix, i)
			putUntil(t, cl, key, []byte("v"), waitFor)
			want = append(want, key)
		}
	}
	slices.Sort(want)

	var got []string
	pages := 0
	for cur := (client.Cursor{}); !cur.Done(); pages++ {
		if pages == 5 {
			c.Stop(1) // the chains drop a member; the scan goes on
		}
		keys, next, err := cl.Scan(ctx, cur, "", 7)
		if err != nil {
			// A page refused while the chain is reconfigured is asked
			// again from the same cursor.
			t.Logf("page %d: %v", pages, err)
			continue
		}
		got, cur = append(got, keys...), next
	}
	got = slices.DeleteFunc(got, func(k string) bool { return k == "testcluster/ready" }) // the harness's
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the scan listed %d keys %q; want the %d keys put, each once", len(got), got, len(want))
	}
	if pages < 120/7 {
		t.Errorf("%d pages of 7 for 120 keys", pages)
	}

	logs, err := cl.Keys(ctx, "l/1*", 0)
	slices.Sort(logs)
	if wantLogs := want[slices.Index(want, "l/10"):slices.Index(want, "l/20")]; err != nil || !slices.Equal(logs, wantLogs) {
		t.Fatalf("Keys(l/1*) = %q, %v; want %q", logs, err, wantLogs)
	}
	// A range from a key on, across the keyspaces' volumes, in key order.
	for _, tc := range []struct {
		from  string
		count int
		want  []string
	}{
		{"l/05", 5, []string{"l/05", "l/06", "l/07", "l/08", "l/09"}},
		{"d/38", 4, []string{"d/38", "d/39", "f/00", "f/01"}},
		{"l/39", 3, []string{"l/39", "testcluster/ready"}},
	} {
		if got, err := cl.KeysFrom(ctx, tc.from, tc.count); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("KeysFrom(%q, %d) = %q, %v; want %q", tc.from, tc.count, got, err, tc.want)
		}
	}
	if _, _, err := cl.Scan(ctx, client.Cursor{}, "", 10_001); err == nil {
		t.Fatal("a page of 10,001 keys was not refused")
	}
}
