package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/backup"
)

// BackupOptions configure RunBackup.
type BackupOptions struct {
	// CatenaBinary runs `catena dev`.
	CatenaBinary string
	// Dir holds dev's data and logs, and the backups unless BackupDir
	// is set.
	Dir string
	// BackupDir is where the backups go (default: Dir/backups).
	BackupDir string
	// Volumes is dev's -volumes (default 2).
	Volumes int
	// Records loaded before the phases (default 100000), of ValueSize
	// bytes (default 1000).
	Records   int
	ValueSize int
	// Clients is the closed-loop clients (default 16), each its own
	// client.Client, running workload A throughout.
	Clients int
	// Warmup runs the workload unmeasured before the first phase
	// (default 5 s; negative: none).
	Warmup time.Duration
	// Phase is each phase's length (default 15 s); Repeat the rounds of
	// a normal phase then a backup phase (default 3).
	Phase  time.Duration
	Repeat int
	// Rate bounds the backup's reads, bytes per second (default 8 MiB/s).
	Rate     int64
	Progress io.Writer
	// Command is the command line, for the report.
	Command string
}

func (o *BackupOptions) defaults() {
	if o.Volumes == 0 {
		o.Volumes = 2
	}
	if o.Records == 0 {
		o.Records = 100_000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 1000
	}
	if o.Clients == 0 {
		o.Clients = 16
	}
	if o.Warmup == 0 {
		o.Warmup = 5 * time.Second
	}
	if o.Phase == 0 {
		o.Phase = 15 * time.Second
	}
	if o.Repeat == 0 {
		o.Repeat = 3
	}
	if o.Rate == 0 {
		o.Rate = 8 << 20
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.BackupDir == "" {
		o.BackupDir = filepath.Join(o.Dir, "backups")
	}
}

// The kinds of phase.
const (
	PhaseNormal = "normal"
	PhaseBackup = "backup"
)

// backupReadFraction is the workload's: YCSB's A, 50% reads and 50%
// updates.
const backupReadFraction = 0.5

// BackupLatencyLimit is issue 34's bound: during a backup the p99
// latencies stay within 25% of normal.
const BackupLatencyLimit = 1.25

// BackupPhase is one phase's measurements. Operations count in the
// phase they started in.
type BackupPhase struct {
	Round   int
	Kind    string
	Elapsed time.Duration
	Ops     int64
	Errors  int64
	Reads   LatencySummary
	Updates LatencySummary
	// BackupBytes is what the phase's backups wrote (their volume files,
	// finished or not); Backups how many whole backups finished, taking
	// BackupTime together.
	BackupBytes int64
	Backups     int
	BackupTime  time.Duration
	// ServerCPU is the CPU time catena dev's processes (master and
	// servers) used in the phase; BenchCPU this process's (the clients
	// and the backup).
	ServerCPU, BenchCPU time.Duration
	// CPUStall and IOStall are the time in the phase some task on the
	// machine waited for a CPU or for I/O (pressure stall information;
	// -1: unknown): how contended the machine was.
	CPUStall, IOStall time.Duration
}

// stallPct renders a stall as a share of the phase, "-" when unknown.
func (p BackupPhase) stallPct(d time.Duration) string {
	if d < 0 || p.Elapsed <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*d.Seconds()/p.Elapsed.Seconds())
}

// cores returns cpu over the phase's length: the cores it kept busy.
func (p BackupPhase) cores(cpu time.Duration) float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return cpu.Seconds() / p.Elapsed.Seconds()
}

// Throughput is operations per second.
func (p BackupPhase) Throughput() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Ops) / p.Elapsed.Seconds()
}

// BackupMiBps is the backup's achieved rate in MiB per second.
func (p BackupPhase) BackupMiBps() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.BackupBytes) / (1 << 20) / p.Elapsed.Seconds()
}

// BackupKindSummary is the median over the rounds of each figure of one
// kind of phase (each figure's own median).
type BackupKindSummary struct {
	Kind                 string
	Rounds               int
	Throughput           float64
	ReadP50, ReadP99     time.Duration
	UpdateP50, UpdateP99 time.Duration
	Errors               int64
	MiBps                float64
	// ServerCores and BenchCores are the cores the servers and the
	// benchmark's process kept busy.
	ServerCores, BenchCores float64
	// Backups is the whole backups finished over every round.
	Backups int
}

// median returns the median of xs (the mean of the two middle ones for
// an even count; 0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarizeBackupPhases returns the summary of the phases of kind.
func summarizeBackupPhases(phases []BackupPhase, kind string) BackupKindSummary {
	s := BackupKindSummary{Kind: kind}
	var tput, r50, r99, u50, u99, errs, mibps, server, bench []float64
	for _, p := range phases {
		if p.Kind != kind {
			continue
		}
		s.Rounds++
		s.Backups += p.Backups
		tput = append(tput, p.Throughput())
		r50, r99 = append(r50, float64(p.Reads.P50)), append(r99, float64(p.Reads.P99))
		u50, u99 = append(u50, float64(p.Updates.P50)), append(u99, float64(p.Updates.P99))
		errs, mibps = append(errs, float64(p.Errors)), append(mibps, p.BackupMiBps())
		server, bench = append(server, p.cores(p.ServerCPU)), append(bench, p.cores(p.BenchCPU))
	}
	s.ServerCores, s.BenchCores = median(server), median(bench)
	s.Throughput = median(tput)
	s.ReadP50, s.ReadP99 = time.Duration(median(r50)), time.Duration(median(r99))
	s.UpdateP50, s.UpdateP99 = time.Duration(median(u50)), time.Duration(median(u99))
	s.Errors, s.MiBps = int64(median(errs)), median(mibps)
	return s
}

// BackupRatios are a backup phase's figures over a normal phase's (0
// where normal's is 0).
type BackupRatios struct {
	Throughput, ReadP50, ReadP99, UpdateP50, UpdateP99 float64
}

func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// backupRatios returns backup's figures over normal's.
func backupRatios(normal, backup BackupKindSummary) BackupRatios {
	return BackupRatios{
		Throughput: ratioOf(backup.Throughput, normal.Throughput),
		ReadP50:    ratioOf(float64(backup.ReadP50), float64(normal.ReadP50)),
		ReadP99:    ratioOf(float64(backup.ReadP99), float64(normal.ReadP99)),
		UpdateP50:  ratioOf(float64(backup.UpdateP50), float64(normal.UpdateP50)),
		UpdateP99:  ratioOf(float64(backup.UpdateP99), float64(normal.UpdateP99)),
	}
}

// Within reports whether both p99 ratios are measured and at most limit.
func (r BackupRatios) Within(limit float64) bool {
	return r.ReadP99 > 0 && r.UpdateP99 > 0 && r.ReadP99 <= limit && r.UpdateP99 <= limit
}

// Verdict is the one-line answer to issue 34: whether the p99
// latencies during a backup stay within BackupLatencyLimit of normal.
func (r BackupRatios) Verdict() string {
	pct := func(x float64) string { return fmt.Sprintf("%+.0f%%", 100*(x-1)) }
	figures := fmt.Sprintf("read p99 %s, update p99 %s (×%.2f and ×%.2f; the bound is ×%.2f)",
		pct(r.ReadP99), pct(r.UpdateP99), r.ReadP99, r.UpdateP99, BackupLatencyLimit)
	switch {
	case r.ReadP99 == 0 || r.UpdateP99 == 0:
		return "UNMEASURED: a phase kind lacks reads or updates"
	case r.Within(BackupLatencyLimit):
		return fmt.Sprintf("PASS: p99 latency during the backup stays within %.0f%% of normal: %s", 100*(BackupLatencyLimit-1), figures)
	default:
		return fmt.Sprintf("FAIL: p99 latency during the backup exceeds normal by more than %.0f%%: %s", 100*(BackupLatencyLimit-1), figures)
	}
}

// BackupReport is what RunBackup measured.
type BackupReport struct {
	Date          time.Time
	Machine       Machine
	Command       string
	CatenaVersion string
	LoadAtStart   float64
	LoadAtEnd     float64
	Options       BackupOptions
	Keyspace      string
	Load          time.Duration
	// DataBytes is the volume files of the first whole backup: the size
	// of one backup.
	DataBytes int64
	Phases    []BackupPhase
}

// backupTime returns the time the whole backups took together, and how
// many finished.
func (r *BackupReport) backupTime() (time.Duration, int) {
	var d time.Duration
	n := 0
	for _, p := range r.Phases {
		d, n = d+p.BackupTime, n+p.Backups
	}
	return d, n
}

// Summaries returns the normal and the backup phases' summaries.
func (r *BackupReport) Summaries() (normal, backup BackupKindSummary) {
	return summarizeBackupPhases(r.Phases, PhaseNormal), summarizeBackupPhases(r.Phases, PhaseBackup)
}

// Ratios returns the backup phases' medians over the normal ones'.
func (r *BackupReport) Ratios() BackupRatios {
	return backupRatios(r.Summaries())
}

// phaseRecorder gathers one phase's operations.
type phaseRecorder struct {
	BackupPhase
	start          time.Time
	reads, updates []time.Duration
	// inflight counts its operations not yet finished.
	inflight atomic.Int64
}

// settle waits until the operations started in the phase finish (at
// most a minute).
func (rec *phaseRecorder) settle() {
	for deadline := time.Now().Add(time.Minute); rec.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// RunBackup starts `catena dev`, loads the records and runs workload A
// with closed-loop clients throughout, while phases alternate: normal
// (no backup), then backup (internal/backup.Run, in this process,
// taking one whole backup after another into new directories for the
// whole phase, the one running at the phase's end cancelled), Repeat
// times.
func RunBackup(ctx context.Context, o BackupOptions) (*BackupReport, error) {
	o.defaults()
	logf := func(format string, args ...any) { fmt.Fprintf(o.Progress, "bench backup: "+format+"\n", args...) }
	rep := &BackupReport{Date: time.Now(), Machine: DescribeMachine(), Command: o.Command, CatenaVersion: catenaVersion(),
		LoadAtStart: loadAverage(), Options: o}

	base, err := freeDevBasePort(1)
	if err != nil {
		return nil, err
	}
	devDir := filepath.Join(o.Dir, "dev")
	master := fmt.Sprintf("127.0.0.1:%d", base)
	logf("starting catena dev -insecure -redis off -volumes %d (master %s)", o.Volumes, master)
	dev, err := startDev(ctx, o.Dir, o.CatenaBinary, "-insecure", "-redis", "off", "-volumes", strconv.Itoa(o.Volumes),
		"-dir", devDir, "-base-port", strconv.Itoa(base), "-http-offset", "0", "-restart-delay", "0")
	if err != nil {
		return nil, err
	}
	defer dev.Stop(stopGrace)
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func() (*client.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := client.Dial(dctx, master)
		if err != nil {
			return nil, fmt.Errorf("dialing %s: %w (logs in %s)", master, err, o.Dir)
		}
		clients = append(clients, c)
		return c, nil
	}
	backupClient, err := dial()
	if err != nil {
		return nil, err
	}
	if _, err := backupClient.Volumes(ctx); err != nil {
		return nil, err
	}
	for _, k := range backupClient.Keyspaces() {
		if k.Prefix == "" {
			rep.Keyspace = fmt.Sprintf("the default keyspace: %s, t=%d, %d volume(s)", k.Mode, k.Replicas, k.Volumes)
		}
	}
	if rep.Keyspace == "" {
		return nil, errors.New("no default keyspace in the client's configuration")
	}
	logf("%s", rep.Keyspace)
	workers := make([]*client.Client, o.Clients)
	for i := range workers {
		if workers[i], err = dial(); err != nil {
			return nil, err
		}
	}

	logf("loading %d records of %d bytes", o.Records, o.ValueSize)
	start := time.Now()
	if err := parallelPuts(ctx, workers[0], loadThreads, o.Records, func(i int) (string, []byte) {
		return backupKey(i), rejoinValue(i, 0, o.ValueSize)
	}); err != nil {
		return nil, fmt.Errorf("loading: %w", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.Load = time.Since(start)
	logf("loaded in %s", rep.Load.Round(time.Millisecond))

	if err := runBackupPhases(ctx, o, rep, workers, backupClient, dev.treeCPUTime, logf); err != nil {
		return nil, err
	}
	rep.LoadAtEnd = loadAverage()
	return rep, nil
}

// loadThreads is the writers loading the records.
const loadThreads = 64

func backupKey(i int) string { return fmt.Sprintf("backup/user%07d", i) }

// runBackupPhases runs the clients throughout and the phases one after
// the other.
func runBackupPhases(ctx context.Context, o BackupOptions, rep *BackupReport, workers []*client.Client, backupClient *client.Client,
	serverCPU func() time.Duration, logf func(string, ...any)) error {
	// The clients record into the current phase's recorder (nil: stop).
	var mu sync.Mutex
	var cur atomic.Pointer[phaseRecorder]
	var recent []time.Duration // updates since the last progress line
	warmup := &phaseRecorder{BackupPhase: BackupPhase{Kind: "warmup"}, start: time.Now()}
	cur.Store(warmup)
	var wg sync.WaitGroup
	for i, c := range workers {
		value := rejoinValue(-1-i, 1, o.ValueSize)
		wg.Go(func() {
			var rec *phaseRecorder
			more := func() bool {
				if rec = cur.Load(); rec == nil {
					return false
				}
				rec.inflight.Add(1)
				return true
			}
			closedLoop(ctx, c, more, backupReadFraction, o.Records, backupKey, value, func(read bool, d time.Duration, err error) {
				defer rec.inflight.Add(-1)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					if ctx.Err() == nil {
						rec.Errors++
					}
				case read:
					rec.Ops++
					rec.reads = append(rec.reads, d)
				default:
					rec.Ops++
					rec.updates = append(rec.updates, d)
					recent = append(recent, d)
				}
			})
		})
	}
	defer func() { cur.Store(nil); wg.Wait() }()

	tick := time.NewTicker(geoBucket)
	defer tick.Stop()
	var lastOps int64
	lastAt, lastRec := time.Now(), (*phaseRecorder)(nil)
	// wait waits for d, printing progress lines; backups, if not nil,
	// tells the running backup's bytes and finished backups.
	wait := func(d time.Duration, backups func() (int64, int)) error {
		end := time.After(d)
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-end:
				return nil
			case now := <-tick.C:
				rec := cur.Load()
				mu.Lock()
				n, errs := rec.Ops, rec.Errors
				up := summarize(recent)
				recent = nil
				mu.Unlock()
				if rec != lastRec { // a new phase began since the last line
					lastOps, lastAt, lastRec = 0, rec.start, rec
				}
				line := fmt.Sprintf("  %s", rec.Kind)
				if rec.Round > 0 {
					line += fmt.Sprintf(" %d/%d", rec.Round, o.Repeat)
				}
				line += fmt.Sprintf(" %3.0fs: %6.0f ops/s, updates p50 %s p99 %s, %d errors",
					now.Sub(rec.start).Seconds(), float64(n-lastOps)/max(now.Sub(lastAt).Seconds(), 1e-3), msStr(up.P50), msStr(up.P99), errs)
				if backups != nil {
					b, done := backups()
					line += fmt.Sprintf("; backup %.1f MiB, %.1f MiB/s, %d finished", float64(b)/(1<<20),
						float64(b)/(1<<20)/max(now.Sub(rec.start).Seconds(), 1e-3), done)
				}
				logf("%s", line)
				lastOps, lastAt = n, now
			}
		}
	}
	if o.Warmup > 0 {
		logf("warm-up: workload A (50%% reads, 50%% updates, uniform keys) with %d clients for %s, not measured", len(workers), o.Warmup)
		if err := wait(o.Warmup, nil); err != nil {
			return err
		}
	}

	for round := 1; round <= o.Repeat; round++ {
		for _, kind := range []string{PhaseNormal, PhaseBackup} {
			server0, bench0 := serverCPU(), selfCPUTime()
			cpuStall0, ioStall0 := pressureStall("cpu"), pressureStall("io")
			rec := &phaseRecorder{BackupPhase: BackupPhase{Round: round, Kind: kind}, start: time.Now()}
			mu.Lock()
			recent = nil
			mu.Unlock()
			cur.Store(rec)
			logf("round %d/%d: %s phase for %s", round, o.Repeat, kind, o.Phase)
			var loop *backupLoop
			var progress func() (int64, int)
			if kind == PhaseBackup {
				loop = startBackupLoop(ctx, backupClient, filepath.Join(o.BackupDir, fmt.Sprintf("round%d", round)), o.Rate, logf)
				progress = loop.progress
			}
			err := wait(o.Phase, progress)
			// The operations from here on count in no phase until the
			// next begins.
			end := time.Now()
			cur.Store(&phaseRecorder{BackupPhase: BackupPhase{Kind: "between"}, start: end})
			rec.ServerCPU, rec.BenchCPU = serverCPU()-server0, selfCPUTime()-bench0
			rec.CPUStall, rec.IOStall = stallSince(cpuStall0, "cpu"), stallSince(ioStall0, "io")
			if loop != nil {
				loop.stop()
				rec.BackupBytes, rec.Backups = loop.progress()
				rec.BackupTime = loop.finishedTime
				if loop.err != nil {
					return fmt.Errorf("round %d: backup: %w", round, loop.err)
				}
				if rep.DataBytes == 0 && loop.firstBytes > 0 {
					rep.DataBytes = loop.firstBytes
				}
			}
			if err != nil {
				return err
			}
			rec.settle()
			mu.Lock()
			rec.Elapsed = end.Sub(rec.start)
			p := rec.BackupPhase
			p.Reads, p.Updates = summarize(slices.Clone(rec.reads)), summarize(slices.Clone(rec.updates))
			mu.Unlock()
			rep.Phases = append(rep.Phases, p)
			line := fmt.Sprintf("round %d/%d %s: %.0f ops/s, reads p50 %s p99 %s, updates p50 %s p99 %s, %d errors; CPU: servers %.2f cores, benchmark %.2f",
				round, o.Repeat, kind, p.Throughput(), msStr(p.Reads.P50), msStr(p.Reads.P99), msStr(p.Updates.P50), msStr(p.Updates.P99), p.Errors,
				p.cores(p.ServerCPU), p.cores(p.BenchCPU))
			line += fmt.Sprintf("; stalls: CPU %s, I/O %s", p.stallPct(p.CPUStall), p.stallPct(p.IOStall))
			if kind == PhaseBackup {
				line += fmt.Sprintf("; backup %.1f MiB/s, %d whole backups", p.BackupMiBps(), p.Backups)
			}
			logf("%s", line)
		}
	}
	return nil
}

// stallSince returns the stall on resource since since (-1: unknown).
func stallSince(since time.Duration, resource string) time.Duration {
	now := pressureStall(resource)
	if since < 0 || now < 0 {
		return -1
	}
	return now - since
}

// backupLoop takes one whole backup after another into new directories
// under dir until stopped.
type backupLoop struct {
	dir    string
	cancel context.CancelFunc
	done   chan struct{}

	mu           sync.Mutex
	finished     int
	finishedTime time.Duration
	firstBytes   int64
	err          error
}

func startBackupLoop(ctx context.Context, c *client.Client, dir string, rate int64, logf func(string, ...any)) *backupLoop {
	ctx, cancel := context.WithCancel(ctx)
	l := &backupLoop{dir: dir, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 1; ctx.Err() == nil; i++ {
			d := filepath.Join(dir, strconv.Itoa(i))
			began := time.Now()
			m, err := backup.Run(ctx, backup.Options{Client: c, Dir: d, Rate: rate, Release: "bench"})
			if ctx.Err() != nil {
				return // stopped: the backup running is cut short
			}
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			var objects, size int64
			for _, v := range m.Volumes {
				objects, size = objects+v.Objects, size+v.Bytes
			}
			took := time.Since(began)
			logf("  backup %d finished: %d volumes, %d objects, %.1f MiB in %s", i, len(m.Volumes), objects, float64(size)/(1<<20), took.Round(time.Millisecond))
			l.mu.Lock()
			l.finished++
			l.finishedTime += took
			if l.firstBytes == 0 {
				l.firstBytes = size
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// stop cancels the running backup and waits for the loop to end.
func (l *backupLoop) stop() {
	l.cancel()
	<-l.done
}

// progress returns the bytes the loop's backups wrote so far (the sizes
// of their volume files, finished and unfinished: an unfinished one's
// last MiB may still be in its buffer) and the backups finished.
func (l *backupLoop) progress() (int64, int) {
	var n int64
	filepath.WalkDir(l.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if name := d.Name(); strings.HasPrefix(name, "volume-") && (strings.HasSuffix(name, ".data") || strings.HasSuffix(name, ".data.tmp")) {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return n, l.finished
}

// WriteMarkdown writes the report as Markdown.
func (r *BackupReport) WriteMarkdown(w io.Writer) {
	m, o := r.Machine, r.Options
	normal, bk := r.Summaries()
	ratios := backupRatios(normal, bk)
	fmt.Fprintf(w, "Run on %s.\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- Machine: %d cores (%s), %.1f GiB memory, %s, Linux %s, %s; 1-minute load average before the run: %.1f, after it: %.1f\n",
		m.Cores, m.CPU, m.MemoryGiB, m.OS, m.Kernel, m.Go, r.LoadAtStart, r.LoadAtEnd)
	fmt.Fprintf(w, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- Catena (%s): `catena dev -insecure -redis off -volumes %d` (a master and 3 servers as processes on this machine, Pebble with fsync on); %s.\n",
		r.CatenaVersion, o.Volumes, r.Keyspace)
	size := "-"
	if r.DataBytes > 0 {
		size = fmt.Sprintf("%.1f MiB", float64(r.DataBytes)/(1<<20))
	}
	warm := "no warm-up"
	if o.Warmup > 0 {
		warm = o.Warmup.String() + " of warm-up"
	}
	fmt.Fprintf(w, "- %d records of %d bytes loaded (in %s; one whole backup: %s), then workload A (50%% reads, 50%% updates, keys chosen uniformly) with %d closed-loop clients, each its own `client.Client`, throughout: %s, then %d round(s) of a %s normal phase and a %s backup phase. An operation counts in the phase it started in.\n",
		o.Records, o.ValueSize, r.Load.Round(time.Millisecond), size, o.Clients, warm, o.Repeat, o.Phase, o.Phase)
	where := "beside the servers' data, on their disk"
	if rel, err := filepath.Rel(o.Dir, o.BackupDir); err != nil || strings.HasPrefix(rel, "..") {
		where = "under -backup-dir " + o.BackupDir
	}
	fmt.Fprintf(w, "- Backup phase: `internal/backup.Run` in the benchmark's process (what `catena backup` runs) with rate %.1f MiB/s, one whole backup after another, each into a new directory %s; the one running when the phase ends is cancelled. Backup MiB/s: the volume files written during the phase over its length. CPU: the cores the servers and master (catena dev's processes) and the benchmark's process (clients and backup) kept busy. Stalls (per phase): the share of the phase in which some task on the machine, ours or not, waited for a CPU or for I/O (Linux's pressure stall information): how contended the shared machine was.\n\n",
		float64(o.Rate)/(1<<20), where)
	fmt.Fprintln(w, "| phase | rounds | ops/s | read p50 ms | read p99 ms | update p50 ms | update p99 ms | errors | backup MiB/s | whole backups | servers' CPU | benchmark's CPU |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range []BackupKindSummary{normal, bk} {
		mibps, backups := "-", "-"
		if s.Kind == PhaseBackup {
			mibps, backups = fmt.Sprintf("%.1f", s.MiBps), strconv.Itoa(s.Backups)
		}
		fmt.Fprintf(w, "| %s (median) | %d | %.0f | %s | %s | %s | %s | %d | %s | %s | %.2f | %.2f |\n", s.Kind, s.Rounds, s.Throughput,
			msCell(s.ReadP50), msCell(s.ReadP99), msCell(s.UpdateP50), msCell(s.UpdateP99), s.Errors, mibps, backups, s.ServerCores, s.BenchCores)
	}
	fmt.Fprintf(w, "| backup/normal | | %.2f | %.2f | %.2f | %.2f | %.2f | | | | %.2f | %.2f |\n",
		ratios.Throughput, ratios.ReadP50, ratios.ReadP99, ratios.UpdateP50, ratios.UpdateP99,
		ratioOf(bk.ServerCores, normal.ServerCores), ratioOf(bk.BenchCores, normal.BenchCores))
	if took, n := r.backupTime(); n > 0 {
		fmt.Fprintf(w, "\nA whole backup took %.1f s on average (%d finished).\n", took.Seconds()/float64(n), n)
	}
	fmt.Fprintf(w, "\n**Verdict (issue 34): %s.**\n", ratios.Verdict())
	fmt.Fprintln(w, "\nEvery phase (×: the backup phase's p99 over its round's normal phase's):")
	fmt.Fprintln(w, "\n| round | phase | ops/s | read p50 ms | read p99 ms | update p50 ms | update p99 ms | errors | backup MiB/s | whole backups | servers' CPU | benchmark's CPU | CPU stall | I/O stall |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var roundNormal *BackupPhase
	for i, p := range r.Phases {
		mibps, backups := "-", "-"
		readP99, updateP99 := msCell(p.Reads.P99), msCell(p.Updates.P99)
		if p.Kind == PhaseNormal {
			roundNormal = &r.Phases[i]
		}
		if p.Kind == PhaseBackup {
			mibps, backups = fmt.Sprintf("%.1f", p.BackupMiBps()), strconv.Itoa(p.Backups)
			if n := roundNormal; n != nil && n.Round == p.Round {
				readP99 += fmt.Sprintf(" (×%.2f)", ratioOf(float64(p.Reads.P99), float64(n.Reads.P99)))
				updateP99 += fmt.Sprintf(" (×%.2f)", ratioOf(float64(p.Updates.P99), float64(n.Updates.P99)))
			}
		}
		fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %d | %s | %s | %.2f | %.2f | %s | %s |\n", p.Round, p.Kind, p.Throughput(),
			msCell(p.Reads.P50), readP99, msCell(p.Updates.P50), updateP99, p.Errors, mibps, backups, p.cores(p.ServerCPU), p.cores(p.BenchCPU),
			p.stallPct(p.CPUStall), p.stallPct(p.IOStall))
	}
}

// Markers delimit the generated part of `catena-lab bench backup` in
// docs/benchmarks.md.
const (
	BackupBeginMarker = "<!-- BEGIN catena bench backup output: generated, do not edit -->"
	BackupEndMarker   = "<!-- END catena bench backup output -->"
)

// UpdateMarkdownFile writes the report between its markers in path, or
// appends a section with them when path lacks them.
func (r *BackupReport) UpdateMarkdownFile(path string) error {
	var gen bytes.Buffer
	r.WriteMarkdown(&gen)
	return updateMarkedSection(path, BackupBeginMarker, BackupEndMarker, "Issue 34: latency during an online backup", gen.Bytes())
}
