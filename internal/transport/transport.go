// Package transport moves wire messages between processes over TCP. It
// gives the state machines the channels CR §3 assumes: FIFO per direction
// between two nodes, and a PeerReset notification whenever a connection
// broke (messages in flight may be lost), from which the chain protocol
// re-synchronises.
//
// Each node sends to a server or master over a connection it dialed
// itself, so messages from A to B always take one connection, in order.
// Clients do not listen; servers answer them on the connection the client
// opened. The first frame on every connection is a Hello naming its node.
//
// Frames are a 4-byte length and a wire payload (internal/wire codec);
// writers batch every frame queued before they flush, so under load many
// messages share one write system call.
package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Limits of one transport.
const (
	// queueMessagesMax bounds the messages waiting to be written to one
	// connection; beyond it messages are dropped and the connection reset,
	// which the protocol repairs by re-synchronising.
	queueMessagesMax = 1 << 16
	// inboxMessagesMax bounds received messages waiting for the node; when
	// it is full, readers stop reading, and TCP pushes back on senders.
	inboxMessagesMax = 1 << 14
	dialTimeout      = time.Second
	// handshakeTimeout bounds the TLS handshake and the Hello after it.
	handshakeTimeout = 5 * time.Second
	redialMin        = 20 * time.Millisecond
	redialMax        = time.Second
	writeBufferBytes = 64 << 10
	// Messages for a client whose connection has not arrived yet are held
	// this long, at most this many per client and for this many clients.
	heldMessagesAge = time.Second
	heldMessagesMax = 64
	heldClientsMax  = 1024
	// coalesceBytesMax: a writer holding less than this yields once
	// before flushing, to let more messages join the write.
	coalesceBytesMax = 16 << 10
	readBufferBytes  = 64 << 10
	// ClientConnectionsPerIdentityMaxDefault bounds the open client
	// connections of one certificate identity (with TLS), or of one
	// remote address (without): a Go client opens one per master and
	// server, so this many are a client leaking connections, refused
	// before they exhaust the node.
	ClientConnectionsPerIdentityMaxDefault = 256
	// ClientInFlightMaxDefault bounds the messages one client connection
	// may have waiting for the node (read, not yet taken up by its
	// state machine; WithClientInFlightMax).
	ClientInFlightMaxDefault = 1024
)

// ClientPrefix starts the ids of nodes that do not listen (clients).
const ClientPrefix = wire.ClientPrefix

// Delivery is a received message and the node that sent it.
type Delivery struct {
	From wire.NodeID
	Msg  wire.Message
	// inFlight counts, for a client connection with an in-flight limit,
	// its messages not yet taken up (Done); nil otherwise.
	inFlight *atomic.Int64
}

// Done tells the transport the node has taken the message up (stepped
// its state machine with it): it no longer counts against its client
// connection's in-flight limit (WithClientInFlightMax). The node's loop
// calls it after each step. Calling it again does nothing.
func (d *Delivery) Done() {
	if d.inFlight != nil {
		d.inFlight.Add(-1)
		d.inFlight = nil
	}
}

// Transport is one node's endpoint.
type Transport struct {
	self  wire.NodeID
	log   *slog.Logger
	ln    net.Listener
	inbox chan Delivery
	// router and inboxes split what arrives between several inboxes
	// (WithRouter); inboxes[0] is inbox.
	router  Router
	inboxes []chan Delivery

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// dialed holds the connection this node opened to each listening peer.
	dialed map[wire.NodeID]*conn
	// accepted holds the latest connection each non-listening peer opened.
	accepted map[wire.NodeID]*conn
	all      map[*conn]bool
	// handshaking holds accepted connections not yet past their Hello.
	handshaking map[net.Conn]bool
	// held keeps messages for clients whose connection has not arrived.
	held map[wire.NodeID]*heldMessages

	stats counters
	// tls, if set, secures every link: mutual TLS 1.3 with certificates
	// of the cluster's CA (WithTLS).
	tls *security.Material
	// clientConnectionsMax bounds the open client connections of one
	// certificate identity (with TLS) or remote address (without);
	// byClient counts them by "identity ..." or "address ...". Guarded
	// by mu.
	clientConnectionsMax int
	byClient             map[string]int
	// clientInFlightMax bounds each client connection's messages waiting
	// for the node (0: none); proxies' connections are not bounded.
	clientInFlightMax int64
	// linkDelay, if set, gives the one-way delay of messages to a peer
	// (SetLinkDelays).
	linkDelay atomic.Pointer[func(peer wire.NodeID) LinkDelay]
	// cut, if set, says which peers this node is cut off from (SetCut).
	cut atomic.Pointer[func(peer wire.NodeID) bool]
}

// LinkDelay is an emulated wide-area link: every message to the peer
// leaves OneWay ± Jitter (uniform) after it was sent, and never before
// the message sent before it (FIFO holds; the chain protocol relies on
// it). This machine's kernel has no netem, so sites' WAN latency is
// injected here (docs/adr/0013-sites-and-geo-causal.md).
type LinkDelay struct {
	OneWay, Jitter time.Duration
}

// SetLinkDelays makes messages to each peer wait delay(peer) before they
// leave. It applies to connections opened afterwards; call it before the
// transport sends anything. delay must be safe for concurrent use.
func (t *Transport) SetLinkDelays(delay func(peer wire.NodeID) LinkDelay) {
	t.linkDelay.Store(&delay)
}

// errCut is why a peer this node is cut off from (SetCut) is unreachable.
var errCut = errors.New("cut off from this peer (an emulated network partition, SetCut)")

// Why a dialed peer that closed the connection without a word is
// unreachable, when the two ends most likely disagree about TLS; the
// error a peer's Unreachable reports wraps one of these (after the
// peer's address) and the cause (io.EOF, a reset). Front ends match them
// to say how to fix it (catena's client commands name their TLS flags
// and environment variables).
var (
	// ErrTLSUnanswered: the peer closed the connection during the TLS
	// handshake, without answering it, as a node without TLS does.
	ErrTLSUnanswered = errors.New("closed the connection without answering the TLS handshake (a node without TLS?)")
	// ErrPlaintextUnanswered: the peer closed a plaintext connection
	// before sending anything, as a node that requires TLS does.
	ErrPlaintextUnanswered = errors.New("closed the connection before sending anything (not a Catena node, or one that requires TLS?)")
)

// cutRetry spaces the dial attempts to a peer this node is cut off from,
// so that the link comes back soon after the cut is lifted.
const cutRetry = 50 * time.Millisecond

// SetCut cuts this node off from the listening peers for which cut
// reports true, as a network partition would: their connections, dialed
// and accepted, are closed at once, dials to them fail and their
// connections are closed after the Hello, until SetCut(nil) lifts it.
// Messages queued for a cut peer wait in its queue as for any
// unreachable peer (the protocol learns of the gap from the PeerReset
// that follows the reconnection). Clients are never cut. It is a test
// hook (the emulated WAN between sites on one machine, cmd/catena
// -wan-peers and SIGUSR1/SIGUSR2, docs/operations.md "Sites"): set on
// one side only, it still cuts both directions. cut must be safe for
// concurrent use.
func (t *Transport) SetCut(cut func(peer wire.NodeID) bool) {
	if cut == nil {
		t.cut.Store(nil)
		return
	}
	t.cut.Store(&cut)
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.all {
		if t.isCut(c.peer) {
			c.breakLink()
		}
	}
}

// isCut reports whether this node is cut off from peer (SetCut).
func (t *Transport) isCut(peer wire.NodeID) bool {
	f := t.cut.Load()
	return f != nil && !strings.HasPrefix(string(peer), ClientPrefix) && (*f)(peer)
}

// breakLink closes the connection's current socket; a dialed peer's
// connection redials.
func (c *conn) breakLink() {
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
	}
	c.mu.Unlock()
}

// Stats counts a transport's traffic since it started, for metrics.
type Stats struct {
	// BytesSent and BytesReceived count bytes written to and read from
	// connections, framing and hellos included.
	BytesSent, BytesReceived uint64
	// Reconnects counts connections to listening peers re-established
	// after one broke (each delivers a PeerReset).
	Reconnects uint64
	// DialFailures counts failed attempts to connect to a listening peer.
	DialFailures uint64
	// Overflows counts connections reset because the peer did not keep up
	// and its queue was full (queueMessagesMax).
	Overflows uint64
	// InFlightRefused counts client messages refused because their
	// connection had as many waiting as WithClientInFlightMax allows.
	InFlightRefused uint64
}

type counters struct {
	bytesSent, bytesReceived, reconnects, dialFailures, overflows, inFlightRefused atomic.Uint64
}

// Stats returns the transport's counters. Safe for concurrent use.
func (t *Transport) Stats() Stats {
	return Stats{
		BytesSent: t.stats.bytesSent.Load(), BytesReceived: t.stats.bytesReceived.Load(),
		Reconnects: t.stats.reconnects.Load(), DialFailures: t.stats.dialFailures.Load(),
		Overflows: t.stats.overflows.Load(), InFlightRefused: t.stats.inFlightRefused.Load(),
	}
}

// countedConn counts the bytes that pass through a connection.
type countedConn struct {
	net.Conn
	stats *counters
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.stats.bytesReceived.Add(uint64(n))
	return n, err
}

func (c countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.stats.bytesSent.Add(uint64(n))
	return n, err
}

// Option configures a transport.
type Option func(*Transport)

// WithTLS secures every link with mutual TLS 1.3: each side presents a
// certificate of the cluster's CA. A dialed peer must present the
// certificate of a member (master, server, site) named as the node
// dialed; an accepted connection that joins as a node (its Hello names a
// listening node) must present the certificate of a member of that name,
// and one that joins as a client any certificate of the CA. Connections
// refused are logged with the reason and closed; nothing else changes.
func WithTLS(m *security.Material) Option { return func(t *Transport) { t.tls = m } }

// WithClientConnectionsMax bounds the open client connections one
// certificate identity (with WithTLS), or one remote IP address
// (without), may hold (default ClientConnectionsPerIdentityMaxDefault);
// one more is refused and logged.
func WithClientConnectionsMax(n int) Option {
	return func(t *Transport) { t.clientConnectionsMax = n }
}

// WithClientInFlightMax bounds the messages one client connection may
// have waiting for the node: read off the connection and not yet taken
// up by the node's state machine (Delivery.Done). Beyond it a
// ClientRequest is answered at once with wire.ErrInFlightLimit, other
// messages are dropped, and the refusal is logged once per connection;
// nothing reaches the node. Default ClientInFlightMaxDefault; 0: no
// bound. A proxy's connections are not bounded: they carry the requests
// of many Redis connections, each bounded by the proxy.
func WithClientInFlightMax(n int) Option {
	return func(t *Transport) { t.clientInFlightMax = int64(max(n, 0)) }
}

// Router splits what a transport receives between several inboxes, one
// per event loop of a process that runs several (node.Pool).
type Router interface {
	// Inboxes returns how many inboxes there are.
	Inboxes() int
	// Inbox returns the inbox m goes to, or -1 if it goes to every one.
	Inbox(m wire.Message) int
	// Copy returns what inbox i gets of a message that goes to every
	// inbox.
	Copy(m wire.Message, i int) wire.Message
}

// WithRouter splits what the transport receives between r's inboxes
// (Inboxes). The messages one connection delivers to one inbox arrive
// there in the order they came; a connection whose message waits for a
// full inbox stops reading until it has room, and the others go on.
func WithRouter(r Router) Option { return func(t *Transport) { t.router = r } }

// New starts a transport for node self. With a non-empty listen address it
// accepts connections there; self should then be that address, since
// peers dial node ids.
func New(self wire.NodeID, listen string, log *slog.Logger, opts ...Option) (*Transport, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		self: self, log: log, inbox: make(chan Delivery, inboxMessagesMax),
		ctx: ctx, cancel: cancel,
		dialed: map[wire.NodeID]*conn{}, accepted: map[wire.NodeID]*conn{}, all: map[*conn]bool{},
		handshaking: map[net.Conn]bool{}, held: map[wire.NodeID]*heldMessages{},
		clientConnectionsMax: ClientConnectionsPerIdentityMaxDefault, byClient: map[string]int{},
		clientInFlightMax: ClientInFlightMaxDefault,
	}
	for _, o := range opts {
		o(t)
	}
	t.inboxes = []chan Delivery{t.inbox}
	if t.router != nil {
		for range t.router.Inboxes() - 1 {
			t.inboxes = append(t.inboxes, make(chan Delivery, inboxMessagesMax))
		}
	}
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("listen on %s: %w", listen, err)
		}
		t.ln = ln
		t.wg.Go(t.acceptLoop)
	}
	return t, nil
}

// Addr returns the listening address, or "".
func (t *Transport) Addr() string {
	if t.ln == nil {
		return ""
	}
	return t.ln.Addr().String()
}

// Inbox delivers received messages and PeerReset notifications.
func (t *Transport) Inbox() <-chan Delivery { return t.inbox }

// Inboxes returns every inbox, Inbox first: one without a Router.
func (t *Transport) Inboxes() []<-chan Delivery {
	out := make([]<-chan Delivery, len(t.inboxes))
	for i, in := range t.inboxes {
		out[i] = in
	}
	return out
}

// Close stops the transport and closes every connection.
func (t *Transport) Close() {
	t.cancel()
	if t.ln != nil {
		t.ln.Close()
	}
	t.mu.Lock()
	for c := range t.all {
		c.close()
	}
	for nc := range t.handshaking {
		nc.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Send queues a message. It never blocks; see queueMessagesMax. The
// message is the transport's from then on: it is encoded later, on the
// connection's writer goroutine, so the sender must not change it
// afterwards, nor share with it state it goes on changing (a slice of
// its own, say).
func (t *Transport) Send(env wire.Envelope) {
	if env.To == t.self {
		t.deliver(Delivery{From: t.self, Msg: env.Msg})
		return
	}
	t.mu.Lock()
	var c *conn
	if strings.HasPrefix(string(env.To), ClientPrefix) {
		c = t.accepted[env.To]
		if c == nil {
			t.holdForClientLocked(env)
		}
	} else {
		c = t.dialedLocked(env.To)
	}
	t.mu.Unlock()
	if c != nil {
		c.enqueue(env.Msg)
	}
}

// holdForClientLocked keeps a message for a client whose connection has
// not arrived yet: the tail answers updates a client sent to the head, and
// the client's connection to the tail may still be in its handshake. The
// messages go out when the connection arrives, or are dropped after
// heldMessagesAge (the client retries). t.mu must be held.
func (t *Transport) holdForClientLocked(env wire.Envelope) {
	now := time.Now()
	for id, h := range t.held {
		if now.Sub(h.since) > heldMessagesAge {
			delete(t.held, id)
		}
	}
	h := t.held[env.To]
	if h == nil {
		if len(t.held) >= heldClientsMax {
			return
		}
		h = &heldMessages{since: now}
		t.held[env.To] = h
	}
	if len(h.msgs) < heldMessagesMax {
		h.msgs = append(h.msgs, env.Msg)
	}
}

// Connect opens the connection to a listening peer, if it is not open
// yet, without sending anything. A client connects to every server that
// may answer it: servers answer clients only over connections the client
// opened, so a reply from a server the client never sent to is lost.
func (t *Transport) Connect(peer wire.NodeID) {
	if peer == "" || peer == t.self || strings.HasPrefix(string(peer), ClientPrefix) {
		return
	}
	t.mu.Lock()
	if t.ctx.Err() == nil {
		t.dialedLocked(peer)
	}
	t.mu.Unlock()
}

// Unreachable returns why a listening peer this node dials has not been
// reached: the last dial error, or what closed each connection before the
// peer sent a valid message. It returns nil once the peer has sent one,
// and for a peer never dialed.
func (t *Transport) Unreachable(peer wire.NodeID) error {
	t.mu.Lock()
	c := t.dialed[peer]
	t.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

func (c *conn) setFailure(err error) {
	c.mu.Lock()
	c.failure = err
	c.mu.Unlock()
}

// dialedLocked returns the connection this node dials to peer, starting
// it if needed. t.mu must be held.
func (t *Transport) dialedLocked(peer wire.NodeID) *conn {
	c := t.dialed[peer]
	if c == nil {
		c = t.newConn(peer, nil)
		t.dialed[peer] = c
		t.wg.Go(func() { t.dialLoop(c) })
	}
	return c
}

func (t *Transport) deliver(d Delivery) {
	if t.router == nil {
		t.put(t.inbox, d)
		return
	}
	i := t.router.Inbox(d.Msg)
	if i >= 0 {
		t.put(t.inboxes[i], d)
		return
	}
	// For every inbox: taken up once handed out, so it counts against
	// its client connection's in-flight limit no more.
	d.Done()
	for i, in := range t.inboxes {
		t.put(in, Delivery{From: d.From, Msg: t.router.Copy(d.Msg, i)})
	}
}

// put waits until in has room for d, unless the transport closes.
func (t *Transport) put(in chan Delivery, d Delivery) {
	select {
	case in <- d:
	case <-t.ctx.Done():
	}
}

type heldMessages struct {
	since time.Time
	msgs  []wire.Message
}

// conn is one TCP connection (or, for a dialed peer, the succession of
// connections to it) with its write queue.
type conn struct {
	peer  wire.NodeID
	queue chan queued
	// delay is the emulated link's (zero: none); lastDue, guarded by
	// dueMu, is when the last message queued may leave.
	delay   LinkDelay
	dueMu   sync.Mutex
	lastDue time.Duration
	mu      sync.Mutex
	nc      net.Conn
	done    chan struct{}
	once    sync.Once
	// failure is why the peer cannot be reached, for a dialed peer that
	// has not yet sent a valid message: the last dial error, or the error
	// that closed a connection before the peer said anything (not a
	// Catena node). nil once the peer sent a message.
	failure error
	stats   *counters
	// caller is, for an accepted client connection, who its certificate
	// proves the client is, set on the requests it sends
	// (the Caller of wire.ClientRequest, AuthRequest, KeyspaceRequest).
	caller wire.Caller
	// inFlightMax bounds, for an accepted client connection, its
	// messages waiting for the node (0: none); inFlight counts them, and
	// refusedInFlight says a refusal was logged.
	inFlightMax     int64
	inFlight        atomic.Int64
	refusedInFlight bool
}

// queued is a message waiting to be written, and when it may leave
// (processClock; zero: at once). Queues hold up to queueMessagesMax of
// them, so the due time is kept small.
type queued struct {
	m   wire.Message
	due time.Duration
}

// processStart anchors processClock.
var processStart = time.Now()

// processClock reads the monotonic clock, as a duration since the
// package was loaded.
func processClock() time.Duration { return time.Since(processStart) }

func (t *Transport) newConn(peer wire.NodeID, nc net.Conn) *conn {
	c := &conn{peer: peer, queue: make(chan queued, queueMessagesMax), nc: nc, done: make(chan struct{}), stats: &t.stats}
	if delay := t.linkDelay.Load(); delay != nil {
		c.delay = (*delay)(peer)
	}
	t.all[c] = true
	return c
}

func (c *conn) enqueue(m wire.Message) {
	q := queued{m: m}
	if c.delay != (LinkDelay{}) {
		q.due = c.nextDue()
	}
	select {
	case c.queue <- q:
	default:
		// The peer is not keeping up: break the connection; the protocol
		// resends what matters after the reset.
		c.stats.overflows.Add(1)
		c.mu.Lock()
		if c.nc != nil {
			c.nc.Close()
		}
		c.mu.Unlock()
	}
}

// nextDue returns when a message queued now may leave on the emulated
// link: OneWay ± Jitter from now, and not before the previous message.
func (c *conn) nextDue() time.Duration {
	d := c.delay.OneWay
	if c.delay.Jitter > 0 {
		d += time.Duration(rand.Int64N(int64(2*c.delay.Jitter+1))) - c.delay.Jitter
	}
	c.dueMu.Lock()
	defer c.dueMu.Unlock()
	due := max(processClock()+d, c.lastDue, 1)
	c.lastDue = due
	return due
}

func (c *conn) close() {
	c.once.Do(func() { close(c.done) })
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
	}
	c.mu.Unlock()
}

// dialLoop keeps a connection to a listening peer, redialling with
// backoff. After every connection but the first it reports a PeerReset.
func (t *Transport) dialLoop(c *conn) {
	backoff := redialMin
	connected := false
	for t.ctx.Err() == nil {
		if t.isCut(c.peer) {
			c.setFailure(errCut)
			select {
			case <-time.After(cutRetry):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		nc, err := net.DialTimeout("tcp", string(c.peer), dialTimeout)
		if err != nil {
			t.stats.dialFailures.Add(1)
			c.setFailure(err)
			select {
			case <-time.After(backoff):
			case <-t.ctx.Done():
				return
			}
			backoff = min(2*backoff, redialMax)
			continue
		}
		nc = countedConn{nc, &t.stats}
		if t.tls != nil {
			if nc, err = t.clientHandshake(nc, c.peer); err != nil {
				t.stats.dialFailures.Add(1)
				c.setFailure(err)
				t.log.Warn("TLS link refused", "peer", c.peer, "err", err)
				select {
				case <-time.After(backoff):
				case <-t.ctx.Done():
					return
				}
				backoff = min(2*backoff, redialMax)
				continue
			}
		}
		backoff = redialMin
		c.mu.Lock()
		select {
		case <-c.done:
			// Close ran while this dial was in flight: it closed the
			// previous connection, not this one.
			c.mu.Unlock()
			nc.Close()
			return
		default:
		}
		if t.isCut(c.peer) {
			// Cut while this dial was in flight (checked under c.mu, so
			// SetCut either sees this connection or it sees the cut).
			c.mu.Unlock()
			nc.Close()
			continue
		}
		c.nc = nc
		c.mu.Unlock()
		if connected {
			t.stats.reconnects.Add(1)
			t.deliver(Delivery{From: t.self, Msg: &wire.PeerReset{Peer: c.peer}})
		}
		connected = true
		t.serve(c, nc, true)
	}
}

func (t *Transport) acceptLoop() {
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() == nil {
				t.log.Warn("accept failed", "err", err)
				time.Sleep(redialMin)
				continue
			}
			return
		}
		t.wg.Go(func() { t.handshake(countedConn{nc, &t.stats}) })
	}
}

// clientHandshake secures a dialed connection: the peer must prove it is
// the member named peer.
func (t *Transport) clientHandshake(nc net.Conn, peer wire.NodeID) (net.Conn, error) {
	tc := tls.Client(nc, t.tls.ClientConfig(security.MemberCheck(string(peer))))
	ctx, cancel := context.WithTimeout(t.ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		if closedWithoutAnswer(err) {
			// A node without TLS reads the ClientHello as a frame too
			// large to be one, and closes the connection.
			return nil, fmt.Errorf("%s %w: %w", peer, ErrTLSUnanswered, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", peer, err)
	}
	return tc, nil
}

// closedWithoutAnswer reports whether a handshake failed because the
// peer closed the connection (or reset it) rather than for what it sent.
func closedWithoutAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// admit checks that an accepted connection's certificate may join as
// hello: any certificate of the CA as a client, and as a node only a
// member's certificate naming that node.
func admit(id security.Identity, hello wire.NodeID) error {
	if strings.HasPrefix(string(hello), ClientPrefix) {
		return nil
	}
	if !id.Role.Member() {
		return fmt.Errorf("a %s certificate (%q) may not join as node %s: only master, server and site certificates may", id.Role, id.Name, hello)
	}
	if id.Name != string(hello) {
		return fmt.Errorf("the certificate of %s may not join as node %s", id, hello)
	}
	return nil
}

// handshake reads the Hello of an accepted connection and serves it.
func (t *Transport) handshake(nc net.Conn) {
	// Close closes connections still in their handshake too.
	t.mu.Lock()
	if t.ctx.Err() != nil {
		t.mu.Unlock()
		nc.Close()
		return
	}
	t.handshaking[nc] = true
	t.mu.Unlock()
	raw := nc
	var peerID security.Identity
	if t.tls != nil {
		tc := tls.Server(nc, t.tls.ServerConfig(true))
		ctx, cancel := context.WithTimeout(t.ctx, handshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			t.mu.Lock()
			delete(t.handshaking, raw)
			closing := t.ctx.Err() != nil
			t.mu.Unlock()
			if !closing {
				t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason", err)
			}
			nc.Close()
			return
		}
		peerID, _ = security.PeerIdentity(tc.ConnectionState())
		nc = tc
	}
	r := bufio.NewReaderSize(nc, readBufferBytes)
	nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	m, _, err := wire.ReadFrame(r, nil)
	t.mu.Lock()
	delete(t.handshaking, raw)
	closing := t.ctx.Err() != nil
	t.mu.Unlock()
	hello, ok := m.(*wire.Hello)
	if closing || err != nil || !ok || hello.From == "" {
		switch {
		case closing:
		case errors.Is(err, io.EOF):
			// Closed before sending a byte: a client that went away. A
			// client connects to every server that may answer it, and
			// may close before it has written its Hello (catena status
			// does every time).
			t.log.Debug("connection closed before its hello", "remote", nc.RemoteAddr())
		default:
			t.log.Warn("connection without a valid hello", "remote", nc.RemoteAddr(), "err", err)
		}
		nc.Close()
		return
	}
	if t.tls != nil {
		if err := admit(peerID, hello.From); err != nil {
			t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason", err)
			nc.Close()
			return
		}
	}
	nc.SetReadDeadline(time.Time{})
	t.mu.Lock()
	if t.ctx.Err() != nil {
		t.mu.Unlock()
		nc.Close()
		return
	}
	if t.isCut(hello.From) {
		t.mu.Unlock()
		t.log.Debug("connection refused: cut off from this peer (SetCut)", "peer", hello.From)
		nc.Close()
		return
	}
	isClient := strings.HasPrefix(string(hello.From), ClientPrefix)
	if isClient {
		key, limit := "address "+remoteHost(nc), "the limit per remote address (connections without TLS are counted by address)"
		if t.tls != nil {
			key, limit = "identity "+peerID.String(), "the limit per client identity"
		}
		if t.byClient[key] >= t.clientConnectionsMax {
			t.mu.Unlock()
			t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason",
				fmt.Sprintf("%s already holds %d client connections, %s", strings.TrimPrefix(strings.TrimPrefix(key, "identity "), "address "), t.clientConnectionsMax, limit))
			nc.Close()
			return
		}
		t.byClient[key]++
		defer func() {
			t.mu.Lock()
			if t.byClient[key]--; t.byClient[key] <= 0 {
				delete(t.byClient, key)
			}
			t.mu.Unlock()
		}()
	}
	c := t.newConn(hello.From, nc)
	if isClient {
		if t.tls != nil {
			c.caller = wire.Caller{Name: peerID.Name, Proxy: peerID.Role == security.RoleProxy}
		}
		if !c.caller.Proxy {
			c.inFlightMax = t.clientInFlightMax
		}
		if old := t.accepted[hello.From]; old != nil {
			old.close()
		}
		t.accepted[hello.From] = c
		if h := t.held[hello.From]; h != nil {
			delete(t.held, hello.From)
			for _, m := range h.msgs {
				c.enqueue(m)
			}
		}
	}
	t.mu.Unlock()
	t.serveReader(c, nc, r, false)
}

// serve runs a dialed connection: write the Hello, then read and write
// until it breaks.
func (t *Transport) serve(c *conn, nc net.Conn, dialed bool) {
	r := bufio.NewReaderSize(nc, readBufferBytes)
	c.queueFront(&wire.Hello{From: t.self})
	t.serveReader(c, nc, r, dialed)
}

// queueFront writes the hello before anything queued. Only the writer of
// this connection is running, so writing it directly is safe.
func (c *conn) queueFront(h *wire.Hello) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := bufio.NewWriter(c.nc)
	if err := wire.WriteFrame(w, h); err == nil {
		w.Flush()
	}
}

// serveReader reads frames until the connection breaks, while a writer
// goroutine drains the queue. An accepted connection from a listening peer
// reports a PeerReset when it breaks: what that peer sent may be lost.
func (t *Transport) serveReader(c *conn, nc net.Conn, r *bufio.Reader, dialed bool) {
	writerDone := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(writerDone)
		t.writeLoop(c, nc, stop)
	}()
	var buf []byte
	heard := false
	for {
		m, b, err := wire.ReadFrame(r, buf)
		buf = b
		if err != nil {
			if dialed && !heard && t.ctx.Err() == nil {
				if _, secured := nc.(*tls.Conn); secured {
					c.setFailure(fmt.Errorf("%s completed the TLS handshake, then closed the connection before sending anything: it refused this node (its log says why: an expired certificate or one of another CA, one that may not join as this node, or too many connections of this client identity): %w", c.peer, err))
				} else {
					c.setFailure(fmt.Errorf("%s %w: %w", c.peer, ErrPlaintextUnanswered, err))
				}
			}
			if t.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				t.log.Debug("connection closed", "peer", c.peer, "err", err)
				if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
					t.log.Warn("dropping connection after a malformed frame", "peer", c.peer, "err", err)
				}
			}
			break
		}
		if _, isHello := m.(*wire.Hello); isHello {
			continue
		}
		if _, isReset := m.(*wire.PeerReset); isReset {
			continue // only the transport itself says that
		}
		if dialed && !heard {
			heard = true
			c.setFailure(nil)
		}
		d := Delivery{From: c.peer, Msg: m}
		if !dialed && strings.HasPrefix(string(c.peer), ClientPrefix) {
			// Who sent it is the connection's certificate's to say, never
			// the sender's.
			switch m := m.(type) {
			case *wire.ClientRequest:
				m.Caller = c.caller
			case *wire.AuthRequest:
				m.Caller = c.caller
			case *wire.KeyspaceRequest:
				m.Caller = c.caller
			}
			if c.inFlightMax > 0 {
				if c.inFlight.Load() >= c.inFlightMax {
					t.refuseInFlight(c, m)
					continue
				}
				c.inFlight.Add(1)
				d.inFlight = &c.inFlight
			}
		}
		t.deliver(d)
	}
	nc.Close()
	close(stop)
	<-writerDone
	if !dialed {
		t.mu.Lock()
		delete(t.all, c)
		if t.accepted[c.peer] == c {
			delete(t.accepted, c.peer)
		}
		t.mu.Unlock()
		if !strings.HasPrefix(string(c.peer), ClientPrefix) && t.ctx.Err() == nil {
			t.deliver(Delivery{From: t.self, Msg: &wire.PeerReset{Peer: c.peer}})
		}
	}
}

// refuseInFlight refuses a message of a client connection that has as
// many waiting for the node as it may: a request is answered with
// ErrInFlightLimit, anything else dropped (the client retries it). The
// first refusal of a connection is logged.
func (t *Transport) refuseInFlight(c *conn, m wire.Message) {
	t.stats.inFlightRefused.Add(1)
	if !c.refusedInFlight {
		c.refusedInFlight = true
		t.log.Warn("client over its in-flight limit: refusing its requests until the node catches up", "peer", c.peer,
			"user", c.caller.Name, "limit", c.inFlightMax)
	}
	if req, ok := m.(*wire.ClientRequest); ok {
		c.enqueue(&wire.ClientReply{Volume: req.Volume, Client: req.Client, ReqNo: req.ReqNo, Err: wire.ErrInFlightLimit})
	}
}

// remoteHost returns the IP address of a connection's remote end.
func remoteHost(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// writeLoop writes queued messages, flushing when the queue runs empty.
//
// Before flushing it yields the processor once and looks again: senders
// that were about to queue a message (a node loop sending a batch's
// output, a client's concurrent requests) usually do so meanwhile, and
// their messages share the write system call instead of each paying one.
func (t *Transport) writeLoop(c *conn, nc net.Conn, stop <-chan struct{}) {
	w := bufio.NewWriterSize(nc, writeBufferBytes)
	var timer *time.Timer
	// wait holds q until it is due, flushing what is buffered first; it
	// reports false if the connection is closing.
	wait := func(q queued) bool {
		d := q.due - processClock()
		if q.due == 0 || d <= 0 {
			return true
		}
		if w.Flush() != nil {
			return false
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return true
		case <-stop:
		case <-c.done:
		}
		timer.Stop()
		return false
	}
	for {
		var q queued
		select {
		case q = <-c.queue:
		case <-stop:
			return
		case <-c.done:
			return
		}
		yielded := false
		for q.m != nil {
			if !wait(q) {
				nc.Close()
				return
			}
			if err := wire.WriteFrame(w, q.m); err != nil {
				if errors.Is(err, wire.ErrTooLarge) {
					t.log.Error("dropping a message too large to send", "peer", c.peer, "type", wire.MessageName(q.m))
				} else {
					nc.Close()
					return
				}
			}
			select {
			case q = <-c.queue:
			default:
				q = queued{}
				if !yielded && w.Buffered() < coalesceBytesMax {
					yielded = true
					runtime.Gosched()
					select {
					case q = <-c.queue:
					default:
					}
				}
			}
		}
		if err := w.Flush(); err != nil {
			nc.Close()
			return
		}
	}
}
