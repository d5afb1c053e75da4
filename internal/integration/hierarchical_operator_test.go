package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// The operator's overrides of hierarchical keyspaces on real processes
// (issue 14; docs/operations.md, "Hierarchical keyspaces when sites
// fail"), three sites 20 ms apart:
//   - reassignment (relaxed mode): site 3 writes a key and dies whole at
//     once, still its primary; site 1 cannot write the key; the operator
//     reassigns site 3's keys at sites 1 and 2 (before the view even
//     leaves site 3 out), and site 1's write then succeeds; restarted,
//     site 3 rejoins and reads site 1's value;
//   - grace: the operator forces the durable keyspace's view at site 1
//     (`catena keyspace grace`; here every site is up, so the forced view
//     is the one the sites have, numbered anew): the sites adopt it, and
//     a write at site 2 under a new directory is read at the others.
func TestHierarchicalOperatorOverrides(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	sites := startSites(t, sitesCase{sites: 3, masters: 1, servers: 3, volumes: 1, k: 1, t: 3, rtt: 20 * time.Millisecond})
	durable := client.Keyspace{Name: "builds", Prefix: "b/", Mode: "hierarchical", Replicas: 3, Volumes: 1,
		Sites: []uint32{1, 2, 3}, PartitionDepth: 1}
	relaxed := durable
	relaxed.Name, relaxed.Prefix, relaxed.Relaxed = "scratch", "r/", true
	cls := dialSitesWithKeyspaces(t, sites, durable, relaxed)
	within := func(what string, d time.Duration, f func(ctx context.Context) error) {
		t.Helper()
		deadline := time.Now().Add(d)
		var err error
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = f(ctx)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not within %s: %v", what, d, err)
	}
	read := func(cl *client.Client, key, want string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			got, found, err := cl.Get(ctx, key)
			switch {
			case err != nil:
				return err
			case !found || string(got) != want:
				return errors.New("read " + string(got) + ", want " + want)
			}
			return nil
		}
	}

	// Reassignment. Site 3 writes under r/c3/ and dies at once, its
	// primary (the control is kept for the idle time, 1 s).
	key := "r/c3/a"
	within("site 3's relaxed write", 10*time.Second, func(ctx context.Context) error { return cls[2].Put(ctx, key, []byte("v3")) })
	lost := sites[2]
	for _, p := range append(slices.Clone(lost.masters), lost.servers...) {
		lost.kill(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := cls[0].Put(ctx, key, []byte("v1")); err == nil {
		t.Logf("site 1 wrote %s before the reassignment: site 3 had released it already", key)
	}
	cancel()
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ks, err := cls[i].Reassign(ctx, "scratch", []uint32{3})
		cancel()
		if err != nil {
			t.Fatalf("reassigning site 3's keys at site %d: %v", i+1, err)
		}
		if i := slices.IndexFunc(ks, func(k client.Keyspace) bool { return k.Name == "scratch" }); i < 0 || ks[i].ReassignGeneration != 1 {
			t.Fatalf("keyspaces after the reassignment: %+v", ks)
		}
	}
	within("site 1's write of the lost primary's key after the reassignment", 30*time.Second,
		func(ctx context.Context) error { return cls[0].Put(ctx, key, []byte("v1")) })
	within("site 2's read of it", 10*time.Second, read(cls[1], key, "v1"))
	t.Logf("site 3's keys taken over after %s", time.Since(began).Round(100*time.Millisecond))

	for _, p := range append(slices.Clone(lost.masters), lost.servers...) {
		lost.start(p)
	}
	lost.awaitHealthy("site 3 back", nil)
	cls[2], _ = dial(t, lost.mAddr)
	within("site 3's read of site 1's value after it rejoined", 60*time.Second, read(cls[2], key, "v1"))

	// Grace, at site 1.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	ks, err := cls[0].ForceView(ctx, "builds", []uint32{1, 2, 3})
	cancel()
	if err != nil {
		t.Fatalf("forcing the view of builds: %v", err)
	}
	if i := slices.IndexFunc(ks, func(k client.Keyspace) bool { return k.Name == "builds" }); i < 0 || ks[i].GraceGeneration != 1 {
		t.Fatalf("keyspaces after the grace: %+v", ks)
	}
	within("site 2's write under a new directory after the grace", 30*time.Second,
		func(ctx context.Context) error { return cls[1].Put(ctx, "b/after/x", []byte("g")) })
	for _, i := range []int{0, 2} {
		within(fmt.Sprintf("site %d's read of it", i+1), 10*time.Second, read(cls[i], "b/after/x", "g"))
	}
	checkProtocolLogs(t, sites)
	t.Logf("run time %s", time.Since(began).Round(100*time.Millisecond))
}
