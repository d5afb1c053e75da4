package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// catenaBinary returns cmd/catena, built once per test process.
func catenaBinary(t *testing.T) string { return testbin.Catena(t) }

// generous bounds a test's wait on a working system; none of these tests
// measures time.
const generous = 2 * time.Minute

func startCatena(t *testing.T, replicas int) *System {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	sys, err := StartCatena(ctx, CatenaOptions{Binary: catenaBinary(t), Dir: t.TempDir(), Replicas: replicas, FieldCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sys.Stop)
	return sys
}

// checkCRUD checks how a binding maps YCSB's operations, on records of 2
// fields; partialUpdateMerges says whether it merges an update of some
// fields into the record, or must refuse it; scans whether it reads
// ranges (workload E) or refuses them.
func checkCRUD(t *testing.T, db ycsb.DB, partialUpdateMerges, scans bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	ctx = db.InitThread(ctx, 0, 1)
	defer db.CleanupThread(ctx)
	read := func(key string, fields []string) map[string][]byte {
		t.Helper()
		got, err := db.Read(ctx, "usertable", key, fields)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		return got
	}
	want := func(got, want map[string][]byte) {
		t.Helper()
		if !maps.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("read %q, want %q", got, want)
		}
	}
	buf := []byte("a")
	if err := db.Insert(ctx, "usertable", "user1", map[string][]byte{"field0": buf, "field1": []byte("b")}); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X' // go-ycsb reuses its buffers once Insert returns
	want(read("user1", nil), map[string][]byte{"field0": []byte("a"), "field1": []byte("b")})
	want(read("user1", []string{"field1"}), map[string][]byte{"field1": []byte("b")})

	if err := db.Update(ctx, "usertable", "user1", map[string][]byte{"field0": []byte("c"), "field1": []byte("d")}); err != nil {
		t.Fatal(err)
	}
	want(read("user1", nil), map[string][]byte{"field0": []byte("c"), "field1": []byte("d")})
	err := db.Update(ctx, "usertable", "user1", map[string][]byte{"field1": []byte("e")})
	if partialUpdateMerges {
		if err != nil {
			t.Fatal(err)
		}
		want(read("user1", nil), map[string][]byte{"field0": []byte("c"), "field1": []byte("e")})
	} else {
		// Refused, and the record unchanged.
		if err == nil {
			t.Fatal("a partial update was accepted by a binding that cannot merge")
		}
		want(read("user1", nil), map[string][]byte{"field0": []byte("c"), "field1": []byte("d")})
	}

	if err := db.Delete(ctx, "usertable", "user1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, "usertable", "user1", nil); !errors.Is(err, errNotFound) {
		t.Fatalf("read of a deleted record: %v, want errNotFound", err)
	}
	if _, err := db.Read(ctx, "usertable", "nosuch", []string{"field0"}); !errors.Is(err, errNotFound) {
		t.Fatalf("read of a missing record: %v, want errNotFound", err)
	}
	if !scans {
		if _, err := db.Scan(ctx, "usertable", "user1", 10, nil); !errors.Is(err, errScan) {
			t.Fatalf("scan: %v, want errScan", err)
		}
		return
	}
	for _, k := range []string{"user2", "user3", "user4"} {
		if err := db.Insert(ctx, "usertable", k, map[string][]byte{"field0": []byte(k), "field1": []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		start string
		count int
		want  []string
	}{{"user1", 2, []string{"user2", "user3"}}, {"user3", 10, []string{"user3", "user4"}}, {"user5", 3, nil}} {
		// A causal keyspace's scan lists what is stable at the tail: a
		// write just answered by the first k members shows a moment
		// later (docs/adr/0027), so the check allows a few seconds.
		var got []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			records, err := db.Scan(ctx, "usertable", tc.start, tc.count, []string{"field0"})
			if err != nil {
				t.Fatalf("scan from %s: %v", tc.start, err)
			}
			got = got[:0]
			for _, r := range records {
				got = append(got, string(r["field0"]))
			}
			if slices.Equal(got, tc.want) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("scan from %s of %d: %q, want %q", tc.start, tc.count, got, tc.want)
		}
	}
}

func TestCatenaBinding(t *testing.T) {
	sys := startCatena(t, 3)
	for _, perThread := range []bool{false, true} {
		t.Run(fmt.Sprintf("perThread=%v", perThread), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			db, err := NewCatenaDB(ctx, sys.masterAddr, 2, perThread, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkCRUD(t, db, true, true)
		})
	}
}

// catena-causal: the records are in a causal keyspace with k=2, and the
// binding reports its client's metadata (a write answered by the second
// of three replicas is not yet stable, so the client held at least one
// entry); the strong cluster's client holds none.
func TestCatenaCausalBinding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	sys, err := StartCatena(ctx, CatenaOptions{Binary: catenaBinary(t), Dir: t.TempDir(), Replicas: 3, FieldCount: 2,
		CausalK: causalK, Name: SystemCatenaCausal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sys.Stop)
	if !sys.causal {
		t.Fatal("system not marked causal")
	}
	db, err := sys.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cdb := db.(*CatenaDB)
	cdb.ResetCausalMetadataPeaks()
	checkCRUD(t, db, true, true)
	if m := cdb.CausalMetadata(); len(m) != 1 || m[0].Peak < 1 {
		t.Fatalf("causal metadata %+v; want one client that held an entry", m)
	}
	c := cdb.shared
	var found bool
	for _, k := range c.Keyspaces() {
		if k.Prefix == "usertable/" {
			found = k.Mode == "causal" && k.K == causalK && k.Replicas == 3
		}
	}
	if !found {
		t.Fatalf("no causal keyspace for the records: %+v", c.Keyspaces())
	}

	strong := startCatena(t, 3)
	sdb, err := strong.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	checkCRUD(t, sdb, true, true)
	if m := sdb.(*CatenaDB).CausalMetadata(); len(m) != 1 || m[0].Peak != 0 {
		t.Fatalf("strong cluster: causal metadata %+v; want none", m)
	}
}

// Catena through its Redis-protocol proxy, with go-redis and the binding
// the redis row runs: a record is a hash, and a partial update an HSET of
// its fields, merged atomically at the chain's head.
func TestCatenaRESPBinding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	sys, err := StartCatena(ctx, CatenaOptions{Binary: catenaBinary(t), Dir: t.TempDir(), Replicas: 3, FieldCount: 2,
		Proxy: true, Threads: 2, Name: SystemCatenaRESP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sys.Stop)
	db, err := sys.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, ok := db.(*RedisDB); !ok {
		t.Fatalf("catena-resp opened a %T, want the go-redis binding", db)
	}
	checkCRUD(t, db, true, false) // (a record is a hash: HSET merges a partial update)
}

// A client that only writes gets its replies from the tail, over a
// connection it must have opened itself. Before the client connected to
// the tail up front, every such update waited for an attempt timeout and
// was answered by the head from its exactly-once record on the retry;
// with an attempt timeout beyond the context's deadline it never
// completed.
func TestCatenaWriteOnlyClient(t *testing.T) {
	sys := startCatena(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	c, err := client.Dial(ctx, sys.masterAddr, client.Options{AttemptTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		if err := c.Put(ctx, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
}

func TestEtcdBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed (apt-get install etcd-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	sys, err := StartEtcd(ctx, EtcdOptions{Dir: t.TempDir(), Members: 1, FieldCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop()
	db, err := sys.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkCRUD(t, db, true, true)
}

func TestRedisBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	sys, err := StartRedis(ctx, RedisOptions{Dir: t.TempDir(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop()
	db, err := sys.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkCRUD(t, db, true, false)
}

// TestCompare runs a tiny comparison end to end on Catena (1 and 3
// replicas, through the Redis protocol, and causal): it loads, runs every
// workload, reports, and stops every process it started.
func TestCompare(t *testing.T) {
	bin := catenaBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*generous)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Compare(ctx, CompareOptions{
		Sizing:       Sizing{Records: 200, Operations: 200, Threads: 4, FieldCount: 10, FieldLength: 100},
		Systems:      []string{SystemCatena, SystemCatenaT1, SystemCatenaRESP, SystemCatenaCausal},
		CatenaBinary: bin, Dir: t.TempDir(), PhaseTimeout: 5 * generous,
		Command: "test", Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	for _, s := range []string{SystemCatena, SystemCatenaT1, SystemCatenaRESP, SystemCatenaCausal} {
		for _, w := range []string{"load", "A", "B", "C", "D", "F"} {
			run, ok := rep.Find(s, w)
			if !ok || !run.Complete || run.Operations != 200 {
				t.Errorf("%s %s: %+v", s, w, run)
			}
			// Only the causal system reports its clients' metadata.
			if causal := s == SystemCatenaCausal; (run.Metadata != nil) != causal || causal && run.Metadata.Clients != 1 {
				t.Errorf("%s %s: metadata %+v", s, w, run.Metadata)
			}
		}
	}
	if len(rep.Systems) != 4 {
		t.Fatalf("systems %+v", rep.Systems)
	}
	for _, s := range rep.Systems {
		for _, pid := range s.Pids {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("%s: pid %d still running after Compare", s.Name, pid)
			}
		}
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	_, tax, _ := bytes.Cut(md.Bytes(), []byte("### Replication tax"))
	if !bytes.Contains(tax, []byte("\n| A | ")) {
		t.Errorf("markdown lacks the replication tax of A:\n%s", md.String())
	}
	_, protocol, _ := bytes.Cut(md.Bytes(), []byte("### Through the Redis protocol"))
	if !bytes.Contains(protocol, []byte("\n| A | ")) {
		t.Errorf("markdown lacks catena-resp's row of A:\n%s", md.String())
	}
	_, causal, _ := bytes.Cut(md.Bytes(), []byte("### Causal+ against strong"))
	if !bytes.Contains(causal, []byte("\n| A | ")) {
		t.Errorf("markdown lacks catena-causal's row of A:\n%s", md.String())
	}
}
