// Package client is the Go client of Catena.
//
//	c, err := client.Dial(ctx, "127.0.0.1:7100")
//	defer c.Close()
//	err = c.Put(ctx, "greeting", []byte("hello"))
//	value, found, err := c.Get(ctx, "greeting")
//	value, found, err = c.Get(ctx, "greeting", client.AnyMember) // CRAQ: any chain member answers
//
// The client learns each chain's configuration from the master, sends
// updates to the head and reads to the tail (or, per call, to any
// member), and refreshes its configuration when a server says it is out
// of date. It retries a request with the same request number until it
// gets an answer, so an update is applied exactly once however often it
// is retried. When the context ends before an update's outcome is known,
// the error is ErrAmbiguous: the update may or may not have been applied.
//
// All of that logic is the client core (internal/clientcore), the state
// machine the simulator checks under faults; this package gives it a
// goroutine, sockets and a clock. A Client is safe for concurrent use;
// concurrent operations are pipelined.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Errors returned by operations. Test with errors.Is.
var (
	// ErrAmbiguous: an update was sent, and may have been admitted by a
	// head, but its outcome was not known when the context ended (or
	// Close ran); it may or may not have been applied. The rule, for
	// every path: docs/client.md#outcomes.
	ErrAmbiguous = errors.New("catena: outcome unknown (the update may or may not have been applied)")
	// ErrUnavailable: no server could serve the request before the
	// context ended; nothing was applied. An update fails so only when
	// it was never sent (it waited for a route, its dependencies, the
	// exactly-once window or a moved session's past).
	ErrUnavailable = errors.New("catena: unavailable")
	// ErrInvalid: the request was refused as malformed (empty or oversized
	// key, oversized value, a bad address or option); nothing was applied.
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
	// ErrWrongType: the key holds a value of another type than the
	// operation works on (a hash's operation on a string, or a string's
	// on a hash; Redis's WRONGTYPE): nothing changed.
	ErrWrongType = errors.New("catena: the key holds the wrong kind of value")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("catena: client closed")
	// ErrDenied: the cluster has users (authorization is on) and the
	// operation's user may not read, or write, the key: nothing was
	// applied. An administrator grants it with catena role grant.
	ErrDenied = errors.New("catena: permission denied")
	// ErrUnauthenticated: the cluster has users and the operation's user
	// is not one of them (the client's certificate names no user, or the
	// user was deleted): nothing was applied.
	ErrUnauthenticated = errors.New("catena: not authenticated")
	// ErrInFlightLimit: a server refused the request because the
	// client's connection to it had as many requests waiting there as it
	// allows one (catena server -client-inflight-max); nothing was
	// applied (the error also matches ErrUnavailable).
	ErrInFlightLimit = errors.New("catena: too many requests in flight on one connection")
	// ErrTooManySites: an update asked (WithSites) for more sites than
	// replicate its keyspace; the head refused it and nothing was
	// applied. The error also matches ErrInvalid and names the sites.
	ErrTooManySites = clientcore.ErrTooManySites
	// ErrKeyspaceMissing: the key's keyspace is hierarchical and so many
	// of the sites it names have not created it that none can serve its
	// keys; the error names them, nothing was applied (it also matches
	// ErrUnavailable). Create the keyspace at those sites.
	ErrKeyspaceMissing = clientcore.ErrKeyspaceMissing
)

// Consistency says which replicas may answer a read. It is a ReadOption:
// pass it to Get to choose per call; Options.Consistency sets the default.
type Consistency uint8

const (
	// Strong reads are answered by the chain's tail: linearizable (CR §2).
	Strong Consistency = Consistency(clientcore.Strong)
	// AnyMember reads go to a random member of the key's chain (CRAQ). A
	// member answers when every update to the key it applied is known
	// processed by the tail, and otherwise the read goes on to the tail:
	// still linearizable, and spread over the chain.
	AnyMember Consistency = Consistency(clientcore.AnyMember)
)

func (c Consistency) String() string { return clientcore.Consistency(c).String() }

// ReadOption tunes one read. Consistency is one.
type ReadOption interface{ applyRead(*readOptions) }

type readOptions struct{ consistency Consistency }

func (c Consistency) applyRead(o *readOptions) { o.consistency = c }

// Options tune a client. Zero fields take the defaults.
type Options struct {
	// RequestTimeout bounds an operation whose context has no deadline
	// (default 10 s).
	RequestTimeout time.Duration
	// AttemptTimeout is how long one attempt waits for an answer before
	// the client resends it and refreshes its configuration (default
	// 500 ms).
	AttemptTimeout time.Duration
	// Consistency is the reads' default (default Strong).
	Consistency Consistency
	// Logger receives transport diagnostics; nil discards them.
	Logger *slog.Logger
	// TLS names the client's certificate files: with them every link to
	// the cluster is mutual TLS 1.3, as a cluster started with TLS
	// requires (catena dev does by default). Zero: plaintext.
	TLS TLSFiles
	// After is the causal past of a session that moves here from a client
	// of another site (Client.CausalPast there): this client waits, before
	// its first operation, until all of it is stable at its site.
	After CausalPast
}

// TLSFiles names PEM files: the cluster CA's certificate, and the
// client's certificate (issued by that CA, with the client or proxy role:
// catena certs) and its key. Certificates are read again when the files
// change.
type TLSFiles struct {
	CA, Cert, Key string
}

// IsZero reports whether no file is named.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

const defaultRequestTimeout = 10 * time.Second

// Client is a connection to a Catena cluster.
type Client struct {
	opts  Options
	tr    *transport.Transport
	start time.Time
	done  chan struct{}
	wg    sync.WaitGroup
	// kick wakes the loop to re-arm its timer for an earlier time.
	kick chan struct{}

	mu   sync.Mutex
	core *clientcore.Core
	// waiters holds how each unfinished operation's caller hears of its
	// end: the channel it waits on, or the callback Start was given.
	waiters map[clientcore.OpID]waiter
	// configured is closed when the core first knows the configurations.
	configured    chan struct{}
	statusWaiters []chan statusFrom
	// keyspaceWaiters hear the master's KeyspaceReplies.
	keyspaceWaiters []chan keyspaceFrom
	// authWaiters hear the master's AuthReplies.
	authWaiters []chan *wire.AuthReply
	// versionWaiters hear the master members' VersionReplies.
	versionWaiters []chan versionFrom
	// armed is when the loop's timer fires; -1: not armed.
	armed  wire.Time
	closed bool
	// master is the address Dial was given; sites names this client's
	// site and the others, from the last status a master sent (nil:
	// none yet), for the errors of a session move.
	master string
	sites  *wire.StatusReply
}

// Dial connects to the cluster whose master (or one of whose master
// members, or a comma-separated list of them) listens at masterAddr, and
// waits until it has learned the configuration. It learns the other
// master members from the one it reaches. It fails at once on a
// malformed address, and as soon as every address given refuses the
// connection or turns out not to be a Catena master.
func Dial(ctx context.Context, masterAddr string, opts ...Options) (*Client, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = defaultRequestTimeout
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = time.Duration(clientcore.DefaultAttemptTimeout)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if !clientcore.Consistency(o.Consistency).Valid() {
		return nil, fmt.Errorf("%w: unknown consistency %d", ErrInvalid, o.Consistency)
	}
	masters, err := parseMasters(masterAddr)
	if err != nil {
		return nil, err
	}
	var seed [24]byte
	rand.Read(seed[:])
	id := wire.ClientID(binary.LittleEndian.Uint64(seed[:8]))
	core, err := clientcore.New(clientcore.Options{
		Client: id, Masters: masters,
		Rand:           mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[8:16]), binary.LittleEndian.Uint64(seed[16:]))),
		AttemptTimeout: wire.Time(o.AttemptTimeout),
		After:          o.After.deps, AfterTS: o.After.ts,
	})
	if err != nil {
		return nil, err
	}
	self := wire.NodeID(transport.ClientPrefix + strconv.FormatUint(uint64(id), 16))
	var topts []transport.Option
	if !o.TLS.IsZero() {
		m, err := security.Load(security.Files(o.TLS), o.Logger)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS: %w", ErrInvalid, err)
		}
		topts = append(topts, transport.WithTLS(m))
	}
	tr, err := transport.New(self, "", o.Logger, topts...)
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts: o, tr: tr, start: time.Now(), done: make(chan struct{}), kick: make(chan struct{}, 1),
		core: core, waiters: map[clientcore.OpID]waiter{}, configured: make(chan struct{}),
		armed: -1, master: masterAddr,
	}
	c.wg.Go(c.loop)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.RequestTimeout)
		defer cancel()
	}
	if err := c.awaitConfiguration(ctx, masterAddr, masters); err != nil {
		c.Close()
		return nil, err
	}
	if len(o.After.deps) > 0 {
		c.learnSites()
	}
	return c, nil
}

// parseMasters splits a comma-separated list of host:port addresses.
func parseMasters(list string) ([]wire.NodeID, error) {
	var out []wire.NodeID
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err == nil && host == "" {
			err = errors.New("missing host")
		}
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
				err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: bad master address %q (want host:port): %v", ErrInvalid, a, err)
		}
		out = append(out, wire.NodeID(a))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no master address given", ErrInvalid)
	}
	return out, nil
}

// awaitConfiguration asks the masters for the configuration until one
// answers, and fails early when none can: every address refused the
// connection, or is a Catena server rather than a master.
func (c *Client) awaitConfiguration(ctx context.Context, masterAddr string, given []wire.NodeID) error {
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	var resend time.Time
	for {
		if now := time.Now(); now.After(resend) {
			resend = now.Add(c.opts.AttemptTimeout)
			c.withCore(func(now wire.Time) { c.core.RequestConfig(now) })
		}
		select {
		case <-c.configured:
			return nil
		case <-ctx.Done():
			err := fmt.Errorf("%w: no configuration from master %s: %w", ErrUnavailable, masterAddr, ctx.Err())
			if why := c.whyNoMaster(given, false); why != nil {
				err = fmt.Errorf("%w: %w", err, why)
			}
			return err
		case <-poll.C:
			if why := c.whyNoMaster(given, true); why != nil {
				return fmt.Errorf("%w: no master at %s: %w", ErrUnavailable, masterAddr, why)
			}
		}
	}
}

// whyNoMaster explains why the given master addresses have not answered:
// with all set, only when every one of them failed for a known reason
// (nil otherwise). The transport's reasons stay in the error's chain.
func (c *Client) whyNoMaster(given []wire.NodeID, all bool) error {
	c.mu.Lock()
	notMaster := maps.Clone(c.core.NotMaster())
	c.mu.Unlock()
	var reasons reasonList
	for _, m := range given {
		switch named, ok := notMaster[m]; {
		case ok:
			reasons = append(reasons, fmt.Errorf("%s is a Catena server, not a master (its masters: %s)", m, joinIDs(named)))
		case c.tr.Unreachable(m) != nil:
			reasons = append(reasons, fmt.Errorf("cannot reach %s: %w", m, c.tr.Unreachable(m)))
		case !all:
			reasons = append(reasons, fmt.Errorf("%s accepted the connection but did not answer", m))
		default:
			return nil // may still answer
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return reasons
}

// reasonList is several reasons, one per master address, printed
// separated by semicolons; errors.Is and errors.As look into each.
type reasonList []error

func (r reasonList) Error() string {
	texts := make([]string, len(r))
	for i, err := range r {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

func (r reasonList) Unwrap() []error { return r }

func joinIDs(ids []wire.NodeID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ",")
}

// Close releases the client's connections. Operations in progress fail
// with ErrClosed, by the rule of every other give-up: an update that was
// sent also matches ErrAmbiguous, one that was not ErrUnavailable.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	// The core ends each operation as Ambiguous or Unavailable, with
	// ErrClosed as the cause, before its caller hears of the close.
	now := c.now()
	for id := range c.waiters {
		c.core.Cancel(now, id, ErrClosed)
	}
	rd := c.core.Ready()
	var callbacks []func()
	for _, d := range rd.Done {
		w := c.waiters[d.ID]
		if w.ch != nil {
			w.ch <- d // (buffered, one answer per operation)
		}
		if w.done != nil {
			callbacks = append(callbacks, func() { c.deliver(w, d, true) })
		}
		delete(c.waiters, d.ID)
	}
	close(c.done)
	c.mu.Unlock()
	for _, f := range callbacks {
		f()
	}
	c.tr.Close()
	c.wg.Wait()
	return nil
}

// now is the core's clock: time since the client started.
func (c *Client) now() wire.Time { return wire.Time(time.Since(c.start)) }

// at converts a wall-clock deadline to the core's clock.
func (c *Client) at(t time.Time) wire.Time { return max(1, wire.Time(t.Sub(c.start))) }

// withCore runs f on the core under the lock, then carries out what the
// core asked for: connections to open, messages to send, operations to
// hand back to their callers, and an earlier timer.
func (c *Client) withCore(f func(now wire.Time)) {
	c.mu.Lock()
	f(c.now())
	rd := c.core.Ready()
	finished := make([]waiter, len(rd.Done))
	for i, d := range rd.Done {
		finished[i] = c.waiters[d.ID]
		delete(c.waiters, d.ID)
	}
	if len(rd.Configs) > 0 && c.core.Volumes() > 0 {
		select {
		case <-c.configured:
		default:
			close(c.configured)
		}
	}
	if rd.Timer != 0 && (c.armed < 0 || rd.Timer < c.armed) {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	for _, cfg := range rd.Configs {
		// Servers answer a client only over a connection it opened, and
		// the tail answers updates sent to the head: open them early.
		for _, id := range cfg.Chain {
			c.tr.Connect(id)
		}
	}
	for _, env := range rd.Messages {
		c.tr.Send(env)
	}
	for i, d := range rd.Done {
		switch w := finished[i]; {
		case w.ch != nil:
			w.ch <- d
		case w.done != nil:
			c.deliver(w, d, false)
		}
	}
}

// loop feeds the core what arrives and ticks it when its timer is due.
func (c *Client) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	inbox := c.tr.Inbox()
	for {
		c.mu.Lock()
		at, ok := c.core.NextTimer()
		c.armed = -1
		if ok {
			c.armed = at
		}
		c.mu.Unlock()
		var fire <-chan time.Time
		if ok {
			timer.Reset(time.Duration(at - c.now()))
			fire = timer.C
		}
		select {
		case <-c.done:
			timer.Stop()
			return
		case d := <-inbox:
			c.receive(d, inbox)
		case <-fire:
			c.withCore(func(now wire.Time) { c.core.Tick(now) })
		case <-c.kick:
		}
		timer.Stop()
	}
}

// receive hands a delivery, and every one already waiting, to the core.
func (c *Client) receive(first transport.Delivery, inbox <-chan transport.Delivery) {
	var statuses []statusFrom
	var keyspaces []keyspaceFrom
	var auths []*wire.AuthReply
	var versions []versionFrom
	c.withCore(func(now wire.Time) {
		d := first
		for {
			c.core.Step(now, d.From, d.Msg)
			switch m := d.Msg.(type) {
			case *wire.StatusReply:
				statuses = append(statuses, statusFrom{d.From, m})
				c.sites = m
			case *wire.KeyspaceReply:
				keyspaces = append(keyspaces, keyspaceFrom{d.From, m})
			case *wire.AuthReply:
				auths = append(auths, m)
			case *wire.VersionReply:
				versions = append(versions, versionFrom{d.From, m})
			}
			select {
			case d = <-inbox:
				continue
			default:
			}
			return
		}
	})
	if len(statuses) == 0 && len(keyspaces) == 0 && len(auths) == 0 && len(versions) == 0 {
		return
	}
	c.mu.Lock()
	waiters := c.statusWaiters
	kwaiters := c.keyspaceWaiters
	awaiters := c.authWaiters
	vwaiters := c.versionWaiters
	c.mu.Unlock()
	for _, v := range versions {
		for _, w := range vwaiters {
			select {
			case w <- v:
			default:
			}
		}
	}
	for _, a := range auths {
		for _, w := range awaiters {
			select {
			case w <- a:
			default:
			}
		}
	}
	for _, k := range keyspaces {
		for _, w := range kwaiters {
			select {
			case w <- k:
			default:
			}
		}
	}
	for _, s := range statuses {
		for _, w := range waiters {
			select {
			case w <- s:
			default:
			}
		}
	}
}

// do executes one operation and returns its result.
func (c *Client) do(ctx context.Context, op wire.Op, consistency Consistency) (wire.Result, error) {
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		call.Consistency, call.User, call.Sites = clientcore.Consistency(consistency), userOf(ctx), sitesOf(ctx)
		return c.core.Start(now, op, call)
	})
	if err != nil {
		return wire.Result{}, err
	}
	return result(d)
}

// run starts what start starts on the core, with ctx's deadline (or
// Options.RequestTimeout), and waits for it to finish: cancelled on the
// core when ctx ends first. Its error is ErrUnavailable if ctx had ended
// before, ErrClosed if the client closes first, and then ErrAmbiguous
// instead for an update already sent (Close has the core end it so);
// otherwise the Done, with a session move's error explained.
func (c *Client) run(ctx context.Context, start func(now wire.Time, call clientcore.CallOptions) clientcore.OpID) (clientcore.Done, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.opts.RequestTimeout)
	}
	if err := ctx.Err(); err != nil {
		return clientcore.Done{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	ch := make(chan clientcore.Done, 1)
	var id clientcore.OpID
	closed := false
	c.withCore(func(now wire.Time) {
		if closed = c.closed; closed {
			return
		}
		id = start(now, clientcore.CallOptions{Deadline: c.at(deadline)})
		c.waiters[id] = waiter{ch: ch}
	})
	if closed {
		return clientcore.Done{}, ErrClosed
	}
	select {
	case d := <-ch:
		return c.explainMove(d), nil
	case <-ctx.Done():
		c.withCore(func(now wire.Time) { c.core.Cancel(now, id, ctx.Err()) })
		select {
		case d := <-ch:
			return c.explainMove(d), nil
		case <-c.done:
			return closedDone(ch)
		}
	case <-c.done:
		return closedDone(ch)
	}
}

// closedDone is how an operation the client's Close ended finishes: with
// the outcome Close had the core give it if that is Ambiguous (an update
// already sent), else ErrClosed.
func closedDone(ch chan clientcore.Done) (clientcore.Done, error) {
	select {
	case d := <-ch:
		if d.Outcome == clientcore.Ambiguous {
			return d, nil
		}
	default:
	}
	return clientcore.Done{}, ErrClosed
}

// result turns a finished operation into what the API returns.
func result(d clientcore.Done) (wire.Result, error) {
	cause := d.Err
	if errors.Is(cause, clientcore.ErrDeadline) {
		cause = context.DeadlineExceeded
	}
	switch d.Outcome {
	case clientcore.OK:
		switch d.Result.Status {
		case wire.StatusNotInteger:
			return d.Result, ErrNotInteger
		case wire.StatusValueTooLarge:
			return d.Result, ErrValueTooLarge
		case wire.StatusOverflow:
			return d.Result, ErrOverflow
		case wire.StatusWrongType:
			return d.Result, ErrWrongType
		}
		return d.Result, nil
	case clientcore.Ambiguous:
		return wire.Result{}, fmt.Errorf("%w: %w", ErrAmbiguous, cause)
	case clientcore.Invalid:
		return wire.Result{}, fmt.Errorf("%w: %w", ErrInvalid, cause)
	case clientcore.Refused:
		return wire.Result{}, refusedError(cause)
	}
	if errors.Is(cause, clientcore.ErrInFlightLimit) {
		return wire.Result{}, fmt.Errorf("%w (%w): %w", ErrInFlightLimit, ErrUnavailable, cause)
	}
	return wire.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// refusedError is the error of an operation authorization refused.
func refusedError(cause error) error {
	if errors.Is(cause, clientcore.ErrUnauthenticated) {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, cause)
	}
	return fmt.Errorf("%w: %w", ErrDenied, cause)
}

// userKey is the context key of WithUser.
type userKey struct{}

// WithUser returns a context whose operations run for user: a proxy
// (whose certificate has the proxy role) sends them for the user its
// client authenticated as, and the servers check that user's
// permissions. For any other certificate the servers ignore it and check
// the certificate's own user.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// sitesKey is the context key of WithSites.
type sitesKey struct{}

// WithSites returns a context whose updates of keyspaces replicated by
// several sites return only once n sites (this one included) hold them
// stable, so that losing every server of this site loses none of them.
// An update asking for more sites than replicate its keyspace (any n
// above 1 in a keyspace of one site) fails with ErrTooManySites, nothing
// applied. Without it an update returns once this site's k replicas hold
// it. If the context's deadline passes meanwhile, the update fails with
// ErrAmbiguous: it is applied here, and perhaps not yet at the other
// sites.
func WithSites(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, sitesKey{}, n)
}

// sitesOf returns the sites WithSites set (0 for none).
func sitesOf(ctx context.Context) int {
	n, _ := ctx.Value(sitesKey{}).(int)
	return n
}

// userOf returns the user WithUser set ("" for none).
func userOf(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// Get returns the value of key and whether it exists. An existing empty
// value is a non-nil empty slice. Options choose the read's consistency
// (default Options.Consistency).
func (c *Client) Get(ctx context.Context, key string, opts ...ReadOption) ([]byte, bool, error) {
	ro := readOptions{consistency: c.opts.Consistency}
	for _, o := range opts {
		o.applyRead(&ro)
	}
	r, err := c.do(ctx, wire.Op{Kind: wire.OpGet, Key: key}, ro.consistency)
	if err == nil && r.Found && r.Type != wire.TypeString {
		return nil, false, ErrWrongType
	}
	if r.Found && r.Value == nil {
		r.Value = []byte{}
	}
	return r.Value, r.Found, err
}

// Put sets key to value, without a deadline unless an option gives one
// (WithTTL, WithExpireAt) or keeps the key's (WithKeepTTL).
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) error {
	op, err := c.withWriteOptions(ctx, wire.Op{Kind: wire.OpPut, Key: key, Value: value}, opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, op, Strong)
	return err
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpDelete, Key: key}, Strong)
	return r.Found, err
}

// CompareAndSet sets key to value if key exists and holds expected (nil
// and empty are the same value: an existing empty value). It reports
// whether it swapped and, when it did not, the current value and whether
// the key exists. PutIfAbsent is the swap that requires the key absent.
func (c *Client) CompareAndSet(ctx context.Context, key string, expected, value []byte, opts ...WriteOption) (swapped bool, current []byte, found bool, err error) {
	op, err := c.withWriteOptions(ctx, wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: expected, Value: value}, opts)
	if err != nil {
		return false, nil, false, err
	}
	return c.compareAndSet(ctx, op)
}

// PutIfAbsent sets key to value if key does not exist. It reports whether
// it did and, when it did not, the current value.
func (c *Client) PutIfAbsent(ctx context.Context, key string, value []byte, opts ...WriteOption) (put bool, current []byte, err error) {
	op, err := c.withWriteOptions(ctx, wire.Op{Kind: wire.OpCompareAndSet, Key: key, ExpectAbsent: true, Value: value}, opts)
	if err != nil {
		return false, nil, err
	}
	swapped, current, _, err := c.compareAndSet(ctx, op)
	return swapped, current, err
}

func (c *Client) compareAndSet(ctx context.Context, op wire.Op) (swapped bool, current []byte, found bool, err error) {
	r, err := c.do(ctx, op, Strong)
	if err != nil {
		return false, nil, false, err
	}
	if r.Status == wire.StatusCompareFailed {
		if r.Found && r.Value == nil {
			r.Value = []byte{}
		}
		return false, r.Value, r.Found, nil
	}
	return true, nil, r.Found, nil
}

// Swap sets key to value and returns the value it replaced and whether
// the key existed (Redis GETSET), in one atomic update.
func (c *Client) Swap(ctx context.Context, key string, value []byte, opts ...WriteOption) (prior []byte, found bool, err error) {
	op, err := c.withWriteOptions(ctx, wire.Op{Kind: wire.OpSwap, Key: key, Value: value}, opts)
	if err != nil {
		return nil, false, err
	}
	r, err := c.do(ctx, op, Strong)
	if err != nil {
		return nil, false, err
	}
	return priorValue(r), r.Found, nil
}

// Replace sets key to value only if key exists (Redis SET XX), and
// reports whether it did and, when it did, the value it replaced.
func (c *Client) Replace(ctx context.Context, key string, value []byte, opts ...WriteOption) (replaced bool, prior []byte, err error) {
	op, err := c.withWriteOptions(ctx, wire.Op{Kind: wire.OpReplace, Key: key, Value: value}, opts)
	if err != nil {
		return false, nil, err
	}
	r, err := c.do(ctx, op, Strong)
	if err != nil {
		return false, nil, err
	}
	return r.Found, priorValue(r), nil
}

// priorValue is the value a result reports, as a non-nil empty slice for
// an existing empty value, and nil when the key did not exist.
func priorValue(r wire.Result) []byte {
	if r.Found && r.Value == nil {
		return []byte{}
	}
	return r.Value
}

// Increment adds delta to the decimal integer stored at key (absent
// counts as 0) and returns the new value.
func (c *Client) Increment(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpIncrement, Key: key, Delta: delta}, Strong)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(r.Value), 10, 64)
}

// Append appends suffix to the value at key (absent counts as empty) and
// returns the new value.
func (c *Client) Append(ctx context.Context, key string, suffix []byte) ([]byte, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpAppend, Key: key, Value: suffix}, Strong)
	return r.Value, err
}
