package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A master logs a recovery's start, its progress when the counts change
// (at most every recoveryLogChangedEvery) or have not for
// recoveryLogSteadyEvery, and its end.
func TestRecoveryLog(t *testing.T) {
	var buf bytes.Buffer
	r := recoveryLog{log: slog.New(slog.NewTextHandler(&buf, nil))}
	start := time.Now()
	for _, step := range []struct {
		at               time.Duration
		short, extending int
	}{
		{0, 0, 0},                       // healthy: nothing
		{time.Second, 4, 0},             // started
		{1500 * time.Millisecond, 4, 2}, // changed, too soon
		{4 * time.Second, 3, 2},         // progress
		{5 * time.Second, 3, 2},         // unchanged
		{40 * time.Second, 3, 2},        // steady: progress
		{41 * time.Second, 0, 0},        // complete
		{42 * time.Second, 0, 0},        // healthy
	} {
		r.observe(start.Add(step.at), step.short, step.extending)
	}
	want := []string{
		`msg="recovery: started" chains-short=4 extensions=0`,
		`msg="recovery: progress" chains-short=3 extensions=2 elapsed=3s`,
		`msg="recovery: progress" chains-short=3 extensions=2 elapsed=39s`,
		`msg="recovery: complete, every chain has its replicas" elapsed=40s`,
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("logged:\n%s\nwant %d lines", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
}
