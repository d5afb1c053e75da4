package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/catena-kv/catena/internal/bench"
	"github.com/catena-kv/catena/internal/cli"
)

// compareDescription is what `catena-lab bench compare` does.
const compareDescription = `Runs YCSB workloads A, B, C, D and F (go-ycsb's core workload) against a
3-replica Catena cluster (through its Go client, and through its Redis
protocol proxy with go-redis, the client the Redis run uses), a 3-member
etcd cluster and a standalone Redis (appendfsync everysec, and appendfsync
always: the durability-matched row), one after the other on loopback ports,
plus Catena with one replica (the replication tax) and Catena with the
records in a causal+ keyspace (t=3, k=2: ChainReaction), which also reports
its clients' causal metadata size. Installs etcd and Redis
with apt-get when missing, stops every process it started, prints
throughput and p50/p99 latency per system and workload with the ratios
Catena/etcd and Catena/Redis, and writes them to docs/benchmarks.md.
Workload E (short ranges: 95% scans of 1-100 records, 5% inserts) runs
when -workloads names it, on the systems that read ranges (Catena's Go
client, which asks every volume, and etcd); the Redis rows skip it.`

// redisDescription is what `catena-lab bench redis` does.
const redisDescription = `Runs redis-benchmark against the Redis-protocol proxy of a 'catena dev'
cluster (a master, 3 servers and a proxy) and then against a redis-server
(append-only file synced every second), one after the other on this
machine with the same arguments (by default -t set,get,incr,mset -n 100000
-P 16), and prints both. Installs redis-server and redis-tools with apt-get
when missing.`

// rejoinDescription is what `catena-lab bench rejoin` does.
const rejoinDescription = `Measures a restarted server's rejoin (issue 18, catch-up on restart): for
each catena binary given (-before, then -binary), starts a master and 3
servers as processes on loopback ports, loads -data-mb MiB of 1 KB records,
stops the chain's tail for -outage while clients overwrite records at
-rate writes/s, restarts it with its data (with -wipe, with an empty data
directory: a snapshot), and reports the time until the
master shows it a current chain member again and the bytes it received
meanwhile (its catena_transport_received_bytes_total), with the load
average at the restart.`

// geoDescription is what `catena-lab bench geo` does.
const geoDescription = `Measures two sites (issue 32): starts 'catena dev -sites 2 -wan-rtt
120ms' as a process (its default keyspace causal and replicated by both
sites), loads -records records at site 1 through the Go client, then runs
YCSB-like workloads A (50% reads, 50% updates) and B (95/5), keys chosen
uniformly, each for -duration with -clients closed-loop clients at site 1
(-both-sites: at site 2 too), each its own client. Meanwhile a probe writes
a key at site 1 every 20ms with its send time and a client at site 2 polls
for it: the visibility lag. Prints progress every 5s, then throughput,
read and write latency at the clients' site and the lag (overall and per
5s of the run), and writes them to docs/benchmarks.md.`

// backupDescription is what `catena-lab bench backup` does.
const backupDescription = `Measures the cluster's latency during an online backup (issue 34: within
25% of normal). Starts 'catena dev -insecure -redis off -volumes N' (3
servers, fsync on) as a process, loads -records records of -value-size
bytes through the Go client, then runs workload A (50% reads, 50%
updates, keys chosen uniformly) with -clients closed-loop clients, each
its own client, throughout: -warmup unmeasured, then -repeat rounds of a
normal phase (no backup) and a backup phase (internal/backup.Run in this
process, what 'catena backup' runs, at -rate, one whole backup after
another into new directories under -dir for the whole phase), -phase
each. Prints progress every 5s, then per kind of phase the median over
the rounds of throughput, read and update p50/p99, their ratios
backup/normal, the backup's MiB/s and whole backups, and whether p99
stays within 25%; writes them to docs/benchmarks.md.`

// watchDescription is what `catena-lab bench watch` does.
const watchDescription = `Measures watch throughput and lag (issue 37): starts a master and 3
servers (one chain of 3) as processes on loopback ports, then for each
number of watchers in -watchers: starts that many watches of one prefix,
each its own client.Watch, sharing -clients clients; runs a writer at
-rate writes/s over -keys keys of the prefix (its own client); after
-warmup, measures for -duration the events delivered per second, the lag
from each write's answer (Put returned) to each watcher receiving its
event (p50, p99) and the servers' CPU, then checks that every watcher
received every measured write once (waiting up to -drain). Prints
progress every 2s, then the table, and writes it to docs/benchmarks.md.`

const benchUsage = "usage: catena-lab bench compare [flags]\n       catena-lab bench redis [flags]\n       catena-lab bench rejoin [flags]\n       catena-lab bench geo [flags]\n       catena-lab bench backup [flags]\n       catena-lab bench watch [flags]\n\ncompare: " +
	compareDescription + "\n\nredis: " + redisDescription + "\n\nrejoin: " + rejoinDescription + "\n\ngeo: " + geoDescription + "\n\nbackup: " + backupDescription +
	"\n\nwatch: " + watchDescription + "\n"

// runBench runs `catena-lab bench SUBCOMMAND`.
func runBench(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "redis" {
		return runBenchRedis(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "rejoin" {
		return runBenchRejoin(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "geo" {
		return runBenchGeo(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "backup" {
		return runBenchBackup(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "watch" {
		return runBenchWatch(args[1:], stdout)
	}
	if len(args) > 0 && cli.IsHelp(args[0]) {
		return cli.Help{Usage: benchUsage}
	}
	fmt.Fprint(os.Stderr, benchUsage)
	return cli.UsageErrorf("want a subcommand: compare, redis, rejoin, geo, backup or watch")
}

func runBenchRejoin(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench rejoin", "catena-lab bench rejoin [flags]", rejoinDescription)
	dataMB := fs.Int64("data-mb", 1024, "MiB of record values to load")
	valueSize := fs.Int("value-size", 1024, "bytes per record")
	outage := fs.Duration("outage", 10*time.Second, "how long the server stays stopped")
	rate := fs.Int("rate", 1000, "writes per second during the outage")
	threads := fs.Int("threads", 64, "concurrent writers loading the records")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up waiting for the rejoin after this long")
	before := fs.String("before", "", "catena binary to measure first (for example main's build); empty: none")
	binary := benchBinaryFlag(fs, "measure")
	dir := benchDirFlag(fs, "data and logs")
	wipe := fs.Bool("wipe", false, "restart the server with an empty data directory (a replaced disk): it rejoins by snapshot")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	cleanup, err := orCatenaBinary(binary)
	if err != nil {
		return err
	}
	defer cleanup()
	base := *dir
	if base == "" {
		if base, err = os.MkdirTemp("", "catena-rejoin-"); err != nil {
			return err
		}
		defer os.RemoveAll(base)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	type run struct{ name, bin string }
	runs := []run{{"after", *binary}}
	if *before != "" {
		runs = append([]run{{"before", *before}}, runs...)
	}
	var lines []string
	for _, r := range runs {
		d := filepath.Join(base, r.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		res, err := bench.RunRejoin(ctx, bench.RejoinOptions{Binary: r.bin, Dir: d, Data: *dataMB << 20, ValueSize: *valueSize,
			Outage: *outage, OutageRate: *rate, Threads: *threads, Timeout: *timeout, Wipe: *wipe,
			Log: func(format string, args ...any) { fmt.Fprintf(stdout, r.name+": "+format+"\n", args...) }})
		if err != nil {
			return fmt.Errorf("%s (%s): %w", r.name, r.bin, err)
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %s | %d | %.1f | %.1f | %.2f |", r.name, res.Records,
			res.Loaded.Round(time.Second), res.OutageWrite, res.Rejoin.Seconds(), float64(res.Received)/(1<<20), res.LoadAvg))
	}
	fmt.Fprintf(stdout, "\ncatena-lab bench rejoin%s\n\n", joinArgs(args))
	fmt.Fprintln(stdout, "| run | records | load time | writes during outage | rejoin (s) | received (MiB) | load avg at restart |")
	fmt.Fprintln(stdout, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	return nil
}

func runBenchGeo(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench geo", "catena-lab bench geo [flags]", geoDescription)
	duration := fs.Duration("duration", 30*time.Second, "how long each workload runs")
	clients := fs.Int("clients", 16, "closed-loop clients per writing site")
	bothSites := fs.Bool("both-sites", false, "run -clients clients at site 2 as well as at site 1")
	records := fs.Int("records", 5000, "records loaded before the workloads")
	valueSize := fs.Int("value-size", 100, "bytes per record")
	rtt := fs.Duration("wan-rtt", 120*time.Millisecond, "catena dev -wan-rtt: the round trip between the sites")
	workloads := fs.String("workloads", "a,b", "comma-separated workloads to run: a (50% reads, 50% updates), b (95/5)")
	out := benchOutFlag(fs)
	dir := benchDirFlag(fs, "data and logs")
	binary := benchBinaryFlag(fs, "run catena dev with")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	if *duration <= 0 || *clients < 1 || *records < 1 || *valueSize < 1 || *rtt <= 0 {
		return cli.UsageErrorf("-duration, -clients, -records and -value-size and -wan-rtt must be positive")
	}
	var ws []bench.GeoWorkload
	for _, name := range strings.Split(*workloads, ",") {
		i := slices.IndexFunc(bench.GeoWorkloads, func(w bench.GeoWorkload) bool { return strings.EqualFold(w.Name, strings.TrimSpace(name)) })
		if i < 0 {
			return cli.UsageErrorf("unknown workload %q (have a, b)", name)
		}
		ws = append(ws, bench.GeoWorkloads[i])
	}
	cleanup, err := benchBinaryAndDir(binary, dir, "catena-bench-geo-")
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunGeo(ctx, bench.GeoOptions{
		CatenaBinary: *binary, Dir: *dir, WANRTT: *rtt, Clients: *clients, BothSites: *bothSites,
		Records: *records, ValueSize: *valueSize, Duration: *duration, Workloads: ws, Progress: stdout,
		Command: "catena-lab bench geo" + joinArgs(args),
	})
	if err != nil {
		return err
	}
	return writeBenchReport(stdout, rep, *out)
}

func runBenchBackup(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench backup", "catena-lab bench backup [flags]", backupDescription)
	volumes := fs.Int("volumes", 2, "catena dev -volumes: the volumes (chains) keys hash to")
	records := fs.Int("records", 100_000, "records loaded before the phases")
	valueSize := fs.Int("value-size", 1000, "bytes per record")
	clients := fs.Int("clients", 16, "closed-loop clients, each its own client")
	warmup := fs.Duration("warmup", 5*time.Second, "run the workload this long, unmeasured, before the first phase (0: none)")
	phase := fs.Duration("phase", 15*time.Second, "how long each phase runs")
	repeat := fs.Int("repeat", 3, "rounds of a normal phase then a backup phase")
	rate := fs.String("rate", "4M", "the backup's -rate: bytes read a second (suffixes K, M, G: powers of 1024; catena backup's default)")
	out := benchOutFlag(fs)
	dir := benchDirFlag(fs, "data, logs and backups")
	backupDir := fs.String("backup-dir", "", "directory to write the backups into, another disk's say (default: -dir's backups; a directory given is kept, its backups removed)")
	binary := benchBinaryFlag(fs, "run catena dev with")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	bytesPerSecond, err := cli.ParseByteSize(*rate)
	if err != nil {
		return cli.UsageErrorf("-rate: %v", err)
	}
	if *volumes < 1 || *records < 1 || *valueSize < 1 || *clients < 1 || *phase <= 0 || *repeat < 1 || bytesPerSecond < 1 || *warmup < 0 {
		return cli.UsageErrorf("-volumes, -records, -value-size, -clients, -phase, -repeat and -rate must be positive, -warmup not negative")
	}
	if *warmup == 0 {
		*warmup = -1 // RunBackup's "none"
	}
	cleanup, err := benchBinaryAndDir(binary, dir, "catena-bench-backup-")
	if err != nil {
		return err
	}
	defer cleanup()
	if *backupDir != "" {
		d, err := os.MkdirTemp(*backupDir, "catena-bench-backup-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*backupDir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunBackup(ctx, bench.BackupOptions{
		CatenaBinary: *binary, Dir: *dir, BackupDir: *backupDir, Volumes: *volumes, Records: *records, ValueSize: *valueSize,
		Clients: *clients, Warmup: *warmup, Phase: *phase, Repeat: *repeat, Rate: bytesPerSecond, Progress: stdout,
		Command: "catena-lab bench backup" + joinArgs(args),
	})
	if err != nil {
		return err
	}
	return writeBenchReport(stdout, rep, *out)
}

func runBenchWatch(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench watch", "catena-lab bench watch [flags]", watchDescription)
	watchers := fs.String("watchers", "1,100,1000", "comma-separated numbers of watchers to measure, one after the other")
	clients := fs.Int("clients", 4, "client.Clients (connections) the watchers share, watcher i on client i mod N")
	rate := fs.Int("rate", 1000, "writes per second the writer issues")
	writers := fs.Int("writers", 256, "the writer's writes in flight at most")
	keys := fs.Int("keys", 1000, "keys the writer cycles over")
	valueSize := fs.Int("value-size", 100, "bytes per value (at least 8)")
	warmup := fs.Duration("warmup", 3*time.Second, "run the writer and the watchers this long, unmeasured, before each measurement")
	duration := fs.Duration("duration", 10*time.Second, "how long each number of watchers is measured")
	drain := fs.Duration("drain", 10*time.Second, "how long the watchers may take, after a measurement, to receive its writes' events")
	hold := fs.Duration("hold", 0, "client.WatchHold: how long a member holds a watch with nothing to send (0: the client's default, 1s)")
	out := benchOutFlag(fs)
	dir := benchDirFlag(fs, "data and logs")
	binary := benchBinaryFlag(fs, "run the cluster with")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the benchmark process (the writer and the watchers) to this file")
	serverProfiles := fs.String("server-cpuprofile", "", "directory for a CPU profile of every server process (watch-sN.pprof), over the whole run")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	var ns []int
	for _, f := range strings.Split(*watchers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return cli.UsageErrorf("-watchers: %q is not a positive number", f)
		}
		ns = append(ns, n)
	}
	if *clients < 1 || *rate < 1 || *writers < 1 || *keys < 1 || *valueSize < 8 || *warmup < 0 || *duration <= 0 || *drain <= 0 || *hold < 0 {
		return cli.UsageErrorf("-clients, -rate, -writers, -keys, -duration and -drain must be positive, -value-size at least 8, -warmup and -hold not negative")
	}
	if *warmup == 0 {
		*warmup = time.Millisecond // (RunWatch's 0 is its default)
	}
	cleanup, err := benchBinaryAndDir(binary, dir, "catena-bench-watch-")
	if err != nil {
		return err
	}
	defer cleanup()
	if *serverProfiles != "" {
		if err := os.MkdirAll(*serverProfiles, 0o755); err != nil {
			return err
		}
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunWatch(ctx, bench.WatchOptions{
		CatenaBinary: *binary, Dir: *dir, Watchers: ns, Clients: *clients, Rate: *rate, Writers: *writers,
		Keys: *keys, ValueSize: *valueSize, Warmup: *warmup, Duration: *duration, Drain: *drain, Hold: *hold,
		ProfileDir: *serverProfiles, Progress: stdout, Command: "catena-lab bench watch" + joinArgs(args),
	})
	if err != nil {
		return err
	}
	return writeBenchReport(stdout, rep, *out)
}

// benchDir makes *dir, or a temporary directory named from prefix when
// *dir is empty (set into it); the returned func removes a temporary one.
// benchBinaryAndDir readies what a benchmark of catena dev needs: the
// catena binary (orCatenaBinary) and its directory (benchDir); cleanup
// undoes both.
func benchBinaryAndDir(binary, dir *string, prefix string) (cleanup func(), err error) {
	removeBinary, err := orCatenaBinary(binary)
	if err != nil {
		return nil, err
	}
	removeDir, err := benchDir(dir, prefix)
	if err != nil {
		removeBinary()
		return nil, err
	}
	return func() { removeDir(); removeBinary() }, nil
}

func benchDir(dir *string, prefix string) (func(), error) {
	if *dir != "" {
		return func() {}, os.MkdirAll(*dir, 0o755)
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	*dir = d
	return func() { os.RemoveAll(d) }, nil
}

// markdownReport is a benchmark's report that prints itself as Markdown
// and writes itself between its markers in a file.
type markdownReport interface {
	WriteMarkdown(w io.Writer)
	UpdateMarkdownFile(path string) error
}

// writeBenchReport prints rep and, unless out is empty, writes it into out.
func writeBenchReport(stdout io.Writer, rep markdownReport, out string) error {
	fmt.Fprintln(stdout)
	rep.WriteMarkdown(stdout)
	if out == "" {
		return nil
	}
	if err := rep.UpdateMarkdownFile(out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", out)
	return nil
}

func runBenchRedis(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench redis", "catena-lab bench redis [flags]", redisDescription)
	tests := fs.String("tests", "set,get,incr,mset", "redis-benchmark -t: the tests to run")
	requests := fs.Int("requests", 100_000, "redis-benchmark -n: requests per test")
	pipeline := fs.Int("pipeline", 16, "redis-benchmark -P: requests pipelined per connection")
	clients := fs.Int("clients", 50, "redis-benchmark -c: connections")
	keyspace := fs.Int("keyspace", 0, "redis-benchmark -r: random keys out of this many (0: redis-benchmark's one key per test)")
	out := benchOutFlag(fs)
	dir := benchDirFlag(fs, "data and logs")
	install := fs.Bool("install", true, "install redis-server and redis-tools with apt-get when missing")
	binary := benchBinaryFlag(fs, "run catena dev with")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	if *requests < 1 || *pipeline < 1 || *clients < 1 || *keyspace < 0 {
		return cli.UsageErrorf("-requests, -pipeline and -clients must be positive, -keyspace not negative")
	}
	cleanup, err := benchBinaryAndDir(binary, dir, "catena-bench-redis-")
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunRedisBenchmark(ctx, bench.RedisBenchmarkOptions{
		CatenaBinary: *binary, Dir: *dir, Tests: *tests, Requests: *requests, Pipeline: *pipeline,
		Clients: *clients, KeySpace: *keyspace, Install: *install, Progress: stdout,
		Command: "catena-lab bench redis" + joinArgs(args),
	})
	if err != nil {
		return err
	}
	return writeBenchReport(stdout, rep, *out)
}

func runBenchCompare(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("bench compare", "catena-lab bench compare [flags]", compareDescription)
	d := bench.DefaultSizing
	records := fs.Int64("records", d.Records, "records loaded into each system")
	ops := fs.Int64("ops", d.Operations, "operations per workload")
	threads := fs.Int("threads", d.Threads, "YCSB client threads")
	workloads := fs.String("workloads", "a,b,c,d,f", "comma-separated YCSB workloads to run (a to f; e: scans, on the systems that read ranges)")
	systems := fs.String("systems", strings.Join(bench.AllSystems, ","), "comma-separated systems to run: catena (3 replicas), etcd, redis, redis-always (appendfsync always), catena-t1 (1 replica), catena-resp (3 replicas through catena proxy, with go-redis), catena-resp-servers (3 replicas through each server's own Redis front end, go-redis threads spread over them), catena-causal (3 replicas, the records in a causal+ keyspace with k=2), catena-tls (catena with every link over mutual TLS), catena-craq (catena with reads at any chain member: CRAQ)")
	out := benchOutFlag(fs)
	dir := benchDirFlag(fs, "data and logs")
	install := fs.Bool("install", true, "install etcd-server, etcd-client and redis-server with apt-get when missing")
	phaseTimeout := fs.Duration("phase-timeout", 3*time.Minute, "cut a load or workload run short after this long")
	perThread := fs.Bool("per-thread-clients", false, "give each Catena thread its own client instead of one shared client")
	noSync := fs.Bool("catena-no-sync", false, "run Catena servers with -no-sync")
	loops := fs.Int("catena-loops", 0, "run Catena servers with -loops N (0: the server's default, one event loop per CPU)")
	serverFlags := fs.String("catena-server-flags", "", "more flags for every Catena server, separated by spaces (an A/B comparison of a server setting)")
	binary := benchBinaryFlag(fs, "run the cluster with")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the benchmark process (the clients) to this file")
	serverProfiles := fs.String("server-cpuprofile", "", "directory for a CPU profile of every Catena server process (SYSTEM-sN.pprof) and proxy (SYSTEM-proxy.pprof); with -repeat, one subdirectory per round (roundN)")
	repeat := fs.Int("repeat", 1, "run every system this many times, in rounds with the systems' order rotated; the report shows each figure's median and its spread")
	rest, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(rest); err != nil {
		return err
	}
	o := bench.CompareOptions{
		Sizing: bench.Sizing{Records: *records, Operations: *ops, Threads: *threads,
			FieldCount: d.FieldCount, FieldLength: d.FieldLength},
		Dir: *dir, KeepDir: *dir != "", Install: *install, PhaseTimeout: *phaseTimeout,
		PerThreadClients: *perThread, CatenaBinary: *binary, Progress: stdout,
		Command: "catena-lab bench compare" + joinArgs(args),
	}
	if *repeat < 1 {
		return errors.New("-repeat must be at least 1")
	}
	o.Repeat = *repeat
	if *threads < 1 || *records < int64(*threads) || *ops < int64(*threads) {
		return errors.New("-records and -ops must be at least -threads, and -threads at least 1")
	}
	for _, name := range strings.Split(*workloads, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		w, ok := bench.WorkloadByName(name)
		if !ok {
			return fmt.Errorf("unknown workload %q (have a, b, c, d, f)", name)
		}
		o.Workloads = append(o.Workloads, w)
	}
	for _, name := range strings.Split(*systems, ",") {
		if name = strings.TrimSpace(name); name != "" {
			o.Systems = append(o.Systems, name)
		}
	}
	if *noSync {
		o.CatenaServerArgs = append(o.CatenaServerArgs, "-no-sync")
	}
	if *loops < 0 {
		return errors.New("-catena-loops must not be negative")
	}
	if *loops > 0 {
		o.CatenaServerArgs = append(o.CatenaServerArgs, "-loops", strconv.Itoa(*loops))
	}
	o.CatenaServerArgs = append(o.CatenaServerArgs, strings.Fields(*serverFlags)...)
	if slices.ContainsFunc(o.Systems, func(name string) bool { return strings.HasPrefix(name, "catena") }) {
		cleanup, err := orCatenaBinary(&o.CatenaBinary)
		if err != nil {
			return err
		}
		defer cleanup()
	}
	if *serverProfiles != "" {
		if err := os.MkdirAll(*serverProfiles, 0o755); err != nil {
			return err
		}
		o.CatenaProfileDir = *serverProfiles
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Compare(ctx, o)
	if err != nil {
		return err
	}
	rep.WriteText(stdout)
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := rep.UpdateMarkdownFile(*out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", *out)
	}
	return nil
}

// joinArgs renders args as they were typed (quoting those with spaces).
func joinArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t'\"") {
			fmt.Fprintf(&b, "%q", a)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// benchOutFlag registers a benchmark's -out: the Markdown file its
// results go into, between that benchmark's generated-output markers.
func benchOutFlag(fs *flag.FlagSet) *string {
	return fs.String("out", "docs/benchmarks.md", "Markdown file to write the results into (between its generated-output markers for this benchmark); empty: none")
}

// benchDirFlag registers a benchmark's -dir, which holds what names.
func benchDirFlag(fs *flag.FlagSet, holds string) *string {
	return fs.String("dir", "", "directory for "+holds+" (default: a temporary directory, removed afterwards)")
}

// benchBinaryFlag registers a benchmark's -binary: the catena binary it
// uses to do what says.
func benchBinaryFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("binary", "", "catena binary to "+what+" (default: catena beside catena-lab, or one built from this source tree)")
}
