package security

import (
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"
)

func newCA(t *testing.T) (*CA, string) {
	t.Helper()
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	return ca, dir
}

// A certificate carries its role and name; Verify accepts it from its CA
// and says why it refuses one of another CA, an expired one and one
// without a role.
func TestIssueAndVerify(t *testing.T) {
	ca, dir := newCA(t)
	id := Identity{Role: RoleServer, Name: "127.0.0.1:7101"}
	is, err := ca.Issue(id, IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := is.Save(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if files != DirFiles(dir, id) {
		t.Fatalf("Save wrote %+v, DirFiles says %+v", files, DirFiles(dir, id))
	}
	m, err := Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Self(); got != id {
		t.Fatalf("Self = %v, want %v", got, id)
	}
	if err := is.Cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("a member's certificate holds its host as an IP SAN: %v", err)
	}
	if got, err := m.Verify([]*x509.Certificate{is.Cert}); err != nil || got != id {
		t.Fatalf("Verify(own CA's) = %v, %v", got, err)
	}

	other, _ := newCA(t)
	foreign, err := other.Issue(id, IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.Issue(id, IssueOptions{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	noRole := *is.Cert
	noRole.URIs = nil
	for _, c := range []struct {
		name string
		cert []*x509.Certificate
		want string
	}{
		{"none", nil, "no certificate presented"},
		{"another CA", []*x509.Certificate{foreign.Cert}, "not signed by the cluster's CA"},
		{"expired", []*x509.Certificate{expired.Cert}, "expired"},
	} {
		if _, err := m.Verify(c.cert); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Verify(%s) = %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := IdentityOf(&noRole); err == nil || !strings.Contains(err.Error(), "carries no Catena role") {
		t.Errorf("IdentityOf(no role) = %v", err)
	}
}

// Load refuses a partial set of files and a key that is not the
// certificate's; a member's name must not hold '/'.
func TestLoadRefusesBadMaterial(t *testing.T) {
	ca, dir := newCA(t)
	a := Identity{Role: RoleClient, Name: "alice"}
	b := Identity{Role: RoleClient, Name: "bob"}
	ia, _ := ca.Issue(a, IssueOptions{})
	ib, _ := ca.Issue(b, IssueOptions{})
	fa, err := ia.Save(dir, a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := ib.Save(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Files{CA: fa.CA, Cert: fa.Cert}, nil); err == nil {
		t.Error("Load without a key succeeded")
	}
	if _, err := Load(Files{CA: fa.CA, Cert: fa.Cert, Key: fb.Key}, nil); err == nil {
		t.Error("Load with another certificate's key succeeded")
	}
	if _, err := ca.Issue(Identity{Role: RoleClient, Name: "a/b"}, IssueOptions{}); err == nil {
		t.Error("Issue accepted a name with '/'")
	}
}

// Files written over the old ones are read at the next check; a broken
// pair is refused and the previous material kept.
func TestReload(t *testing.T) {
	ca, dir := newCA(t)
	id := Identity{Role: RoleClient, Name: "alice"}
	first, _ := ca.Issue(id, IssueOptions{})
	files, err := first.Save(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		cert, _ := m.current()
		return cert.Leaf.SerialNumber.String()
	}
	if err := os.WriteFile(files.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * reloadCheckInterval)
	if got := serial(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("a broken file replaced the material: serial %s", got)
	}
	second, _ := ca.Issue(id, IssueOptions{})
	if _, err := second.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * reloadCheckInterval)
	if got := serial(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serial %s after renewal, want %s", got, second.Cert.SerialNumber)
	}
}

// A certificate for a loopback address names localhost, 127.0.0.1 and
// ::1, once each, so HTTPS clients may use any; one for another host
// names only it.
func TestIssueNamesEveryLoopbackName(t *testing.T) {
	ca, _ := newCA(t)
	for _, tc := range []struct {
		id    Identity
		hosts []string
		want  []string
		not   []string
	}{
		{Identity{Role: RoleMaster, Name: "127.0.0.1:7100"}, nil, []string{"localhost", "127.0.0.1", "::1"}, []string{"10.0.0.1"}},
		{Identity{Role: RoleServer, Name: "[::1]:7101"}, nil, []string{"localhost", "127.0.0.1", "::1"}, nil},
		{Identity{Role: RoleProxy, Name: "proxy"}, []string{"127.0.0.1", "localhost"}, []string{"localhost", "127.0.0.1", "::1"}, nil},
		{Identity{Role: RoleServer, Name: "10.0.0.5:7101"}, nil, []string{"10.0.0.5"}, []string{"localhost", "127.0.0.1", "::1"}},
	} {
		is, err := ca.Issue(tc.id, IssueOptions{Hosts: tc.hosts})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range tc.want {
			if err := is.Cert.VerifyHostname(h); err != nil {
				t.Errorf("%v: %v", tc.id, err)
			}
		}
		for _, h := range tc.not {
			if is.Cert.VerifyHostname(h) == nil {
				t.Errorf("%v: the certificate names %s", tc.id, h)
			}
		}
		if n := len(is.Cert.IPAddresses) + len(is.Cert.DNSNames); tc.want != nil && n != len(tc.want) {
			t.Errorf("%v: SANs %v %v, want each of %v once", tc.id, is.Cert.DNSNames, is.Cert.IPAddresses, tc.want)
		}
	}
}

// A member dialed as localhost:PORT may present the certificate of the
// loopback address localhost stands for, with that port, and no other.
func TestMemberCheckTakesLocalhostForLoopback(t *testing.T) {
	for _, tc := range []struct {
		node, name string
		ok         bool
	}{
		{"127.0.0.1:7100", "127.0.0.1:7100", true},
		{"localhost:7100", "127.0.0.1:7100", true},
		{"localhost:7100", "[::1]:7100", true},
		{"localhost:7100", "localhost:7100", true},
		{"localhost:7100", "127.0.0.1:7101", false},
		{"localhost:7100", "127.0.0.2:7100", false},
		{"localhost:7100", "10.0.0.1:7100", false},
		{"127.0.0.1:7100", "localhost:7100", false},
		{"127.0.0.1:7100", "[::1]:7100", false},
		{"db.example:7100", "10.0.0.1:7100", false},
	} {
		err := MemberCheck(tc.node)(Identity{Role: RoleMaster, Name: tc.name})
		if (err == nil) != tc.ok {
			t.Errorf("MemberCheck(%s) of master %s: %v; want accepted %v", tc.node, tc.name, err, tc.ok)
		}
	}
	if err := MemberCheck("localhost:7100")(Identity{Role: RoleClient, Name: "127.0.0.1:7100"}); err == nil {
		t.Error("MemberCheck accepted a client certificate")
	}
}
