package chain

import (
	"strings"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Authorization (docs/adr/0015-security.md): a server checks every
// request a client sends it against the users and roles it learned from
// the master (HeartbeatReply.Auth, NewAuth), before anything else. The
// table is compiled when it arrives, so the check per request is a map
// lookup and a few prefix comparisons. Requests from cluster members
// (another site's server waiting for a dependency, a query passed up
// the chain) are not checked: the transport proved they are members.

// authView is a server's copy of the master's users and roles.
type authView struct {
	// version is the table's (0: none learned: authorization off).
	version uint64
	// users holds each user's permissions; nil while authorization is
	// off.
	users map[string]*permissions
}

// permissions are one user's grants, from all its roles.
type permissions struct {
	// admin reads and writes every key.
	admin bool
	// keyspaces holds the access granted per keyspace name.
	keyspaces map[string]wire.Access
	// prefixes are the grants on key prefixes.
	prefixes []wire.Grant
}

// learn takes a table newer than the one held.
func (a *authView) learn(t wire.AuthTable) {
	if t.Version <= a.version {
		return
	}
	a.version = t.Version
	if !t.Enabled() {
		a.users = nil
		return
	}
	roles := make(map[string][]wire.Grant, len(t.Roles))
	for _, r := range t.Roles {
		roles[r.Name] = r.Grants
	}
	a.users = make(map[string]*permissions, len(t.Users))
	for _, u := range t.Users {
		p := &permissions{keyspaces: map[string]wire.Access{}}
		for _, name := range u.Roles {
			if name == wire.AdminRole {
				p.admin = true
			}
			for _, g := range roles[name] {
				if g.Keyspace != "" {
					p.keyspaces[g.Keyspace] = max(p.keyspaces[g.Keyspace], g.Access)
				} else {
					p.prefixes = append(p.prefixes, g)
				}
			}
		}
		a.users[u.Name] = p
	}
}

// access returns what p allows on key, of keyspace ks.
func (p *permissions) access(ks, key string) wire.Access {
	if p.admin {
		return wire.AccessReadWrite
	}
	a := p.keyspaces[ks]
	for _, g := range p.prefixes {
		if a == wire.AccessReadWrite {
			break
		}
		if g.Access > a && strings.HasPrefix(key, g.Prefix) {
			a = g.Access
		}
	}
	return a
}

// authorize checks a client's request: ErrUnauthenticated when its user
// is unknown (deleted, or no certificate), ErrDenied when the user may
// not read (a query) or write (an update) the key, or read the whole
// keyspace of the volume a scan lists. A wait for a version
// to become stable (or shipped) reads nothing and is not checked: the client core
// waits for the dependencies of a user's write on keys it may have read
// as another user (a proxy's shared session).
func (s *Server) authorize(from wire.NodeID, m *wire.ClientRequest) wire.ErrCode {
	if s.auth.users == nil || !wire.IsClient(from) || m.Op.Kind == wire.OpWaitStable || m.Op.Kind == wire.OpWaitShipped {
		return wire.ErrNone
	}
	p := s.auth.users[m.Caller.Principal(m.User)]
	if p == nil {
		return wire.ErrUnauthenticated
	}
	need := wire.AccessReadWrite
	if m.Op.Kind.IsQuery() {
		need = wire.AccessRead
	}
	if p.admin || strings.HasPrefix(m.Op.Key, wire.LeaseKeyPrefix) && m.Op.Kind != wire.OpWatch {
		// Leases' records are any user's (docs/adr/0032: a lease's id
		// is random); the keys a lease holds are checked as any key.
		return wire.ErrNone
	}
	if m.Op.Kind.NamesVolume() {
		// A scan or export reads a whole volume: it needs the whole
		// keyspace. A watch reads the keys its prefix (or key) names:
		// a grant of that prefix or a shorter one.
		ks, ok := placement.KeyspaceOfVolume(s.keyspaces, m.Volume)
		at := ""
		if m.Op.Kind == wire.OpWatch {
			at = m.Op.Key
		}
		if !ok || p.access(ks.Name, at) < need {
			return wire.ErrDenied
		}
		return wire.ErrNone
	}
	ks, _ := placement.KeyspaceOf(s.keyspaces, m.Op.Key)
	if p.access(ks.Name, m.Op.Key) < need {
		return wire.ErrDenied
	}
	return wire.ErrNone
}

// AuthVersion returns the version of the users and roles the server
// holds (0: none, authorization off).
func (s *Server) AuthVersion() uint64 { return s.auth.version }
