package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func fakeRun(system, workload string, ops int64, elapsed, p50, p99 time.Duration) Run {
	return Run{System: system, Workload: workload, PhaseResult: PhaseResult{
		Operations: ops, Elapsed: elapsed, Complete: true,
		ServerCPU: time.Duration(ops) * 100 * time.Microsecond, ClientCPU: time.Duration(ops) * 20 * time.Microsecond,
		Ops: map[string]Stats{OpAll: {Count: ops, P50: p50, P99: p99}, OpRead: {Count: ops, P50: p50, P99: p99}},
	}}
}

func fakeReport() *Report {
	r := &Report{
		Date:    time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		Machine: Machine{CPU: "Test CPU", Cores: 2, MemoryGiB: 24, OS: "Debian", Kernel: "6.1", Go: "go1.26"},
		Command: "catena bench compare -ops 100", Sizing: DefaultSizing, Duration: 90 * time.Second,
		Systems: []SystemInfo{{Name: SystemCatena, Setup: "3 servers", Version: "commit abc",
			Memory: []ProcessMemory{{Process: "server1", PeakRSS: 300 << 20}, {Process: "master", PeakRSS: 0}}},
			{Name: SystemEtcd, Setup: "3 members", Version: "3.4"}},
	}
	ms := time.Millisecond
	r.Runs = []Run{
		fakeRun(SystemCatena, "A", 30000, 10*time.Second, 2*ms, 10*ms),      // 3000 ops/s
		fakeRun(SystemEtcd, "A", 30000, 30*time.Second, 5*ms, 20*ms),        // 1000 ops/s
		fakeRun(SystemRedis, "A", 30000, 3*time.Second, 1*ms, 5*ms),         // 10000 ops/s
		fakeRun(SystemCatenaT1, "A", 30000, 5*time.Second, 1*ms, 4*ms),      // 6000 ops/s
		fakeRun(SystemCatena, "C", 30000, 1*time.Second, 1*ms, 30*ms),       // 30000 ops/s
		fakeRun(SystemEtcd, "C", 30000, 15*time.Second, 1*ms, 20*ms),        // 2000 ops/s
		fakeRun(SystemCatenaRESP, "A", 30000, 15*time.Second, 3*ms, 12*ms),  // 2000 ops/s
		fakeRun(SystemCatenaCausal, "A", 30000, 6*time.Second, 2*ms, 8*ms),  // 5000 ops/s
		fakeRun(SystemCatenaCausal, "C", 30000, 1*time.Second, 1*ms, 25*ms), // 30000 ops/s, no metadata figures
		fakeRun(SystemRedisAlways, "A", 30000, 15*time.Second, 3*ms, 9*ms),  // 2000 ops/s
		fakeRun(SystemCatenaCRAQ, "A", 30000, 7500*ms, 2*ms, 9*ms),          // 4000 ops/s
	}
	r.Runs[7].Metadata = &Metadata{Clients: 1, Samples: 60, Mean: 2.5, Max: 7}
	return r
}

func TestReportTables(t *testing.T) {
	r := fakeReport()
	var text bytes.Buffer
	r.WriteText(&text)
	for _, want := range []string{
		"A  catena   3000  2.00  10.00", // ops/s, p50, p99
		"A          3.00                0.30                       1.50                   0.50", // catena/etcd, catena/redis, catena/redis-always, p99 ratio
		"C         15.00",
		"A       3000       6000     0.50", // replication tax
		"A: catena/etcd throughput ≥ 5  3.00   no",
		"C: catena/etcd throughput ≥ 5  15.00  yes",
		"C: catena p99 ≤ 5.00 ms  30.00 ms   no",
		"A: catena/redis throughput ≥ 0.5  0.30   no",
		"A: catena/redis-always throughput ≥ 1  1.50  yes",
		"A: catena t=3 / t=1 throughput ≥ 0.7  0.50   no",
		"catena  server1  300",
		"catena  master  -",
		"A  2000  0.67  0.20  12.00  5.00",                        // catena-resp against catena and redis
		"A  3000  5000  1.67  10.00  8.00  4000  1.25  2.5  7  1", // catena-causal against catena and catena-craq, metadata
		"C  30000  30000  1.00  30.00  25.00  -  -  -  -  -",
	} {
		if !strings.Contains(squeeze(text.String()), squeeze(want)) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "D ") {
		t.Errorf("text report shows workload D, which did not run:\n%s", text.String())
	}

	var md bytes.Buffer
	r.WriteMarkdown(&md)
	for _, want := range []string{
		"Run on 2026-01-02 03:04 UTC; the whole comparison took 1m30s.",
		"2 cores (Test CPU), 24.0 GiB memory",
		"`catena bench compare -ops 100`",
		"| A | catena | 3000 | 2.00 | 10.00 | 0 | 100 | 20 |",
		"| A | 3.00 | 0.30 | 1.50 | 0.50 | 2.00 |",
		"| A | 3000 | 6000 | 0.50 | 10.00 | 4.00 |",
		"| A | 2000 | 0.67 | 0.20 | 12.00 | 5.00 |",
		"| A | 3000 | 5000 | 1.67 | 10.00 | 8.00 | 4000 | 1.25 | 2.5 | 7 | 1 |",
		"**catena** (commit abc): 3 servers",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// A run without etcd and Redis has no ratio table (it used to print a
// row of dashes per workload).
func TestNoRatiosWithoutEtcdOrRedis(t *testing.T) {
	ms := time.Millisecond
	r := &Report{Runs: []Run{fakeRun(SystemCatena, "A", 100, time.Second, ms, ms), fakeRun(SystemCatenaCausal, "A", 100, time.Second, ms, ms)}}
	if rows := r.ratioTable().rows; len(rows) != 0 {
		t.Fatalf("ratio rows %q; want none", rows)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if strings.Contains(text.String(), "Ratios") {
		t.Fatalf("text report has ratios:\n%s", text.String())
	}
}

// squeeze collapses runs of spaces, so expectations do not depend on
// column widths.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestSpliceGenerated(t *testing.T) {
	gen := []byte("| table |\n")
	fresh := SpliceGenerated(nil, gen)
	if !strings.HasPrefix(string(fresh), "# Benchmarks") || !strings.Contains(string(fresh), "| table |") {
		t.Fatalf("new document:\n%s", fresh)
	}
	doc := []byte("# Title\n\nintro\n\n" + BeginMarker + "\nold numbers\n" + EndMarker + "\n\n## Analysis\n\nkept\n")
	out := string(SpliceGenerated(doc, gen))
	if strings.Contains(out, "old numbers") || !strings.Contains(out, "| table |") {
		t.Fatalf("generated part not replaced:\n%s", out)
	}
	if !strings.HasPrefix(out, "# Title\n\nintro\n\n") || !strings.HasSuffix(out, "## Analysis\n\nkept\n") {
		t.Fatalf("text outside the markers not kept:\n%s", out)
	}
	if again := string(SpliceGenerated([]byte(out), gen)); again != out {
		t.Fatalf("splicing twice changed the document:\n%s\n---\n%s", out, again)
	}
}

// With several rounds the tables show each (system, phase)'s run of
// median throughput, and a table of the spread over the rounds; the
// rounds run the systems in an order rotated by one each time.
func TestRoundsShowMediansAndSpread(t *testing.T) {
	ms := time.Millisecond
	var rounds []Run
	for i, elapsed := range []time.Duration{10 * time.Second, 8 * time.Second, 12 * time.Second} { // 3000, 3750, 2500 ops/s
		c := fakeRun(SystemCatena, "A", 30000, elapsed, 2*ms, 10*ms)
		c.Round = i + 1
		c.ServerCPU = time.Duration(30000*(90+10*i)) * time.Microsecond // 90, 100, 110 µs/op
		e := fakeRun(SystemEtcd, "A", 30000, 30*time.Second, 5*ms, 20*ms)
		e.Round = i + 1
		rounds = append(rounds, c, e)
	}
	r := &Report{Sizing: DefaultSizing, Rounds: rounds, Runs: medianRuns(rounds)}
	if c, _ := r.Find(SystemCatena, "A"); c.Round != 1 || c.Throughput() != 3000 {
		t.Fatalf("median run of catena A: round %d, %.0f ops/s; want round 1, 3000", c.Round, c.Throughput())
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, want := range []string{
		"the median of 3 rounds",
		"A  catena  3  3000  2500  3750  42%  100  90  110", // median, least, most, spread; CPU median (of its own), least, most
		"A  3.00", // catena/etcd from the medians
	} {
		if !strings.Contains(squeeze(text.String()), squeeze(want)) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "- Rounds: 3, each system once per round") || !strings.Contains(md.String(), "| A | catena | 3 | 3000 | 2500 | 3750 | 42% | 100 | 90 | 110 |") {
		t.Errorf("markdown lacks the rounds:\n%s", md.String())
	}
	if got := roundOrder([]string{"a", "b", "c"}, 2); strings.Join(got, ",") != "b,c,a" {
		t.Errorf("round 2 runs %v; want b,c,a", got)
	}
}
