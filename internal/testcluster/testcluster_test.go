package testcluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/wire"
)

// waitChain polls the master's status until the volume's configuration
// satisfies ok, and returns it.
func waitChain(t *testing.T, cl *client.Client, what string, ok func(wire.Config) bool) wire.Config {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last wire.Config
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cl.Status(ctx)
		cancel()
		if err == nil && len(st.Volumes) == 1 {
			last = testcluster.WireStatus(st).Configs[0]
			if ok(last) {
				return last
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no configuration with %s; last %v", what, last)
	return last
}

func ids(addrs []string) []wire.NodeID {
	var out []wire.NodeID
	for _, a := range addrs {
		out = append(out, wire.NodeID(a))
	}
	return out
}

func TestStartFormsTheChain(t *testing.T) {
	c := testcluster.Start(t, 3)
	if len(c.ServerAddrs()) != 3 || c.MasterAddr() == "" {
		t.Fatalf("master %q, servers %v", c.MasterAddr(), c.ServerAddrs())
	}
	cl := c.Dial(t)
	// Under heavy load a stalled server may be suspected and the chain
	// repaired meanwhile: wait for a full chain.
	cfg := waitChain(t, cl, "three members", func(cfg wire.Config) bool {
		return len(cfg.Chain) == 3 && cfg.Joining == ""
	})
	want := ids(c.ServerAddrs())
	if cfg.Epoch == 1 && !slices.Equal(cfg.Chain, want) {
		t.Errorf("initial chain %v; want %v", cfg, want)
	}
	if !slices.Equal(slices.Sorted(slices.Values(cfg.Chain)), slices.Sorted(slices.Values(want))) {
		t.Errorf("chain %v; want the servers %v", cfg, want)
	}
	// Start wrote the ready key.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, found, err := cl.Get(ctx, testcluster.ReadyKey)
	if err != nil || !found || string(v) != "1" {
		t.Errorf("Get(ready) = %q, %v, %v", v, found, err)
	}
	if errs := c.ProtocolErrors(); len(errs) > 0 {
		t.Errorf("protocol errors: %v", errs)
	}
}

func TestClusterIsIsolated(t *testing.T) {
	// Two clusters at once share nothing (distinct ports, distinct data).
	a, b := testcluster.Start(t, 1), testcluster.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, cb := a.Dial(t), b.Dial(t)
	if err := ca.Put(ctx, "only-in-a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, found, err := cb.Get(ctx, "only-in-a"); err != nil || found {
		t.Fatalf("cluster b sees a's key: found=%v err=%v", found, err)
	}
}

// A crashed middle server is removed; with a spare the chain is brought
// back to three servers, and everything written before is kept.
func TestStopThenSpareJoins(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.WithSpares(1))
	addrs := c.ServerAddrs()
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		if err := cl.Put(ctx, fmt.Sprintf("k%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop(1)
	c.Stop(1) // idempotent
	waitChain(t, cl, "the spare as a member", func(cfg wire.Config) bool {
		return len(cfg.Chain) == 3 && cfg.Joining == "" && cfg.Index(wire.NodeID(addrs[1])) < 0 &&
			cfg.Index(wire.NodeID(addrs[3])) >= 0
	})
	for i := range 20 {
		v, found, err := cl.Get(ctx, fmt.Sprintf("k%d", i))
		if err != nil || !found || !slices.Equal(v, []byte{byte(i)}) {
			t.Fatalf("Get(k%d) = %v, %v, %v", i, v, found, err)
		}
	}
	if errs := c.ProtocolErrors(); len(errs) > 0 {
		t.Errorf("protocol errors: %v", errs)
	}
}

// A restarted server (empty storage, new incarnation, same address) is
// added back to the chain and receives the data by state transfer.
func TestRestartRejoins(t *testing.T) {
	c := testcluster.Start(t, 3)
	addrs := c.ServerAddrs()
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.Put(ctx, "before", []byte("crash")); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	waitChain(t, cl, "the head removed", func(cfg wire.Config) bool {
		return cfg.Index(wire.NodeID(addrs[0])) < 0
	})
	c.Restart(0)
	waitChain(t, cl, "the restarted server as a member", func(cfg wire.Config) bool {
		return len(cfg.Chain) == 3 && cfg.Index(wire.NodeID(addrs[0])) >= 0 && cfg.Joining == ""
	})
	if err := cl.Put(ctx, "after", []byte("rejoin")); err != nil {
		t.Fatal(err)
	}
	// Leave the restarted server alone in the chain: it must have
	// everything, from the state transfer and the updates after it.
	c.Stop(1)
	c.Stop(2)
	waitChain(t, cl, "the restarted server alone", func(cfg wire.Config) bool {
		return slices.Equal(cfg.Chain, []wire.NodeID{wire.NodeID(addrs[0])})
	})
	for k, want := range map[string]string{"before": "crash", "after": "rejoin", testcluster.ReadyKey: "1"} {
		v, found, err := cl.Get(ctx, k)
		if err != nil || !found || string(v) != want {
			t.Fatalf("Get(%s) from the restarted server = %q, %v, %v; want %q", k, v, found, err, want)
		}
	}
	if errs := c.ProtocolErrors(); len(errs) > 0 {
		t.Errorf("protocol errors: %v", errs)
	}
}

func TestCloseTwice(t *testing.T) {
	c := testcluster.Start(t, 2)
	c.Stop(0)
	c.Close()
	c.Close()
}

// Regression test. Servers whose event loops started more than
// FailureTimeout after the master's never served. The master starts
// watching the initial chain's members at its first tick, so members not
// heard from within FailureTimeout are removed, every one but a chain's
// last. That last member had never adopted a configuration, and
// Replica.Adopt refused a replica without state membership of any chain
// but the epoch-1 one, so the master kept it as the only member, each
// extension was aborted after ExtensionTimeout, and the volume never
// became available. The same happened when the whole process stalled for
// longer than FailureTimeout just after the master started (seen under
// load with the test timings). Yet a server in its first process that
// never adopted a configuration and has been a member since epoch 1
// cannot have missed a committed update: every update committed in those
// epochs passed through it. Fixed by Replica.Adopt letting an empty
// replica take any configuration naming it a member in the server's
// first process.
func TestServersStartingAfterMaster(t *testing.T) {
	c := testcluster.Start(t, 2, testcluster.WithServerDelay(2*testcluster.FailureTimeout))
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
