package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/testbin"
	"github.com/catena-kv/catena/internal/wire"
)

// restartWith stops p (SIGTERM, as an operator's upgrade does) and
// starts it again from bin, with the same flags and data directory.
func (c *cluster) restartWith(p *process, bin string) {
	c.t.Helper()
	c.t.Logf("restart %s with %s", p.name, bin)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.bin = bin
	c.start(p)
}

// A rolling upgrade on real processes to a build that speaks one more
// protocol version (-tags catena_next_protocol): servers one at a time,
// one taken back to the old build and up again before the finalize (a
// downgrade works until then), the master, then the finalize raises the
// cluster version; every write acknowledged along the way reads back, and
// afterwards a server started from the old build stops, saying why,
// rather than join (docs/upgrades.md).
func TestUpgradeFinalizeAndNoWayBack(t *testing.T) {
	next := testbin.CatenaTagged(t, "catena_next_protocol")
	c := startCluster(t, 3)
	old := c.bin
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.mAddr, client.Options{TLS: clientTLS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	written := map[string]string{}
	put := func(step string) {
		t.Helper()
		k, v := fmt.Sprintf("k%d", len(written)), step
		if err := cl.Put(ctx, k, []byte(v)); err != nil {
			t.Fatalf("put after %s: %v", step, err)
		}
		written[k] = v
	}
	alive := make([]wire.NodeID, len(c.addrs))
	for i, a := range c.addrs {
		alive[i] = wire.NodeID(a)
	}
	healthy := func(step string) {
		t.Helper()
		c.awaitHealthy(step, alive)
		put(step)
	}
	put("start")
	for _, s := range c.servers {
		c.restartWith(s, next)
		healthy("upgrading " + s.name)
	}
	c.restartWith(c.servers[0], old)
	healthy("taking s1 back to the old build")
	c.restartWith(c.servers[0], next)
	healthy("upgrading s1 again")
	v, err := cl.Versions(ctx)
	// (A new cluster runs at its release's newest version; the next
	// build speaks one more.)
	cur, next1 := release.ProtocolMax, release.ProtocolMax+1
	if err != nil || v.ClusterVersion != cur || len(v.Masters) != 1 || v.Masters[0].MaxProtocol != cur {
		t.Fatalf("before the master's upgrade: %+v, %v", v, err)
	}
	if _, err := cl.FinalizeUpgrade(ctx, next1); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("speaks protocol %d to %d, not %d", release.ProtocolMin, cur, next1)) {
		t.Fatalf("finalize before the master's upgrade: %v", err)
	}
	c.restartWith(c.masters[0], next)
	healthy("upgrading the master")
	if got, err := cl.FinalizeUpgrade(ctx, 0); err != nil || got != next1 {
		t.Fatalf("finalize: %d, %v", got, err)
	}
	put("finalizing")
	for k, want := range written {
		if got, found, err := cl.Get(ctx, k); err != nil || !found || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", k, got, err, want)
		}
	}

	s3 := c.servers[2]
	c.restartWith(s3, old)
	select {
	case <-s3.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a server of the old build still runs in a cluster finalized at protocol %d", next1)
	}
	log, _ := os.ReadFile(s3.log)
	if !strings.Contains(string(log), fmt.Sprintf("the cluster runs at protocol version %d (finalized), and this server (release %s) speaks at most", next1, release.Version)) {
		t.Errorf("the old server's log does not say why it stopped:\n%s", log)
	}
	put("the old server stopped") // the chain goes on without it
}
