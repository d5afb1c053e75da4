package master

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// The leader's duties, from its own soft state (rebuilt when a member
// takes over): the failure detector, which hears heartbeats, grants
// leases and removes servers silent past the failure timeout; answers to
// heartbeats with newer configurations; and the pacing of the commands
// it proposes. Recovery planning is in recovery.go, cuts of stalled links
// in links.go.

// serverState is what the leader knows of a server from its heartbeats.
type serverState struct {
	lastHeard wire.Time
	// lastGrant is when the master last granted this server a lease.
	lastGrant wire.Time
	alive     bool
	status    map[wire.VolumeID]wire.VolumeStatus
	// incarnation is the one its last heartbeat carried.
	incarnation uint64
	// awaiting is set while the server has not shown (by
	// wire.Heartbeat.Heard) that it heard a reply this master sent at
	// awaitingSince, answering the heartbeat it sent at awaitingSentAt
	// (its clock). See deaf.
	awaiting                      bool
	awaitingSince, awaitingSentAt wire.Time
	// protocol is the range of versions its last heartbeat said it
	// speaks.
	protocol release.Range
}

// SetLeader tells the master whether it leads, and who does. A member
// that takes over forgets what it knew of servers: each gets a full
// failure timeout from now before it can be suspected, which also outlasts
// any lease the previous leader granted.
func (m *Master) SetLeader(now wire.Time, leading bool, leader wire.NodeID) {
	m.leader = leader
	if leading == m.leading && m.servers != nil {
		return
	}
	m.leading = leading
	m.servers = map[wire.NodeID]*serverState{}
	m.authWaiters, m.authPending = nil, map[uint64]bool{}
	m.extensionStarted = map[wire.VolumeID]wire.Time{}
	m.proposedAt = map[wire.VolumeID]wire.Time{}
	m.cuts = map[wire.VolumeID]*stallCut{}
	m.blamed = map[wire.VolumeID]blame{}
	if !leading {
		return
	}
	for id := range m.incarnations {
		m.servers[id] = &serverState{lastHeard: now, lastGrant: now, alive: true}
	}
	for v, c := range m.configs {
		if c.Joining != "" {
			m.extensionStarted[v] = now
		}
	}
	if m.newCluster && m.clusterVersion == 0 && len(m.incarnations) == 0 && m.protocol().Max > 1 {
		// A new cluster starts at the newest protocol version of the
		// release that creates it: there is no older process to wait
		// for. A cluster created by release 0.1.0 stays at 1 until it
		// is finalized (docs/upgrades.md).
		m.submit(now, Command{Kind: CmdClusterVersion, Version: m.protocol().Max})
	}
	m.newCluster = false
}

// Tick runs the failure detector, cuts stalled links (links.go) and
// starts extensions (leader only).
func (m *Master) Tick(now wire.Time) []wire.Envelope {
	defer m.assertInvariants()
	if !m.leading {
		return nil
	}
	// A member that never registered (it failed before this leader heard
	// of it) is watched like any other.
	for _, c := range m.configs {
		for _, id := range c.Chain {
			if m.servers[id] == nil {
				m.servers[id] = &serverState{lastHeard: now, lastGrant: now, alive: true}
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.servers)) {
		st := m.servers[id]
		if st.alive && now-st.lastHeard > m.opts.FailureTimeout {
			st.alive = false
			m.expired++
			// INVARIANT lease: the suspect's lease has expired before any
			// configuration without it is installed.
			if now < st.lastGrant+m.opts.LeaseGuard() {
				panic(fmt.Sprintf("INVARIANT lease: removing %s at %d before its lease guard ends at %d", id, now, st.lastGrant+m.opts.LeaseGuard()))
			}
			m.submit(now, Command{Kind: CmdRemove, Server: id, Survive: m.lastComplete(id)})
		}
	}
	m.proposeCuts(now)
	m.recover(now)
	m.activateSplits(now)
	return m.flush()
}

func (m *Master) handleHeartbeat(now wire.Time, from wire.NodeID, hb *wire.Heartbeat) {
	known := m.incarnations[from]
	switch {
	case hb.Incarnation < known:
		return // from a previous process, delayed
	case known == 0 && (hb.NewDataDir || hb.Incarnation == 1):
		// A new server (incarnation 1 is always a new data directory).
		m.submit(now, Command{Kind: CmdRegister, Server: from, Incarnation: hb.Incarnation})
	case hb.Incarnation > known:
		// The server restarted (perhaps before this master heard of it):
		// the process that held its replicas and its lease is gone, so it
		// is removed at once (no lease to wait out), unless it is the only
		// one left with a volume's data.
		m.submit(now, Command{Kind: CmdRestarted, Server: from, Incarnation: hb.Incarnation, Survive: m.survives(from, hb)})
	}
	st := m.servers[from]
	deaf := st != nil && m.deaf(now, st, hb)
	if st == nil {
		st = &serverState{}
		m.servers[from] = st
	}
	if !deaf {
		st.lastHeard = now
		st.alive = true
	}
	st.incarnation = hb.Incarnation
	st.protocol = release.Range{Min: hb.MinProtocol, Max: hb.MaxProtocol}
	st.status = map[wire.VolumeID]wire.VolumeStatus{}
	for _, s := range hb.Volumes {
		st.status[s.Volume] = s
		if len(s.Stable) > 0 {
			m.stable[s.Volume] = m.stable[s.Volume].Merge(s.Stable)
		}
	}
	for _, s := range hb.Volumes {
		if s.StalledFor > m.opts.FailureTimeout {
			m.noticeStall(now, s.Volume)
		}
	}

	// The keyspaces are copied: the transport encodes the reply on
	// another goroutine while an override may change them here.
	reply := &wire.HeartbeatReply{SentAt: hb.SentAt, Keyspaces: m.Keyspaces(),
		Returning: known != 0 && m.first[from] != hb.Incarnation, ClusterVersion: m.ClusterVersion(),
		WallTime: now} // (the server checks its clock against it: docs/adr/0028)
	if hb.AuthVersion < m.auth.Version {
		// Before the lease below: a server never serves under a lease
		// without the users and roles the master had when granting it.
		t := m.serverAuthTable()
		reply.Auth = &t
	}
	if m.opts.Settings.Site != 0 {
		reply.Sites = m.opts.Settings.Sites
		reply.Cluster = m.opts.Settings.ClusterName()
		reply.Stable = m.stableTable()
	}
	// A lease only for the incarnation the log knows, only while this
	// member surely leads, not for a server that hears no replies, and
	// not for one about to be cut from a chain (links.go).
	// INVARIANT lease: lastGrant never passes lastHeard, so a server
	// removed for silence has no lease left.
	if !deaf && !m.cutting(from) && m.incarnations[from] == hb.Incarnation && (m.canGrant == nil || m.canGrant(now)) {
		reply.LeaseGranted, reply.LeaseFor = true, m.opts.LeaseDuration
		st.lastGrant = now
	}
	// Only volumes the server reports or is named in can need a newer
	// configuration.
	candidates := m.volumesOf(from)
	for _, s := range hb.Volumes {
		candidates = append(candidates, s.Volume)
	}
	slices.Sort(candidates)
	for _, v := range slices.Compact(candidates) {
		c := m.configs[v]
		if c == nil {
			continue
		}
		s, has := st.status[v]
		if m.incarnations[from] == hb.Incarnation && ((has && s.Epoch < c.Epoch) || (!has && c.Contains(from))) {
			// Not before the log knows this incarnation: a restarted
			// server must not take a configuration that still counts it.
			reply.Configs = append(reply.Configs, c.Clone())
		}
	}
	m.send(from, reply)
	if !st.awaiting {
		st.awaiting, st.awaitingSince, st.awaitingSentAt = true, now, hb.SentAt
	}

	// A tail reports that its joining server caught up: make it the tail.
	for _, s := range hb.Volumes {
		c := m.configs[s.Volume]
		if c != nil && s.JoinerReady && s.Epoch == c.Epoch && c.Tail() == from && c.Joining != "" && m.mayPropose(now, c.Volume) {
			m.submit(now, Command{Kind: CmdPromote, Volume: c.Volume, Epoch: c.Epoch})
		}
	}
}

// deaf reports whether a server whose heartbeat this master hears has
// heard none of its replies for longer than the failure timeout: the
// master's messages to it are lost (a one-way fault). Such a server
// renews no lease and so serves nothing, and it takes no new
// configuration; its heartbeats therefore do not count as hearing from
// it, and the failure detector removes it like a silent server instead
// of leaving its chains stalled for as long as the fault lasts. Replies
// still go out, so a server whose link is back shows it on its next
// heartbeat. Found by catena torture (docs/torture.md).
func (m *Master) deaf(now wire.Time, st *serverState, hb *wire.Heartbeat) bool {
	if !st.awaiting || st.incarnation != hb.Incarnation || hb.Heard >= st.awaitingSentAt {
		st.awaiting = false // a new process, or it heard that reply (or a later one)
		return false
	}
	return now-st.awaitingSince > m.opts.FailureTimeout
}

// survives returns the volumes a restarted server should keep: it is a
// member, reports holding the volume, and no other member is intact
// (alive, in the incarnation the log knows, holding the volume). In a
// causal chain only a member that holds every answered update (it
// reports Complete) may lead the chain back alone, and one that is not
// complete does not count as intact: the chain waits for a complete one.
func (m *Master) survives(from wire.NodeID, hb *wire.Heartbeat) []wire.VolumeID {
	reported := map[wire.VolumeID]wire.VolumeStatus{}
	for _, s := range hb.Volumes {
		reported[s.Volume] = s
	}
	var out []wire.VolumeID
	for _, v := range m.volumes() {
		c := m.configs[v]
		s, holds := reported[v]
		if c.Index(from) < 0 || !holds || c.Causal() && !s.Complete {
			continue
		}
		intact := slices.ContainsFunc(c.Chain, func(o wire.NodeID) bool {
			st := m.servers[o]
			if o == from || st == nil || !st.alive || st.incarnation != m.incarnations[o] {
				return false
			}
			s, has := st.status[v]
			return has && (!c.Causal() || s.Complete)
		})
		if !intact {
			out = append(out, v)
		}
	}
	return out
}

// lastComplete returns the causal chains a failed server stays a member
// of: it may hold answered updates no other member is known to
// (VolumeStatus.Complete; chain/causal.go). It reported itself complete,
// or reported nothing this leader heard while it is one of the first k,
// and no other live member reported itself complete. Removing it could
// lose those updates even though it may only be cut off for a while; so
// the chain waits for it, as a strong chain waits for its last member.
func (m *Master) lastComplete(failed wire.NodeID) []wire.VolumeID {
	var out []wire.VolumeID
	for _, v := range m.volumesOf(failed) {
		c := m.configs[v]
		i := c.Index(failed)
		if !c.Causal() || i < 0 || len(c.Chain) == 1 {
			continue
		}
		if s, has := m.servers[failed].status[v]; has && !s.Complete || !has && i >= c.K {
			continue
		}
		other := slices.ContainsFunc(c.Chain, func(o wire.NodeID) bool {
			st := m.servers[o]
			if o == failed || st == nil || !st.alive || st.incarnation != m.incarnations[o] {
				return false
			}
			s, has := st.status[v]
			return has && s.Complete
		})
		if !other {
			out = append(out, v)
		}
	}
	return out
}

// Expired counts the servers this member removed, while leading, because
// it had not heard from them within the failure timeout (their leases had
// run out). For metrics.
func (m *Master) Expired() uint64 { return m.expired }

// ServerStatus returns the last status a server reported for a volume to
// this member (the leader's view).
func (m *Master) ServerStatus(id wire.NodeID, v wire.VolumeID) (wire.VolumeStatus, bool) {
	st := m.servers[id]
	if st == nil {
		return wire.VolumeStatus{}, false
	}
	s, ok := st.status[v]
	return s, ok
}

// stableTable returns the table of stable updates per geo volume, in
// volume order.
func (m *Master) stableTable() []wire.VolumeVector {
	out := make([]wire.VolumeVector, 0, len(m.stable))
	for _, v := range slices.Sorted(maps.Keys(m.stable)) {
		out = append(out, wire.VolumeVector{Volume: v, Vector: slices.Clone(m.stable[v])})
	}
	return out
}

// proposalRetry is how long the leader waits for a proposed change to a
// volume to apply before it may propose again.
const proposalRetry = 500 * wire.Millisecond

// mayPropose reports whether a change to volume v may be proposed now,
// and if so notes that one is.
func (m *Master) mayPropose(now wire.Time, v wire.VolumeID) bool {
	if m.pending(now, v) {
		return false
	}
	m.proposedAt[v] = now
	return true
}

// pending reports whether a change to volume v was proposed too recently
// for another.
func (m *Master) pending(now wire.Time, v wire.VolumeID) bool {
	at, ok := m.proposedAt[v]
	return ok && now-at < proposalRetry
}
