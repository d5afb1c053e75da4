package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// CallKind is what a Call does.
type CallKind uint8

const (
	// CallGet reads Call.Key at Call.Consistency, as Get does.
	CallGet CallKind = iota + 1
	// CallPut sets Call.Key to Call.Value, as Put does.
	CallPut
	// CallHashGet reads the fields Call.Names of the hash at Call.Key
	// (every field if none is named) at Call.Consistency, as HashGet
	// does.
	CallHashGet
	// CallHashSet sets the fields Call.Fields of the hash at Call.Key,
	// as HashSet does.
	CallHashSet
)

// Call is one operation for Start.
type Call struct {
	Kind        CallKind
	Key         string
	Value       []byte      // CallPut
	Names       []string    // CallHashGet
	Fields      []Field     // CallHashSet
	Consistency Consistency // CallGet, CallHashGet
	// Done receives the call's outcome, once.
	Done func(CallResult)
}

// CallResult is how a Call ended: what Get (Value, Found, Err), Put
// (Err), HashGet (Fields, Found, Err) or HashSet (Added, Err) would have
// returned for it, the same errors included.
type CallResult struct {
	Value  []byte
	Fields []Field
	Added  int64
	Found  bool
	Err    error
}

// Start starts calls and returns without waiting for them; each call's
// Done hears how it ended. ctx bounds them as it bounds Get and Put: its
// deadline (else Options.RequestTimeout), its cancellation, WithUser and
// WithSites.
//
// The calls start together, under one acquisition of the client's lock,
// and no goroutine waits for each: a front end that serves many
// connections (the Redis proxy) starts what it read in one go and hears
// of each outcome when it arrives.
//
// Done runs on a goroutine of the client's that delivers other outcomes
// too: it must return quickly, and must neither block nor call the
// client. It may run before Start returns.
func (c *Client) Start(ctx context.Context, calls []Call) {
	if len(calls) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, call := range calls {
			call.Done(CallResult{Err: fmt.Errorf("%w: %w", ErrUnavailable, err)})
		}
		return
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.opts.RequestTimeout)
	}
	// A context that can end cancels the calls still under way when it
	// does, as Get and Put give up when theirs ends.
	var b *startBatch
	if ctx.Done() != nil {
		b = &startBatch{ids: make([]clientcore.OpID, 0, len(calls))}
		b.pending.Store(int32(len(calls)) + 1) // + 1 until stop is set
	}
	opts := clientcore.CallOptions{User: userOf(ctx), Sites: sitesOf(ctx)}
	closed := false
	c.withCore(func(now wire.Time) {
		if closed = c.closed; closed {
			return
		}
		opts.Deadline = c.at(deadline)
		for _, call := range calls {
			op := wire.Op{Kind: wire.OpGet, Key: call.Key}
			opts.Consistency = clientcore.Strong
			switch call.Kind {
			case CallGet:
				opts.Consistency = clientcore.Consistency(call.Consistency)
			case CallPut:
				op = wire.Op{Kind: wire.OpPut, Key: call.Key, Value: call.Value}
			case CallHashGet:
				op = hashGetOp(call.Key, call.Names)
				opts.Consistency = clientcore.Consistency(call.Consistency)
			case CallHashSet:
				op = hashSetOp(call.Key, call.Fields)
			default:
				op.Kind = 0 // the core refuses it as invalid
			}
			id := c.core.Start(now, op, opts)
			c.waiters[id] = waiter{done: call.Done, kind: call.Kind, batch: b}
			if b != nil {
				b.ids = append(b.ids, id)
			}
		}
	})
	if closed {
		for _, call := range calls {
			call.Done(CallResult{Err: ErrClosed})
		}
		return
	}
	if b != nil {
		b.stop = context.AfterFunc(ctx, func() {
			c.withCore(func(now wire.Time) {
				for _, id := range b.ids {
					c.core.Cancel(now, id, ctx.Err()) // (finished ones are unknown: ignored)
				}
			})
		})
		b.release()
	}
}

// waiter is how the caller of an unfinished operation hears of its end:
// ch, which run waits on, or done, the callback of a Start's call.
type waiter struct {
	ch    chan clientcore.Done
	done  func(CallResult)
	kind  CallKind
	batch *startBatch
}

// startBatch is the calls of one Start whose context can end.
type startBatch struct {
	ids []clientcore.OpID
	// pending counts the calls not yet delivered, plus one until stop
	// is set; stop unregisters the cancellation once none is left.
	pending atomic.Int32
	stop    func() bool
}

func (b *startBatch) release() {
	if b.pending.Add(-1) == 0 {
		b.stop()
	}
}

// deliver tells a Start's call how it ended (closed: the client's Close
// ended it, and Get or Put would have returned ErrClosed unless it is
// Ambiguous). It runs without the lock.
func (c *Client) deliver(w waiter, d clientcore.Done, closed bool) {
	var r CallResult
	if closed && d.Outcome != clientcore.Ambiguous {
		r.Err = ErrClosed
	} else {
		res, err := result(c.explainMove(d))
		r.Err = err
		switch {
		case err != nil:
		case w.kind == CallGet && res.Found && res.Type != wire.TypeString:
			r.Err = ErrWrongType
		case w.kind == CallGet:
			r.Value, r.Found = res.Value, res.Found
			if r.Found && r.Value == nil {
				r.Value = []byte{}
			}
		case w.kind == CallHashGet:
			r.Fields, r.Err = kv.DecodeFields(res.Value)
			r.Found = res.Found
		case w.kind == CallHashSet:
			r.Added, r.Err = hashSetAdded(res)
		}
	}
	w.done(r)
	if w.batch != nil {
		w.batch.release()
	}
}
