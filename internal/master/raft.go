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

	"github.com/catena-kv/catena/internal/mutation"
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
	// leaderContact is when this member, a follower, last heard from a
	// leader of its term or a later one.
	leaderContact wire.Time
	leaderSince   wire.Time
	leading       bool
	// settingsUnsaved: the log was written before the settings were part
	// of the state, and no snapshot since records them.
	settingsUnsaved bool
	out             []wire.Envelope
}

// NewReplicated starts a member from what its log holds. A member whose
// log is empty starts a new cluster: o.Master's settings and chains (the
// same on every member) become the log's first snapshot, so every later
// start has them from the log alone. Settings given to a member that
// resumes must equal the saved ones.
func NewReplicated(o RaftOptions) (*Replicated, error) {
	o.Master.LeadershipWindow = o.ElectionTimeout
	m, err := newMaster(o.ID, o.Master)
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
	if snap != nil && raft.IsEmptySnap(snap) {
		snap = nil
	}
	var saved State
	if snap != nil {
		if saved, err = snapshotState(snap); err != nil {
			return nil, err
		}
	}
	switch {
	case hs == nil && snap == nil && len(entries) == 0:
		if err := m.create(); err != nil {
			return nil, err
		}
		snap, hs = r.creationSnapshot()
		o.Log.Save(hs, snap, nil)
	case saved.Settings.IsZero():
		// A log written before the settings were part of the state: it
		// starts from the options, as it did then, and the next snapshot
		// records their settings.
		if err := m.create(); err != nil {
			return nil, fmt.Errorf("the Raft log holds no cluster settings (written by an older catena): %w", err)
		}
		r.settingsUnsaved = true
	}
	if snap != nil {
		if err := r.storage.ApplySnapshot(snap); err != nil {
			return nil, err
		}
		if err := r.restore(snap); err != nil {
			return nil, err
		}
	}
	if err := m.opts.Settings.checkGiven(o.Master.Settings); err != nil {
		return nil, err
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
		ElectionTick:  1 << 30,
		HeartbeatTick: 1,
		// A member that cannot win does not raise the term: it asks for
		// pre-votes first, and members that hear from a live leader
		// refuse them (inLease), so a member cut off or starved for a
		// while, or one that sees only part of the others (a bridge),
		// does not depose a leader a quorum still follows.
		PreVote:         true,
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
	r.resetElectionDeadline(0)
	return r, nil
}

// creationSnapshot returns the first snapshot and hard state of a new
// cluster's log: the master's state at index 1, term 1, with every member
// a voter. Every member of a new cluster writes the same one; it takes
// the place of raft's Bootstrap, whose configuration-change entries
// would not carry the master's state.
func (r *Replicated) creationSnapshot() (*pb.Snapshot, *pb.HardState) {
	data, err := json.Marshal(r.m.State())
	if err != nil {
		panic(err)
	}
	voters := make([]uint64, len(r.opts.Members))
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		ConfState: &pb.ConfState{Voters: voters}, Index: proto.Uint64(1), Term: proto.Uint64(1),
	}}
	return snap, &pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}
}

// snapshotState decodes the master state a Raft snapshot carries.
func snapshotState(snap *pb.Snapshot) (State, error) {
	var s State
	if err := json.Unmarshal(snap.GetData(), &s); err != nil {
		return State{}, fmt.Errorf("master snapshot: %w", err)
	}
	return s, nil
}

// SavedSettings returns the cluster settings a member's log holds: none
// (zero) if the log is empty (the member's first start) or was written
// before settings were saved.
func SavedSettings(l raftlog.Log) (Settings, error) {
	_, snap, _, err := l.Load()
	if err != nil || snap == nil || raft.IsEmptySnap(snap) {
		return Settings{}, err
	}
	state, err := snapshotState(snap)
	return state.Settings, err
}

// Master returns the state machine the log drives.
func (r *Replicated) Master() *Master { return r.m }

// Leading reports whether this member leads.
func (r *Replicated) Leading() bool { return r.leading }

// Term returns the member's current Raft term: it grows with every
// election.
func (r *Replicated) Term() uint64 { return r.rn.BasicStatus().GetTerm() }

func (r *Replicated) restore(snap *pb.Snapshot) error {
	s, err := snapshotState(snap)
	if err != nil {
		return err
	}
	if err := r.m.loadState(s); err != nil {
		return err
	}
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
	if mutation.Enabled && r.opts.Mutations.GrantWithoutQuorum {
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

// inLease reports whether this member knows of a live leader: it leads
// and a quorum answered it within the election timeout, or it follows a
// leader it heard from within the election timeout. Such a member
// ignores vote and pre-vote requests (raft's CheckQuorum lease, which
// raft's own timer would give, but elections here run on Tick's timer).
func (r *Replicated) inLease(now wire.Time) bool {
	et := r.opts.ElectionTimeout
	if r.leading {
		heard := 1
		for _, at := range r.followerContact {
			if now-at < et {
				heard++
			}
		}
		return heard > len(r.opts.Members)/2
	}
	return r.rn.BasicStatus().Lead != 0 && now-r.leaderContact < et
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
			r.leaderContact = now
		}
	case pb.MessageType_MsgVote, pb.MessageType_MsgPreVote:
		if r.inLease(now) {
			return // a leader a quorum follows is alive: no election
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
				// A leader whose log holds nothing after the creation
				// snapshot leads a new cluster: a majority voted for
				// it, so no majority ever committed more.
				last, err := r.storage.LastIndex()
				r.m.newCluster = err == nil && last <= 1
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
// the last snapshot, or once any did while the settings are in no
// snapshot yet.
func (r *Replicated) maybeSnapshot() {
	due := r.applied-r.appliedAtSnapshot >= uint64(r.opts.SnapshotEvery) || r.settingsUnsaved && r.applied > r.appliedAtSnapshot
	if !due || r.confState == nil {
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
	r.settingsUnsaved = false
}
