package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// Splitting the default keyspace twice on real processes while writers
// put and increment (docs/adr/0031, issue 34): two servers join the
// running cluster first; right after each split request a member of a
// splitting volume's chain is killed with SIGKILL, and restarted later
// from its data directory. Every new volume starts; no acknowledged
// write is lost and none is applied twice (a put's key ends with the
// last acknowledged value or a later write whose outcome is unknown, an
// increment counter with its acknowledged increments plus at most the
// unknown ones, and each acknowledged increment's result says the
// same), every key, moved ones included, is readable, and the placement
// policy spreads the chains evenly over every server, the added ones
// included.
func TestSplitUnderLoadWithAMemberKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	at := func() time.Duration { return time.Since(began).Round(time.Millisecond) }
	c := startCluster(t, 3)
	// Two servers join the running cluster, as an operator adds servers
	// before splitting; with one volume they stay spares.
	for range 2 {
		c.addServer()
	}
	t.Logf("%s: 3 servers and 2 added ones running", at())
	// Keys written once, so that a split moves several pages of them
	// (chain.splitPage keys at a time).
	writeBulk(t, c.mAddr, splitBulkKeys)
	t.Logf("%s: %d keys written once", at(), splitBulkKeys)
	w := startSplitWriters(t, c.mAddr, 4, 16)
	w.awaitEveryKey(t)
	t.Logf("%s: every key written", at())

	admin, _ := dial(t, c.mAddr)
	// parentChains holds, for each new volume, its parent's chain when
	// the split was requested.
	parentChains := map[wire.VolumeID][]wire.NodeID{}
	for split := range 2 {
		before := c.awaitStatus("the cluster's status", func(*wire.StatusReply) bool { return true })
		ks := defaultKeyspace(t, before)
		parents := map[wire.VolumeID][]wire.NodeID{}
		for _, cfg := range before.Configs {
			if ks.HasVolume(uint32(cfg.Volume)) {
				parents[cfg.Volume] = slices.Clone(cfg.Chain)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
		after, err := admin.SplitKeyspace(ctx, wire.DefaultKeyspace, ks.Splits)
		cancel()
		if err != nil {
			t.Fatalf("split %d: %v", split+1, err)
		}
		if after.Volumes != 2*ks.Volumes || after.Splits != ks.Splits+1 {
			t.Fatalf("split %d: the keyspace has %d volumes after %d splits; want %d after %d", split+1, after.Volumes, after.Splits, 2*ks.Volumes, ks.Splits+1)
		}
		for j, v := range after.VolumeList()[ks.Volumes:] {
			parentChains[wire.VolumeID(v)] = parents[wire.VolumeID(ks.VolumeList()[j])]
		}
		// Mid-split: kill the tail of the first volume's chain (the first
		// split) or its head (the second) right after the request, as the
		// chain applies the split (the head sequences its marker at once,
		// so the tail may or may not have applied it).
		chain := parents[wire.VolumeID(ks.VolumeList()[0])]
		victim := c.server(string([]wire.NodeID{chain[len(chain)-1], chain[0]}[split]))
		c.kill(victim)
		t.Logf("%s: split %d: %d -> %d volumes %v; killed %s of %v right after", at(), split+1, ks.Volumes, after.Volumes, after.VolumeList(), victim.args[2], chain)

		// Restart it from its data directory once the master removed it
		// from every chain but one it is the last member of: the master
		// waits for that one's last member to return (on a busy machine it
		// may have removed the other members, suspecting them).
		c.awaitStatusWithin("the victim removed from its chains", chainRepairWait, func(s *wire.StatusReply) bool {
			for _, cfg := range s.Configs {
				if cfg.Index(wire.NodeID(victim.args[2])) >= 0 && len(cfg.Chain) > 1 {
					return false
				}
			}
			return true
		})
		c.start(victim)
		t.Logf("%s: restarted %s once removed", at(), victim.args[2])
		w.awaitAcked(t, 20)

		s := c.awaitStatusWithin(fmt.Sprintf("split %d: every new volume serving", split+1), chainRepairWait, func(s *wire.StatusReply) bool {
			st := clientStatus(s)
			k := defaultKeyspace(t, s)
			started, volumes := client.SplitDone(st, k)
			return k.Splits == split+1 && started == volumes
		})
		t.Logf("%s: split %d done:%s", at(), split+1, chainsOf(s, defaultKeyspace(t, s)))
		w.awaitAcked(t, 40)
	}

	// The placement policy spreads the new chains, which start on their
	// parent's servers, over every server: the keyspace's 4 chains of 3,
	// all descended from one chain of 3 servers, end up on all 5, evenly
	// (Rebalance stops once the most and least loaded live servers differ
	// by one chain at most), so both added servers hold some. (Whether a
	// new volume itself moves is up to the policy: Rebalance moves the
	// most loaded server's first chain by volume, a parent as often as
	// not, and runs were seen to end with every new volume on its
	// parent's servers of the split.)
	s := c.awaitStatusWithin("the chains spread evenly over every server", chainRepairWait, func(s *wire.StatusReply) bool {
		load := hosted(s)
		least, most := len(s.Configs), 0
		for _, srv := range s.Servers {
			if srv.Alive {
				least, most = min(least, load[srv.ID]), max(most, load[srv.ID])
			}
		}
		return least > 0 && most-least <= 1 && allVolumesHealthy(3)(s)
	})
	var moved []string
	for v, parent := range parentChains {
		if child := config(s, v); child != nil && slices.ContainsFunc(child.Chain, func(id wire.NodeID) bool { return !slices.Contains(parent, id) }) {
			moved = append(moved, fmt.Sprintf("v%d", v))
		}
	}
	slices.Sort(moved)
	t.Logf("%s: spread: %v;%s; new volumes on a server outside their parent's chain of the split: %v", at(), hosted(s), chainsOf(s, defaultKeyspace(t, s)), moved)
	w.awaitAcked(t, 40)
	w.finish()
	w.check(t, c.mAddr, defaultKeyspace(t, s))
	checkBulk(t, c.mAddr, splitBulkKeys)
	t.Logf("%s: checked", at())
}

// splitBulkKeys is how many keys writeBulk writes: more than one page
// of a split's move in each volume split.
const splitBulkKeys = 2500

// bulkKey is the i-th key writeBulk writes; its value is the key.
func bulkKey(i int) string { return fmt.Sprintf("split/bulk/%05d", i) }

// bulkBatch is how many of the bulk keys' calls run at once.
const bulkBatch = 100

// bulkCalls runs call(i) for keys 0..n-1, bulkBatch at a time (Start),
// and fails the test with the first outcome check rejects.
func bulkCalls(t *testing.T, cl *client.Client, n int, call func(i int) client.Call, check func(i int, r client.CallResult) error) {
	t.Helper()
	for from := 0; from < n; from += bulkBatch {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		var calls []client.Call
		for i := from; i < min(n, from+bulkBatch); i++ {
			c := call(i)
			c.Done = func(r client.CallResult) {
				defer wg.Done()
				if err := check(i, r); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
			calls = append(calls, c)
		}
		wg.Add(len(calls))
		ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
		cl.Start(ctx, calls)
		wg.Wait()
		cancel()
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
	}
}

// writeBulk puts n keys once.
func writeBulk(t *testing.T, masterAddr string, n int) {
	t.Helper()
	cl, _ := dial(t, masterAddr)
	bulkCalls(t, cl, n, func(i int) client.Call {
		return client.Call{Kind: client.CallPut, Key: bulkKey(i), Value: []byte(bulkKey(i))}
	}, func(i int, r client.CallResult) error {
		if r.Err != nil {
			return fmt.Errorf("put %s: %w", bulkKey(i), r.Err)
		}
		return nil
	})
}

// checkBulk reads the n keys writeBulk wrote.
func checkBulk(t *testing.T, masterAddr string, n int) {
	t.Helper()
	cl, _ := dial(t, masterAddr)
	bulkCalls(t, cl, n, func(i int) client.Call {
		return client.Call{Kind: client.CallGet, Key: bulkKey(i), Consistency: client.Strong}
	}, func(i int, r client.CallResult) error {
		switch {
		case r.Err != nil:
			return fmt.Errorf("final read of %s: %w", bulkKey(i), r.Err)
		case !r.Found || string(r.Value) != bulkKey(i):
			return fmt.Errorf("%s = %q (found %v), want %q", bulkKey(i), r.Value, r.Found, bulkKey(i))
		}
		return nil
	})
}

// addServer starts one more server, which joins the running cluster: the
// master learns of it by its first heartbeat.
func (c *cluster) addServer() *process {
	c.t.Helper()
	addr := freePort(c.t)
	name := fmt.Sprintf("s%d", len(c.servers)+1)
	p := &process{name: name, args: append([]string{"server", "-listen", addr, "-master", c.mAddr, "-data", filepath.Join(c.dir, name)}, slices.Concat(serverTiming, serverLoops)...)}
	c.servers = append(c.servers, p)
	c.addrs = append(c.addrs, addr)
	c.start(p)
	c.awaitStatus(name+" known to the master", func(s *wire.StatusReply) bool {
		return slices.ContainsFunc(s.Servers, func(srv wire.ServerStatus) bool { return srv.ID == wire.NodeID(addr) && srv.Alive })
	})
	return p
}

// defaultKeyspace returns the default keyspace from a status.
func defaultKeyspace(t *testing.T, s *wire.StatusReply) client.Keyspace {
	t.Helper()
	for _, k := range clientStatus(s).Keyspaces {
		if k.Name == wire.DefaultKeyspace {
			return k
		}
	}
	t.Fatal("no default keyspace in the master's status")
	return client.Keyspace{}
}

// clientStatus is the part of a status SplitDone and defaultKeyspace
// read (volumes' chains and keyspaces) in the client's types.
func clientStatus(s *wire.StatusReply) *client.ClusterStatus {
	st := &client.ClusterStatus{}
	for _, cfg := range s.Configs {
		v := client.VolumeConfig{Volume: uint32(cfg.Volume), Epoch: uint64(cfg.Epoch), Joining: string(cfg.Joining)}
		for _, id := range cfg.Chain {
			v.Chain = append(v.Chain, string(id))
		}
		st.Volumes = append(st.Volumes, v)
	}
	for _, k := range s.Keyspaces {
		ck := client.Keyspace{Name: k.Name, Prefix: k.Prefix, Mode: k.Mode.String(), Volumes: k.Volumes, FirstVolume: uint32(k.FirstVolume), Splits: k.Splits}
		for _, v := range k.VolumeIDs {
			ck.VolumeIDs = append(ck.VolumeIDs, uint32(v))
		}
		st.Keyspaces = append(st.Keyspaces, ck)
	}
	return st
}

// config returns volume v's configuration in a status (nil if none).
func config(s *wire.StatusReply, v wire.VolumeID) *wire.Config {
	for i := range s.Configs {
		if s.Configs[i].Volume == v {
			return &s.Configs[i]
		}
	}
	return nil
}

// chainsOf describes the chains of keyspace k's volumes.
func chainsOf(s *wire.StatusReply, k client.Keyspace) string {
	out := ""
	for _, v := range k.VolumeList() {
		if cfg := config(s, wire.VolumeID(v)); cfg != nil {
			out += fmt.Sprintf(" v%d=%v", v, cfg.Chain)
		} else {
			out += fmt.Sprintf(" v%d=(none)", v)
		}
	}
	return out
}

// splitWriters run one client each, putting and incrementing keys only
// it writes, one operation at a time, and record every outcome.
type splitWriters struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// acked counts acknowledged updates of every writer.
	acked int
	// puts and incs, by key, are what each key's only writer did.
	puts map[string]*putRecord
	incs map[string]*incRecord
	// errs are outcomes that contradict exactly-once while the writers
	// ran (an acknowledged increment's result out of range).
	errs []string
}

// putRecord is the puts of one key: every value written in order, and
// for each whether it was acknowledged or its outcome unknown.
type putRecord struct {
	values  []string
	acked   []bool
	unknown []bool
}

// incRecord is the increments of one key, by 1 each.
type incRecord struct{ acked, unknown int64 }

// splitRequestTimeout bounds one writer's operation: long enough that
// the client's own retries ride out a failover and a split, so that few
// outcomes are unknown.
const splitRequestTimeout = 10 * time.Second

// startSplitWriters starts writers clients, each with keysEach keys to
// put and keysEach counters to increment.
func startSplitWriters(t *testing.T, masterAddr string, writers, keysEach int) *splitWriters {
	t.Helper()
	w := &splitWriters{stop: make(chan struct{}), puts: map[string]*putRecord{}, incs: map[string]*incRecord{}}
	puts, incs := make([][]string, writers), make([][]string, writers)
	for i := range writers {
		for j := range keysEach {
			puts[i] = append(puts[i], fmt.Sprintf("split/put/%d/%d", i, j))
			incs[i] = append(incs[i], fmt.Sprintf("split/inc/%d/%d", i, j))
			w.puts[puts[i][j]] = &putRecord{}
			w.incs[incs[i][j]] = &incRecord{}
		}
	}
	for i := range writers {
		cl, _ := dial(t, masterAddr)
		puts, incs := puts[i], incs[i]
		w.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				if n%2 == 0 {
					w.put(cl, puts[(n/2)%len(puts)], fmt.Sprintf("w%d-%d", i, n))
				} else {
					w.increment(cl, incs[(n/2)%len(incs)])
				}
			}
		})
	}
	return w
}

// put writes value to key and records the outcome.
func (w *splitWriters) put(cl *client.Client, key, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
	err := cl.Put(ctx, key, []byte(value))
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.puts[key]
	if err == nil || errors.Is(err, client.ErrAmbiguous) {
		r.values = append(r.values, value)
		r.acked = append(r.acked, err == nil)
		r.unknown = append(r.unknown, err != nil)
	}
	if err == nil {
		w.acked++
	} else if !errors.Is(err, client.ErrAmbiguous) && !errors.Is(err, client.ErrUnavailable) {
		w.errs = append(w.errs, fmt.Sprintf("put %s: %v", key, err))
	}
}

// increment adds 1 to key's counter and records the outcome; an
// acknowledged result must count every acknowledged increment so far
// and at most the unknown ones besides.
func (w *splitWriters) increment(cl *client.Client, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
	n, err := cl.Increment(ctx, key, 1)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.incs[key]
	switch {
	case err == nil:
		r.acked++
		w.acked++
		if n < r.acked || n > r.acked+r.unknown {
			w.errs = append(w.errs, fmt.Sprintf("increment %s answered %d after %d acknowledged and %d unknown increments", key, n, r.acked, r.unknown))
		}
	case errors.Is(err, client.ErrAmbiguous):
		r.unknown++
	case !errors.Is(err, client.ErrUnavailable):
		w.errs = append(w.errs, fmt.Sprintf("increment %s: %v", key, err))
	}
}

// awaitEveryKey waits until every key has an acknowledged update.
func (w *splitWriters) awaitEveryKey(t *testing.T) {
	t.Helper()
	written := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, r := range w.puts {
			if slices.Contains(r.acked, true) {
				n++
			}
		}
		for _, r := range w.incs {
			if r.acked > 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(chainRepairWait)
	for n := written(); n < len(w.puts)+len(w.incs); n = written() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d keys written within %s", n, len(w.puts)+len(w.incs), chainRepairWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitAcked waits until n more updates have been acknowledged.
func (w *splitWriters) awaitAcked(t *testing.T, n int) {
	t.Helper()
	awaitGrowth(t, "updates acknowledged", n, func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.acked
	})
}

func (w *splitWriters) finish() { close(w.stop); w.wg.Wait() }

// check reads every key once the writers stopped and compares it with
// what they were told; k is the keyspace as split, to count the keys
// that moved.
func (w *splitWriters) check(t *testing.T, masterAddr string, k client.Keyspace) {
	t.Helper()
	for _, e := range w.errs {
		t.Error(e)
	}
	cl, _ := dial(t, masterAddr)
	read := func(key string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), splitRequestTimeout)
		defer cancel()
		v, found, err := cl.Get(ctx, key)
		if err != nil {
			t.Fatalf("final read of %s: %v", key, err)
		}
		return string(v), found
	}
	// moved says whether key left the volume it was in before the
	// first split.
	moved := func(key string) bool {
		return wire.KeyHash(key)%uint32(k.Volumes) != wire.KeyHash(key)%uint32(k.Volumes>>k.Splits)
	}
	movedKeys, unknown := 0, 0
	for key, r := range w.puts {
		if moved(key) {
			movedKeys++
		}
		last := -1 // the last acknowledged put
		for i := range r.acked {
			if r.acked[i] {
				last = i
			}
			if r.unknown[i] {
				unknown++
			}
		}
		allowed := unknownAfter(r, last)
		if last >= 0 {
			allowed = append(allowed, r.values[last])
		}
		v, found := read(key)
		switch {
		case !found && last >= 0:
			t.Errorf("%s: not found; its last acknowledged put wrote %q", key, r.values[last])
		case found && !slices.Contains(allowed, v):
			t.Errorf("%s = %q; want the last acknowledged put's %q or a later one whose outcome is unknown %q", key, v, lastValue(r, last), unknownAfter(r, last))
		}
	}
	for key, r := range w.incs {
		if moved(key) {
			movedKeys++
		}
		unknown += int(r.unknown)
		v, found := read(key)
		n := int64(0)
		if found {
			var err error
			if n, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Errorf("%s = %q, not a counter", key, v)
				continue
			}
		}
		if n < r.acked || n > r.acked+r.unknown {
			t.Errorf("%s = %d after %d acknowledged and %d unknown increments", key, n, r.acked, r.unknown)
		}
	}
	t.Logf("%d keys (%d moved out of their first volume), %d updates acknowledged, %d with unknown outcome", len(w.puts)+len(w.incs), movedKeys, w.acked, unknown)
	if movedKeys == 0 {
		t.Errorf("no key moved to a new volume")
	}
}

// unknownAfter returns the values of r's puts after the i-th whose
// outcome is unknown.
func unknownAfter(r *putRecord, i int) []string {
	var out []string
	for j := i + 1; j < len(r.values); j++ {
		if r.unknown[j] {
			out = append(out, r.values[j])
		}
	}
	return out
}

// lastValue is the value of r's i-th put ("(none)" for i < 0).
func lastValue(r *putRecord, i int) string {
	if i < 0 {
		return "(none)"
	}
	return r.values[i]
}
