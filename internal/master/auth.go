package master

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Users and roles (docs/adr/0015-security.md): part of the durable state
// (State.Auth, the Raft log), changed by CmdAuth commands that every
// member applies alike. The leader checks who asks (the caller's
// certificate, set by the transport: wire.AuthRequest.Caller), proposes
// the change, answers once it applied, and pushes the new table to the
// servers (NewAuth; heartbeat replies repair a lost push). Servers check
// every client request against it (chain/auth.go). Authorization is on
// while a user exists, and once on stays on: the last user holding the
// admin role cannot be deleted nor lose it.

// Bounds on the users and roles, kept here in one place.
const (
	UsersMax         = 10000
	RolesMax         = 1000
	RolesPerUserMax  = 64
	GrantsPerRoleMax = 256
	// AuthNameMax bounds user and role names.
	AuthNameMax = 64
	// authWaitersMax bounds the requests waiting for changes to apply.
	authWaitersMax = 1024
)

// authWaiter is who waits for an AuthRequest's change to apply.
type authWaiter struct {
	to wire.NodeID
	id uint64
}

// AuthTable returns the users and roles, password hashes included.
func (m *Master) AuthTable() wire.AuthTable { return m.auth.Clone() }

// serverAuthTable is the table servers hold: no password hashes.
func (m *Master) serverAuthTable() wire.AuthTable {
	t := m.auth.Clone()
	for i := range t.Users {
		t.Users[i].PasswordHash = ""
	}
	return t
}

// redactedAuthTable is the table catena user list shows: each password
// hash reduced to its parameters.
func (m *Master) redactedAuthTable() wire.AuthTable {
	t := m.auth.Clone()
	for i := range t.Users {
		t.Users[i].PasswordHash = security.RedactPasswordHash(t.Users[i].PasswordHash)
	}
	return t
}

// findUser returns the index of the user named name, or -1.
func findUser(t *wire.AuthTable, name string) int {
	i, ok := slices.BinarySearchFunc(t.Users, name, func(u wire.User, n string) int { return strings.Compare(u.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// findRole returns the index of the role named name, or -1.
func findRole(t *wire.AuthTable, name string) int {
	i, ok := slices.BinarySearchFunc(t.Roles, name, func(r wire.Role, n string) int { return strings.Compare(r.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// isAdmin reports whether the table's user name holds the admin role.
func isAdmin(t *wire.AuthTable, name string) bool {
	i := findUser(t, name)
	return i >= 0 && slices.Contains(t.Users[i].Roles, wire.AdminRole)
}

// admins counts the users holding the admin role.
func admins(t *wire.AuthTable) int {
	n := 0
	for _, u := range t.Users {
		if slices.Contains(u.Roles, wire.AdminRole) {
			n++
		}
	}
	return n
}

// validateUserName checks a user name: 1 to AuthNameMax printable bytes
// without spaces (a certificate's name, or a Redis user name).
func validateUserName(name string) error {
	if name == "" || len(name) > AuthNameMax {
		return fmt.Errorf("user name %q: want 1 to %d bytes", name, AuthNameMax)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("user name %q: want printable characters without spaces", name)
		}
	}
	return nil
}

// validateRoleName checks a role name: 1 to AuthNameMax letters, digits,
// '-', '_' or '.'.
func validateRoleName(name string) error {
	if name == "" || len(name) > AuthNameMax || !validName(name) {
		return fmt.Errorf("role name %q: use 1 to %d letters, digits, '-', '_' or '.'", name, AuthNameMax)
	}
	return nil
}

// normalizeAuthChange returns the change in the form the log carries:
// a user's roles sorted, without repeats.
func normalizeAuthChange(c wire.AuthChange) wire.AuthChange {
	c.Roles = slices.Clone(c.Roles)
	slices.Sort(c.Roles)
	c.Roles = slices.Compact(c.Roles)
	return c
}

// ValidateAuthChange reports why a change cannot be applied to the users
// and roles t beside keyspaces, or that it would change nothing (noop: a
// retry of a change already applied, or a user or role created again as
// it is). It depends only on its arguments, so every member decides the
// same when applying the change.
func ValidateAuthChange(t *wire.AuthTable, keyspaces []wire.Keyspace, c wire.AuthChange) (noop bool, err error) {
	v := authValidator{t: t, c: c}
	switch c.Op {
	case wire.AuthUserAdd:
		return v.userAdd()
	case wire.AuthUserDelete:
		return v.userDelete()
	case wire.AuthUserPassword:
		return v.userPassword()
	case wire.AuthUserGrant:
		return v.userGrant()
	case wire.AuthUserRevoke:
		return v.userRevoke()
	case wire.AuthRoleAdd:
		return v.roleAdd()
	case wire.AuthRoleDelete:
		return v.roleDelete()
	case wire.AuthRoleGrant:
		return v.roleGrant(keyspaces)
	case wire.AuthRoleRevoke:
		return v.roleRevoke()
	case wire.AuthList, wire.AuthFetch:
		return true, nil
	default:
		return false, fmt.Errorf("unknown operation %s", c.Op)
	}
}

// authValidator checks one change c against the users and roles t
// (ValidateAuthChange).
type authValidator struct {
	t *wire.AuthTable
	c wire.AuthChange
}

// userRole checks a role a user is to hold: the built-in admin role or
// one that exists.
func (v authValidator) userRole(role string) error {
	if role == wire.AdminRole {
		return nil
	}
	if err := validateRoleName(role); err != nil {
		return err
	}
	if findRole(v.t, role) < 0 {
		return fmt.Errorf("role %q does not exist (catena role add %s)", role, role)
	}
	return nil
}

// user returns the index of the existing user c.User.
func (v authValidator) user() (int, error) {
	if err := validateUserName(v.c.User); err != nil {
		return -1, err
	}
	i := findUser(v.t, v.c.User)
	if i < 0 {
		return -1, fmt.Errorf("user %q does not exist", v.c.User)
	}
	return i, nil
}

// role returns the index of the existing role c.Role, which may not be
// the built-in one.
func (v authValidator) role() (int, error) {
	if v.c.Role == wire.AdminRole {
		return -1, fmt.Errorf("role %s is built in: it reads and writes every key and manages users; it cannot be changed", wire.AdminRole)
	}
	if err := validateRoleName(v.c.Role); err != nil {
		return -1, err
	}
	i := findRole(v.t, v.c.Role)
	if i < 0 {
		return -1, fmt.Errorf("role %q does not exist", v.c.Role)
	}
	return i, nil
}

// lastAdmin refuses a change that would leave no user with the admin
// role.
func (v authValidator) lastAdmin(name string) error {
	if isAdmin(v.t, name) && admins(v.t) == 1 {
		return fmt.Errorf("%s is the last user with role %s: with none, no one could change users and roles (grant %s to another user first)", name, wire.AdminRole, wire.AdminRole)
	}
	return nil
}

// userAdd checks the creation of user c.User.
func (v authValidator) userAdd() (noop bool, err error) {
	if err := validateUserName(v.c.User); err != nil {
		return false, err
	}
	if v.c.PasswordHash != "" {
		if err := security.CheckPasswordHash(v.c.PasswordHash); err != nil {
			return false, err
		}
	}
	if len(v.c.Roles) > RolesPerUserMax {
		return false, fmt.Errorf("%d roles: at most %d per user", len(v.c.Roles), RolesPerUserMax)
	}
	if !slices.IsSorted(v.c.Roles) || len(slices.Compact(slices.Clone(v.c.Roles))) != len(v.c.Roles) {
		return false, errors.New("roles not in increasing order without repeats")
	}
	for _, r := range v.c.Roles {
		if err := v.userRole(r); err != nil {
			return false, err
		}
	}
	if i := findUser(v.t, v.c.User); i >= 0 {
		u := v.t.Users[i]
		if u.PasswordHash == v.c.PasswordHash && slices.Equal(u.Roles, v.c.Roles) {
			return true, nil
		}
		return false, fmt.Errorf("user %q exists (catena user passwd, grant and revoke change it)", v.c.User)
	}
	if !v.t.Enabled() && !slices.Contains(v.c.Roles, wire.AdminRole) {
		return false, fmt.Errorf("the first user must hold role %s: creating a user turns authorization on, and then only a user with role %s can change users and roles", wire.AdminRole, wire.AdminRole)
	}
	if len(v.t.Users) >= UsersMax {
		return false, fmt.Errorf("%d users already, the most a cluster keeps", UsersMax)
	}
	return false, nil
}

// userDelete checks the deletion of user c.User.
func (v authValidator) userDelete() (noop bool, err error) {
	if _, err := v.user(); err != nil {
		return false, err
	}
	if err := v.lastAdmin(v.c.User); err != nil {
		return false, err
	}
	return false, nil
}

// userPassword checks a change of user c.User's password.
func (v authValidator) userPassword() (noop bool, err error) {
	i, err := v.user()
	if err != nil {
		return false, err
	}
	if v.c.PasswordHash != "" {
		if err := security.CheckPasswordHash(v.c.PasswordHash); err != nil {
			return false, err
		}
	}
	return v.t.Users[i].PasswordHash == v.c.PasswordHash, nil
}

// userGrant checks granting role c.Role to user c.User.
func (v authValidator) userGrant() (noop bool, err error) {
	i, err := v.user()
	if err != nil {
		return false, err
	}
	if err := v.userRole(v.c.Role); err != nil {
		return false, err
	}
	if slices.Contains(v.t.Users[i].Roles, v.c.Role) {
		return true, nil
	}
	if len(v.t.Users[i].Roles) >= RolesPerUserMax {
		return false, fmt.Errorf("user %q holds %d roles, the most a user may", v.c.User, RolesPerUserMax)
	}
	return false, nil
}

// userRevoke checks revoking role c.Role from user c.User.
func (v authValidator) userRevoke() (noop bool, err error) {
	i, err := v.user()
	if err != nil {
		return false, err
	}
	if !slices.Contains(v.t.Users[i].Roles, v.c.Role) {
		return false, fmt.Errorf("user %q does not hold role %q", v.c.User, v.c.Role)
	}
	if v.c.Role == wire.AdminRole {
		if err := v.lastAdmin(v.c.User); err != nil {
			return false, err
		}
	}
	return false, nil
}

// roleAdd checks the creation of role c.Role.
func (v authValidator) roleAdd() (noop bool, err error) {
	if v.c.Role == wire.AdminRole {
		return false, fmt.Errorf("role %s is built in", wire.AdminRole)
	}
	if err := validateRoleName(v.c.Role); err != nil {
		return false, err
	}
	if findRole(v.t, v.c.Role) >= 0 {
		return true, nil
	}
	if len(v.t.Roles) >= RolesMax {
		return false, fmt.Errorf("%d roles already, the most a cluster keeps", RolesMax)
	}
	return false, nil
}

// roleDelete checks the deletion of role c.Role.
func (v authValidator) roleDelete() (noop bool, err error) {
	if _, err := v.role(); err != nil {
		return false, err
	}
	var holders []string
	for _, u := range v.t.Users {
		if slices.Contains(u.Roles, v.c.Role) {
			holders = append(holders, u.Name)
		}
	}
	if len(holders) > 0 {
		return false, fmt.Errorf("role %q is held by %s: revoke it first", v.c.Role, strings.Join(holders, ", "))
	}
	return false, nil
}

// roleGrant checks a grant of c.Grant to role c.Role.
func (v authValidator) roleGrant(keyspaces []wire.Keyspace) (noop bool, err error) {
	i, err := v.role()
	if err != nil {
		return false, err
	}
	if err := validateGrant(keyspaces, v.c.Grant); err != nil {
		return false, err
	}
	if v.c.Grant.Access != wire.AccessRead && v.c.Grant.Access != wire.AccessReadWrite {
		return false, fmt.Errorf("access %s: grant read or readwrite (revoke removes a grant)", v.c.Grant.Access)
	}
	grants := v.t.Roles[i].Grants
	if j := slices.IndexFunc(grants, v.c.Grant.SameTarget); j >= 0 {
		return grants[j] == v.c.Grant, nil
	}
	if len(grants) >= GrantsPerRoleMax {
		return false, fmt.Errorf("role %q has %d grants, the most a role may", v.c.Role, GrantsPerRoleMax)
	}
	return false, nil
}

// roleRevoke checks revoking role c.Role's grant on c.Grant's target.
func (v authValidator) roleRevoke() (noop bool, err error) {
	i, err := v.role()
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(v.t.Roles[i].Grants, v.c.Grant.SameTarget) {
		return false, fmt.Errorf("role %q has no grant on %s", v.c.Role, v.c.Grant.Target())
	}
	return false, nil
}

// validateGrant checks a grant's target: a keyspace that exists, or a
// key prefix (empty: every key), not both.
func validateGrant(keyspaces []wire.Keyspace, g wire.Grant) error {
	switch {
	case g.Keyspace != "" && g.Prefix != "":
		return errors.New("a grant names a keyspace or a key prefix, not both")
	case g.Keyspace != "":
		if !slices.ContainsFunc(keyspaces, func(k wire.Keyspace) bool { return k.Name == g.Keyspace }) {
			return fmt.Errorf("keyspace %q does not exist", g.Keyspace)
		}
	case len(g.Prefix) > kv.KeySizeMax:
		return fmt.Errorf("prefix of %d bytes: keys are at most %d", len(g.Prefix), kv.KeySizeMax)
	}
	return nil
}

// applyAuthChange changes t as c says. REQUIRES: ValidateAuthChange
// accepted c for t and found it no noop.
func applyAuthChange(t *wire.AuthTable, c wire.AuthChange) {
	switch c.Op {
	case wire.AuthUserAdd:
		i, _ := slices.BinarySearchFunc(t.Users, c.User, func(u wire.User, n string) int { return strings.Compare(u.Name, n) })
		t.Users = slices.Insert(t.Users, i, wire.User{Name: c.User, PasswordHash: c.PasswordHash, Roles: slices.Clone(c.Roles)})
	case wire.AuthUserDelete:
		t.Users = slices.Delete(t.Users, findUser(t, c.User), findUser(t, c.User)+1)
	case wire.AuthUserPassword:
		t.Users[findUser(t, c.User)].PasswordHash = c.PasswordHash
	case wire.AuthUserGrant:
		u := &t.Users[findUser(t, c.User)]
		i, _ := slices.BinarySearch(u.Roles, c.Role)
		u.Roles = slices.Insert(u.Roles, i, c.Role)
	case wire.AuthUserRevoke:
		u := &t.Users[findUser(t, c.User)]
		u.Roles = slices.DeleteFunc(u.Roles, func(r string) bool { return r == c.Role })
	case wire.AuthRoleAdd:
		i, _ := slices.BinarySearchFunc(t.Roles, c.Role, func(r wire.Role, n string) int { return strings.Compare(r.Name, n) })
		t.Roles = slices.Insert(t.Roles, i, wire.Role{Name: c.Role})
	case wire.AuthRoleDelete:
		i := findRole(t, c.Role)
		t.Roles = slices.Delete(t.Roles, i, i+1)
	case wire.AuthRoleGrant:
		r := &t.Roles[findRole(t, c.Role)]
		if j := slices.IndexFunc(r.Grants, c.Grant.SameTarget); j >= 0 {
			r.Grants[j] = c.Grant
		} else {
			r.Grants = append(r.Grants, c.Grant)
		}
	case wire.AuthRoleRevoke:
		r := &t.Roles[findRole(t, c.Role)]
		r.Grants = slices.DeleteFunc(r.Grants, c.Grant.SameTarget)
	default:
		panic(fmt.Sprintf("INVARIANT auth: applying unvalidated operation %s", c.Op))
	}
	t.Version++
}

// authorizeAuthRequest reports why the caller may not make the request:
// with authorization on, changes and listings are for users with role
// admin; fetching password hashes is for proxies' certificates (which
// check Redis AUTH passwords) and admins (whose backups keep them,
// docs/adr/0030); and the first user, which turns authorization on,
// must be the caller's own certificate user (so someone can still
// administer afterwards).
func authorizeAuthRequest(t *wire.AuthTable, req *wire.AuthRequest) error {
	principal := req.Caller.Principal("")
	switch {
	case req.Change.Op == wire.AuthFetch:
		if req.Caller.Proxy {
			return nil
		}
		if err := authorizeAdmin(t, req.Caller); err != nil {
			return fmt.Errorf("only a proxy's certificate or an admin may fetch the users' password hashes: %w", err)
		}
		return nil
	case t.Enabled():
		return authorizeAdmin(t, req.Caller)
	case req.Change.Op == wire.AuthUserAdd && principal == "":
		return errors.New("the first user turns authorization on, and needs TLS: create it with a client certificate (catena certs issue -role client), naming the certificate's own user")
	case req.Change.Op == wire.AuthUserAdd && req.Change.User != principal:
		return fmt.Errorf("the first user must be this client's own certificate user %q with role %s, or no one could change users afterwards (asked to add %q)", principal, wire.AdminRole, req.Change.User)
	}
	return nil
}

// authorizeAdmin reports why the caller may not administer the cluster
// (users, roles, keyspaces): with authorization on, that needs a user
// with role admin; with it off, anyone may.
func authorizeAdmin(t *wire.AuthTable, caller wire.Caller) error {
	if !t.Enabled() {
		return nil
	}
	principal := caller.Principal("")
	if principal == "" {
		return errors.New("authentication required: authorization is on, connect with a client certificate of a user with role admin")
	}
	if findUser(t, principal) < 0 {
		return fmt.Errorf("user %q (this client's certificate) is not a user of the cluster", principal)
	}
	if !isAdmin(t, principal) {
		return fmt.Errorf("user %q may not do this: it needs role %s", principal, wire.AdminRole)
	}
	return nil
}

// handleAuthRequest answers or proposes an AuthRequest (leader only).
func (m *Master) handleAuthRequest(now wire.Time, from wire.NodeID, req *wire.AuthRequest) {
	if !m.leading {
		return // clients ask every member; the leader answers
	}
	if !req.Change.Op.Valid() {
		m.send(from, &wire.AuthReply{ID: req.ID, Err: fmt.Sprintf("unknown operation %d", req.Change.Op)})
		return
	}
	if err := authorizeAuthRequest(&m.auth, req); err != nil {
		m.deny(fmt.Sprintf("refused %s from %s (certificate %q): %v", req.Change.Op, from, req.Caller.Name, err))
		m.send(from, &wire.AuthReply{ID: req.ID, Err: err.Error()})
		return
	}
	switch req.Change.Op {
	case wire.AuthList:
		m.send(from, &wire.AuthReply{ID: req.ID, Table: m.redactedAuthTable()})
		return
	case wire.AuthFetch:
		m.send(from, &wire.AuthReply{ID: req.ID, Table: m.AuthTable()})
		return
	}
	w := authWaiter{to: from, id: req.ID}
	if len(m.authWaiters) >= authWaitersMax {
		m.send(from, &wire.AuthReply{ID: req.ID, Err: fmt.Sprintf("%d changes of users and roles are waiting to apply already: try again", authWaitersMax)})
		return
	}
	if _, pending := m.authPending[req.ID]; pending {
		// A retry of a change proposed already: answer it when that one
		// applies.
		if !slices.Contains(m.authWaiters, w) {
			m.authWaiters = append(m.authWaiters, w)
		}
		return
	}
	change := normalizeAuthChange(req.Change)
	noop, err := ValidateAuthChange(&m.auth, m.keyspaces, change)
	switch {
	case err != nil:
		m.send(from, &wire.AuthReply{ID: req.ID, Err: err.Error()})
		return
	case noop:
		m.send(from, &wire.AuthReply{ID: req.ID, Table: m.redactedAuthTable()})
		return
	}
	m.authPending[req.ID] = true
	m.authWaiters = append(m.authWaiters, w)
	m.submit(now, Command{Kind: CmdAuth, Auth: &change, AuthID: req.ID})
}

// applyAuth applies a CmdAuth command. One that no longer fits (another
// change came first) does nothing, and its requesters are told why.
func (m *Master) applyAuth(c Command) {
	noop, err := ValidateAuthChange(&m.auth, m.keyspaces, *c.Auth)
	if err == nil && !noop {
		applyAuthChange(&m.auth, *c.Auth)
	}
	if !m.leading {
		return
	}
	if err == nil && !noop {
		table := m.serverAuthTable()
		for _, id := range m.ring() {
			m.send(id, &wire.NewAuth{Table: table.Clone()})
		}
	}
	reply := &wire.AuthReply{ID: c.AuthID, Table: m.redactedAuthTable()}
	if err != nil {
		reply = &wire.AuthReply{ID: c.AuthID, Err: err.Error()}
	}
	delete(m.authPending, c.AuthID)
	kept := m.authWaiters[:0]
	for _, w := range m.authWaiters {
		if w.id == c.AuthID {
			m.send(w.to, reply)
		} else {
			kept = append(kept, w)
		}
	}
	m.authWaiters = kept
}
