package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RunWatch against real processes, tiny: every watcher receives every
// measured write once, and the counts add up (no timing is checked).
func TestRunWatch(t *testing.T) {
	bin := catenaBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunWatch(ctx, WatchOptions{CatenaBinary: bin, Dir: t.TempDir(), Watchers: []int{1, 3}, Clients: 2,
		Rate: 100, Keys: 10, Warmup: 300 * time.Millisecond, Duration: time.Second, Drain: 30 * time.Second,
		Progress: &progress, Command: "catena-lab bench watch -watchers 1,3"})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for i, res := range rep.Results {
		w := []int{1, 3}[i]
		if res.Watchers != w || res.Clients != min(w, 2) {
			t.Errorf("result %d: %d watchers on %d clients, want %d on %d", i, res.Watchers, res.Clients, w, min(w, 2))
		}
		if res.Writes == 0 || res.Expected != res.Writes*int64(w) || res.Put.N == 0 {
			t.Errorf("%d watchers: %d writes (%d put latencies), %d events expected", w, res.Writes, res.Put.N, res.Expected)
		}
		if !res.Complete() || res.Missing != 0 || res.Duplicates != 0 || res.WatchErrors != 0 {
			t.Errorf("%d watchers: %d of %d events missing, %d duplicates, %d watch errors (%s)\n%s",
				w, res.Missing, res.Expected, res.Duplicates, res.WatchErrors, res.FirstError, progress.String())
		}
		// Each watcher's event of each measured write has its lags
		// recorded once.
		if res.WriteErrors == 0 && (int64(res.Lag.N) != res.Expected || res.FromStart.N != res.Lag.N) {
			t.Errorf("%d watchers: %d lags and %d from the start recorded, want %d", w, res.Lag.N, res.FromStart.N, res.Expected)
		}
		if res.Delivered == 0 || res.EventsPerSecond() <= 0 || res.Early > int64(res.Lag.N) {
			t.Errorf("%d watchers: %d events delivered in the measurement (%.0f/s), %d early", w, res.Delivered, res.EventsPerSecond(), res.Early)
		}
	}
	for _, want := range []string{"bench watch: measuring for 1s", "every watcher received each of the"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("no %q in the progress:\n%s", want, progress.String())
		}
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, want := range []string{"`catena-lab bench watch -watchers 1,3`", "\n| 1 | 1 | ", "\n| 3 | 2 | ", "| yes ("} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("no %q in the report:\n%s", want, md.String())
		}
	}
}

// A run where a watcher missed events says so, in the table and below
// it; the report replaces its section between its markers.
func TestWatchReportMarkdownSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	r := &WatchReport{Command: "catena-lab bench watch", Options: WatchOptions{Rate: 1000, Clients: 4, Writers: 256, Keys: 1000, ValueSize: 100,
		Warmup: 3 * time.Second, Duration: 10 * time.Second, Drain: 10 * time.Second},
		Results: []WatchResult{
			{Watchers: 1, Clients: 1, Elapsed: 10 * time.Second, Writes: 10000, Delivered: 10000, Expected: 10000,
				Lag: LatencySummary{N: 10000, P50: 0, P99: 4 * ms}, Early: 6000, FromStart: LatencySummary{N: 10000, P50: 3 * ms, P99: 9 * ms},
				ServerCPU: 7 * time.Second},
			{Watchers: 100, Clients: 4, Elapsed: 10 * time.Second, Writes: 10000, Delivered: 999000, Expected: 1000000, Missing: 1000,
				WatchErrors: 1, FirstError: "catena: watch compacted", Drained: 10 * time.Second},
		}}
	for range 2 { // the second time replaces the section
		if err := r.UpdateMarkdownFile(path); err != nil {
			t.Fatal(err)
		}
	}
	doc, _ := os.ReadFile(path)
	if n := bytes.Count(doc, []byte(WatchBeginMarker)); n != 1 {
		t.Errorf("%d begin markers, want 1:\n%s", n, doc)
	}
	for _, want := range []string{"kept", "## Watch", "| 1 | 1 | 1000 | 1000 | 0.0 | 4.0 | 6000 | 3.0 | 9.0 |", "| 0.70 |", "| yes (10000 × 1) |",
		"| 100 | 4 | 1000 | 99900 | - | - | 0 |", "| **no**: 1000 of 1000000 missing |",
		"- 100 watchers: 1000 of 1000000 events missing 10s after the measurement, 0 duplicates, 1 watches ended with an error (the first: catena: watch compacted)"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
}
