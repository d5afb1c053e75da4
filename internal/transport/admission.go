package transport

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Admission: which connections may join as which node (their
// certificates), how many connections and messages in flight a client
// may hold, and the messages held for a client whose connection has not
// arrived yet.

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

type heldMessages struct {
	since time.Time
	msgs  []wire.Message
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

// admitClientLocked counts one more connection of the client behind an
// accepted connection: by its certificate's identity with TLS, by its
// remote address without. At the limit (WithClientConnectionsMax) it is
// refused and logged, ok false. release counts it out again. t.mu must be
// held.
func (t *Transport) admitClientLocked(nc net.Conn, id security.Identity) (release func(), ok bool) {
	key, limit := "address "+remoteHost(nc), "the limit per remote address (connections without TLS are counted by address)"
	if t.tls != nil {
		key, limit = "identity "+id.String(), "the limit per client identity"
	}
	if t.byClient[key] >= t.clientConnectionsMax {
		t.log.Warn("connection refused", "remote", nc.RemoteAddr(), "reason",
			fmt.Sprintf("%s already holds %d client connections, %s", strings.TrimPrefix(strings.TrimPrefix(key, "identity "), "address "), t.clientConnectionsMax, limit))
		return nil, false
	}
	t.byClient[key]++
	return func() {
		t.mu.Lock()
		if t.byClient[key]--; t.byClient[key] <= 0 {
			delete(t.byClient, key)
		}
		t.mu.Unlock()
	}, true
}

// releaseHeldLocked queues the messages held for the client whose
// connection c just arrived (holdForClientLocked). t.mu must be held.
func (t *Transport) releaseHeldLocked(c *conn) {
	if h := t.held[c.peer]; h != nil {
		delete(t.held, c.peer)
		for _, m := range h.msgs {
			c.enqueue(m)
		}
	}
}
