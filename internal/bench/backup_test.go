package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	xs := []float64{2, 1}
	median(xs)
	if xs[0] != 2 {
		t.Error("median sorted its argument")
	}
}

// backupPhases are three rounds whose backup phases' p99s are 1.1 and
// 1.2 times the normal ones' at the median, one round an outlier.
func backupPhases(readP99 time.Duration) []BackupPhase {
	ms := time.Millisecond
	var ps []BackupPhase
	for i, f := range []float64{1, 1.1, 3} { // round 3: a slow outlier
		n := BackupPhase{Round: i + 1, Kind: PhaseNormal, Elapsed: 10 * time.Second, Ops: int64(10000 * f),
			Reads:   LatencySummary{P50: ms, P99: time.Duration(f * float64(10*ms))},
			Updates: LatencySummary{P50: 2 * ms, P99: time.Duration(f * float64(20*ms))}}
		b := BackupPhase{Round: i + 1, Kind: PhaseBackup, Elapsed: 10 * time.Second, Ops: int64(9000 * f),
			Reads:       LatencySummary{P50: ms, P99: time.Duration(f * float64(readP99))},
			Updates:     LatencySummary{P50: 2 * ms, P99: time.Duration(f * float64(24*ms))},
			BackupBytes: 80 << 20, Backups: 1}
		ps = append(ps, n, b)
	}
	return ps
}

func TestBackupSummaryAndVerdict(t *testing.T) {
	ms := time.Millisecond
	r := &BackupReport{Phases: backupPhases(11 * ms)}
	normal, bk := r.Summaries()
	if normal.Rounds != 3 || normal.Throughput != 1100 || normal.ReadP99 != 11*ms || normal.UpdateP99 != 22*ms {
		t.Errorf("normal = %+v", normal)
	}
	if bk.Rounds != 3 || bk.Backups != 3 || bk.MiBps != 8 || bk.UpdateP99 != time.Duration(1.1*float64(24*ms)) {
		t.Errorf("backup = %+v", bk)
	}
	ratios := r.Ratios()
	if ratios.ReadP99 < 1.099 || ratios.ReadP99 > 1.101 || ratios.UpdateP99 < 1.199 || ratios.UpdateP99 > 1.201 || ratios.Throughput != 0.9 {
		t.Errorf("ratios = %+v", ratios)
	}
	if v := ratios.Verdict(); !ratios.Within(BackupLatencyLimit) || !strings.HasPrefix(v, "PASS") || !strings.Contains(v, "read p99 +10%, update p99 +20%") {
		t.Errorf("verdict %q", v)
	}
	// Reads 30% slower at p99: over the bound.
	r = &BackupReport{Phases: backupPhases(13 * ms)}
	if v := r.Ratios().Verdict(); !strings.HasPrefix(v, "FAIL") || !strings.Contains(v, "read p99 +30%") {
		t.Errorf("verdict %q", v)
	}
	if v := (BackupRatios{}).Verdict(); !strings.HasPrefix(v, "UNMEASURED") {
		t.Errorf("verdict of nothing %q", v)
	}
}

func TestBackupReportMarkdownSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &BackupReport{Command: "catena-lab bench backup -repeat 3", Options: BackupOptions{Clients: 16, Phase: 15 * time.Second, Repeat: 3, Rate: 8 << 20},
		Phases: backupPhases(11 * time.Millisecond)}
	for range 2 { // the second time replaces the section
		if err := r.UpdateMarkdownFile(path); err != nil {
			t.Fatal(err)
		}
	}
	doc, _ := os.ReadFile(path)
	if n := bytes.Count(doc, []byte(BackupBeginMarker)); n != 1 {
		t.Errorf("%d begin markers, want 1:\n%s", n, doc)
	}
	for _, want := range []string{"kept", "## Issue 34: latency during an online backup", "`catena-lab bench backup -repeat 3`",
		"| normal (median) | 3 | 1100 |", "| backup/normal | | 0.90 | 1.00 | 1.10 | 1.00 | 1.20 |", "**Verdict (issue 34): PASS", "| 2 | backup | 990 | 1.0 | 12.1 (×1.10) | 2.0 | 26.4 (×1.20) |"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
}
