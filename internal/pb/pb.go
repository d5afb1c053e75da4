// Package pb is primary/backup replication, the baseline that the chain
// replication paper (van Renesse & Schneider, OSDI'04) compares chain
// replication against (§4, and the p/b and weak-p/b variants of §5.1), as a
// deterministic state machine driven by the same wire messages as package
// chain.
//
// Per volume, the first member of the configuration is the primary and the
// others are backups. The primary sequences every update, applies it and
// sends it to all backups in parallel; it answers the client once every
// backup has acknowledged it. Queries go to the primary, which holds a query
// on a key with unacknowledged updates until they are acknowledged (CR §4:
// "the primary, before responding to a query, must await acknowledgements
// from backups for prior updates"). With WeakReads, backups answer queries
// from their own state too (weak-p/b), which is not linearizable.
//
// This is an experiment baseline, not a service: the configuration is fixed
// for the server's life and there is no failure handling (no master, no
// leases, no promotion of a backup, no re-synchronisation of a link), no
// recovery from storage (a server starts every volume empty), no
// exactly-once session table (a retried update executes again) and no
// backpressure (pending updates and held queries are unbounded). Nothing
// here does I/O, reads a clock, draws random numbers or starts goroutines.
package pb

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// Options configure a primary/backup Server.
type Options struct {
	ID wire.NodeID
	// Configs gives each volume's members: Chain[0] is the primary, the
	// rest are backups. Fixed for the server's life. Volumes whose
	// configuration does not name ID are not hosted here.
	Configs map[wire.VolumeID]wire.Config
	// Engine holds the server's volumes; NewServer empties the stores of
	// the volumes it hosts.
	Engine storage.Engine
	// WeakReads lets backups answer queries from their own state (the
	// paper's weak-p/b); otherwise only the primary answers queries.
	WeakReads bool
}

// Server is one storage server: its replicas of the volumes whose
// configuration names it, as primary or backup.
type Server struct {
	id        wire.NodeID
	weakReads bool
	volumes   map[wire.VolumeID]*volume
	// protocolErrors holds messages from peers that contradicted the
	// protocol; they were dropped.
	protocolErrors []string
	out            []wire.Envelope
}

// volume is one server's replica of one volume.
type volume struct {
	config  wire.Config
	store   storage.Store
	primary bool

	// applied is the SN of the last update applied to store.
	applied wire.SN
	// committed is the highest SN every backup has acknowledged (the
	// primary), or applied (a backup).
	// INVARIANT: committed ≤ applied.
	committed wire.SN

	// Primary only.

	// backups are the configuration's members after the primary, and
	// acked[i] the highest SN backups[i] acknowledged.
	// INVARIANT: committed == min(acked), or applied with no backups.
	backups []wire.NodeID
	acked   []wire.SN
	// pending holds the applied but uncommitted updates in SN order.
	// INVARIANT: pending[i].u.SN == committed+1+i and the last one's SN is
	// applied; pending is empty on a backup.
	pending []pendingUpdate
	// keys has an entry for each key with a pending update.
	// INVARIANT: keys[k].count is the number of updates on k in pending,
	// and keys[k].last the highest SN among them.
	keys map[string]*keyState
}

// pendingUpdate is an update the primary applied and sent to the backups
// but not every backup has acknowledged.
type pendingUpdate struct {
	u wire.Update
	// held are queries answered once this update commits.
	held []heldQuery
}

// keyState tracks one key that has pending updates.
type keyState struct {
	count int
	last  wire.SN
	// committed is the key's object as of committed: what a query may
	// see. The store holds the object as of applied.
	committed kv.Object
}

// heldQuery is a query at the primary waiting for an update to commit.
type heldQuery struct {
	replyTo wire.NodeID
	client  wire.ClientID
	reqNo   uint64
	op      wire.Op
}

// NewServer returns a server hosting the volumes whose configuration names
// o.ID, each starting empty at SN 0. It panics on a malformed
// configuration (no members, a repeated member, or Volume not matching
// its key in Configs).
func NewServer(o Options) *Server {
	s := &Server{id: o.ID, weakReads: o.WeakReads, volumes: map[wire.VolumeID]*volume{}}
	for _, id := range slices.Sorted(maps.Keys(o.Configs)) {
		c := o.Configs[id]
		if c.Volume != id || len(c.Chain) == 0 || hasDuplicates(c.Chain) {
			panic(fmt.Sprintf("pb.NewServer: malformed configuration %v for volume %d", c, id))
		}
		i := c.Index(o.ID)
		if i < 0 {
			continue
		}
		v := &volume{config: c.Clone(), store: o.Engine.Volume(id), primary: i == 0}
		v.store.Reset()
		if v.primary {
			v.backups = slices.Clone(c.Chain[1:])
			v.acked = make([]wire.SN, len(v.backups))
			v.keys = map[string]*keyState{}
		}
		v.saveMeta()
		s.volumes[id] = v
	}
	return s
}

func hasDuplicates(ids []wire.NodeID) bool {
	sorted := slices.Sorted(slices.Values(ids))
	return len(slices.Compact(sorted)) != len(ids)
}

func (v *volume) saveMeta() {
	v.store.SetMeta(storage.Meta{Config: v.config, Applied: v.applied})
}

// ID returns the server's id.
func (s *Server) ID() wire.NodeID { return s.id }

// Volumes returns the volumes the server hosts, in order.
func (s *Server) Volumes() []wire.VolumeID { return slices.Sorted(maps.Keys(s.volumes)) }

// IsPrimary reports whether the server is the primary of a volume it hosts.
func (s *Server) IsPrimary(v wire.VolumeID) bool {
	vol := s.volumes[v]
	return vol != nil && vol.primary
}

// AppliedSN returns the SN of the last update applied to a volume, or 0 if
// the server does not host it.
func (s *Server) AppliedSN(v wire.VolumeID) wire.SN {
	if vol := s.volumes[v]; vol != nil {
		return vol.applied
	}
	return 0
}

// CommittedSN returns the highest SN of a volume that every backup has
// acknowledged (on a backup: its applied SN), or 0 if the server does not
// host the volume.
func (s *Server) CommittedSN(v wire.VolumeID) wire.SN {
	if vol := s.volumes[v]; vol != nil {
		return vol.committed
	}
	return 0
}

// HeldQueries returns how many queries on a volume wait for updates to
// commit.
func (s *Server) HeldQueries(v wire.VolumeID) int {
	vol := s.volumes[v]
	if vol == nil {
		return 0
	}
	n := 0
	for i := range vol.pending {
		n += len(vol.pending[i].held)
	}
	return n
}

// Snapshot returns every object of a volume the server hosts, ordered by
// key, or nil.
func (s *Server) Snapshot(v wire.VolumeID) []storage.KeyObject {
	if vol := s.volumes[v]; vol != nil {
		return vol.store.Snapshot()
	}
	return nil
}

func (s *Server) send(to wire.NodeID, m wire.Message) {
	s.out = append(s.out, wire.Envelope{To: to, Msg: m})
}

func (s *Server) flush() []wire.Envelope {
	out := s.out
	s.out = nil
	return out
}

// Tick does nothing: the protocol has no timers. It returns nil.
func (s *Server) Tick(now wire.Time) []wire.Envelope { return nil }

// Step handles one message from another node. Forwards and acks of another
// epoch, or from a node that is not the volume's primary (forwards) or one
// of its backups (acks), are dropped, as is every other kind of message.
func (s *Server) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	switch m := m.(type) {
	case *wire.ClientRequest:
		v := s.volumes[m.Volume]
		if v == nil {
			s.send(from, &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Err: wire.ErrUnavailable})
			break
		}
		s.handleClientRequest(v, from, m)
	case *wire.Forward:
		if v := s.volumes[m.Volume]; v != nil && !v.primary && m.Epoch == v.config.Epoch && from == v.config.Head() {
			s.handleForward(v, m)
		}
	case *wire.Ack:
		if v := s.volumes[m.Volume]; v != nil && v.primary && m.Epoch == v.config.Epoch {
			if i := slices.Index(v.backups, from); i >= 0 {
				s.handleAck(v, i, m.SN)
			}
		}
	}
	return s.flush()
}

func (s *Server) reply(v *volume, to wire.NodeID, req *wire.ClientRequest, code wire.ErrCode, result wire.Result) {
	rep := &wire.ClientReply{Volume: v.config.Volume, Client: req.Client, ReqNo: req.ReqNo, Err: code, Result: result}
	if code == wire.ErrWrongEpoch && v.config.Epoch > req.Epoch {
		c := v.config.Clone()
		rep.Config = &c
	}
	s.send(to, rep)
}

func (s *Server) handleClientRequest(v *volume, from wire.NodeID, req *wire.ClientRequest) {
	if err := kv.Validate(req.Op); err != nil || req.Op.SetsExpiry() { // (the baseline keeps no deadlines)
		s.reply(v, from, req, wire.ErrBadRequest, wire.Result{})
		return
	}
	if req.Epoch != v.config.Epoch {
		s.reply(v, from, req, wire.ErrWrongEpoch, wire.Result{})
		return
	}
	if req.Op.Kind.IsQuery() {
		switch {
		case v.primary:
			s.query(v, heldQuery{replyTo: from, client: req.Client, reqNo: req.ReqNo, op: req.Op})
		case s.weakReads:
			// weak-p/b: the backup's own state, which may lag the primary.
			result := kv.Read(req.Op, v.store.Get(req.Op.Key))
			result.SN = v.applied
			s.reply(v, from, req, wire.ErrNone, result)
		default:
			s.reply(v, from, req, wire.ErrNotTail, wire.Result{})
		}
		return
	}
	if !v.primary {
		s.reply(v, from, req, wire.ErrNotHead, wire.Result{})
		return
	}
	s.sequence(v, from, req)
}

// query answers a query at the primary with the key's committed object, at
// once if the key has no pending update, else once the last pending update
// on the key commits. Answering committed state only keeps queries
// linearizable: an uncommitted update has not been answered and may yet be
// lost with the primary.
func (s *Server) query(v *volume, q heldQuery) {
	if ks := v.keys[q.op.Key]; ks != nil {
		p := &v.pending[ks.last-v.committed-1]
		p.held = append(p.held, q)
		return
	}
	s.answer(v, q)
}

// answer replies to a query with the key's object as of committed.
func (s *Server) answer(v *volume, q heldQuery) {
	object := v.store.Get(q.op.Key)
	if ks := v.keys[q.op.Key]; ks != nil {
		object = ks.committed
	}
	result := kv.Read(q.op, object)
	result.SN = v.committed
	s.send(q.replyTo, &wire.ClientReply{Volume: v.config.Volume, Client: q.client, ReqNo: q.reqNo, Result: result})
}

// sequence is the primary's update processing (CR §4): compute the
// update's effect once, assign the next SN, apply it and send it to every
// backup in parallel.
func (s *Server) sequence(v *volume, from wire.NodeID, req *wire.ClientRequest) {
	sn := v.applied + 1
	prior := v.store.Get(req.Op.Key)
	next, changed, result := kv.Apply(req.Op, prior, 0)
	result.SN = sn
	u := wire.Update{
		SN: sn, Key: req.Op.Key, Changed: changed, Deleted: changed && !next.Exists, Value: next.Value,
		Client: req.Client, ReqNo: req.ReqNo, AckedBelow: req.AckedBelow, ReplyTo: from, Result: result,
	}
	v.apply(&u)
	if len(v.backups) == 0 {
		v.committed = sn
		s.replyUpdate(v, &u)
		return
	}
	ks := v.keys[u.Key]
	if ks == nil {
		ks = &keyState{committed: prior}
		v.keys[u.Key] = ks
	}
	ks.count++
	ks.last = sn
	v.pending = append(v.pending, pendingUpdate{u: u})
	for _, b := range v.backups {
		s.send(b, &wire.Forward{Volume: v.config.Volume, Epoch: v.config.Epoch, Updates: []wire.Update{u}})
	}
}

// apply stores one update in SN order.
func (v *volume) apply(u *wire.Update) {
	if u.SN != v.applied+1 {
		panic(fmt.Sprintf("INVARIANT apply order: volume %d applying SN %d after %d", v.config.Volume, u.SN, v.applied))
	}
	if u.Changed {
		v.store.Set(u.Key, kv.Object{Value: u.Value, Exists: !u.Deleted})
	}
	v.applied = u.SN
	v.saveMeta()
}

func (s *Server) replyUpdate(v *volume, u *wire.Update) {
	s.send(u.ReplyTo, &wire.ClientReply{Volume: v.config.Volume, Client: u.Client, ReqNo: u.ReqNo, Result: u.Result})
}

// handleForward is a backup's side: apply the primary's updates in SN
// order and acknowledge the last one applied.
func (s *Server) handleForward(v *volume, m *wire.Forward) {
	before := v.applied
	for i := range m.Updates {
		u := &m.Updates[i]
		if u.SN <= v.applied {
			continue // already applied
		}
		if u.SN != v.applied+1 {
			// Links are reliable and FIFO and the configuration never
			// changes, so a gap is a bug; there is nothing to resync with.
			s.protocolError("volume %d: %s forwarded SN %d to %s, which applied %d", v.config.Volume, v.config.Head(), u.SN, s.id, v.applied)
			break
		}
		v.apply(u)
	}
	v.committed = v.applied
	if v.applied > before {
		s.send(v.config.Head(), &wire.Ack{Volume: v.config.Volume, Epoch: v.config.Epoch, SN: v.applied})
	}
}

// handleAck records backup i's acknowledgement of every update up to sn
// and commits, in SN order, what every backup has acknowledged: the
// updates' clients are answered, then the queries held for them.
func (s *Server) handleAck(v *volume, i int, sn wire.SN) {
	if sn > v.applied {
		s.protocolError("volume %d: backup %s acknowledged %d beyond primary %s applied %d", v.config.Volume, v.backups[i], sn, s.id, v.applied)
		return
	}
	if sn <= v.acked[i] {
		return
	}
	v.acked[i] = sn
	committed := slices.Min(v.acked)
	if committed <= v.committed {
		return
	}
	n := int(committed - v.committed)
	done := v.pending[:n:n]
	v.pending = v.pending[n:]
	v.committed = committed
	for j := range done {
		u := &done[j].u
		ks := v.keys[u.Key]
		ks.count--
		if ks.count == 0 {
			delete(v.keys, u.Key)
		} else if u.Changed {
			ks.committed = kv.Object{Value: u.Value, Exists: !u.Deleted}
		}
	}
	// Answer only after committed and keys are up to date: a held query
	// sees the key as of the new committed SN, which may be past the
	// update it waited for.
	for j := range done {
		s.replyUpdate(v, &done[j].u)
		for _, q := range done[j].held {
			s.answer(v, q)
		}
	}
	clear(done) // the array is still pending's; let the collector have them
}

// protocolError records a message from a peer that contradicts the
// protocol. The message is dropped.
func (s *Server) protocolError(format string, args ...any) {
	if len(s.protocolErrors) < 16 {
		s.protocolErrors = append(s.protocolErrors, fmt.Sprintf(format, args...))
	}
}

// ProtocolErrors returns and clears the recorded protocol errors: messages
// from peers that contradicted the protocol and were dropped.
func (s *Server) ProtocolErrors() []string {
	errs := s.protocolErrors
	s.protocolErrors = nil
	return errs
}

// CheckInvariants verifies the server's local invariants and reports any
// recorded protocol error (without clearing it).
func (s *Server) CheckInvariants() error {
	var errs []error
	for _, e := range s.protocolErrors {
		errs = append(errs, errors.New("protocol error: "+e))
	}
	for _, id := range s.Volumes() {
		v := s.volumes[id]
		if v.committed > v.applied {
			errs = append(errs, fmt.Errorf("%s volume %d: committed %d > applied %d", s.id, id, v.committed, v.applied))
		}
		if !v.primary {
			continue
		}
		if len(v.backups) > 0 && v.committed != slices.Min(v.acked) {
			errs = append(errs, fmt.Errorf("%s volume %d: committed %d, backups acknowledged %v", s.id, id, v.committed, v.acked))
		}
		if v.committed+wire.SN(len(v.pending)) != v.applied {
			errs = append(errs, fmt.Errorf("%s volume %d: %d pending after committed %d, applied %d", s.id, id, len(v.pending), v.committed, v.applied))
		}
		counts := map[string]int{}
		for i := range v.pending {
			u := &v.pending[i].u
			if u.SN != v.committed+1+wire.SN(i) {
				errs = append(errs, fmt.Errorf("%s volume %d: pending[%d] has SN %d after committed %d", s.id, id, i, u.SN, v.committed))
				break
			}
			counts[u.Key]++
			if ks := v.keys[u.Key]; ks == nil || ks.last < u.SN {
				errs = append(errs, fmt.Errorf("%s volume %d: key %q of pending SN %d not tracked", s.id, id, u.Key, u.SN))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(v.keys)) {
			if ks := v.keys[k]; ks.count != counts[k] {
				errs = append(errs, fmt.Errorf("%s volume %d: key %q counts %d pending updates, has %d", s.id, id, k, ks.count, counts[k]))
			}
		}
	}
	return errors.Join(errs...)
}

// Routing is primary/backup's routing for the client core: updates and
// strong reads at the primary, reads at any member (weak-p/b) anywhere.
type Routing struct{}

// Update returns the primary.
func (Routing) Update(cfg wire.Config) wire.NodeID { return cfg.Head() }

// Query returns the primary for strong reads and a random member otherwise.
func (Routing) Query(cfg wire.Config, c clientcore.Consistency, pick func(n int) int) wire.NodeID {
	if c == clientcore.Strong || len(cfg.Chain) == 0 {
		return cfg.Head()
	}
	return cfg.Chain[pick(len(cfg.Chain))]
}
