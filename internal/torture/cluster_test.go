package torture

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Replace stops a process cleanly and starts it again from another
// binary, an exit the harness expected; the kernel shows the new binary
// running. (Real processes in a namespace: root only.)
func TestReplaceRestartsFromAnotherBinary(t *testing.T) {
	n := testNet(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	old, exe := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for _, f := range []string{old, exe} {
		if err := os.WriteFile(f, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The process is this test binary as a helper that serves a port.
	t.Setenv(helperEnv, "serve "+n.Hosts[0].IP+":9000")
	c, err := newCluster(n, n.Hosts[:2], clusterOptions{exe: old, masters: 1, servers: 1, dataDir: dir, logDir: dir, pipeEnv: "CATENA_TEST_PIPE"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.StopAll()
	p := c.Masters[0]
	if err := c.Start(p); err != nil {
		t.Fatal(err)
	}
	runs := func(exe string) {
		t.Helper()
		err := awaitCondition(context.Background(), 10*time.Second, "not running "+exe, func() string {
			if err := p.CheckExe(exe); err != nil {
				return err.Error()
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runs(old)
	if err := p.CheckExe(exe); err == nil {
		t.Fatal("CheckExe takes the old binary for the new")
	}
	stopped, err := c.Replace(p, exe)
	if err != nil || !strings.HasPrefix(stopped, "stopped in ") {
		t.Fatalf("Replace: %q, %v", stopped, err)
	}
	runs(exe)
	if p.Exe() != exe {
		t.Errorf("p starts from %s", p.Exe())
	}
	if exits := c.UnexpectedExits(); len(exits) > 0 {
		t.Errorf("the replaced process's exit counted as unexpected: %v", exits)
	}
	if got := c.Stop(p); !strings.HasPrefix(got, "stopped in ") || !p.Down() {
		t.Errorf("Stop: %q, down %v", got, p.Down())
	}
	if got := c.Stop(p); got != "it was not running" {
		t.Errorf("Stop of a stopped process: %q", got)
	}
}
