package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Names of the systems a comparison runs.
const (
	SystemCatena   = "catena"    // 3 replicas, the Go client
	SystemCatenaT1 = "catena-t1" // 1 replica: the replication tax
	// SystemCatenaRESP is Catena with 3 replicas through its Redis
	// protocol proxy, with go-redis: the client library the Redis run
	// uses.
	SystemCatenaRESP = "catena-resp"
	// SystemCatenaRESPServers is Catena with 3 replicas through each
	// server's own Redis front end (catena server -redis-listen), the
	// YCSB threads spread over the servers, go-redis as for Redis.
	SystemCatenaRESPServers = "catena-resp-servers"
	SystemEtcd              = "etcd"
	SystemRedis             = "redis"
	// SystemRedisAlways is Redis with appendfsync always: every write on
	// disk before its answer, as every Catena replica's is (the
	// durability-matched peer).
	SystemRedisAlways = "redis-always"
	// SystemCatenaCausal is Catena with 3 replicas and the records in a
	// causal+ keyspace with k=2 (ChainReaction), the Go client.
	SystemCatenaCausal = "catena-causal"
	// SystemCatenaTLS is SystemCatena with every link, the client's too,
	// over mutual TLS 1.3: the cost of TLS.
	SystemCatenaTLS = "catena-tls"
	// SystemCatenaCRAQ is SystemCatena with its reads at any member of the
	// chain (client.AnyMember: CRAQ, a clean key answered where it is
	// asked, a dirty one at the tail): reads spread over three processes,
	// as catena-causal's are, in a strong keyspace.
	SystemCatenaCRAQ = "catena-craq"
)

// causalK is catena-causal's k: writes are answered by 2 of the 3
// replicas.
const causalK = 2

// AllSystems are the systems of a full comparison, in the order they run.
var AllSystems = []string{SystemCatena, SystemEtcd, SystemRedis, SystemRedisAlways, SystemCatenaT1, SystemCatenaRESP, SystemCatenaRESPServers, SystemCatenaCausal, SystemCatenaTLS, SystemCatenaCRAQ}

// CompareOptions configure Compare.
type CompareOptions struct {
	Sizing Sizing
	// Workloads run in YCSB's recommended order (A, B, C, F, D) whatever
	// the order given.
	Workloads []Workload
	// Systems to run (AllSystems by default).
	Systems []string
	// CatenaBinary is the catena binary the cluster runs.
	CatenaBinary string
	// Dir holds data directories and logs; a new temporary directory when
	// empty, removed afterwards unless KeepDir.
	Dir     string
	KeepDir bool
	// Install installs missing etcd and Redis packages with apt-get.
	Install bool
	// PhaseTimeout cuts a load or workload run short (reported as
	// incomplete).
	PhaseTimeout time.Duration
	// PerThreadClients gives each Catena thread its own client.
	PerThreadClients bool
	// CatenaServerArgs are extra flags for `catena server`.
	CatenaServerArgs []string
	// CatenaProfileDir, if set, gets a CPU profile of every Catena server
	// (SYSTEM-sN.pprof).
	CatenaProfileDir string
	// Repeat runs every system this many times (at least once), in
	// rounds: each round runs every system once, the order rotated by one
	// from round to round, so drift on the machine falls on every system
	// alike. The report's figures are then each (system, phase)'s median
	// run, beside the spread over the rounds (Report.Rounds).
	Repeat int
	// Command is the command line, for the report.
	Command string
	// Progress receives progress lines (at least one every 10 seconds).
	Progress io.Writer
}

// Run is the result of one phase (load or workload) on one system.
type Run struct {
	System   string
	Workload string // "load" or a workload letter
	// Round is the round the run belongs to (1 unless
	// CompareOptions.Repeat).
	Round int
	PhaseResult
}

// SystemInfo describes a system as it ran.
type SystemInfo struct {
	Name, Setup, Version string
	Pids                 []int
	// Memory is each process's peak resident memory over the system's
	// whole run (load and every workload).
	Memory []ProcessMemory
}

// Report is a comparison's outcome.
type Report struct {
	Date    time.Time
	Machine Machine
	Command string
	Sizing  Sizing
	Systems []SystemInfo
	// Runs are the figures the tables show: each (system, phase)'s run of
	// median throughput over the rounds (its only run with one round).
	Runs []Run
	// Rounds are every run of every round, in the order they ran (nil
	// with one round).
	Rounds   []Run
	Notes    []string
	Duration time.Duration
	// LoadAtStart is the machine's 1-minute load average before the run:
	// other work on the machine skews the numbers.
	LoadAtStart float64
}

// Find returns the run of a system and workload.
func (r *Report) Find(system, workload string) (Run, bool) {
	for _, run := range r.Runs {
		if run.System == system && run.Workload == workload {
			return run, true
		}
	}
	return Run{}, false
}

// runOrder is YCSB's recommended order: D inserts records, so it runs last.
var runOrder = []string{"A", "B", "C", "F", "D", "E"}

// Compare starts each system in turn, loads the same records into it, runs
// the workloads with the same thread and operation counts, and stops it.
func Compare(ctx context.Context, o CompareOptions) (*Report, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if len(o.Systems) == 0 {
		o.Systems = AllSystems
	}
	if len(o.Workloads) == 0 {
		o.Workloads = Workloads
	}
	workloads := slices.Clone(o.Workloads)
	slices.SortFunc(workloads, func(a, b Workload) int {
		return slices.Index(runOrder, a.Name) - slices.Index(runOrder, b.Name)
	})
	if o.PhaseTimeout == 0 {
		o.PhaseTimeout = 3 * time.Minute
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "catena-bench-")
		if err != nil {
			return nil, err
		}
		o.Dir = d
		if !o.KeepDir {
			defer os.RemoveAll(d)
		}
	}
	start := time.Now()
	rep := &Report{Date: start, Machine: DescribeMachine(), Command: o.Command, Sizing: o.Sizing, LoadAtStart: loadAverage()}
	var (
		logMu    sync.Mutex
		lastLine = time.Now()
		activity = "starting"
	)
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		line := fmt.Sprintf(format, args...)
		fmt.Fprintf(o.Progress, "[%5.0fs] %s\n", time.Since(start).Seconds(), line)
		lastLine = time.Now()
		activity = line
	}
	// A line at least every 10 seconds, even while installing or
	// starting a system.
	heartbeatDone := make(chan struct{})
	defer close(heartbeatDone)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-heartbeatDone:
				return
			case <-t.C:
				logMu.Lock()
				quiet, what := time.Since(lastLine), activity
				logMu.Unlock()
				if quiet >= 9*time.Second {
					logf("... still busy since: %s", strings.TrimPrefix(what, "... still busy since: "))
				}
			}
		}
	}()
	logf("bench: %d records, %d operations per workload, %d threads; data and logs in %s",
		o.Sizing.Records, o.Sizing.Operations, o.Sizing.Threads, o.Dir)
	if slices.Contains(o.Systems, SystemEtcd) || slices.Contains(o.Systems, SystemRedis) || slices.Contains(o.Systems, SystemRedisAlways) {
		if o.Install {
			if err := EnsureInstalled(ctx, logWriter(logf)); err != nil {
				return nil, err
			}
		}
	}
	rounds := max(o.Repeat, 1)
	for round := 1; round <= rounds; round++ {
		if rounds > 1 {
			logf("bench: round %d of %d", round, rounds)
		}
		for _, name := range roundOrder(o.Systems, round) {
			if err := runOneSystem(ctx, name, round, rounds, workloads, o, rep, logf); err != nil {
				return rep, err
			}
		}
	}
	if rounds > 1 {
		rep.Rounds = rep.Runs
		rep.Runs = medianRuns(rep.Rounds)
	}
	rep.Duration = time.Since(start)
	logf("bench: done in %s", rep.Duration.Round(time.Second))
	return rep, nil
}

// roundOrder is the order the systems run in round (from 1): rotated
// by one per round.
func roundOrder(systems []string, round int) []string {
	if len(systems) == 0 {
		return nil
	}
	i := (round - 1) % len(systems)
	return append(slices.Clone(systems[i:]), systems[:i]...)
}

// runOneSystem starts system name in a data directory of its own for the
// round, loads and runs the workloads, and stops it. Its information
// (setup, version, peak memory over the rounds) is recorded once.
func runOneSystem(ctx context.Context, name string, round, rounds int, workloads []Workload, o CompareOptions, rep *Report, logf func(string, ...any)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Join(o.Dir, name)
	if rounds > 1 {
		dir = filepath.Join(o.Dir, fmt.Sprintf("%s-round%d", name, round))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if rounds > 1 && o.CatenaProfileDir != "" {
		// Each round's profiles apart, not written over by the next.
		o.CatenaProfileDir = filepath.Join(o.CatenaProfileDir, fmt.Sprintf("round%d", round))
		if err := os.MkdirAll(o.CatenaProfileDir, 0o755); err != nil {
			return err
		}
	}
	logf("%s: starting", name)
	sys, err := startSystem(ctx, name, dir, o)
	if err != nil {
		if sys != nil {
			sys.Stop()
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	logf("%s: running (pids %v): %s", name, sys.Pids(), sys.Setup)
	i := slices.IndexFunc(rep.Systems, func(s SystemInfo) bool { return s.Name == name })
	if i < 0 {
		rep.Systems = append(rep.Systems, SystemInfo{Name: name, Setup: sys.Setup, Version: sys.Version, Pids: sys.Pids()})
		i = len(rep.Systems) - 1
	}
	err = runSystem(ctx, sys, round, workloads, o, rep, logf)
	rep.Systems[i].Memory = maxMemory(rep.Systems[i].Memory, sys.PeakRSS())
	logf("%s: stopping pids %v", name, sys.Pids())
	sys.Stop()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// maxMemory returns, per process, the larger peak of a and b (b's
// processes when a has none).
func maxMemory(a, b []ProcessMemory) []ProcessMemory {
	if len(a) != len(b) {
		return b
	}
	out := slices.Clone(a)
	for i := range out {
		out[i].PeakRSS = max(out[i].PeakRSS, b[i].PeakRSS)
	}
	return out
}

// medianRuns returns, for each (system, phase) of runs, the run of median
// throughput (the lower of the two middle ones for an even count), in the
// order the pairs first ran.
func medianRuns(runs []Run) []Run {
	type key struct{ system, workload string }
	var order []key
	by := map[key][]Run{}
	for _, r := range runs {
		k := key{r.System, r.Workload}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	out := make([]Run, 0, len(order))
	for _, k := range order {
		rs := slices.Clone(by[k])
		slices.SortStableFunc(rs, func(a, b Run) int { return cmp.Compare(a.Throughput(), b.Throughput()) })
		out = append(out, rs[(len(rs)-1)/2])
	}
	return out
}

func startSystem(ctx context.Context, name, dir string, o CompareOptions) (*System, error) {
	switch name {
	case SystemCatena, SystemCatenaT1, SystemCatenaRESP, SystemCatenaRESPServers, SystemCatenaCausal, SystemCatenaTLS, SystemCatenaCRAQ:
		if o.CatenaBinary == "" {
			return nil, errors.New("no catena binary")
		}
		replicas, k := 3, 0
		if name == SystemCatenaT1 {
			replicas = 1
		}
		if name == SystemCatenaCausal {
			k = causalK
		}
		return StartCatena(ctx, CatenaOptions{Binary: o.CatenaBinary, Dir: dir, Replicas: replicas, Name: name,
			PerThreadClients: o.PerThreadClients, FieldCount: o.Sizing.FieldCount, ServerArgs: o.CatenaServerArgs, ProfileDir: o.CatenaProfileDir,
			Proxy: name == SystemCatenaRESP, ServerRedis: name == SystemCatenaRESPServers, Threads: o.Sizing.Threads, CausalK: k, TLS: name == SystemCatenaTLS,
			AnyMemberReads: name == SystemCatenaCRAQ})
	case SystemEtcd:
		return StartEtcd(ctx, EtcdOptions{Dir: dir, Members: 3, FieldCount: o.Sizing.FieldCount})
	case SystemRedis, SystemRedisAlways:
		return StartRedis(ctx, RedisOptions{Dir: dir, Threads: o.Sizing.Threads, FsyncAlways: name == SystemRedisAlways})
	}
	return nil, fmt.Errorf("unknown system %q (want one of %v)", name, AllSystems)
}

// runSystem loads the records and runs each workload on a started system.
func runSystem(ctx context.Context, sys *System, round int, workloads []Workload, o CompareOptions, rep *Report, logf func(string, ...any)) error {
	db, err := sys.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	phases := append([]*Workload{nil}, func() []*Workload {
		var out []*Workload
		for i := range workloads {
			out = append(out, &workloads[i])
		}
		return out
	}()...)
	for _, w := range phases {
		label, total := "load", o.Sizing.Records
		if w != nil {
			label, total = w.Name, o.Sizing.Operations
		}
		if w != nil && w.Scans && !sys.scans {
			logf("%s %s: skipped: the system reads no ranges of keys", sys.Name, label)
			continue
		}
		wl, err := newCoreWorkload(o.Sizing.properties(w))
		if err != nil {
			return err
		}
		before := ""
		if sys.state != nil {
			before = sys.state(ctx)
		}
		var metadata func() Metadata
		if src, ok := db.(metadataSource); ok && sys.causal {
			metadata = sampleMetadata(src)
		}
		serverCPU, clientCPU := sys.CPUTime(), selfCPUTime()
		pctx, cancel := context.WithTimeout(ctx, o.PhaseTimeout)
		res, err := phase{
			workload: wl, db: db, threads: o.Sizing.Threads, total: total, load: w == nil,
			progressEvery: 5 * time.Second,
			progress: func(done int64, elapsed time.Duration) {
				logf("%s %s: %d/%d operations, %.0f ops/s", sys.Name, label, done, total, float64(done)/elapsed.Seconds())
			},
		}.run(pctx)
		cancel()
		wl.Close()
		if metadata != nil {
			m := metadata()
			res.Metadata = &m
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res.ServerCPU, res.ClientCPU = sys.CPUTime()-serverCPU, selfCPUTime()-clientCPU
		res.Load = loadAverage()
		all := res.Ops[OpAll]
		scpu, ccpu := res.CPUPerOp()
		logf("%s %s: %d operations in %.1fs: %.0f ops/s, p50 %s, p99 %s, %d errors; CPU per operation: servers %dµs, client %dµs; load average %.1f",
			sys.Name, label, res.Operations, res.Elapsed.Seconds(), res.Throughput(), fmtMs(all.P50), fmtMs(all.P99), res.Errors,
			scpu.Microseconds(), ccpu.Microseconds(), res.Load)
		if m := res.Metadata; m != nil {
			logf("%s %s: causal metadata per client: mean %.1f keys (sampled every %s), max %d; %d client(s)",
				sys.Name, label, m.Mean, metadataEvery, m.Max, m.Clients)
		}
		rep.Runs = append(rep.Runs, Run{System: sys.Name, Workload: label, Round: round, PhaseResult: res})
		name := sys.Name
		if o.Repeat > 1 {
			name = fmt.Sprintf("%s (round %d)", sys.Name, round)
		}
		for _, op := range []string{OpRead, OpUpdate, OpInsert, OpScan} {
			if st := res.Ops[op]; st.Errors > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s: %d of %d %s operations failed, e.g. %q.", name, label, st.Errors, st.Count, op, st.FirstError))
			}
		}
		if !res.Complete {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s was cut short after %s: %d of %d operations.",
				name, label, o.PhaseTimeout, res.Operations, total))
		}
		if sys.state != nil {
			if after := sys.state(ctx); after != before {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s changed during %s: %s → %s (a chain reconfiguration).", name, label, before, after))
				logf("%s %s: state changed: %s → %s", sys.Name, label, before, after)
			}
		}
	}
	return nil
}

// logWriter turns lines written to it into progress lines.
type logWriter func(string, ...any)

func (l logWriter) Write(p []byte) (int, error) {
	l("%s", string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
