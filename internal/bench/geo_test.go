package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(ds, 0.5); got != 50*time.Millisecond {
		t.Errorf("p50 = %s, want 50ms", got)
	}
	if got := percentile(ds, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 = %s, want 99ms", got)
	}
	if got := percentile(ds[:1], 0.99); got != time.Millisecond {
		t.Errorf("p99 of one = %s, want 1ms", got)
	}
}

func TestSummarizeEmpty(t *testing.T) {
	if s := summarize(nil); s != (LatencySummary{}) {
		t.Errorf("summarize(nil) = %+v", s)
	}
}

func TestBucketLags(t *testing.T) {
	ms := time.Millisecond
	samples := []LagSample{
		{At: 100 * ms, Lag: 70 * ms},
		{At: 4999 * ms, Lag: 90 * ms},
		{At: 1000 * ms, Lag: 80 * ms},
		// nothing in [5s, 10s)
		{At: 10 * time.Second, Lag: 300 * ms},
		{At: 12 * time.Second, Lag: 100 * ms},
	}
	got := bucketLags(samples, 5*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d buckets, want 3: %+v", len(got), got)
	}
	want := []LagBucket{
		{Start: 0, LatencySummary: LatencySummary{N: 3, P50: 80 * ms, P99: 90 * ms, Max: 90 * ms}},
		{Start: 5 * time.Second},
		{Start: 10 * time.Second, LatencySummary: LatencySummary{N: 2, P50: 100 * ms, P99: 300 * ms, Max: 300 * ms}},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bucket %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if b := bucketLags(nil, time.Second); len(b) != 0 {
		t.Errorf("no samples: %d buckets", len(b))
	}
}

func TestGeoReportMarkdownSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &GeoReport{Command: "catena-lab bench geo -duration 1s", Options: GeoOptions{Clients: 2, Duration: time.Second},
		Results: []GeoResult{{Workload: GeoWorkload{"A", 0.5}, Elapsed: time.Second, Ops: 100,
			Buckets: []LagBucket{{LatencySummary: LatencySummary{N: 1, P50: time.Millisecond}}}}}}
	for range 2 { // the second time replaces the section
		if err := r.UpdateMarkdownFile(path); err != nil {
			t.Fatal(err)
		}
	}
	doc, _ := os.ReadFile(path)
	if n := bytes.Count(doc, []byte(GeoBeginMarker)); n != 1 {
		t.Errorf("%d begin markers, want 1:\n%s", n, doc)
	}
	for _, want := range []string{"kept", "| A (50/50) | 100 |", "`catena-lab bench geo -duration 1s`"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
}
