package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/check"
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
		t.Logf("%s %s killed and restarted; chain now %v; %d writes acknowledged so far", role, victim, configOf(s, ks.FirstVolume), w.acked.Load())
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

// causalSession is one client working sequentially. Its history is cut
// into segments, each a session of the checker: a write whose outcome is
// unknown may still be applied after the client's next operations, so
// it ends its segment (check.CausalConvergence takes it as the last
// operation of its session) and the client goes on in a new one.
type causalSession struct {
	cl      *client.Client
	timeout time.Duration
	segment int
}

// causalWorkload runs the sessions and records their history.
type causalWorkload struct {
	start    time.Time
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	sessions []*causalSession
	// acked counts acknowledged writes.
	acked    atomic.Int64
	segments atomic.Int64

	mu      sync.Mutex
	history []check.Operation
	// problems are answers that mean the cluster lost something
	// (a read refused because no member holds a version the client saw).
	problems []string
	final    map[string][]check.Operation
}

// startCausalWorkload starts the sessions, session i a client of the
// cluster (site) masterAddrs[i mod len(masterAddrs)].
func startCausalWorkload(t *testing.T, masterAddrs []string, sessions int, keys []string) *causalWorkload {
	w := &causalWorkload{start: time.Now(), stop: make(chan struct{}), final: map[string][]check.Operation{}}
	for i := range sessions {
		cl, _ := dial(t, masterAddrs[i%len(masterAddrs)])
		s := &causalSession{cl: cl, timeout: causalOpTimeout, segment: int(w.segments.Add(1))}
		if i == 0 {
			s.timeout = impatientTimeout
		}
		w.sessions = append(w.sessions, s)
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
					w.get(s, key, false)
				} else {
					w.put(s, key, fmt.Sprintf("s%d-%d", i, n))
				}
			}
		})
	}
	return w
}

func (w *causalWorkload) now() int64 { return int64(time.Since(w.start)) }

// put writes a unique value and records the write.
func (w *causalWorkload) put(s *causalSession, key, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rec := check.Operation{Client: s.segment, Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, Call: w.now()}
	err := s.cl.Put(ctx, key, rec.Op.Value)
	rec.Return = w.now()
	switch {
	case err == nil:
		rec.Result.Found = true
		w.acked.Add(1)
	case errors.Is(err, client.ErrUnavailable):
		return // never sent: not applied
	case errors.Is(err, client.ErrAmbiguous):
		rec.Unknown = true
	default:
		rec.Unknown = true
		w.problem("put %s=%s: %v", key, value, err)
	}
	w.record(rec)
	if rec.Unknown {
		s.segment = int(w.segments.Add(1))
	}
}

// get reads a key and records the read; final reads are also kept per
// key for the convergence check.
func (w *causalWorkload) get(s *causalSession, key string, final bool) error {
	timeout := s.timeout
	if final {
		timeout = causalOpTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec := check.Operation{Client: s.segment, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: w.now()}
	value, found, err := s.cl.Get(ctx, key)
	rec.Return = w.now()
	switch {
	case err == nil:
		rec.Result.Value, rec.Result.Found = value, found
	case errors.Is(err, client.ErrUnavailable):
		return err // no outcome: a read that never happened
	default:
		// ErrInvalid here is ErrUnknownVersion: no member holds a version
		// this client saw.
		w.problem("get %s in session %d: %v", key, s.segment, err)
		return err
	}
	w.record(rec)
	if final {
		w.mu.Lock()
		w.final[key] = append(w.final[key], rec)
		w.mu.Unlock()
	}
	return nil
}

func (w *causalWorkload) record(rec check.Operation) {
	w.mu.Lock()
	w.history = append(w.history, rec)
	w.mu.Unlock()
}

func (w *causalWorkload) problem(format string, args ...any) {
	w.mu.Lock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// awaitAcked waits until n more writes have been acknowledged: the
// sessions make progress (a liveness bound for a busy machine).
func (w *causalWorkload) awaitAcked(t *testing.T, n int64) {
	t.Helper()
	target := w.acked.Load() + n
	deadline := time.Now().Add(chainRepairWait)
	for w.acked.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes acknowledged within %s", w.acked.Load(), target, chainRepairWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopSessions ends the sessions' loops (their clients stay open for the
// final reads); it may be called more than once.
func (w *causalWorkload) stopSessions() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// finalReads has every session read every key, in its current segment.
// Every chain is quiet, so every answer is stable and the session's
// metadata must be empty afterwards (it holds only unstable versions).
func (w *causalWorkload) finalReads(t *testing.T, keys []string) {
	t.Helper()
	var peaks []int
	for _, s := range w.sessions {
		for _, key := range keys {
			if err := w.get(s, key, true); err != nil {
				t.Fatalf("final read of %s in session %d: %v", key, s.segment, err)
			}
		}
		m := s.cl.CausalMetadata()
		if m.Entries != 0 {
			w.problem("session %d holds metadata for %d keys after reading every key from quiet chains", s.segment, m.Entries)
		}
		peaks = append(peaks, m.Peak)
		s.cl.Close()
	}
	t.Logf("most keys with metadata held at once, per session: %v", peaks)
}

// check runs every check on the recorded history and fails the test with
// what they find.
func (w *causalWorkload) check(t *testing.T, keys []string) {
	t.Helper()
	unknown := 0
	for _, op := range w.history {
		if op.Unknown {
			unknown++
		}
	}
	t.Logf("history: %d operations in %d sessions (segments), %d acknowledged writes, %d with unknown outcome",
		len(w.history), w.segments.Load(), w.acked.Load(), unknown)
	if w.acked.Load() < 50 {
		t.Errorf("only %d writes acknowledged: the workload did not run", w.acked.Load())
	}
	findings := causalFindings(w.history, w.final, w.problems, keys)
	for _, f := range findings {
		t.Error(f)
	}
	if len(findings) > 0 {
		path := filepath.Join(os.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+"-history.json")
		if data, err := json.Marshal(w.history); err == nil && os.WriteFile(path, data, 0o644) == nil {
			t.Logf("history written to %s", path)
		}
	}
}

// causalFindings checks a history of causal sessions: the answers that
// meant something was lost (problems), causal+ (check.CausalConvergence),
// convergence (every final read of a key, made once every chain was
// quiet, returns the same), and no lost acknowledged write (lostWrites).
// It returns what is wrong, nil if nothing.
func causalFindings(history []check.Operation, final map[string][]check.Operation, problems, keys []string) []string {
	out := slices.Clone(problems)
	if v := check.CausalConvergence(history); v != nil {
		out = append(out, v.Error())
	}
	for _, key := range keys {
		reads := final[key]
		if len(reads) == 0 {
			out = append(out, fmt.Sprintf("no final read of %s", key))
			continue
		}
		for _, r := range reads[1:] {
			if r.Result.Found != reads[0].Result.Found || string(r.Result.Value) != string(reads[0].Result.Value) {
				out = append(out, fmt.Sprintf("no convergence on %s: session %d reads %s, session %d reads %s once every chain is quiet",
					key, reads[0].Client, describeRead(reads[0]), r.Client, describeRead(r)))
			}
		}
		out = append(out, lostWrites(history, key, reads[0])...)
	}
	return out
}

func describeRead(op check.Operation) string {
	if !op.Result.Found {
		return "⊥"
	}
	return fmt.Sprintf("%q", op.Result.Value)
}

// lostWrites checks the converged final value of key against every
// session's last acknowledged write to it: the final value must be that
// write or one its session made later, or another session's (a
// concurrent write may win). It returns a description of each
// acknowledged write the final value goes back on.
func lostWrites(history []check.Operation, key string, final check.Operation) []string {
	type write struct {
		session, pos int
		value        string
	}
	pos := map[int]int{} // per session, operations so far
	writer := map[string]write{}
	lastAcked := map[int]write{}
	for _, op := range history {
		pos[op.Client]++
		if op.Op.Kind != wire.OpPut || op.Op.Key != key {
			continue
		}
		wr := write{op.Client, pos[op.Client], string(op.Op.Value)}
		writer[wr.value] = wr
		if !op.Unknown {
			lastAcked[op.Client] = wr
		}
	}
	var out []string
	for _, s := range slices.Sorted(maps.Keys(lastAcked)) {
		a := lastAcked[s]
		if !final.Result.Found {
			out = append(out, fmt.Sprintf("lost write: %s=%q acknowledged in session %d, final value ⊥", key, a.value, s))
			continue
		}
		if w, ok := writer[string(final.Result.Value)]; ok && w.session == s && w.pos < a.pos {
			out = append(out, fmt.Sprintf("lost write: %s=%q acknowledged in session %d after its write of the final value %q",
				key, a.value, s, w.value))
		}
	}
	return out
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
