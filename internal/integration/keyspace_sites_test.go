package integration

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// A keyspace across sites on real processes, three sites 20 ms apart
// (issue 32 item 7.5): catena keyspace create at site 1 creates it at
// every site it names, so site 3 writes it at once; a hierarchical
// keyspace created at site 1 alone (the Go client's CreateKeyspace) is
// refused promptly, naming the sites that lack it, where its operations
// used to wait for their whole deadline.
func TestKeyspaceCreatedAtEverySiteAndMissingNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	sites := startSites(t, sitesCase{sites: 3, masters: 1, servers: 3, volumes: 1, k: 1, t: 3, rtt: 20 * time.Millisecond})
	args := []string{"keyspace", "create", "hh", "-prefix", "h/", "-mode", "hierarchical", "-sites", "1,2,3", "-replicas", "3", "-master", sites[0].mAddr}
	if f := clientTLS(t); !f.IsZero() {
		args = append(args, "-tls-ca", f.CA, "-tls-cert", f.Cert, "-tls-key", f.Key)
	}
	out, err := exec.Command(catenaBinary(t), args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "created at site 2 (site2) too") || !strings.Contains(string(out), "created at site 3 (site3) too") {
		t.Fatalf("keyspace create at site 1: %v\n%s", err, out)
	}
	at3, _ := dial(t, sites[2].mAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := at3.Put(ctx, "h/a", []byte("v")); err != nil {
		t.Fatalf("site 3's write of the keyspace created from site 1: %v", err)
	}

	at1, _ := dial(t, sites[0].mAddr)
	if _, err := at1.CreateKeyspace(ctx, client.Keyspace{Name: "mm", Prefix: "m/", Mode: "hierarchical", Replicas: 3, Volumes: 1, Sites: []uint32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"put", func(ctx context.Context) error { return at1.Put(ctx, "m/a", []byte("v")) }},
		{"get", func(ctx context.Context) error { _, _, err := at1.Get(ctx, "m/a"); return err }},
	} {
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := op.do(ctx)
		cancel()
		took := time.Since(began)
		if !errors.Is(err, client.ErrKeyspaceMissing) || errors.Is(err, client.ErrAmbiguous) || !strings.Contains(err.Error(), "site(s) 2,3 of its sites 1,2,3") {
			t.Fatalf("%s of a keyspace only site 1 has: %v; want ErrKeyspaceMissing naming sites 2 and 3", op.name, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s refused after %s, want well before its 10 s deadline", op.name, took)
		}
		t.Logf("%s refused after %s: %v", op.name, took.Round(time.Millisecond), err)
	}
}
