// Package raftlog keeps a Raft member's hard state, snapshot and log
// entries durable, for the replicated master. Memory keeps them in memory
// (the simulator keeps one across a simulated restart, as a disk would);
// Pebble keeps them in a Pebble database.
package raftlog

import (
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Log is a Raft member's durable state.
//
// Contract: Save and Compact are buffered until Commit returns; Load
// returns what the last successful Commit left.
type Log interface {
	// Load returns the stored hard state, snapshot (nil if none) and the
	// entries after the snapshot.
	Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error)
	// Save stores a new hard state (if non-nil), a snapshot (if non-nil),
	// and entries, which replace any stored entry at or after their first
	// index.
	Save(hs *pb.HardState, snap *pb.Snapshot, entries []*pb.Entry)
	// Compact drops the entries up to and including index.
	Compact(index uint64)
	// Commit makes everything saved so far durable.
	Commit() error
	Close() error
}

// Memory is a Log in memory. Commit does nothing: a simulated crash keeps
// what was saved, like a disk that commits before messages leave.
type Memory struct {
	hs      *pb.HardState
	snap    *pb.Snapshot
	entries []*pb.Entry
}

// NewMemory returns an empty log.
func NewMemory() *Memory { return &Memory{} }

// Load implements Log.
func (m *Memory) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	var hs *pb.HardState
	if m.hs != nil {
		hs = proto.Clone(m.hs).(*pb.HardState)
	}
	var snap *pb.Snapshot
	if m.snap != nil {
		snap = proto.Clone(m.snap).(*pb.Snapshot)
	}
	entries := make([]*pb.Entry, len(m.entries))
	for i, e := range m.entries {
		entries[i] = proto.Clone(e).(*pb.Entry)
	}
	return hs, snap, entries, nil
}

// Save implements Log.
func (m *Memory) Save(hs *pb.HardState, snap *pb.Snapshot, entries []*pb.Entry) {
	if hs != nil {
		m.hs = proto.Clone(hs).(*pb.HardState)
	}
	if snap != nil {
		m.snap = proto.Clone(snap).(*pb.Snapshot)
		m.Compact(snap.GetMetadata().GetIndex())
	}
	if len(entries) == 0 {
		return
	}
	first := entries[0].GetIndex()
	m.entries = slices.DeleteFunc(m.entries, func(e *pb.Entry) bool { return e.GetIndex() >= first })
	for _, e := range entries {
		m.entries = append(m.entries, proto.Clone(e).(*pb.Entry))
	}
}

// Compact implements Log.
func (m *Memory) Compact(index uint64) {
	m.entries = slices.DeleteFunc(m.entries, func(e *pb.Entry) bool { return e.GetIndex() <= index })
}

// Commit implements Log.
func (m *Memory) Commit() error { return nil }

// Close implements Log.
func (m *Memory) Close() error { return nil }
