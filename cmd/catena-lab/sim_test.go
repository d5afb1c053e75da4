package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSimCommandSummary(t *testing.T) {
	var out bytes.Buffer
	if err := runSim([]string{"-seeds", "4", "-faults", "-workers", "2"}, &out); err != nil {
		t.Fatalf("sim: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "4 passed, 0 failed" {
		t.Fatalf("last line %q, want the summary", last)
	}
	if !strings.Contains(out.String(), "progress: 4/4 seeds") {
		t.Fatalf("no progress line in\n%s", out.String())
	}
}

func TestSimCommandReplaysOneSeed(t *testing.T) {
	var out bytes.Buffer
	if err := runSim([]string{"-seed", "3", "-faults"}, &out); err != nil {
		t.Fatalf("sim: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "seed 3:") || !strings.HasSuffix(strings.TrimSpace(out.String()), "1 passed, 0 failed") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

func TestSimCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-seeds", "0"}, {"-chain", "-1"}, {"extra"}, {"-nosuchflag"}} {
		var out bytes.Buffer
		if err := runSim(args, &out); err == nil {
			t.Errorf("sim %q: no error", args)
		}
	}
}
