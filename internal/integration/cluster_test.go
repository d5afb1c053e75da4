// Package integration runs real catena processes on loopback: the binary
// is built once, then masters and servers are started, killed with
// SIGKILL and restarted while clients keep working, and the clients'
// history is checked for linearizability.
package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/testbin"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/wire"
)

func TestMain(m *testing.M) { testbin.Main(m, removePKI) }

// catenaBinary returns cmd/catena, built once per test process.
func catenaBinary(t *testing.T) string { return testbin.Catena(t) }

// freePort returns a loopback address nothing listens on, and never one
// it returned before in this test process: the kernel may hand a port
// just closed out again before the process it was meant for binds it,
// and two of a cluster's processes were once given the same one.
func freePort(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
	t.Fatal("no loopback port that was not handed out already")
	return ""
}

// handedOut holds the addresses freePort returned.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// process is one catena process the test can kill and restart.
type process struct {
	name string
	// bin, if set, is the binary it runs (else the cluster's).
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// cluster is a master and servers running as separate OS processes.
type cluster struct {
	t       *testing.T
	bin     string
	dir     string
	masters []*process
	servers []*process
	addrs   []string
	// mAddr is every master member's address, comma-separated: what
	// clients and servers are given.
	mAddr string
	// cutFile, for a site (sites_test.go), is its processes'
	// -wan-cut-file: the addresses they are cut off from; cut is what
	// setCuts last wrote there.
	cutFile string
	cut     string
}

// Timing for tests: fast failure detection, still valid for the master
// (failure timeout > lease·(1+ρ)/(1−ρ)).
var (
	masterTiming = []string{"-lease", "300ms", "-failure-timeout", "500ms", "-extension-timeout", "10s", "-election-timeout", "150ms", "-check-invariants"}
	// Every server asserts the protocol's invariants after each step
	// (a violation stops it, and the test).
	serverTiming = []string{"-heartbeat-interval", "50ms", "-check-invariants"}
	// serverLoops runs a one-site server's volumes on more event loops
	// than the machine may have cores (chain/loops.go), so every test of
	// such a server crosses loops.
	serverLoops = []string{"-loops", "3"}
)

func startCluster(t *testing.T, servers int) *cluster { return startClusterWithMasters(t, 1, servers) }

// startClusterWithMasters starts a single master (masters = 1) or a
// Raft-replicated one, and the servers. masterArgs are added to every
// master member's flags (after masterTiming).
func startClusterWithMasters(t *testing.T, masters, servers int, masterArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: catenaBinary(t), dir: t.TempDir()}
	var mAddrs []string
	for range masters {
		mAddrs = append(mAddrs, freePort(t))
	}
	c.mAddr = strings.Join(mAddrs, ",")
	for range servers {
		c.addrs = append(c.addrs, freePort(t))
	}
	for i, addr := range mAddrs {
		name := fmt.Sprintf("m%d", i+1)
		args := append([]string{"master", "-listen", addr, "-data", filepath.Join(c.dir, name), "-servers", strings.Join(c.addrs, ",")}, masterTiming...)
		args = append(args, masterArgs...)
		if masters > 1 {
			args = append(args, "-masters", c.mAddr)
		}
		p := &process{name: name, args: args}
		c.masters = append(c.masters, p)
		c.start(p)
	}
	for i, addr := range c.addrs {
		p := &process{name: fmt.Sprintf("s%d", i+1), args: append([]string{"server", "-listen", addr, "-master", c.mAddr, "-data", filepath.Join(c.dir, fmt.Sprintf("s%d", i+1))}, slices.Concat(serverTiming, serverLoops)...)}
		c.servers = append(c.servers, p)
		c.start(p)
	}
	t.Cleanup(c.stopAll)
	c.awaitStatus("the cluster to be ready", func(s *wire.StatusReply) bool {
		// Every member runs its volume's current epoch.
		epochs := map[wire.NodeID]map[wire.VolumeID]wire.Epoch{}
		for _, srv := range s.Servers {
			epochs[srv.ID] = map[wire.VolumeID]wire.Epoch{}
			for _, v := range srv.Volumes {
				epochs[srv.ID][v.Volume] = v.Epoch
			}
		}
		for _, cfg := range s.Configs {
			for _, id := range cfg.Chain {
				if epochs[id][cfg.Volume] != cfg.Epoch {
					return false
				}
			}
		}
		return len(s.Configs) > 0
	})
	return c
}

func (c *cluster) start(p *process) {
	c.t.Helper()
	p.log = filepath.Join(c.dir, p.name+".log")
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	bin := c.bin
	if p.bin != "" {
		bin = p.bin
	}
	p.cmd = exec.Command(bin, append(slices.Clone(p.args), tlsArgs(c.t, p.args)...)...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.done = make(chan struct{})
	cmd, done := p.cmd, p.done
	go func() { cmd.Wait(); close(done) }()
}

// kill sends SIGKILL and waits for the process to exit.
func (c *cluster) kill(p *process) {
	c.t.Helper()
	c.t.Logf("kill -9 %s (%s)", p.name, p.args[2])
	p.cmd.Process.Kill()
	<-p.done
}

func (c *cluster) stopAll() {
	all := append(slices.Clone(c.masters), c.servers...)
	for _, p := range all {
		if p.cmd != nil && p.cmd.Process != nil {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
		}
	}
	if c.t.Failed() {
		for _, p := range all {
			if data, err := os.ReadFile(p.log); err == nil {
				lines := strings.Split(strings.TrimSpace(string(data)), "\n")
				c.t.Logf("--- last lines of %s.log:\n%s", p.name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	}
}

func (c *cluster) server(addr string) *process {
	for _, p := range c.servers {
		if p.args[2] == addr {
			return p
		}
	}
	c.t.Fatalf("no server %s", addr)
	return nil
}

// status asks the master for the cluster's state.
func (c *cluster) status() (*wire.StatusReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, c.mAddr, client.Options{TLS: clientTLS(c.t)})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, err
	}
	return testcluster.WireStatus(st), nil
}

// chainRepairWait bounds how long a test waits for the master to repair a
// chain. It is a bound on liveness on a busy machine, not a measure of
// speed: with the test timings a loaded machine makes the master suspect
// live servers (a heartbeat late by failure-timeout, 500ms), and each
// suspicion is one more removal and extension, and an extension that
// does not finish costs the extension timeout (10s).
const chainRepairWait = 60 * time.Second

// awaitChain waits until the chain has n members, no extension is in
// progress, and every member runs the current epoch.
func (c *cluster) awaitChain(n int, cond ...func(wire.Config) bool) wire.Config {
	c.t.Helper()
	deadline := time.Now().Add(chainRepairWait)
	var last string
	for time.Now().Before(deadline) {
		s, err := c.status()
		if err == nil && len(s.Configs) == 1 {
			cfg := s.Configs[0]
			last = cfg.String()
			ok := len(cfg.Chain) == n && cfg.Joining == ""
			for _, f := range cond {
				ok = ok && f(cfg)
			}
			for _, srv := range s.Servers {
				if cfg.Index(srv.ID) >= 0 && (len(srv.Volumes) == 0 || srv.Volumes[0].Epoch != cfg.Epoch || !srv.Alive) {
					ok = false
				}
			}
			if ok {
				return cfg
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("chain not healthy with %d members within %s; last configuration %s", n, chainRepairWait, last)
	return wire.Config{}
}

// workload runs clients issuing random operations and records the history.
type workload struct {
	mu      sync.Mutex
	history []check.Operation
	keys    []string
	stop    chan struct{}
	wg      sync.WaitGroup
	start   time.Time
	acked   int
}

func startWorkload(t *testing.T, masterAddr string, clients int, keys []string) *workload {
	// Half the clients read from any chain member (CRAQ), half from the
	// tail: the history is checked for linearizability as a whole.
	return startWorkloadAt(t, []string{masterAddr}, clients, keys, client.Strong, client.AnyMember)
}

// startWorkloadAt starts clients that each run random operations on
// keys: client i dials masterAddrs[i mod len] (a site's masters) and
// reads with consistencies[i mod len].
func startWorkloadAt(t *testing.T, masterAddrs []string, clients int, keys []string, consistencies ...client.Consistency) *workload {
	w := &workload{keys: keys, stop: make(chan struct{}), start: time.Now()}
	for i := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl, err := client.Dial(ctx, masterAddrs[i%len(masterAddrs)], client.Options{Consistency: consistencies[i%len(consistencies)], TLS: clientTLS(t)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Go(func() {
			defer cl.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				w.one(cl, i, n, rng)
			}
		})
	}
	return w
}

func (w *workload) now() int64 { return int64(time.Since(w.start)) }

// one runs one random operation and records it.
func (w *workload) one(cl *client.Client, id, n int, rng *rand.Rand) {
	key := w.keys[rng.IntN(len(w.keys))]
	value := []byte(fmt.Sprintf("c%d-%d", id, n))
	var op wire.Op
	switch p := rng.IntN(100); {
	case p < 40:
		op = wire.Op{Kind: wire.OpGet, Key: key}
	case p < 80:
		op = wire.Op{Kind: wire.OpPut, Key: key, Value: value}
	case p < 90:
		op = wire.Op{Kind: wire.OpAppend, Key: key, Value: []byte("+")}
	default:
		op = wire.Op{Kind: wire.OpDelete, Key: key}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := check.Operation{Client: id, Op: op, Call: w.now()}
	var err error
	switch op.Kind {
	case wire.OpGet:
		rec.Result.Value, rec.Result.Found, err = cl.Get(ctx, key)
	case wire.OpPut:
		err = cl.Put(ctx, key, op.Value)
		rec.Result.Found = true
	case wire.OpAppend:
		rec.Result.Value, err = cl.Append(ctx, key, op.Value)
		rec.Result.Found = true
	case wire.OpDelete:
		rec.Result.Found, err = cl.Delete(ctx, key)
	}
	rec.Return = w.now()
	switch {
	case err == nil:
		if !op.Kind.IsQuery() {
			w.mu.Lock()
			w.acked++
			w.mu.Unlock()
		}
	case errors.Is(err, client.ErrAmbiguous):
		rec.Unknown = true
	case op.Kind.IsQuery() && errors.Is(err, client.ErrUnavailable):
		return // a read that never happened
	default:
		rec.Unknown = true // no outcome known
	}
	w.mu.Lock()
	w.history = append(w.history, rec)
	w.mu.Unlock()
}

func (w *workload) finish() { close(w.stop); w.wg.Wait() }

// awaitAcked waits until n more updates have been acknowledged: the load
// ran between two faults however slowly the processes run (go test
// -race on a busy machine).
func (w *workload) awaitAcked(t *testing.T, n int) {
	t.Helper()
	awaitGrowth(t, "updates acknowledged", n, func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.acked
	})
}

// awaitGrowth waits up to chainRepairWait until count has grown by n
// from what it returned at the call; what names the count in the
// failure.
func awaitGrowth(t *testing.T, what string, n int, count func() int) {
	t.Helper()
	target := count() + n
	deadline := time.Now().Add(chainRepairWait)
	for got := count(); got < target; got = count() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d %s within %s", got, target, what, chainRepairWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finalReads reads every key once the cluster is healthy; the reads join
// the history, so a lost acknowledged write makes it non-linearizable.
func (w *workload) finalReads(t *testing.T, masterAddr string) {
	cl, ctx := dial(t, masterAddr)
	for _, key := range w.keys {
		rec := check.Operation{Client: 99, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: w.now()}
		var err error
		rec.Result.Value, rec.Result.Found, err = cl.Get(ctx, key)
		if err != nil {
			t.Fatalf("final read of %s: %v", key, err)
		}
		rec.Return = w.now()
		w.history = append(w.history, rec)
	}
}

func (w *workload) checkLinearizable(t *testing.T) {
	t.Helper()
	unknown := 0
	for _, op := range w.history {
		if op.Unknown {
			unknown++
		}
	}
	t.Logf("history: %d operations, %d acknowledged updates, %d with unknown outcome", len(w.history), w.acked, unknown)
	if w.acked < 50 {
		t.Fatalf("only %d updates acknowledged: the workload did not run", w.acked)
	}
	result, info := check.Linearizable(w.history, time.Minute)
	if result != porcupine.Ok {
		path := filepath.Join(os.TempDir(), t.Name()+"-history.html")
		porcupine.VisualizePath(check.Model, info, path)
		t.Fatalf("history is %s; visualisation in %s", result, path)
	}
}

func keys(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("key-%d", i))
	}
	return out
}

// Kill -9 the head, then a middle server, then the tail, each while
// clients keep writing; restart each and wait until it has rejoined
// (a removed server re-enters a chain only by extension at the tail). The
// history stays linearizable and no acknowledged write is lost.
//
// The test does not require the victim to be the tail afterwards: on a
// busy machine the master may suspect a live server (its heartbeats late
// by the failure timeout), remove it and re-add it at the tail after the
// victim, which is the protocol working. The test used to require the
// tail and failed that way on 2 cores with busy loops beside it: the
// chain healthy with three members, the victim in the middle.
func TestKillHeadMiddleTailUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := startCluster(t, 3)
	w := startWorkload(t, c.mAddr, 4, keys(8))
	for _, role := range []string{"head", "middle", "tail"} {
		w.awaitAcked(t, 10)
		cfg := c.awaitChain(3)
		victim := map[string]wire.NodeID{"head": cfg.Head(), "middle": cfg.Chain[1], "tail": cfg.Tail()}[role]
		p := c.server(string(victim))
		c.kill(p)
		c.awaitChain(2, func(cfg wire.Config) bool { return cfg.Index(victim) < 0 })
		w.awaitAcked(t, 10) // writes continue on the short chain
		c.start(p)
		cfg = c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(victim) >= 0 })
		t.Logf("%s %s rejoined: %v", role, victim, cfg)
	}
	w.awaitAcked(t, 10)
	w.finish()
	w.finalReads(t, c.mAddr)
	w.checkLinearizable(t)
}

// A server whose data directory is wiped (a replaced disk) and that
// comes back at the same address rejoins its chain at the tail, under
// load, and nothing acknowledged is lost. Before its new directory's
// incarnation counted from the wall clock, it counted from 1 again, below
// what the master knew, and the master ignored it for good.
func TestServerWithWipedDataDirRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := startCluster(t, 3)
	w := startWorkload(t, c.mAddr, 4, keys(8))
	w.awaitAcked(t, 25)
	cfg := c.awaitChain(3)
	victim := cfg.Chain[1]
	p := c.server(string(victim))
	c.kill(p)
	dataDir := p.args[slices.Index(p.args, "-data")+1]
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("wiped %s", dataDir)
	c.start(p)
	cfg = c.awaitChain(3, func(cfg wire.Config) bool { return cfg.Index(victim) >= 0 && cfg.Joining == "" })
	t.Logf("%s rejoined with an empty directory: %v", victim, cfg)
	w.awaitAcked(t, 25)
	w.finish()
	w.finalReads(t, c.mAddr)
	w.checkLinearizable(t)
}

// Kill -9 every server at once and restart them all: every acknowledged
// write is still there (each was on every server's disk before it was
// acknowledged).
func TestKillAllServersAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := startCluster(t, 3)
	w := startWorkload(t, c.mAddr, 4, keys(8))
	w.awaitAcked(t, 50)
	for _, p := range c.servers {
		p.cmd.Process.Kill()
	}
	for _, p := range c.servers {
		<-p.done
	}
	t.Log("killed every server")
	w.finish()
	for _, p := range c.servers {
		c.start(p)
	}
	cfg := c.awaitChain(3)
	t.Logf("recovered: %v", cfg)
	w.finalReads(t, c.mAddr)
	w.checkLinearizable(t)
	if !slices.ContainsFunc(w.history, func(op check.Operation) bool { return !op.Unknown && !op.Op.Kind.IsQuery() }) {
		t.Fatal("no acknowledged update before the crash")
	}
}
