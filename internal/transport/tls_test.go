package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// testPKI is a cluster CA and a directory of certificates it issued.
type testPKI struct {
	t   *testing.T
	ca  *security.CA
	dir string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := security.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca, dir: dir}
}

// material issues a certificate for id (with o) and loads it.
func (p *testPKI) material(id security.Identity, o security.IssueOptions, log *slog.Logger) *security.Material {
	p.t.Helper()
	is, err := p.ca.Issue(id, o)
	if err != nil {
		p.t.Fatal(err)
	}
	files, err := is.Save(p.dir, id)
	if err != nil {
		p.t.Fatal(err)
	}
	m, err := security.Load(files, log)
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// trusting issues a certificate for id from p's CA but trusts other's CA:
// an intruder that knows the cluster's public CA certificate.
func (p *testPKI) trusting(other *testPKI, id security.Identity) *security.Material {
	p.t.Helper()
	is, err := p.ca.Issue(id, security.IssueOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	files, err := is.Save(p.dir, id)
	if err != nil {
		p.t.Fatal(err)
	}
	files.CA = filepath.Join(other.dir, security.CACertFile)
	m, err := security.Load(files, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// logRecorder keeps the messages and attributes a logger wrote.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// waitLine waits for a logged line holding every one of parts.
func (l *logRecorder) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				l.mu.Unlock()
				return line
			}
		}
		lines := strings.Join(l.lines, "\n")
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in %v; logged:\n%s", parts, waitFor, lines)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tlsMember starts a listening transport on a free port with a certificate
// for role and its own address, logging to rec.
func tlsMember(t *testing.T, p *testPKI, role security.Role, rec *logRecorder) *Transport {
	t.Helper()
	addr := freeAddr(t)
	var log *slog.Logger = testLogger()
	if rec != nil {
		log = slog.New(rec)
	}
	m := p.material(security.Identity{Role: role, Name: addr}, security.IssueOptions{}, log)
	tr, err := New(wire.NodeID(addr), addr, log, WithTLS(m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// exchange checks that a and b still talk: a's Ack reaches b.
func exchange(t *testing.T, a, b *Transport, sn wire.SN) {
	t.Helper()
	a.Send(wire.Envelope{To: id(b), Msg: &wire.Ack{SN: sn}})
	d := receive(t, b, "ack between members", ackFrom(id(a)))
	if got := d.Msg.(*wire.Ack).SN; got != sn {
		t.Fatalf("ack %d, want %d", got, sn)
	}
}

// Members of one CA talk over mutual TLS; a process without a certificate,
// with another CA's, with an expired one, or with a client's (or another
// member's) certificate trying to join as a node is refused with the
// reason logged, and the members go on talking.
func TestTLSRefusesOutsiders(t *testing.T) {
	p := newPKI(t)
	rec := &logRecorder{}
	b := tlsMember(t, p, security.RoleServer, rec)
	a := tlsMember(t, p, security.RoleServer, nil)
	exchange(t, a, b, 1)

	// intruder dials b as node self, and must not be heard.
	intruder := func(self string, opts ...Option) *Transport {
		tr, err := New(wire.NodeID(self), "", testLogger(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		tr.Send(wire.Envelope{To: id(b), Msg: &wire.Ack{SN: 99}})
		return tr
	}
	otherCA := newPKI(t)
	cases := []struct {
		name   string
		self   string
		opts   []Option
		reason []string
	}{
		{"no TLS", "127.0.0.1:1", nil, []string{"connection refused", "TLS handshake"}},
		{"no certificate", "127.0.0.1:2", []Option{WithTLS(p.material(security.Identity{Role: security.RoleServer, Name: "127.0.0.1:2"}, security.IssueOptions{}, nil))},
			nil},
		{"another CA", "127.0.0.1:3", []Option{WithTLS(otherCA.trusting(p, security.Identity{Role: security.RoleServer, Name: "127.0.0.1:3"}))},
			[]string{"connection refused", "not signed by the cluster's CA"}},
		{"expired", "127.0.0.1:4", []Option{WithTLS(p.material(security.Identity{Role: security.RoleServer, Name: "127.0.0.1:4"},
			security.IssueOptions{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, nil))},
			[]string{"connection refused", "expired"}},
		{"client certificate as a server", "127.0.0.1:5", []Option{WithTLS(p.material(security.Identity{Role: security.RoleClient, Name: "mallory"}, security.IssueOptions{}, nil))},
			[]string{"connection refused", "a client certificate", "may not join as node 127.0.0.1:5"}},
		{"proxy certificate as a master", "127.0.0.1:6", []Option{WithTLS(p.material(security.Identity{Role: security.RoleProxy, Name: "127.0.0.1:6"}, security.IssueOptions{}, nil))},
			[]string{"connection refused", "a proxy certificate", "may not join as node"}},
		{"another member's certificate", "127.0.0.1:7", []Option{WithTLS(p.material(security.Identity{Role: security.RoleServer, Name: "127.0.0.1:8"}, security.IssueOptions{}, nil))},
			[]string{"connection refused", "certificate of server 127.0.0.1:8 may not join as node 127.0.0.1:7"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "no certificate" {
				// A TLS client that presents no certificate: a raw one.
				nc, err := net.DialTimeout("tcp", b.Addr(), waitFor)
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
				tc.SetDeadline(time.Now().Add(waitFor))
				if err := tc.Handshake(); err == nil {
					// TLS 1.3: the server's refusal arrives at the first read.
					_, err = tc.Read(make([]byte, 1))
					if err == nil {
						t.Fatal("a connection without a certificate was served")
					}
				}
				rec.waitLine(t, "connection refused", "provide a certificate")
			} else {
				in := intruder(c.self, c.opts...)
				rec.waitLine(t, c.reason...)
				if c.opts != nil {
					// The refusal reaches the intruder, as the reason its
					// peer is unreachable.
					deadline := time.Now().Add(waitFor)
					for in.Unreachable(id(b)) == nil && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
					if in.Unreachable(id(b)) == nil {
						t.Error("the refused intruder does not know why")
					}
				}
			}
			exchange(t, a, b, wire.SN(10+i))
		})
	}
	// Nothing the intruders sent reached b.
	for {
		select {
		case d := <-b.Inbox():
			if ack, ok := d.Msg.(*wire.Ack); ok && ack.SN == 99 {
				t.Fatalf("b received an intruder's message from %s", d.From)
			}
			continue
		default:
		}
		break
	}
}

// A client certificate joins as a client and gets answers; a member that
// dials an address where a client certificate answers refuses it.
func TestTLSClientsAndDialedPeersChecked(t *testing.T) {
	p := newPKI(t)
	b := tlsMember(t, p, security.RoleServer, nil)
	cl, err := New(ClientPrefix+"alice", "", testLogger(), WithTLS(p.material(security.Identity{Role: security.RoleClient, Name: "alice"}, security.IssueOptions{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cl.Send(wire.Envelope{To: id(b), Msg: &wire.Ack{SN: 1}})
	receive(t, b, "client's message", ackFrom(ClientPrefix+"alice"))
	b.Send(wire.Envelope{To: ClientPrefix + "alice", Msg: &wire.Ack{SN: 2}})
	receive(t, cl, "reply to the client", ackFrom(id(b)))

	// A listener holding a proxy certificate named as its address is not a
	// member: a server dialing it refuses it.
	rec := &logRecorder{}
	fake := tlsMember(t, p, security.RoleProxy, nil)
	dialer := tlsMember(t, p, security.RoleServer, rec)
	dialer.Send(wire.Envelope{To: id(fake), Msg: &wire.Ack{SN: 3}})
	rec.waitLine(t, "TLS link refused", "proxy certificate", "not a cluster member")
	if err := dialer.Unreachable(id(fake)); err == nil || !strings.Contains(err.Error(), "not a cluster member") {
		t.Errorf("Unreachable = %v, want the refusal", err)
	}
}

// A renewed certificate written over the old files is served from the
// next handshake on, without a restart.
func TestTLSCertificateReload(t *testing.T) {
	p := newPKI(t)
	b := tlsMember(t, p, security.RoleServer, nil)
	serialSeen := func() string {
		t.Helper()
		m := p.material(security.Identity{Role: security.RoleClient, Name: "probe"}, security.IssueOptions{}, nil)
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", b.Addr(), m.ClientConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serialSeen()
	// Renew: a new certificate for the same identity, saved over the files.
	renewed, err := p.ca.Issue(security.Identity{Role: security.RoleServer, Name: b.Addr()}, security.IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renewed.Save(p.dir, security.Identity{Role: security.RoleServer, Name: b.Addr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		after := serialSeen()
		if after == renewed.Cert.SerialNumber.String() {
			break
		}
		if after != before || time.Now().After(deadline) {
			t.Fatalf("serving serial %s; want the renewed %s (was %s)", after, renewed.Cert.SerialNumber, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One client identity may hold WithClientConnectionsMax connections; one
// more is refused and logged, and the refused client is told the
// connection was refused after the handshake. Closing one frees a place.
func TestTLSClientConnectionsPerIdentity(t *testing.T) {
	p := newPKI(t)
	rec := &logRecorder{}
	addr := freeAddr(t)
	m := p.material(security.Identity{Role: security.RoleServer, Name: addr}, security.IssueOptions{}, nil)
	b, err := New(wire.NodeID(addr), addr, slog.New(rec), WithTLS(m), WithClientConnectionsMax(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	alice := p.material(security.Identity{Role: security.RoleClient, Name: "alice"}, security.IssueOptions{}, nil)
	client := func(n int) *Transport {
		id := wire.NodeID(fmt.Sprintf("%salice-%d", ClientPrefix, n))
		tr, err := New(id, "", testLogger(), WithTLS(alice))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		tr.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: wire.SN(n)}})
		return tr
	}
	c1, c2 := client(1), client(2)
	// Both arrive, in either order.
	heard := map[wire.NodeID]bool{}
	receive(t, b, "the first two clients", func(d Delivery) bool {
		if _, ok := d.Msg.(*wire.Ack); ok {
			heard[d.From] = true
		}
		return heard[ClientPrefix+"alice-1"] && heard[ClientPrefix+"alice-2"]
	})
	c3 := client(3)
	rec.waitLine(t, "connection refused", "client alice already holds 2 client connections, the limit per client identity")
	deadline := time.Now().Add(waitFor)
	for {
		err := c3.Unreachable(wire.NodeID(addr))
		if err != nil && strings.Contains(err.Error(), "too many connections of this client identity") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refused client's reason: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Another identity is not affected.
	bob, err := New(ClientPrefix+"bob", "", testLogger(), WithTLS(p.material(security.Identity{Role: security.RoleClient, Name: "bob"}, security.IssueOptions{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bob.Close)
	bob.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: 9}})
	receive(t, b, "another identity", ackFrom(ClientPrefix+"bob"))
	// c1 closes: c3's next redial gets its place.
	c1.Close()
	_ = c2
	// What c3 sent on a refused connection was lost: it sends again
	// until a connection of its is accepted.
	deadline = time.Now().Add(waitFor)
	for {
		c3.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: 3}})
		select {
		case d := <-b.Inbox():
			if ackFrom(ClientPrefix + "alice-3")(d) {
				return
			}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the third client was not accepted once the first closed")
		}
	}
}
