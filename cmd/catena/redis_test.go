package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisAddrInBanner finds the proxy's address in dev's banner.
var redisAddrInBanner = regexp.MustCompile(`(?m)^  proxy\s+(\S+)\s.*pid`)

// redisCLITiming matches the line redis-cli prints after a command that
// took half a second or more, e.g. "(0.53s)".
var redisCLITiming = regexp.MustCompile(`^\(\d+\.\d+s\)\r?$`)

// startDevWithProxy starts catena dev and returns it once ready, with the
// proxy's address from its banner.
func startDevWithProxy(t *testing.T, args ...string) (*devRun, string) {
	t.Helper()
	d := startDev(t, nil, append([]string{"-base-port", strconv.Itoa(freeBasePort(t, 3))}, args...)...)
	d.awaitBanner()
	m := redisAddrInBanner.FindStringSubmatch(d.stdout.String())
	if m == nil {
		t.Fatalf("no proxy in dev's banner:\n%s", d.stdout.String())
	}
	return d, m[1]
}

// The redis-cli session in testdata/redis-cli-session.txt, covering every
// command the proxy serves, prints what the file says against catena
// dev's proxy.
func TestDevRedisCLISession(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (Debian: apt-get install -y redis-tools)")
	}
	commands, want := readSession(t, filepath.Join("testdata", "redis-cli-session.txt"))
	_, addr := startDevWithProxy(t)
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(cli, "-h", host, "-p", port, "--no-raw")
	cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli: %v\n%s", err, out)
	}
	// redis-cli notes how long a command took when it took half a
	// second or more, as under go test -race: the note is no reply.
	got := slices.DeleteFunc(strings.Split(strings.TrimRight(string(out), "\n"), "\n"), redisCLITiming.MatchString)
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = strings.TrimRight(got[i], " \r")
		}
		if i < len(want) {
			w = strings.TrimRight(want[i], " \r")
		}
		if re, ok := strings.CutPrefix(w, "~ "); ok {
			if !regexp.MustCompile("^" + re + "$").MatchString(g) {
				t.Errorf("line %d: %q does not match %q", i+1, g, re)
			}
		} else if g != w {
			t.Errorf("line %d: %q, want %q", i+1, g, w)
		}
	}
	if t.Failed() {
		t.Logf("redis-cli printed:\n%s", out)
	}
}

// readSession reads a session file: lines before the first "> " are
// commentary; "> " lines are commands, the others expected output.
func readSession(t *testing.T, path string) (commands, output []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	started := false
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if c, ok := strings.CutPrefix(l, "> "); ok {
			started = true
			commands = append(commands, c)
		} else if started {
			output = append(output, l)
		}
	}
	return commands, output
}

// go-redis works through catena dev's proxy, and the proxy, like every
// process dev runs, is restarted when it dies, with the data intact.
func TestDevProxyServesGoRedisAndRestarts(t *testing.T) {
	d, addr := startDevWithProxy(t, "-restart-delay", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), devWait)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	for i := range 10 {
		if err := rc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rc.Incr(ctx, "visits").Result(); err != nil || n != 1 {
		t.Fatalf("INCR = %d, %v", n, err)
	}
	data, err := os.ReadFile(filepath.Join(d.dir, "proxy.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(devWait)
	restarted := regexp.MustCompile(`process restarted.* process=proxy`)
	for !restarted.MatchString(d.stdout.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not restart the proxy:\n%s", d.stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// go-redis reconnects; the proxy may still be reaching the master.
	var v string
	for {
		if v, err = rc.Get(ctx, "k7").Result(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || v != "7" {
		t.Fatalf("GET k7 after the restart = %q, %v", v, err)
	}
	if n, err := rc.Incr(ctx, "visits").Result(); err != nil || n != 2 {
		t.Fatalf("INCR after the restart = %d, %v", n, err)
	}
}

// catena dev's proxy serves the Redis protocol over TLS too, with the
// certificate dev made: go-redis (and redis-cli --tls, when installed)
// talk to it trusting dev's CA; a plaintext client gets nothing there.
// The catena commands need dev's client certificate.
func TestDevRedisOverTLSAndClientCommands(t *testing.T) {
	d, addr := startDevWithProxy(t)
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	tlsAddr := fmt.Sprintf("%s:%d", host, p+1)
	if !strings.Contains(d.stdout.String(), "redis-cli --tls --cacert") {
		t.Fatalf("dev does not print how to use the TLS port:\n%s", d.stdout.String())
	}
	files := d.tlsFiles()
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	ctx, cancel := context.WithTimeout(context.Background(), devWait)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: tlsAddr, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}})
	defer rc.Close()
	if err := rc.Set(ctx, "tls:k", "over tls", 0).Err(); err != nil {
		t.Fatal(err)
	}
	plain := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second})
	defer plain.Close()
	if err := plain.Get(ctx, "tls:k").Err(); err == nil {
		t.Fatal("a plaintext client was served on the TLS port")
	}
	if cli, err := exec.LookPath("redis-cli"); err == nil {
		out, err := exec.Command(cli, "--tls", "--cacert", files.CA, "-h", host, "-p", strconv.Itoa(p+1), "get", "tls:k").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "over tls" {
			t.Fatalf("redis-cli --tls get: %q, %v", out, err)
		}
	}

	// The catena commands: with dev's client certificate from the
	// environment it printed, and refused without.
	master := fmt.Sprintf("127.0.0.1:%d", p-devRedisPortOffset)
	env := []string{envTLSCA + "=" + files.CA, envTLSCert + "=" + files.Cert, envTLSKey + "=" + files.Key}
	get := exec.Command(catenaBinary(t), "get", "tls:k", "-master", master)
	get.Env = append(os.Environ(), env...)
	if out, err := get.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "over tls" {
		t.Fatalf("catena get with dev's certificate: %q, %v", out, err)
	}
	get = exec.Command(catenaBinary(t), "get", "tls:k", "-master", master, "-timeout", "5s")
	get.Env = append(os.Environ(), envTLSCA+"=", envTLSCert+"=", envTLSKey+"=")
	if out, err := get.CombinedOutput(); err == nil || !strings.Contains(string(out), "requires TLS") {
		t.Fatalf("catena get without a certificate: %q, %v; want a failure that names TLS", out, err)
	}
	logs, _ := os.ReadFile(filepath.Join(d.dir, "master.log"))
	if !strings.Contains(string(logs), `msg="connection refused"`) {
		t.Errorf("the master did not log the refused plaintext client:\n%s", logs)
	}
}

// A proxy refuses to serve the Redis protocol in plaintext without a
// password on an address other than loopback.
func TestProxyRefusesPlaintextWithoutPasswordBeyondLoopback(t *testing.T) {
	out, err := exec.Command(catenaBinary(t), "proxy", "-listen", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "loopback address only") {
		t.Fatalf("catena proxy -listen 0.0.0.0:0: %q, %v; want a refusal", out, err)
	}
}
