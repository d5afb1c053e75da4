package chain

import (
	"testing"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// authServer is the sole member of the default keyspace (volume 0) and
// of keyspace feed (prefix "f/", volume 1), with a lease and users: root
// (admin), bob (role readers: read on feed, read-write on prefix
// "pub/"), carol (no role).
func authServer(t *testing.T) *Server {
	t.Helper()
	s := NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
	s.Step(0, "m", &wire.HeartbeatReply{SentAt: 0, LeaseGranted: true, LeaseFor: 1000 * wire.Second,
		Configs:   []wire.Config{{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"s"}}, {Volume: 1, Epoch: 1, Chain: []wire.NodeID{"s"}}},
		Keyspaces: authKeyspaces, Auth: &wire.AuthTable{Version: 3,
			Users: []wire.User{{Name: "bob", Roles: []string{"readers"}}, {Name: "carol"}, {Name: "root", Roles: []string{wire.AdminRole}}},
			Roles: []wire.Role{{Name: "readers", Grants: []wire.Grant{{Keyspace: "feed", Access: wire.AccessRead}, {Prefix: "pub/", Access: wire.AccessReadWrite}}}},
		}})
	if s.AuthVersion() != 3 {
		t.Fatalf("the server holds users and roles version %d, want 3", s.AuthVersion())
	}
	return s
}

var authKeyspaces = []wire.Keyspace{
	{Name: wire.DefaultKeyspace, ReplicationFactor: 1, Volumes: 1},
	{Name: "feed", Prefix: "f/", ReplicationFactor: 1, FirstVolume: 1, Volumes: 1},
}

var reqNo uint64

// authRequest is a request for op routed as a client knowing the
// keyspaces routes it, sent by caller for user.
func authRequest(caller wire.Caller, user string, op wire.Op) *wire.ClientRequest {
	v, _ := placement.Route(authKeyspaces, op.Key)
	reqNo++
	return &wire.ClientRequest{Volume: v, Epoch: 1, Client: 9, ReqNo: reqNo, AckedBelow: reqNo, Op: op,
		Keyspaces: uint32(len(authKeyspaces)), User: user, Caller: caller}
}

// step sends a request from from and returns the reply's error code.
func authStep(t *testing.T, s *Server, from wire.NodeID, req *wire.ClientRequest) wire.ErrCode {
	t.Helper()
	for _, env := range s.Step(1, from, req) {
		if r, ok := env.Msg.(*wire.ClientReply); ok && env.To == from && r.ReqNo == req.ReqNo {
			return r.Err
		}
	}
	t.Fatalf("no reply to %v", req.Op)
	return 0
}

func get(key string) wire.Op { return wire.Op{Kind: wire.OpGet, Key: key} }
func put(key string) wire.Op { return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v")} }

// A user reads and writes what its roles grant, and nothing else: a
// refused write changes nothing. A user the server does not know, or a
// connection without a certificate, is refused as unauthenticated.
func TestServerAuthorizesClientRequests(t *testing.T) {
	s := authServer(t)
	bob, root := wire.Caller{Name: "bob"}, wire.Caller{Name: "root"}
	for _, tc := range []struct {
		name   string
		caller wire.Caller
		user   string
		op     wire.Op
		want   wire.ErrCode
	}{
		{"admin writes anywhere", root, "", put("f/1"), wire.ErrNone},
		{"admin writes the default keyspace", root, "", put("x"), wire.ErrNone},
		{"read on a keyspace granted", bob, "", get("f/1"), wire.ErrNone},
		{"write on a keyspace granted read", bob, "", put("f/1"), wire.ErrDenied},
		{"read outside the grants", bob, "", get("x"), wire.ErrDenied},
		{"write outside the grants", bob, "", put("x"), wire.ErrDenied},
		{"write under a prefix granted", bob, "", put("pub/a"), wire.ErrNone},
		{"read under a prefix granted", bob, "", get("pub/a"), wire.ErrNone},
		{"a prefix is not a keyspace", bob, "", put("pu"), wire.ErrDenied},
		{"increment is a write", bob, "", wire.Op{Kind: wire.OpIncrement, Key: "f/n", Delta: 1}, wire.ErrDenied},
		{"a user without roles", wire.Caller{Name: "carol"}, "", get("f/1"), wire.ErrDenied},
		{"an unknown user", wire.Caller{Name: "mallory"}, "", get("f/1"), wire.ErrUnauthenticated},
		{"no certificate", wire.Caller{}, "", get("f/1"), wire.ErrUnauthenticated},
		{"a client certificate cannot name another user", wire.Caller{Name: "carol"}, "root", put("x"), wire.ErrDenied},
		{"a proxy acts for the user it names", wire.Caller{Name: "proxy1", Proxy: true}, "bob", put("pub/b"), wire.ErrNone},
		{"a proxy for a user without the grant", wire.Caller{Name: "proxy1", Proxy: true}, "bob", put("f/2"), wire.ErrDenied},
		{"a proxy naming no user acts as itself", wire.Caller{Name: "proxy1", Proxy: true}, "", get("f/1"), wire.ErrUnauthenticated},
		{"waiting for stability reads nothing", wire.Caller{}, "", wire.Op{Kind: wire.OpWaitStable, Key: "f/1"}, wire.ErrNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Replica(0).AppliedSN() + s.Replica(1).AppliedSN()
			if got := authStep(t, s, "client/1", authRequest(tc.caller, tc.user, tc.op)); got != tc.want {
				t.Fatalf("%v by %+v for %q: %s, want %s", tc.op, tc.caller, tc.user, got, tc.want)
			}
			if after := s.Replica(0).AppliedSN() + s.Replica(1).AppliedSN(); tc.want != wire.ErrNone && after != before {
				t.Fatalf("a refused %v applied an update", tc.op)
			}
		})
	}
	// Members are not checked: the transport proved them.
	if got := authStep(t, s, "t", authRequest(wire.Caller{}, "", put("x"))); got != wire.ErrNone {
		t.Fatalf("a member's request: %s", got)
	}
}

// A change of the users and roles takes effect at the next request: a
// revoked role, a deleted user. Tables older than the one held, or from
// another node than a master, are ignored.
func TestServerLearnsRevocations(t *testing.T) {
	s := authServer(t)
	bob := wire.Caller{Name: "bob"}
	if got := authStep(t, s, "client/1", authRequest(bob, "", get("f/1"))); got != wire.ErrNone {
		t.Fatalf("bob's read: %s", got)
	}
	revoked := wire.AuthTable{Version: 4, Users: []wire.User{{Name: "bob"}, {Name: "root", Roles: []string{wire.AdminRole}}}}
	s.Step(2, "client/1", &wire.NewAuth{Table: revoked}) // not from a master
	if got := authStep(t, s, "client/1", authRequest(bob, "", get("f/1"))); got != wire.ErrNone {
		t.Fatalf("a table from a client was taken: bob's read %s", got)
	}
	s.Step(2, "m", &wire.NewAuth{Table: revoked})
	if got := authStep(t, s, "client/1", authRequest(bob, "", get("f/1"))); got != wire.ErrDenied {
		t.Fatalf("bob's read after his role was revoked: %s, want denied", got)
	}
	s.Step(3, "m", &wire.NewAuth{Table: wire.AuthTable{Version: 3, Users: []wire.User{{Name: "bob", Roles: []string{wire.AdminRole}}}}})
	if got := authStep(t, s, "client/1", authRequest(bob, "", get("f/1"))); got != wire.ErrDenied || s.AuthVersion() != 4 {
		t.Fatalf("an older table was taken: bob's read %s, version %d", got, s.AuthVersion())
	}
	deleted := wire.AuthTable{Version: 5, Users: []wire.User{{Name: "root", Roles: []string{wire.AdminRole}}}}
	s.Step(4, "m", &wire.HeartbeatReply{SentAt: 4, LeaseGranted: true, LeaseFor: 1000 * wire.Second, Auth: &deleted})
	if got := authStep(t, s, "client/1", authRequest(bob, "", get("f/1"))); got != wire.ErrUnauthenticated {
		t.Fatalf("deleted bob's read: %s, want unauthenticated", got)
	}
	var hb *wire.Heartbeat
	for _, env := range s.Tick(2 * wire.Second) {
		if h, ok := env.Msg.(*wire.Heartbeat); ok {
			hb = h
		}
	}
	if hb == nil || hb.AuthVersion != 5 {
		t.Fatalf("heartbeat %+v, want it to report version 5", hb)
	}
}

// Without users, authorization is off: every request is served as
// before.
func TestServerWithoutUsersServesEveryone(t *testing.T) {
	s := NewServer(ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: DefaultLimits, Engine: storage.NewMemoryEngine()})
	s.Step(0, "m", &wire.HeartbeatReply{SentAt: 0, LeaseGranted: true, LeaseFor: 1000 * wire.Second,
		Configs:   []wire.Config{{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"s"}}, {Volume: 1, Epoch: 1, Chain: []wire.NodeID{"s"}}},
		Keyspaces: authKeyspaces})
	if got := authStep(t, s, "client/1", authRequest(wire.Caller{}, "", put("f/1"))); got != wire.ErrNone {
		t.Fatalf("a write without users: %s", got)
	}
}
