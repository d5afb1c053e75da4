package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// The handshake of a connection: TLS (dialed: the peer must be the member
// dialed), then the Hello naming the node that opened it.

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
	// ErrIncompatible: the peer speaks no protocol version this node
	// speaks (a release too old or too new to talk to this one). The
	// dialer waits a minute before it tries again.
	ErrIncompatible = errors.New("speaks no protocol version this node speaks")
)

// hello is the Hello this node sends: its id and protocol versions.
func (t *Transport) hello() *wire.Hello {
	return &wire.Hello{From: t.self, MinProtocol: t.protocol.Min, MaxProtocol: t.protocol.Max}
}

// incompatible reports why a peer whose Hello is h cannot talk to this
// node, or nil when their protocol versions meet.
func (t *Transport) incompatible(peer wire.NodeID, h *wire.Hello) error {
	theirs := release.Range{Min: h.MinProtocol, Max: h.MaxProtocol}
	if theirs.Valid() && t.protocol.Meets(theirs) {
		return nil
	}
	return fmt.Errorf("%s %w: it speaks protocol %s, this node (release %s) speaks %s; upgrade or downgrade one of them (docs/upgrades.md)",
		peer, ErrIncompatible, theirs, release.Version, t.protocol)
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

// handshake secures an accepted connection (with TLS), reads its Hello,
// admits it and serves it.
func (t *Transport) handshake(nc net.Conn) {
	if !t.trackHandshake(nc) {
		return
	}
	raw := nc
	nc, peerID, ok := t.acceptTLS(nc)
	if !ok {
		return
	}
	r := bufio.NewReaderSize(nc, readBufferBytes)
	hello, ok := t.readHello(raw, nc, r)
	if !ok {
		return
	}
	if t.tls != nil {
		if err := admit(peerID, hello.From); err != nil {
			t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason", err)
			nc.Close()
			return
		}
	}
	if err := t.incompatible(hello.From, hello); err != nil {
		// Answer with this node's versions, so the dialer can say why,
		// and close: it waits before it dials again.
		t.stats.incompatible.Add(1)
		t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason", err)
		nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		w := bufio.NewWriter(nc)
		if wire.WriteFrame(w, t.hello()) == nil {
			w.Flush()
		}
		nc.Close()
		return
	}
	nc.SetReadDeadline(time.Time{})
	c, done, ok := t.register(nc, hello.From, peerID)
	if !ok {
		return
	}
	defer done()
	c.queueFront(t.hello())
	t.serveReader(c, nc, r, false)
}

// trackHandshake records an accepted connection in its handshake, so
// that Close closes it too; it reports false (and closes it) if the
// transport is closing.
func (t *Transport) trackHandshake(nc net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		nc.Close()
		return false
	}
	t.handshaking[nc] = true
	return true
}

// acceptTLS runs the server's side of the TLS handshake on an accepted
// connection (none without TLS) and returns the secured connection and
// the certificate's identity; ok is false if it failed (the connection
// is closed, and the refusal logged).
func (t *Transport) acceptTLS(nc net.Conn) (secured net.Conn, id security.Identity, ok bool) {
	if t.tls == nil {
		return nc, id, true
	}
	tc := tls.Server(nc, t.tls.ServerConfig(true))
	ctx, cancel := context.WithTimeout(t.ctx, handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		t.mu.Lock()
		delete(t.handshaking, nc)
		closing := t.ctx.Err() != nil
		t.mu.Unlock()
		if !closing {
			t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason", err)
		}
		nc.Close()
		return nil, id, false
	}
	id, _ = security.PeerIdentity(tc.ConnectionState())
	return tc, id, true
}

// readHello reads the first frame of an accepted connection (raw before
// TLS, nc after), which must be a Hello naming a node; the handshake is
// over either way. ok is false if it was not (the connection is closed).
func (t *Transport) readHello(raw, nc net.Conn, r *bufio.Reader) (hello *wire.Hello, ok bool) {
	nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	m, _, err := wire.ReadFrame(r, nil)
	t.mu.Lock()
	delete(t.handshaking, raw)
	closing := t.ctx.Err() != nil
	t.mu.Unlock()
	hello, ok = m.(*wire.Hello)
	if !closing && err == nil && ok && hello.From != "" {
		return hello, true
	}
	switch {
	case closing:
	case errors.Is(err, io.EOF):
		// Closed before sending a byte: a client that went away. A
		// client connects to every server that may answer it, and may
		// close before it has written its Hello (catena status does
		// every time).
		t.log.Debug("connection closed before its hello", "remote", nc.RemoteAddr())
	default:
		t.log.Warn("connection without a valid hello", "remote", nc.RemoteAddr(), "err", err)
	}
	nc.Close()
	return nil, false
}

// register makes an accepted connection from node from (whose
// certificate proves id, with TLS) one of the transport's: a client's
// within its limit of connections (admitClientLocked), with the messages
// held for it. ok is false if it may not (the connection is closed);
// release gives its place in the client's limit back once it is served.
func (t *Transport) register(nc net.Conn, from wire.NodeID, id security.Identity) (c *conn, release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		nc.Close()
		return nil, nil, false
	}
	if t.isCut(from) {
		t.log.Debug("connection refused: cut off from this peer (SetCut)", "peer", from)
		nc.Close()
		return nil, nil, false
	}
	release = func() {}
	isClient := strings.HasPrefix(string(from), ClientPrefix)
	if isClient {
		if release, ok = t.admitClientLocked(nc, id); !ok {
			nc.Close()
			return nil, nil, false
		}
	}
	c = t.newConn(from, nc)
	if isClient {
		if t.tls != nil {
			c.caller = wire.Caller{Name: id.Name, Proxy: id.Role == security.RoleProxy}
		}
		if !c.caller.Proxy {
			c.inFlightMax = t.clientInFlightMax
		}
		if old := t.accepted[from]; old != nil {
			old.close()
		}
		t.accepted[from] = c
		t.releaseHeldLocked(c)
	}
	return c, release, true
}

// remoteHost returns the IP address of a connection's remote end.
func remoteHost(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
