package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/catena-kv/catena/client"
)

// Watch throughput and lag (issue 37): one writer at a fixed rate over
// the keys of a prefix, and W watchers of that prefix, each its own
// client.Watch; the watchers share a few clients (connections), so the
// figures are the watches' cost, not that of a thousand connections.

// WatchOptions configure RunWatch.
type WatchOptions struct {
	// CatenaBinary runs the master and the servers; Dir holds their data
	// and logs.
	CatenaBinary string
	Dir          string
	// Replicas is the servers, all in the one chain (default 3).
	Replicas int
	// Watchers are the numbers of watchers measured, one after the
	// other (default 1, 100, 1000).
	Watchers []int
	// Clients is how many client.Clients the watchers share (default 4;
	// fewer when there are fewer watchers), watcher i on client i mod
	// Clients. The writer has a client of its own.
	Clients int
	// Rate is the writes a second the writer issues (default 1000), with
	// at most Writers of them in flight (default 256).
	Rate    int
	Writers int
	// Keys is how many keys the writer cycles over (default 1000), each
	// value ValueSize bytes (default 100, at least 8: it starts with the
	// write's sequence number).
	Keys      int
	ValueSize int
	// Warmup runs the writer and the watchers unmeasured first (default
	// 3 s); Duration is the measurement (default 10 s); Drain how long
	// the watchers may take, after it, to receive the measured writes'
	// events (default 10 s).
	Warmup, Duration, Drain time.Duration
	// Hold is client.WatchHold (0: the client's default).
	Hold time.Duration
	// ProfileDir, if set, gets each server's CPU profile (watch-sN.pprof).
	ProfileDir string
	Progress   io.Writer
	// Command is the command line, for the report.
	Command string
}

func (o *WatchOptions) defaults() {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if len(o.Watchers) == 0 {
		o.Watchers = []int{1, 100, 1000}
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Rate == 0 {
		o.Rate = 1000
	}
	if o.Writers == 0 {
		o.Writers = 256
	}
	if o.Keys == 0 {
		o.Keys = 1000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 100
	}
	o.ValueSize = max(o.ValueSize, 8)
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Drain == 0 {
		o.Drain = 10 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// watchPrefix is the prefix the writer writes under and the watchers
// watch.
const watchPrefix = "watchbench/"

// watchEstablishMax bounds the wait, after the warm-up, for every
// watcher to have received an event (and so to be following the prefix
// from a known revision).
const watchEstablishMax = time.Minute

// watchProgressEvery is how often a progress line is printed.
const watchProgressEvery = 2 * time.Second

// Watch lags are recorded in microseconds, from 0 up to two minutes
// (longer ones count as two minutes), to 3 significant digits.
const (
	watchHistMax    = int64(2 * time.Minute / time.Microsecond)
	watchHistDigits = 3
)

func watchKey(seq int64, keys int) string {
	return fmt.Sprintf("%sk%05d", watchPrefix, seq%int64(keys))
}

// WatchResult is one number of watchers' measurements.
type WatchResult struct {
	Watchers, Clients int
	// Elapsed is the measurement's length.
	Elapsed time.Duration
	// Writes were issued in the measurement and answered; WriteErrors
	// failed (and are not expected by the watchers). Put is their
	// latency.
	Writes, WriteErrors int64
	Put                 LatencySummary
	// Delivered is the events the watchers received during the
	// measurement, of any write.
	Delivered int64
	// Expected is Writes × Watchers: the events of the measured writes;
	// Missing those some watcher had not received when the drain ended;
	// Duplicates the events a watcher received twice.
	Expected, Missing, Duplicates int64
	// Lag is from a measured write's answer (Put returned) to a watcher
	// receiving its event, over every watcher and measured write; Early
	// is how many events arrived before their Put returned, counted with
	// lag 0.
	Lag   LatencySummary
	Early int64
	// FromStart is from a measured write's start (Put called) to a
	// watcher receiving its event: the write's own latency included.
	FromStart LatencySummary
	// Drained is how long after the measurement the last measured event
	// arrived (or the drain's limit).
	Drained time.Duration
	// WatchErrors is how many watches ended with an error, FirstError
	// the first.
	WatchErrors int
	FirstError  string
	// ServerCPU is the servers' CPU time in the measurement (the master
	// not included), BenchCPU this process's (the writer and every
	// watcher).
	ServerCPU, BenchCPU time.Duration
}

// EventsPerSecond is the events delivered a second in the measurement.
func (r WatchResult) EventsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Delivered) / r.Elapsed.Seconds()
}

// WritesPerSecond is the measured writes answered a second.
func (r WatchResult) WritesPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Writes) / r.Elapsed.Seconds()
}

// Cores returns cpu over the measurement's length: the cores it kept
// busy.
func (r WatchResult) Cores(cpu time.Duration) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return cpu.Seconds() / r.Elapsed.Seconds()
}

// Complete reports whether every watcher received every measured write
// once.
func (r WatchResult) Complete() bool {
	return r.Missing == 0 && r.Duplicates == 0 && r.WatchErrors == 0
}

// WatchReport is what RunWatch measured.
type WatchReport struct {
	Date          time.Time
	Machine       Machine
	Command       string
	CatenaVersion string
	LoadAtStart   float64
	LoadAtEnd     float64
	Options       WatchOptions
	Setup         string
	Results       []WatchResult
}

// RunWatch starts a master and Replicas servers as processes, then for
// each number of watchers: starts them, runs the writer at Rate, warms
// up, measures for Duration and waits for the measured writes' events.
func RunWatch(ctx context.Context, o WatchOptions) (*WatchReport, error) {
	o.defaults()
	logf := func(format string, args ...any) { fmt.Fprintf(o.Progress, "bench watch: "+format+"\n", args...) }
	rep := &WatchReport{Date: time.Now(), Machine: DescribeMachine(), Command: o.Command, CatenaVersion: catenaVersion(),
		LoadAtStart: loadAverage(), Options: o}
	logf("starting a master and %d servers (one chain of %d)", o.Replicas, o.Replicas)
	sys, err := StartCatena(ctx, CatenaOptions{Binary: o.CatenaBinary, Dir: o.Dir, Replicas: o.Replicas, Name: "watch", ProfileDir: o.ProfileDir})
	if err != nil {
		return nil, err
	}
	defer sys.Stop()
	rep.Setup = fmt.Sprintf("a `catena master` and %d `catena server` processes on this machine, one volume, its chain of %d (t=%d), Pebble with fsync on every group commit (the default)",
		o.Replicas, o.Replicas, o.Replicas)
	servers := sys.procs[1:] // (the master first)
	serverCPU := func() time.Duration {
		var t time.Duration
		for _, p := range servers {
			t += p.cpuTime()
		}
		return t
	}
	for _, w := range o.Watchers {
		res, err := runWatchers(ctx, o, sys.masterAddr, w, serverCPU, logf)
		if err != nil {
			return nil, fmt.Errorf("%d watchers: %w (logs in %s)", w, err, o.Dir)
		}
		rep.Results = append(rep.Results, res)
	}
	rep.LoadAtEnd = loadAverage()
	return rep, nil
}

// watchGroup is the lag histograms of the watchers of one client.
type watchGroup struct {
	mu sync.Mutex
	// lag holds the measured writes' lags (from their answers),
	// fromStart the same from their starts, recent every lag since the
	// last progress line.
	lag, fromStart, recent *hdrhistogram.Histogram
	early                  int64
}

func newWatchHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(0, watchHistMax, watchHistDigits)
}

func newWatchGroup() *watchGroup {
	return &watchGroup{lag: newWatchHist(), fromStart: newWatchHist(), recent: newWatchHist()}
}

// summary returns h's count, p50, p99 and max (recorded in µs).
func summaryOf(h *hdrhistogram.Histogram) LatencySummary {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return LatencySummary{N: int(h.TotalCount()), P50: us(h.ValueAtQuantile(50)), P99: us(h.ValueAtQuantile(99)), Max: us(h.Max())}
}

// benchWatcher is one watcher's bookkeeping.
type benchWatcher struct {
	w     *client.Watcher
	group *watchGroup
	// seen has bit s set once the event of write s arrived (only this
	// watcher's goroutine touches it until it ends).
	seen []uint64
	// events counts every event received; measured those of measured
	// writes, each once.
	events, measured atomic.Int64
	dups             int64
	// done closes when the watcher's goroutine ends.
	done chan struct{}
}

// watchRun is what a number of watchers' run shares.
type watchRun struct {
	o     WatchOptions
	start time.Time
	// acks[s] is when write s was answered (ns since start, +1; 0: not
	// yet, or failed), sent[s] when it started (Put called).
	acks, sent []atomic.Int64
	// from and to delimit the measured writes [from, to) (to is the
	// largest int64 until the measurement ends).
	from, to atomic.Int64
}

// acked returns when write seq was answered, false if not (yet).
func (r *watchRun) acked(seq int64) (time.Time, bool) {
	return r.at(r.acks, seq)
}

func (r *watchRun) at(times []atomic.Int64, seq int64) (time.Time, bool) {
	a := times[seq].Load()
	if a == 0 {
		return time.Time{}, false
	}
	return r.start.Add(time.Duration(a - 1)), true
}

// mark notes now in times[seq].
func (r *watchRun) mark(times []atomic.Int64, seq int64, now time.Time) {
	times[seq].Store(int64(now.Sub(r.start)) + 1)
}

// receive follows bw's events until the watch ends. Lags go to the
// watcher's group a batch at a time (and whenever no event waits), so
// the watchers of a client rarely wait for each other.
func (r *watchRun) receive(bw *benchWatcher) {
	defer close(bw.done)
	const flushAt = 256
	// lags are the measured writes' lags (from their answers and their
	// starts), others those of the writes of the warm-up and the drain
	// (progress lines only).
	type lagPair struct{ ack, start int64 }
	lags, others := make([]lagPair, 0, flushAt), make([]int64, 0, flushAt)
	var early int64
	flush := func() {
		if len(lags) == 0 && len(others) == 0 {
			return
		}
		g := bw.group
		g.mu.Lock()
		for _, l := range lags {
			g.recent.RecordValue(l.ack)
			g.lag.RecordValue(l.ack)
			g.fromStart.RecordValue(l.start)
		}
		for _, l := range others {
			g.recent.RecordValue(l)
		}
		g.early += early
		g.mu.Unlock()
		lags, others, early = lags[:0], others[:0], 0
	}
	defer flush()
	events := bw.w.Events()
	for {
		var ev client.Event
		var ok bool
		select {
		case ev, ok = <-events:
		default:
			flush()
			ev, ok = <-events
		}
		if !ok {
			return
		}
		now := time.Now()
		bw.events.Add(1)
		if ev.Kind != client.EventPut || len(ev.Value) < 8 {
			continue
		}
		seq := int64(binary.BigEndian.Uint64(ev.Value))
		if seq < 0 || seq >= int64(len(r.acks)) {
			continue
		}
		word, bit := seq/64, uint64(1)<<(seq%64)
		if bw.seen[word]&bit != 0 {
			bw.dups++
			continue
		}
		bw.seen[word] |= bit
		// A write is measured if issued in the measurement: from is set
		// as the measurement starts, microseconds before a write issued
		// then can be answered, let alone delivered.
		measured := seq >= r.from.Load() && seq < r.to.Load()
		since := func(at time.Time) int64 { return min(max(now.Sub(at).Microseconds(), 0), watchHistMax) }
		lag := int64(0)
		if at, ok := r.acked(seq); ok {
			lag = since(at)
		} else if measured {
			early++ // (the event overtook the Put's answer)
		}
		if measured {
			bw.measured.Add(1)
			start, _ := r.at(r.sent, seq) // (set before the Put)
			lags = append(lags, lagPair{lag, since(start)})
		} else {
			others = append(others, lag)
		}
		if len(lags) == flushAt || len(others) == flushAt {
			flush()
		}
	}
}

// runWatchers measures n watchers.
func runWatchers(ctx context.Context, o WatchOptions, master string, n int, serverCPU func() time.Duration,
	logf func(string, ...any)) (WatchResult, error) {
	res := WatchResult{Watchers: n, Clients: min(o.Clients, n)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
			return nil, fmt.Errorf("dialing %s: %w", master, err)
		}
		clients = append(clients, c)
		return c, nil
	}
	writer, err := dial()
	if err != nil {
		return res, err
	}
	// Room for every write the run can issue: warm-up, the wait for the
	// watchers, the measurement, and a margin.
	capacity := int64(o.Rate)*int64((o.Warmup+watchEstablishMax+o.Duration+5*time.Second)/time.Second) + 1
	run := &watchRun{o: o, start: time.Now(), acks: make([]atomic.Int64, capacity), sent: make([]atomic.Int64, capacity)}
	run.from.Store(capacity)
	run.to.Store(capacity)

	logf("%d watcher(s) of %q on %d client(s), writer at %d writes/s over %d keys of %d bytes", n, watchPrefix, res.Clients, o.Rate, o.Keys, o.ValueSize)
	groups := make([]*watchGroup, res.Clients)
	for i := range groups {
		groups[i] = newWatchGroup()
		if _, err := dial(); err != nil {
			return res, err
		}
	}
	var opts []client.WatchOption
	if o.Hold > 0 {
		opts = append(opts, client.WatchHold(o.Hold))
	}
	watchers := make([]*benchWatcher, n)
	began := time.Now()
	for i := range watchers {
		c := clients[1+i%res.Clients]
		w, err := c.Watch(ctx, watchPrefix, opts...)
		if err != nil {
			return res, fmt.Errorf("watch %d: %w", i, err)
		}
		bw := &benchWatcher{w: w, group: groups[i%res.Clients], seen: make([]uint64, (capacity+63)/64), done: make(chan struct{})}
		watchers[i] = bw
		go run.receive(bw)
	}
	defer func() {
		for _, bw := range watchers {
			if bw != nil {
				bw.w.Close()
				<-bw.done
			}
		}
	}()
	logf("%d watch(es) started in %s", n, time.Since(began).Round(time.Microsecond))

	wr := startWatchWriter(ctx, run, writer)
	defer wr.stop()

	// Warm up, then wait for every watcher to have received an event:
	// from then on it follows the prefix, so it gets every later write.
	if err := sleepCtx(ctx, o.Warmup); err != nil {
		return res, err
	}
	deadline := time.Now().Add(watchEstablishMax)
	for {
		waiting := 0
		for _, bw := range watchers {
			if bw.events.Load() == 0 {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%d of %d watchers received no event in %s of writes", waiting, n, o.Warmup+watchEstablishMax)
		}
		logf("  %d of %d watchers have received no event yet", waiting, n)
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return res, err
		}
	}
	for _, g := range groups {
		g.mu.Lock()
		g.recent.Reset()
		g.mu.Unlock()
	}

	// Measure.
	totalEvents := func() int64 {
		var t int64
		for _, bw := range watchers {
			t += bw.events.Load()
		}
		return t
	}
	server0, bench0 := serverCPU(), selfCPUTime()
	events0 := totalEvents()
	t0 := time.Now()
	from := wr.next.Load()
	run.from.Store(from)
	logf("measuring for %s (writes from #%d on)", o.Duration, from)
	tick := time.NewTicker(watchProgressEvery)
	end := time.After(o.Duration)
	lastAt, lastEvents, lastWrites := t0, events0, wr.answered.Load()
measure:
	for {
		select {
		case <-ctx.Done():
			tick.Stop()
			return res, ctx.Err()
		case <-end:
			break measure
		case now := <-tick.C:
			ev, writes := totalEvents(), wr.answered.Load()
			recent := newWatchHist()
			for _, g := range groups {
				g.mu.Lock()
				recent.Merge(g.recent)
				g.recent.Reset()
				g.mu.Unlock()
			}
			secs := now.Sub(lastAt).Seconds()
			behind := int64(0)
			issued := wr.next.Load() - from
			for _, bw := range watchers {
				behind = max(behind, issued-bw.measured.Load())
			}
			logf("  %d watchers %3.0fs: %6.0f writes/s, %8.0f events/s, lag p50 %s p99 %s, slowest watcher %d writes behind, %d write errors",
				n, now.Sub(t0).Seconds(), float64(writes-lastWrites)/secs, float64(ev-lastEvents)/secs,
				usStr(recent.ValueAtQuantile(50)), usStr(recent.ValueAtQuantile(99)), behind, wr.errors.Load())
			lastAt, lastEvents, lastWrites = now, ev, writes
		}
	}
	tick.Stop()
	to := wr.next.Load()
	run.to.Store(to)
	t1 := time.Now()
	res.Elapsed = t1.Sub(t0)
	res.Delivered = totalEvents() - events0
	res.ServerCPU, res.BenchCPU = serverCPU()-server0, selfCPUTime()-bench0
	wr.stop()
	for s := from; s < to; s++ {
		if _, ok := run.acked(s); ok {
			res.Writes++
		}
	}
	res.WriteErrors = (to - from) - res.Writes
	res.Put = wr.summary()

	// Drain: wait for the measured writes' events.
	drainEnd := t1.Add(o.Drain)
	for {
		short := 0
		for _, bw := range watchers {
			if bw.measured.Load() < res.Writes {
				short++
			}
		}
		if short == 0 || time.Now().After(drainEnd) {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.Drained = time.Since(t1)
	for _, bw := range watchers {
		bw.w.Close()
		<-bw.done
		if err := bw.w.Err(); err != nil {
			res.WatchErrors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
		}
		res.Duplicates += bw.dups
		for s := from; s < to; s++ {
			if _, ok := run.acked(s); ok && bw.seen[s/64]&(1<<(s%64)) == 0 {
				res.Missing++
			}
		}
	}
	watchers = nil
	res.Expected = res.Writes * int64(n)
	lag, fromStart := newWatchHist(), newWatchHist()
	for _, g := range groups {
		lag.Merge(g.lag)
		fromStart.Merge(g.fromStart)
		res.Early += g.early
	}
	res.Lag, res.FromStart = summaryOf(lag), summaryOf(fromStart)
	logf("%d watchers: %.0f events/s, %.0f writes/s (put p50 %s p99 %s), lag p50 %s p99 %s max %s (%d events before their Put returned; from the Put's start p50 %s p99 %s), servers %.2f cores, benchmark %.2f cores",
		n, res.EventsPerSecond(), res.WritesPerSecond(), msStr(res.Put.P50), msStr(res.Put.P99), msStr(res.Lag.P50), msStr(res.Lag.P99), msStr(res.Lag.Max),
		res.Early, msStr(res.FromStart.P50), msStr(res.FromStart.P99), res.Cores(res.ServerCPU), res.Cores(res.BenchCPU))
	if !res.Complete() {
		logf("NOT EVERY WATCHER GOT EVERY WRITE: %d watchers: %d of %d events missing after %s of drain, %d duplicates, %d watches ended with an error (first: %s)",
			n, res.Missing, res.Expected, res.Drained.Round(time.Millisecond), res.Duplicates, res.WatchErrors, res.FirstError)
	} else {
		logf("%d watchers: every watcher received each of the %d measured writes once (the last %s after the measurement)", n, res.Writes, res.Drained.Round(time.Millisecond))
	}
	return res, nil
}

// lagCell renders d, a figure of s, in milliseconds for a table: 0 is
// a lag (events before their Put returned), "-" is no events.
func lagCell(s LatencySummary, d time.Duration) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// usStr renders a lag in microseconds as milliseconds.
func usStr(us int64) string { return msStr(time.Duration(us) * time.Microsecond) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// watchWriter issues writes at the run's rate, each its sequence number
// in its value, at most Writers at a time.
type watchWriter struct {
	// next is the next write's sequence number; answered counts the
	// writes answered, errors those that failed.
	next, answered, errors atomic.Int64
	cancel                 context.CancelFunc
	wg                     sync.WaitGroup
	once                   sync.Once
	mu                     sync.Mutex
	put                    *hdrhistogram.Histogram
}

// startWatchWriter starts the writer; writes run with ctx, so stop lets
// those in flight finish.
func startWatchWriter(ctx context.Context, run *watchRun, c *client.Client) *watchWriter {
	schedule, cancel := context.WithCancel(ctx)
	wr := &watchWriter{cancel: cancel, put: newWatchHist()}
	o := run.o
	jobs := make(chan int64)
	for range o.Writers {
		wr.wg.Go(func() {
			value := make([]byte, o.ValueSize)
			for i := 8; i < len(value); i++ {
				value[i] = 'a' + byte(i%26)
			}
			for seq := range jobs {
				binary.BigEndian.PutUint64(value, uint64(seq))
				began := time.Now()
				run.mark(run.sent, seq, began)
				err := c.Put(ctx, watchKey(seq, o.Keys), value)
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						wr.errors.Add(1)
					}
					continue
				}
				run.mark(run.acks, seq, at)
				wr.answered.Add(1)
				wr.mu.Lock()
				wr.put.RecordValue(min(at.Sub(began).Microseconds(), watchHistMax))
				wr.mu.Unlock()
			}
		})
	}
	// The schedule: by time t after the start, Rate×t writes issued; a
	// write waits for a free writer, so a slow cluster lowers the rate.
	wr.wg.Go(func() {
		defer close(jobs)
		start := time.Now()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			due := int64(time.Since(start).Seconds() * float64(o.Rate))
			for seq := wr.next.Load(); seq < due && seq < int64(len(run.acks)); seq = wr.next.Load() {
				select {
				case jobs <- seq:
					wr.next.Add(1)
				case <-schedule.Done():
					return
				}
			}
			select {
			case <-tick.C:
			case <-schedule.Done():
				return
			}
		}
	})
	return wr
}

// stop stops issuing writes and waits for those in flight.
func (wr *watchWriter) stop() {
	wr.once.Do(func() {
		wr.cancel()
		wr.wg.Wait()
	})
}

// summary returns the writes' latencies so far.
func (wr *watchWriter) summary() LatencySummary {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return summaryOf(wr.put)
}

// WriteMarkdown writes the report as Markdown.
func (r *WatchReport) WriteMarkdown(w io.Writer) {
	m, o := r.Machine, r.Options
	fmt.Fprintf(w, "Run on %s.\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- Machine: %d cores (%s), %.1f GiB memory, %s, Linux %s, %s; 1-minute load average before the run: %.1f, after it: %.1f\n",
		m.Cores, m.CPU, m.MemoryGiB, m.OS, m.Kernel, m.Go, r.LoadAtStart, r.LoadAtEnd)
	fmt.Fprintf(w, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- Catena (%s): %s.\n", r.CatenaVersion, r.Setup)
	hold := "1s, the client's default"
	if o.Hold > 0 {
		hold = o.Hold.String()
	}
	fmt.Fprintf(w, "- Writer: %d writes/s scheduled (at most %d in flight, its own `client.Client`) over %d keys under %q, values of %d bytes. Watchers: each its own `client.Watch` of the prefix (long polls held up to %s, each to a member of the chain drawn at random), sharing %d `client.Client`s (watcher i on client i mod %d; fewer clients than that with fewer watchers).\n",
		o.Rate, o.Writers, o.Keys, watchPrefix, o.ValueSize, hold, o.Clients, o.Clients)
	fmt.Fprintf(w, "- For each number of watchers: the watchers start, the writer runs %s unmeasured (and until every watcher has received an event), then %s measured, then the watchers get up to %s more to receive the measured writes' events. Events/s: events received by all the watchers in the measurement. Lag: from a measured write's answer (its `Put` returned) to a watcher receiving its event, over every watcher and measured write (HdrHistogram, µs, %d significant digits); an event that arrived before its `Put` returned counts as 0 (column \"early\": how many did). \"From start\": the same from the `Put`'s call, so the write's own latency included. CPU: the cores the 3 servers (not the master) and the benchmark's process (writer and watchers) kept busy in the measurement.\n\n",
		o.Warmup, o.Duration, o.Drain, watchHistDigits)
	fmt.Fprintln(w, "| watchers | clients | writes/s | events/s | lag p50 ms | lag p99 ms | early | from start p50 ms | from start p99 ms | put p50 ms | put p99 ms | servers' CPU (cores) | benchmark's CPU (cores) | every write to every watcher |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	var incomplete []string
	for _, res := range r.Results {
		check := fmt.Sprintf("yes (%d × %d)", res.Writes, res.Watchers)
		if !res.Complete() {
			check = fmt.Sprintf("**no**: %d of %d missing", res.Missing, res.Expected)
			line := fmt.Sprintf("- %d watchers: %d of %d events missing %s after the measurement, %d duplicates, %d watches ended with an error",
				res.Watchers, res.Missing, res.Expected, res.Drained.Round(time.Millisecond), res.Duplicates, res.WatchErrors)
			if res.FirstError != "" {
				line += fmt.Sprintf(" (the first: %s)", res.FirstError)
			}
			incomplete = append(incomplete, line)
		}
		fmt.Fprintf(w, "| %d | %d | %.0f | %.0f | %s | %s | %d | %s | %s | %s | %s | %.2f | %.2f | %s |\n",
			res.Watchers, res.Clients, res.WritesPerSecond(), res.EventsPerSecond(), lagCell(res.Lag, res.Lag.P50), lagCell(res.Lag, res.Lag.P99), res.Early,
			lagCell(res.FromStart, res.FromStart.P50), lagCell(res.FromStart, res.FromStart.P99), msCell(res.Put.P50), msCell(res.Put.P99), res.Cores(res.ServerCPU), res.Cores(res.BenchCPU), check)
	}
	if len(incomplete) > 0 {
		fmt.Fprintf(w, "\nNot every watcher received every write:\n\n%s\n", strings.Join(incomplete, "\n"))
	}
}

// Markers delimit the generated part of `catena-lab bench watch` in
// docs/benchmarks.md.
const (
	WatchBeginMarker = "<!-- BEGIN catena bench watch output: generated, do not edit -->"
	WatchEndMarker   = "<!-- END catena bench watch output -->"
)

// UpdateMarkdownFile writes the report between its markers in path, or
// appends a section with them when path lacks them.
func (r *WatchReport) UpdateMarkdownFile(path string) error {
	var gen bytes.Buffer
	r.WriteMarkdown(&gen)
	return updateMarkedSection(path, WatchBeginMarker, WatchEndMarker, "Watch", gen.Bytes())
}
