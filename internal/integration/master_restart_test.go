package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// A chain of t=3 loses a server, and the master (or all three Raft
// members) is killed while the chain is short and no spare is up. A spare
// starts, and the masters restart with only -listen, -data (and -masters)
// and timing flags: they resume with t=3 from their saved state and
// extend the chain back to 3 with the spare.
func TestMasterRestartedWithoutSettingsExtendsShortChain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	for _, masters := range []int{1, 3} {
		t.Run(fmt.Sprintf("masters=%d", masters), func(t *testing.T) {
			timing := masterTiming
			masterTiming = append(slices.Clone(timing), "-replicas", "3")
			c := startClusterWithMasters(t, masters, 3)
			masterTiming = timing

			put(t, c.mAddr, "greeting", "hello")
			victim := c.awaitChain(3).Chain[1]
			c.kill(c.server(string(victim)))
			c.awaitChain(2, func(cfg wire.Config) bool { return cfg.Index(victim) < 0 })
			for _, p := range c.masters {
				c.kill(p)
			}

			addr := freePort(t)
			spare := &process{name: "s4", args: append([]string{"server", "-listen", addr, "-master", c.mAddr, "-data", filepath.Join(c.dir, "s4")}, slices.Concat(serverTiming, serverLoops)...)}
			c.servers = append(c.servers, spare)
			c.start(spare)
			for i, p := range c.masters {
				p.args = append([]string{"master", "-listen", p.args[2], "-data", filepath.Join(c.dir, fmt.Sprintf("m%d", i+1))}, timing...)
				if masters > 1 {
					p.args = append(p.args, "-masters", c.mAddr)
				}
				c.start(p)
			}
			cfg := c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(wire.NodeID(addr)) >= 0 })
			t.Logf("restarted masters extended the chain with the spare: %v", cfg)
			if got := get(t, c.mAddr, "greeting"); got != "hello" {
				t.Fatalf("greeting = %q after recovery, want hello", got)
			}
		})
	}
}

// dial returns a client of the cluster and a 10 s context for its
// operations; both end with the test.
func dial(t *testing.T, masterAddr string) (*client.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	cl, err := client.Dial(ctx, masterAddr, client.Options{TLS: clientTLS(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, ctx
}

func put(t *testing.T, masterAddr, key, value string) {
	t.Helper()
	cl, ctx := dial(t, masterAddr)
	if err := cl.Put(ctx, key, []byte(value)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, masterAddr, key string) string {
	t.Helper()
	cl, ctx := dial(t, masterAddr)
	value, _, err := cl.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(value)
}
