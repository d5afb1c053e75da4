package main

import (
	"os"
	"os/exec"
	"path/filepath"
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

// With catena-lab beside it, catena runs a lab command with catena-lab
// in its place: the arguments, output and exit status are catena-lab's.
func TestLabCommandRunsCatenaLabBesideIt(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "catena")
	if err := os.Link(catenaBinary(t), bin); err != nil { // a copy where a hard link cannot be
		data, err := os.ReadFile(catenaBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lab := "#!/bin/sh\necho \"catena-lab $*\"\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "catena-lab"), []byte(lab), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "sim", "-seeds", "3", "a b")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 3 || string(out) != "catena-lab sim -seeds 3 a b\n" {
		t.Errorf("catena sim -seeds 3 'a b': exit status %d, output %q; want catena-lab's 3 and %q", code, out, "catena-lab sim -seeds 3 a b\n")
	}
}
