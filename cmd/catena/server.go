package main

import (
	"errors"
	"runtime"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

func runServer(args []string) error {
	fs := cli.NewFlagSet("server", "catena server -listen ADDR -master ADDR -data DIR [flags]", "Runs a storage server.")
	listen := fs.String("listen", "127.0.0.1:7101", "address to listen on; also the server's id")
	masterAddrs := fs.String("master", defaultMasterAddr, "the master's address, or its members' addresses separated by commas")
	dataDir := fs.String("data", "", "directory for the server's data (required)")
	noSync := fs.Bool("no-sync", false, "acknowledge updates once written to the OS, without fsync: faster, but a machine crash may lose acknowledged updates (a process crash does not)")
	heartbeat := fs.Duration("heartbeat-interval", defaultHeartbeatInterval, "how often to send the master a heartbeat (must be well under its lease)")
	clockOffset := fs.Duration("max-clock-offset", process.DefaultClockOffsetMax, "the most any clock of the deployment may be off true time, the same on every server (CockroachDB's --max-offset): a server whose clock its heartbeats find more than half of it off the master's answers nothing about keys that expire until it is back (docs/adr/0028)")
	redisListen := fs.String("redis-listen", "", "also serve the Redis protocol on this loopback address, as catena proxy does, with reads answered from this server's replicas where the chain lets it (a plaintext cluster only, for now; docs/operations.md)")
	cacheMB := fs.Int64("cache-mb", 256, "Pebble block cache in MiB")
	objectCacheMB := fs.Int64("object-cache-mb", 32, "objects kept in memory for reads beside Pebble's block cache, in MiB, split between the event loops (0: none)")
	memtableMB := fs.Uint64("memtable-mb", 64, "size of each Pebble memtable in MiB (up to two are held): rewrites of a key within one are flushed once")
	watchWindow := fs.Int("watch-window", chain.DefaultLimits.CatchUpLogMax, "updates of each volume kept in memory to serve watches from (and catch joining servers up from): a watch from an older revision is compacted")
	watchWindowMB := fs.Int("watch-window-mb", chain.DefaultLimits.CatchUpLogBytesMax>>20, "the most memory in MiB each volume's -watch-window may take: the window holds as many of the latest updates as fit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file when the server stops")
	loopsFlag := fs.Int("loops", 0, "event loops to run the volumes on, each volume on one, so the server uses that many cores (0: one per CPU the Go runtime may use; a server of a deployment of several sites runs one)")
	siteFlag := fs.String("site", "", "the server's site id, in a deployment of several sites: its master's -site (empty: one site)")
	checkInvariants := fs.Bool("check-invariants", false, checkInvariantsUsage)
	httpAddr := registerHTTPFlag(fs, "Prometheus metrics (/metrics)")
	wanf := registerWANFlags(fs)
	tlsf := registerTLSFlags(fs, security.RoleServer)
	limitf := registerClientLimitFlags(fs)
	logs := registerLogFlags(fs)
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	wan, err := wanf.wan()
	if err != nil {
		return err
	}
	limits, err := limitf.limits()
	if err != nil {
		return err
	}
	var site wire.SiteID
	if *siteFlag != "" {
		if site, err = parseSiteID(*siteFlag); err != nil {
			return cli.UsageErrorf("-site: %v", err)
		}
	}
	loops, err := loopCount(*loopsFlag, site)
	if err != nil {
		return err
	}
	if *watchWindow < 1 || *watchWindowMB < 1 || *watchWindowMB > 1<<20 {
		return cli.UsageErrorf("-watch-window %d, -watch-window-mb %d: each must be at least 1 (and the second at most 1048576)", *watchWindow, *watchWindowMB)
	}
	if *objectCacheMB < 0 {
		return cli.UsageErrorf("-object-cache-mb %d: must not be negative", *objectCacheMB)
	}
	log, err := logs.logger(*listen)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	tlsm, err := tlsf.material(log, security.RoleServer, *listen)
	if err != nil {
		return err
	}
	// Fault testing only (catena-lab torture): CATENA_FAULTS names a
	// control file that may skew the loop's clock and fail the disk;
	// unset, inj is nil and changes nothing.
	inj, err := faults.FromEnv(log)
	if err != nil {
		return err
	}
	mutations, err := serverMutations()
	if err != nil {
		return err
	}
	srv, err := process.NewServer(process.ServerConfig{
		Listen: *listen, Masters: cli.SplitNodeIDs(*masterAddrs), DataDir: *dataDir, NoSync: *noSync,
		HeartbeatInterval: *heartbeat, ClockOffsetMax: *clockOffset, Tick: defaultTick, RedisListen: *redisListen,
		CacheBytes: *cacheMB << 20, ObjectCacheBytes: *objectCacheMB << 20, MemTableBytes: *memtableMB << 20,
		WatchWindow: *watchWindow, WatchWindowBytes: *watchWindowMB << 20,
		Loops: loops, Site: site, HTTP: *httpAddr, Links: process.Links{TLS: tlsm, Limits: limits, WAN: wan},
		Faults: inj, Mutations: mutations, CheckInvariants: *checkInvariants, Log: log,
	})
	if err != nil {
		return err
	}
	ctx, stop := cli.StopContext(log)
	defer stop()
	return process.Run(ctx, srv)
}

// loopCount returns how many event loops a server runs, from its -loops
// flag and its site.
func loopCount(flag int, site wire.SiteID) (int, error) {
	switch {
	case flag < 0 || flag > process.LoopsMax:
		return 0, cli.UsageErrorf("-loops %d: must be 0 (one per CPU) to %d", flag, process.LoopsMax)
	case flag > 1 && site != 0:
		// Its geo volumes share the site's view (chain/siteview.go).
		return 0, cli.UsageErrorf("-loops %d: a server of a deployment of several sites runs one event loop", flag)
	case flag == 0 && site != 0:
		return 1, nil
	case flag == 0:
		return min(runtime.GOMAXPROCS(0), process.LoopsMax), nil
	}
	return flag, nil
}
