package wire

import (
	"fmt"
	"strings"
)

// Users, roles and permissions (docs/adr/0015-security.md): part of the
// master's replicated state, changed by AuthRequests, and learned by the
// servers (HeartbeatReply.Auth, NewAuth), which check every client
// request against them. Authorization is on once a user exists.

// ClientPrefix starts the ids of nodes that do not listen (clients and
// proxies): their requests are the ones authorization checks.
const ClientPrefix = "client/"

// IsClient reports whether id names a client rather than a cluster
// member (a master or server).
func IsClient(id NodeID) bool { return strings.HasPrefix(string(id), ClientPrefix) }

// Caller is who sent a message over a client connection, as the
// receiving node's transport proved it from the connection's certificate.
// It is never encoded: the transport sets it on every ClientRequest,
// AuthRequest and KeyspaceRequest it reads from a client connection, so
// no sender can claim one. Zero: a connection without a certificate.
type Caller struct {
	// Name is the certificate's name (a user name).
	Name string
	// Proxy says the certificate's role is proxy: it may send requests
	// for the users it authenticated (ClientRequest.User).
	Proxy bool
}

// Principal returns the user a request runs as: a client certificate's
// name; for a proxy's certificate the user the proxy names (claimed), or
// the proxy's own name when it names none; "" without a certificate.
func (c Caller) Principal(claimed string) string {
	if c.Proxy && claimed != "" {
		return claimed
	}
	return c.Name
}

// Access is what a grant lets a user do with keys.
type Access uint8

// The accesses, each including the one before.
const (
	AccessNone Access = iota
	// AccessRead allows queries (get).
	AccessRead
	// AccessReadWrite allows queries and updates.
	AccessReadWrite
)

func (a Access) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessRead:
		return "read"
	case AccessReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// ParseAccess parses "read" or "readwrite".
func ParseAccess(s string) (Access, error) {
	switch s {
	case "read":
		return AccessRead, nil
	case "readwrite", "read-write", "rw":
		return AccessReadWrite, nil
	}
	return 0, fmt.Errorf("unknown access %q (want read or readwrite)", s)
}

// Grant gives Access to the keys of one keyspace (Keyspace set), or to
// the keys that start with Prefix (Keyspace empty; an empty Prefix
// covers every key).
type Grant struct {
	Keyspace string
	Prefix   string
	Access   Access
}

// SameTarget reports whether two grants cover the same keys (a role
// holds one grant per target).
func (g Grant) SameTarget(o Grant) bool { return g.Keyspace == o.Keyspace && g.Prefix == o.Prefix }

// Target describes the keys the grant covers.
func (g Grant) Target() string {
	switch {
	case g.Keyspace != "":
		return "keyspace " + g.Keyspace
	case g.Prefix == "":
		return "every key"
	}
	return fmt.Sprintf("prefix %q", g.Prefix)
}

func (g Grant) String() string { return g.Target() + ": " + g.Access.String() }

// AdminRole names the built-in role that may read and write every key
// and change users and roles. It is not among AuthTable.Roles and cannot
// be changed.
const AdminRole = "admin"

// Role is a named set of grants, at most one per target.
type Role struct {
	Name   string
	Grants []Grant
}

// User is someone requests run as: a client certificate's name, or a
// user a proxy authenticated with a password (Redis AUTH).
type User struct {
	Name string
	// PasswordHash is the argon2id hash of the user's password in PHC
	// format (security.HashPassword); empty: none, the user
	// authenticates with a certificate only. Redacted (parameters only,
	// security.RedactPasswordHash) in what the master sends but to a
	// proxy, and empty in what servers hold.
	PasswordHash string
	// Roles are the roles the user holds, in increasing order.
	Roles []string
}

// AuthTable is the users and roles of the master's state.
type AuthTable struct {
	// Version counts the changes applied (0: none ever): a server or
	// proxy takes a table only if it is newer than the one it holds.
	Version uint64
	// Users and Roles are in increasing order of name.
	Users []User
	Roles []Role
}

// Enabled reports whether authorization is on: some user exists.
func (t AuthTable) Enabled() bool { return len(t.Users) > 0 }

// Clone returns a deep copy.
func (t AuthTable) Clone() AuthTable {
	out := AuthTable{Version: t.Version}
	if t.Users != nil {
		out.Users = make([]User, len(t.Users))
		for i, u := range t.Users {
			u.Roles = append([]string(nil), u.Roles...)
			out.Users[i] = u
		}
	}
	if t.Roles != nil {
		out.Roles = make([]Role, len(t.Roles))
		for i, r := range t.Roles {
			r.Grants = append([]Grant(nil), r.Grants...)
			out.Roles[i] = r
		}
	}
	return out
}

// AuthOp names an AuthRequest's operation.
type AuthOp uint8

// The operations.
const (
	// AuthList reads the users and roles (password hashes redacted).
	AuthList AuthOp = iota + 1
	// AuthFetch reads them with the password hashes: for a proxy's
	// certificate only, which verifies the passwords of Redis AUTH.
	AuthFetch
	// AuthUserAdd creates User with PasswordHash (optional) and Roles.
	AuthUserAdd
	// AuthUserDelete deletes User.
	AuthUserDelete
	// AuthUserPassword sets User's PasswordHash (empty: removes it).
	AuthUserPassword
	// AuthUserGrant gives User the role Role; AuthUserRevoke takes it.
	AuthUserGrant
	AuthUserRevoke
	// AuthRoleAdd creates the role Role, with no grant.
	AuthRoleAdd
	// AuthRoleDelete deletes Role (no user may hold it).
	AuthRoleDelete
	// AuthRoleGrant adds Grant to Role, replacing one of the same
	// target; AuthRoleRevoke removes Role's grant of Grant's target.
	AuthRoleGrant
	AuthRoleRevoke
)

var authOpNames = map[AuthOp]string{
	AuthList: "list", AuthFetch: "fetch", AuthUserAdd: "user add", AuthUserDelete: "user del",
	AuthUserPassword: "user passwd", AuthUserGrant: "user grant", AuthUserRevoke: "user revoke",
	AuthRoleAdd: "role add", AuthRoleDelete: "role del", AuthRoleGrant: "role grant", AuthRoleRevoke: "role revoke",
}

func (o AuthOp) String() string {
	if s, ok := authOpNames[o]; ok {
		return s
	}
	return fmt.Sprintf("auth-op(%d)", uint8(o))
}

// Valid reports whether o is a known operation.
func (o AuthOp) Valid() bool { _, ok := authOpNames[o]; return ok }

// ReadOnly reports whether the operation only reads.
func (o AuthOp) ReadOnly() bool { return o == AuthList || o == AuthFetch }

// AuthChange is what an AuthRequest asks: Op and the fields it uses.
type AuthChange struct {
	Op           AuthOp
	User         string
	Role         string
	PasswordHash string
	Roles        []string
	Grant        Grant
}

func (c AuthChange) String() string {
	switch c.Op {
	case AuthUserAdd:
		return fmt.Sprintf("user add %s roles %v password %t", c.User, c.Roles, c.PasswordHash != "")
	case AuthUserDelete, AuthUserPassword:
		return fmt.Sprintf("%s %s", c.Op, c.User)
	case AuthUserGrant, AuthUserRevoke:
		return fmt.Sprintf("%s %s %s", c.Op, c.User, c.Role)
	case AuthRoleAdd, AuthRoleDelete:
		return fmt.Sprintf("%s %s", c.Op, c.Role)
	case AuthRoleGrant:
		return fmt.Sprintf("%s %s %s", c.Op, c.Role, c.Grant)
	case AuthRoleRevoke:
		return fmt.Sprintf("%s %s %s", c.Op, c.Role, c.Grant.Target())
	}
	return c.Op.String()
}
