package main

import (
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// catenaBinary returns this command built once per test process, for
// tests that need it as a separate process (catena dev starts copies of
// itself).
func catenaBinary(t *testing.T) string { return testbin.Catena(t) }

// catena version prints the revision the toolchain recorded in the
// binary (go version -m shows it), or says it is unknown when none was
// recorded (-buildvcs=false, or a git worktree, which the go command does
// not stamp).
func TestVersionNamesRevision(t *testing.T) {
	bin := catenaBinary(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("catena version: %v\n%s", err, out)
	}
	line := strings.TrimSpace(string(out))
	if !strings.HasPrefix(line, "catena ") || strings.Contains(line, "\n") || !strings.Contains(line, runtime.Version()) {
		t.Fatalf("catena version printed %q", line)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := "revision unknown"
	if m := regexp.MustCompile(`(?m)^\s*build\s+vcs\.revision=(\S+)$`).FindSubmatch(meta); m != nil {
		want = "revision " + string(m[1])
	}
	if !strings.Contains(line, want) {
		t.Errorf("catena version printed %q; want %q", line, want)
	}
}
