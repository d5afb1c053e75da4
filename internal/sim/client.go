package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// clientTimeouts are a simulated client's retry policy.
type clientTimeouts struct {
	attempt  wire.Time // resend a request unanswered this long
	backoff  wire.Time // wait after an error reply before retrying
	giveUp   wire.Time // report an operation's outcome unknown after this long
	inFlight int       // operations outstanding at once
}

// client is a simulated client: it issues random operations on a few keys,
// routes them by the configuration it learned from the master, retries
// with the same request number (exactly-once), and records the history.
type client struct {
	id       wire.NodeID
	clientID wire.ClientID
	masters  []wire.NodeID
	// volumes is the number of volumes keys hash to.
	volumes  int
	rng      *rand.Rand
	keys     []string
	timeouts clientTimeouts

	configs   map[wire.VolumeID]wire.Config
	nextReqNo uint64
	pending   map[uint64]*pendingOp
	// expectSession holds the volumes whose chain has answered one of this
	// client's updates: each volume keeps its own session table.
	expectSession map[wire.VolumeID]bool
	// issuing is false once the workload stops starting operations.
	issuing bool
	// script, when set, replaces random operations (final reads).
	script []wire.Op
	// readOnly clients only read: they keep using a tail until it fails
	// them, which is what exposes a removed tail still answering.
	readOnly bool
	// craq sends queries to a random member; a dirty key's query goes on
	// to the tail.
	craq bool

	history  *[]check.Operation
	acked    *[]ackedUpdate
	realTime func() wire.Time
	failure  func(string)
}

type pendingOp struct {
	reqNo     uint64
	op        wire.Op
	call      wire.Time
	sentAt    wire.Time
	retryAt   wire.Time // 0: not waiting to retry
	attempts  int
	startedAt wire.Time
	// toTail: a member reported the key dirty; ask the tail.
	toTail bool
}

// ackedUpdate is an update the client saw succeed, for the durability check.
type ackedUpdate struct {
	client wire.ClientID
	reqNo  uint64
	sn     wire.SN
	volume wire.VolumeID
}

func (c *client) ackedBelow() uint64 {
	low := c.nextReqNo
	for reqNo, p := range c.pending {
		if !p.op.Kind.IsQuery() && reqNo < low {
			low = reqNo
		}
	}
	return low
}

func (c *client) randomOp() wire.Op {
	key := c.keys[c.rng.IntN(len(c.keys))]
	value := []byte(fmt.Sprintf("%s.%d", c.id, c.nextReqNo))
	p := c.rng.IntN(100)
	if c.readOnly {
		p = 0
	}
	switch {
	case p < 40:
		return wire.Op{Kind: wire.OpGet, Key: key}
	case p < 65:
		return wire.Op{Kind: wire.OpPut, Key: key, Value: value}
	case p < 75:
		// Compare against a value some client may have written.
		expected := fmt.Appendf(nil, "c%d.%d", 1+c.rng.IntN(3), c.rng.IntN(int(c.nextReqNo)+1))
		return wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: expected, ExpectAbsent: c.rng.IntN(4) == 0, Value: value}
	case p < 85:
		return wire.Op{Kind: wire.OpIncrement, Key: key, Delta: int64(1 + c.rng.IntN(5))}
	case p < 95:
		return wire.Op{Kind: wire.OpAppend, Key: key, Value: []byte("+" + string(value))}
	default:
		return wire.Op{Kind: wire.OpDelete, Key: key}
	}
}

// Tick starts operations, resends unanswered ones and gives up on old ones.
func (c *client) Tick(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	if len(c.configs) < c.volumes {
		return c.askConfig()
	}
	for c.issuing && len(c.pending) < c.timeouts.inFlight {
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
		c.nextReqNo++
		p := &pendingOp{reqNo: c.nextReqNo, op: op, call: c.realTime(), startedAt: now}
		c.pending[p.reqNo] = p
		out = append(out, c.request(now, p))
	}
	refresh := false
	for _, reqNo := range slices.Sorted(maps.Keys(c.pending)) {
		p := c.pending[reqNo]
		switch {
		case now-p.startedAt >= c.timeouts.giveUp:
			c.finish(p, wire.Result{}, true)
		case p.retryAt != 0 && now >= p.retryAt, p.retryAt == 0 && now-p.sentAt >= c.timeouts.attempt:
			refresh = refresh || p.retryAt == 0
			out = append(out, c.request(now, p))
		}
	}
	if refresh {
		out = append(out, c.askConfig()...)
	}
	return out
}

func (c *client) adopt(cfg wire.Config) {
	if cur, ok := c.configs[cfg.Volume]; !ok || cfg.Epoch > cur.Epoch {
		c.configs[cfg.Volume] = cfg
	}
}

// askConfig asks every master member for the configuration; any member's
// is good enough to route by (servers correct an old one).
func (c *client) askConfig() []wire.Envelope {
	out := make([]wire.Envelope, len(c.masters))
	for i, m := range c.masters {
		out[i] = wire.Envelope{To: m, Msg: &wire.ConfigRequest{}}
	}
	return out
}

func (c *client) request(now wire.Time, p *pendingOp) wire.Envelope {
	p.sentAt, p.retryAt = now, 0
	p.attempts++
	v := placement.VolumeOf(p.op.Key, c.volumes)
	cfg := c.configs[v]
	to := cfg.Head()
	if p.op.Kind.IsQuery() {
		to = cfg.Tail()
		if c.craq && !p.toTail && len(cfg.Chain) > 0 {
			to = cfg.Chain[c.rng.IntN(len(cfg.Chain))]
		}
	}
	return wire.Envelope{To: to, Msg: &wire.ClientRequest{
		Volume: v, Epoch: cfg.Epoch, Client: c.clientID, ReqNo: p.reqNo,
		AckedBelow: c.ackedBelow(), ExpectSession: c.expectSession[v], Op: p.op,
	}}
}

func (c *client) finish(p *pendingOp, result wire.Result, unknown bool) {
	delete(c.pending, p.reqNo)
	if unknown && p.op.Kind.IsQuery() {
		return // a query that never answered changed nothing
	}
	*c.history = append(*c.history, check.Operation{
		Client: int(c.clientID), Op: p.op, Call: int64(p.call), Return: int64(c.realTime()),
		Result: result, Unknown: unknown,
	})
	if !unknown && !p.op.Kind.IsQuery() {
		c.expectSession[placement.VolumeOf(p.op.Key, c.volumes)] = true
		*c.acked = append(*c.acked, ackedUpdate{client: c.clientID, reqNo: p.reqNo, sn: result.SN, volume: placement.VolumeOf(p.op.Key, c.volumes)})
	}
}

// Step handles replies from servers and the master.
func (c *client) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	switch m := m.(type) {
	case *wire.ConfigReply:
		for _, cfg := range m.Configs {
			c.adopt(cfg)
		}
	case *wire.ClientReply:
		p := c.pending[m.ReqNo]
		if p == nil || m.Client != c.clientID {
			return nil // a duplicate reply
		}
		switch m.Err {
		case wire.ErrNone:
			c.finish(p, m.Result, false)
		case wire.ErrSessionExpired:
			c.finish(p, wire.Result{}, true)
		case wire.ErrBadRequest:
			c.failure(fmt.Sprintf("client %s: request %v refused as malformed", c.id, p.op))
			delete(c.pending, p.reqNo)
		case wire.ErrDirty:
			p.toTail = true
			return []wire.Envelope{c.request(now, p)}
		default:
			if m.Config != nil {
				c.adopt(*m.Config)
			}
			p.retryAt = now + c.timeouts.backoff
			if m.Config == nil {
				return c.askConfig()
			}
		}
	}
	return nil
}
