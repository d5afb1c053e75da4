// Package client is the Go client of Catena.
//
//	c, err := client.Dial(ctx, "127.0.0.1:7100")
//	defer c.Close()
//	err = c.Put(ctx, "greeting", []byte("hello"))
//	value, found, err := c.Get(ctx, "greeting")
//
// The client learns each chain's head and tail from the master, sends
// updates to the head and queries to the tail, and refreshes its
// configuration when a server says it is out of date. It retries a request
// with the same request number until it gets an answer, so an update is
// applied exactly once however often it is retried. When retries run out
// (the context ends) after an update may have reached the chain, the
// error is ErrAmbiguous: the update may or may not have been applied.
//
// A Client is safe for concurrent use; concurrent operations are
// pipelined.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Errors returned by operations. Test with errors.Is.
var (
	// ErrAmbiguous: an update was sent but no answer came before the
	// context ended; it may or may not have been applied.
	ErrAmbiguous = errors.New("catena: outcome unknown (the update may or may not have been applied)")
	// ErrUnavailable: no server could serve the request before the
	// context ended; nothing was applied.
	ErrUnavailable = errors.New("catena: unavailable")
	// ErrInvalid: the request was refused as malformed (empty or oversized
	// key, oversized value); nothing was applied.
	ErrInvalid = errors.New("catena: invalid request")
	// ErrNotInteger: Increment found a value that is not a decimal
	// integer; nothing changed.
	ErrNotInteger = errors.New("catena: value is not an integer")
	// ErrOverflow: Increment found, or would make, an integer outside
	// int64; nothing changed.
	ErrOverflow = errors.New("catena: integer overflow")
	// ErrValueTooLarge: Append would make the value larger than the limit;
	// nothing changed.
	ErrValueTooLarge = errors.New("catena: value too large")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("catena: client closed")
)

// Options tune a client. Zero fields take the defaults.
type Options struct {
	// RequestTimeout bounds an operation whose context has no deadline.
	RequestTimeout time.Duration
	// AttemptTimeout is how long one attempt waits before the client
	// refreshes its configuration and retries.
	AttemptTimeout time.Duration
	// Logger receives transport diagnostics; nil discards them.
	Logger *slog.Logger
	// ReadFromAnyMember sends each query to a random member of the key's
	// chain instead of its tail (CRAQ's apportioned queries). A member
	// answers when every update to the key it applied is known processed
	// by the tail, and otherwise sends the query on to the tail; reads
	// stay linearizable and spread over the chain.
	ReadFromAnyMember bool
}

const (
	defaultRequestTimeout = 10 * time.Second
	defaultAttemptTimeout = 500 * time.Millisecond
	retryBackoff          = 20 * time.Millisecond
)

// Client is a connection to a Catena cluster.
type Client struct {
	opts Options
	tr   *transport.Transport
	id   wire.ClientID
	done chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// masters holds the master members known so far.
	masters []wire.NodeID
	// configs holds each volume's configuration; keys hash to volumes
	// (placement.VolumeOf) over len(configs) volumes.
	configs       map[wire.VolumeID]wire.Config
	configWaiters []chan struct{}
	statusWaiters []chan statusFrom
	nextReqNo     uint64
	pending       map[uint64]chan *wire.ClientReply
	// unansweredUpdates holds the request numbers of updates without a
	// reply; the lowest is the AckedBelow the chain may prune to.
	unansweredUpdates map[uint64]bool
	// expectSession holds the volumes whose chain answered one of this
	// client's updates (each volume keeps its own session table).
	expectSession map[wire.VolumeID]bool
	closed        bool
}

// Dial connects to the cluster whose master (or one of whose master
// members, or a comma-separated list of them) listens at masterAddr, and
// waits until it has learned the configuration. It learns the other
// master members from the one it reaches.
func Dial(ctx context.Context, masterAddr string, opts ...Options) (*Client, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = defaultRequestTimeout
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = defaultAttemptTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var idBytes [8]byte
	rand.Read(idBytes[:])
	self := wire.NodeID(transport.ClientPrefix + hex.EncodeToString(idBytes[:]))
	tr, err := transport.New(self, "", o.Logger)
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts: o, tr: tr,
		id:      wire.ClientID(uint64(idBytes[0])<<56 | uint64(idBytes[1])<<48 | uint64(idBytes[2])<<40 | uint64(idBytes[3])<<32 | uint64(idBytes[4])<<24 | uint64(idBytes[5])<<16 | uint64(idBytes[6])<<8 | uint64(idBytes[7])),
		done:    make(chan struct{}),
		pending: map[uint64]chan *wire.ClientReply{}, unansweredUpdates: map[uint64]bool{},
		configs: map[wire.VolumeID]wire.Config{}, expectSession: map[wire.VolumeID]bool{},
	}
	for _, a := range strings.Split(masterAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.masters = append(c.masters, wire.NodeID(a))
		}
	}
	c.wg.Go(c.receive)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.RequestTimeout)
		defer cancel()
	}
	for {
		if c.volumeCount() > 0 {
			return c, nil
		}
		if err := c.refreshConfig(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("catena: no configuration from master %s: %w", masterAddr, err)
		}
	}
}

// Close releases the client's connections. Operations in progress fail
// with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.tr.Close()
	c.wg.Wait()
	return nil
}

func (c *Client) receive() {
	for {
		select {
		case <-c.done:
			return
		case d := <-c.tr.Inbox():
			c.handle(d.From, d.Msg)
		}
	}
}

func (c *Client) handle(from wire.NodeID, m wire.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m := m.(type) {
	case *wire.ClientReply:
		if ch := c.pending[m.ReqNo]; ch != nil && m.Client == c.id {
			select {
			case ch <- m:
			default:
			}
		}
	case *wire.ConfigReply:
		for _, cfg := range m.Configs {
			c.adoptLocked(cfg)
		}
		for _, id := range m.Masters {
			if !slices.Contains(c.masters, id) {
				c.masters = append(c.masters, id)
			}
		}
		for _, w := range c.configWaiters {
			close(w)
		}
		c.configWaiters = nil
	case *wire.StatusReply:
		for _, cfg := range m.Configs {
			c.adoptLocked(cfg)
		}
		for _, w := range c.statusWaiters {
			select {
			case w <- statusFrom{from, m}:
			default:
			}
		}
	}
}

func (c *Client) adoptLocked(cfg wire.Config) {
	if cur, ok := c.configs[cfg.Volume]; !ok || cfg.Epoch > cur.Epoch {
		c.configs[cfg.Volume] = cfg.Clone()
		// Servers answer a client only over a connection it opened, and
		// the tail answers updates sent to the head: open them early.
		for _, id := range cfg.Chain {
			c.tr.Connect(id)
		}
		// Updates go to the head but the tail answers them, over a
		// connection this client opened: open it before the first update.
		c.tr.Connect(cfg.Head())
		c.tr.Connect(cfg.Tail())
	}
}

// route returns the volume a key belongs to and its configuration.
func (c *Client) route(key string) (wire.VolumeID, wire.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := placement.VolumeOf(key, max(len(c.configs), 1))
	return v, c.configs[v]
}

func (c *Client) volumeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.configs)
}

// refreshConfig asks the master for the configuration and waits for the
// answer (or one attempt timeout).
func (c *Client) refreshConfig(ctx context.Context) error {
	w := make(chan struct{})
	c.mu.Lock()
	c.configWaiters = append(c.configWaiters, w)
	c.mu.Unlock()
	c.mu.Lock()
	masters := slices.Clone(c.masters)
	c.mu.Unlock()
	for _, m := range masters {
		c.tr.Send(wire.Envelope{To: m, Msg: &wire.ConfigRequest{}})
	}
	select {
	case <-w:
		return nil
	case <-time.After(c.opts.AttemptTimeout):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

type statusFrom struct {
	from  wire.NodeID
	reply *wire.StatusReply
}

// Status returns the master's view of the cluster: the leader's, or if
// no leader answers within an attempt, any member's.
func (c *Client) Status(ctx context.Context) (*wire.StatusReply, error) {
	w := make(chan statusFrom, 16)
	c.mu.Lock()
	c.statusWaiters = append(c.statusWaiters, w)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.statusWaiters = slices.DeleteFunc(c.statusWaiters, func(x chan statusFrom) bool { return x == w })
		c.mu.Unlock()
	}()
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var any *wire.StatusReply
	for {
		c.mu.Lock()
		masters := slices.Clone(c.masters)
		c.mu.Unlock()
		for _, m := range masters {
			c.tr.Send(wire.Envelope{To: m, Msg: &wire.StatusRequest{}})
		}
		timeout := time.After(c.opts.AttemptTimeout)
	wait:
		for {
			select {
			case s := <-w:
				if s.reply.Leader == s.from {
					return s.reply, nil
				}
				any = s.reply
			case <-timeout:
				if any != nil {
					return any, nil
				}
				break wait
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: master did not answer: %w", ErrUnavailable, ctx.Err())
			case <-c.done:
				return nil, ErrClosed
			}
		}
	}
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		// Bounded already: a derived context would only cost an
		// allocation and a registration under the parent's lock, which
		// every concurrent operation on the same context contends for.
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// do executes one operation with retries and returns its result.
func (c *Client) do(ctx context.Context, op wire.Op) (wire.Result, error) {
	if err := kv.Validate(op); err != nil {
		return wire.Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	replies := make(chan *wire.ClientReply, 4)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return wire.Result{}, ErrClosed
	}
	c.nextReqNo++
	reqNo := c.nextReqNo
	c.pending[reqNo] = replies
	isUpdate := !op.Kind.IsQuery()
	if isUpdate {
		c.unansweredUpdates[reqNo] = true
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, reqNo)
		c.mu.Unlock()
	}()

	if err := ctx.Err(); err != nil {
		c.forget(reqNo)
		return wire.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	sent := false
	// toTail: a member found the key dirty (or is not a member): ask the
	// tail from now on.
	toTail := false
	for {
		v, cfg := c.route(op.Key)
		target := cfg.Head()
		if !isUpdate {
			target = cfg.Tail()
			if c.opts.ReadFromAnyMember && !toTail && len(cfg.Chain) > 0 {
				target = cfg.Chain[mrand.IntN(len(cfg.Chain))]
			}
		}
		req := c.request(reqNo, v, cfg.Epoch, op)
		c.tr.Send(wire.Envelope{To: target, Msg: req})
		sent = true
		timer := time.NewTimer(c.opts.AttemptTimeout)
		select {
		case reply := <-replies:
			timer.Stop()
			result, err, retry := c.interpret(reply, isUpdate, reqNo)
			if !retry {
				return result, err
			}
			if reply.Err == wire.ErrDirty || reply.Err == wire.ErrNotTail {
				if !toTail && reply.Err == wire.ErrDirty {
					toTail = true
					continue // no backoff: the tail answers at once
				}
				toTail = true
			}
			if reply.Config == nil {
				c.refreshConfig(ctx)
			}
			if !sleep(ctx, retryBackoff) {
				return wire.Result{}, c.gaveUp(ctx, isUpdate, sent, reqNo)
			}
		case <-timer.C:
			c.refreshConfig(ctx)
		case <-ctx.Done():
			timer.Stop()
			return wire.Result{}, c.gaveUp(ctx, isUpdate, sent, reqNo)
		case <-c.done:
			timer.Stop()
			return wire.Result{}, ErrClosed
		}
	}
}

func (c *Client) request(reqNo uint64, v wire.VolumeID, epoch wire.Epoch, op wire.Op) *wire.ClientRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	ackedBelow := c.nextReqNo + 1
	for n := range c.unansweredUpdates {
		ackedBelow = min(ackedBelow, n)
	}
	return &wire.ClientRequest{
		Volume: v, Epoch: epoch, Client: c.id, ReqNo: reqNo,
		AckedBelow: ackedBelow, ExpectSession: c.expectSession[v], Op: op,
	}
}

// interpret turns a reply into a result, an error, or a retry.
func (c *Client) interpret(reply *wire.ClientReply, isUpdate bool, reqNo uint64) (wire.Result, error, bool) {
	c.mu.Lock()
	if reply.Config != nil {
		c.adoptLocked(*reply.Config)
	}
	c.mu.Unlock()
	switch reply.Err {
	case wire.ErrNone:
		if isUpdate {
			c.mu.Lock()
			delete(c.unansweredUpdates, reqNo)
			c.expectSession[reply.Volume] = true
			c.mu.Unlock()
		}
		switch reply.Result.Status {
		case wire.StatusNotInteger:
			return reply.Result, ErrNotInteger, false
		case wire.StatusValueTooLarge:
			return reply.Result, ErrValueTooLarge, false
		case wire.StatusOverflow:
			return reply.Result, ErrOverflow, false
		}
		return reply.Result, nil, false
	case wire.ErrSessionExpired:
		c.forget(reqNo)
		return wire.Result{}, fmt.Errorf("%w: session expired", ErrAmbiguous), false
	case wire.ErrBadRequest:
		c.forget(reqNo)
		return wire.Result{}, fmt.Errorf("%w: refused by the server", ErrInvalid), false
	}
	return wire.Result{}, nil, true
}

func (c *Client) forget(reqNo uint64) {
	c.mu.Lock()
	delete(c.unansweredUpdates, reqNo)
	c.mu.Unlock()
}

// gaveUp is the error for an operation whose context ended.
//
// The client will not retry it, so the chain need not keep its outcome:
// it stops holding AckedBelow back.
func (c *Client) gaveUp(ctx context.Context, isUpdate, sent bool, reqNo uint64) error {
	c.forget(reqNo)
	if isUpdate && sent {
		return fmt.Errorf("%w: %w", ErrAmbiguous, ctx.Err())
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Get returns the value of key and whether it exists.
func (c *Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpGet, Key: key})
	return r.Value, r.Found, err
}

// Put sets key to value.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	_, err := c.do(ctx, wire.Op{Kind: wire.OpPut, Key: key, Value: value})
	return err
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpDelete, Key: key})
	return r.Found, err
}

// CompareAndSet sets key to value if its current value is expected (or,
// with expected nil, if the key is absent). It reports whether it swapped
// and, when it did not, the current value and whether the key exists.
func (c *Client) CompareAndSet(ctx context.Context, key string, expected, value []byte) (swapped bool, current []byte, found bool, err error) {
	op := wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: expected, ExpectAbsent: expected == nil, Value: value}
	r, err := c.do(ctx, op)
	if err != nil {
		return false, nil, false, err
	}
	if r.Status == wire.StatusCompareFailed {
		return false, r.Value, r.Found, nil
	}
	return true, nil, r.Found, nil
}

// Increment adds delta to the decimal integer stored at key (absent
// counts as 0) and returns the new value.
func (c *Client) Increment(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpIncrement, Key: key, Delta: delta})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(r.Value), 10, 64)
}

// Append appends suffix to the value at key (absent counts as empty) and
// returns the new value.
func (c *Client) Append(ctx context.Context, key string, suffix []byte) ([]byte, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpAppend, Key: key, Value: suffix})
	return r.Value, err
}
