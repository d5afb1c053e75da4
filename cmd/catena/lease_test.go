package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
)

// catena lease grants a lease, lists it with the keys the Go client bound
// to it, renews it and revokes it (its keys go); bad arguments are usage
// errors.
func TestLeaseCommand(t *testing.T) {
	for _, args := range [][]string{{"lease"}, {"lease", "forget"}, {"lease", "grant"}, {"lease", "grant", "10ms"},
		{"lease", "revoke", "xyz"}, {"lease", "list", "extra"}} {
		if code, _, stderr := runCatena(t, "", args...); code != 2 {
			t.Errorf("catena %s: exit status %d (%s), want 2", strings.Join(args, " "), code, stderr)
		}
	}
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	code, stdout, stderr := runCatena(t, "", "lease", "grant", "1m", "-master", master)
	m := regexp.MustCompile(`^([0-9a-f]{16}) ttl 1m0s deadline \S+\n$`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("lease grant: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	id, err := client.ParseLeaseID(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "svc/a", []byte("1"), client.WithLease(id)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCatena(t, "", "lease", "list", "-master", master)
	if code != 0 || !regexp.MustCompile(`(?m)^`+m[1]+` ttl 1m0s left \S+ keys 1 svc/a$`).MatchString(stdout) {
		t.Fatalf("lease list: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr = runCatena(t, "", "lease", "keepalive", m[1], "-master", master); code != 0 || !strings.HasPrefix(stdout, m[1]+" deadline ") {
		t.Fatalf("lease keepalive: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr = runCatena(t, "", "lease", "revoke", m[1], "-master", master); code != 0 {
		t.Fatalf("lease revoke: exit status %d, stderr %q", code, stderr)
	}
	if _, found, err := cl.Get(ctx, "svc/a"); err != nil || found {
		t.Errorf("svc/a after its lease was revoked: found %v, %v", found, err)
	}
	if code, _, stderr = runCatena(t, "", "lease", "keepalive", m[1], "-master", master); code != 1 || !strings.Contains(stderr, "lease expired") {
		t.Errorf("keepalive of a revoked lease: exit status %d, stderr %q", code, stderr)
	}
}
