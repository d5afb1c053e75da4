package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/causalwork"
	"github.com/catena-kv/catena/internal/wire"
)

// Real-process kill tests on a causal+ keyspace (ChainReaction,
// docs/adr/0010-causal-mode.md): sessions write unique values and read
// under load while the head, a middle member and the tail of the
// keyspace's first chain are killed with SIGKILL one after the other and
// restarted. The history must be causal+ (check.CausalConvergence), the
// chains must converge, and no acknowledged write may be lost.

// causalCase sizes one kill test.
type causalCase struct {
	masters, servers int
	// k and volumes are the causal keyspace's (its chains have t=3).
	k, volumes int
	// sessions run at once, each sequential; keys are the keys they use.
	sessions, keys int
}

// The first session is impatient: it gives up on an operation after
// impatientTimeout, so that writes stalled by a repair become
// maybe-applied (their outcome unknown) and its history goes on in a new
// segment. The others wait causalOpTimeout. Correctness does not depend
// on either: they only change how many outcomes are unknown.
const impatientTimeout = time.Second

// k=2 of t=3: an answered write is on the head and the middle member, so
// any one failure keeps it; a Raft-replicated master, two chains.
func TestCausalKillHeadMiddleTailUnderLoad(t *testing.T) {
	runCausalKills(t, causalCase{masters: 3, servers: 4, k: 2, volumes: 2, sessions: 4, keys: 8})
}

// k=3 of t=3: writes are answered by the tail, and a chain shortened by a
// failure accepts none until the master has extended it again (they
// stall, and may time out: maybe-applied). Reads still go to any member.
func TestCausalKillHeadMiddleTailK3(t *testing.T) {
	runCausalKills(t, causalCase{masters: 1, servers: 4, k: 3, volumes: 1, sessions: 3, keys: 6})
}

// causalPrefix is the causal keyspace's prefix; the default keyspace
// (strong, t=3) holds every other key.
const causalPrefix = "c/"

// causalOpTimeout bounds one client operation: generous, so that only a
// write stalled by a repair on a very busy machine becomes maybe-applied.
const causalOpTimeout = 10 * time.Second

func runCausalKills(t *testing.T, cc causalCase) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	c := startClusterWithMasters(t, cc.masters, cc.servers, "-replicas", "3")
	ks := c.createCausalKeyspace(cc)
	t.Logf("keyspace %q (prefix %q): causal k=%d, t=%d, volumes %d..%d", ks.Name, ks.Prefix, ks.K, ks.ReplicationFactor,
		ks.FirstVolume, int(ks.FirstVolume)+ks.Volumes-1)
	c.awaitHealthy("every chain healthy with 3 members", nil)

	var keys []string
	for i := range cc.keys {
		keys = append(keys, fmt.Sprintf("%skey-%d", causalPrefix, i))
	}
	w := startCausalWorkload(t, []string{c.mAddr}, cc.sessions, keys)
	defer w.stopSessions()
	w.awaitAcked(t, 20)
	for _, role := range []string{"head", "middle", "tail"} {
		cfg := configOf(c.awaitHealthy("every chain healthy before killing the "+role, nil), ks.FirstVolume)
		victim := map[string]wire.NodeID{"head": cfg.Head(), "middle": cfg.Chain[1], "tail": cfg.Tail()}[role]
		p := c.server(string(victim))
		c.kill(p)
		c.awaitStatusWithin(string(victim)+" removed from volume "+fmt.Sprint(ks.FirstVolume), chainRepairWait,
			func(s *wire.StatusReply) bool { return configOf(s, ks.FirstVolume).Index(victim) < 0 })
		time.Sleep(300 * time.Millisecond) // the sessions go on with the shorter chain
		c.start(p)
		s := c.awaitHealthy(fmt.Sprintf("every chain healthy with %s (the %s) restarted", victim, role), []wire.NodeID{victim})
		t.Logf("%s %s killed and restarted; chain now %v; %d writes acknowledged so far", role, victim, configOf(s, ks.FirstVolume), w.Acked())
		// Load after the repair: writes are acknowledged again.
		w.awaitAcked(t, 10)
	}
	w.stopSessions()

	// Healed and quiet: every member of every causal chain has applied
	// and committed the same updates. Then every session reads every key.
	c.awaitHealthy("every causal chain quiet", nil, quiet(ks))
	w.finalReads(t, keys)
	w.check(t, keys)
	t.Logf("run time %s", time.Since(began).Round(100*time.Millisecond))
}

// createCausalKeyspace creates the causal keyspace of cc.
func (c *cluster) createCausalKeyspace(cc causalCase) wire.Keyspace {
	c.t.Helper()
	cl, ctx := dial(c.t, c.mAddr)
	_, err := cl.CreateKeyspace(ctx, client.Keyspace{Name: "causal", Prefix: causalPrefix, Mode: "causal", K: cc.k, Replicas: 3, Volumes: cc.volumes})
	if err != nil {
		c.t.Fatalf("create keyspace: %v", err)
	}
	s := c.awaitStatus("the master to list the keyspace", func(s *wire.StatusReply) bool { return len(s.Keyspaces) == 2 })
	return s.Keyspaces[1]
}

// awaitHealthy waits until every volume's chain has 3 members, none
// joining, all of them alive and running the current epoch, the servers
// named in alive are alive again, and every extra condition holds.
func (c *cluster) awaitHealthy(what string, alive []wire.NodeID, extra ...func(*wire.StatusReply) bool) *wire.StatusReply {
	c.t.Helper()
	return c.awaitStatusWithin(what, chainRepairWait, func(s *wire.StatusReply) bool {
		current := map[wire.NodeID]map[wire.VolumeID]wire.Epoch{}
		up := map[wire.NodeID]bool{}
		for _, srv := range s.Servers {
			up[srv.ID] = srv.Alive
			current[srv.ID] = map[wire.VolumeID]wire.Epoch{}
			for _, v := range srv.Volumes {
				current[srv.ID][v.Volume] = v.Epoch
			}
		}
		for _, cfg := range s.Configs {
			if len(cfg.Chain) != 3 || cfg.Joining != "" {
				return false
			}
			for _, id := range cfg.Chain {
				if !up[id] || current[id][cfg.Volume] != cfg.Epoch {
					return false
				}
			}
		}
		for _, id := range alive {
			if !up[id] {
				return false
			}
		}
		for _, f := range extra {
			if !f(s) {
				return false
			}
		}
		return len(s.Configs) > 0
	})
}

// quiet holds when every member of each of the keyspace's chains has
// applied and committed the same sequence number: no update in flight.
func quiet(ks wire.Keyspace) func(*wire.StatusReply) bool {
	return func(s *wire.StatusReply) bool {
		reported := map[wire.NodeID]map[wire.VolumeID]wire.VolumeStatus{}
		for _, srv := range s.Servers {
			reported[srv.ID] = map[wire.VolumeID]wire.VolumeStatus{}
			for _, v := range srv.Volumes {
				reported[srv.ID][v.Volume] = v
			}
		}
		for _, cfg := range s.Configs {
			if !ks.HasVolume(cfg.Volume) {
				continue
			}
			applied := reported[cfg.Head()][cfg.Volume].AppliedSN
			for _, id := range cfg.Chain {
				v := reported[id][cfg.Volume]
				if v.AppliedSN != applied || v.CommittedSN != applied {
					return false
				}
			}
		}
		return true
	}
}

// causalWorkload runs causalwork sessions flat out until stopped.
type causalWorkload struct {
	*causalwork.Workload
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// startCausalWorkload starts the sessions, session i a client of the
// cluster (site) masterAddrs[i mod len(masterAddrs)].
func startCausalWorkload(t *testing.T, masterAddrs []string, sessions int, keys []string) *causalWorkload {
	w := &causalWorkload{Workload: causalwork.New(time.Now()), stop: make(chan struct{})}
	for i := range sessions {
		cl, _ := dial(t, masterAddrs[i%len(masterAddrs)])
		timeout := causalOpTimeout
		if i == 0 {
			timeout = impatientTimeout
		}
		s := w.NewSession(cl, timeout)
		w.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(2) == 0 {
					w.Get(s, key, false, 0)
				} else {
					w.Put(s, key, fmt.Sprintf("s%d-%d", i, n))
				}
			}
		})
	}
	return w
}

// awaitAcked waits until n more writes have been acknowledged: the
// sessions make progress (a liveness bound for a busy machine).
func (w *causalWorkload) awaitAcked(t *testing.T, n int64) {
	t.Helper()
	awaitGrowth(t, "writes acknowledged", int(n), func() int { return int(w.Acked()) })
}

// stopSessions ends the sessions' loops (their clients stay open for the
// final reads); it may be called more than once.
func (w *causalWorkload) stopSessions() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// finalReads has every session read every key, once every chain is
// quiet, and closes the sessions' clients.
func (w *causalWorkload) finalReads(t *testing.T, keys []string) {
	t.Helper()
	peaks, err := w.FinalReads(keys, time.Now().Add(causalOpTimeout))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range w.Sessions() {
		s.Client().Close()
	}
	t.Logf("most keys with metadata held at once, per session: %v", peaks)
}

// check runs every check on the recorded history and fails the test with
// what they find.
func (w *causalWorkload) check(t *testing.T, keys []string) {
	t.Helper()
	r := w.Report(keys)
	t.Logf("history: %d operations in %d sessions (segments), %d acknowledged writes, %d with unknown outcome",
		len(r.History), w.Segments(), w.Acked(), r.Unknown())
	if w.Acked() < 50 {
		t.Errorf("only %d writes acknowledged: the workload did not run", w.Acked())
	}
	findings := r.Findings()
	for _, f := range findings {
		t.Error(f)
	}
	if len(findings) > 0 {
		path := filepath.Join(os.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+"-history.json")
		if data, err := json.Marshal(r.History); err == nil && os.WriteFile(path, data, 0o644) == nil {
			t.Logf("history written to %s", path)
		}
	}
}

// configOf returns the configuration of volume v in the status.
func configOf(s *wire.StatusReply, v wire.VolumeID) wire.Config {
	for _, cfg := range s.Configs {
		if cfg.Volume == v {
			return cfg
		}
	}
	return wire.Config{}
}
