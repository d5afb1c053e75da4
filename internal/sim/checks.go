package sim

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// The checks of a run: CR §3's invariants after every step (checkStep),
// and once it ends the final reads, linearizability (or causal+
// convergence), liveness and no acknowledged update lost (verify).

// checkStep asserts CR §3's invariants after every step of a server, on
// every volume it is part of.
func (c *Cluster) checkStep(n *node) {
	if c.causal() {
		c.checkAnsweredHeld() // a configuration change may break it
	}
	if slices.Contains(c.masters, n.id) {
		if err := c.masterState(n.id).CheckInvariants(); err != nil {
			panic(fmt.Sprintf("master %s: %v", n.id, err))
		}
		return // a configuration change alone changes no replica
	}
	if c.causal() {
		c.checkMetadata()
	}
	for _, v := range c.volumes() {
		if cfg := c.VolumeConfig(v); cfg.Contains(n.id) {
			c.checkVolume(cfg)
		}
	}
	if c.opts.Hierarchical && c.geo != nil {
		c.geo.checkControl()
	}
}

func (c *Cluster) checkVolume(cfg wire.Config) {
	volume := cfg.Volume
	var states []check.ReplicaState
	var tail *check.ReplicaState
	for _, id := range append(slices.Clone(cfg.Chain), cfg.Joining) {
		s := c.server(id)
		if s == nil || s.Replica(volume) == nil {
			continue
		}
		r := s.Replica(volume)
		if r.Wedged() {
			continue // restored from disk, waiting for the master
		}
		if id == cfg.Joining && r.Config().Joining != id {
			// Not yet told it is joining: it still holds whatever it had
			// before (possibly a removed server's stale state).
			continue
		}
		if err := r.CheckInvariants(); err != nil {
			panic(fmt.Sprintf("INVARIANT %v", err))
		}
		if id == cfg.Joining && !r.Installed() {
			// The state a joiner kept is no part of the chain until the
			// tail accepts it for a catch-up (or a snapshot replaces it).
			continue
		}
		first, last := r.Sent()
		states = append(states, check.ReplicaState{ID: id, Applied: r.AppliedSN(), SentFirst: first, SentLast: last})
		if id == cfg.Tail() {
			tail = &states[len(states)-1]
		}
	}
	if msg := c.histories.ChainInvariants(volume, states, tail); msg != "" {
		panic("INVARIANT " + msg + " in " + cfg.String())
	}
	c.checkDurableAnswers(cfg)
}

// checkDurableAnswers asserts chain/durable.go's INVARIANT durable answer
// across the chain: every update the tail processed (answered,
// acknowledged, let be read) is on the disk of every member, so no crash
// can take it back. The replicas check their own part; this check reads
// the other members' disks, which no replica can.
func (c *Cluster) checkDurableAnswers(cfg wire.Config) {
	if cfg.K > 0 || cfg.Geo() || c.opts.skipDurableAnswerCheck {
		return // (their messages wait for the commit: durable.go)
	}
	s := c.server(cfg.Tail())
	if s == nil || s.Replica(cfg.Volume) == nil {
		return
	}
	tail := s.Replica(cfg.Volume)
	if tail.Wedged() || !tail.IsTail() || tail.Config().Epoch != cfg.Epoch {
		return
	}
	for _, id := range cfg.Chain {
		if s := c.server(id); s != nil {
			if r := s.Replica(cfg.Volume); r == nil || r.Wedged() || r.Config().Epoch != cfg.Epoch {
				continue // (not yet a member of this configuration)
			}
		} else if !c.opts.Durable {
			continue // crashed with its data: the master removes it
		}
		if meta, _ := c.engines[id].DurableMeta(cfg.Volume); meta.Applied < tail.CommittedSN() {
			panic(fmt.Sprintf("INVARIANT durable answer: tail %s processed SN %d, but %s holds %d on disk, in %v",
				cfg.Tail(), tail.CommittedSN(), id, meta.Applied, cfg))
		}
	}
}

// finalReads reads every key through a fresh client once the cluster has
// settled; the reads join the history, so a lost acknowledged update makes
// it non-linearizable.
func (c *Cluster) finalReads() error {
	var script []wire.Op
	for i := range c.opts.Keys {
		script = append(script, wire.Op{Kind: wire.OpGet, Key: c.keyName(i)})
	}
	reader := c.newClient(wire.NodeID(c.prefix+"reader"), c.clientIDBase()+wire.ClientID(1000), nil)
	reader.script = script
	reader.issuing = true
	reader.timeouts.inFlight = 1
	c.w.addNode(reader.id, reader, c.opts.TickInterval, 1)
	before := len(*c.historyOf())
	c.w.run(c.w.now + 3*wire.Second)
	if got := len(*c.historyOf()) - before; got != len(script) {
		return fmt.Errorf("liveness: %d of %d final reads answered within 3s after recovery", got, len(script))
	}
	return nil
}

// verify runs the end-of-run checks.
func (c *Cluster) verify() error {
	errs := c.verifySite()
	if c.causal() {
		if v := check.CausalConvergence(c.history); v != nil {
			errs = append(errs, fmt.Errorf("history of %d operations is not causal+ (k=%d): %w", len(c.history), c.opts.K, v))
		}
		if err := checkExports(c.exports, c.history, c.exportHolds); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	result, info := check.Linearizable(c.history, 30*time.Second)
	if result != porcupine.Ok {
		errs = append(errs, fmt.Errorf("history of %d operations is %s (not linearizable)%s", len(c.history), result, c.describeViolation(info)))
	}
	if err := checkScans(c.scans, c.history); err != nil {
		errs = append(errs, err)
	}
	if err := checkExports(c.exports, c.history, c.exportHolds); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.checkExpiry()...)
	if err := c.checkWatches(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// verifySite runs the end-of-run checks of one site: recorded failures,
// chains restored, operations after the heal completed, no acknowledged
// update lost, and in causal mode every chain converged.
func (c *Cluster) verifySite() []error {
	var errs []error
	for _, f := range c.failures {
		errs = append(errs, errors.New(f))
	}
	for _, v := range c.volumes() {
		cfg := c.VolumeConfig(v)
		if len(cfg.Chain) != c.opts.ChainLength || cfg.Joining != "" {
			errs = append(errs, fmt.Errorf("liveness: chain %v not restored to length %d after recovery", cfg, c.opts.ChainLength))
			break
		}
	}
	// Operations started well after the heal must have completed.
	settled := c.healed + 2*wire.Second
	for _, op := range *c.historyOf() {
		if op.Unknown && wire.Time(op.Call) > settled {
			errs = append(errs, fmt.Errorf("liveness: %v called at %.3fs after recovery never completed", op.Op, float64(op.Call)/1e9))
			break
		}
	}
	// No acknowledged update lost: the tail's history holds each one at
	// the SN it was acknowledged with. (A hierarchical write may run at
	// another site, whose SN it is answered with: the final reads, in
	// the checked history, find a lost one.)
	for _, a := range c.acked {
		if c.opts.Hierarchical {
			break
		}
		tail := c.VolumeConfig(a.volume).Tail()
		if c.server(tail) == nil {
			continue
		}
		hist := c.histories.Of(tail, a.volume)
		if int(a.sn) > len(hist) || hist[a.sn-1].Client != a.client || hist[a.sn-1].ReqNo != a.reqNo {
			errs = append(errs, fmt.Errorf("lost update: client %d request %d acknowledged at SN %d of volume %d is not in the tail's history", a.client, a.reqNo, a.sn, a.volume))
			break
		}
	}
	if c.causal() {
		if err := c.checkConverged(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (c *Cluster) describeViolation(info porcupine.LinearizationInfo) string {
	var b strings.Builder
	// Name the keys whose own histories fail: where to look in a trace.
	byKey := map[string][]check.Operation{}
	for _, op := range c.history {
		byKey[op.Op.Key] = append(byKey[op.Op.Key], op)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if r, _ := check.Linearizable(byKey[key], 10*time.Second); r != porcupine.Ok {
			fmt.Fprintf(&b, "; key %q (volume %d) is %s", key, c.volumeOf(key), r)
		}
	}
	if c.opts.ViolationDir != "" {
		path := filepath.Join(c.opts.ViolationDir, fmt.Sprintf("catena-sim-seed-%d.html", c.opts.Seed))
		if err := porcupine.VisualizePath(check.Model, info, path); err == nil {
			fmt.Fprintf(&b, "; visualization: %s", path)
		}
	}
	return b.String()
}
