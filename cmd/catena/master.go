package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	mrand "math/rand/v2"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/raftlog"
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
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	listen := fs.String("listen", defaultMasterAddr, "address to listen on; also the master's id")
	members := fs.String("masters", "", "comma-separated addresses of every master member, the same list on each, for a Raft-replicated master of 3 or 5 (-listen must be one of them); empty for a single master")
	dataDir := fs.String("data", "", "directory for the master's state (required)")
	servers := fs.String("servers", "", "comma-separated server addresses forming the initial chain, head first (first start only)")
	replicas := fs.Int("replicas", 0, "chain length to maintain (0: the number of -servers)")
	lease := fs.Duration("lease", defaultLease, "lease granted with each heartbeat")
	failureTimeout := fs.Duration("failure-timeout", defaultFailureTimeout, "remove a server not heard from for this long")
	drift := fs.Float64("clock-drift", 0.01, "bound on any clock's drift rate (0.01 = 1%)")
	extensionTimeout := fs.Duration("extension-timeout", 30*time.Second, "abort an extension whose new server has not caught up in this time")
	electionTimeout := fs.Duration("election-timeout", defaultElectionTimeout, "replicated master: campaign after this long (up to twice) without a leader; a leader cut off from a quorum this long stops granting leases")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *members != "" {
		return runReplicatedMaster(replicatedMasterFlags{
			listen: *listen, members: splitNodeIDs(*members), dataDir: *dataDir, servers: splitNodeIDs(*servers),
			replicas: *replicas, lease: *lease, failureTimeout: *failureTimeout, drift: *drift,
			extensionTimeout: *extensionTimeout, electionTimeout: *electionTimeout,
		})
	}
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return err
	}
	statePath := filepath.Join(*dataDir, "master.json")
	state, restored, err := master.LoadState(statePath)
	if err != nil {
		return err
	}
	chain := splitNodeIDs(*servers)
	if !restored && len(chain) == 0 {
		return errors.New("-servers is required on first start")
	}
	if restored {
		chain = state.Configs[0].Chain // options must name a chain; the state replaces it
	}
	if *replicas == 0 {
		*replicas = len(chain)
	}
	opts := master.Options{
		Chains:            map[wire.VolumeID][]wire.NodeID{0: chain},
		ReplicationFactor: *replicas,
		FailureTimeout:    wire.Time(*failureTimeout),
		LeaseDuration:     wire.Time(*lease),
		ClockDriftMax:     *drift,
		ExtensionTimeout:  wire.Time(*extensionTimeout),
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
	log := newLogger(*listen)
	tr, err := transport.New(wire.NodeID(*listen), *listen, log)
	if err != nil {
		return err
	}
	defer tr.Close()
	saved := m.State()
	if err := master.SaveState(statePath, saved); err != nil {
		return err
	}
	log.Info("master started", "listen", *listen, "data", *dataDir, "restored", restored, "config", m.Config(0).String())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	loop := node.Loop{
		Machine: m, Transport: tr, TickInterval: defaultTick, Log: log,
		Commit: func() error {
			s := m.State()
			if s.Equal(saved) {
				return nil
			}
			if err := master.SaveState(statePath, s); err != nil {
				return fmt.Errorf("saving master state: %w", err)
			}
			if s.Configs[0].Epoch != saved.Configs[0].Epoch {
				log.Info("configuration", "config", s.Configs[0].String())
			}
			saved = s
			return nil
		},
	}
	return loop.Run(ctx)
}

type replicatedMasterFlags struct {
	listen                                                   string
	members, servers                                         []wire.NodeID
	dataDir                                                  string
	replicas                                                 int
	lease, failureTimeout, extensionTimeout, electionTimeout time.Duration
	drift                                                    float64
}

// runReplicatedMaster runs one member of a Raft-replicated master. Its
// Raft log (in <data>/raft) is its durable state; every member starts
// with the same -masters and -servers.
func runReplicatedMaster(f replicatedMasterFlags) error {
	if f.dataDir == "" {
		return errors.New("-data is required")
	}
	if len(f.servers) == 0 {
		return errors.New("-servers is required (the initial chain, the same on every member)")
	}
	if f.replicas == 0 {
		f.replicas = len(f.servers)
	}
	log := newLogger(f.listen)
	raftLog, err := raftlog.OpenPebble(filepath.Join(f.dataDir, "raft"), log)
	if err != nil {
		return err
	}
	defer raftLog.Close()
	var seed [16]byte
	rand.Read(seed[:])
	r, err := master.NewReplicated(master.RaftOptions{
		ID: wire.NodeID(f.listen), Members: f.members, Log: raftLog,
		HeartbeatInterval: wire.Time(defaultRaftHeartbeat), ElectionTimeout: wire.Time(f.electionTimeout),
		Rand: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
		Master: master.Options{
			Chains:            map[wire.VolumeID][]wire.NodeID{0: f.servers},
			ReplicationFactor: f.replicas,
			FailureTimeout:    wire.Time(f.failureTimeout),
			LeaseDuration:     wire.Time(f.lease),
			ClockDriftMax:     f.drift,
			ExtensionTimeout:  wire.Time(f.extensionTimeout),
		},
	})
	if err != nil {
		return err
	}
	tr, err := transport.New(wire.NodeID(f.listen), f.listen, log)
	if err != nil {
		return err
	}
	defer tr.Close()
	log.Info("master member started", "listen", f.listen, "members", f.members, "data", f.dataDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var epoch wire.Epoch
	leading := false
	loop := node.Loop{
		Machine: r, Transport: tr, TickInterval: defaultTick, Log: log,
		Commit: raftLog.Commit,
		AfterBatch: func() {
			if r.Leading() != leading {
				leading = r.Leading()
				log.Info("leadership", "leading", leading)
			}
			if c := r.Master().Config(0); c.Epoch != epoch {
				epoch = c.Epoch
				log.Info("configuration", "config", c.String())
			}
		},
	}
	return loop.Run(ctx)
}
