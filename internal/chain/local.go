package chain

import (
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Local reads: a front end in the server's own process (catena server
// -redis-listen) answers a query from this server's replica when the
// chain would let this member answer it, without a message: a CRAQ
// clean read (ReadsCleanAtAnyMember) at any member, or with strong
// consistency at the tail. It is a pure read, run on the loop's
// goroutine between steps (node.Loop.Inspect), and declines (false)
// whenever the protocol path could answer otherwise: no lease, another
// role, a dirty key, a tail read that would wait for disks, a deadline
// the clock cannot judge, a mode other than strong, or authorization on
// (the front end then sends the query as any client does).

// LocalRead answers the query op (OpGet or OpHashGet) at now from this
// server's replica, if it can without a message: anyMember allows a
// clean read at any member, else only the tail answers. ok false: ask
// the chain.
func (s *Server) LocalRead(now wire.Time, op wire.Op, anyMember bool) (result wire.Result, ok bool) {
	if op.Kind != wire.OpGet && op.Kind != wire.OpHashGet || s.auth.users != nil || !s.HasLease(now) || kv.Validate(op) != nil {
		return wire.Result{}, false
	}
	v, routed := placement.Route(s.keyspaces, op.Key)
	if !routed || !s.owns(v) {
		return wire.Result{}, false
	}
	r := s.replicas[v]
	if r == nil {
		return wire.Result{}, false
	}
	return r.localRead(now, op, anyMember)
}

// localRead is LocalRead at one replica: handleQuery's checks, without
// changing anything.
func (r *Replica) localRead(now wire.Time, op wire.Op, anyMember bool) (wire.Result, bool) {
	switch {
	case r.phase != phaseRunning || r.modeOf != wire.ModeStrong || r.traits.Stamps:
		return wire.Result{}, false
	case r.role.isTail():
		if r.tailReadWaits(op.Key) {
			return wire.Result{}, false
		}
	case anyMember && r.role.isMember() && r.reads == ReadsCleanAtAnyMember:
		if r.dirty(op.Key) {
			return wire.Result{}, false
		}
	default:
		return wire.Result{}, false
	}
	o := r.store.Get(op.Key)
	if o.Expires != 0 {
		if !r.clock.trusted(now) {
			return wire.Result{}, false
		}
		o = kv.Live(o, now)
	}
	result := kv.Read(op, o)
	result.SN = r.applied
	return result, true
}
