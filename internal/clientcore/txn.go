package clientcore

import (
	"errors"
	"fmt"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// GET-TRANSACTION (ChainReaction §IV-D; docs/adr/0013-sites-and-geo-causal.md):
// a read of several keys of causal keyspaces whose values form a snapshot
// closed under causality: no value returned is older, in causal order,
// than a write in the causal past of another value returned.
//
// The core reads every key (ordinary causal reads, so the session's own
// past is respected) in rounds, and returns when two rounds in a row
// return the same versions (Result.Stamp). Why that is a snapshot: let
// x_j be returned for key j and x_i' a write to key i in x_j's causal
// past. A member applies x_j only once its dependencies, x_i' among them
// transitively, are stable (in one site: committed, as every member of
// key i's chain knows, docs/adr/0023-causal-reads-as-of.md; across
// sites: at the tail of key i's chain, so at every member, which answers
// with its newest version), so x_i' was readable at every member of key
// i's chain before the first round read x_j, hence before the second
// round read key i, which thus returned x_i' or a version after it in
// last-writer-wins order; and that is the version returned, since both
// rounds agree. No
// sequencer and nothing on the write path: a GET-TRANSACTION costs two
// reads per key when its keys are quiet, more while they are written,
// and gives up (ErrContention) after Options.TxnRoundsMax rounds.

// DefaultTxnRoundsMax bounds the rounds of reads of a GET-TRANSACTION.
const DefaultTxnRoundsMax = 8

var (
	// ErrContention: the keys of a GET-TRANSACTION were written so often
	// that no two rounds of reads agreed within Options.TxnRoundsMax.
	ErrContention = errors.New("GET-TRANSACTION: the keys kept changing; no two rounds of reads agreed")
	// ErrNotCausal: a key of a GET-TRANSACTION is not in a causal
	// keyspace (versions without a stamp cannot be compared).
	ErrNotCausal = errors.New("GET-TRANSACTION reads keys of causal keyspaces only")
)

// TxnResult is what a finished GET-TRANSACTION returned (Done.Txn).
type TxnResult struct {
	Keys []string
	// Results are the values read, in the order of Keys.
	Results []wire.Result
	// Rounds is how many rounds of reads it took (at least 2).
	Rounds int
}

// txn is a GET-TRANSACTION under way.
type txn struct {
	id     OpID
	keys   []string
	call   CallOptions
	rounds int
	prev   []wire.Result
	cur    []wire.Result
	// reads maps the reads of the current round to their key's index.
	reads map[OpID]int
}

// StartTransaction begins a GET-TRANSACTION of keys and returns its id;
// it finishes in Ready.Done with Txn set (Result is unused).
func (c *Core) StartTransaction(now wire.Time, keys []string, call CallOptions) OpID {
	id := c.nextID
	c.nextID++
	t := &txn{id: id, keys: keys, call: call}
	if len(keys) == 0 {
		c.finishTxn(t, Done{Outcome: Invalid, Err: errors.New("GET-TRANSACTION of no key")})
		return id
	}
	for _, k := range keys {
		if err := kv.Validate(wire.Op{Kind: wire.OpGet, Key: k}); err != nil {
			c.finishTxn(t, Done{Outcome: Invalid, Err: err})
			return id
		}
	}
	if !call.Consistency.Valid() {
		c.finishTxn(t, Done{Outcome: Invalid, Err: fmt.Errorf("unknown consistency %d", call.Consistency)})
		return id
	}
	if c.txns == nil {
		c.txns, c.txnOf = map[OpID]*txn{}, map[OpID]OpID{}
	}
	c.txns[id] = t
	c.startTxnRound(now, t)
	return id
}

// startTxnRound reads every key of t once more.
func (c *Core) startTxnRound(now wire.Time, t *txn) {
	t.rounds++
	t.cur = make([]wire.Result, len(t.keys))
	t.reads = map[OpID]int{}
	for i, k := range t.keys {
		c.startingTxn = t.id
		id := c.Start(now, wire.Op{Kind: wire.OpGet, Key: k}, t.call)
		c.startingTxn = 0
		if _, running := c.ops[id]; !running {
			// Finished at once: its deadline has passed.
			c.endTxn(now, t, Done{Outcome: Unavailable, Err: ErrDeadline})
			return
		}
		t.reads[id] = i
		c.txnOf[id] = t.id
	}
}

// finishTxnRead takes a read of a GET-TRANSACTION that finished.
func (c *Core) finishTxnRead(now wire.Time, o *operation, d Done) {
	delete(c.txnOf, o.id)
	t := c.txns[o.txn]
	if t == nil {
		return // the transaction ended already
	}
	i, ok := t.reads[o.id]
	if !ok {
		return
	}
	delete(t.reads, o.id)
	if d.Outcome != OK {
		c.endTxn(now, t, Done{Outcome: d.Outcome, Err: d.Err})
		return
	}
	t.cur[i] = d.Result
	if len(t.reads) > 0 {
		return
	}
	for i, r := range t.cur {
		if r.Found && r.Stamp.IsZero() {
			c.endTxn(now, t, Done{Outcome: Invalid, Err: fmt.Errorf("%w: %q", ErrNotCausal, t.keys[i])})
			return
		}
	}
	if t.prev != nil && sameVersions(t.prev, t.cur) || mutation.Enabled && c.opts.Mutations.TxnOneRound {
		c.endTxn(now, t, Done{Outcome: OK, Txn: &TxnResult{Keys: t.keys, Results: t.cur, Rounds: t.rounds}})
		return
	}
	if t.rounds >= c.opts.TxnRoundsMax {
		c.endTxn(now, t, Done{Outcome: Unavailable, Err: ErrContention})
		return
	}
	t.prev = t.cur
	c.startTxnRound(now, t)
}

// sameVersions reports whether two rounds read the same versions.
func sameVersions(a, b []wire.Result) bool {
	for i := range a {
		if a[i].Stamp != b[i].Stamp || a[i].Found != b[i].Found {
			return false
		}
	}
	return true
}

// endTxn finishes a transaction and cancels the reads of its round.
func (c *Core) endTxn(now wire.Time, t *txn, d Done) {
	delete(c.txns, t.id)
	for id := range t.reads {
		c.Cancel(now, id, ErrDeadline)
	}
	c.finishTxn(t, d)
}

// finishTxn reports a transaction done.
func (c *Core) finishTxn(t *txn, d Done) {
	d.ID, d.Op, d.Attempts = t.id, wire.Op{Kind: wire.OpGet}, t.rounds
	c.out.Done = append(c.out.Done, d)
}
