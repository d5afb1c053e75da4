package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/release"
)

// runCatena runs the command line args in-process and returns its exit
// status, standard output and standard error.
func runCatena(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// Every command's -h prints its usage and succeeds.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"put", "-h"}, {"get", "-h"}, {"del", "-h"}, {"status", "-h"},
		{"dev", "-h"}, {"master", "-h"}, {"server", "-h"}, {"version", "-h"},
		{"certs", "ca", "-h"}, {"certs", "issue", "-h"}, {"proxy", "-h"}, {"user", "add", "-h"}, {"role", "grant", "-h"},
		{"certs", "-h"}, {"user", "-h"}, {"role", "--help"}, {"keyspace", "help"},
	} {
		if code, _, stderr := runCatena(t, "", args...); code != 0 {
			t.Errorf("catena %s: exit status %d, want 0; stderr:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}

// catena help COMMAND prints what catena COMMAND -h prints, for every
// command (the lab's say where they went, as they do for -h), and help
// of something that is no command is a usage error.
func TestHelpOfEveryCommand(t *testing.T) {
	for name := range commands {
		code, stdout, stderr := runCatena(t, "", "help", name)
		codeH, stdoutH, stderrH := runCatena(t, "", name, "-h")
		if code != codeH || stdout != stdoutH || stderr != stderrH {
			t.Errorf("catena help %s: exit status %d, stdout %q, stderr %q; want those of catena %s -h: %d, %q, %q",
				name, code, stdout, stderr, name, codeH, stdoutH, stderrH)
		}
		if _, lab := map[string]bool{"sim": true, "bench": true, "experiment": true, "torture": true}[name]; lab {
			continue
		}
		if code != 0 || !strings.HasPrefix(stdout, "usage: catena "+name) {
			t.Errorf("catena help %s: exit status %d, stdout %q; want 0 and its usage", name, code, stdout)
		}
	}
	code, stdout, _ := runCatena(t, "", "help", "user", "add")
	if _, want, _ := runCatena(t, "", "user", "add", "-h"); code != 0 || stdout != want {
		t.Errorf("catena help user add: exit status %d, stdout %q; want catena user add -h's", code, stdout)
	}
	code, stdout, stderr := runCatena(t, "", "help", "gett")
	want := "catena help: unknown command \"gett\"; did you mean \"get\"?\nRun 'catena help' for the list of commands.\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Errorf("catena help gett: exit status %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, want)
	}
}

// --version and its usual spellings print what catena version prints.
func TestVersionFlags(t *testing.T) {
	_, want, _ := runCatena(t, "", "version")
	for _, flag := range []string{"--version", "-version", "-v"} {
		if code, stdout, stderr := runCatena(t, "", flag); code != 0 || stdout != want || !strings.HasPrefix(stdout, "catena ") {
			t.Errorf("catena %s: exit status %d, stdout %q, stderr %q; want 0 and %q", flag, code, stdout, stderr, want)
		}
	}
}

// An unknown command gets one line naming the commands it may be a typo
// of, and a pointer to catena help, not the whole usage.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct{ name, suggestion string }{
		{"gett", `; did you mean "get"?`},
		{"stauts", `; did you mean "status"?`},
		{"dve", `; did you mean "dev"?`},
		{"pet", `; did you mean "get" or "put"?`},
		{"keysp", `; did you mean "keyspace"?`},
		{"tortue", `; did you mean "torture"?`},
		{"hlep", `; did you mean "help"?`},
		{"xyzzy", ""},
		{"--verbose", ""},
	} {
		code, stdout, stderr := runCatena(t, "", tc.name)
		want := "catena: unknown command \"" + tc.name + "\"" + tc.suggestion + "\nRun 'catena help' for the list of commands.\n"
		if code != 2 || stdout != "" || stderr != want {
			t.Errorf("catena %s: exit status %d, stdout %q, stderr %q; want 2 and %q", tc.name, code, stdout, stderr, want)
		}
	}
}

// Mistakes in how a command is called exit with status 2; the error is
// printed once.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nosuchcommand"}, {"get"}, {"put", "k"}, {"get", "-nosuchflag", "k"},
		{"version", "extra"}, {"dev", "extra"},
		{"get", "k", "-consistency", "eventual"},
		{"server", "-log-level", "loud"}, {"master", "-log-format", "xml"}, {"dev", "-log-format", "xml"},
		{"dev", "-sites", "0"}, {"dev", "-sites", "9"}, {"dev", "-wan-rtt", "10ms"}, {"dev", "-sites", "2", "-redis", "127.0.0.1:9"},
		{"dev", "-sites", "2", "-wan-rtt", "10ms", "-wan-jitter", "20ms"},
		{"server", "-site", "x"}, {"server", "-site", "0"}, {"server", "-wan-rtt", "10ms"}, {"master", "-wan-jitter", "5ms"},
		{"master", "-wan-rtt", "-1s", "-wan-peers", "a:1"},
		{"keyspace", "create", "geo", "-prefix", "g/", "-sites", "1,x"}, {"keyspace", "list", "-sites", "1"},
		{"keyspace", "grace", "builds"}, {"keyspace", "grace", "-sites", "1,2"}, {"keyspace", "grace", "builds", "-sites", "1,y"},
		{"keyspace", "reassign", "builds"}, {"keyspace", "reassign", "builds", "-sites", "z"},
		{"dev", "-sites", "2", "-redis-tls", "127.0.0.1:9"},
		{"certs"}, {"certs", "sign"}, {"certs", "issue", "-dir", t.TempDir(), "-role", "king", "-name", "x"},
		{"keyspace", "create", "ev", "-prefix", "e/", "-mode", "eventual", "-master", "127.0.0.1:1"},
		{"server", "-data", t.TempDir(), "-tls-ca", "ca.crt"}, {"proxy", "-listen", "0.0.0.0:0"}, {"proxy", "-listen", "off"},
		{"user"}, {"user", "become", "x"}, {"user", "add"}, {"user", "grant", "bob"}, {"user", "passwd", "bob"},
		{"user", "add", "bob", "-password-file", "f", "-password-stdin"}, {"user", "add", "bob", "-no-password"},
		{"user", "del", "bob", "-password-stdin"}, {"user", "grant", "bob", "r", "-roles", "x"},
		{"role"}, {"role", "grant", "r", "-access", "read"}, {"role", "grant", "r", "-prefix", "p"},
		{"role", "grant", "r", "-prefix", "p", "-keyspace", "k", "-access", "read"}, {"role", "revoke", "r", "-prefix", "p", "-access", "read"},
		{"role", "add", "r", "-prefix", "p"},
		{"server", "-client-inflight-max", "-1"}, {"master", "-client-connections-max", "0"},
		{"server", "-loops", "-1"}, {"server", "-loops", "257"}, {"server", "-loops", "2", "-site", "1"}, {"server", "-object-cache-mb", "-1"},
		{"server", "-watch-window", "0"}, {"server", "-watch-window-mb", "0"},
		{"proxy", "-max-clients-per-address", "0"}, {"proxy", "-pipeline-max", "0"},
		{"backup"}, {"backup", "-out", "d", "extra"}, {"backup", "-out", "d", "-rate", "fast"}, {"backup", "-out", "d", "-rate", "-1"},
		{"restore"}, {"restore", "-from", "d", "-parallel", "0"}, {"restore", "-from", "d", "-max-replicas", "-1"},
	} {
		code, _, stderr := runCatena(t, "", args...)
		if code != 2 {
			t.Errorf("catena %s: exit status %d, want 2; stderr:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	_, _, stderr := runCatena(t, "", "get")
	if want := "catena get: want 1 argument(s), got 0"; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "want 1") != 1 {
		t.Errorf("catena get: stderr %q, want one line starting %q", stderr, want)
	}
	// An unknown mode is refused before any master is asked (none
	// answers at 127.0.0.1:1), naming the modes there are.
	if _, _, stderr := runCatena(t, "", "keyspace", "create", "ev", "-prefix", "e/", "-mode", "eventual", "-master", "127.0.0.1:1"); !strings.Contains(stderr, `-mode: unknown mode "eventual" (want strong, causal or hierarchical)`) {
		t.Errorf("keyspace create -mode eventual: stderr %q; want the mode named, not a dial error", stderr)
	}
}

// catena certs issue without a CA leaves no directory behind: it creates
// none (only certs ca does).
func TestCertsIssueWithoutCACreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nowhere")
	if code, _, stderr := runCatena(t, "", "certs", "issue", "-dir", dir, "-role", "client", "-name", "alice"); code != 1 || !strings.Contains(stderr, "no CA in") {
		t.Errorf("certs issue without a CA: exit %d, stderr %q; want 1 and no CA", code, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("certs issue without a CA left %s behind (%v)", dir, err)
	}
}

// Flags may follow positional arguments, and errors from the client
// package (which start with "catena: ") are not prefixed twice.
func TestFlagsAfterArgumentsAndOnePrefix(t *testing.T) {
	code, _, stderr := runCatena(t, "", "get", "k", "-master", "127.0.0.1:1", "-timeout", "300ms")
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if !strings.HasPrefix(stderr, "catena get: unavailable: no master at 127.0.0.1:1: cannot reach 127.0.0.1:1") {
		t.Errorf("stderr %q, want the client's error after one prefix", stderr)
	}
	if strings.Contains(stderr, "catena get: catena:") {
		t.Errorf("stderr %q repeats the prefix", stderr)
	}
}

func TestParseFlagsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		master     string
		positional []string
	}{
		{[]string{"k", "-master", "m"}, "m", []string{"k"}},
		{[]string{"-master", "m", "k", "v"}, "m", []string{"k", "v"}},
		{[]string{"k", "-master=m", "v"}, "m", []string{"k", "v"}},
		{[]string{"k", "-"}, "", []string{"k", "-"}},
		{[]string{"k", "--", "-5", "-master"}, "", []string{"k", "-5", "-master"}},
		{[]string{"-master", "m", "--", "k"}, "m", []string{"k"}},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		master := fs.String("master", "", "")
		positional, err := cli.ParseFlags(fs, tc.args)
		if err != nil || *master != tc.master || !slices.Equal(positional, tc.positional) {
			t.Errorf("cli.ParseFlags(%q) = %q, -master %q, %v; want %q, -master %q", tc.args, positional, *master, err, tc.positional, tc.master)
		}
	}
}

// Every command that has flags reads -config FILE.
func TestEveryCommandWithFlagsTakesConfig(t *testing.T) {
	config := filepath.Join(t.TempDir(), "catena.conf")
	if err := os.WriteFile(config, []byte("# a setting no command has\nnosuchsetting = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"put", "k", "v"}, {"get", "k"}, {"del", "k"}, {"status"},
		{"dev"}, {"master"}, {"server"},
		{"user", "list"}, {"role", "list"},
	} {
		code, _, stderr := runCatena(t, "", append(args, "-config", config)...)
		if code != 1 || !strings.Contains(stderr, `unknown setting "nosuchsetting"`) {
			t.Errorf("catena %s -config FILE: exit status %d, stderr %q; want the config file read", strings.Join(args, " "), code, stderr)
		}
	}
}

// The lab's commands moved to catena-lab: without catena-lab beside the
// binary, catena says where they went, with the command line to run.
func TestLabCommandsSayWhereTheyWent(t *testing.T) {
	for _, cmd := range []string{"sim", "bench", "experiment", "torture"} {
		code, stdout, stderr := runCatena(t, "", cmd, "-seeds", "3", "a b")
		want := "catena " + cmd + ": moved to catena-lab: go run ./cmd/catena-lab " + cmd + " -seeds 3 'a b' ("
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("catena %s: exit status %d, stderr %q; want 2 and %q", cmd, code, stderr, want)
		}
	}
	code, stdout, _ := runCatena(t, "", "-h")
	for _, cmd := range []string{"sim", "bench", "experiment", "torture"} {
		if code != 0 || strings.Contains(stdout, "\n  "+cmd+" ") {
			t.Errorf("catena -h lists the lab's %s:\n%s", cmd, stdout)
		}
	}
}

func TestVersionLine(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
		{Key: "vcs.revision", Value: "4290d9f0123456789abcdef0123456789abcdef0"},
		{Key: "vcs.time", Value: "2026-11-23T14:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	want := "catena " + release.Version + " (protocol " + release.Speaks.String() + "), revision 4290d9f0123456789abcdef0123456789abcdef0 (2026-11-23T14:00:00Z) with uncommitted changes, go1.26.8 linux/amd64"
	if got := versionLine(info); got != want {
		t.Errorf("versionLine = %q\nwant          %q", got, want)
	}
	info = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}
	if got, want := versionLine(info), "catena "+release.Version+" (protocol "+release.Speaks.String()+"), revision unknown, go1.26.8"; got != want {
		t.Errorf("versionLine = %q, want %q", got, want)
	}
}

// catena certs makes a CA and certificates whose role and name a process
// checks at start: a server refuses a client's certificate, and one naming
// another address.
func TestCertsAndTheRoleAProcessNeeds(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runCatena(t, "", "certs", "ca", "-dir", dir); code != 0 {
		t.Fatalf("certs ca: %d %s", code, stderr)
	}
	if code, _, stderr := runCatena(t, "", "certs", "ca", "-dir", dir); code != 1 || !strings.Contains(stderr, "already holds a CA") {
		t.Fatalf("certs ca again: %d %s; want a refusal", code, stderr)
	}
	if code, stdout, stderr := runCatena(t, "", "certs", "issue", "-dir", dir, "-role", "client", "-name", "alice"); code != 0 || !strings.Contains(stdout, "client alice") {
		t.Fatalf("certs issue: %d %s %s", code, stdout, stderr)
	}
	if code, _, stderr := runCatena(t, "", "certs", "issue", "-dir", dir, "-role", "server", "-name", "127.0.0.1:7101"); code != 0 {
		t.Fatalf("certs issue: %d %s", code, stderr)
	}
	for _, c := range []struct{ cert, want string }{
		{"client-alice", "is a client certificate; this process needs a server certificate"},
		{"server-127.0.0.1_7101", "names 127.0.0.1:7101; this process's peers expect 127.0.0.1:7102"},
	} {
		code, _, stderr := runCatena(t, "", "server", "-listen", "127.0.0.1:7102", "-data", t.TempDir(), "-tls-ca", filepath.Join(dir, "ca.crt"),
			"-tls-cert", filepath.Join(dir, c.cert+".crt"), "-tls-key", filepath.Join(dir, c.cert+".key"))
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("server with %s: exit %d, %q; want %q", c.cert, code, stderr, c.want)
		}
	}
}
