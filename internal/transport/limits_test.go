package transport

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// request is a ClientRequest numbered n.
func request(n uint64) *wire.ClientRequest {
	return &wire.ClientRequest{Volume: 1, Client: 5, ReqNo: n, Op: wire.Op{Kind: wire.OpGet, Key: "k"}}
}

// replies collects the ClientReplies a client transport receives until
// it has want of them.
func replies(t *testing.T, tr *Transport, want int) []*wire.ClientReply {
	t.Helper()
	var out []*wire.ClientReply
	for len(out) < want {
		d := receive(t, tr, "replies", func(d Delivery) bool { _, ok := d.Msg.(*wire.ClientReply); return ok })
		out = append(out, d.Msg.(*wire.ClientReply))
	}
	return out
}

// A client connection may have WithClientInFlightMax messages waiting
// for the node; a request beyond them is answered ErrInFlightLimit at
// once and never reaches the node, and the refusal is logged once. Once
// the node takes messages up (Done), the connection may send again.
// Another client's connection is not affected.
func TestClientInFlightLimit(t *testing.T) {
	rec := &logRecorder{}
	addr := freeAddr(t)
	srv, err := New(wire.NodeID(addr), addr, slog.New(rec), WithClientInFlightMax(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	flood, other := clientTransport(t, ClientPrefix+"flood"), clientTransport(t, ClientPrefix+"other")
	for n := uint64(1); n <= 5; n++ {
		flood.Send(wire.Envelope{To: wire.NodeID(addr), Msg: request(n)})
	}
	// Nothing is taken up: requests 4 and 5 are refused, in order.
	got := replies(t, flood, 2)
	for i, r := range got {
		if r.Err != wire.ErrInFlightLimit || r.ReqNo != uint64(4+i) || r.Client != 5 || r.Volume != 1 {
			t.Fatalf("reply %d: %+v; want ErrInFlightLimit for request %d", i, r, 4+i)
		}
	}
	rec.waitLine(t, "client over its in-flight limit", "limit=3")
	other.Send(wire.Envelope{To: wire.NodeID(addr), Msg: request(100)})
	var waiting []Delivery
	for len(waiting) < 4 {
		waiting = append(waiting, receive(t, srv, "the waiting requests", func(d Delivery) bool { _, ok := d.Msg.(*wire.ClientRequest); return ok }))
	}
	fromFlood := 0
	for _, d := range waiting {
		r := d.Msg.(*wire.ClientRequest)
		switch {
		case d.From == ClientPrefix+"flood" && r.ReqNo <= 3:
			fromFlood++
		case d.From == ClientPrefix+"other" && r.ReqNo == 100:
		default:
			t.Fatalf("the node got %v from %s", r, d.From)
		}
	}
	if fromFlood != 3 {
		t.Fatalf("the node got %d of flood's requests, want 3", fromFlood)
	}
	if n := srv.Stats().InFlightRefused; n != 2 {
		t.Fatalf("InFlightRefused = %d, want 2", n)
	}
	// The node takes them up: flood may send again.
	for i := range waiting {
		waiting[i].Done()
		waiting[i].Done() // a second call does nothing
	}
	flood.Send(wire.Envelope{To: wire.NodeID(addr), Msg: request(6)})
	d := receive(t, srv, "flood's request after the node caught up", func(d Delivery) bool { _, ok := d.Msg.(*wire.ClientRequest); return ok })
	if r := d.Msg.(*wire.ClientRequest); d.From != ClientPrefix+"flood" || r.ReqNo != 6 {
		t.Fatalf("got %v from %s, want request 6 from flood", r, d.From)
	}
	if rec.count("client over its in-flight limit") != 1 {
		t.Fatalf("the refusals of one connection were logged %d times, want once", rec.count("client over its in-flight limit"))
	}
}

// With TLS, the transport sets each client request's Caller from the
// connection's certificate: a client's name, or a proxy's (which may
// name its users); a proxy's connection has no in-flight limit.
func TestCallerFromCertificate(t *testing.T) {
	p := newPKI(t)
	addr := freeAddr(t)
	m := p.material(security.Identity{Role: security.RoleServer, Name: addr}, security.IssueOptions{}, nil)
	srv, err := New(wire.NodeID(addr), addr, testLogger(), WithTLS(m), WithClientInFlightMax(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dial := func(role security.Role, name string) *Transport {
		tr, err := New(wire.NodeID(ClientPrefix+name), "", testLogger(), WithTLS(p.material(security.Identity{Role: role, Name: name}, security.IssueOptions{}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		return tr
	}
	alice, proxy := dial(security.RoleClient, "alice"), dial(security.RoleProxy, "proxy1")
	forged := request(1)
	forged.User = "root"
	forged.Caller = wire.Caller{Name: "root", Proxy: true} // not encoded: cannot travel
	alice.Send(wire.Envelope{To: wire.NodeID(addr), Msg: forged})
	d := receive(t, srv, "alice's request", func(d Delivery) bool { return d.From == ClientPrefix+"alice" })
	if r := d.Msg.(*wire.ClientRequest); r.Caller != (wire.Caller{Name: "alice"}) || r.Caller.Principal(r.User) != "alice" {
		t.Fatalf("alice's request has Caller %+v (principal %q)", r.Caller, r.Caller.Principal(r.User))
	}
	alice.Send(wire.Envelope{To: wire.NodeID(addr), Msg: request(2)})
	if got := replies(t, alice, 1)[0]; got.Err != wire.ErrInFlightLimit || got.ReqNo != 2 {
		t.Fatalf("alice's second request while the first waits: %+v, want ErrInFlightLimit", got)
	}
	d.Done()
	alice.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.AuthRequest{ID: 2, Change: wire.AuthChange{Op: wire.AuthList}}})
	d = receive(t, srv, "alice's auth request", func(d Delivery) bool { _, ok := d.Msg.(*wire.AuthRequest); return ok })
	if r := d.Msg.(*wire.AuthRequest); r.Caller != (wire.Caller{Name: "alice"}) || r.ID != 2 {
		t.Fatalf("alice's auth request %+v", r)
	}
	for n := uint64(1); n <= 5; n++ {
		r := request(n)
		r.User = fmt.Sprintf("user%d", n)
		proxy.Send(wire.Envelope{To: wire.NodeID(addr), Msg: r})
	}
	for n := uint64(1); n <= 5; n++ {
		d := receive(t, srv, "the proxy's requests", func(d Delivery) bool { return d.From == ClientPrefix+"proxy1" })
		r := d.Msg.(*wire.ClientRequest)
		if r.Caller != (wire.Caller{Name: "proxy1", Proxy: true}) || r.Caller.Principal(r.User) != fmt.Sprintf("user%d", r.ReqNo) {
			t.Fatalf("the proxy's request %d: Caller %+v, principal %q", r.ReqNo, r.Caller, r.Caller.Principal(r.User))
		}
	}
}

// Without TLS, client connections are counted per remote address.
func TestClientConnectionsPerAddress(t *testing.T) {
	rec := &logRecorder{}
	addr := freeAddr(t)
	srv, err := New(wire.NodeID(addr), addr, slog.New(rec), WithClientConnectionsMax(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	for n := 1; n <= 2; n++ {
		c := clientTransport(t, wire.NodeID(fmt.Sprintf("%sc%d", ClientPrefix, n)))
		c.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: wire.SN(n)}})
		receive(t, srv, "a client", ackFrom(wire.NodeID(fmt.Sprintf("%sc%d", ClientPrefix, n))))
	}
	c3 := clientTransport(t, ClientPrefix+"c3")
	c3.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: 3}})
	rec.waitLine(t, "connection refused", "127.0.0.1 already holds 2 client connections, the limit per remote address")
	select {
	case d := <-srv.Inbox():
		if ackFrom(ClientPrefix + "c3")(d) {
			t.Fatal("the third connection from one address was accepted")
		}
	case <-time.After(100 * time.Millisecond):
	}
}

// count returns how many logged lines hold part.
func (l *logRecorder) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, part) {
			n++
		}
	}
	return n
}
