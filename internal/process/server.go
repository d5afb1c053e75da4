package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// LoopsMax bounds a server's event loops: each loop holds an inbox of
// the transport's and a Pebble batch, and a loop beyond the cores only
// adds commits.
const LoopsMax = 256

// ServerConfig is a storage server. Each field is the `catena server`
// flag its comment names.
type ServerConfig struct {
	// Listen is the address the server listens on, and its id (-listen).
	Listen string
	// Masters are the master's members' addresses (-master).
	Masters []wire.NodeID
	// DataDir holds the server's Pebble database and its incarnation
	// file; it is created if missing (-data).
	DataDir string
	// NoSync acknowledges updates once written to the OS, without fsync
	// (-no-sync).
	NoSync bool
	// HeartbeatInterval is how often the server sends the master a
	// heartbeat (-heartbeat-interval).
	HeartbeatInterval time.Duration
	// RedisListen, if set, serves the Redis protocol on this address in
	// plaintext from the server's process (-redis-listen): the proxy's
	// commands, with reads answered from this server's replicas when the
	// chain lets this member answer them. Loopback only (no password),
	// and plaintext links only, for now.
	RedisListen string
	// ClockOffsetMax bounds every clock's offset from true time, as the
	// deployment assumes it (-max-clock-offset; 0: 250 ms): a server
	// whose clock the heartbeats find beyond half of it answers nothing
	// about keys with deadlines (docs/adr/0028).
	ClockOffsetMax time.Duration
	// Tick is the event loops' tick; a loop of several publishes its
	// volumes' statuses at least once a tick.
	Tick time.Duration
	// CacheBytes sizes Pebble's block cache (-cache-mb), MemTableBytes
	// each memtable (-memtable-mb); ObjectCacheBytes is the object cache
	// for reads, split between the loops (-object-cache-mb; 0: none).
	CacheBytes, ObjectCacheBytes int64
	MemTableBytes                uint64
	// Loops is how many event loops run the volumes, each volume on one
	// (-loops): 1 to LoopsMax, and 1 for a server of a deployment of
	// several sites.
	Loops int
	// WatchWindow and WatchWindowBytes bound each volume's in-memory log
	// of its latest updates, which watches are served from and joining
	// servers caught up from (-watch-window, -watch-window-mb; 0:
	// chain.DefaultLimits' 100,000 updates and 32 MiB): a watch from an
	// older revision is compacted.
	WatchWindow, WatchWindowBytes int
	// LoopSilenceMax is how long a loop of several may do nothing before
	// the server stops heartbeating, so that the master takes it out of
	// its chains as it would a crashed server (0:
	// chain.DefaultLoopSilenceMax).
	LoopSilenceMax time.Duration
	// Site is the server's site in a deployment of several sites (-site;
	// 0: one site).
	Site wire.SiteID
	// HTTP is the address of the Prometheus metrics (-http); empty: none.
	HTTP string
	// Links are its TLS, limits per client and emulated WAN.
	Links
	// Faults skews the loops' clock and fails the disk (catena-lab
	// torture); nil: none.
	Faults *faults.Injector
	// Mutations are deliberate protocol bugs (a catena_unsafe build);
	// zero: none.
	Mutations chain.Mutations
	// CheckInvariants asserts every replica's invariants after each of
	// its steps; a violation stops the process (-check-invariants:
	// chain.ServerOptions.CheckInvariants).
	CheckInvariants bool
	// Log receives the process's log records (-log-level,
	// -log-format).
	Log *slog.Logger
	// OnProtocolErrors, if set, is called with the messages a loop
	// dropped because they contradict the protocol, after they are
	// logged (tests collect them). The loops call it from their own
	// goroutines.
	OnProtocolErrors func([]string)
}

// Validate reports a configuration that cannot run.
func (c *ServerConfig) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("process: server: Listen is required")
	case len(c.Masters) == 0:
		return errors.New("process: server: Masters is required")
	case c.DataDir == "":
		return errors.New("process: server: DataDir is required")
	case c.Log == nil:
		return errors.New("process: server: Log is required")
	case c.HeartbeatInterval <= 0 || c.Tick <= 0:
		return errors.New("process: server: HeartbeatInterval and Tick must be positive")
	case c.Loops < 1 || c.Loops > LoopsMax:
		return fmt.Errorf("process: server: Loops %d: want 1 to %d", c.Loops, LoopsMax)
	case c.Loops > 1 && c.Site != 0:
		// Its geo volumes share the site's view (chain/siteview.go).
		return fmt.Errorf("process: server: Loops %d: a server of a deployment of several sites runs one event loop", c.Loops)
	case c.RedisListen != "" && (c.TLS != nil || !IsLoopback(c.RedisListen)):
		return fmt.Errorf("process: server: RedisListen %s: a server's own Redis front end serves a loopback address of a plaintext cluster only, for now (run catena proxy otherwise)", c.RedisListen)
	case c.CacheBytes < 0 || c.ObjectCacheBytes < 0:
		return errors.New("process: server: CacheBytes and ObjectCacheBytes must not be negative")
	case c.WatchWindow < 0 || c.WatchWindowBytes < 0:
		return errors.New("process: server: WatchWindow and WatchWindowBytes must not be negative")
	}
	if err := c.Links.validate(); err != nil {
		return fmt.Errorf("process: server: %w", err)
	}
	return nil
}

// limits returns the replicas' limits: chain.DefaultLimits with the
// watch window the configuration sets.
func (c *ServerConfig) limits() chain.Limits {
	l := chain.DefaultLimits
	l.CatchUpLogMax = cmp.Or(c.WatchWindow, l.CatchUpLogMax)
	l.CatchUpLogBytesMax = cmp.Or(c.WatchWindowBytes, l.CatchUpLogBytesMax)
	return l
}

// Server is a running storage server.
type Server struct {
	*lifecycle
	tr    *transport.Transport
	loops []*node.Loop
	// servers are the loops' state machines, in loop order.
	servers []*chain.Server
	// redis is the server's own Redis-protocol front end (RedisListen),
	// localReads how many reads it answered from this server's replicas.
	redis      *Proxy
	localReads atomic.Int64
}

// RedisAddr returns the address of the server's Redis-protocol front
// end ("" if none).
func (s *Server) RedisAddr() string {
	if s.redis == nil {
		return ""
	}
	return s.redis.Addrs()[0]
}

// Addr returns the server's address.
func (s *Server) Addr() string { return s.tr.Addr() }

// Cut cuts the server off from the peers for which cut reports true, as
// a network partition would, until Cut(nil) (transport.SetCut): a test
// hook.
func (s *Server) Cut(cut func(peer wire.NodeID) bool) { s.tr.SetCut(cut) }

// Loops returns how many event loops the server runs.
func (s *Server) Loops() int { return len(s.loops) }

// Inspect runs f on event loop i between two of its batches (node.Loop.Inspect).
func (s *Server) Inspect(ctx context.Context, i int, f func(now wire.Time)) error {
	return s.loops[i].Inspect(ctx, f)
}

// NewServer validates c, opens the server's storage with the next
// incarnation and listens; Start runs its event loops.
func NewServer(c ServerConfig) (_ *Server, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Server{lifecycle: newLifecycle()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	reg := metrics.NewRegistry()
	v, err := s.openVolumes(c, reg)
	if err != nil {
		return nil, err
	}
	// Clients' requests queue apart: the loops take their peers'
	// messages first (docs/adr/0025).
	trOpts := append(c.Links.transportOptions(), transport.WithClientInboxes())
	if c.Loops > 1 {
		trOpts = append(trOpts, transport.WithRouter(chain.LoopRouter{Count: c.Loops}))
	}
	tr, err := transport.New(wire.NodeID(c.Listen), c.Listen, c.Log, trOpts...)
	if err != nil {
		return nil, err
	}
	s.tr = tr
	s.hold(tr.Close)
	c.WAN.apply(tr, c.Log, s.Done())
	c.Log.Info("server started", "listen", c.Listen, "tls", c.TLS != nil, "master", joinNodeIDs(c.Masters), "data", c.DataDir, "incarnation", v.incarnation,
		"site", c.Site, "sync", !c.NoSync, "loops", c.Loops, "restored-volumes", v.restored)
	var serverMetrics *metrics.Loop
	if c.HTTP != "" {
		serverMetrics = metrics.NewServerLoop(reg)
	}
	metricLoops := s.buildLoops(c, v, serverMetrics)
	s.servers = v.servers
	var redis ProxyConfig
	if c.RedisListen != "" {
		redis = ProxyConfig{Listen: c.RedisListen, Masters: joinNodeIDs(c.Masters), Consistency: client.AnyMember,
			ConnectionsMax: resp.ConnectionsMaxDefault, ConnectionsPerAddressMax: resp.ConnectionsPerAddressMaxDefault, PipelineMax: resp.PipelineDepthMax,
			Version: "catena server " + c.Listen, Log: c.Log.With("front-end", "redis"), local: s.LocalReads}
		if s.redis, err = NewProxy(redis); err != nil {
			return nil, err
		}
		s.hold(func() { s.redis.Close() })
	}
	var serveHTTP func(context.Context)
	if c.HTTP != "" {
		reg.MustRegister(metrics.NewServer(metricLoops...), metrics.NewTransport(tr))
		if serveHTTP, err = listenHTTP(s.lifecycle, c.HTTP, pageHandler(metrics.Handler(reg), "catena server "+c.Listen), c.Log, c.TLS); err != nil {
			return nil, err
		}
	}
	pool := &node.Pool{Transport: tr, Loops: s.loops, // one loop: on the transport's one inbox
		OnStuck: logStuck(c.Log, "its volumes make no progress")}
	s.run = func(ctx context.Context) error {
		if c.Faults != nil {
			go c.Faults.Poll(ctx)
		}
		if serveHTTP != nil {
			serveHTTP(ctx)
		}
		if s.redis != nil {
			go func() {
				if err := s.redis.serve(ctx, redis); err != nil && ctx.Err() == nil {
					c.Log.Error("the Redis-protocol front end stopped", "error", err)
				}
			}()
		}
		return pool.Run(ctx)
	}
	return s, nil
}

// volumes are a server's state machines, one per event loop, each with
// its own batch on the one database (chain/loops.go).
type volumes struct {
	servers []*chain.Server
	engines []*storage.PebbleEngine
	// statuses carries the loops' volume statuses to loop 0's heartbeats
	// (nil with one loop).
	statuses    *chain.LoopStatuses
	incarnation uint64
	// restored counts the volumes the storage held.
	restored int
}

// openVolumes takes the server's next incarnation, opens its database
// and builds a chain.Server per loop on it.
func (s *Server) openVolumes(c ServerConfig, reg *prometheus.Registry) (v volumes, err error) {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return v, err
	}
	incarnation, newDataDir, err := nextIncarnation(filepath.Join(c.DataDir, "incarnation"), time.Now())
	if err != nil {
		return v, err
	}
	v.incarnation = incarnation
	storageMetrics := metrics.NewStorage(reg, !c.NoSync)
	engine, err := storage.OpenPebble(storage.PebbleOptions{Dir: filepath.Join(c.DataDir, "pebble"), Sync: !c.NoSync, Logger: c.Log,
		CacheBytes: c.CacheBytes, MemTableBytes: c.MemTableBytes, ObjectCacheBytes: c.ObjectCacheBytes / int64(c.Loops),
		OnCacheRead: storageMetrics.OnCacheRead, OnCommit: storageMetrics.OnCommit, FS: c.Faults.FS(vfs.Default)})
	if err != nil {
		return v, err
	}
	s.holdErr(engine.Close)
	if c.Loops > 1 {
		v.statuses = chain.NewLoopStatuses(c.Loops)
	}
	v.engines = []*storage.PebbleEngine{engine}
	for i := range c.Loops {
		if i > 0 {
			sibling := engine.Sibling()
			s.holdErr(sibling.Close) // before engine's
			v.engines = append(v.engines, sibling)
		}
		server := chain.NewServer(chain.ServerOptions{
			ID: wire.NodeID(c.Listen), Masters: c.Masters, Incarnation: incarnation, NewDataDir: newDataDir,
			HeartbeatInterval: wire.Time(c.HeartbeatInterval), ClockOffsetMax: wire.Time(c.ClockOffsetMax),
			Limits: c.limits(), Engine: v.engines[i],
			Reads: chain.ReadsCleanAtAnyMember, Mutations: c.Mutations, Site: c.Site,
			CommitsLag: true, // the loop commits after each batch (node.Committer)
			Loop:       chain.LoopOptions{Index: i, Count: c.Loops, Statuses: v.statuses, SilenceMax: wire.Time(c.LoopSilenceMax)},
			Modes:      modes.New, CheckInvariants: c.CheckInvariants,
		})
		v.servers = append(v.servers, server)
		v.restored += len(server.Volumes())
	}
	if c.Mutations != (chain.Mutations{}) {
		c.Log.Warn("running with deliberate protocol bugs (a catena_unsafe build)", "mutations", fmt.Sprintf("%+v", c.Mutations))
	}
	return v, nil
}

// buildLoops builds an event loop per chain.Server of v, with loop 0
// sending the heartbeats, and returns what the metrics read of each
// (serverMetrics: nil without metrics).
func (s *Server) buildLoops(c ServerConfig, v volumes, serverMetrics *metrics.Loop) []metrics.ServerLoop {
	nudges := make(chan struct{}, 1)
	warp := c.Faults.Warp() // one clock for every loop (node.Loop.Start)
	var metricLoops []metrics.ServerLoop
	for i, server := range v.servers {
		loop := &node.Loop{
			Machine: server, Transport: s.tr, TickInterval: c.Tick, Log: c.Log, Warp: warp,
			Commit:     stopIfIncompatible(v.engines[i].Commit, server.Incompatible),
			AfterBatch: c.afterBatch(server, v.statuses, i, nudges),
		}
		observers := node.Observers{newTransferLog(c.Log, transferProgressEvery)}
		if serverMetrics != nil {
			m := serverMetrics
			if i > 0 {
				m = serverMetrics.Sibling()
			}
			observers = append(observers, m)
		}
		loop.Observer = observers
		if i == 0 {
			loop.Nudges = nudges
		}
		s.loops = append(s.loops, loop)
		metricLoops = append(metricLoops, metrics.ServerLoop{Server: server, Inspect: loop.Inspect})
	}
	return metricLoops
}

// afterBatch returns what loop i of a server does after each batch: log
// what its replicas dropped and the configurations they adopted and,
// with several loops, publish its volumes' statuses for loop 0's
// heartbeats (at most once a tick, and at once when it asked for a
// heartbeat, which it then nudges loop 0 to send).
func (c *ServerConfig) afterBatch(server *chain.Server, statuses *chain.LoopStatuses, i int, nudges chan<- struct{}) func(wire.Time) {
	log := c.Log
	epochs := map[wire.VolumeID]wire.Epoch{}
	published, everPublished := wire.Time(0), false
	silent := false
	return func(now wire.Time) {
		switch silence, hung := server.Silence(); {
		case hung && !silent:
			silent = true
			log.Error(LogLoopSilent+": no heartbeats go to the master until it runs again, so the master takes this server out of its chains as if it had crashed",
				"loop", silence.Loop, "silent", time.Duration(silence.For).Round(time.Millisecond), "stack", node.LoopStacks(silence.Loop))
		case !hung && silent:
			silent = false
			log.Info("the silent event loop runs again: heartbeats go to the master again")
		}
		if errs := server.ProtocolErrors(); len(errs) > 0 {
			for _, e := range errs {
				log.Warn("dropped a message that contradicts the protocol", "error", e)
			}
			if c.OnProtocolErrors != nil {
				c.OnProtocolErrors(errs)
			}
		}
		logRefusals(log, server.Refusals())
		for _, v := range server.Volumes() {
			if cfg := server.Replica(v).Config(); cfg.Epoch != epochs[v] {
				epochs[v] = cfg.Epoch
				log.Info("adopted configuration", "config", cfg.String())
			}
		}
		if statuses == nil {
			return
		}
		wanted := statuses.TakeWanted(i)
		if wanted || !everPublished || now-published >= wire.Time(c.Tick) {
			statuses.Publish(i, server.Statuses(now), now)
			published, everPublished = now, true
		}
		if wanted {
			select {
			case nudges <- struct{}{}:
			default: // a nudge is pending already
			}
		}
	}
}

// joinNodeIDs renders ids as a comma-separated list.
func joinNodeIDs(ids []wire.NodeID) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, string(id))
	}
	return strings.Join(parts, ",")
}

// nextIncarnation reads, increments and durably stores the server's
// incarnation number, so every start has a new one. A new data directory
// (no incarnation file: newDir) starts from the wall clock in
// microseconds, so a server whose directory was wiped or replaced still
// counts above every incarnation of its earlier directories (which
// restarted once per start, far less often than once a microsecond) and
// the master recognises it as restarted rather than ignoring it as an
// old process.
func nextIncarnation(path string, now time.Time) (n uint64, newDir bool, err error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		n, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", path, err)
		}
		n++
	case errors.Is(err, os.ErrNotExist):
		n, newDir = uint64(now.UnixMicro()), true
	default:
		return 0, false, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, false, err
	}
	if _, err := fmt.Fprintln(f, n); err != nil {
		f.Close()
		return 0, false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, false, err
	}
	return n, newDir, f.Close()
}

// stopIfIncompatible returns commit preceded by a check that the process
// can still run with its cluster (incompatible: the cluster version was
// finalized above what this release speaks): an error stops the loop,
// and the process exits saying why, before anything of the batch leaves.
func stopIfIncompatible(commit func() error, incompatible func() error) func() error {
	return func() error {
		if err := incompatible(); err != nil {
			return err
		}
		return commit()
	}
}

// DefaultClockOffsetMax is catena server's -max-clock-offset.
const DefaultClockOffsetMax = time.Duration(chain.DefaultClockOffsetMax)

// What a process logs when an event loop hangs: stuck in one input
// (logStuck), or, at a server's loop 0, another loop silent
// (ServerConfig.LoopSilenceMax). catena-lab torture looks for them.
const (
	LogLoopStuck  = "an event loop has been busy with one batch for too long"
	LogLoopSilent = "an event loop has done nothing for too long"
)

// logStuck returns a node.Pool's OnStuck that logs a loop hung in one
// batch, with what that means for the process and where it hangs (its
// goroutine's stack): the process's other loops, and its heartbeats, may
// go on without it.
func logStuck(log *slog.Logger, consequence string) func(loop int, busy time.Duration, stacks string) {
	return func(loop int, busy time.Duration, stacks string) {
		log.Error(LogLoopStuck+": "+consequence,
			"loop", loop, "busy", busy.Round(time.Millisecond), "stack", stacks)
	}
}
