package master

import (
	"strings"
	"sync"
	"testing"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// testHash is a valid argon2id hash, made once (a hash costs tens of
// milliseconds).
var testHash = sync.OnceValue(func() string {
	h, err := security.HashPassword("pw", security.PasswordParamsDefault)
	if err != nil {
		panic(err)
	}
	return h
})

// authTestTable has admin root, reader bob and role readers (read on
// keyspace feed, read-write on prefix "pub/").
func authTestTable() wire.AuthTable {
	return wire.AuthTable{Version: 4,
		Users: []wire.User{{Name: "bob", Roles: []string{"readers"}}, {Name: "root", Roles: []string{wire.AdminRole}}},
		Roles: []wire.Role{{Name: "empty"}, {Name: "readers", Grants: []wire.Grant{
			{Keyspace: "feed", Access: wire.AccessRead}, {Prefix: "pub/", Access: wire.AccessReadWrite}}}},
	}
}

var authTestKeyspaces = []wire.Keyspace{{Name: wire.DefaultKeyspace}, {Name: "feed", Prefix: "f/"}}

// Every change that cannot apply is refused with a reason, and leaves the
// users and roles as they were; retries of applied changes are noops.
func TestValidateAuthChange(t *testing.T) {
	c := func(op wire.AuthOp) wire.AuthChange { return wire.AuthChange{Op: op} }
	with := func(ch wire.AuthChange, f func(*wire.AuthChange)) wire.AuthChange { f(&ch); return ch }
	for _, tc := range []struct {
		name   string
		table  wire.AuthTable
		change wire.AuthChange
		noop   bool
		err    string
	}{
		{"add a user", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "carol", Roles: []string{"readers"}}, false, ""},
		{"add a user with a password", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "carol", PasswordHash: testHash()}, false, ""},
		{"add an existing user as it is", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "bob", Roles: []string{"readers"}}, true, ""},
		{"add an existing user otherwise", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "bob"}, false, "exists"},
		{"empty user name", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd}, false, "user name"},
		{"user name with a space", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "a b"}, false, "without spaces"},
		{"user name too long", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: strings.Repeat("u", 65)}, false, "1 to 64 bytes"},
		{"unknown role", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "carol", Roles: []string{"nope"}}, false, "role \"nope\" does not exist"},
		{"roles out of order", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "carol", Roles: []string{"readers", "empty"}}, false, "increasing order"},
		{"plaintext password", authTestTable(), wire.AuthChange{Op: wire.AuthUserAdd, User: "carol", PasswordHash: "hunter2"}, false, "argon2id"},
		{"first user without admin", wire.AuthTable{}, wire.AuthChange{Op: wire.AuthUserAdd, User: "root"}, false, "first user must hold role admin"},
		{"first user with admin", wire.AuthTable{}, wire.AuthChange{Op: wire.AuthUserAdd, User: "root", Roles: []string{wire.AdminRole}}, false, ""},
		{"delete a user", authTestTable(), wire.AuthChange{Op: wire.AuthUserDelete, User: "bob"}, false, ""},
		{"delete an unknown user", authTestTable(), wire.AuthChange{Op: wire.AuthUserDelete, User: "zed"}, false, "does not exist"},
		{"delete the last admin", authTestTable(), wire.AuthChange{Op: wire.AuthUserDelete, User: "root"}, false, "last user with role admin"},
		{"set a password", authTestTable(), wire.AuthChange{Op: wire.AuthUserPassword, User: "bob", PasswordHash: testHash()}, false, ""},
		{"remove no password", authTestTable(), wire.AuthChange{Op: wire.AuthUserPassword, User: "bob"}, true, ""},
		{"bad password hash", authTestTable(), wire.AuthChange{Op: wire.AuthUserPassword, User: "bob", PasswordHash: "$argon2id$v=19$m=1,t=1,p=1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA"}, false, "memory 1 KiB"},
		{"grant a role", authTestTable(), wire.AuthChange{Op: wire.AuthUserGrant, User: "bob", Role: "empty"}, false, ""},
		{"grant admin", authTestTable(), wire.AuthChange{Op: wire.AuthUserGrant, User: "bob", Role: wire.AdminRole}, false, ""},
		{"grant a held role", authTestTable(), wire.AuthChange{Op: wire.AuthUserGrant, User: "bob", Role: "readers"}, true, ""},
		{"grant an unknown role", authTestTable(), wire.AuthChange{Op: wire.AuthUserGrant, User: "bob", Role: "x"}, false, "does not exist"},
		{"grant to an unknown user", authTestTable(), wire.AuthChange{Op: wire.AuthUserGrant, User: "zed", Role: "readers"}, false, "does not exist"},
		{"revoke a role", authTestTable(), wire.AuthChange{Op: wire.AuthUserRevoke, User: "bob", Role: "readers"}, false, ""},
		{"revoke a role not held", authTestTable(), wire.AuthChange{Op: wire.AuthUserRevoke, User: "bob", Role: "empty"}, false, "does not hold"},
		{"revoke the last admin's admin", authTestTable(), wire.AuthChange{Op: wire.AuthUserRevoke, User: "root", Role: wire.AdminRole}, false, "last user with role admin"},
		{"add a role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleAdd, Role: "writers"}, false, ""},
		{"add an existing role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleAdd, Role: "readers"}, true, ""},
		{"add role admin", authTestTable(), wire.AuthChange{Op: wire.AuthRoleAdd, Role: wire.AdminRole}, false, "built in"},
		{"bad role name", authTestTable(), wire.AuthChange{Op: wire.AuthRoleAdd, Role: "a/b"}, false, "role name"},
		{"delete a role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleDelete, Role: "empty"}, false, ""},
		{"delete a held role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleDelete, Role: "readers"}, false, "held by bob"},
		{"delete role admin", authTestTable(), wire.AuthChange{Op: wire.AuthRoleDelete, Role: wire.AdminRole}, false, "built in"},
		{"delete an unknown role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleDelete, Role: "x"}, false, "does not exist"},
		{"grant on a keyspace", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Keyspace: "feed", Access: wire.AccessRead}}, false, ""},
		{"grant on every key", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Access: wire.AccessReadWrite}}, false, ""},
		{"grant the same again", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "readers", Grant: wire.Grant{Keyspace: "feed", Access: wire.AccessRead}}, true, ""},
		{"grant on a target again, other access", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "readers", Grant: wire.Grant{Keyspace: "feed", Access: wire.AccessReadWrite}}, false, ""},
		{"grant on an unknown keyspace", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Keyspace: "nope", Access: wire.AccessRead}}, false, "keyspace \"nope\" does not exist"},
		{"grant on a keyspace and a prefix", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Keyspace: "feed", Prefix: "x", Access: wire.AccessRead}}, false, "not both"},
		{"grant no access", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Prefix: "x"}}, false, "grant read or readwrite"},
		{"grant an unknown access", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Prefix: "x", Access: 7}}, false, "grant read or readwrite"},
		{"grant on an overlong prefix", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "empty", Grant: wire.Grant{Prefix: strings.Repeat("p", 1025), Access: wire.AccessRead}}, false, "keys are at most"},
		{"grant to role admin", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: wire.AdminRole, Grant: wire.Grant{Access: wire.AccessRead}}, false, "built in"},
		{"grant to an unknown role", authTestTable(), wire.AuthChange{Op: wire.AuthRoleGrant, Role: "x", Grant: wire.Grant{Access: wire.AccessRead}}, false, "does not exist"},
		{"revoke a grant", authTestTable(), wire.AuthChange{Op: wire.AuthRoleRevoke, Role: "readers", Grant: wire.Grant{Prefix: "pub/"}}, false, ""},
		{"revoke a grant not given", authTestTable(), wire.AuthChange{Op: wire.AuthRoleRevoke, Role: "readers", Grant: wire.Grant{Prefix: "pub"}}, false, "no grant on prefix \"pub\""},
		{"unknown operation", authTestTable(), c(99), false, "unknown operation"},
		{"no operation", authTestTable(), c(0), false, "unknown operation"},
		{"list", authTestTable(), c(wire.AuthList), true, ""},
		{"user add with too many roles", authTestTable(), with(wire.AuthChange{Op: wire.AuthUserAdd, User: "x"}, func(ch *wire.AuthChange) {
			for i := range RolesPerUserMax + 1 {
				ch.Roles = append(ch.Roles, strings.Repeat("r", i+1))
			}
		}), false, "at most 64 per user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.table.Clone()
			noop, err := ValidateAuthChange(&tc.table, authTestKeyspaces, tc.change)
			if !authEqual(&before, &tc.table) {
				t.Fatalf("validating changed the table")
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case noop != tc.noop:
				t.Fatalf("noop = %v, want %v", noop, tc.noop)
			}
			if err != nil || noop {
				return
			}
			applyAuthChange(&tc.table, tc.change)
			if tc.table.Version != before.Version+1 {
				t.Fatalf("version %d after a change from %d", tc.table.Version, before.Version)
			}
			// Applied once, the same change is a noop or refused: never
			// applied twice.
			if noop, err := ValidateAuthChange(&tc.table, authTestKeyspaces, tc.change); err == nil && !noop {
				t.Fatalf("the change validates again as a change after it applied: %+v", tc.table)
			}
		})
	}
}

// authMaster is a single master with three servers registered.
func authMaster(t *testing.T) *Master {
	t.Helper()
	m, err := New("m", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []wire.NodeID{"a", "b", "c"} {
		m.Step(0, id, &wire.Heartbeat{Incarnation: 1})
	}
	return m
}

// authStep sends an AuthRequest from caller and returns the reply to it
// and the NewAuth pushes to servers.
func authStep(t *testing.T, m *Master, caller wire.Caller, id uint64, change wire.AuthChange) (*wire.AuthReply, map[wire.NodeID]*wire.NewAuth) {
	t.Helper()
	var reply *wire.AuthReply
	pushes := map[wire.NodeID]*wire.NewAuth{}
	for _, env := range m.Step(1, "client/x", &wire.AuthRequest{ID: id, Change: change, Caller: caller}) {
		switch msg := env.Msg.(type) {
		case *wire.AuthReply:
			if env.To != "client/x" || msg.ID != id {
				t.Fatalf("reply %+v to %s", msg, env.To)
			}
			reply = msg
		case *wire.NewAuth:
			pushes[env.To] = msg
		}
	}
	if reply == nil {
		t.Fatalf("no reply to %s", change)
	}
	return reply, pushes
}

// Users and roles through the master: who may change them, refusals that
// change nothing, pushes to the servers, heartbeat replies that carry a
// newer table, hashes only for proxies, and the saved state.
func TestAuthThroughMaster(t *testing.T) {
	m := authMaster(t)
	root := wire.Caller{Name: "root"}
	refused := func(caller wire.Caller, change wire.AuthChange, want string) {
		t.Helper()
		before := m.State()
		reply, pushes := authStep(t, m, caller, 1000, change)
		if reply.Err == "" || !strings.Contains(reply.Err, want) {
			t.Fatalf("%s by %+v: reply %+v, want an error containing %q", change, caller, reply, want)
		}
		if len(pushes) > 0 || !before.Equal(m.State()) {
			t.Fatalf("%s by %+v was refused but changed the state or pushed %v", change, caller, pushes)
		}
	}
	// The first user turns authorization on: over TLS, the caller itself,
	// with role admin.
	refused(wire.Caller{}, wire.AuthChange{Op: wire.AuthUserAdd, User: "root", Roles: []string{wire.AdminRole}}, "needs TLS")
	refused(root, wire.AuthChange{Op: wire.AuthUserAdd, User: "alice", Roles: []string{wire.AdminRole}}, "own certificate user \"root\"")
	refused(root, wire.AuthChange{Op: wire.AuthUserAdd, User: "root"}, "first user must hold role admin")
	if len(m.Denials()) != 2 {
		t.Fatalf("the refused callers were not recorded for the log")
	}
	reply, pushes := authStep(t, m, root, 1, wire.AuthChange{Op: wire.AuthUserAdd, User: "root", Roles: []string{wire.AdminRole}})
	if reply.Err != "" || !reply.Table.Enabled() || reply.Table.Version != 1 {
		t.Fatalf("first user: %+v", reply)
	}
	for _, id := range []wire.NodeID{"a", "b", "c"} {
		if p := pushes[id]; p == nil || p.Table.Version != 1 || len(p.Table.Users) != 1 {
			t.Fatalf("server %s was pushed %+v", id, p)
		}
	}
	// Now only admins may change or list, and proxies fetch.
	refused(wire.Caller{}, wire.AuthChange{Op: wire.AuthList}, "authentication required")
	refused(wire.Caller{Name: "mallory"}, wire.AuthChange{Op: wire.AuthRoleAdd, Role: "r"}, "not a user of the cluster")
	refused(wire.Caller{Name: "mallory"}, wire.AuthChange{Op: wire.AuthFetch}, "only a proxy's certificate or an admin")
	refused(root, wire.AuthChange{Op: 42}, "unknown operation")
	refused(root, wire.AuthChange{Op: wire.AuthUserDelete, User: "root"}, "last user with role admin")
	if r, _ := authStep(t, m, root, 2, wire.AuthChange{Op: wire.AuthRoleAdd, Role: "readers"}); r.Err != "" {
		t.Fatal(r.Err)
	}
	if r, _ := authStep(t, m, root, 3, wire.AuthChange{Op: wire.AuthRoleGrant, Role: "readers", Grant: wire.Grant{Prefix: "p/", Access: wire.AccessRead}}); r.Err != "" {
		t.Fatal(r.Err)
	}
	// Roles given in any order are stored sorted.
	if r, _ := authStep(t, m, root, 4, wire.AuthChange{Op: wire.AuthUserAdd, User: "bob", PasswordHash: testHash(), Roles: []string{"readers", "readers"}}); r.Err != "" {
		t.Fatal(r.Err)
	}
	refused(wire.Caller{Name: "bob"}, wire.AuthChange{Op: wire.AuthUserGrant, User: "bob", Role: wire.AdminRole}, "needs role admin")
	refused(wire.Caller{Name: "bob"}, wire.AuthChange{Op: wire.AuthList}, "needs role admin")
	// A proxy claiming a user gets its own identity for AuthRequests.
	refused(wire.Caller{Name: "proxy1", Proxy: true}, wire.AuthChange{Op: wire.AuthList}, "not a user")

	list, _ := authStep(t, m, root, 5, wire.AuthChange{Op: wire.AuthList})
	if list.Err != "" || len(list.Table.Users) != 2 || list.Table.Users[0].Name != "bob" || list.Table.Users[0].PasswordHash != "argon2id m=19456,t=2,p=1" {
		t.Fatalf("list %+v: want bob (hash redacted) and root", list)
	}
	fetch, _ := authStep(t, m, wire.Caller{Name: "proxy1", Proxy: true}, 6, wire.AuthChange{Op: wire.AuthFetch})
	if fetch.Err != "" || fetch.Table.Users[0].PasswordHash != testHash() {
		t.Fatalf("a proxy's fetch %+v: want bob's hash", fetch)
	}
	refused(wire.Caller{Name: "bob"}, wire.AuthChange{Op: wire.AuthFetch}, "needs role admin")
	// An admin fetches them too, for a backup.
	if fetch, _ := authStep(t, m, root, 7, wire.AuthChange{Op: wire.AuthFetch}); fetch.Err != "" || fetch.Table.Users[0].PasswordHash != testHash() {
		t.Fatalf("an admin's fetch %+v: want bob's hash", fetch)
	}
	if v := m.AuthTable().Version; v != 4 {
		t.Fatalf("version %d after 4 changes", v)
	}

	// Heartbeat replies carry the table, without hashes, to a server
	// that holds an older one, and nothing to one that holds it.
	replies := map[uint64]*wire.HeartbeatReply{}
	for _, have := range []uint64{0, 3, 4} {
		for _, env := range m.Step(2, "a", &wire.Heartbeat{Incarnation: 1, SentAt: 2, AuthVersion: have}) {
			if r, ok := env.Msg.(*wire.HeartbeatReply); ok {
				replies[have] = r
			}
		}
	}
	for have, r := range replies {
		switch {
		case have < 4 && (r.Auth == nil || r.Auth.Version != 4 || r.Auth.Users[0].PasswordHash != ""):
			t.Errorf("a server holding version %d got %+v, want version 4 without hashes", have, r.Auth)
		case have == 4 && r.Auth != nil:
			t.Errorf("a server holding the current version was sent %+v", r.Auth)
		}
	}

	// With users, creating a keyspace needs role admin too.
	ks := wire.Keyspace{Name: "feed", Prefix: "f/", ReplicationFactor: 3, Volumes: 1}
	before := m.State()
	out := m.Step(3, "client/x", &wire.KeyspaceRequest{Create: ks, Caller: wire.Caller{Name: "bob"}})
	if len(out) != 1 || !strings.Contains(out[0].Msg.(*wire.KeyspaceReply).Err, "needs role admin") || !before.Equal(m.State()) {
		t.Fatalf("bob's keyspace: %v", out)
	}
	out = m.Step(3, "client/x", &wire.KeyspaceRequest{Create: ks, Caller: root})
	if len(m.Keyspaces()) != 2 {
		t.Fatalf("root's keyspace: %v", out)
	}

	// The users and roles survive a restart.
	o := testOptions()
	restored, err := Restore("m", Options{FailureTimeout: o.FailureTimeout, LeaseDuration: o.LeaseDuration, ClockDriftMax: o.ClockDriftMax, ExtensionTimeout: o.ExtensionTimeout}, saveAndLoad(t, m.State()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := restored.AuthTable(), m.AuthTable(); !authEqual(&got, &want) {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
}

// A change a client resends before it applied is proposed once, and
// answered once, when it applies.
func TestAuthRetryProposedOnce(t *testing.T) {
	n := newMembers(t, 0, "m1", "m2", "m3")
	n.startAll(testOptions())
	n.run(wire.Second, "a", "b", "c")
	l := n.leader()
	if l == nil {
		t.Fatal("no leader")
	}
	req := &wire.AuthRequest{ID: 77, Change: wire.AuthChange{Op: wire.AuthUserAdd, User: "root", Roles: []string{wire.AdminRole}}, Caller: wire.Caller{Name: "root"}}
	// The request and its retry reach the leader before anything is
	// delivered: one proposal.
	out := append(l.Step(n.now, "client/x", req), l.Step(n.now, "client/x", req)...)
	var replies int
	for _, env := range out {
		if _, ok := env.Msg.(*wire.AuthReply); ok {
			replies++
		}
	}
	if replies != 0 {
		t.Fatalf("answered before the change committed")
	}
	var toClient []*wire.AuthReply
	var toMembers []wire.Envelope
	for _, env := range out {
		if r, ok := env.Msg.(*wire.AuthReply); ok {
			toClient = append(toClient, r)
		} else {
			toMembers = append(toMembers, env)
		}
	}
	// Deliver among members, collecting what goes to the client.
	type msg struct {
		from wire.NodeID
		env  wire.Envelope
	}
	queue := []msg{}
	for _, e := range toMembers {
		queue = append(queue, msg{l.Master().id, e})
	}
	for i := 0; i < 200 && len(toClient) < 1; i++ {
		for len(queue) > 0 {
			mm := queue[0]
			queue = queue[1:]
			if mm.env.To == "client/x" {
				if r, ok := mm.env.Msg.(*wire.AuthReply); ok {
					toClient = append(toClient, r)
				}
				continue
			}
			if r := n.up[mm.env.To]; r != nil {
				for _, e := range r.Step(n.now, mm.from, mm.env.Msg) {
					queue = append(queue, msg{mm.env.To, e})
				}
			}
		}
		n.now += 10 * wire.Millisecond
		for _, id := range n.ids {
			for _, e := range n.up[id].Tick(n.now) {
				queue = append(queue, msg{id, e})
			}
		}
	}
	n.run(100 * wire.Millisecond)
	if len(toClient) != 1 || toClient[0].Err != "" || toClient[0].Table.Version != 1 {
		t.Fatalf("replies %+v, want one success", toClient)
	}
	for _, id := range n.ids {
		if tb := n.up[id].Master().AuthTable(); tb.Version != 1 || len(tb.Users) != 1 {
			t.Fatalf("member %s holds %+v, want the one change applied once", id, tb)
		}
	}
}
