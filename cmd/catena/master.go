package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	mrand "math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/transport"
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

func runMaster(args []string) error {
	fs := newFlagSet("master", "catena master -listen ADDR -data DIR -servers S1,S2,... [flags]", "Runs the configuration master, or one member of a replicated master (-masters).")
	listen := fs.String("listen", defaultMasterAddr, "address to listen on; also the master's id")
	members := fs.String("masters", "", "comma-separated addresses of every master member, the same list on each, for a Raft-replicated master of 3 or 5 (-listen must be one of them); empty for a single master")
	dataDir := fs.String("data", "", "directory for the master's state: the cluster's settings, configurations and server incarnations (required)")
	creation := registerClusterFlags(fs)
	recoveryParallel := fs.Int("recovery-parallel", 4, "state transfers a server takes part in at once (its recovery bandwidth budget); this process's, not saved")
	fixedRoles := fs.Bool("fixed-roles", false, "never move chain members to even out head and tail roles (docs/adr/0018-role-balance.md); this process's, not saved")
	lease := fs.Duration("lease", defaultLease, "lease granted with each heartbeat")
	failureTimeout := fs.Duration("failure-timeout", defaultFailureTimeout, "remove a server not heard from for this long; not saved: on a restart keep it above the previous process's lease guard (docs/operations.md)")
	drift := fs.Float64("clock-drift", 0.01, "bound on any clock's drift rate (0.01 = 1%)")
	extensionTimeout := fs.Duration("extension-timeout", 30*time.Second, "abort an extension whose new server has not caught up in this time")
	electionTimeout := fs.Duration("election-timeout", defaultElectionTimeout, "replicated master: campaign after this long (up to twice) without a leader; a leader cut off from a quorum this long stops granting leases")
	httpAddr := registerHTTPFlag(fs, "the status page (/), its JSON (/status.json) and Prometheus metrics (/metrics)")
	wan := registerWANFlags(fs)
	tlsf := registerTLSFlags(fs, security.RoleMaster)
	limits := registerClientLimitFlags(fs)
	logs := registerLogFlags(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := noArguments(args); err != nil {
		return err
	}
	if err := wan.validate(); err != nil {
		return err
	}
	if err := limits.validate(); err != nil {
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
	web := masterHTTP{addr: *httpAddr, log: log, tls: tlsm, limits: limits}
	// Fault testing only (catena torture): see runServer. A single
	// master's state file is written without Pebble, so only the clock
	// faults reach it.
	inj, err := faults.FromEnv(log)
	if err != nil {
		return err
	}
	opts := master.Options{
		RecoveryPerServerMax: *recoveryParallel,
		FixedRoles:           *fixedRoles,
		FailureTimeout:       wire.Time(*failureTimeout),
		LeaseDuration:        wire.Time(*lease),
		ClockDriftMax:        *drift,
		ExtensionTimeout:     wire.Time(*extensionTimeout),
	}
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	if *members != "" {
		return runReplicatedMaster(*listen, splitNodeIDs(*members), *dataDir, opts, creation, *electionTimeout, web, wan, inj)
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return err
	}
	statePath := filepath.Join(*dataDir, "master.json")
	state, restored, err := master.LoadState(statePath)
	if err != nil {
		return err
	}
	if err := creation.complete(&opts, state.Settings, *listen); err != nil {
		if restored {
			return fmt.Errorf("%s: %w", statePath, err)
		}
		return err
	}
	var m *master.Master
	if restored {
		m, err = master.Restore(wire.NodeID(*listen), opts, state)
	} else {
		m, err = master.New(wire.NodeID(*listen), opts)
	}
	if err != nil {
		return err
	}
	tr, err := transport.New(wire.NodeID(*listen), *listen, log, transportOptions(tlsm, limits)...)
	if err != nil {
		return err
	}
	defer tr.Close()
	wan.apply(tr, log)
	saved := m.State()
	if err := master.SaveState(statePath, saved); err != nil {
		return err
	}
	log.Info("master started", "listen", *listen, "tls", tlsm != nil, "data", *dataDir, "restored", restored, "volumes", saved.Settings.Volumes,
		"replicas", saved.Settings.ReplicationFactor, "placement", saved.Settings.Placement, "site", saved.Settings.Site)
	ctx, stop := stopContext(log)
	defer stop()
	if inj != nil {
		go inj.Poll(ctx)
	}
	loop := &node.Loop{
		Machine: m, Transport: tr, TickInterval: defaultTick, Log: log, Warp: inj.Warp(),
		Commit: func() error {
			s := m.State()
			if s.Equal(saved) {
				return nil
			}
			if err := master.SaveState(statePath, s); err != nil {
				return fmt.Errorf("saving master state: %w", err)
			}
			saved = s
			return nil
		},
		AfterBatch: func(wire.Time) {
			logRefusals(log, m.Refusals())
			logDenials(log, m.Denials())
			logCuts(log, m.Cuts())
		},
	}
	closeWeb, err := web.start(ctx, loop, m, nil, tr, *listen)
	if err != nil {
		return err
	}
	defer closeWeb()
	return loop.Run(ctx)
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

// settingFlags names the flag of each master.Settings field.
var settingFlags = map[string]string{"ReplicationFactor": "-replicas", "Placement": "-placement", "Servers": "-servers", "Volumes": "-volumes",
	"DefaultK": "-default-k", "Site": "-site", "Sites": "-sites", "DefaultSites": "-default-sites", "Cluster": "-cluster"}

// given returns the settings the command line (or -config file) sets;
// defaults are not given.
func (f *clusterFlags) given() (master.Settings, error) {
	var s master.Settings
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "servers":
			s.Servers = splitNodeIDs(f.servers)
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

// complete fills opts for a master whose state holds the settings saved
// (zero: none, a new cluster or state saved by an older catena). With
// saved settings the master resumes with them, and the flags given must
// agree; without, the flags describe the cluster and -servers is
// required.
func (f *clusterFlags) complete(opts *master.Options, saved master.Settings, listen string) error {
	given, err := f.given()
	if err != nil {
		return err
	}
	if (given.Site != 0) != (len(given.Sites) > 0) {
		return errors.New("-site and -sites go together: this cluster's id and the deployment's sites")
	}
	if given.Cluster != "" && len(given.Sites) == 0 && saved.IsZero() {
		return errors.New("-cluster needs -sites: it names a deployment of several sites")
	}
	if err := checkSite(given, listen); err != nil {
		return err
	}
	if !saved.IsZero() {
		var contradictions []string
		for _, c := range saved.Contradictions(given) {
			contradictions = append(contradictions, fmt.Sprintf("%s %s (saved: %s)", settingFlags[c.Setting], c.Given, c.Saved))
		}
		if len(contradictions) > 0 {
			return fmt.Errorf("flags contradict the cluster's saved settings, which are fixed when it is created (leave them out on a restart): %s", strings.Join(contradictions, "; "))
		}
		return nil
	}
	if len(given.Servers) == 0 {
		return errors.New("-servers is required when no cluster settings are saved yet (a new cluster; or state saved by an older catena: give the flags it was created with, once)")
	}
	opts.Settings = master.Settings{Servers: given.Servers, DefaultK: given.DefaultK, Site: given.Site, Sites: given.Sites, DefaultSites: given.DefaultSites,
		Cluster: given.Cluster}
	if opts.Settings.Cluster == "" && len(given.Sites) > 0 {
		opts.Settings.Cluster = master.DefaultCluster(given.Sites)
	}
	if opts.Placement, err = placement.Parse(f.placement); err != nil {
		return err
	}
	return initialChains(opts, f.volumes, f.replicas)
}

// initialChains places the volumes on the servers. The placement draws
// from a generator seeded by the server list, so every member of a
// replicated master computes the same chains.
func initialChains(o *master.Options, volumes, replicas int) error {
	if volumes < 1 {
		return errors.New("-volumes must be at least 1")
	}
	if replicas == 0 {
		replicas = len(o.Servers)
		if volumes > 1 {
			replicas = min(replicas, 3)
		}
	}
	o.ReplicationFactor = replicas
	o.Volumes = volumes
	if volumes == 1 && (o.Placement == placement.Random || o.Placement == placement.RandomSeq) {
		if replicas > len(o.Servers) {
			return fmt.Errorf("-replicas %d exceeds the %d servers", replicas, len(o.Servers))
		}
		o.Chains = map[wire.VolumeID][]wire.NodeID{0: o.Servers[:replicas]}
		return nil
	}
	h := fnv.New64a()
	for _, s := range o.Servers {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	seed := h.Sum64()
	chains, err := placement.Initial(o.Placement, o.Servers, volumes, replicas, mrand.New(mrand.NewPCG(seed, uint64(volumes))))
	if err != nil {
		return err
	}
	o.Chains = chains
	return nil
}

// runReplicatedMaster runs one member of a Raft-replicated master. Its
// Raft log (in <data>/raft) is its durable state, the cluster's settings
// included: on its first start every member is given the same -masters,
// -servers, -volumes, -replicas and -placement; later starts need only
// -listen, -data and -masters.
func runReplicatedMaster(listen string, members []wire.NodeID, dataDir string, opts master.Options, creation *clusterFlags, electionTimeout time.Duration, web masterHTTP, wan *wanFlags, inj *faults.Injector) error {
	log := web.log
	raftLog, err := raftlog.OpenPebble(filepath.Join(dataDir, "raft"), inj.FS(vfs.Default), log)
	if err != nil {
		return err
	}
	defer raftLog.Close()
	saved, err := master.SavedSettings(raftLog)
	if err != nil {
		return err
	}
	if err := creation.complete(&opts, saved, listen); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dataDir, "raft"), err)
	}
	var seed [16]byte
	rand.Read(seed[:])
	r, err := master.NewReplicated(master.RaftOptions{
		ID: wire.NodeID(listen), Members: members, Log: raftLog, Master: opts,
		HeartbeatInterval: wire.Time(defaultRaftHeartbeat), ElectionTimeout: wire.Time(electionTimeout),
		Rand: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
	})
	if err != nil {
		return err
	}
	tr, err := transport.New(wire.NodeID(listen), listen, log, transportOptions(web.tls, web.limits)...)
	if err != nil {
		return err
	}
	defer tr.Close()
	wan.apply(tr, log)
	settings := r.Master().State().Settings
	log.Info("master member started", "listen", listen, "tls", web.tls != nil, "members", members, "data", dataDir,
		"replicas", settings.ReplicationFactor, "placement", settings.Placement)
	ctx, stop := stopContext(log)
	defer stop()
	if inj != nil {
		go inj.Poll(ctx)
	}
	leading := false
	loop := &node.Loop{
		Machine: r, Transport: tr, TickInterval: defaultTick, Log: log, Warp: inj.Warp(),
		Commit: raftLog.Commit,
		AfterBatch: func(wire.Time) {
			logRefusals(log, r.Master().Refusals())
			logDenials(log, r.Master().Denials())
			logCuts(log, r.Master().Cuts())
			if r.Leading() != leading {
				leading = r.Leading()
				log.Info("leadership", "leading", leading, "term", r.Term())
			}
		},
	}
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, string(m))
	}
	closeWeb, err := web.start(ctx, loop, r.Master(), r.Term, tr, strings.Join(addrs, ","))
	if err != nil {
		return err
	}
	defer closeWeb()
	return loop.Run(ctx)
}

// logRefusals logs what a master or server refused because it came from
// a site of another deployment (-cluster).
func logRefusals(log *slog.Logger, refusals []string) {
	for _, why := range refusals {
		log.Warn("refused a site of another deployment", "reason", why)
	}
}

// logDenials logs the requests a master refused to their callers
// (changes of users, roles or keyspaces by a user without role admin).
func logCuts(log *slog.Logger, cuts []string) {
	for _, what := range cuts {
		log.Warn("link cut", "what", what)
	}
}

func logDenials(log *slog.Logger, denials []string) {
	for _, why := range denials {
		log.Warn("request denied", "reason", why)
	}
}
