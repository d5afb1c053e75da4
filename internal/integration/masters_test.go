package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// leader returns the master member process that leads.
func (c *cluster) leader() *process {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := c.status(); err == nil && s.Leader != "" {
			for _, p := range c.masters {
				if p.args[2] == string(s.Leader) {
					return p
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no master leader within 10s")
	return nil
}

// With 3 master members: kill -9 the master leader while a chain
// reconfiguration is in progress, and SIGSTOP the chain's tail for longer
// than its lease while clients keep reading and writing, then SIGCONT it.
// The history is linearizable: no stale read was served.
func TestReplicatedMasterLeaderKillAndPausedTail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := startClusterWithMasters(t, 3, 3)
	w := startWorkload(t, c.mAddr, 4, keys(8))
	w.awaitAcked(t, 25)

	// A reconfiguration in progress: a middle server fails and comes back,
	// so the master removes it and extends the chain with it again; the
	// master leader dies in the middle of that.
	cfg := c.awaitChain(3)
	victim := cfg.Chain[1]
	c.kill(c.server(string(victim)))
	c.awaitChain(2, func(cfg wire.Config) bool { return cfg.Index(victim) < 0 })
	leader := c.leader()
	c.start(c.server(string(victim)))
	time.Sleep(100 * time.Millisecond)
	c.kill(leader)
	// A member again: it rejoined at the tail (another server suspected
	// on a busy machine may have rejoined after it).
	cfg = c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(victim) >= 0 })
	t.Logf("the new master leader finished the extension: %v", cfg)
	c.start(leader)

	// The tail pauses for three leases; clients keep going. A new tail
	// takes over only after the paused one's lease has expired, and the
	// paused one serves nothing when it wakes up.
	tail := c.server(string(cfg.Tail()))
	t.Logf("SIGSTOP %s (tail)", tail.args[2])
	tail.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(time.Second)
	tail.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("SIGCONT %s", tail.args[2])
	cfg = c.awaitChain(3)
	t.Logf("recovered: %v", cfg)
	w.awaitAcked(t, 25)

	w.finish()
	w.finalReads(t, c.mAddr)
	w.checkLinearizable(t)
}

// A lease outlives the master leader's death: its holder renews it
// through a kill -9 of the leader (a lease is a record of the chains, its
// deadline the head's, so the masters take no part in a renewal), its
// key stays readable for three TTLs after the kill, and it goes once the
// renewals stop.
func TestLeaseSurvivesMasterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := startClusterWithMasters(t, 3, 3)
	c.awaitChain(3)
	cl, _ := dial(t, c.mAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	id, _, err := cl.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "svc/a", []byte("up"), client.WithLease(id)); err != nil {
		t.Fatal(err)
	}
	renewing, stopRenewing := context.WithCancel(ctx)
	renewed := make(chan error, 1)
	go func() { renewed <- cl.KeepAliveLoop(renewing, id) }()

	leader := c.leader()
	c.kill(leader)
	killed := time.Now()
	for until := killed.Add(3 * ttl); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		_, found, err := cl.Get(ctx, "svc/a")
		switch {
		case err != nil:
			t.Logf("read of svc/a: %v", err) // a chain may reconfigure meanwhile
		case !found:
			t.Fatalf("svc/a gone %v after the master leader was killed, its lease renewed", time.Since(killed))
		}
	}
	stopRenewing()
	if err := <-renewed; err != nil {
		t.Fatalf("KeepAliveLoop: %v", err)
	}
	// The last renewal's deadline is at most a TTL away, the drift
	// bound and a busy machine's slack after it.
	for gone := time.Now().Add(ttl + 5*time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, found, err := cl.Get(ctx, "svc/a")
		if err == nil && !found {
			break
		}
		if time.Now().After(gone) {
			t.Fatalf("svc/a outlived its lease's last renewal: found %v, %v", found, err)
		}
	}
	if _, err := cl.KeepAlive(ctx, id); err == nil {
		t.Error("the lease renewed after it expired")
	}
}
