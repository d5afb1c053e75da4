package bench

import (
	"os"
	"testing"
	"time"
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

// A process's tree counts the CPU its children use: catena dev's
// servers are its children.
func TestTreeCPUTimeCountsChildren(t *testing.T) {
	// sh starts a busy child and waits for it.
	p, err := startProcess(t.TempDir(), "parent", "sh", "-c", "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 5' & wait")
	if err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	defer p.Stop(0)
	deadline := time.Now().Add(20 * time.Second)
	for p.treeCPUTime() < 100*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if tree, own := p.treeCPUTime(), p.cpuTime(); tree < 100*time.Millisecond || own >= tree {
		t.Fatalf("tree CPU %s, own %s: want the busy child counted", tree, own)
	}
}

func TestPressureStall(t *testing.T) {
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skip("no pressure stall information")
	}
	a := pressureStall("cpu")
	b := pressureStall("cpu")
	if a < 0 || b < a {
		t.Fatalf("cpu stall %s then %s", a, b)
	}
}
