package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

func runServer(args []string) error {
	fs := newFlagSet("server", "catena server -listen ADDR -master ADDR -data DIR [flags]", "Runs a storage server.")
	listen := fs.String("listen", "127.0.0.1:7101", "address to listen on; also the server's id")
	masterAddrs := fs.String("master", defaultMasterAddr, "the master's address, or its members' addresses separated by commas")
	dataDir := fs.String("data", "", "directory for the server's data (required)")
	noSync := fs.Bool("no-sync", false, "acknowledge updates once written to the OS, without fsync: faster, but a machine crash may lose acknowledged updates (a process crash does not)")
	heartbeat := fs.Duration("heartbeat-interval", defaultHeartbeatInterval, "how often to send the master a heartbeat (must be well under its lease)")
	cacheMB := fs.Int64("cache-mb", 256, "Pebble block cache in MiB")
	objectCacheMB := fs.Int64("object-cache-mb", 32, "objects kept in memory for reads beside Pebble's block cache, in MiB, split between the event loops (0: none)")
	memtableMB := fs.Uint64("memtable-mb", 64, "size of each Pebble memtable in MiB (up to two are held): rewrites of a key within one are flushed once")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file when the server stops")
	loopsFlag := fs.Int("loops", 0, "event loops to run the volumes on, each volume on one, so the server uses that many cores (0: one per CPU the Go runtime may use; a server of a deployment of several sites runs one)")
	siteFlag := fs.String("site", "", "the server's site id, in a deployment of several sites: its master's -site (empty: one site)")
	httpAddr := registerHTTPFlag(fs, "Prometheus metrics (/metrics)")
	wan := registerWANFlags(fs)
	tlsf := registerTLSFlags(fs, security.RoleServer)
	limits := registerClientLimitFlags(fs)
	logs := registerLogFlags(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := noArguments(args); err != nil {
		return err
	}
	if err := wan.validate(); err != nil {
		return err
	}
	if err := limits.validate(); err != nil {
		return err
	}
	var site wire.SiteID
	if *siteFlag != "" {
		if site, err = parseSiteID(*siteFlag); err != nil {
			return usageErrorf("-site: %v", err)
		}
	}
	loops, err := loopCount(*loopsFlag, site)
	if err != nil {
		return err
	}
	if *objectCacheMB < 0 {
		return usageErrorf("-object-cache-mb %d: must not be negative", *objectCacheMB)
	}
	log, err := logs.logger(*listen)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	tlsm, err := tlsf.material(log, security.RoleServer, *listen)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return err
	}
	incarnation, newDataDir, err := nextIncarnation(filepath.Join(*dataDir, "incarnation"), time.Now())
	if err != nil {
		return err
	}
	// Fault testing only (catena torture): CATENA_FAULTS names a control
	// file that may skew the loop's clock and fail the disk; unset, inj is
	// nil and changes nothing.
	inj, err := faults.FromEnv(log)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	storageMetrics := metrics.NewStorage(reg, !*noSync)
	engine, err := storage.OpenPebble(storage.PebbleOptions{Dir: filepath.Join(*dataDir, "pebble"), Sync: !*noSync, Logger: log, CacheBytes: *cacheMB << 20, MemTableBytes: *memtableMB << 20,
		ObjectCacheBytes: *objectCacheMB << 20 / int64(loops), OnCacheRead: storageMetrics.OnCacheRead,
		OnCommit: storageMetrics.OnCommit, FS: inj.FS(vfs.Default)})
	if err != nil {
		return err
	}
	defer engine.Close()
	mutations, err := serverMutations()
	if err != nil {
		return err
	}
	// One Server per event loop, each with its own batch on the one
	// database (chain/loops.go).
	var statuses *chain.LoopStatuses
	if loops > 1 {
		statuses = chain.NewLoopStatuses(loops)
	}
	engines := []*storage.PebbleEngine{engine}
	servers := make([]*chain.Server, loops)
	restored := 0
	for i := range servers {
		if i > 0 {
			sibling := engine.Sibling()
			defer sibling.Close() // before engine's
			engines = append(engines, sibling)
		}
		servers[i] = chain.NewServer(chain.ServerOptions{
			Modes: modes.New,
			ID:    wire.NodeID(*listen), Masters: splitNodeIDs(*masterAddrs), Incarnation: incarnation, NewDataDir: newDataDir,
			HeartbeatInterval: wire.Time(*heartbeat), Limits: chain.DefaultLimits, Engine: engines[i],
			Reads: chain.ReadsCleanAtAnyMember, Mutations: mutations, Site: site,
			CommitsLag: true, // the loop commits after each batch (node.Committer)
			Loop:       chain.LoopOptions{Index: i, Count: loops, Statuses: statuses},
		})
		restored += len(servers[i].Volumes())
	}
	if mutations != (chain.Mutations{}) {
		log.Warn("running with deliberate protocol bugs (a catena_unsafe build)", "mutations", fmt.Sprintf("%+v", mutations))
	}
	trOpts := transportOptions(tlsm, limits)
	if loops > 1 {
		trOpts = append(trOpts, transport.WithRouter(chain.LoopRouter{Count: loops}))
	}
	tr, err := transport.New(wire.NodeID(*listen), *listen, log, trOpts...)
	if err != nil {
		return err
	}
	defer tr.Close()
	wan.apply(tr, log)
	log.Info("server started", "listen", *listen, "tls", tlsm != nil, "master", *masterAddrs, "data", *dataDir, "incarnation", incarnation, "site", site, "sync", !*noSync, "loops", loops, "restored-volumes", restored)
	ctx, stop := stopContext(log)
	defer stop()
	if inj != nil {
		go inj.Poll(ctx)
	}
	var serverMetrics *metrics.Loop
	if *httpAddr != "" {
		serverMetrics = metrics.NewServerLoop(reg)
	}
	nudges := make(chan struct{}, 1)
	warp := inj.Warp() // one clock for every loop (node.Loop.Start)
	nodeLoops := make([]*node.Loop, loops)
	metricLoops := make([]metrics.ServerLoop, loops)
	for i, server := range servers {
		loop := &node.Loop{
			Machine: server, Transport: tr, TickInterval: defaultTick, Log: log, Warp: warp,
			Commit:     engines[i].Commit,
			AfterBatch: serverAfterBatch(log, server, statuses, i, nudges),
		}
		observers := node.Observers{newTransferLog(log, transferProgressEvery)}
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
		nodeLoops[i] = loop
		metricLoops[i] = metrics.ServerLoop{Server: server, Inspect: loop.Inspect}
	}
	if *httpAddr != "" {
		reg.MustRegister(metrics.NewServer(metricLoops...), metrics.NewTransport(tr))
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler(reg))
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "catena server %s\n\n/metrics  Prometheus metrics\n\nThe cluster's status page is served by the master.\n", *listen)
		})
		if err := serveHTTP(ctx, *httpAddr, mux, log, tlsm); err != nil {
			return err
		}
	}
	pool := &node.Pool{Transport: tr, Loops: nodeLoops} // one loop: on the transport's one inbox
	return pool.Run(ctx)
}

// loopsMax bounds -loops: each loop holds an inbox of the transport's
// and a Pebble batch, and a loop beyond the cores only adds commits.
const loopsMax = 256

// loopCount returns how many event loops a server runs, from its -loops
// flag and its site.
func loopCount(flag int, site wire.SiteID) (int, error) {
	switch {
	case flag < 0 || flag > loopsMax:
		return 0, usageErrorf("-loops %d: must be 0 (one per CPU) to %d", flag, loopsMax)
	case flag > 1 && site != 0:
		// Its geo volumes share the site's view (chain/siteview.go).
		return 0, usageErrorf("-loops %d: a server of a deployment of several sites runs one event loop", flag)
	case flag == 0 && site != 0:
		return 1, nil
	case flag == 0:
		return min(runtime.GOMAXPROCS(0), loopsMax), nil
	}
	return flag, nil
}

// serverAfterBatch returns what loop i of a server does after each batch:
// log what its replicas dropped and the configurations they adopted and,
// with several loops, publish its volumes' statuses for loop 0's
// heartbeats (at most once a tick, and at once when it asked for a
// heartbeat, which it then nudges loop 0 to send).
func serverAfterBatch(log *slog.Logger, server *chain.Server, statuses *chain.LoopStatuses, i int, nudges chan<- struct{}) func(wire.Time) {
	epochs := map[wire.VolumeID]wire.Epoch{}
	published, everPublished := wire.Time(0), false
	return func(now wire.Time) {
		for _, e := range server.ProtocolErrors() {
			log.Warn("dropped a message that contradicts the protocol", "error", e)
		}
		logRefusals(log, server.Refusals())
		for _, v := range server.Volumes() {
			if c := server.Replica(v).Config(); c.Epoch != epochs[v] {
				epochs[v] = c.Epoch
				log.Info("adopted configuration", "config", c.String())
			}
		}
		if statuses == nil {
			return
		}
		wanted := statuses.TakeWanted(i)
		if wanted || !everPublished || now-published >= wire.Time(defaultTick) {
			statuses.Publish(i, server.Statuses(now))
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
