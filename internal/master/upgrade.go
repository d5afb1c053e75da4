package master

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// The cluster version (docs/adr/0026, step 5; docs/upgrades.md): the
// protocol version the whole cluster runs at. Each process speaks a
// range of versions (internal/release); during a rolling upgrade old and
// new processes talk at versions both speak, and a behaviour that older
// processes cannot follow is used only once the cluster version allows
// it. An admin raises it (catena upgrade finalize) once every process
// speaks the new version: the leader checks the servers from their
// heartbeats, the command checks each master member, and a process that
// learns of a cluster version it does not speak stops (Incompatible)
// rather than run with a cluster it can no longer follow. It is never
// lowered: before finalizing, a downgrade to the previous release works;
// after, it does not.

// protocol returns the versions this member speaks.
func (m *Master) protocol() release.Range {
	if m.opts.Protocol == (release.Range{}) {
		return release.Speaks
	}
	return m.opts.Protocol
}

// ClusterVersion returns the protocol version the cluster runs at: 1
// until a finalize raised it.
func (m *Master) ClusterVersion() uint32 { return max(1, m.clusterVersion) }

// Incompatible reports why this member cannot go on: the cluster runs at
// a version above any it speaks (a downgrade after finalizing, or an old
// member restarted into an upgraded cluster), or its log held a command
// it does not know. The process stops with it.
func (m *Master) Incompatible() error {
	if m.unknownCommand != 0 {
		return fmt.Errorf("the Raft log holds a command of kind %d, which this master (release %s) does not know: a newer release's, proposed before this member was upgraded; run the newer release (docs/upgrades.md)",
			m.unknownCommand, release.Version)
	}
	if v, p := m.ClusterVersion(), m.protocol(); v > p.Max {
		return fmt.Errorf("the cluster runs at protocol version %d (finalized), and this master (release %s) speaks at most %d: run a release that speaks it (docs/upgrades.md)",
			v, release.Version, p.Max)
	}
	return nil
}

// handleVersionRequest answers a query for this member's versions (any
// member), or raises the cluster version (the leader; an admin's).
func (m *Master) handleVersionRequest(now wire.Time, from wire.NodeID, req *wire.VersionRequest) {
	reply := m.versionReply()
	if req.Finalize == 0 {
		m.send(from, reply)
		return
	}
	if !m.leading {
		return // admins ask every member; the leader answers
	}
	if err := authorizeAdmin(&m.auth, req.Caller); err != nil {
		m.deny(fmt.Sprintf("refused to finalize protocol version %d for %s (certificate %q): %v", req.Finalize, from, req.Caller.Name, err))
		reply.Err = err.Error()
		m.send(from, reply)
		return
	}
	if err := m.mayFinalize(req.Finalize); err != nil {
		reply.Err = err.Error()
		m.send(from, reply)
		return
	}
	if req.Finalize == m.ClusterVersion() {
		m.send(from, reply) // done already
		return
	}
	if !slices.Contains(m.versionWaiters, from) {
		m.versionWaiters = append(m.versionWaiters, from)
	}
	m.submit(now, Command{Kind: CmdClusterVersion, Version: req.Finalize})
}

// mayFinalize reports why the cluster version may not be raised to v:
// this member or a server does not speak it, or a server that holds data
// has not reported what it speaks (it is down).
func (m *Master) mayFinalize(v uint32) error {
	if v < m.ClusterVersion() {
		return fmt.Errorf("the cluster runs at protocol version %d already; it is never lowered", m.ClusterVersion())
	}
	if p := m.protocol(); v < p.Min || v > p.Max {
		return fmt.Errorf("this master (release %s) speaks protocol %s, not %d", release.Version, p, v)
	}
	known := maps.Clone(m.incarnations)
	for id := range m.byServer {
		known[id] = 0
	}
	for _, id := range slices.Sorted(maps.Keys(known)) {
		st := m.servers[id]
		holds := len(m.volumesOf(id)) > 0
		switch {
		case st == nil || !st.alive || st.protocol == (release.Range{}):
			if holds {
				return fmt.Errorf("server %s is in a chain but has not been heard from: start it with this release, or remove it, before finalizing", id)
			}
		case v < st.protocol.Min || v > st.protocol.Max:
			return fmt.Errorf("server %s speaks protocol %s, not %d: upgrade it first", id, st.protocol, v)
		}
	}
	return nil
}

// applyClusterVersion raises the cluster version to v (never lowers it)
// and answers the admins waiting for it.
func (m *Master) applyClusterVersion(v uint32) {
	m.clusterVersion = max(m.clusterVersion, v)
	if !m.leading {
		m.versionWaiters = nil
		return
	}
	reply := m.versionReply()
	for _, w := range m.versionWaiters {
		m.send(w, reply)
	}
	m.versionWaiters = nil
}

// versionReply describes this member's versions and the cluster's.
func (m *Master) versionReply() *wire.VersionReply {
	p := m.protocol()
	return &wire.VersionReply{Release: release.Version, MinProtocol: p.Min, MaxProtocol: p.Max,
		ClusterVersion: m.ClusterVersion(), Leader: m.leader}
}
