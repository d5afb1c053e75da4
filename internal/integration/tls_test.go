package integration

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/security"
)

// The real-process tests run every link over mutual TLS: one CA per test
// process, a certificate per process issued on its first start (its role
// and listen address in it), and a client certificate for the tests'
// clients. CATENA_INTEGRATION_INSECURE=1 runs them in plaintext.
var pki struct {
	once sync.Once
	dir  string
	ca   *security.CA
	err  error
	mu   sync.Mutex
}

// insecure reports whether the tests run without TLS.
func insecure() bool { return os.Getenv("CATENA_INTEGRATION_INSECURE") != "" }

// testCA returns the test process's CA and its directory.
func testCA(t *testing.T) (*security.CA, string) {
	t.Helper()
	pki.once.Do(func() {
		if pki.dir, pki.err = os.MkdirTemp("", "catena-integration-tls-"); pki.err != nil {
			return
		}
		if pki.ca, pki.err = security.NewCA("integration test CA", security.CAValidityDefault); pki.err == nil {
			pki.err = pki.ca.Save(pki.dir)
		}
	})
	if pki.err != nil {
		t.Fatal(pki.err)
	}
	return pki.ca, pki.dir
}

// tlsFiles returns the files of id's certificate, issuing it if needed.
func tlsFiles(t *testing.T, id security.Identity) security.Files {
	t.Helper()
	ca, dir := testCA(t)
	files := security.DirFiles(dir, id)
	pki.mu.Lock()
	defer pki.mu.Unlock()
	if _, err := os.Stat(files.Cert); err == nil {
		return files
	}
	is, err := ca.Issue(id, security.IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if files, err = is.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	return files
}

// tlsArgs returns the TLS flags of a master or server process with args
// (its subcommand first, -listen ADDR next), none when insecure.
func tlsArgs(t *testing.T, args []string) []string {
	if insecure() {
		return nil
	}
	role := security.RoleServer
	if args[0] == "master" {
		role = security.RoleMaster
	}
	f := tlsFiles(t, security.Identity{Role: role, Name: args[2]})
	return []string{"-tls-ca", f.CA, "-tls-cert", f.Cert, "-tls-key", f.Key}
}

// clientTLS returns the tests' clients' TLS files (zero when insecure).
func clientTLS(t *testing.T) client.TLSFiles {
	if insecure() {
		return client.TLSFiles{}
	}
	return client.TLSFiles(tlsFiles(t, security.Identity{Role: security.RoleClient, Name: "tester"}))
}

// removePKI removes the test process's CA directory.
func removePKI() {
	if pki.dir != "" {
		os.RemoveAll(filepath.Clean(pki.dir))
	}
}
