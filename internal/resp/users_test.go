package resp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/testcluster"
)

// expect sends each command and checks the first line of its reply.
func expect(t *testing.T, c *rawConn, steps ...[2]string) {
	t.Helper()
	for _, s := range steps {
		c.write(s[0])
		if l, err := c.line(); err != nil || !strings.HasPrefix(l, s[1]) {
			t.Fatalf("%q = %q, %v; want %q", s[0], l, err, s[1])
		}
	}
}

// eventuallyReply sends send until its reply starts with want.
func eventuallyReply(t *testing.T, c *rawConn, send, want string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		c.write(send)
		l, err := c.line()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, want) {
			return
		}
		if strings.HasPrefix(l, "$") && l != "$-1" { // a bulk string's body
			c.line()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q = %q; want %q in %v", send, l, want, testTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The cluster's users AUTH at a proxy with their passwords, and each
// connection's commands run as its user: what the user's roles do not
// grant is refused with Redis's NOPERM and changes nothing; a connection
// that has not authenticated runs as the proxy's own user (none here:
// NOAUTH); a user's revoked role and deletion reach its open connection.
func TestClusterUsers(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.WithTLS())
	ctx := testCtx(t)
	root := c.DialAs(t, "root")
	for _, step := range []func() (client.Auth, error){
		func() (client.Auth, error) { return root.AddUser(ctx, "root", "", client.AdminRole) },
		func() (client.Auth, error) { return root.AddRole(ctx, "app") },
		func() (client.Auth, error) {
			return root.GrantRole(ctx, "app", client.Grant{Prefix: "app/", Access: "readwrite"})
		},
		func() (client.Auth, error) { return root.AddUser(ctx, "appuser", "s3cret", "app") },
	} {
		if _, err := step(); err != nil {
			t.Fatal(err)
		}
	}
	proxy := c.Dial(t, client.Options{TLS: c.ClientTLS(t, security.RoleProxy, "proxy1")})
	users := resp.NewClusterUsers(proxy.FetchAuth, nil)
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go users.Run(runCtx)
	addr := serve(t, resp.Options{Store: proxy, Users: users})

	conn := dialRaw(t, addr)
	expect(t, conn,
		[2]string{"GET app/x\r\n", "-NOAUTH Authentication required: this connection's user is not a user of the cluster"},
		[2]string{"AUTH appuser wrong\r\n", "-WRONGPASS"},
		[2]string{"AUTH nobody s3cret\r\n", "-WRONGPASS"},
		[2]string{"AUTH appuser s3cret\r\n", "+OK"},
		[2]string{"SET app/x 1\r\n", "+OK"},
		[2]string{"SET other 1\r\n", "-NOPERM this user has no permissions to access one of the keys used as arguments"},
		[2]string{"GET other\r\n", "-NOPERM"},
		[2]string{"INCR app/n\r\n", ":1"},
		[2]string{"CLIENT INFO\r\n", "$"},
	)
	if l, _ := conn.line(); !strings.Contains(l, "user=appuser") {
		t.Fatalf("CLIENT INFO: %q, want user=appuser", l)
	}
	if _, found, err := root.Get(ctx, "other"); err != nil || found {
		t.Fatalf("the refused SET other: found %v, %v", found, err)
	}
	hello := dialRaw(t, addr)
	expect(t, hello, [2]string{"HELLO 3 AUTH appuser s3cret\r\n", "%7"})

	// A user created after the proxy fetched the users can AUTH at once.
	if _, err := root.AddUser(ctx, "late", "pw2", "app"); err != nil {
		t.Fatal(err)
	}
	expect(t, dialRaw(t, addr), [2]string{"AUTH late pw2\r\n", "+OK"})

	if _, err := root.RevokeUser(ctx, "appuser", "app"); err != nil {
		t.Fatal(err)
	}
	eventuallyReply(t, conn, "GET app/x\r\n", "-NOPERM")
	if _, err := root.DeleteUser(ctx, "appuser"); err != nil {
		t.Fatal(err)
	}
	eventuallyReply(t, conn, "GET app/x\r\n", "-NOAUTH")
}

// Beyond ConnectionsPerAddressMax, a connection from the same address is
// refused with an error that says so; closing one frees a place.
func TestConnectionsPerAddress(t *testing.T) {
	addr := serve(t, resp.Options{Store: failingStore{}, ConnectionsPerAddressMax: 2})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, c := range []*rawConn{a, b} {
		expect(t, c, [2]string{"PING\r\n", "+PONG"})
	}
	third := dialRaw(t, addr)
	if l, err := third.line(); l != "-ERR max number of clients reached from this address" {
		t.Fatalf("third connection got %q, %v", l, err)
	}
	b.nc.Close()
	for deadline := time.Now().Add(testTimeout); ; {
		c := dialRaw(t, addr)
		c.write("PING\r\n")
		if l, _ := c.line(); l == "+PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
