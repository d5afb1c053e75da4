package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/node"
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
)

func runMaster(args []string) error {
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	listen := fs.String("listen", defaultMasterAddr, "address to listen on; also the master's id")
	dataDir := fs.String("data", "", "directory for the master's state (required)")
	servers := fs.String("servers", "", "comma-separated server addresses forming the initial chain, head first (first start only)")
	replicas := fs.Int("replicas", 0, "chain length to maintain (0: the number of -servers)")
	lease := fs.Duration("lease", defaultLease, "lease granted with each heartbeat")
	failureTimeout := fs.Duration("failure-timeout", defaultFailureTimeout, "remove a server not heard from for this long")
	drift := fs.Float64("clock-drift", 0.01, "bound on any clock's drift rate (0.01 = 1%)")
	extensionTimeout := fs.Duration("extension-timeout", 30*time.Second, "abort an extension whose new server has not caught up in this time")
	if err := parseFlags(fs, args); err != nil {
		return err
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
	var chain []wire.NodeID
	for _, s := range strings.Split(*servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			chain = append(chain, wire.NodeID(s))
		}
	}
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
