package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
)

// Operation kinds measured separately. OpAll is every YCSB operation: a
// read, an update, an insert, or a read-modify-write (a read then an
// update, measured as one operation, as YCSB's overall throughput counts
// it).
const (
	OpAll    = "ALL"
	OpRead   = "READ"
	OpUpdate = "UPDATE"
	OpInsert = "INSERT"
	OpScan   = "SCAN"
	OpRMW    = "READ_MODIFY_WRITE"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, with 3
// significant digits.
const (
	histMin    = 1
	histMax    = int64(10 * time.Minute / time.Microsecond)
	histDigits = 3
)

// Stats summarises the latencies of one kind of operation.
type Stats struct {
	Count  int64
	Errors int64
	P50    time.Duration
	P99    time.Duration
	Max    time.Duration
	// FirstError is one of the errors, for the report.
	FirstError string
}

// PhaseResult is what one load or one workload run measured.
type PhaseResult struct {
	Operations int64 // completed (including failed ones)
	Errors     int64
	Elapsed    time.Duration
	// Complete is false when the phase was cut short (time limit).
	Complete bool
	// Ops maps an operation kind (OpAll, OpRead, ...) to its statistics.
	Ops map[string]Stats
	// ServerCPU is the CPU time the system's processes used during the
	// phase; ClientCPU the benchmark process's (YCSB and the binding).
	ServerCPU, ClientCPU time.Duration
	// Load is the machine's 1-minute load average at the end of the phase.
	Load float64
	// Metadata is the clients' causal metadata size (causal systems only).
	Metadata *Metadata
}

// CPUPerOp returns server and client CPU time per operation.
func (r PhaseResult) CPUPerOp() (server, client time.Duration) {
	if r.Operations == 0 {
		return 0, 0
	}
	return r.ServerCPU / time.Duration(r.Operations), r.ClientCPU / time.Duration(r.Operations)
}

// Throughput is completed operations per second.
func (r PhaseResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Operations) / r.Elapsed.Seconds()
}

// threadStats is one YCSB thread's measurements; no locking needed.
type threadStats struct {
	hists    map[string]*hdrhistogram.Histogram
	errors   map[string]int64
	firstErr map[string]string
	// calls records the DB calls of the current operation, to tell a
	// read-modify-write from a read.
	reads, updates, inserts int
}

func newThreadStats() *threadStats {
	return &threadStats{hists: map[string]*hdrhistogram.Histogram{}, errors: map[string]int64{}, firstErr: map[string]string{}}
}

func (t *threadStats) record(op string, d time.Duration, err error) {
	if err != nil {
		t.errors[op]++
		if _, ok := t.firstErr[op]; !ok {
			t.firstErr[op] = err.Error()
		}
		return
	}
	h := t.hists[op]
	if h == nil {
		h = hdrhistogram.New(histMin, histMax, histDigits)
		t.hists[op] = h
	}
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	h.RecordValue(min(us, histMax))
}

type statsKey struct{}

// measuredDB wraps a binding and records the latency of each call in the
// calling thread's threadStats (carried by the context).
type measuredDB struct{ ycsb.DB }

func statsOf(ctx context.Context) *threadStats {
	s, _ := ctx.Value(statsKey{}).(*threadStats)
	return s
}

func (m measuredDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	start := time.Now()
	v, err := m.DB.Read(ctx, table, key, fields)
	if s := statsOf(ctx); s != nil {
		s.reads++
		s.record(OpRead, time.Since(start), err)
	}
	return v, err
}

func (m measuredDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	start := time.Now()
	err := m.DB.Update(ctx, table, key, values)
	if s := statsOf(ctx); s != nil {
		s.updates++
		s.record(OpUpdate, time.Since(start), err)
	}
	return err
}

func (m measuredDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	start := time.Now()
	v, err := m.DB.Scan(ctx, table, startKey, count, fields)
	if s := statsOf(ctx); s != nil {
		s.record(OpScan, time.Since(start), err)
	}
	return v, err
}

func (m measuredDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	start := time.Now()
	err := m.DB.Insert(ctx, table, key, values)
	if s := statsOf(ctx); s != nil {
		s.inserts++
		s.record(OpInsert, time.Since(start), err)
	}
	return err
}

// phase describes one run of a workload (or the load) against a DB.
type phase struct {
	workload ycsb.Workload
	db       ycsb.DB
	threads  int
	total    int64
	load     bool // DoInsert (load the records) instead of DoTransaction
	// progress, if set, is called every progressEvery with the operations
	// completed so far.
	progress      func(done int64, elapsed time.Duration)
	progressEvery time.Duration
}

// run executes the phase: threads goroutines share total operations, as
// go-ycsb's client does, each with its own workload and DB thread state.
// It stops early, with Complete false, when ctx ends.
func (p phase) run(ctx context.Context) (PhaseResult, error) {
	if p.threads < 1 || p.total < int64(p.threads) {
		return PhaseResult{}, fmt.Errorf("bench: %d operations cannot be shared by %d threads", p.total, p.threads)
	}
	db := measuredDB{p.db}
	var done atomic.Int64
	stats := make([]*threadStats, p.threads)
	var wg sync.WaitGroup
	start := time.Now()
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if p.progress == nil {
			return
		}
		every := p.progressEvery
		if every <= 0 {
			every = 5 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.progress(done.Load(), time.Since(start))
			case <-stopProgress:
				return
			}
		}
	}()
	for i := range p.threads {
		n := p.total / int64(p.threads)
		if int64(i) < p.total%int64(p.threads) {
			n++
		}
		s := newThreadStats()
		stats[i] = s
		wg.Go(func() {
			tctx := p.workload.InitThread(ctx, i, p.threads)
			tctx = db.InitThread(tctx, i, p.threads)
			tctx = context.WithValue(tctx, statsKey{}, s)
			for range n {
				if ctx.Err() != nil {
					break
				}
				s.reads, s.updates, s.inserts = 0, 0, 0
				opStart := time.Now()
				var err error
				if p.load {
					err = p.workload.DoInsert(tctx, db)
				} else {
					err = p.workload.DoTransaction(tctx, db)
				}
				d := time.Since(opStart)
				if ctx.Err() != nil && err != nil {
					break // cut short: not a failure of the system
				}
				s.record(OpAll, d, err)
				if s.reads > 0 && s.updates > 0 {
					s.record(OpRMW, d, err)
				}
				done.Add(1)
			}
			db.CleanupThread(tctx)
			p.workload.CleanupThread(tctx)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone

	res := PhaseResult{Operations: done.Load(), Elapsed: elapsed, Complete: done.Load() == p.total, Ops: map[string]Stats{}}
	merged := map[string]*hdrhistogram.Histogram{}
	errs := map[string]int64{}
	firstErr := map[string]string{}
	for _, s := range stats {
		for op, e := range s.firstErr {
			if _, ok := firstErr[op]; !ok {
				firstErr[op] = e
			}
		}
		for op, h := range s.hists {
			if merged[op] == nil {
				merged[op] = hdrhistogram.New(histMin, histMax, histDigits)
			}
			merged[op].Merge(h)
		}
		for op, n := range s.errors {
			errs[op] += n
		}
	}
	for op, h := range merged {
		res.Ops[op] = Stats{
			Count: h.TotalCount() + errs[op], Errors: errs[op],
			P50:        time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
			P99:        time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
			Max:        time.Duration(h.Max()) * time.Microsecond,
			FirstError: firstErr[op],
		}
	}
	for op, n := range errs {
		if _, ok := res.Ops[op]; !ok {
			res.Ops[op] = Stats{Count: n, Errors: n, FirstError: firstErr[op]}
		}
	}
	res.Errors = errs[OpAll]
	return res, nil
}
