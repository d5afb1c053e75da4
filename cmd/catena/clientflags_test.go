package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/testcluster"
)

// A flag whose default is an environment variable names it once in the
// help, with its value when set, and no second default beside it; the
// variable's value is what the command uses.
func TestEnvironmentDefaultsShownOnce(t *testing.T) {
	t.Setenv(envTLSCA, "/nonexistent/ca.crt")
	t.Setenv(envTLSCert, "")
	t.Setenv(envTLSKey, "")
	for _, args := range [][]string{
		{"put", "-h"}, {"get", "-h"}, {"del", "-h"}, {"status", "-h"}, {"keyspace", "-h"}, {"user", "-h"}, {"role", "-h"},
	} {
		code, stdout, _ := runCatena(t, "", args...)
		if code != 0 {
			t.Fatalf("catena %s: exit status %d", strings.Join(args, " "), code)
		}
		for _, want := range []string{`(default $CATENA_TLS_CA, now "/nonexistent/ca.crt")`, "(default $CATENA_TLS_CERT)\n", "(default $CATENA_TLS_KEY)\n"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("catena %s: the help lacks %q:\n%s", strings.Join(args, " "), want, stdout)
			}
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Count(line, "default") > 1 {
				t.Errorf("catena %s: %q says default twice", strings.Join(args, " "), line)
			}
		}
	}
	code, _, stderr := runCatena(t, "", "get", "k", "-master", "127.0.0.1:1")
	if want := "got only -tls-ca"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("get with only $%s set: exit status %d, stderr %q; want 2 and %q", envTLSCA, code, stderr, want)
	}
	t.Setenv(envTLSCert, "/nonexistent/client.crt")
	t.Setenv(envTLSKey, "/nonexistent/client.key")
	code, _, stderr = runCatena(t, "", "get", "k", "-master", "127.0.0.1:1", "-timeout", "1s")
	if code == 0 || !strings.Contains(stderr, "/nonexistent/ca.crt") {
		t.Errorf("get with $%s set: exit status %d, stderr %q; want the variable's file used", envTLSCA, code, stderr)
	}
}

// A master given as localhost:PORT is the master named 127.0.0.1:PORT,
// over TLS too: its certificate names the address localhost stands for.
func TestLocalhostReachesALoopbackMasterOverTLS(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.WithTLS())
	files := c.ClientTLS(t, security.RoleClient, "alice")
	_, port, _ := strings.Cut(c.MasterAddr(), ":")
	tls := []string{"-master", "localhost:" + port, "-tls-ca", files.CA, "-tls-cert", files.Cert, "-tls-key", files.Key}
	if code, _, stderr := runCatena(t, "", append([]string{"put", "greeting", "hello"}, tls...)...); code != 0 {
		t.Fatalf("put -master localhost:%s: exit status %d, stderr %q", port, code, stderr)
	}
	if code, stdout, stderr := runCatena(t, "", append([]string{"get", "greeting"}, tls...)...); code != 0 || stdout != "hello\n" {
		t.Errorf("get -master localhost:%s: exit status %d, stdout %q, stderr %q", port, code, stdout, stderr)
	}
}

// When the command and the cluster disagree about TLS, the error says
// which way and how to fix it: a cluster without TLS closes the TLS
// handshake (the hint names the variables when they turned TLS on, the
// flags otherwise), and a cluster with TLS closes a plaintext
// connection.
func TestTLSMismatchSaysHowToFixIt(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runCatena(t, "", "certs", "ca", "-dir", dir); code != 0 {
		t.Fatalf("certs ca: %s", stderr)
	}
	if code, _, stderr := runCatena(t, "", "certs", "issue", "-dir", dir, "-role", "client", "-name", "alice"); code != 0 {
		t.Fatalf("certs issue: %s", stderr)
	}
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client-alice.crt"), filepath.Join(dir, "client-alice.key")
	plain := testcluster.Start(t, 1)
	const unanswered = "closed the connection without answering the TLS handshake (a node without TLS?)"

	t.Setenv(envTLSCA, ca)
	t.Setenv(envTLSCert, cert)
	t.Setenv(envTLSKey, key)
	code, _, stderr := runCatena(t, "", "get", "k", "-master", plain.MasterAddr())
	if want := "TLS is on because $CATENA_TLS_CA, $CATENA_TLS_CERT and $CATENA_TLS_KEY are set (catena dev's export line): unset them for a cluster without TLS"; code != 1 ||
		!strings.Contains(stderr, unanswered) || !strings.HasSuffix(strings.TrimSpace(stderr), want) {
		t.Errorf("TLS from the environment against a plaintext cluster: exit status %d, stderr %q; want %q and %q", code, stderr, unanswered, want)
	}

	t.Setenv(envTLSCA, "")
	t.Setenv(envTLSCert, "")
	t.Setenv(envTLSKey, "")
	code, _, stderr = runCatena(t, "", "status", "-master", plain.MasterAddr(), "-tls-ca", ca, "-tls-cert", cert, "-tls-key", key)
	if want := "for a cluster without TLS, leave out -tls-ca, -tls-cert and -tls-key"; code != 1 ||
		!strings.Contains(stderr, unanswered) || !strings.HasSuffix(strings.TrimSpace(stderr), want) {
		t.Errorf("TLS flags against a plaintext cluster: exit status %d, stderr %q; want %q and %q", code, stderr, unanswered, want)
	}

	secure := testcluster.Start(t, 1, testcluster.WithTLS())
	code, _, stderr = runCatena(t, "", "get", "k", "-master", secure.MasterAddr())
	if want := "for a cluster with TLS, give its CA and a client certificate: -tls-ca, -tls-cert and -tls-key, or $CATENA_TLS_CA, $CATENA_TLS_CERT and $CATENA_TLS_KEY (catena dev prints the line that sets them)"; code != 1 ||
		!strings.Contains(stderr, "closed the connection before sending anything") || !strings.HasSuffix(strings.TrimSpace(stderr), want) {
		t.Errorf("plaintext against a TLS cluster: exit status %d, stderr %q; want %q", code, stderr, want)
	}
}
