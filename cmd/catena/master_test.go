package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
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
	spec, err := creation.spec("127.0.0.1:7100")
	if err != nil {
		return opts, err
	}
	return opts, spec.Complete(&opts, saved)
}

func TestClusterFlagsOnRestart(t *testing.T) {
	saved := master.Settings{ReplicationFactor: 2, Placement: placement.Ring, Servers: cli.SplitNodeIDs("s1,s2,s3"), Volumes: 8}
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
	want := master.Settings{ReplicationFactor: 3, Placement: placement.Random, Servers: cli.SplitNodeIDs("s1,s2,s3,s4"), Volumes: 4}
	if !opts.Settings.Equal(want) || len(opts.Chains) != 4 {
		t.Fatalf("settings %+v with %d chains, want %+v with 4", opts.Settings, len(opts.Chains), want)
	}
}

func TestSiteFlags(t *testing.T) {
	const sites = "2=oslo@10.1.0.1:7100 ; 1=lisbon@127.0.0.1:7100,10.0.0.2:7100"
	opts, err := completeWith(t, master.Settings{}, "-servers", "s1,s2,s3", "-default-k", "2",
		"-site", "1", "-sites", sites, "-default-sites", "2,1")
	if err != nil {
		t.Fatal(err)
	}
	want := master.Settings{ReplicationFactor: 3, Placement: placement.Random, Servers: cli.SplitNodeIDs("s1,s2,s3"), Volumes: 1,
		DefaultK: 2, Site: 1, DefaultSites: []wire.SiteID{1, 2}, Sites: []wire.Site{
			{ID: 1, Name: "lisbon", Masters: cli.SplitNodeIDs("127.0.0.1:7100,10.0.0.2:7100")},
			{ID: 2, Name: "oslo", Masters: cli.SplitNodeIDs("10.1.0.1:7100")},
		}}
	// No -cluster: the deployment's name is derived from the sites.
	want.Cluster = master.DefaultCluster(want.Sites)
	if !opts.Settings.Equal(want) {
		t.Fatalf("settings %+v, want %+v", opts.Settings, want)
	}
	if err := opts.Settings.Validate(); err != nil {
		t.Fatalf("settings from valid flags: %v", err)
	}
	if got := formatSites(want.Sites); got != "1=lisbon@127.0.0.1:7100,10.0.0.2:7100;2=oslo@10.1.0.1:7100" {
		t.Errorf("formatSites = %q", got)
	}

	// A restart with the same sites resumes; with another site id it is
	// refused, naming the flag.
	if _, err := completeWith(t, want, "-site", "1", "-sites", sites, "-default-sites", "1,2", "-default-k", "2"); err != nil {
		t.Fatalf("restart with the saved sites: %v", err)
	}
	named, err := completeWith(t, master.Settings{}, "-servers", "s1,s2,s3", "-default-k", "2",
		"-site", "1", "-sites", sites, "-default-sites", "2,1", "-cluster", "prod")
	if err != nil || named.Settings.Cluster != "prod" {
		t.Fatalf("-cluster prod: %v, settings %+v", err, named.Settings)
	}
	if _, err := completeWith(t, named.Settings, "-cluster", "staging"); err == nil || !strings.Contains(err.Error(), "-cluster staging (saved: prod)") {
		t.Fatalf("restart with another -cluster: %v", err)
	}
	_, err = completeWith(t, want, "-site", "2", "-sites", "1=lisbon@x:1;2=oslo@127.0.0.1:7100", "-default-k", "1")
	for _, w := range []string{"-site 2 (saved: 1)", "-sites", "-default-k 1 (saved: 2)"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("restart with other sites: %v, want an error containing %q", err, w)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-site", "0", "-sites", sites}, "-site: site id \"0\""},
		{[]string{"-site", "x", "-sites", sites}, "want a number"},
		{[]string{"-site", "1"}, "-site and -sites go together"},
		{[]string{"-cluster", "prod"}, "-cluster needs -sites"},
		{[]string{"-site", "1", "-sites", "1=lisbon"}, "want ID=NAME@MASTER"},
		{[]string{"-site", "1", "-sites", "1=lisbon@127.0.0.1:7100;1=oslo@b:1"}, "listed twice"},
		{[]string{"-site", "1", "-sites", "1=lisbon@127.0.0.1:7100;2=lisbon@b:1"}, "listed twice"},
		{[]string{"-site", "1", "-sites", "1=lisbon@127.0.0.1:7100;2=oslo@127.0.0.1:7100"}, "listed in sites"},
		{[]string{"-site", "1", "-sites", "1=a b@127.0.0.1:7100"}, "without spaces"},
		{[]string{"-site", "1", "-sites", "1=lisbon@"}, "no master address"},
		{[]string{"-site", "3", "-sites", sites}, "-site 3 is not among -sites"},
		{[]string{"-site", "2", "-sites", sites}, "without this master 127.0.0.1:7100"},
		{[]string{"-site", "1", "-sites", sites, "-default-sites", "1,1"}, "listed twice"},
		{[]string{"-site", "1", "-sites", sites, "-default-sites", "1,x"}, "-default-sites: site id \"x\""},
	} {
		args := append([]string{"-servers", "s1,s2,s3"}, tc.args...)
		if _, err := completeWith(t, master.Settings{}, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// What only the settings as a whole can tell: the master refuses them.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-site", "1", "-sites", sites, "-default-sites", "1,2"}, "must be causal"},
		{[]string{"-site", "1", "-sites", sites, "-cluster", "prod eu"}, "without spaces"},
		{[]string{"-site", "1", "-sites", sites, "-default-sites", "1,3", "-default-k", "1"}, "give known sites"},
		{[]string{"-site", "1", "-sites", sites, "-default-sites", "2", "-default-k", "1"}, "leave out this site 1"},
	} {
		opts, err := completeWith(t, master.Settings{}, append([]string{"-servers", "s1,s2,s3"}, tc.args...)...)
		if err == nil {
			err = opts.Settings.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
