// Package testcluster runs a whole Catena cluster inside a test: one
// master and N servers, each with its own TCP transport on 127.0.0.1 and
// its own event loop (node.Loop), wired the way `catena master` and
// `catena server` wire them, but with in-memory storage and short timings
// so failures are detected and repaired within a fraction of a second.
//
//	c := testcluster.Start(t, 3)
//	cl := c.Dial(t)
//	cl.Put(ctx, "k", []byte("v"))
//	c.Stop(0) // crash the head
//
// Node ids are addresses, so ports are reserved (listen on port 0, read
// the port, close) before the master and servers, which need each other's
// ids, are constructed.
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
	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/storage"
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

// ReadyKey is the key Start writes to check that the cluster accepts
// updates.
const ReadyKey = "testcluster/ready"

// portAttempts is how often Start retries when a reserved port was taken
// before the transport could listen on it.
const portAttempts = 5

// Option changes how Start builds the cluster.
type Option func(*options)

type options struct {
	spares      int
	logger      *slog.Logger
	serverDelay time.Duration
	tls         bool
	transport   []transport.Option
}

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
	// transportOpts are every node's transport options but WithTLS.
	pki           *pki
	transportOpts []transport.Option
	masterID      wire.NodeID
	master        *process
	// servers are indexed like ServerAddrs.
	servers []*process
	addrs   []string
	// incarnations counts each server's processes: 1 for the first, as
	// `catena server` numbers them (the first process of a server is the
	// only one that may join the bootstrap chain empty).
	incarnations []uint64

	// mu guards servers' entries, incarnations and closed. Event loops
	// never take it: Stop holds it while waiting for a loop to end.
	mu     sync.Mutex
	closed bool

	errMu sync.Mutex
	// protocolErrors collects what servers reported as messages that
	// contradict the protocol.
	protocolErrors []string
}

// process is one node: a transport and the event loop driving its
// machine.
type process struct {
	id      wire.NodeID
	loop    *node.Loop
	tr      *transport.Transport
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // the loop's error, valid after done is closed
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
	total := servers + o.spares
	var p *pki
	if o.tls {
		p = newPKI(tb)
	}

	var addrs []string
	var trs []*transport.Transport
	var err error
	for attempt := 1; ; attempt++ {
		addrs, trs, err = listenAll(o.logger, total+1, p, o.transport)
		if err == nil {
			break
		}
		if attempt == portAttempts {
			tb.Fatalf("testcluster: %v", err)
		}
	}
	masterID := wire.NodeID(addrs[0])
	c := &Cluster{tb: tb, log: o.logger, masterID: masterID, addrs: addrs[1:], pki: p, transportOpts: o.transport}

	var initial []wire.NodeID
	for _, a := range addrs[1 : 1+servers] {
		initial = append(initial, wire.NodeID(a))
	}
	m, err := master.New(masterID, master.Options{
		Settings:         master.Settings{ReplicationFactor: servers},
		Chains:           map[wire.VolumeID][]wire.NodeID{0: initial},
		FailureTimeout:   wire.Time(FailureTimeout),
		LeaseDuration:    wire.Time(Lease),
		ClockDriftMax:    Drift,
		ExtensionTimeout: wire.Time(ExtensionTimeout),
	})
	if err != nil {
		for _, tr := range trs {
			tr.Close()
		}
		tb.Fatalf("testcluster: %v", err)
	}
	var masterEpoch wire.Epoch
	startMaster := func() {
		c.master = c.run(masterID, trs[0], m, func(l *node.Loop) {
			l.AfterBatch = func(wire.Time) {
				if cfg := m.Config(0); cfg.Epoch != masterEpoch {
					masterEpoch = cfg.Epoch
					c.log.Info("master installed a configuration", "node", string(masterID), "config", cfg.String())
				}
			}
		})
	}
	// Servers start first, unless delayed: their first heartbeats wait in
	// the master's inbox, so the master hears from every server before its
	// failure detector could suspect one.
	if o.serverDelay > 0 {
		startMaster()
		time.Sleep(o.serverDelay)
	}
	c.incarnations = make([]uint64, total)
	for i := range c.addrs {
		c.servers = append(c.servers, c.startServer(i, trs[i+1]))
	}
	if o.serverDelay == 0 {
		startMaster()
	}
	tb.Cleanup(c.Close)

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	var copts client.Options
	if p != nil {
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

// listenAll reserves n addresses and starts a transport on each, whose id
// is its address: the first a master's, the others servers', with their
// certificates when p is set. On failure (a port taken in between) it
// closes what it started.
func listenAll(log *slog.Logger, n int, p *pki, opts []transport.Option) ([]string, []*transport.Transport, error) {
	addrs, err := reservePorts(n)
	if err != nil {
		return nil, nil, err
	}
	var trs []*transport.Transport
	for i, a := range addrs {
		role := security.RoleServer
		if i == 0 {
			role = security.RoleMaster
		}
		tr, err := newTransport(log, a, p, role, opts)
		if err != nil {
			for _, tr := range trs {
				tr.Close()
			}
			return nil, nil, err
		}
		trs = append(trs, tr)
	}
	return addrs, trs, nil
}

// newTransport starts the transport of the node listening at addr, with
// a certificate of role when p is set.
func newTransport(log *slog.Logger, addr string, p *pki, role security.Role, opts []transport.Option) (*transport.Transport, error) {
	l := log.With("node", addr)
	if p != nil {
		m, err := p.material(security.Identity{Role: role, Name: addr}, l)
		if err != nil {
			return nil, err
		}
		opts = append([]transport.Option{transport.WithTLS(m)}, opts...)
	}
	return transport.New(wire.NodeID(addr), addr, l, opts...)
}

// startServer runs a new process of server i (empty storage, next
// incarnation) on a transport listening at its address.
func (c *Cluster) startServer(i int, tr *transport.Transport) *process {
	id := wire.NodeID(c.addrs[i])
	c.mu.Lock()
	c.incarnations[i]++
	incarnation := c.incarnations[i]
	c.mu.Unlock()
	engine := storage.NewMemoryEngine()
	s := chain.NewServer(chain.ServerOptions{
		Modes: modes.New,
		ID:    id, Masters: []wire.NodeID{c.masterID}, Incarnation: incarnation,
		HeartbeatInterval: wire.Time(HeartbeatInterval), Limits: chain.DefaultLimits, Engine: engine,
		Reads: chain.ReadsCleanAtAnyMember, CommitsLag: true,
	})
	var epoch wire.Epoch
	return c.run(id, tr, s, func(l *node.Loop) {
		l.Commit = engine.Commit
		l.AfterBatch = func(wire.Time) {
			if r := s.Replica(0); r != nil && r.Config().Epoch != epoch {
				epoch = r.Config().Epoch
				c.log.Info("adopted a configuration", "node", string(id), "epoch", epoch)
			}
			if errs := s.ProtocolErrors(); len(errs) > 0 {
				c.errMu.Lock()
				c.protocolErrors = append(c.protocolErrors, errs...)
				c.errMu.Unlock()
				for _, e := range errs {
					c.log.Warn("dropped a message that contradicts the protocol", "node", id, "error", e)
				}
			}
		}
	})
}

// run starts the event loop of machine m in a goroutine.
func (c *Cluster) run(id wire.NodeID, tr *transport.Transport, m node.Machine, configure func(*node.Loop)) *process {
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{id: id, tr: tr, cancel: cancel, done: make(chan struct{})}
	loop := &node.Loop{Machine: m, Transport: tr, TickInterval: TickInterval, Log: c.log.With("node", string(id))}
	if configure != nil {
		configure(loop)
	}
	p.loop = loop
	go func() {
		defer close(p.done)
		p.err = loop.Run(ctx)
	}()
	return p
}

// closeWait bounds how long stop waits for a transport to close.
const closeWait = 2 * time.Second

// stop ends the loop, then closes the transport: to peers it looks like a
// crash (connections reset, nothing more answered). It returns the loop's
// error.
//
// Transport.Close once blocked until a peer disconnected when that
// peer's connection completed its handshake while Close ran (fixed; see
// TestCloseWhileHandshaking in internal/transport). stop still waits for
// it at most closeWait, so a regression shows as a warning in the log
// instead of a hung test: by then the listener is closed and every other
// connection too, so the server is as good as crashed.
func (p *process) stop(log *slog.Logger) error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	p.cancel()
	<-p.done
	closed := make(chan struct{})
	go func() {
		p.tr.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeWait):
		log.Warn("transport did not close; going on (see TestCloseWhileHandshaking in internal/transport)", "wait", closeWait, "node", string(p.id))
	}
	return p.err
}

// MasterAddr returns the master's address (what client.Dial takes).
func (c *Cluster) MasterAddr() string { return string(c.masterID) }

// ServerAddrs returns the servers' addresses: the initial chain, head
// first, then any spares.
func (c *Cluster) ServerAddrs() []string { return append([]string(nil), c.addrs...) }

// Stop crashes server i: its event loop stops and its connections close.
// Stopping a stopped server does nothing.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.servers[i].stop(c.log); err != nil {
		c.tb.Errorf("testcluster: server %s: %v", c.addrs[i], err)
	}
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
	addr := c.addrs[i]
	var tr *transport.Transport
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		tr, err = newTransport(c.log, addr, c.pki, security.RoleServer, c.transportOpts)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("testcluster: Restart(%d): %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	np := c.startServer(i, tr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		np.stop(c.log)
		return
	}
	c.servers[i] = np
}

// ProtocolErrors returns the protocol errors servers reported so far:
// messages they dropped because they contradicted the protocol. A correct
// implementation reports none.
func (c *Cluster) ProtocolErrors() []string {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return append([]string(nil), c.protocolErrors...)
}

// Stall makes server i's event loop wait until release is called (once;
// the test's end calls it too): what its transport reads meanwhile waits
// for the node, as behind a node too busy to keep up.
func (c *Cluster) Stall(i int) (release func()) {
	c.tb.Helper()
	c.mu.Lock()
	p := c.servers[i]
	c.mu.Unlock()
	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(resume) }) }
	c.tb.Cleanup(release)
	go p.loop.Inspect(context.Background(), func(wire.Time) {
		close(stalled)
		<-resume
	})
	select {
	case <-stalled:
	case <-time.After(StartTimeout):
		c.tb.Fatalf("testcluster: Stall(%d): the loop did not stop", i)
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
	var errs []error
	for i, p := range c.servers {
		if err := p.stop(c.log); err != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", c.addrs[i], err))
		}
	}
	if err := c.master.stop(c.log); err != nil {
		errs = append(errs, fmt.Errorf("master: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		c.tb.Errorf("testcluster: %v", err)
	}
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
				Stable: vector(v.Stable), Shipped: vector(v.Shipped)})
		}
		r.Servers = append(r.Servers, ss)
	}
	for _, k := range st.Keyspaces {
		mode, _ := wire.ParseMode(k.Mode) // the client rendered it from a wire.Mode
		r.Keyspaces = append(r.Keyspaces, wire.Keyspace{Name: k.Name, Prefix: k.Prefix, Mode: mode, K: k.K,
			ReplicationFactor: k.Replicas, FirstVolume: wire.VolumeID(k.FirstVolume), Volumes: k.Volumes, Sites: siteIDs(k.Sites)})
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
