package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// clientTimeouts are a simulated client's retry policy and load.
type clientTimeouts struct {
	attempt  wire.Time // resend a request unanswered this long
	backoff  wire.Time // wait after an error reply before retrying
	giveUp   wire.Time // report an operation's outcome unknown after this long
	inFlight int       // operations outstanding at once
}

// client is a simulated client: a workload of random operations on a few
// keys, run through the client core that users run (clientcore), whose
// outcomes it records in the history the checkers read.
type client struct {
	id       wire.NodeID
	clientID wire.ClientID
	// transactions counts the GET-TRANSACTIONs that returned.
	transactions int
	// session names the client's session in the history: its first
	// clientID, kept when it moves to another site (a new clientID
	// there), changed when it starts a new session.
	session  int
	core     *clientcore.Core
	rng      *rand.Rand
	keys     []string
	timeouts clientTimeouts
	// started counts the operations started, for unique values.
	started int
	// calls holds each unfinished operation's call time (real time).
	calls map[clientcore.OpID]wire.Time
	// issuing is false once the workload stops starting operations.
	issuing bool
	// script, when set, replaces random operations (final reads).
	script []wire.Op
	// readOnly clients only read: they keep using a tail until it fails
	// them, which is what exposes a removed tail still answering.
	readOnly bool
	// reads is the consistency of the client's reads.
	reads clientcore.Consistency
	// hashes makes a fifth of the client's operations a hash's, on the
	// same keys as the strings' (Options.Hashes).
	hashes bool
	// causal clients only put unique values and get them: the causal+
	// checker reads histories of those.
	causal bool
	// onStart, when set, hears of every operation started.
	onStart func(cl *client, id clientcore.OpID, op wire.Op)
	// newSession returns a fresh core with a new client id. A causal
	// client that gave up on a write starts a new session: the write
	// may still be applied after the client's next operations, which
	// then do not depend on it, so those belong to another session.
	newSession func() (*clientcore.Core, wire.ClientID)

	history *[]check.Operation
	acked   *[]ackedUpdate
	// scans, when set, makes the client walk a scan every 8th operation
	// and record it there (scan.go); walk is the scan in progress.
	scans *[]scanRecord
	walk  *scanWalk
	// exports, when set, makes the client read a whole volume as a
	// backup does every 8th operation (one it walks no scan on) and
	// record it there (export.go); export is the read in progress.
	exports *[]exportRecord
	export  *exportRead
	// expiryRecord, when set, makes the client also write and read keys
	// that expire (expiry.go): expiryOps are those in flight,
	// expiryKeys the keys its answered writes created, in order.
	expiryRecord *expiryRecord
	expiryOps    map[clientcore.OpID]expiryOp
	expiryKeys   []string
	// renewing is the renewal nextExpiryOp just drew, until Tick records
	// its operation.
	renewing *expiryRenewal
	// sites is, in a run of several sites, how many there are: every
	// 16th write of a client then asks for 2 of them or all (CallOptions
	// .Sites), and durable checks such a write when it is answered.
	sites    int
	asked    map[clientcore.OpID]askedSites
	durable  func(d clientcore.Done, sites int)
	realTime func() wire.Time
	failure  func(string)
}

// askedSites is a write that asked for several sites, and the core
// (session) that runs it: a new session's operation ids start over.
type askedSites struct {
	core  *clientcore.Core
	sites int
}

// ackedUpdate is an update the client saw succeed, for the durability check.
type ackedUpdate struct {
	client wire.ClientID
	reqNo  uint64
	sn     wire.SN
	volume wire.VolumeID
}

func (c *client) randomOp() wire.Op {
	key := c.keys[c.rng.IntN(len(c.keys))]
	value := []byte(fmt.Sprintf("%s.%d", c.id, c.started))
	p := c.rng.IntN(100)
	if c.readOnly {
		p = 0
	}
	if c.causal {
		if p < 55 {
			return wire.Op{Kind: wire.OpGet, Key: key}
		}
		return wire.Op{Kind: wire.OpPut, Key: key, Value: value}
	}
	if c.hashes {
		// Hash operations go mostly to keys of their own, and string
		// operations now and then to those: WRONGTYPE both ways.
		hash := c.rng.IntN(5) == 0
		if hash && c.rng.IntN(4) != 0 || !hash && c.rng.IntN(20) == 0 {
			key = "h/" + key
		}
		if hash {
			return c.randomHashOp(key, value)
		}
	}
	switch {
	case p < 40:
		return wire.Op{Kind: wire.OpGet, Key: key}
	case p < 65:
		return wire.Op{Kind: wire.OpPut, Key: key, Value: value}
	case p < 75:
		// Compare against a value some client may have written.
		expected := fmt.Appendf(nil, "c%d.%d", 1+c.rng.IntN(3), c.rng.IntN(c.started+1))
		return wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: expected, ExpectAbsent: c.rng.IntN(4) == 0, Value: value}
	case p < 85:
		return wire.Op{Kind: wire.OpIncrement, Key: key, Delta: int64(1 + c.rng.IntN(5))}
	case p < 95:
		return wire.Op{Kind: wire.OpAppend, Key: key, Value: []byte("+" + string(value))}
	default:
		return wire.Op{Kind: wire.OpDelete, Key: key}
	}
}

// randomHashOp returns a hash operation on key: on fields f1..f3, with
// the client's unique value (docs/adr/0029).
func (c *client) randomHashOp(key string, value []byte) wire.Op {
	field := func() string { return fmt.Sprintf("f%d", 1+c.rng.IntN(3)) }
	names := func(n int) []byte {
		fs := make([]kv.Field, n)
		for i := range fs {
			fs[i].Name = field()
		}
		return kv.EncodeFields(fs)
	}
	switch p := c.rng.IntN(100); {
	case p < 30:
		return wire.Op{Kind: wire.OpHashGet, Key: key, Value: names(c.rng.IntN(3))}
	case p < 55:
		fs := []kv.Field{{Name: field(), Value: value}}
		if c.rng.IntN(2) == 0 {
			if f := field(); f != fs[0].Name {
				fs = append(fs, kv.Field{Name: f, Value: value})
			}
		}
		return wire.Op{Kind: wire.OpHashSet, Key: key, Value: kv.EncodeFields(fs)}
	case p < 65:
		return wire.Op{Kind: wire.OpHashSetNX, Key: key, Value: kv.EncodeFields([]kv.Field{{Name: field(), Value: value}})}
	case p < 80:
		return wire.Op{Kind: wire.OpHashIncrement, Key: key, Value: names(1), Delta: int64(1 + c.rng.IntN(5))}
	default:
		return wire.Op{Kind: wire.OpHashDelete, Key: key, Value: names(1 + c.rng.IntN(2))}
	}
}

// Tick starts operations, and lets the core retry and give up.
func (c *client) Tick(now wire.Time) []wire.Envelope {
	for c.issuing && c.core.Pending() < c.timeouts.inFlight {
		var op wire.Op
		if c.script == nil {
			op = c.randomOp()
		} else {
			if len(c.script) == 0 {
				c.issuing = false
				break
			}
			op, c.script = c.script[0], c.script[1:]
		}
		c.started++
		if c.scans != nil && c.walk == nil && c.script == nil && c.started%8 == 0 && c.startScan(now) {
			continue
		}
		if c.exports != nil && c.export == nil && c.script == nil && c.started%8 == 4 && c.startExport(now) {
			continue
		}
		if c.causal && c.script == nil && !c.readOnly && c.rng.IntN(100) < 5 && len(c.keys) >= 2 {
			// A GET-TRANSACTION of 2..4 distinct keys.
			keys := slices.Clone(c.keys)
			c.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			keys = keys[:2+c.rng.IntN(min(3, len(keys)-1))]
			id := c.core.StartTransaction(now, keys, clientcore.CallOptions{Deadline: now + c.timeouts.giveUp, Consistency: c.reads})
			c.calls[id] = c.realTime()
			continue
		}
		var expiring bool
		if c.expiryRecord != nil && c.script == nil {
			if eop, ok := c.nextExpiryOp(); ok {
				op, expiring = eop, true
			}
		}
		call := clientcore.CallOptions{Deadline: now + c.timeouts.giveUp, Consistency: c.reads}
		if c.sites > 1 && !op.Kind.IsQuery() && c.started%16 == 0 {
			// Without drawing from the world's randomness: the runs'
			// other choices stay what they were.
			call.Sites = 2 + c.started/16%(c.sites-1)
		}
		id := c.core.Start(now, op, call)
		c.calls[id] = c.realTime()
		if expiring {
			c.expiryOps[id] = expiryOp{key: op.Key, read: op.Kind.IsQuery(), renewal: c.renewing}
			c.renewing = nil
			continue
		}
		if call.Sites > 1 {
			c.asked[id] = askedSites{core: c.core, sites: call.Sites}
		}
		if c.onStart != nil {
			c.onStart(c, id, op)
		}
	}
	c.core.Tick(now)
	return c.ready(now)
}

// Step hands replies from servers and the master to the core.
func (c *client) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	c.core.Step(now, from, m)
	return c.ready(now)
}

// ready records the operations the core finished and returns its messages.
func (c *client) ready(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for {
		rd := c.core.Ready()
		out = append(out, rd.Messages...)
		if len(rd.Done) == 0 {
			return out
		}
		for _, d := range rd.Done {
			if c.walk != nil && d.ID == c.walk.page {
				c.scanPage(now, d) // may ask for the next page: the loop takes its request
				continue
			}
			if c.export != nil && d.ID == c.export.page {
				c.exportPage(now, d) // (as scanPage)
				continue
			}
			if c.recordExpiry(d) {
				continue
			}
			c.record(d)
		}
	}
}

// record adds a finished operation to the history: with its result, or
// as maybe-applied when its outcome is unknown. Operations that changed
// nothing (unanswered queries, updates that never left) are left out.
func (c *client) record(d clientcore.Done) {
	call := c.calls[d.ID]
	delete(c.calls, d.ID)
	if a, ok := c.asked[d.ID]; ok && a.core == c.core {
		delete(c.asked, d.ID)
		if d.Outcome == clientcore.OK && c.durable != nil {
			c.durable(d, a.sites)
		}
	}
	switch d.Outcome {
	case clientcore.Invalid:
		c.failure(fmt.Sprintf("client %s: request %v refused as malformed: %v", c.id, d.Op, d.Err))
		return
	case clientcore.Refused:
		c.failure(fmt.Sprintf("client %s: request %v refused by authorization, which simulations do not turn on: %v", c.id, d.Op, d.Err))
		return
	case clientcore.Unavailable:
		return
	}
	if d.Txn != nil {
		c.recordTransaction(call, d.Txn)
		return
	}
	op := check.Operation{
		Client: c.session, Op: d.Op, Call: int64(call), Return: int64(c.realTime()),
		Result: d.Result, Unknown: d.Outcome == clientcore.Ambiguous,
	}
	if !d.Op.Kind.IsQuery() {
		op.ID = check.UpdateID{Client: c.clientID, ReqNo: uint64(d.ID)}
	}
	*c.history = append(*c.history, op)
	if d.Outcome == clientcore.OK && !d.Op.Kind.IsQuery() {
		*c.acked = append(*c.acked, ackedUpdate{client: c.clientID, reqNo: uint64(d.ID), sn: d.Result.SN, volume: d.Volume})
	}
	if c.causal && d.Outcome == clientcore.Ambiguous && c.newSession != nil {
		c.core, c.clientID = c.newSession()
		clear(c.asked) // the old session's operations end with it
		c.session = int(c.clientID)
	}
}

// recordTransaction adds a GET-TRANSACTION's values to the history as
// reads of its keys in its session, twice over: every value then follows
// every other in the session's order, so the causal+ checker finds a
// value older than a write in the causal past of another (WriteCORead):
// the snapshot property.
func (c *client) recordTransaction(call wire.Time, t *clientcore.TxnResult) {
	c.transactions++
	m := int64(0)
	for range 2 {
		for i, key := range t.Keys {
			*c.history = append(*c.history, check.Operation{
				Client: c.session, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: int64(call) + m, Return: int64(call) + m + 1,
				Result: t.Results[i],
			})
			m += 2
		}
	}
}
