package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/testcluster"
)

// A value larger than one command-line argument may be (Linux caps one
// at 128 KiB) goes in from a file or from standard input, and comes back
// whole.
func TestPutLargeValueFromFileAndStdin(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	value := strings.Repeat("0123456789abcdef", 200<<10/16) // 200 KiB
	path := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
	}{
		{"file", []string{"put", "from-file", "-file", path, "-master", master}, ""},
		{"stdin", []string{"put", "from-stdin", "-", "-master", master}, value},
	} {
		// A long -timeout: under go test -race on a busy machine the
		// value can take over the default 10 s through the chain.
		code, stdout, stderr := runCatena(t, tc.stdin, append(tc.args, "-timeout", "1m")...)
		if code != 0 || stdout != "OK\n" {
			t.Fatalf("%s: exit status %d, stdout %q, stderr %q", tc.name, code, stdout, stderr)
		}
		key := tc.args[1]
		code, stdout, stderr = runCatena(t, "", "get", key, "-master", master, "-timeout", "1m")
		if code != 0 || stdout != value+"\n" {
			t.Errorf("%s: get %s: exit status %d, %d bytes, stderr %q; want the %d-byte value", tc.name, key, code, len(stdout), stderr, len(value))
		}
	}
}

// A value over kv.ValueSizeMax is refused before connecting, from every
// source, with the limit in the message.
func TestPutRefusesValueOverLimit(t *testing.T) {
	tooLarge := strings.Repeat("x", kv.ValueSizeMax+1)
	path := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(path, []byte(tooLarge), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := "limit of 1048576"
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
	}{
		{"file", []string{"put", "k", "-file", path}, ""},
		{"stdin", []string{"put", "k", "-"}, tooLarge},
		{"argument", []string{"put", "k", tooLarge}, ""},
	} {
		// The master address is never dialled: nothing listens there.
		code, _, stderr := runCatena(t, tc.stdin, append(tc.args, "-master", "127.0.0.1:1", "-timeout", "1ms")...)
		if code != 1 || !strings.Contains(stderr, limit) || strings.Contains(stderr, "master") {
			t.Errorf("%s: exit status %d, stderr %q; want a refusal naming the %s", tc.name, code, stderr, limit)
		}
	}
	// Exactly at the limit is fine: the failure is the missing master
	// (the deadline, or the refused connection on a machine slow enough
	// to see it first).
	code, _, stderr := runCatena(t, strings.Repeat("x", kv.ValueSizeMax), "put", "k", "-", "-master", "127.0.0.1:1", "-timeout", "1ms")
	missingMaster := strings.Contains(stderr, "master 127.0.0.1:1") || strings.Contains(stderr, "master at 127.0.0.1:1")
	if code != 1 || !missingMaster || strings.Contains(stderr, limit) {
		t.Errorf("a value at the limit: exit status %d, stderr %q", code, stderr)
	}
}

func TestPutValueSources(t *testing.T) {
	if v, err := putValue([]string{"k", "-"}, "", strings.NewReader("from stdin\n")); err != nil || string(v) != "from stdin\n" {
		t.Errorf("stdin: %q, %v", v, err)
	}
	if v, err := putValue([]string{"k", "literal"}, "", strings.NewReader("unused")); err != nil || string(v) != "literal" {
		t.Errorf("argument: %q, %v", v, err)
	}
	if v, err := putValue([]string{"k", "-"}, "", bytes.NewReader(nil)); err != nil || len(v) != 0 {
		t.Errorf("empty stdin: %q, %v", v, err)
	}
	if _, err := putValue([]string{"k"}, filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("a missing file: no error")
	}
}

// A value that is not text (a NUL byte, no newline at its end) put from a
// file or from standard input comes back byte for byte with get -o, to a
// file or to standard output; plain get adds the newline it documents.
func TestGetWritesExactlyTheValue(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	value := []byte{0, 'b', 'i', 'n', 0xff, '\n', 0, 'z'}
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, value, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCatena(t, "", "put", "from-file", "-file", in, "-master", master); code != 0 {
		t.Fatalf("put -file: exit status %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCatena(t, string(value), "put", "from-stdin", "-", "-master", master); code != 0 {
		t.Fatalf("put -: exit status %d, stderr %q", code, stderr)
	}
	for _, key := range []string{"from-file", "from-stdin"} {
		out := filepath.Join(dir, key+".out")
		code, stdout, stderr := runCatena(t, "", "get", key, "-o", out, "-master", master)
		got, err := os.ReadFile(out)
		if code != 0 || stdout != "" || err != nil || !bytes.Equal(got, value) {
			t.Errorf("get %s -o FILE: exit status %d, stdout %q, stderr %q, file %q (%v); want the file to hold %q", key, code, stdout, stderr, got, err, value)
		}
		if code, stdout, stderr := runCatena(t, "", "get", key, "-o", "-", "-master", master); code != 0 || stdout != string(value) {
			t.Errorf("get %s -o -: exit status %d, stdout %q, stderr %q; want %q", key, code, stdout, stderr, value)
		}
		if code, stdout, _ := runCatena(t, "", "get", key, "-master", master); code != 0 || stdout != string(value)+"\n" {
			t.Errorf("get %s: exit status %d, stdout %q; want the value and a newline", key, code, stdout)
		}
	}
	missing := filepath.Join(dir, "missing.out")
	code, _, stderr := runCatena(t, "", "get", "no-such-key", "-o", missing, "-master", master)
	if _, err := os.Stat(missing); code != 1 || !strings.Contains(stderr, "not found") || err == nil {
		t.Errorf("get of a missing key -o FILE: exit status %d, stderr %q, file made: %v; want 1, not found, and no file", code, stderr, err == nil)
	}
}

// put -sites N beyond the keyspace's sites fails (exit status 1) with
// an error that names them, and writes nothing.
func TestPutRefusesMoreSitesThanTheKeyspaceHas(t *testing.T) {
	c := testcluster.Start(t, 1)
	master := c.MasterAddr()
	code, stdout, stderr := runCatena(t, "", "put", "k", "v", "-sites", "3", "-master", master)
	want := `catena put: invalid request: too many sites: the write asked for 3 sites, but keyspace "default" is replicated by this site only; nothing was applied`
	if code != 1 || stdout != "" || strings.TrimSpace(stderr) != want {
		t.Fatalf("exit status %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
	if code, stdout, _ := runCatena(t, "", "get", "k", "-master", master); code == 0 {
		t.Fatalf("the refused put wrote k: %q", stdout)
	}
}

// catena status shows which site controls which key or prefix of a
// hierarchical keyspace, and says so when none does.
func TestStatusShowsHierarchicalControl(t *testing.T) {
	s := &client.ClusterStatus{Site: 2, Sites: []client.Site{{ID: 1, Name: "lisbon"}, {ID: 2, Name: "oslo"}, {ID: 3, Name: "rome"}},
		Keyspaces: []client.Keyspace{{Name: "default", Mode: "causal"}, {Name: "builds", Prefix: "b/", Mode: "hierarchical"}},
		Control:   []client.PathControl{{Keyspace: "builds", Volume: 1, Path: "b/src/", Site: 1, Deep: true}, {Keyspace: "builds", Volume: 1, Path: "b/x", Site: 3}}}
	var out bytes.Buffer
	printStatus(&out, "m", s)
	for _, want := range []string{
		`CONTROLLED  KEYSPACE  BY SITE   SCOPE`,
		`"b/src/"    builds    1 lisbon  prefix (every key under it)`,
		`"b/x"       builds    3 rome    key`,
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	s.Control = nil
	out.Reset()
	printStatus(&out, "m", s)
	if !strings.Contains(out.String(), "control: no site controls a key of a hierarchical keyspace") {
		t.Errorf("status without control:\n%s", out.String())
	}
	s.Keyspaces = s.Keyspaces[:1] // no hierarchical keyspace: nothing said
	out.Reset()
	printStatus(&out, "m", s)
	if strings.Contains(out.String(), "control") || strings.Contains(out.String(), "CONTROLLED") {
		t.Errorf("status of a deployment without hierarchical keyspaces mentions control:\n%s", out.String())
	}
}

// catena status's shipping table says, per volume and other site, how
// long ago the oldest update that site lacks was written ("-" when it
// lacks none), and the per-site summary the oldest of them.
func TestPrintShippingShowsTheOldestUnshipped(t *testing.T) {
	s := &client.ClusterStatus{Shipping: []client.ShippingLag{
		{Volume: 0, To: 2, Originated: 10, Shipped: 7, Lag: 3, AgeSeconds: 0.25},
		{Volume: 1, To: 2, Originated: 5, Shipped: 5, Lag: 0},
	}}
	var b strings.Builder
	printShipping(&b, s)
	for _, want := range []string{"OLDEST UNSHIPPED", "250ms", "volume 1  2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("shipping table lacks %q:\n%s", want, b.String())
		}
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); !strings.HasSuffix(strings.TrimSpace(lines[2]), "-") {
		t.Errorf("a volume site 2 holds whole shows %q, want - for its oldest unshipped", lines[2])
	}
	for i := range shippingRowsMax {
		s.Shipping = append(s.Shipping, client.ShippingLag{Volume: uint32(2 + i), To: 3, Originated: 1, Lag: 1, AgeSeconds: float64(i)})
	}
	b.Reset()
	printShipping(&b, s)
	if !strings.Contains(b.String(), "OLDEST UNSHIPPED") || !strings.Contains(b.String(), "15s") || !strings.Contains(b.String(), "250ms") {
		t.Errorf("summed shipping table lacks the oldest unshipped per site:\n%s", b.String())
	}
}

// catena scan lists the keys with a prefix, or matching a pattern,
// sorted; a prefix's glob bytes are matched as themselves; a PREFIX with
// -match is a usage error.
func TestScanListsKeys(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	for _, k := range []string{"p/b", "p/a", "p/*", "q/a", "pa"} {
		if code, _, stderr := runCatena(t, "", "put", k, "v", "-master", master); code != 0 {
			t.Fatalf("put %s: %s", k, stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"scan", "p/"}, "p/*\np/a\np/b\n"},
		{[]string{"scan", "p/*"}, "p/*\n"},
		{[]string{"scan", "-match", "p*a"}, "p/a\npa\n"},
		{[]string{"scan", "-match", "?/a"}, "p/a\nq/a\n"},
		{[]string{"scan", "zz"}, ""},
	} {
		code, stdout, stderr := runCatena(t, "", append(tc.args, "-master", master)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("%v: exit status %d, stdout %q, stderr %q; want %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if code, _, stderr := runCatena(t, "", "scan", "p/", "-match", "x", "-master", master); code != 2 || !strings.Contains(stderr, "not both") {
		t.Errorf("scan with PREFIX and -match: exit status %d, stderr %q; want a usage error", code, stderr)
	}
}

// put -ttl gives a key a deadline; ttl shows it; expire changes it and
// expire -persist removes it; bad durations are refused before
// connecting.
func TestPutTTLAndExpire(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runCatena(t, "", append(args, "-master", master)...)
	}
	if code, stdout, stderr := run("put", "session", "s1", "-ttl", "1h"); code != 0 || stdout != "OK\n" {
		t.Fatalf("put -ttl: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, _ := run("ttl", "session"); code != 0 || !strings.HasPrefix(stdout, "59m59.") && !strings.HasPrefix(stdout, "1h0m0s") {
		t.Fatalf("ttl after put -ttl 1h: %d %q", code, stdout)
	}
	if code, stdout, _ := run("expire", "session", "2h"); code != 0 || stdout != "OK\n" {
		t.Fatalf("expire 2h: %d %q", code, stdout)
	}
	if code, stdout, _ := run("ttl", "session", "-consistency", "any-member"); code != 0 || !strings.HasPrefix(stdout, "1h59m") && !strings.HasPrefix(stdout, "2h0m0s") {
		t.Fatalf("ttl after expire 2h: %d %q", code, stdout)
	}
	if code, stdout, _ := run("expire", "session", "-persist"); code != 0 || stdout != "OK\n" {
		t.Fatalf("expire -persist: %d %q", code, stdout)
	}
	if code, stdout, _ := run("ttl", "session"); code != 0 || stdout != "no deadline\n" {
		t.Fatalf("ttl after -persist: %d %q", code, stdout)
	}
	if code, _, stderr := run("expire", "nosuch", "1m"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("expire of an absent key: %d %q", code, stderr)
	}
	for _, bad := range [][]string{{"put", "k", "v", "-ttl", "-5s"}, {"expire", "session", "soon"}, {"expire", "session", "0s"}} {
		if code, _, stderr := runCatena(t, "", append(bad, "-master", "127.0.0.1:1")...); code != 2 {
			t.Errorf("%v: exit status %d, stderr %q; want a usage error before connecting", bad, code, stderr)
		}
	}
}
