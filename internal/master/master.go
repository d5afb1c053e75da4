// Package master is the configuration master of CR §3 as a deterministic
// state machine: it detects failed servers by heartbeat timeouts, removes
// them from chains, extends shortened chains at the tail, grants leases and
// tells servers and clients the current configurations.
//
// Every decision is a pure function of the inputs (messages and ticks with
// the master's clock), so a Raft log can later drive replicas of it.
package master

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// Options configure a Master.
type Options struct {
	// Chains gives each volume's initial chain, head first. They become
	// the epoch-1 configurations.
	Chains map[wire.VolumeID][]wire.NodeID
	// ReplicationFactor is the chain length the master restores by
	// extending shortened chains with spare servers.
	ReplicationFactor int
	// FailureTimeout: a server not heard from for this long is removed
	// from every chain.
	FailureTimeout wire.Time
	// LeaseDuration is the lease granted with each heartbeat reply.
	LeaseDuration wire.Time
	// ClockDriftMax bounds the drift rate of any clock against real time
	// (0.01 = 1%).
	ClockDriftMax float64
	// ExtensionTimeout aborts an extension whose joining server has not
	// caught up in this time, so another spare can be tried.
	ExtensionTimeout wire.Time
}

// LeaseGuard is how long, on the master's clock, the master must wait
// after granting a lease before the lease is surely expired on the
// server's clock: LeaseDuration·(1+ρ)/(1−ρ) for drift bound ρ.
func (o Options) LeaseGuard() wire.Time {
	return wire.Time(float64(o.LeaseDuration) * (1 + o.ClockDriftMax) / (1 - o.ClockDriftMax))
}

// Validate reports a configuration the master cannot run safely.
func (o Options) Validate() error {
	var errs []error
	if len(o.Chains) == 0 {
		errs = append(errs, errors.New("no volumes"))
	}
	for v, chain := range o.Chains {
		seen := map[wire.NodeID]bool{}
		for _, id := range chain {
			if id == "" || seen[id] {
				errs = append(errs, fmt.Errorf("volume %d: empty or repeated server %q", v, id))
			}
			seen[id] = true
		}
		if len(chain) == 0 {
			errs = append(errs, fmt.Errorf("volume %d: empty chain", v))
		}
	}
	if o.ReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("replication factor %d < 1", o.ReplicationFactor))
	}
	if o.ClockDriftMax < 0 || o.ClockDriftMax >= 0.5 {
		errs = append(errs, fmt.Errorf("clock drift bound %v outside [0, 0.5)", o.ClockDriftMax))
	}
	if o.LeaseDuration <= 0 {
		errs = append(errs, errors.New("lease duration must be positive"))
	}
	// Removal on suspicion must come after the suspect's lease expired.
	if o.FailureTimeout <= o.LeaseGuard() {
		errs = append(errs, fmt.Errorf("failure timeout %v must exceed the lease guard %v (lease %v, drift %v)",
			o.FailureTimeout, o.LeaseGuard(), o.LeaseDuration, o.ClockDriftMax))
	}
	if o.ExtensionTimeout <= 0 {
		errs = append(errs, errors.New("extension timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Master is the configuration master.
type Master struct {
	opts    Options
	id      wire.NodeID
	configs map[wire.VolumeID]*wire.Config
	servers map[wire.NodeID]*serverState
	// extensionStarted is when each volume's current extension began.
	extensionStarted map[wire.VolumeID]wire.Time
	out              []wire.Envelope
}

type serverState struct {
	incarnation uint64
	lastHeard   wire.Time
	// lastGrant is when the master last granted this server a lease.
	lastGrant wire.Time
	alive     bool
	status    map[wire.VolumeID]wire.VolumeStatus
}

// New returns a master with the epoch-1 configurations of o.Chains.
func New(id wire.NodeID, o Options) (*Master, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("master options: %w", err)
	}
	m := &Master{
		opts: o, id: id,
		configs:          map[wire.VolumeID]*wire.Config{},
		servers:          map[wire.NodeID]*serverState{},
		extensionStarted: map[wire.VolumeID]wire.Time{},
	}
	for v, chain := range o.Chains {
		m.configs[v] = &wire.Config{Volume: v, Epoch: 1, Chain: slices.Clone(chain)}
	}
	return m, nil
}

// Config returns a copy of a volume's current configuration.
func (m *Master) Config(v wire.VolumeID) wire.Config { return m.configs[v].Clone() }

// Configs returns copies of all current configurations, by volume.
func (m *Master) Configs() []wire.Config {
	out := make([]wire.Config, 0, len(m.configs))
	for _, v := range slices.Sorted(maps.Keys(m.configs)) {
		out = append(out, m.configs[v].Clone())
	}
	return out
}

// ServerStatus returns the last status a server reported for a volume.
func (m *Master) ServerStatus(id wire.NodeID, v wire.VolumeID) (wire.VolumeStatus, bool) {
	st := m.servers[id]
	if st == nil {
		return wire.VolumeStatus{}, false
	}
	s, ok := st.status[v]
	return s, ok
}

// Alive reports whether the master currently considers a server alive.
func (m *Master) Alive(id wire.NodeID) bool {
	st := m.servers[id]
	return st != nil && st.alive
}

func (m *Master) send(to wire.NodeID, msg wire.Message) {
	m.out = append(m.out, wire.Envelope{To: to, Msg: msg})
}

func (m *Master) flush() []wire.Envelope {
	out := m.out
	m.out = nil
	return out
}

// Step handles one message.
func (m *Master) Step(now wire.Time, from wire.NodeID, msg wire.Message) []wire.Envelope {
	switch msg := msg.(type) {
	case *wire.Heartbeat:
		m.handleHeartbeat(now, from, msg)
	case *wire.ConfigRequest:
		m.send(from, &wire.ConfigReply{Configs: m.Configs()})
	case *wire.StatusRequest:
		m.send(from, m.status())
	}
	return m.flush()
}

func (m *Master) handleHeartbeat(now wire.Time, from wire.NodeID, hb *wire.Heartbeat) {
	st := m.servers[from]
	if st == nil {
		st = &serverState{incarnation: hb.Incarnation}
		m.servers[from] = st
	}
	if hb.Incarnation != st.incarnation {
		if hb.Incarnation < st.incarnation {
			return // from a previous process, delayed
		}
		// The server restarted: the process that held its replicas and its
		// lease is gone, so it is removed at once (no lease to wait out).
		// Where it is the last member, it stays with what its disk holds
		// (every acknowledged update was on every member's disk), in a new
		// epoch so it leaves the wedged state it restarted in.
		m.removeEverywhere(now, from, true)
		st.incarnation = hb.Incarnation
		st.status = nil
	}
	st.lastHeard = now
	st.alive = true
	st.status = map[wire.VolumeID]wire.VolumeStatus{}
	for _, s := range hb.Volumes {
		st.status[s.Volume] = s
	}

	reply := &wire.HeartbeatReply{SentAt: hb.SentAt, LeaseGranted: true, LeaseFor: m.opts.LeaseDuration}
	st.lastGrant = now
	for _, v := range slices.Sorted(maps.Keys(m.configs)) {
		c := m.configs[v]
		s, has := st.status[v]
		if (has && s.Epoch < c.Epoch) || (!has && c.Contains(from)) {
			reply.Configs = append(reply.Configs, c.Clone())
		}
	}
	m.send(from, reply)

	// A tail reports that its joining server caught up: make it the tail.
	for _, s := range hb.Volumes {
		c := m.configs[s.Volume]
		if c != nil && s.JoinerReady && s.Epoch == c.Epoch && c.Tail() == from && c.Joining != "" {
			next := c.Clone()
			next.Chain = append(next.Chain, next.Joining)
			next.Joining = ""
			m.install(next, c)
		}
	}
}

// Tick runs the failure detector and starts extensions.
func (m *Master) Tick(now wire.Time) []wire.Envelope {
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		st := m.servers[id]
		if st.alive && now-st.lastHeard > m.opts.FailureTimeout {
			st.alive = false
			// INVARIANT lease: the suspect's lease has expired before any
			// configuration without it is installed.
			if now < st.lastGrant+m.opts.LeaseGuard() {
				panic(fmt.Sprintf("INVARIANT lease: removing %s at %d before its lease guard ends at %d", id, now, st.lastGrant+m.opts.LeaseGuard()))
			}
			m.removeEverywhere(now, id, false)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(m.configs)) {
		c := m.configs[v]
		if c.Joining != "" && now-m.extensionStarted[v] > m.opts.ExtensionTimeout {
			next := c.Clone()
			next.Joining = ""
			m.install(next, c)
			c = m.configs[v]
		}
		if c.Joining == "" && len(c.Chain) < m.opts.ReplicationFactor {
			if spare := m.spareFor(c); spare != "" {
				next := c.Clone()
				next.Joining = spare
				m.extensionStarted[v] = now
				m.install(next, c)
			}
		}
	}
	return m.flush()
}

// spareFor picks a live server outside the chain: the one that has been
// heard from most recently relative to its failures is not tracked, so the
// choice is simply the first live server by id.
func (m *Master) spareFor(c *wire.Config) wire.NodeID {
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		if m.servers[id].alive && !c.Contains(id) {
			return id
		}
	}
	return ""
}

// removeEverywhere removes a server from every chain (and extension) it
// is part of. The last member of a chain is never removed: the volume
// waits for it rather than lose its data; if it restarted, its chain gets
// a new epoch all the same.
func (m *Master) removeEverywhere(now wire.Time, id wire.NodeID, restarted bool) {
	for _, v := range slices.Sorted(maps.Keys(m.configs)) {
		c := m.configs[v]
		if !c.Contains(id) {
			continue
		}
		next := c.Clone()
		next.Joining = "" // any change aborts an extension
		if i := next.Index(id); i >= 0 {
			if len(next.Chain) == 1 && !restarted {
				continue
			}
			if len(next.Chain) > 1 {
				next.Chain = slices.Delete(next.Chain, i, i+1)
			}
		}
		m.install(next, c)
	}
}

// install makes next the volume's configuration with the next epoch and
// tells every server of the old and new configuration.
func (m *Master) install(next wire.Config, prev *wire.Config) {
	next.Epoch = prev.Epoch + 1
	old := prev.Clone()
	m.configs[next.Volume] = &next
	notify := map[wire.NodeID]bool{}
	for _, id := range append(append(old.Chain, old.Joining), append(next.Chain, next.Joining)...) {
		notify[id] = id != ""
	}
	for _, id := range slices.Sorted(maps.Keys(notify)) {
		if notify[id] {
			m.send(id, &wire.NewConfig{Config: next.Clone()})
		}
	}
}

func (m *Master) status() *wire.StatusReply {
	reply := &wire.StatusReply{Configs: m.Configs()}
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		st := m.servers[id]
		ss := wire.ServerStatus{ID: id, Alive: st.alive, Incarnation: st.incarnation}
		for _, v := range slices.Sorted(maps.Keys(st.status)) {
			ss.Volumes = append(ss.Volumes, st.status[v])
		}
		reply.Servers = append(reply.Servers, ss)
	}
	return reply
}
