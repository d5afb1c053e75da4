package master

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/catena-kv/catena/internal/raftlog"
	"github.com/catena-kv/catena/internal/wire"
)

// RaftOptions configure a member of a replicated master.
type RaftOptions struct {
	// ID is this member; Members lists every member, in the same order on
	// every member (Raft ids are positions in it, from 1).
	ID      wire.NodeID
	Members []wire.NodeID
	Master  Options
	// Log keeps the member's Raft state across restarts.
	Log raftlog.Log
	// HeartbeatInterval is the leader's Raft heartbeat period.
	HeartbeatInterval wire.Time
	// ElectionTimeout: a member that has not heard from a leader for a
	// random time in [ElectionTimeout, 2·ElectionTimeout) campaigns. A
	// leader that has not heard from a quorum for ElectionTimeout grants
	// no lease (it may have been deposed).
	ElectionTimeout wire.Time
	// Rand draws election timeouts. The simulator passes a seeded one; etcd
	// raft's own randomness is never used (its election tick is infinite).
	Rand *rand.Rand
	// SnapshotEvery is how many applied commands a snapshot covers before
	// the log is compacted.
	SnapshotEvery int
	// Mutations deliberately break the protocol (checker tests only).
	Mutations Mutations
}

// Mutations deliberately break the replicated master, so tests can show
// the simulator's checkers catch it.
type Mutations struct {
	// GrantWithoutQuorum: the leader grants leases without checking that
	// a quorum still follows it, so a deposed leader goes on granting.
	GrantWithoutQuorum bool
}

// Replicated is one member of a master replicated with Raft
// (go.etcd.io/raft/v3). It is a deterministic state machine like Master:
// Raft messages travel as wire.RaftMessage, and the caller commits Log
// before sending what a step returned.
type Replicated struct {
	opts    RaftOptions
	m       *Master
	rn      *raft.RawNode
	storage *raft.MemoryStorage
	ids     map[wire.NodeID]uint64

	confState         *pb.ConfState
	applied           uint64
	appliedAtSnapshot uint64
	lastRaftTick      wire.Time
	electionDeadline  wire.Time
	campaignedAt      wire.Time
	followerContact   map[uint64]wire.Time
	leaderSince       wire.Time
	leading           bool
	out               []wire.Envelope
}

// NewReplicated starts a member from what its log holds, or as a new
// cluster of Members if it holds nothing.
func NewReplicated(o RaftOptions) (*Replicated, error) {
	o.Master.LeadershipWindow = o.ElectionTimeout
	m, err := New(o.ID, o.Master)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(o.Members, o.ID) {
		return nil, fmt.Errorf("member %s is not in %v", o.ID, o.Members)
	}
	if o.ElectionTimeout <= 2*o.HeartbeatInterval || o.HeartbeatInterval <= 0 {
		return nil, errors.New("election timeout must exceed two heartbeat intervals")
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 1000
	}
	r := &Replicated{opts: o, m: m, storage: raft.NewMemoryStorage(), ids: map[wire.NodeID]uint64{}, followerContact: map[uint64]wire.Time{}}
	for i, id := range o.Members {
		r.ids[id] = uint64(i + 1)
	}
	m.SetLeader(0, false, "")
	m.members = slices.Clone(o.Members)
	m.propose = r.propose
	m.canGrant = r.canGrant

	hs, snap, entries, err := o.Log.Load()
	if err != nil {
		return nil, err
	}
	fresh := hs == nil && snap == nil && len(entries) == 0
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := r.storage.ApplySnapshot(snap); err != nil {
			return nil, err
		}
		if err := r.restore(snap); err != nil {
			return nil, err
		}
	}
	if hs != nil {
		r.storage.SetHardState(hs)
	}
	if len(entries) > 0 {
		r.storage.Append(entries)
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: r.ids[o.ID],
		// Elections are driven by Tick with o.Rand, never by raft's timer.
		ElectionTick:    1 << 30,
		HeartbeatTick:   1,
		Storage:         r.storage,
		Applied:         r.applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		Logger:          &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)},
	})
	if err != nil {
		return nil, err
	}
	r.rn = rn
	if fresh {
		peers := make([]raft.Peer, len(o.Members))
		for i := range o.Members {
			peers[i] = raft.Peer{ID: uint64(i + 1)}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, err
		}
	}
	r.resetElectionDeadline(0)
	return r, nil
}

// Master returns the state machine the log drives.
func (r *Replicated) Master() *Master { return r.m }

// Leading reports whether this member leads.
func (r *Replicated) Leading() bool { return r.leading }

func (r *Replicated) restore(snap *pb.Snapshot) error {
	var s State
	if err := json.Unmarshal(snap.GetData(), &s); err != nil {
		return fmt.Errorf("master snapshot: %w", err)
	}
	r.m.loadState(s)
	r.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	r.applied = snap.GetMetadata().GetIndex()
	r.appliedAtSnapshot = r.applied
	return nil
}

func (r *Replicated) propose(c Command) {
	data, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	r.rn.Propose(data) // dropped if this member is not the leader: fine
}

// canGrant: a leader grants leases only while a quorum answered it within
// an election timeout; a deposed leader therefore stops granting within
// LeadershipWindow of losing its quorum.
func (r *Replicated) canGrant(now wire.Time) bool {
	if !r.leading {
		return false
	}
	if r.opts.Mutations.GrantWithoutQuorum {
		return true
	}
	window := r.opts.ElectionTimeout
	heard := 1 // itself
	for _, at := range r.followerContact {
		if now-at < window {
			heard++
		}
	}
	return heard > len(r.opts.Members)/2 || now-r.campaignedAt < window && r.leaderSince >= r.campaignedAt
}

func (r *Replicated) resetElectionDeadline(now wire.Time) {
	et := r.opts.ElectionTimeout
	r.electionDeadline = now + et + wire.Time(r.opts.Rand.Int64N(int64(et)))
}

// Step handles one message.
func (r *Replicated) Step(now wire.Time, from wire.NodeID, msg wire.Message) []wire.Envelope {
	if rm, ok := msg.(*wire.RaftMessage); ok {
		r.stepRaft(now, from, rm)
	} else {
		r.out = append(r.out, r.m.Step(now, from, msg)...)
	}
	r.processReady(now)
	return r.flush()
}

func (r *Replicated) stepRaft(now wire.Time, from wire.NodeID, rm *wire.RaftMessage) {
	id, known := r.ids[from]
	m := &pb.Message{}
	if !known || proto.Unmarshal(rm.Data, m) != nil || m.GetFrom() != id || m.GetTo() != r.ids[r.opts.ID] {
		return // not from a member, or malformed
	}
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap:
		if m.GetTerm() >= r.rn.BasicStatus().GetTerm() {
			r.resetElectionDeadline(now) // a leader is alive
		}
	case pb.MessageType_MsgAppResp, pb.MessageType_MsgHeartbeatResp:
		if r.leading && m.GetTerm() == r.rn.BasicStatus().GetTerm() {
			r.followerContact[id] = now
		}
	}
	r.rn.Step(m)
}

// Tick paces Raft's heartbeats, campaigns when no leader has been heard
// from, and runs the master's timers.
func (r *Replicated) Tick(now wire.Time) []wire.Envelope {
	if now-r.lastRaftTick >= r.opts.HeartbeatInterval {
		r.lastRaftTick = now
		r.rn.Tick()
	}
	if !r.leading && now >= r.electionDeadline {
		r.campaignedAt = now
		r.rn.Campaign()
		r.resetElectionDeadline(now)
	}
	r.out = append(r.out, r.m.Tick(now)...)
	r.processReady(now)
	return r.flush()
}

func (r *Replicated) flush() []wire.Envelope {
	out := r.out
	r.out = nil
	return out
}

func (r *Replicated) processReady(now wire.Time) {
	for r.rn.HasReady() {
		rd := r.rn.Ready()
		if rd.SoftState != nil {
			leading := rd.SoftState.RaftState == raft.StateLeader
			if leading && !r.leading {
				r.leaderSince = now
				clear(r.followerContact)
			}
			r.leading = leading
			leader := wire.NodeID("")
			if lead := rd.SoftState.Lead; lead > 0 && int(lead) <= len(r.opts.Members) {
				leader = r.opts.Members[lead-1]
			}
			r.m.SetLeader(now, leading, leader)
		}
		var hs *pb.HardState
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			hs = rd.HardState
		}
		var snap *pb.Snapshot
		if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
			snap = rd.Snapshot
			r.storage.ApplySnapshot(snap)
			if err := r.restore(snap); err != nil {
				panic(err)
			}
		}
		r.opts.Log.Save(hs, snap, rd.Entries)
		if hs != nil {
			r.storage.SetHardState(hs)
		}
		if len(rd.Entries) > 0 {
			r.storage.Append(rd.Entries)
		}
		for _, m := range rd.Messages {
			data, err := proto.Marshal(m)
			if err != nil {
				panic(err)
			}
			if to := m.GetTo(); to > 0 && int(to) <= len(r.opts.Members) {
				r.out = append(r.out, wire.Envelope{To: r.opts.Members[to-1], Msg: &wire.RaftMessage{Data: data}})
			}
		}
		for _, e := range rd.CommittedEntries {
			r.applyEntry(now, e)
		}
		r.maybeSnapshot()
		r.rn.Advance(rd)
	}
}

func (r *Replicated) applyEntry(now wire.Time, e *pb.Entry) {
	r.applied = e.GetIndex()
	switch e.GetType() {
	case pb.EntryType_EntryConfChange:
		cc := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			panic(fmt.Sprintf("master: conf change entry %d: %v", e.GetIndex(), err))
		}
		r.confState = r.rn.ApplyConfChange(cc)
	case pb.EntryType_EntryConfChangeV2:
		cc := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			panic(fmt.Sprintf("master: conf change entry %d: %v", e.GetIndex(), err))
		}
		r.confState = r.rn.ApplyConfChange(cc)
	case pb.EntryType_EntryNormal:
		if len(e.GetData()) == 0 {
			return // a new leader's empty entry
		}
		var c Command
		if err := json.Unmarshal(e.GetData(), &c); err != nil {
			panic(fmt.Sprintf("master: log entry %d: %v", e.GetIndex(), err))
		}
		r.out = append(r.out, r.m.Apply(now, c)...)
	}
}

// maybeSnapshot compacts the log once SnapshotEvery entries applied since
// the last snapshot.
func (r *Replicated) maybeSnapshot() {
	if r.applied-r.appliedAtSnapshot < uint64(r.opts.SnapshotEvery) || r.confState == nil {
		return
	}
	data, err := json.Marshal(r.m.State())
	if err != nil {
		panic(err)
	}
	snap, err := r.storage.CreateSnapshot(r.applied, r.confState, data)
	if err != nil {
		return
	}
	r.storage.Compact(r.applied)
	r.opts.Log.Save(nil, snap, nil)
	r.appliedAtSnapshot = r.applied
}
