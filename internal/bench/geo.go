package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/client"
)

// GeoOptions configure RunGeo.
type GeoOptions struct {
	// CatenaBinary runs `catena dev -sites 2`.
	CatenaBinary string
	// Dir holds dev's data and logs.
	Dir string
	// WANRTT is dev's -wan-rtt (default 120 ms).
	WANRTT time.Duration
	// Clients is the closed-loop clients per writing site (default 16),
	// each its own client.Client (its own causal session).
	Clients int
	// BothSites runs Clients at site 2 as well as at site 1.
	BothSites bool
	// Records loaded before the workloads (default 5000), of ValueSize
	// bytes (default 100).
	Records   int
	ValueSize int
	// Duration of each workload (default 30 s).
	Duration time.Duration
	// Workloads run one after the other (default A then B).
	Workloads []GeoWorkload
	// ProbeEvery is how often the probe writes at site 1 (default 20 ms);
	// PollEvery how often site 2's reader looks for it (default 3 ms).
	ProbeEvery, PollEvery time.Duration
	Progress              io.Writer
	// Command is the command line, for the report.
	Command string
}

// GeoWorkload is a YCSB-like mix of reads and updates of the loaded
// records.
type GeoWorkload struct {
	Name         string
	ReadFraction float64
}

// GeoWorkloads are YCSB's workloads A (50% reads, 50% updates) and B (95%
// reads, 5% updates), keys chosen uniformly.
var GeoWorkloads = []GeoWorkload{{"A", 0.5}, {"B", 0.95}}

func (o *GeoOptions) defaults() {
	if o.WANRTT == 0 {
		o.WANRTT = 120 * time.Millisecond
	}
	if o.Clients == 0 {
		o.Clients = 16
	}
	if o.Records == 0 {
		o.Records = 5000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 100
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	if o.Workloads == nil {
		o.Workloads = GeoWorkloads
	}
	if o.ProbeEvery == 0 {
		o.ProbeEvery = 20 * time.Millisecond
	}
	if o.PollEvery == 0 {
		o.PollEvery = 3 * time.Millisecond
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// geoBucket is the width of the buckets the visibility lag is reported in.
const geoBucket = 5 * time.Second

// GeoResult is one workload's measurements.
type GeoResult struct {
	Workload GeoWorkload
	Elapsed  time.Duration
	Ops      int64
	Errors   int64
	// Reads and Writes are the latencies at the client's own site.
	Reads, Writes LatencySummary
	// Lag is the probe's visibility lag at site 2, overall and per
	// geoBucket of the run (by the time the probe was written).
	Lag     LatencySummary
	Buckets []LagBucket
	// Probes written, and of them seen at site 2 (a probe overwritten
	// before the reader saw it is not measured).
	Probes, ProbesSeen int64
}

// Throughput is operations per second.
func (r GeoResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// LatencySummary is the count and p50/p99/max of some durations.
type LatencySummary struct {
	N             int
	P50, P99, Max time.Duration
}

// summarize returns the summary of ds (sorting ds).
func summarize(ds []time.Duration) LatencySummary {
	slices.Sort(ds)
	s := LatencySummary{N: len(ds)}
	if len(ds) > 0 {
		s.P50, s.P99, s.Max = percentile(ds, 0.50), percentile(ds, 0.99), ds[len(ds)-1]
	}
	return s
}

// percentile returns the nearest-rank p-quantile of sorted (non-empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// LagSample is one probe's lag, At after the run began.
type LagSample struct {
	At, Lag time.Duration
}

// LagBucket summarises the samples of [Start, Start+width).
type LagBucket struct {
	Start time.Duration
	LatencySummary
}

// bucketLags groups samples by At into buckets of width from 0 to the
// last sample's, empty ones included, and summarises each.
func bucketLags(samples []LagSample, width time.Duration) []LagBucket {
	var groups [][]time.Duration
	for _, s := range samples {
		i := int(max(s.At, 0) / width)
		for len(groups) <= i {
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], s.Lag)
	}
	buckets := make([]LagBucket, len(groups))
	for i, g := range groups {
		buckets[i] = LagBucket{Start: time.Duration(i) * width, LatencySummary: summarize(g)}
	}
	return buckets
}

// GeoReport is what RunGeo measured.
type GeoReport struct {
	Date          time.Time
	Machine       Machine
	Command       string
	CatenaVersion string
	LoadAtStart   float64
	Options       GeoOptions
	Keyspace      string
	Load          time.Duration
	Results       []GeoResult
}

// RunGeo starts `catena dev -sites 2 -wan-rtt RTT`, loads the records at
// site 1, and runs each workload for its duration with closed-loop clients
// at site 1 (and site 2 with BothSites), while a probe measures how long a
// write at site 1 takes to be visible at site 2.
func RunGeo(ctx context.Context, o GeoOptions) (*GeoReport, error) {
	o.defaults()
	logf := func(format string, args ...any) { fmt.Fprintf(o.Progress, "bench geo: "+format+"\n", args...) }
	rep := &GeoReport{Date: time.Now(), Machine: DescribeMachine(), Command: o.Command, CatenaVersion: catenaVersion(),
		LoadAtStart: loadAverage(), Options: o}

	base, err := freeDevBasePort(2)
	if err != nil {
		return nil, err
	}
	devDir := filepath.Join(o.Dir, "dev")
	logf("starting catena dev -sites 2 -wan-rtt %s (site 1 at 127.0.0.1:%d, site 2 at 127.0.0.1:%d)", o.WANRTT, base, base+1000)
	dev, err := startDev(ctx, o.Dir, o.CatenaBinary, "-sites", "2", "-wan-rtt", o.WANRTT.String(),
		"-dir", devDir, "-base-port", strconv.Itoa(base), "-http-offset", "0", "-restart-delay", "0")
	if err != nil {
		return nil, err
	}
	defer dev.Stop(stopGrace)
	tlsDir := filepath.Join(devDir, "tls")
	copts := client.Options{TLS: client.TLSFiles{CA: filepath.Join(tlsDir, "ca.crt"),
		Cert: filepath.Join(tlsDir, "client-dev.crt"), Key: filepath.Join(tlsDir, "client-dev.key")}}
	masters := []string{fmt.Sprintf("127.0.0.1:%d", base), fmt.Sprintf("127.0.0.1:%d", base+1000)}
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func(site int) (*client.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := client.Dial(dctx, masters[site-1], copts)
		if err != nil {
			return nil, fmt.Errorf("dialing site %d (%s): %w (logs in %s)", site, masters[site-1], err, o.Dir)
		}
		clients = append(clients, c)
		return c, nil
	}
	// The default keyspace must be causal and replicated by both sites.
	for site := 1; site <= 2; site++ {
		c, err := dial(site)
		if err != nil {
			return nil, err
		}
		for _, k := range c.Keyspaces() {
			if k.Prefix != "" {
				continue
			}
			if k.Mode != "causal" || !slices.Contains(k.Sites, 1) || !slices.Contains(k.Sites, 2) {
				return nil, fmt.Errorf("site %d: the default keyspace is %s with sites %v, want causal with sites 1 and 2", site, k.Mode, k.Sites)
			}
			rep.Keyspace = fmt.Sprintf("the default keyspace: causal, k=%d, t=%d, %d volume(s), sites %v", k.K, k.Replicas, k.Volumes, k.Sites)
		}
	}
	if rep.Keyspace == "" {
		return nil, errors.New("no default keyspace in the client's configuration")
	}
	logf("%s", rep.Keyspace)

	writers := map[int][]*client.Client{}
	sites := []int{1}
	if o.BothSites {
		sites = append(sites, 2)
	}
	for _, site := range sites {
		for range o.Clients {
			c, err := dial(site)
			if err != nil {
				return nil, err
			}
			writers[site] = append(writers[site], c)
		}
	}
	prober, err := dial(1)
	if err != nil {
		return nil, err
	}
	reader, err := dial(2)
	if err != nil {
		return nil, err
	}

	value := make([]byte, o.ValueSize)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	logf("loading %d records of %d bytes at site 1", o.Records, o.ValueSize)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var loadErr atomic.Value
	for _, c := range writers[1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(o.Records) || ctx.Err() != nil {
					return
				}
				if err := c.Put(ctx, geoKey(int(i)), value); err != nil {
					loadErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := loadErr.Load().(error); err != nil {
		return nil, fmt.Errorf("loading: %w", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.Load = time.Since(start)
	logf("loaded in %s", rep.Load.Round(time.Millisecond))

	for _, w := range o.Workloads {
		res, err := runGeoWorkload(ctx, o, w, writers, prober, reader, value, logf)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func geoKey(i int) string { return fmt.Sprintf("geo/user%07d", i) }

// runGeoWorkload runs one workload for o.Duration.
func runGeoWorkload(ctx context.Context, o GeoOptions, w GeoWorkload, writers map[int][]*client.Client,
	prober, reader *client.Client, value []byte, logf func(string, ...any)) (GeoResult, error) {
	res := GeoResult{Workload: w}
	logf("workload %s (%.0f%% reads, %.0f%% updates, uniform keys) for %s with %d clients per site at sites %v",
		w.Name, 100*w.ReadFraction, 100*(1-w.ReadFraction), o.Duration, o.Clients, sortedSites(writers))
	// Clients start no operation after the deadline and finish the ones
	// they started (with ctx, not a context ending at the deadline: an
	// operation cut off there would count as an error).
	start := time.Now()
	deadline := start.Add(o.Duration)
	var ops, errs atomic.Int64
	var mu sync.Mutex
	var reads, writes []time.Duration
	var recent []time.Duration // writes since the last progress line
	var lags []LagSample
	var wg, workers sync.WaitGroup
	for _, site := range sortedSites(writers) {
		for _, c := range writers[site] {
			wg.Add(1)
			workers.Add(1)
			go func() {
				defer wg.Done()
				defer workers.Done()
				var myReads, myWrites []time.Duration
				defer func() {
					mu.Lock()
					reads, writes = append(reads, myReads...), append(writes, myWrites...)
					mu.Unlock()
				}()
				more := func() bool { return time.Now().Before(deadline) }
				closedLoop(ctx, c, more, w.ReadFraction, o.Records, geoKey, value, func(read bool, d time.Duration, err error) {
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					ops.Add(1)
					if read {
						myReads = append(myReads, d)
					} else {
						myWrites = append(myWrites, d)
						mu.Lock()
						recent = append(recent, d)
						mu.Unlock()
					}
				})
			}()
		}
	}
	// The probe: a write at site 1 every ProbeEvery of its sequence number
	// and send time; site 2's reader polls for it.
	probeKey := "geo-probe/" + w.Name
	// The reader goes on for a second after the last probe, to see it.
	var probes, seen atomic.Int64
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer time.AfterFunc(time.Second, stopReading)
		tick := time.NewTicker(o.ProbeEvery)
		defer tick.Stop()
		for seq := int64(1); ctx.Err() == nil && time.Now().Before(deadline); seq++ {
			sent := time.Now()
			if err := prober.Put(ctx, probeKey, []byte(fmt.Sprintf("%d %d", seq, sent.UnixNano()))); err == nil {
				probes.Add(1)
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	}()
	go func() {
		defer wg.Done()
		var last int64
		for readCtx.Err() == nil {
			v, found, err := reader.Get(readCtx, probeKey)
			now := time.Now()
			if err == nil && found {
				var seq, sentNanos int64
				if _, err := fmt.Sscanf(string(v), "%d %d", &seq, &sentNanos); err == nil && seq > last {
					last = seq
					sent := time.Unix(0, sentNanos)
					seen.Add(1)
					mu.Lock()
					lags = append(lags, LagSample{At: sent.Sub(start), Lag: now.Sub(sent)})
					mu.Unlock()
				}
			}
			select {
			case <-time.After(o.PollEvery):
			case <-readCtx.Done():
			}
		}
	}()
	// Progress every geoBucket.
	done := make(chan struct{})
	var end time.Time
	go func() { workers.Wait(); end = time.Now(); wg.Wait(); close(done) }()
	tick := time.NewTicker(geoBucket)
	defer tick.Stop()
	lastOps, lastAt, lagsShown := int64(0), start, 0
loop:
	for {
		select {
		case <-done:
			break loop
		case now := <-tick.C:
			n := ops.Load()
			mu.Lock()
			wr := summarize(recent)
			recent = nil
			lg := make([]time.Duration, 0, len(lags)-lagsShown)
			for _, s := range lags[lagsShown:] {
				lg = append(lg, s.Lag)
			}
			lagsShown = len(lags)
			mu.Unlock()
			l := summarize(lg)
			logf("  %s %3.0fs: %7.0f ops/s, writes p50 %s p99 %s, visibility at site 2 p50 %s p99 %s (%d probes seen), %d errors",
				w.Name, now.Sub(start).Seconds(), float64(n-lastOps)/now.Sub(lastAt).Seconds(), msStr(wr.P50), msStr(wr.P99),
				msStr(l.P50), msStr(l.P99), l.N, errs.Load())
			lastOps, lastAt = n, now
		}
	}
	res.Elapsed = end.Sub(start)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Ops, res.Errors = ops.Load(), errs.Load()
	res.Reads, res.Writes = summarize(reads), summarize(writes)
	res.Probes, res.ProbesSeen = probes.Load(), seen.Load()
	lagDs := make([]time.Duration, len(lags))
	for i, s := range lags {
		lagDs[i] = s.Lag
	}
	res.Lag, res.Buckets = summarize(lagDs), bucketLags(lags, geoBucket)
	logf("workload %s: %.0f ops/s, writes p50 %s p99 %s, visibility lag p50 %s p99 %s, %d/%d probes seen, %d errors",
		w.Name, res.Throughput(), msStr(res.Writes.P50), msStr(res.Writes.P99), msStr(res.Lag.P50), msStr(res.Lag.P99),
		res.ProbesSeen, res.Probes, res.Errors)
	return res, nil
}

func sortedSites(m map[int][]*client.Client) []int {
	var s []int
	for site := range m {
		s = append(s, site)
	}
	slices.Sort(s)
	return s
}

// msStr renders d in milliseconds, "-" for none.
func msStr(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// msCell renders d in milliseconds for a table, "-" for none.
func msCell(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// WriteMarkdown writes the report as Markdown.
func (r *GeoReport) WriteMarkdown(w io.Writer) {
	m, o := r.Machine, r.Options
	fmt.Fprintf(w, "Run on %s.\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- Machine: %d cores (%s), %.1f GiB memory, %s, Linux %s, %s; 1-minute load average before the run: %.1f\n",
		m.Cores, m.CPU, m.MemoryGiB, m.OS, m.Kernel, m.Go, r.LoadAtStart)
	fmt.Fprintf(w, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- Catena (%s): `catena dev -sites 2 -wan-rtt %s` (each site a master and 3 servers and a proxy, as processes on this machine, mutual TLS; messages between the sites delayed by half the round trip each way, ±5 ms jitter); %s.\n",
		r.CatenaVersion, o.WANRTT, r.Keyspace)
	where := "site 1"
	if o.BothSites {
		where = "each site"
	}
	fmt.Fprintf(w, "- %d records of %d bytes loaded at site 1 (in %s), then each workload for %s: %d closed-loop clients at %s, each its own `client.Client` (its own causal session), keys chosen uniformly; latencies are at the client's own site.\n",
		o.Records, o.ValueSize, r.Load.Round(time.Millisecond), o.Duration, o.Clients, where)
	fmt.Fprintf(w, "- Visibility lag: a probe client at site 1 writes a key every %s with its send time; a client at site 2 reads it every %s; lag = time seen at site 2 − time the write was sent at site 1 (so it includes the write's own latency at site 1 and up to one poll interval).\n\n",
		o.ProbeEvery, o.PollEvery)
	fmt.Fprintln(w, "| workload | ops/s | errors | read p50 ms | read p99 ms | write p50 ms | write p99 ms | visibility lag p50 ms | p99 ms | max ms | probes seen |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, res := range r.Results {
		fmt.Fprintf(w, "| %s (%.0f/%.0f) | %.0f | %d | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n",
			res.Workload.Name, 100*res.Workload.ReadFraction, 100*(1-res.Workload.ReadFraction), res.Throughput(), res.Errors,
			msCell(res.Reads.P50), msCell(res.Reads.P99), msCell(res.Writes.P50), msCell(res.Writes.P99),
			msCell(res.Lag.P50), msCell(res.Lag.P99), msCell(res.Lag.Max), res.ProbesSeen, res.Probes)
	}
	fmt.Fprintf(w, "\nVisibility lag at site 2 over time (probes by the %s of the run they were written in):\n\n", geoBucket)
	fmt.Fprintln(w, "| workload | from (s) | probes | lag p50 ms | p99 ms | max ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, res := range r.Results {
		for _, b := range res.Buckets {
			fmt.Fprintf(w, "| %s | %.0f | %d | %s | %s | %s |\n", res.Workload.Name, b.Start.Seconds(), b.N,
				msCell(b.P50), msCell(b.P99), msCell(b.Max))
		}
	}
}

// Markers delimit the generated part of `catena-lab bench geo` in
// docs/benchmarks.md.
const (
	GeoBeginMarker = "<!-- BEGIN catena bench geo output: generated, do not edit -->"
	GeoEndMarker   = "<!-- END catena bench geo output -->"
)

// UpdateMarkdownFile writes the report between its markers in path, or
// appends a section with them when path lacks them.
func (r *GeoReport) UpdateMarkdownFile(path string) error {
	var gen bytes.Buffer
	r.WriteMarkdown(&gen)
	return updateMarkedSection(path, GeoBeginMarker, GeoEndMarker, "Two sites: `catena-lab bench geo`", gen.Bytes())
}
