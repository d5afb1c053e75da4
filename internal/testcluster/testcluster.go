// Package testcluster runs a whole Catena cluster inside a test: one
// master and N servers, each with its own TCP transport on 127.0.0.1,
// built by the same code as `catena master` and `catena server`
// (internal/process): Pebble in a temporary directory, several event
// loops per server and the transport's loop router, but short timings so
// failures are detected and repaired within a fraction of a second.
//
//	c := testcluster.Start(t, 3)
//	cl := c.Dial(t)
//	cl.Put(ctx, "k", []byte("v"))
//	c.Stop(0) // crash the head
//
// Node ids are addresses, so ports are reserved (listen on port 0, read
// the port, close) before the master and servers, which need each other's
// ids, are built; should another process take a reserved port first,
// Start begins again with new ones.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Timings of a test cluster. The master requires FailureTimeout >
// Lease·(1+Drift)/(1−Drift) (here 300ms > 153ms).
const (
	Lease             = 150 * time.Millisecond
	FailureTimeout    = 300 * time.Millisecond
	Drift             = 0.01
	ExtensionTimeout  = 5 * time.Second
	HeartbeatInterval = 25 * time.Millisecond
	TickInterval      = 5 * time.Millisecond
	// StartTimeout bounds Start's wait for a cluster that accepts writes.
	StartTimeout = 10 * time.Second
)

// Loops is how many event loops each server runs: more than a small
// machine has cores, so every test crosses loops and the transport's
// loop router as a production server does.
const Loops = 3

// LoopSilenceMax is how long a test server's loop may do nothing before
// the server stops heartbeating (process.ServerConfig.LoopSilenceMax):
// far above a busy machine's batch, well below the test timeouts.
const LoopSilenceMax = 2 * time.Second

// A test server's storage: Pebble with small caches, without fsync
// (tests crash processes, not machines, and a process crash loses
// nothing Pebble acknowledged without it).
const (
	cacheBytes       = 8 << 20
	objectCacheBytes = 1 << 20
	memTableBytes    = 4 << 20
)

// ReadyKey is the key Start writes to check that the cluster accepts
// updates.
const ReadyKey = "testcluster/ready"

// portAttempts is how often Start begins again when a reserved port was
// taken before a process could listen on it.
const portAttempts = 5

// Option changes how Start builds the cluster.
type Option func(*options)

type options struct {
	spares      int
	logger      *slog.Logger
	serverDelay time.Duration
	tls         bool
	transport   []transport.Option
	redis       bool
	watchWindow int
}

// WithRedis gives every server its own Redis-protocol front end on a
// loopback port (process.ServerConfig.RedisListen; RedisAddrs).
func WithRedis() Option { return func(o *options) { o.redis = true } }

// WithWatchWindow keeps each volume's latest n updates to serve watches
// from (process.ServerConfig.WatchWindow) instead of the default.
func WithWatchWindow(n int) Option { return func(o *options) { o.watchWindow = n } }

// WithSpares adds n servers that are not in the initial chain; the master
// uses them to extend the chain back to its length after a failure. They
// follow the chain servers in ServerAddrs.
func WithSpares(n int) Option { return func(o *options) { o.spares = n } }

// WithLogger sends every node's transport and protocol diagnostics to l
// (default: discarded, or stderr with go test -v).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithServerDelay starts the servers' event loops d after the master's,
// as when servers are brought up after the master. (Their transports
// listen from the start.)
func WithServerDelay(d time.Duration) Option { return func(o *options) { o.serverDelay = d } }

// WithTLS runs every link over mutual TLS: the cluster gets its own CA
// (in a temporary directory) and a certificate per master and server;
// clients need one too (ClientTLS, DialAs). Start's own client is the
// client certificate named StartUser.
func WithTLS() Option { return func(o *options) { o.tls = true } }

// WithTransportOptions passes options to every node's transport (a
// client connection's in-flight limit, say).
func WithTransportOptions(opts ...transport.Option) Option {
	return func(o *options) { o.transport = append(o.transport, opts...) }
}

// StartUser names the client certificate Start writes with, in a
// cluster WithTLS: a cluster whose first user is another cannot be
// restarted by Start's check, but Start runs only once.
const StartUser = "testcluster"

// Cluster is a running test cluster.
type Cluster struct {
	tb  testing.TB
	log *slog.Logger
	// pki is the cluster's CA and certificate directory (WithTLS);
	// transportOpts are every node's more transport options.
	pki           *pki
	transportOpts []transport.Option
	// redis: the servers serve the Redis protocol (WithRedis).
	redis bool
	// watchWindow is the servers' WatchWindow (WithWatchWindow).
	watchWindow int
	masterID    wire.NodeID
	master      *process.Master
	// servers are indexed like ServerAddrs.
	servers []*server
	addrs   []string

	// mu guards servers' entries and closed. Event loops never take it:
	// Stop holds it while waiting for a server to close.
	mu     sync.Mutex
	closed bool

	errMu sync.Mutex
	// protocolErrors collects what servers reported as messages that
	// contradict the protocol.
	protocolErrors []string
}

// server is one process of a server.
type server struct {
	p       *process.Server
	stopped bool
}

// Start runs a master and servers (all in the initial chain, which the
// master keeps at that length) and returns once a client has written to
// the cluster, so the servers hold leases. Close is registered with
// tb.Cleanup.
func Start(tb testing.TB, servers int, opts ...Option) *Cluster {
	tb.Helper()
	if servers < 1 {
		tb.Fatalf("testcluster: %d servers; need at least 1", servers)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = defaultLogger()
	}
	c := &Cluster{tb: tb, log: o.logger, transportOpts: o.transport, redis: o.redis, watchWindow: o.watchWindow}
	if o.tls {
		c.pki = newPKI(tb)
	}
	for attempt := 1; ; attempt++ {
		err := c.build(servers, servers+o.spares)
		if err == nil {
			break
		}
		if attempt == portAttempts {
			tb.Fatalf("testcluster: %v", err)
		}
	}
	// Servers start first, unless delayed: their first heartbeats wait in
	// the master's inbox, so the master hears from every server before its
	// failure detector could suspect one.
	if o.serverDelay > 0 {
		c.master.Start()
		time.Sleep(o.serverDelay)
	}
	for _, s := range c.servers {
		s.p.Start()
	}
	if o.serverDelay == 0 {
		c.master.Start()
	}
	tb.Cleanup(c.Close)

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	var copts client.Options
	if c.pki != nil {
		copts.TLS = c.ClientTLS(tb, security.RoleClient, StartUser)
	}
	cl, err := client.Dial(ctx, c.MasterAddr(), copts)
	if err != nil {
		tb.Fatalf("testcluster: dial: %v", err)
	}
	defer cl.Close()
	if err := cl.Put(ctx, ReadyKey, []byte("1")); err != nil {
		tb.Fatalf("testcluster: the cluster did not accept a write within %v: %v", StartTimeout, err)
	}
	return c
}

// build reserves addresses for a master and total servers, the first
// chain of them in the initial chain, and builds their processes, which
// listen but do not run yet. On failure (a port taken in between) it
// closes what it built.
func (c *Cluster) build(chain, total int) (err error) {
	addrs, err := reservePorts(1 + total)
	if err != nil {
		return err
	}
	c.masterID, c.addrs, c.master, c.servers = wire.NodeID(addrs[0]), addrs[1:], nil, nil
	defer func() {
		if err != nil {
			c.closeAll()
		}
	}()
	var initial []wire.NodeID
	for _, a := range c.addrs[:chain] {
		initial = append(initial, wire.NodeID(a))
	}
	log := c.log.With("node", addrs[0])
	tlsm, err := c.material(security.RoleMaster, addrs[0], log)
	if err != nil {
		return err
	}
	c.master, err = process.NewMaster(process.MasterConfig{
		Listen: addrs[0], DataDir: c.tb.TempDir(),
		Cluster: process.ClusterSpec{Given: master.Settings{Servers: initial}, Volumes: 1, Replicas: chain, Placement: placement.Random},
		Lease:   Lease, FailureTimeout: FailureTimeout, ClockDriftMax: Drift, ExtensionTimeout: ExtensionTimeout, Tick: TickInterval,
		CheckInvariants: true,
		Links:           process.Links{TLS: tlsm, Limits: process.DefaultClientLimits, TransportOptions: c.transportOpts}, Log: log,
	})
	if err != nil {
		return err
	}
	for i := range c.addrs {
		s, err := c.newServer(i)
		if err != nil {
			return err
		}
		c.servers = append(c.servers, s)
	}
	return nil
}

// material returns the certificate of the node of role listening at
// addr (nil without TLS).
func (c *Cluster) material(role security.Role, addr string, log *slog.Logger) (*security.Material, error) {
	if c.pki == nil {
		return nil, nil
	}
	return c.pki.material(security.Identity{Role: role, Name: addr}, log)
}

// newServer builds a new process of server i, with empty storage, on a
// transport listening at its address.
func (c *Cluster) newServer(i int) (*server, error) {
	addr := c.addrs[i]
	log := c.log.With("node", addr)
	tlsm, err := c.material(security.RoleServer, addr, log)
	if err != nil {
		return nil, err
	}
	redis := ""
	if c.redis {
		redis = "127.0.0.1:0"
	}
	p, err := process.NewServer(process.ServerConfig{
		Listen: addr, Masters: []wire.NodeID{c.masterID}, DataDir: c.tb.TempDir(), NoSync: true, RedisListen: redis,
		HeartbeatInterval: HeartbeatInterval, Tick: TickInterval,
		CacheBytes: cacheBytes, ObjectCacheBytes: objectCacheBytes, MemTableBytes: memTableBytes, Loops: Loops,
		LoopSilenceMax: LoopSilenceMax, WatchWindow: c.watchWindow,
		Links: process.Links{TLS: tlsm, Limits: process.DefaultClientLimits, TransportOptions: c.transportOpts}, Log: log,
		OnProtocolErrors: c.addProtocolErrors, CheckInvariants: true,
	})
	if err != nil {
		return nil, err
	}
	return &server{p: p}, nil
}

// addProtocolErrors records what a server's loop reported.
func (c *Cluster) addProtocolErrors(errs []string) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	c.protocolErrors = append(c.protocolErrors, errs...)
}

func defaultLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// reservePorts returns n distinct free loopback addresses. The listeners
// are held until all are chosen, so the OS does not hand out one port
// twice.
func reservePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// closeWait bounds how long stop waits for a process to close.
const closeWait = 2 * time.Second

// stop closes the server: its loops end, then its transport closes, so
// to peers it looks like a crash (connections reset, nothing more
// answered). It returns the loops' error.
//
// Transport.Close once blocked until a peer disconnected when that
// peer's connection completed its handshake while Close ran (fixed; see
// TestCloseWhileHandshaking in internal/transport). stop still waits for
// it at most closeWait, so a regression shows as a warning in the log
// instead of a hung test: by then the loops have stopped and the
// listener is closed, so the server is as good as crashed.
func (s *server) stop(log *slog.Logger) error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	return closeWithin(s.p, log)
}

// closeWithin closes p, waiting at most closeWait (see server.stop).
func closeWithin(p process.Process, log *slog.Logger) error {
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		return err
	case <-time.After(closeWait):
		log.Warn("process did not close; going on (see TestCloseWhileHandshaking in internal/transport)", "wait", closeWait)
		return nil
	}
}

// MasterAddr returns the master's address (what client.Dial takes).
func (c *Cluster) MasterAddr() string { return string(c.masterID) }

// RedisAddrs returns the address of each server's Redis-protocol front
// end (WithRedis), indexed like ServerAddrs ("" for a server stopped).
func (c *Cluster) RedisAddrs() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		if s != nil && s.p != nil {
			out[i] = s.p.RedisAddr()
		}
	}
	return out
}

// LocalReads returns how many reads server i's Redis front end answered
// from its own replicas (WithRedis).
func (c *Cluster) LocalReads(i int) int64 { return c.servers[i].p.LocalReadsAnswered() }

// ServerAddrs returns the servers' addresses: the initial chain, head
// first, then any spares.
func (c *Cluster) ServerAddrs() []string { return append([]string(nil), c.addrs...) }

// Stop crashes server i: its event loops stop and its connections close.
// Stopping a stopped server does nothing.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.servers[i].stop(c.log); err != nil {
		c.tb.Errorf("testcluster: server %s: %v", c.addrs[i], err)
	}
}

// Isolate cuts server i off from the master and every other server, both
// ways, as a network partition would, until heal is called (once; the
// test's end calls it too). Clients still reach it.
func (c *Cluster) Isolate(i int) (heal func()) {
	c.tb.Helper()
	c.mu.Lock()
	p := c.servers[i].p
	c.mu.Unlock()
	p.Cut(func(wire.NodeID) bool { return true })
	var once sync.Once
	heal = func() { once.Do(func() { p.Cut(nil) }) }
	c.tb.Cleanup(heal)
	return heal
}

// Restart starts server i again after Stop, as a new process with empty
// storage at the same address; the master removes it from any chain it
// was still in and may add it back as a spare. Retries for a while if the
// address is not free yet.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	c.mu.Lock()
	stopped := c.servers[i].stopped
	c.mu.Unlock()
	if !stopped {
		c.tb.Fatalf("testcluster: Restart(%d): server %s is running", i, c.addrs[i])
	}
	var s *server
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if s, err = c.newServer(i); err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("testcluster: Restart(%d): %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		s.p.Close()
		return
	}
	s.p.Start()
	c.servers[i] = s
}

// ProtocolErrors returns the protocol errors servers reported so far:
// messages they dropped because they contradicted the protocol. A correct
// implementation reports none.
func (c *Cluster) ProtocolErrors() []string {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return append([]string(nil), c.protocolErrors...)
}

// Stall makes every event loop of server i wait until release is called
// (once; the test's end calls it too): what its transport reads
// meanwhile waits for the node, as behind a node too busy to keep up.
func (c *Cluster) Stall(i int) (release func()) {
	c.tb.Helper()
	c.mu.Lock()
	loops := make([]int, c.servers[i].p.Loops())
	c.mu.Unlock()
	for loop := range loops {
		loops[loop] = loop
	}
	return c.stall(i, loops...)
}

// StallLoop makes event loop loop of server i wait until release is
// called (once; the test's end calls it too), as a loop hung in a batch:
// the server's other loops go on.
func (c *Cluster) StallLoop(i, loop int) (release func()) {
	c.tb.Helper()
	return c.stall(i, loop)
}

// stall makes the event loops loops of server i wait until release.
func (c *Cluster) stall(i int, loops ...int) (release func()) {
	c.tb.Helper()
	c.mu.Lock()
	p := c.servers[i].p
	c.mu.Unlock()
	stalled, resume := make(chan struct{}, len(loops)), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(resume) }) }
	c.tb.Cleanup(release)
	for _, loop := range loops {
		go p.Inspect(context.Background(), loop, func(wire.Time) {
			stalled <- struct{}{}
			<-resume
		})
	}
	timeout := time.After(StartTimeout)
	for range loops {
		select {
		case <-stalled:
		case <-timeout:
			c.tb.Fatalf("testcluster: server %d: loops %v did not stop", i, loops)
		}
	}
	return release
}

// ClientTLS issues a certificate of role (client or proxy) named name
// from the cluster's CA and returns its files (WithTLS only).
func (c *Cluster) ClientTLS(tb testing.TB, role security.Role, name string) client.TLSFiles {
	tb.Helper()
	if c.pki == nil {
		tb.Fatalf("testcluster: ClientTLS needs a cluster started WithTLS")
	}
	files, err := c.pki.issue(security.Identity{Role: role, Name: name})
	if err != nil {
		tb.Fatalf("testcluster: %v", err)
	}
	return client.TLSFiles(files)
}

// DialAs returns a client whose certificate (role client) names user,
// closed when the test ends (WithTLS only).
func (c *Cluster) DialAs(tb testing.TB, user string, opts ...client.Options) *client.Client {
	tb.Helper()
	var o client.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.TLS = c.ClientTLS(tb, security.RoleClient, user)
	return c.Dial(tb, o)
}

// Dial returns a client of the cluster, closed when the test ends.
func (c *Cluster) Dial(tb testing.TB, opts ...client.Options) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, c.MasterAddr(), opts...)
	if err != nil {
		tb.Fatalf("testcluster: dial: %v", err)
	}
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Close stops every server and the master. It is registered with Cleanup
// by Start; calling it again does nothing.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if err := c.closeAll(); err != nil {
		c.tb.Errorf("testcluster: %v", err)
	}
}

// closeAll stops every server built and the master.
func (c *Cluster) closeAll() error {
	var errs []error
	for i, s := range c.servers {
		if err := s.stop(c.log); err != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", c.addrs[i], err))
		}
	}
	if c.master != nil {
		if err := closeWithin(c.master, c.log); err != nil {
			errs = append(errs, fmt.Errorf("master: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WireStatus returns a status in the protocol's types, for tests that
// check chains with their methods.
func WireStatus(st *client.ClusterStatus) *wire.StatusReply {
	r := &wire.StatusReply{Leader: wire.NodeID(st.Leader), Site: wire.SiteID(st.Site)}
	for _, m := range st.Masters {
		r.Masters = append(r.Masters, wire.NodeID(m))
	}
	for _, site := range st.Sites {
		ws := wire.Site{ID: wire.SiteID(site.ID), Name: site.Name}
		for _, m := range site.Masters {
			ws.Masters = append(ws.Masters, wire.NodeID(m))
		}
		r.Sites = append(r.Sites, ws)
	}
	siteIDs := func(ids []uint32) []wire.SiteID {
		var out []wire.SiteID
		for _, id := range ids {
			out = append(out, wire.SiteID(id))
		}
		return out
	}
	vector := func(counts []client.SiteCount) wire.Vector {
		var v wire.Vector
		for _, e := range counts {
			v = v.Set(wire.SiteID(e.Site), e.N)
		}
		return v
	}
	for _, v := range st.Volumes {
		c := wire.Config{Volume: wire.VolumeID(v.Volume), Epoch: wire.Epoch(v.Epoch), Joining: wire.NodeID(v.Joining), Sites: siteIDs(v.Sites)}
		for _, id := range v.Chain {
			c.Chain = append(c.Chain, wire.NodeID(id))
		}
		r.Configs = append(r.Configs, c)
	}
	for _, srv := range st.Servers {
		ss := wire.ServerStatus{ID: wire.NodeID(srv.Addr), Alive: srv.Alive, Incarnation: srv.Incarnation}
		for _, v := range srv.Volumes {
			ss.Volumes = append(ss.Volumes, wire.VolumeStatus{Volume: wire.VolumeID(v.Volume), Epoch: wire.Epoch(v.Epoch), AppliedSN: wire.SN(v.Applied), CommittedSN: wire.SN(v.Committed),
				Stable: vector(v.Stable), Shipped: vector(v.Shipped), Watches: v.Watches})
		}
		r.Servers = append(r.Servers, ss)
	}
	for _, k := range st.Keyspaces {
		mode, _ := wire.ParseMode(k.Mode) // the client rendered it from a wire.Mode
		r.Keyspaces = append(r.Keyspaces, wire.Keyspace{Name: k.Name, Prefix: k.Prefix, Mode: mode, K: k.K,
			ReplicationFactor: k.Replicas, FirstVolume: wire.VolumeID(k.FirstVolume), Volumes: k.Volumes, Sites: siteIDs(k.Sites), Splits: k.Splits})
		for _, v := range k.VolumeIDs {
			last := &r.Keyspaces[len(r.Keyspaces)-1]
			last.VolumeIDs = append(last.VolumeIDs, wire.VolumeID(v))
		}
	}
	return r
}

// pki is a test cluster's CA and the directory of the certificates it
// issued.
type pki struct {
	ca  *security.CA
	dir string
	mu  sync.Mutex
}

func newPKI(tb testing.TB) *pki {
	tb.Helper()
	ca, err := security.NewCA("testcluster CA", time.Hour)
	if err != nil {
		tb.Fatalf("testcluster: %v", err)
	}
	dir := tb.TempDir()
	if err := ca.Save(dir); err != nil {
		tb.Fatalf("testcluster: %v", err)
	}
	return &pki{ca: ca, dir: dir}
}

// issue writes a certificate for id (once) and returns its files.
func (p *pki) issue(id security.Identity) (security.Files, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	files := security.DirFiles(p.dir, id)
	if _, err := os.Stat(files.Cert); err == nil {
		return files, nil
	}
	is, err := p.ca.Issue(id, security.IssueOptions{})
	if err != nil {
		return security.Files{}, err
	}
	return is.Save(p.dir, id)
}

// material issues id's certificate and loads it.
func (p *pki) material(id security.Identity, log *slog.Logger) (*security.Material, error) {
	files, err := p.issue(id)
	if err != nil {
		return nil, err
	}
	return security.Load(files, log)
}
