package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBase(t *testing.T) {
	hash := strings.Repeat("ab", 20)
	for _, tc := range []struct {
		text, version, commit string
	}{
		{"0.1.0 " + hash + "\n", "0.1.0", hash},
		{"v1.2.3-rc.1  " + hash, "v1.2.3-rc.1", hash},
		{"", "", ""},
		{"0.1.0\n", "", ""},
		{"0.1 " + hash, "", ""},
		{"0.1.0 " + hash[:39], "", ""},
		{"0.1.0 " + strings.ToUpper(hash), "", ""},
		{"0.1.0 " + hash + " extra", "", ""},
	} {
		version, commit, err := parseBase(tc.text, "base.txt")
		if version != tc.version || commit != tc.commit || (err == nil) != (tc.commit != "") {
			t.Errorf("parseBase(%q) = %q, %q, %v; want %q, %q", tc.text, version, commit, err, tc.version, tc.commit)
		}
	}
}

// gitRepo makes a git repository in a temporary directory whose commits
// are a module with a cmd/catena that prints each commit's word; it
// returns the directory and the commits' hashes.
func gitRepo(t *testing.T, words ...string) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	write := func(path, text string) {
		t.Helper()
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/release\n\ngo 1.22\n")
	var hashes []string
	for _, w := range words {
		write("cmd/catena/main.go", "package main\n\nfunc main() { println(\""+w+"\") }\n")
		git("add", "-A")
		git("commit", "-q", "-m", w)
		hashes = append(hashes, git("rev-parse", "HEAD"))
	}
	return dir, hashes
}

// build-release builds cmd/catena of the commit asked for, or of the one
// internal/release/base.txt names, not of the working tree.
func TestBuildReleaseFromHistory(t *testing.T) {
	repo, hashes := gitRepo(t, "old", "new")
	out := filepath.Join(t.TempDir(), "catena-old")
	code, stdout, stderr := runLab(t, "build-release", "-repo", repo, "-commit", hashes[0][:10], "-out", out)
	if code != 0 {
		t.Fatalf("exit status %d: %s%s", code, stdout, stderr)
	}
	if got, _ := exec.Command(out).CombinedOutput(); strings.TrimSpace(string(got)) != "old" {
		t.Fatalf("the built binary prints %q, want old", got)
	}
	if !strings.Contains(stdout, "catena at "+hashes[0]) {
		t.Errorf("output %q does not name the commit", stdout)
	}
	// Without -commit: the base release's, from base.txt.
	code, _, stderr = runLab(t, "build-release", "-repo", repo, "-out", out)
	if code != 1 || !strings.Contains(stderr, "base.txt does not exist") {
		t.Fatalf("without base.txt: exit status %d, %s", code, stderr)
	}
	base := filepath.Join(repo, "internal", "release", "base.txt")
	os.MkdirAll(filepath.Dir(base), 0o755)
	if err := os.WriteFile(base, []byte("0.1.0 "+hashes[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runLab(t, "build-release", "-repo", repo, "-out", out)
	if code != 0 || !strings.Contains(stdout, "the base release 0.1.0") {
		t.Fatalf("with base.txt: exit status %d: %s%s", code, stdout, stderr)
	}
	if got, _ := exec.Command(out).CombinedOutput(); strings.TrimSpace(string(got)) != "new" {
		t.Fatalf("the base release's binary prints %q, want new", got)
	}
}

// A commit a shallow clone lacks fails with the way to fetch it.
func TestBuildReleaseShallowClone(t *testing.T) {
	repo, hashes := gitRepo(t, "old", "new")
	shallow := filepath.Join(t.TempDir(), "shallow")
	if out, err := exec.Command("git", "clone", "-q", "--depth", "1", "file://"+repo, shallow).CombinedOutput(); err != nil {
		t.Fatalf("git clone --depth 1: %v: %s", err, out)
	}
	_, err := buildRelease(context.Background(), shallow, hashes[0], filepath.Join(t.TempDir(), "catena"))
	if err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Fatalf("err = %v, want the advice to fetch the history", err)
	}
	if _, err := buildRelease(context.Background(), repo, "nosuchbranch", filepath.Join(t.TempDir(), "catena")); err == nil || !strings.Contains(err.Error(), "not in this clone") {
		t.Fatalf("an unknown revision: err = %v", err)
	}
}
