package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Users and roles (catena user, catena role; docs/operations.md
// "Users and roles"). Once a user exists, every operation runs as a
// user, the client certificate's (or, through a proxy, the Redis user
// its connection authenticated as), and the servers allow it only if
// one of the user's roles grants it: read, or read-write, on a keyspace
// or on a key prefix. Role admin, built in, allows everything and
// changing users and roles. These calls need a certificate of a user
// with role admin once authorization is on; the first user created
// must be the caller's own, with role admin.

// Auth is the cluster's users and roles.
type Auth struct {
	// Version counts the changes made to them.
	Version uint64 `json:"version"`
	Users   []User `json:"users"`
	Roles   []Role `json:"roles"`
}

// User is a user of the cluster.
type User struct {
	Name string `json:"name"`
	// Password describes the user's password hash ("argon2id
	// m=19456,t=2,p=1"), empty for a user without a password; a proxy's
	// FetchAuth holds the hash itself.
	Password string   `json:"password,omitempty"`
	Roles    []string `json:"roles"`
}

// Role is a named set of grants.
type Role struct {
	Name   string  `json:"name"`
	Grants []Grant `json:"grants"`
}

// Grant gives access to the keys of a keyspace (Keyspace set) or to the
// keys that start with Prefix (an empty Prefix: every key).
type Grant struct {
	Keyspace string `json:"keyspace,omitempty"`
	Prefix   string `json:"prefix"`
	// Access is "read" or "readwrite".
	Access string `json:"access"`
}

// AdminRole names the built-in role that allows everything.
const AdminRole = wire.AdminRole

func authOf(t wire.AuthTable) Auth {
	a := Auth{Version: t.Version, Users: []User{}, Roles: []Role{}}
	for _, u := range t.Users {
		a.Users = append(a.Users, User{Name: u.Name, Password: u.PasswordHash, Roles: append([]string{}, u.Roles...)})
	}
	for _, r := range t.Roles {
		role := Role{Name: r.Name, Grants: []Grant{}}
		for _, g := range r.Grants {
			role.Grants = append(role.Grants, Grant{Keyspace: g.Keyspace, Prefix: g.Prefix, Access: g.Access.String()})
		}
		a.Roles = append(a.Roles, role)
	}
	return a
}

// Auth returns the users and roles, password hashes reduced to their
// parameters.
func (c *Client) Auth(ctx context.Context) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthList})
}

// FetchAuth returns the users and roles with their password hashes: for
// a proxy (a certificate of role proxy), which checks the passwords of
// the Redis protocol's AUTH, and for an admin's backup.
func (c *Client) FetchAuth(ctx context.Context) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthFetch})
}

// AddUser creates a user holding roles, with a password (hashed here
// with argon2id: it never leaves this process) or, for "", none: such a
// user authenticates with a client certificate naming it only. The
// first user turns authorization on: it must be this client's own
// certificate user, with role admin.
func (c *Client) AddUser(ctx context.Context, name, password string, roles ...string) (Auth, error) {
	change := wire.AuthChange{Op: wire.AuthUserAdd, User: name, Roles: roles}
	if password != "" {
		hash, err := security.HashPassword(password, security.PasswordParamsDefault)
		if err != nil {
			return Auth{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		change.PasswordHash = hash
	}
	return c.authRequest(ctx, change)
}

// AddUserHashed creates a user as AddUser does, with a password hash
// (security.HashPassword's PHC string, as FetchAuth returns it) in place
// of the password: a restore's (docs/adr/0030).
func (c *Client) AddUserHashed(ctx context.Context, name, passwordHash string, roles ...string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthUserAdd, User: name, PasswordHash: passwordHash, Roles: roles})
}

// DeleteUser deletes a user: its connections lose access at their next
// request.
func (c *Client) DeleteUser(ctx context.Context, name string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthUserDelete, User: name})
}

// SetPassword sets a user's password ("": removes it).
func (c *Client) SetPassword(ctx context.Context, name, password string) (Auth, error) {
	change := wire.AuthChange{Op: wire.AuthUserPassword, User: name}
	if password != "" {
		hash, err := security.HashPassword(password, security.PasswordParamsDefault)
		if err != nil {
			return Auth{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		change.PasswordHash = hash
	}
	return c.authRequest(ctx, change)
}

// GrantUser gives a user a role.
func (c *Client) GrantUser(ctx context.Context, name, role string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthUserGrant, User: name, Role: role})
}

// RevokeUser takes a role from a user.
func (c *Client) RevokeUser(ctx context.Context, name, role string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthUserRevoke, User: name, Role: role})
}

// AddRole creates a role with no grant.
func (c *Client) AddRole(ctx context.Context, role string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthRoleAdd, Role: role})
}

// DeleteRole deletes a role no user holds.
func (c *Client) DeleteRole(ctx context.Context, role string) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthRoleDelete, Role: role})
}

// GrantRole adds a grant to a role, replacing its grant on the same
// keys if it has one.
func (c *Client) GrantRole(ctx context.Context, role string, g Grant) (Auth, error) {
	access, err := wire.ParseAccess(g.Access)
	if err != nil {
		return Auth{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthRoleGrant, Role: role,
		Grant: wire.Grant{Keyspace: g.Keyspace, Prefix: g.Prefix, Access: access}})
}

// RevokeRole removes a role's grant on the keys g names (its Access is
// not looked at).
func (c *Client) RevokeRole(ctx context.Context, role string, g Grant) (Auth, error) {
	return c.authRequest(ctx, wire.AuthChange{Op: wire.AuthRoleRevoke, Role: role, Grant: wire.Grant{Keyspace: g.Keyspace, Prefix: g.Prefix}})
}

// authRequest sends a request to every master member until the leader
// answers, resending after each attempt timeout under the same id (the
// leader proposes a change once however often it is resent).
func (c *Client) authRequest(ctx context.Context, change wire.AuthChange) (Auth, error) {
	var b [8]byte
	rand.Read(b[:])
	req := &wire.AuthRequest{ID: binary.LittleEndian.Uint64(b[:]), Change: change}
	var out Auth
	err := askMasters(ctx, c, req, &c.authWaiters, "no master leader answered", func(r *wire.AuthReply) (bool, error) {
		if r.ID != req.ID {
			return false, nil
		}
		if r.Err != "" {
			return true, fmt.Errorf("%w: %s", ErrRefused, r.Err)
		}
		out = authOf(r.Table)
		return true, nil
	}, nil)
	return out, err
}
