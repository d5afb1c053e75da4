package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/experiment"
	"github.com/catena-kv/catena/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// runLab runs the command line args in-process and returns its exit
// status, standard output and standard error.
func runLab(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// Every command's -h prints its usage and succeeds.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"sim", "-h"}, {"experiment", "-h"}, {"bench", "-h"}, {"bench", "compare", "-h"},
		{"bench", "redis", "-h"}, {"bench", "rejoin", "-h"}, {"bench", "geo", "-h"}, {"bench", "backup", "-h"}, {"bench", "watch", "-h"}, {"torture", "-h"}, {"build-release", "-h"},
	} {
		if code, _, stderr := runLab(t, args...); code != 0 {
			t.Errorf("catena-lab %s: exit status %d, want 0; stderr:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}

// catena-lab help COMMAND prints, to standard output, what catena-lab
// COMMAND -h prints, for every command.
func TestHelpOfEveryCommand(t *testing.T) {
	for name := range commands {
		code, stdout, stderr := runLab(t, "help", name)
		_, stdoutH, _ := runLab(t, name, "-h")
		if code != 0 || stderr != "" || stdout != stdoutH || !strings.HasPrefix(stdout, "usage: catena-lab "+name) {
			t.Errorf("catena-lab help %s: exit status %d, stdout %q, stderr %q; want 0 and catena-lab %s -h's usage %q", name, code, stdout, stderr, name, stdoutH)
		}
	}
}

// An unknown command gets one line naming the commands it may be a typo
// of, and a pointer to catena-lab help, not the whole usage.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct{ name, suggestion string }{
		{"simm", `; did you mean "sim"?`},
		{"experimnet", `; did you mean "experiment"?`},
		{"bnech", `; did you mean "bench"?`},
		{"dev", ""},
	} {
		code, stdout, stderr := runLab(t, tc.name)
		want := "catena-lab: unknown command \"" + tc.name + "\"" + tc.suggestion + "\nRun 'catena-lab help' for the list of commands.\n"
		if code != 2 || stdout != "" || stderr != want {
			t.Errorf("catena-lab %s: exit status %d, stdout %q, stderr %q; want 2 and %q", tc.name, code, stdout, stderr, want)
		}
	}
}

// Mistakes in how a command is called exit with status 2.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nosuchcommand"}, {"master"}, {"sim", "extra"}, {"experiment"}, {"bench"}, {"bench", "compare", "extra"},
		{"bench", "backup", "-rate", "fast"}, {"bench", "backup", "-repeat", "0"}, {"bench", "backup", "extra"},
		{"bench", "watch", "-watchers", "1,0"}, {"bench", "watch", "-watchers", "many"}, {"bench", "watch", "-rate", "0"}, {"bench", "watch", "-value-size", "4"}, {"bench", "watch", "extra"},
		{"torture", "extra"}, {"torture", "-nemesis", "flood"}, {"torture", "-duration", "0s"}, {"torture", "-masters", "2"}, {"torture", "-sites", "9"}, {"torture", "-sites", "2", "-wan-rtt", "-1s"},
		{"torture", "-downgrade"}, {"torture", "-no-finalize"}, {"torture", "-upgrade-from", "/no/such/catena"},
		{"torture", "-upgrade-from", os.Args[0], "-sites", "2"}, {"build-release"}, {"build-release", "extra", "-out", "x"},
	} {
		if code, _, stderr := runLab(t, args...); code != 2 {
			t.Errorf("catena-lab %s: exit status %d, want 2; stderr:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}

// Every command reads -config FILE.
func TestEveryCommandTakesConfig(t *testing.T) {
	config := filepath.Join(t.TempDir(), "lab.conf")
	if err := os.WriteFile(config, []byte("# a setting no command has\nnosuchsetting = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"sim"}, {"experiment", "fig4"}, {"bench", "compare"}, {"bench", "redis"}, {"bench", "rejoin"}, {"bench", "geo"}, {"bench", "backup"}, {"bench", "watch"}, {"torture"}} {
		code, _, stderr := runLab(t, append(args, "-config", config)...)
		if code != 1 || !strings.Contains(stderr, `unknown setting "nosuchsetting"`) {
			t.Errorf("catena-lab %s -config FILE: exit status %d, stderr %q; want the config file read", strings.Join(args, " "), code, stderr)
		}
	}
}

// catena-lab -h lists every experiment of the registry and only the
// lab's commands.
func TestUsage(t *testing.T) {
	code, stdout, _ := runLab(t, "-h")
	if code != 0 {
		t.Fatalf("exit status %d", code)
	}
	for _, name := range experiment.Names {
		if !strings.Contains(stdout, name) {
			t.Errorf("catena-lab -h does not list experiment %s:\n%s", name, stdout)
		}
	}
	for _, cmd := range []string{"dev", "master", "server", "proxy", "put", "status"} {
		if strings.Contains(stdout, "\n  "+cmd+" ") {
			t.Errorf("catena-lab -h lists catena's %s:\n%s", cmd, stdout)
		}
	}
}

// catena-lab experiment -h describes every experiment of the registry.
func TestExperimentUsageNamesEveryExperiment(t *testing.T) {
	for _, name := range experiment.Names {
		if !strings.Contains(experimentDescription, "\n  "+name+" ") {
			t.Errorf("experimentDescription does not describe %s", name)
		}
	}
}

// The harnesses run the catena beside catena-lab.
func TestCatenaBesideTheLab(t *testing.T) {
	dir := t.TempDir()
	if _, ok := catenaBeside(filepath.Join(dir, "catena-lab")); ok {
		t.Fatalf("found a catena in the empty %s", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "catena"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if path, ok := catenaBeside(filepath.Join(dir, "catena-lab")); !ok || path != filepath.Join(dir, "catena") {
		t.Fatalf("catenaBeside = %q, %v; want %s", path, ok, filepath.Join(dir, "catena"))
	}
}
