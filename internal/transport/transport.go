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
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/internal/release"
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
	// incompatibleRetry is how long a dialer waits before it tries again
	// a peer that speaks no protocol version it speaks: an operator must
	// replace one of them first (docs/upgrades.md).
	incompatibleRetry = time.Minute
	writeBufferBytes  = 64 << 10
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
	// clientInboxes, with WithClientInboxes, take what client connections
	// deliver, one beside each inbox, so the node can serve its peers
	// first; nil otherwise.
	clientInboxes []chan Delivery
	splitClients  bool

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
	// protocol is the range of protocol versions this node speaks, sent
	// in every Hello (release.Speaks unless WithProtocol).
	protocol release.Range
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

// WithClientInboxes delivers what client connections send to client
// inboxes of their own (ClientInboxes), one beside each inbox: a node
// that takes its peers' messages first (node.Loop) keeps replication
// moving while clients queue (docs/adr/0025). Each connection's messages
// still arrive in order.
func WithClientInboxes() Option { return func(t *Transport) { t.splitClients = true } }

// WithProtocol makes the transport speak the protocol versions r rather
// than this release's (release.Speaks): for tests of peers of other
// releases.
func WithProtocol(r release.Range) Option { return func(t *Transport) { t.protocol = r } }

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
		clientInFlightMax: ClientInFlightMaxDefault, protocol: release.Speaks,
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
	if t.splitClients {
		for range t.inboxes {
			t.clientInboxes = append(t.clientInboxes, make(chan Delivery, inboxMessagesMax))
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

// ClientInboxes returns the client inboxes (WithClientInboxes), one per
// inbox in the same order; nil without the option, when clients' messages
// go to the inboxes with the rest.
func (t *Transport) ClientInboxes() []<-chan Delivery {
	if t.clientInboxes == nil {
		return nil
	}
	out := make([]<-chan Delivery, len(t.clientInboxes))
	for i, in := range t.clientInboxes {
		out[i] = in
	}
	return out
}

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
	inboxes := t.inboxes
	if t.clientInboxes != nil && strings.HasPrefix(string(d.From), ClientPrefix) {
		inboxes = t.clientInboxes
	}
	if t.router == nil {
		t.put(inboxes[0], d)
		return
	}
	i := t.router.Inbox(d.Msg)
	if i >= 0 {
		t.put(inboxes[i], d)
		return
	}
	// For every inbox: taken up once handed out, so it counts against
	// its client connection's in-flight limit no more.
	d.Done()
	for i, in := range inboxes {
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
