package process

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// MasterConfig is a configuration master: a single master, or one
// member of a Raft-replicated master (Members). Each field is the
// `catena master` flag its comment names.
type MasterConfig struct {
	// Listen is the address the master listens on, and its id (-listen).
	Listen string
	// Members are every member's address, the same list on each, for a
	// Raft-replicated master of 3 or 5 (Listen among them); empty for a
	// single master (-masters).
	Members []wire.NodeID
	// DataDir holds the master's state: a single master's master.json,
	// a member's Raft log in DataDir/raft (-data).
	DataDir string
	// Cluster creates the cluster, or is checked against the settings
	// saved (the creating flags).
	Cluster ClusterSpec
	// RecoveryPerServerMax bounds the state transfers a server takes
	// part in at once (-recovery-parallel).
	RecoveryPerServerMax int
	// FixedRoles: never move chain members to even out head and tail
	// roles (-fixed-roles).
	FixedRoles bool
	// Lease is granted with each heartbeat (-lease); a server not heard
	// from for FailureTimeout is removed (-failure-timeout); every clock
	// drifts at most ClockDriftMax (-clock-drift). The master requires
	// FailureTimeout > Lease·(1+ρ)/(1−ρ).
	Lease, FailureTimeout time.Duration
	ClockDriftMax         float64
	// ExtensionTimeout aborts an extension whose new server has not
	// caught up in this time (-extension-timeout).
	ExtensionTimeout time.Duration
	// ElectionTimeout and RaftHeartbeat time a replicated master's Raft
	// (-election-timeout; the heartbeat has no flag).
	ElectionTimeout, RaftHeartbeat time.Duration
	// Tick is the event loop's tick.
	Tick time.Duration
	// HTTP is the address of the status page, its JSON and the metrics
	// (-http); empty: none.
	HTTP string
	// Links are its TLS, limits per client and emulated WAN.
	Links
	// CheckInvariants asserts the master's invariants after each of its
	// steps; a violation stops the process (-check-invariants:
	// master.Options.CheckInvariants).
	CheckInvariants bool
	// Faults injects clock faults (catena-lab torture; a replicated
	// member's Raft log also gets disk faults); nil: none.
	Faults *faults.Injector
	// Log receives the process's log records (-log-level,
	// -log-format).
	Log *slog.Logger
}

// Validate reports a configuration that cannot run.
func (c *MasterConfig) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("process: master: Listen is required")
	case c.DataDir == "":
		return errors.New("process: master: DataDir is required")
	case c.Log == nil:
		return errors.New("process: master: Log is required")
	case c.Tick <= 0:
		return errors.New("process: master: Tick must be positive")
	case len(c.Members) > 0 && !slices.Contains(c.Members, wire.NodeID(c.Listen)):
		return fmt.Errorf("process: master: Listen %s is not among Members %v", c.Listen, c.Members)
	case len(c.Members) > 0 && (c.ElectionTimeout <= 0 || c.RaftHeartbeat <= 0):
		return errors.New("process: master: a replicated master needs a positive ElectionTimeout and RaftHeartbeat")
	}
	if err := c.Links.validate(); err != nil {
		return fmt.Errorf("process: master: %w", err)
	}
	return nil
}

// Master is a running master (or master member).
type Master struct {
	*lifecycle
	tr *transport.Transport
}

// Addr returns the master's address.
func (m *Master) Addr() string { return m.tr.Addr() }

// NewMaster validates c, resumes the master from its data directory or
// creates the cluster, and listens; Start runs it.
func NewMaster(c MasterConfig) (_ *Master, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Master{lifecycle: newLifecycle()}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	opts := master.Options{
		RecoveryPerServerMax: c.RecoveryPerServerMax,
		FixedRoles:           c.FixedRoles,
		CheckInvariants:      c.CheckInvariants,
		FailureTimeout:       wire.Time(c.FailureTimeout),
		LeaseDuration:        wire.Time(c.Lease),
		ClockDriftMax:        c.ClockDriftMax,
		ExtensionTimeout:     wire.Time(c.ExtensionTimeout),
	}
	if len(c.Members) > 0 {
		err = m.assembleReplicated(c, opts)
	} else {
		err = m.assembleSingle(c, opts)
	}
	return m, err
}

// assembleSingle builds a single master, whose state is a file in its
// data directory, saved after each batch that changed it.
func (m *Master) assembleSingle(c MasterConfig, opts master.Options) error {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	statePath := filepath.Join(c.DataDir, "master.json")
	state, restored, err := master.LoadState(statePath)
	if err != nil {
		return err
	}
	if err := c.Cluster.Complete(&opts, state.Settings); err != nil {
		if restored {
			return fmt.Errorf("%s: %w", statePath, err)
		}
		return err
	}
	var mm *master.Master
	if restored {
		mm, err = master.Restore(wire.NodeID(c.Listen), opts, state)
	} else {
		mm, err = master.New(wire.NodeID(c.Listen), opts)
	}
	if err != nil {
		return err
	}
	if err := m.listen(c); err != nil {
		return err
	}
	saved := mm.State()
	if err := master.SaveState(statePath, saved); err != nil {
		return err
	}
	c.Log.Info("master started", "listen", c.Listen, "tls", c.TLS != nil, "data", c.DataDir, "restored", restored, "volumes", saved.Settings.Volumes,
		"replicas", saved.Settings.ReplicationFactor, "placement", saved.Settings.Placement, "site", saved.Settings.Site)
	loop := &node.Loop{
		Machine: mm, Transport: m.tr, TickInterval: c.Tick, Log: c.Log, Warp: c.Faults.Warp(),
		Commit: func() error {
			if err := mm.Incompatible(); err != nil {
				return err
			}
			s := mm.State()
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
			logRefusals(c.Log, mm.Refusals())
			logDenials(c.Log, mm.Denials())
			logCuts(c.Log, mm.Cuts())
		},
	}
	return m.watch(c, loop, mm, nil, c.Listen)
}

// assembleReplicated builds one member of a Raft-replicated master. Its
// Raft log (in DataDir/raft) is its durable state, the cluster's
// settings included: on its first start every member is given the same
// Members and Cluster; later starts need only Listen, DataDir and
// Members.
func (m *Master) assembleReplicated(c MasterConfig, opts master.Options) error {
	raftDir := filepath.Join(c.DataDir, "raft")
	raftLog, err := raftlog.OpenPebble(raftDir, c.Faults.FS(vfs.Default), c.Log)
	if err != nil {
		return err
	}
	m.holdErr(raftLog.Close)
	saved, err := master.SavedSettings(raftLog)
	if err != nil {
		return err
	}
	if err := c.Cluster.Complete(&opts, saved); err != nil {
		return fmt.Errorf("%s: %w", raftDir, err)
	}
	var seed [16]byte
	rand.Read(seed[:])
	r, err := master.NewReplicated(master.RaftOptions{
		ID: wire.NodeID(c.Listen), Members: c.Members, Log: raftLog, Master: opts,
		HeartbeatInterval: wire.Time(c.RaftHeartbeat), ElectionTimeout: wire.Time(c.ElectionTimeout),
		Rand: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
	})
	if err != nil {
		return err
	}
	if err := m.listen(c); err != nil {
		return err
	}
	settings := r.Master().State().Settings
	c.Log.Info("master member started", "listen", c.Listen, "tls", c.TLS != nil, "members", c.Members, "data", c.DataDir,
		"replicas", settings.ReplicationFactor, "placement", settings.Placement)
	leading := false
	loop := &node.Loop{
		Machine: r, Transport: m.tr, TickInterval: c.Tick, Log: c.Log, Warp: c.Faults.Warp(),
		Commit: stopIfIncompatible(raftLog.Commit, r.Master().Incompatible),
		AfterBatch: func(wire.Time) {
			logRefusals(c.Log, r.Master().Refusals())
			logDenials(c.Log, r.Master().Denials())
			logCuts(c.Log, r.Master().Cuts())
			if r.Leading() != leading {
				leading = r.Leading()
				c.Log.Info("leadership", "leading", leading, "term", r.Term())
			}
		},
	}
	var addrs []string
	for _, member := range c.Members {
		addrs = append(addrs, string(member))
	}
	return m.watch(c, loop, r.Master(), r.Term, strings.Join(addrs, ","))
}

// listen starts the master's transport.
func (m *Master) listen(c MasterConfig) error {
	tr, err := transport.New(wire.NodeID(c.Listen), c.Listen, c.Log, c.Links.transportOptions()...)
	if err != nil {
		return err
	}
	m.tr = tr
	m.hold(tr.Close)
	c.WAN.apply(tr, c.Log, m.Done())
	return nil
}

// watch adds to loop what a master member reports about itself (the log
// lines of reconfigurations, leader changes and recoveries, and with
// c.HTTP its status page and metrics) and makes it the master's work.
// term is the Raft term of a replicated member (nil for a single
// master); masters lists every member's address, for the status page's
// client.
func (m *Master) watch(c MasterConfig, loop *node.Loop, mm *master.Master, term func() uint64, masters string) error {
	w := masterWeb{addr: c.HTTP, log: c.Log, tls: c.TLS}
	serveHTTP, err := w.start(m.lifecycle, loop, mm, term, m.tr, masters)
	if err != nil {
		return err
	}
	m.run = func(ctx context.Context) error {
		if c.Faults != nil {
			go c.Faults.Poll(ctx)
		}
		if serveHTTP != nil {
			serveHTTP(ctx)
		}
		pool := &node.Pool{Transport: m.tr, Loops: []*node.Loop{loop},
			OnStuck: logStuck(c.Log, "the master answers nobody")}
		return pool.Run(ctx)
	}
	return nil
}
