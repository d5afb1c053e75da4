package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Default timing, shared by `catena master`, `catena server` and
// `catena dev`. The master requires failure-timeout > lease·(1+ρ)/(1−ρ).
const (
	defaultMasterAddr        = "127.0.0.1:7100"
	defaultHeartbeatInterval = 100 * time.Millisecond
	defaultLease             = 600 * time.Millisecond
	defaultFailureTimeout    = time.Second
	defaultTick              = 10 * time.Millisecond
	defaultElectionTimeout   = 300 * time.Millisecond
	defaultRaftHeartbeat     = 50 * time.Millisecond
)

// checkInvariantsUsage is the help of the server's and the master's
// -check-invariants.
const checkInvariantsUsage = "assert the protocol's invariants after every step, and stop the process on a violation rather than go on from a broken state (catena dev, the integration tests and catena-lab torture run so; it costs some CPU: docs/operations.md)"

func runMaster(args []string) error {
	fs := cli.NewFlagSet("master", "catena master -listen ADDR -data DIR -servers S1,S2,... [flags]", "Runs the configuration master, or one member of a replicated master (-masters).")
	listen := fs.String("listen", defaultMasterAddr, "address to listen on; also the master's id")
	members := fs.String("masters", "", "comma-separated addresses of every master member, the same list on each, for a Raft-replicated master of 3 or 5 (-listen must be one of them); empty for a single master")
	dataDir := fs.String("data", "", "directory for the master's state: the cluster's settings, configurations and server incarnations (required)")
	creation := registerClusterFlags(fs)
	recoveryParallel := fs.Int("recovery-parallel", 4, "state transfers a server takes part in at once (its recovery bandwidth budget); this process's, not saved")
	checkInvariants := fs.Bool("check-invariants", false, checkInvariantsUsage)
	fixedRoles := fs.Bool("fixed-roles", false, "never move chain members to even out head and tail roles (docs/adr/0018-role-balance.md); this process's, not saved")
	lease := fs.Duration("lease", defaultLease, "lease granted with each heartbeat")
	failureTimeout := fs.Duration("failure-timeout", defaultFailureTimeout, "remove a server not heard from for this long; not saved: on a restart keep it above the previous process's lease guard (docs/operations.md)")
	drift := fs.Float64("clock-drift", 0.01, "bound on any clock's drift rate (0.01 = 1%)")
	extensionTimeout := fs.Duration("extension-timeout", 30*time.Second, "abort an extension whose new server has not caught up in this time")
	electionTimeout := fs.Duration("election-timeout", defaultElectionTimeout, "replicated master: campaign after this long (up to twice) without a leader; a leader cut off from a quorum this long stops granting leases")
	httpAddr := registerHTTPFlag(fs, "the status page (/), its JSON (/status.json) and Prometheus metrics (/metrics)")
	wanf := registerWANFlags(fs)
	tlsf := registerTLSFlags(fs, security.RoleMaster)
	limitf := registerClientLimitFlags(fs)
	logs := registerLogFlags(fs)
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	wan, err := wanf.wan()
	if err != nil {
		return err
	}
	limits, err := limitf.limits()
	if err != nil {
		return err
	}
	log, err := logs.logger(*listen)
	if err != nil {
		return err
	}
	tlsm, err := tlsf.material(log, security.RoleMaster, *listen)
	if err != nil {
		return err
	}
	// Fault testing only (catena-lab torture): see runServer. A single
	// master's state file is written without Pebble, so only the clock
	// faults reach it.
	inj, err := faults.FromEnv(log)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	spec, err := creation.spec(*listen)
	if err != nil {
		return err
	}
	m, err := process.NewMaster(process.MasterConfig{
		Listen: *listen, Members: cli.SplitNodeIDs(*members), DataDir: *dataDir, Cluster: spec,
		RecoveryPerServerMax: *recoveryParallel, FixedRoles: *fixedRoles, CheckInvariants: *checkInvariants,
		Lease: *lease, FailureTimeout: *failureTimeout, ClockDriftMax: *drift, ExtensionTimeout: *extensionTimeout,
		ElectionTimeout: *electionTimeout, RaftHeartbeat: defaultRaftHeartbeat, Tick: defaultTick,
		HTTP: *httpAddr, Links: process.Links{TLS: tlsm, Limits: limits, WAN: wan}, Faults: inj, Log: log,
	})
	if err != nil {
		return err
	}
	ctx, stop := cli.StopContext(log)
	defer stop()
	return process.Run(ctx, m)
}

// clusterFlags are the flags that create a cluster: its settings, saved
// in the master's state from then on.
type clusterFlags struct {
	fs                 *flag.FlagSet
	servers, placement string
	replicas, volumes  int
	defaultK           int
	// site, sites and defaultSites: a deployment of several sites
	// (sites.go).
	site, sites, defaultSites string
	// cluster names the deployment of several sites (-cluster).
	cluster string
}

// registerClusterFlags defines the flags that create a cluster on fs.
func registerClusterFlags(fs *flag.FlagSet) *clusterFlags {
	f := &clusterFlags{fs: fs}
	fs.StringVar(&f.servers, "servers", "", "comma-separated addresses of the initial servers, in ring order; required when the cluster is created, then saved (a restart needs none of -servers, -replicas, -volumes, -placement; any given must equal the saved value)")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas per volume, the chain length to maintain (0: the number of -servers, at most 3 with more than one volume); fixed when the cluster is created")
	fs.IntVar(&f.volumes, "volumes", 1, "volumes (chains) keys hash to; fixed when the cluster is created")
	fs.StringVar(&f.placement, "placement", "random", "placement of volumes on servers: ring, random, random-seq, bidirectional, rotated; fixed when the cluster is created")
	fs.IntVar(&f.defaultK, "default-k", 0, "make the default keyspace causal (ChainReaction) with this k, 1 ≤ k ≤ -replicas (0: strong); fixed when the cluster is created")
	fs.StringVar(&f.site, "site", "", "this cluster's site id among -sites, in a deployment of several sites; fixed when the cluster is created")
	fs.StringVar(&f.sites, "sites", "", "the deployment's sites, the same on every master of every site: ID=NAME@MASTER,MASTER,... separated by ';' (e.g. '1=lisbon@10.0.0.1:7100;2=oslo@10.1.0.1:7100'); fixed when the cluster is created")
	fs.StringVar(&f.cluster, "cluster", "", "the deployment's name, the same at every master of every site: servers and masters refuse the sites of another deployment (needs -sites; empty: derived from -sites, which every site is given alike); fixed when the cluster is created")
	fs.StringVar(&f.defaultSites, "default-sites", "", "comma-separated ids of the sites that replicate the default keyspace (this one among them; needs -default-k); empty: this site only; fixed when the cluster is created")
	return f
}

// given returns the settings the command line (or -config file) sets;
// defaults are not given.
func (f *clusterFlags) given() (master.Settings, error) {
	var s master.Settings
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "servers":
			s.Servers = cli.SplitNodeIDs(f.servers)
		case "replicas":
			s.ReplicationFactor = f.replicas
		case "volumes":
			s.Volumes = f.volumes
		case "placement":
			s.Placement, err = placement.Parse(f.placement)
		case "default-k":
			s.DefaultK = f.defaultK
		case "cluster":
			s.Cluster = f.cluster
		}
	})
	if err != nil {
		return s, err
	}
	if f.site != "" {
		if s.Site, err = parseSiteID(f.site); err != nil {
			return s, fmt.Errorf("-site: %w", err)
		}
	}
	if f.sites != "" {
		if s.Sites, err = parseSites(f.sites); err != nil {
			return s, fmt.Errorf("-sites: %w", err)
		}
	}
	if f.defaultSites != "" {
		if s.DefaultSites, err = parseSiteIDs(f.defaultSites); err != nil {
			return s, fmt.Errorf("-default-sites: %w", err)
		}
	}
	return s, nil
}

// checkSite checks that this master (listen) is one of its site's
// masters in the sites given, so other sites' servers reach it.
func checkSite(given master.Settings, listen string) error {
	if given.Site == 0 || len(given.Sites) == 0 {
		return nil
	}
	i := slices.IndexFunc(given.Sites, func(st wire.Site) bool { return st.ID == given.Site })
	if i < 0 {
		return fmt.Errorf("-site %d is not among -sites (%s)", given.Site, formatSites(given.Sites))
	}
	if !slices.Contains(given.Sites[i].Masters, wire.NodeID(listen)) {
		return fmt.Errorf("-sites lists %v as site %d's masters, without this master %s", given.Sites[i].Masters, given.Site, listen)
	}
	return nil
}

// spec returns the cluster the flags describe, for a master listening
// at listen, after checking what the flags alone can tell.
func (f *clusterFlags) spec(listen string) (process.ClusterSpec, error) {
	given, err := f.given()
	if err != nil {
		return process.ClusterSpec{}, err
	}
	if (given.Site != 0) != (len(given.Sites) > 0) {
		return process.ClusterSpec{}, errors.New("-site and -sites go together: this cluster's id and the deployment's sites")
	}
	if err := checkSite(given, listen); err != nil {
		return process.ClusterSpec{}, err
	}
	p, err := placement.Parse(f.placement)
	if err != nil {
		return process.ClusterSpec{}, err
	}
	return process.ClusterSpec{Given: given, Volumes: f.volumes, Replicas: f.replicas, Placement: p}, nil
}
