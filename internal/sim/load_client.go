package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/pb"
	"github.com/catena-kv/catena/internal/wire"
)

// A load run's closed-loop clients.

// completion is how a load client's request ended, for the record.
type completion struct {
	kind   uint8 // completedQuery...
	rounds int   // a GET-TRANSACTION's rounds of reads
}

// The kinds of completion.
const (
	completedQuery uint8 = iota
	completedUpdate
	completedTransaction
	completedContended // a GET-TRANSACTION that ended with clientcore.ErrContention
)

// loadClient is a closed-loop client: one request outstanding; the next
// leaves as soon as the previous is answered (or abandoned by the
// watchdog). Its requests go through the client core users run.
type loadClient struct {
	id             wire.NodeID
	opts           *LoadOptions
	core           *clientcore.Core
	rng            *rand.Rand // the requests
	updateFraction float64
	// keys, when set, draws the operations and keys of a YCSB workload
	// in place of updateFraction and a uniform choice.
	keys        *clientKeys
	site        string // the site prefix of the client's id
	consistency clientcore.Consistency
	record      func(now, latency wire.Time, c completion, site string)
	abandoned   *int

	sent    int       // requests started
	started wire.Time // when the outstanding request started
	waiting bool
	// update: the outstanding request is an update; sentUpdate: it has
	// left for the head (a causal update first waits for its
	// dependencies).
	update, sentUpdate bool
	// rmw: the outstanding request is a read-modify-write, reading
	// (update false) or writing its key.
	rmw bool
	// txn: the outstanding request is a GET-TRANSACTION.
	txn bool
	key string
}

// newLoadClient returns client i of a load run, at the site whose id
// prefix is site ("" without sites), attached to masters.
func newLoadClient(o *LoadOptions, i int, site string, masters []wire.NodeID, configs map[wire.VolumeID]wire.Config, keys *keyChooser,
	record func(now, latency wire.Time, c completion, site string), abandoned *int) (*loadClient, error) {
	var routing clientcore.Routing = clientcore.ChainRouting{}
	if o.Protocol == ProtocolPB || o.Protocol == ProtocolWeakPB {
		routing = pb.Routing{}
	}
	consistency := clientcore.Strong // on a causal volume the core routes by its metadata
	if o.Protocol == ProtocolWeakChain || o.Protocol == ProtocolWeakPB || o.Protocol == ProtocolCRAQ {
		consistency = clientcore.AnyMember // servers that answer from their own state, or clean keys
	}
	attemptTimeout := o.AttemptTimeout
	if attemptTimeout <= 0 {
		attemptTimeout = -1
	}
	initial := make([]wire.Config, 0, len(configs))
	for _, v := range slices.Sorted(maps.Keys(configs)) {
		initial = append(initial, configs[v])
	}
	var volumeOf func(key string) wire.VolumeID // nil: the core's key hash, as users' clients route
	if o.VolumeOf != nil {
		volumeOf = func(key string) wire.VolumeID { return o.VolumeOf(objectOf(key)) }
	}
	core, err := clientcore.New(clientcore.Options{
		Client: wire.ClientID(i + 1), Masters: masters, Configs: initial,
		VolumeOf: volumeOf,
		Routing:  routing,
		Rand:     rand.New(rand.NewPCG(o.Seed^0x5bd1e995, uint64(i+1))),
		// A closed-loop client of CR §5 waits for its answer (or its
		// watchdog) and retries only after an error reply, unless
		// AttemptTimeout says otherwise.
		AttemptTimeout: attemptTimeout, RetryBackoff: 50 * wire.Millisecond, RetryBackoffMax: 50 * wire.Millisecond,
		SkipDependencyWait: o.SkipDependencyWait,
		CausalReadsAtTail:  o.CausalReadsAtTail,
	})
	if err != nil {
		return nil, err
	}
	c := &loadClient{
		id: wire.NodeID(fmt.Sprintf("%sc%d", site, i+1)), opts: o, core: core, site: site,
		rng:         rand.New(rand.NewPCG(o.Seed, uint64(i+1))),
		consistency: consistency, record: record, abandoned: abandoned,
	}
	if keys != nil {
		c.keys = keys.forClient(int64(o.Seed ^ uint64(i+1)<<32))
	} else {
		c.updateFraction = o.UpdateFraction(i)
	}
	return c, nil
}

// next starts the client's next request, if it has one.
func (c *loadClient) next(now wire.Time) {
	if c.opts.RequestsPerClient > 0 && c.sent >= c.opts.RequestsPerClient {
		c.waiting = false
		return
	}
	c.sent++
	c.started = now
	var key string
	update := false
	c.rmw, c.txn = false, false
	if c.keys != nil {
		op, object := c.keys.next()
		if op == opTransaction {
			c.startTransaction(now, c.keys.transaction())
			return
		}
		key, update, c.rmw = objectKey(object), op == opUpdate || op == opInsert, op == opReadModifyWrite
	} else {
		key = objectKey(c.rng.IntN(c.opts.Objects))
		update = c.rng.Float64() < c.updateFraction
	}
	c.key = key
	c.start(now, update)
}

// start sends the outstanding request's read or write of c.key.
func (c *loadClient) start(now wire.Time, update bool) {
	op := wire.Op{Kind: wire.OpGet, Key: c.key}
	if update {
		op = wire.Op{Kind: wire.OpPut, Key: c.key, Value: fmt.Appendf(nil, "%s.%d", c.id, c.sent)}
	}
	c.update, c.sentUpdate = update, false
	c.waiting = true
	c.core.Start(now, op, c.call(now))
}

// startTransaction starts the outstanding request: a GET-TRANSACTION of
// the objects.
func (c *loadClient) startTransaction(now wire.Time, objects []int) {
	keys := make([]string, len(objects))
	for i, o := range objects {
		keys[i] = objectKey(o)
	}
	c.txn, c.update, c.sentUpdate, c.waiting = true, false, false, true
	c.core.StartTransaction(now, keys, c.call(now))
}

// call returns the options of a request started at now.
func (c *loadClient) call(now wire.Time) clientcore.CallOptions {
	call := clientcore.CallOptions{Consistency: c.consistency}
	if c.opts.Watchdog > 0 {
		call.Deadline = now + c.opts.Watchdog
	}
	return call
}

// Tick runs the watchdog and retries.
func (c *loadClient) Tick(now wire.Time) []wire.Envelope {
	if !c.waiting {
		return nil
	}
	c.core.Tick(now)
	return c.ready(now)
}

// Step handles replies.
func (c *loadClient) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	c.core.Step(now, from, m)
	return c.ready(now)
}

// ready counts what finished, starts the next request, and returns the
// messages to send.
func (c *loadClient) ready(now wire.Time) []wire.Envelope {
	rd := c.core.Ready()
	c.noteSent(rd.Messages)
	for len(rd.Done) > 0 {
		for _, d := range rd.Done {
			if d.Outcome == clientcore.OK && c.rmw && d.Op.Kind.IsQuery() {
				c.start(now, true) // the read of a read-modify-write: now its write
				continue
			}
			switch {
			case d.Outcome == clientcore.OK && c.txn:
				c.record(now, now-c.started, completion{kind: completedTransaction, rounds: d.Txn.Rounds}, c.site)
			case d.Outcome == clientcore.OK && d.Op.Kind.IsQuery():
				c.record(now, now-c.started, completion{kind: completedQuery}, c.site)
			case d.Outcome == clientcore.OK:
				c.record(now, now-c.started, completion{kind: completedUpdate}, c.site)
			case c.txn && errors.Is(d.Err, clientcore.ErrContention):
				// No two rounds of reads agreed: the transaction gave
				// up, as a user's would; the client moves on.
				c.record(now, now-c.started, completion{kind: completedContended, rounds: d.Attempts}, c.site)
			default:
				// Abandoned by the watchdog (CR §5.3), or its session was
				// lost: move on, with a fresh configuration.
				*c.abandoned++
				c.core.RequestConfig(now)
			}
			c.next(now)
		}
		more := c.core.Ready()
		c.noteSent(more.Messages)
		rd.Messages = append(rd.Messages, more.Messages...)
		rd.Done = more.Done
	}
	return rd.Messages
}

// noteSent notes whether the outstanding update has left for the head.
func (c *loadClient) noteSent(out []wire.Envelope) {
	for _, env := range out {
		if m, ok := env.Msg.(*wire.ClientRequest); ok && !m.Op.Kind.IsQuery() {
			c.sentUpdate = true
		}
	}
}

// outstanding returns the kind of the client's outstanding request
// (OutstandingQuery...), if it has one.
func (c *loadClient) outstanding() (int, bool) {
	switch {
	case !c.waiting:
		return 0, false
	case !c.update:
		return OutstandingQuery, true
	case !c.sentUpdate:
		return OutstandingDependencies, true
	}
	return OutstandingUpdate, true
}
