package bench

import (
	"testing"
)

// A started process's CPU time and peak memory are read from /proc: the
// figures the report shows per system.
func TestProcessFiguresFromProc(t *testing.T) {
	p, err := startProcess(t.TempDir(), "sleeper", "sleep", "30")
	if err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	defer p.Stop(0)
	if rss := p.peakRSS(); rss <= 0 || rss > 1<<30 {
		t.Fatalf("peak RSS of sleep: %d bytes", rss)
	}
	if cpu := p.cpuTime(); cpu < 0 {
		t.Fatalf("CPU time of sleep: %v", cpu)
	}
}
