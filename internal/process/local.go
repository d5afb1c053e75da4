package process

import (
	"context"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// A server's own Redis-protocol front end (catena server -redis-listen):
// the proxy's code, in the server's process, with reads answered from the
// server's replicas where the chain lets this member answer them
// (chain.Server.LocalRead), without a message or a system call; the
// rest goes through the cluster's client as the proxy sends it.

// localReader answers what it can of some queries from this process's
// replicas, and reports for each whether it did.
type localReader func(ctx context.Context, ops []wire.Op, anyMember bool) ([]wire.Result, []bool)

// LocalReads answers what it can of the queries ops from this server's
// replicas: one Inspect of each event loop, each answering the volumes
// it runs.
func (s *Server) LocalReads(ctx context.Context, ops []wire.Op, anyMember bool) ([]wire.Result, []bool) {
	results, ok := make([]wire.Result, len(ops)), make([]bool, len(ops))
	left := len(ops)
	defer func() { s.localReads.Add(int64(len(ops) - left)) }()
	for i, l := range s.loops {
		if left == 0 {
			break
		}
		server := s.servers[i]
		err := l.Inspect(ctx, func(now wire.Time) {
			for j, op := range ops {
				if !ok[j] {
					if results[j], ok[j] = server.LocalRead(now, op, anyMember); ok[j] {
						left--
					}
				}
			}
		})
		if err != nil {
			break
		}
	}
	return results, ok
}

// LocalReadsAnswered returns how many reads the server's Redis front end
// answered from its replicas.
func (s *Server) LocalReadsAnswered() int64 { return s.localReads.Load() }

// localFirst is the front end's Store: the cluster's client, whose GETs
// (one at a time, or a batch that Start starts) are answered from this
// server's replicas when they can be.
type localFirst struct {
	*client.Client
	local localReader
	// anyMember is the consistency a read is answered locally at any
	// clean member with; Strong reads only at the tail.
	anyMember client.Consistency
}

// Get implements resp.Store.
func (l localFirst) Get(ctx context.Context, key string, opts ...client.ReadOption) ([]byte, bool, error) {
	results, ok := l.local(ctx, []wire.Op{{Kind: wire.OpGet, Key: key}}, l.anyMemberOf(opts))
	if ok[0] {
		return localValue(results[0])
	}
	return l.Client.Get(ctx, key, opts...)
}

// HashGet implements resp.Store: a hash's fields read from this
// server's replica when it can answer.
func (l localFirst) HashGet(ctx context.Context, key string, fields []string, opts ...client.ReadOption) ([]client.Field, bool, error) {
	results, ok := l.local(ctx, []wire.Op{{Kind: wire.OpGet, Key: key}}, l.anyMemberOf(opts))
	if !ok[0] {
		return l.Client.HashGet(ctx, key, fields, opts...)
	}
	return localFields(results[0], fields)
}

// localFields is HashGet's answer, the fields named (every field if
// none is), for a local read of the whole object: the fields are picked
// here, without encoding the names for the replica and the fields
// picked back (kv.Read's OpHashGet), and their values alias the
// result's copy of the object.
func localFields(r wire.Result, names []string) ([]client.Field, bool, error) {
	switch {
	case !r.Found:
		return nil, false, nil
	case r.Type != wire.TypeHash:
		return nil, false, client.ErrWrongType
	}
	fields, err := kv.PickFields(r.Value, names)
	return fields, err == nil, err
}

// anyMemberOf reports whether the read options allow any clean member.
func (l localFirst) anyMemberOf(opts []client.ReadOption) bool {
	for _, o := range opts {
		if c, isConsistency := o.(client.Consistency); isConsistency {
			return c == client.AnyMember
		}
	}
	return false
}

// localValue is Get's answer for a read's result.
func localValue(r wire.Result) ([]byte, bool, error) {
	switch {
	case !r.Found:
		return nil, false, nil
	case r.Type != wire.TypeString:
		return nil, false, client.ErrWrongType
	case r.Value == nil:
		return []byte{}, true, nil
	}
	return r.Value, true, nil
}

// Start implements resp.Starter: the reads a local read answers (GETs
// and hash reads) end at once; the rest start on the client.
func (l localFirst) Start(ctx context.Context, calls []client.Call) {
	var ops []wire.Op
	var at []int
	// A clean read at any member answers only calls that all allow it;
	// a read at the tail answers any call.
	anyMember := true
	for i, c := range calls {
		if c.Kind == client.CallGet || c.Kind == client.CallHashGet {
			ops = append(ops, wire.Op{Kind: wire.OpGet, Key: c.Key})
			at = append(at, i)
			anyMember = anyMember && c.Consistency == client.AnyMember
		}
	}
	if len(ops) == 0 {
		l.Client.Start(ctx, calls)
		return
	}
	results, ok := l.local(ctx, ops, anyMember)
	var rest []client.Call
	j := 0
	for i, c := range calls {
		if j < len(at) && at[j] == i {
			j++
			if ok[j-1] {
				var res client.CallResult
				if c.Kind == client.CallGet {
					res.Value, res.Found, res.Err = localValue(results[j-1])
				} else {
					res.Fields, res.Found, res.Err = localFields(results[j-1], c.Names)
				}
				c.Done(res)
				continue
			}
		}
		rest = append(rest, c)
	}
	if len(rest) > 0 {
		l.Client.Start(ctx, rest)
	}
}
