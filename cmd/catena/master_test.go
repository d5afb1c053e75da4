package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
)

// completeWith parses args as `catena master` would and completes
// options for a master whose state holds saved.
func completeWith(t *testing.T, saved master.Settings, args ...string) (master.Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	creation := registerClusterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var opts master.Options
	return opts, creation.complete(&opts, saved)
}

func TestClusterFlagsOnRestart(t *testing.T) {
	saved := master.Settings{ReplicationFactor: 2, Placement: placement.Ring, Servers: splitNodeIDs("s1,s2,s3"), Volumes: 8}
	// No flags, or flags equal to the saved settings: the master resumes
	// with the saved ones; defaults of flags not given are not compared.
	for _, args := range [][]string{nil, {"-replicas", "2", "-placement", "ring", "-servers", "s1,s2,s3", "-volumes", "8"}} {
		opts, err := completeWith(t, saved, args...)
		if err != nil || !opts.Settings.IsZero() || opts.Chains != nil {
			t.Fatalf("restart with %v: %v, %+v; want no error and no settings of its own", args, err, opts.Settings)
		}
	}
	_, err := completeWith(t, saved, "-replicas", "3", "-placement", "random")
	for _, want := range []string{"-replicas 3 (saved: 2)", "-placement random (saved: ring)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("restart with contradicting flags: %v, want an error containing %q", err, want)
		}
	}
}

func TestClusterFlagsOnCreation(t *testing.T) {
	if _, err := completeWith(t, master.Settings{}); err == nil || !strings.Contains(err.Error(), "-servers is required") {
		t.Fatalf("creation without -servers: %v", err)
	}
	opts, err := completeWith(t, master.Settings{}, "-servers", "s1,s2,s3,s4", "-volumes", "4")
	if err != nil {
		t.Fatal(err)
	}
	want := master.Settings{ReplicationFactor: 3, Placement: placement.Random, Servers: splitNodeIDs("s1,s2,s3,s4"), Volumes: 4}
	if !opts.Settings.Equal(want) || len(opts.Chains) != 4 {
		t.Fatalf("settings %+v with %d chains, want %+v with 4", opts.Settings, len(opts.Chains), want)
	}
}
