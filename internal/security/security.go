// Package security holds Catena's TLS material: the cluster's CA, each
// process's certificate and the role and name it proves, and the TLS
// configurations of cluster links, the Redis-protocol port and HTTP.
//
// A process proves it belongs to the cluster with a certificate signed by
// the cluster's CA. The certificate carries the process's role and name in
// a URI SAN, catena://role/<role>/<name>: a master's or server's name is
// its node id (its listen address), a client's its user name. Links check
// the role, so a client's certificate cannot join as a server or master
// (docs/adr/0015-security.md).
//
// Certificates are read again when their files change (checked at each
// handshake), so they can be renewed without a restart.
package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Role is what a certificate lets a process be.
type Role string

// The roles. Master, server and site certificates are cluster members:
// they may listen and join as nodes. Client and proxy certificates may
// only connect as clients.
const (
	RoleMaster Role = "master"
	RoleServer Role = "server"
	RoleSite   Role = "site"
	RoleClient Role = "client"
	RoleProxy  Role = "proxy"
)

// Roles lists every role, members first.
var Roles = []Role{RoleMaster, RoleServer, RoleSite, RoleClient, RoleProxy}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q (want master, server, site, client or proxy)", s)
}

// Member reports whether the role belongs to a cluster member, which may
// join as a node (master, server, site).
func (r Role) Member() bool { return r == RoleMaster || r == RoleServer || r == RoleSite }

// uriScheme and uriHost start the URI SAN that names a certificate's role.
const (
	uriScheme = "catena"
	uriHost   = "role"
)

// Identity is who a certificate says its holder is.
type Identity struct {
	Role Role
	// Name is a member's node id (its listen address) or a client's user
	// name.
	Name string
}

func (id Identity) String() string { return string(id.Role) + " " + id.Name }

// URI returns the identity as the URI SAN that certificates carry.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost, Path: "/" + string(id.Role) + "/" + id.Name}
}

// IdentityOf reads the role and name a certificate carries.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != uriScheme || u.Host != uriHost {
			continue
		}
		role, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if !ok || name == "" {
			return Identity{}, fmt.Errorf("certificate %q: malformed role URI %q", cert.Subject.CommonName, u.String())
		}
		r, err := ParseRole(role)
		if err != nil {
			return Identity{}, fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, err)
		}
		return Identity{Role: r, Name: name}, nil
	}
	return Identity{}, fmt.Errorf("certificate %q carries no Catena role (a URI SAN catena://role/<role>/<name>)", cert.Subject.CommonName)
}

// Files names the PEM files of a process's TLS material.
type Files struct {
	// CA holds the cluster CA's certificate(s): peers must present a
	// certificate it signed.
	CA string
	// Cert and Key are the process's certificate (with any intermediates)
	// and its private key.
	Cert, Key string
}

// IsZero reports whether no file is named (TLS off).
func (f Files) IsZero() bool { return f == Files{} }

// Validate reports a partial set: all three files are needed.
func (f Files) Validate() error {
	if f.IsZero() || (f.CA != "" && f.Cert != "" && f.Key != "") {
		return nil
	}
	return errors.New("TLS needs all of -tls-ca, -tls-cert and -tls-key")
}

// Material is a process's TLS material, read from Files and read again
// when a file changes. Safe for concurrent use.
type Material struct {
	files Files
	log   *slog.Logger

	mu      sync.Mutex
	stamp   [3]fileStamp
	cert    *tls.Certificate
	pool    *x509.CertPool
	self    Identity
	checked time.Time
}

// fileStamp tells whether a file changed since it was read.
type fileStamp struct {
	mod  time.Time
	size int64
}

// reloadCheckInterval bounds how often the files are looked at: at most
// once per interval, at a handshake.
const reloadCheckInterval = 100 * time.Millisecond

// Load reads the material. It fails on a missing or malformed file, a key
// that does not match the certificate, or a certificate without a role.
func Load(f Files, log *slog.Logger) (*Material, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if f.IsZero() {
		return nil, errors.New("no TLS files")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Material{files: f, log: log}
	if err := m.read(); err != nil {
		return nil, err
	}
	return m, nil
}

// Files returns the files the material is read from.
func (m *Material) Files() Files { return m.files }

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: st.ModTime(), size: st.Size()}
}

// read reads every file and replaces the material, or fails and keeps it.
// REQUIRES: m.mu held, or m not yet shared.
func (m *Material) read() error {
	stamp := [3]fileStamp{stampOf(m.files.CA), stampOf(m.files.Cert), stampOf(m.files.Key)}
	caPEM, err := os.ReadFile(m.files.CA)
	if err != nil {
		return fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no PEM certificate", m.files.CA)
	}
	cert, err := tls.LoadX509KeyPair(m.files.Cert, m.files.Key)
	if err != nil {
		return fmt.Errorf("loading %s and %s: %w", m.files.Cert, m.files.Key, err)
	}
	self, err := IdentityOf(cert.Leaf)
	if err != nil {
		return fmt.Errorf("%s: %w", m.files.Cert, err)
	}
	m.stamp, m.cert, m.pool, m.self = stamp, &cert, pool, self
	return nil
}

// current returns the material, read again first if a file changed. A
// failed reload (a half-written file) keeps the previous material and is
// tried again at the next check.
func (m *Material) current() (*tls.Certificate, *x509.CertPool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now := time.Now(); now.Sub(m.checked) >= reloadCheckInterval {
		m.checked = now
		stamp := [3]fileStamp{stampOf(m.files.CA), stampOf(m.files.Cert), stampOf(m.files.Key)}
		if stamp != m.stamp {
			before := m.self
			if err := m.read(); err != nil {
				m.log.Warn("TLS files changed but cannot be loaded; keeping the previous ones", "err", err)
			} else {
				m.log.Info("TLS files reloaded", "identity", m.self.String(), "was", before.String(),
					"expires", m.cert.Leaf.NotAfter.Format(time.RFC3339))
			}
		}
	}
	return m.cert, m.pool
}

// Reload reads the files now (on SIGHUP, say).
func (m *Material) Reload() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checked = time.Now()
	return m.read()
}

// Self returns the identity of the process's own certificate.
func (m *Material) Self() Identity {
	m.current()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Verify checks a peer's certificate chain against the cluster CA and
// returns the identity it proves. Its errors say why a peer is refused:
// no certificate, another CA's, expired, or no role.
func (m *Material) Verify(certs []*x509.Certificate) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, errors.New("no certificate presented")
	}
	_, pool := m.current()
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return Identity{}, fmt.Errorf("certificate %q is not signed by the cluster's CA: %w", certs[0].Subject.CommonName, err)
		}
		return Identity{}, fmt.Errorf("certificate %q refused: %w", certs[0].Subject.CommonName, err)
	}
	return IdentityOf(certs[0])
}

// base is the configuration every Catena TLS endpoint shares.
func base() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13}
}

// ServerConfig is the configuration of a listener of cluster links (or of
// the Redis-protocol port): TLS 1.3, the process's certificate, and a
// certificate from the cluster's CA required of every peer when
// requireClient is set (verified, the role left for the caller to check
// with PeerIdentity); without it a client may also connect without one.
func (m *Material) ServerConfig(requireClient bool) *tls.Config {
	c := base()
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, _ := m.current()
		return cert, nil
	}
	if requireClient {
		c.ClientAuth = tls.RequireAnyClientCert
	} else {
		c.ClientAuth = tls.RequestClientCert
	}
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 && !requireClient {
			return nil
		}
		_, err := m.Verify(cs.PeerCertificates)
		return err
	}
	return c
}

// HTTPConfig is the configuration of the HTTP status and metrics
// listener: TLS 1.3 with the process's certificate, no client
// certificate asked for.
func (m *Material) HTTPConfig() *tls.Config {
	c := base()
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, _ := m.current()
		return cert, nil
	}
	return c
}

// ClientConfig is the configuration of a dialed link: it presents the
// process's certificate and accepts a peer whose certificate the cluster's
// CA signed and whose identity check accepts (nil: any).
func (m *Material) ClientConfig(check func(Identity) error) *tls.Config {
	c := base()
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		cert, _ := m.current()
		return cert, nil
	}
	// The peer's certificate names a Catena identity, not a DNS name: the
	// chain and the identity are checked below instead of the host name.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := m.Verify(cs.PeerCertificates)
		if err != nil {
			return err
		}
		if check != nil {
			return check(id)
		}
		return nil
	}
	return c
}

// PeerIdentity returns the identity of a verified connection's peer, and
// false if it presented no certificate.
func PeerIdentity(cs tls.ConnectionState) (Identity, bool) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, false
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	return id, err == nil
}

// MemberCheck accepts the certificate of the cluster member named node:
// its role is master, server or site, and its name is node.
func MemberCheck(node string) func(Identity) error {
	return func(id Identity) error {
		if !id.Role.Member() {
			return fmt.Errorf("%s presented a %s certificate (%q): not a cluster member", node, id.Role, id.Name)
		}
		if !sameMember(node, id.Name) {
			return fmt.Errorf("%s presented the certificate of %s", node, id)
		}
		return nil
	}
}

// sameMember reports whether the member named name is the one dialed as
// node: the same address, or, for a node dialed as localhost:PORT, the
// loopback address localhost stands for (127.0.0.1 or ::1) with the
// same port, so -master localhost:7100 reaches a master named
// 127.0.0.1:7100 over TLS as it does without.
func sameMember(node, name string) bool {
	if node == name {
		return true
	}
	nodeHost, nodePort, err := net.SplitHostPort(node)
	if err != nil || nodeHost != "localhost" {
		return false
	}
	host, port, err := net.SplitHostPort(name)
	return err == nil && port == nodePort && isLoopbackName(host) && host != "localhost"
}

// loopbackHosts are the names of this machine's loopback interface that
// a certificate for one of them names all of: the name localhost and
// the addresses it resolves to.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// isLoopbackName reports whether host is one of loopbackHosts.
func isLoopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}
