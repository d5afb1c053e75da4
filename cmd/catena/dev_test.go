package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/redis/go-redis/v9"
)

// devWait bounds every wait for catena dev in these tests: its start,
// its exit, its processes' exit. Generous, so a busy machine passes.
const devWait = 90 * time.Second

// devHTTPOffset is catena dev's default -http-offset.
const devHTTPOffset = 80

// devBanner ends what catena dev prints once the cluster is ready.
const devBanner = "Ctrl-C stops the cluster."

// syncBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devRun is a catena dev process started by a test.
type devRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	dir    string // the directory dev keeps its files in, once known
}

// freeBasePort returns a base port with base+0 .. base+servers free, and
// the HTTP ports of dev's default -http-offset above them, and the
// proxy's port and its HTTP port.
// randomBasePort draws a base port for catena dev from below the
// kernel's ephemeral port range (net.ipv4.ip_local_port_range): a port
// found free there stays free until dev binds it, whereas one in the
// ephemeral range may meanwhile become the local port of some other
// test's outgoing connection (CI: "proxy's address 127.0.0.1:55166 is in
// use"). Dev's ports reach base+2,280 (two sites).
func randomBasePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const lowest, span = 10000, devSitePortStep + devRedisPortOffset + devHTTPOffset + 10
	if low-span <= lowest {
		t.Skipf("the ephemeral port range starts at %d: no room below it for catena dev's ports", low)
	}
	return lowest + rand.IntN(low-span-lowest)
}

func freeBasePort(t *testing.T, servers int) int {
	t.Helper()
	for range 100 {
		base := randomBasePort(t)
		free := true
		for i := 0; i <= 2*servers+4 && free; i++ {
			port := base + i
			switch {
			case i == 2*servers+4:
				port = base + devRedisPortOffset + 1 // the proxy's TLS port
			case i == 2*servers+3:
				port = base + devRedisPortOffset + devHTTPOffset
			case i == 2*servers+2:
				port = base + devRedisPortOffset
			case i > servers:
				port = base + devHTTPOffset + i - servers - 1
			}
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// startDev starts catena dev with args and env added to the test's
// environment. Cleanup stops it and any process it left running.
func startDev(t *testing.T, env []string, args ...string) *devRun {
	t.Helper()
	d := &devRun{t: t, done: make(chan struct{})}
	d.cmd = exec.Command(catenaBinary(t), append([]string{"dev"}, args...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = &d.stdout, &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.cleanup)
	return d
}

// cleanup stops dev and kills whatever it started that still runs, so a
// failing test leaves no process behind.
func (d *devRun) cleanup() {
	select {
	case <-d.done:
	default:
		d.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-d.done:
		case <-time.After(devWait):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	for _, pid := range d.pids() {
		if !processGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if d.t.Failed() {
		d.t.Logf("catena dev stdout:\n%s\nstderr:\n%s", d.stdout.String(), d.stderr.String())
	}
}

// awaitBanner waits until dev reports the cluster ready and returns its
// directory, failing the test if dev exits first.
func (d *devRun) awaitBanner() string {
	d.t.Helper()
	deadline := time.Now().Add(devWait)
	for !strings.Contains(d.stdout.String(), devBanner) {
		select {
		case <-d.done:
			d.t.Fatalf("catena dev exited (%v) before the cluster was ready", d.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("catena dev did not report the cluster ready within %s", devWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := regexp.MustCompile(`files in (\S+)`).FindStringSubmatch(d.stdout.String())
	if m == nil {
		d.t.Fatalf("no directory in dev's banner:\n%s", d.stdout.String())
	}
	d.dir = m[1]
	return d.dir
}

// tlsFiles returns the client certificate dev made for the catena
// commands (after awaitBanner).
func (d *devRun) tlsFiles() client.TLSFiles {
	tls := filepath.Join(d.dir, "tls")
	return client.TLSFiles{CA: filepath.Join(tls, "ca.crt"), Cert: filepath.Join(tls, "client-dev.crt"), Key: filepath.Join(tls, "client-dev.key")}
}

// awaitExit waits for dev to exit and returns its exit status.
func (d *devRun) awaitExit() int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.cmd.ProcessState.ExitCode()
	case <-time.After(devWait):
		d.t.Fatalf("catena dev still running after %s", devWait)
		return 0
	}
}

// pids returns the pids in dev's pid files.
func (d *devRun) pids() []int {
	if d.dir == "" {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(d.dir, "*.pid"))
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// processGone reports whether pid has exited. A process whose parent died
// is a zombie until whoever adopted it reaps it: that counts as exited.
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		// pid (comm) state ...: the state follows the last ')'.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] == 'Z'
		}
		return false
	}
	if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
		return true // a /proc without the pid: gone
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// awaitGone waits until every pid has exited.
func awaitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(devWait)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still running %s after catena dev stopped", pid, devWait)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// A server that cannot start (its data directory is a file) makes dev
// exit with an error naming it and its own error, instead of announcing a
// cluster that restarts it forever.
func TestDevFailsWhenAProcessCannotStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, nil, "-dir", dir, "-servers", "1", "-base-port", strconv.Itoa(freeBasePort(t, 1)))
	d.dir = dir
	if code := d.awaitExit(); code == 0 {
		t.Errorf("catena dev exited with status 0")
	}
	stderr := d.stderr.String()
	if !strings.Contains(stderr, "s1 exited while the cluster was starting") || !strings.Contains(stderr, "not a directory") {
		t.Errorf("stderr does not name s1 and its error:\n%s", stderr)
	}
	if strings.Contains(d.stdout.String(), devBanner) {
		t.Errorf("dev announced the cluster:\n%s", d.stdout.String())
	}
}

// A bad -placement makes the master exit; dev says so with the master's
// error.
func TestDevFailsOnBadPlacement(t *testing.T) {
	dir := t.TempDir()
	d := startDev(t, nil, "-dir", dir, "-servers", "1", "-placement", "nonsense", "-base-port", strconv.Itoa(freeBasePort(t, 1)))
	d.dir = dir
	if code := d.awaitExit(); code == 0 {
		t.Errorf("catena dev exited with status 0")
	}
	if stderr := d.stderr.String(); !strings.Contains(stderr, "master exited") || !strings.Contains(stderr, `unknown placement "nonsense"`) {
		t.Errorf("stderr does not name the master and its error:\n%s", stderr)
	}
}

// A port in use is refused before anything starts: clients would reach
// whatever holds it.
func TestDevFailsWhenAPortIsInUse(t *testing.T) {
	base := freeBasePort(t, 1)
	taken := fmt.Sprintf("127.0.0.1:%d", base+1)
	ln, err := net.Listen("tcp", taken)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	d := startDev(t, nil, "-dir", dir, "-servers", "1", "-base-port", strconv.Itoa(base))
	d.dir = dir
	if code := d.awaitExit(); code == 0 {
		t.Errorf("catena dev exited with status 0")
	}
	if stderr := d.stderr.String(); !strings.Contains(stderr, "s1's address "+taken+" is in use") {
		t.Errorf("stderr does not name the port in use:\n%s", stderr)
	}
}

// Ctrl-C stops every process and removes the temporary directory dev
// created; the banner names the exact pid file to kill a server with.
func TestDevStopsAndRemovesItsTemporaryDirectory(t *testing.T) {
	tmp := t.TempDir()
	d := startDev(t, []string{"TMPDIR=" + tmp}, "-servers", "1", "-base-port", strconv.Itoa(freeBasePort(t, 1)))
	dir := d.awaitBanner()
	if filepath.Dir(dir) != tmp {
		t.Fatalf("dev's directory %s is not in TMPDIR %s", dir, tmp)
	}
	if want := "kill -9 $(cat " + filepath.Join(dir, "s1.pid") + ")"; !strings.Contains(d.stdout.String(), want) {
		t.Errorf("the banner does not show %q:\n%s", want, d.stdout.String())
	}
	pids := d.pids()
	if len(pids) != 3 {
		t.Fatalf("pid files hold %v, want a master, a server and the proxy", pids)
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	if code := d.awaitExit(); code != 0 {
		t.Errorf("catena dev exited with status %d after Ctrl-C", code)
	}
	awaitGone(t, pids)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dev's temporary directory is still there: %v", err)
	}
}

// A directory given with -dir is kept.
func TestDevKeepsTheDirectoryItWasGiven(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	d := startDev(t, nil, "-dir", dir, "-servers", "1", "-base-port", strconv.Itoa(freeBasePort(t, 1)))
	if got := d.awaitBanner(); got != dir {
		t.Errorf("banner names %s, want %s", got, dir)
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	if code := d.awaitExit(); code != 0 {
		t.Errorf("catena dev exited with status %d after Ctrl-C", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "s1.log")); err != nil {
		t.Errorf("the directory given with -dir lost its files: %v", err)
	}
}

// When dev itself is killed with SIGKILL, its processes (in their own
// process group, out of reach of its signals) stop too.
func TestDevProcessesStopWhenDevIsKilled(t *testing.T) {
	dir := t.TempDir()
	d := startDev(t, nil, "-dir", dir, "-servers", "1", "-base-port", strconv.Itoa(freeBasePort(t, 1)))
	d.awaitBanner()
	pids := d.pids()
	if len(pids) != 3 {
		t.Fatalf("pid files hold %v, want a master, a server and the proxy", pids)
	}
	d.cmd.Process.Kill()
	<-d.done
	awaitGone(t, pids)
	if log, err := os.ReadFile(filepath.Join(dir, "s1.log")); err != nil || !strings.Contains(string(log), "catena dev exited: shutting down") {
		t.Errorf("s1 did not shut down cleanly (%v):\n%s", err, log)
	}
}

// freeSitesBasePort returns a base port under which catena dev -sites n
// -servers servers finds its ports free: every site's masters, servers,
// proxy and their HTTP ports.
func freeSitesBasePort(t *testing.T, n, servers int) int {
	t.Helper()
	for range 100 {
		base := randomBasePort(t)
		free := true
		for s := range n {
			site := base + devSitePortStep*s
			ports := []int{site, site + devHTTPOffset, site + devRedisPortOffset, site + devRedisPortOffset + 1, site + devRedisPortOffset + devHTTPOffset}
			for i := 1; i <= servers; i++ {
				ports = append(ports, site+i, site+i+devHTTPOffset)
			}
			for _, port := range ports {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// catena dev -sites 2: two clusters, each announced with its masters and
// its proxy's ports; a write at one site is read at the other, over the
// other's Redis TLS port too, and catena status shows the sites and the
// shipping. Every link, between the sites as well, is mutual TLS with
// dev's one CA: the shipping crosses them.
func TestDevSites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	base := freeSitesBasePort(t, 2, 2)
	d := startDev(t, nil, "-sites", "2", "-servers", "2", "-wan-rtt", "40ms", "-base-port", strconv.Itoa(base), "-no-sync")
	d.awaitBanner()
	out := d.stdout.String()
	site1, site2 := fmt.Sprintf("127.0.0.1:%d", base), fmt.Sprintf("127.0.0.1:%d", base+devSitePortStep)
	site2TLS := fmt.Sprintf("127.0.0.1:%d", base+devSitePortStep+devRedisPortOffset+1)
	for _, want := range []string{"2 sites ready", "40ms ± 10ms round trip", "site 1 (site1): clients attach to its masters, -master " + site1,
		"site 2 (site2): clients attach to its masters, -master " + site2, "site2-s2", "site2-proxy",
		fmt.Sprintf("https://127.0.0.1:%d/", base+devSitePortStep+devHTTPOffset),
		"TLS: every link, within a site and between sites, is mutual TLS 1.3",
		fmt.Sprintf("-p %d get greeting     (over TLS)", base+devRedisPortOffset+1), "-p " + strings.TrimPrefix(site2TLS, "127.0.0.1:") + " get greeting     (over TLS)"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev's banner lacks %q:\n%s", want, out)
		}
	}
	files := d.tlsFiles()
	tlsArgs := []string{"-tls-ca", files.CA, "-tls-cert", files.Cert, "-tls-key", files.Key}
	if code, _, stderr := runCatena(t, "", append([]string{"put", "greeting", "from-site1", "-master", site1}, tlsArgs...)...); code != 0 {
		t.Fatalf("put at site 1: exit %d: %s", code, stderr)
	}
	deadline := time.Now().Add(devWait)
	for {
		code, stdout, _ := runCatena(t, "", append([]string{"get", "greeting", "-master", site2}, tlsArgs...)...)
		if code == 0 && strings.TrimSpace(stdout) == "from-site1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("site 2 does not read site 1's write within %s: exit %d, %q", devWait, code, stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		code, stdout, stderr := runCatena(t, "", append([]string{"status", "-master", site1}, tlsArgs...)...)
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, stderr)
		}
		if strings.Contains(stdout, "site 1 of deployment ") && strings.Contains(stdout, ": sites 1 site1") && regexp.MustCompile(`volume 0\s+2 site2\s+1\s+1\s+0`).MatchString(stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show the sites and volume 0 shipped to site 2:\n%s", stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Site 2's proxy over its TLS port, verified with dev's CA.
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	rc := redis.NewClient(&redis.Options{Addr: site2TLS, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), devWait)
	defer cancel()
	if got, err := rc.Get(ctx, "greeting").Result(); err != nil || got != "from-site1" {
		t.Fatalf("site 2's proxy over TLS: get greeting = %q, %v; want from-site1", got, err)
	}
	// A write durable across both sites returns only once site 2 holds
	// it stable: site 2 reads it at once, with no retry.
	if code, _, stderr := runCatena(t, "", append([]string{"put", "durable", "at-both", "-sites", "2", "-master", site1}, tlsArgs...)...); code != 0 {
		t.Fatalf("put -sites 2 at site 1: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := runCatena(t, "", append([]string{"get", "durable", "-master", site2}, tlsArgs...)...); code != 0 || strings.TrimSpace(stdout) != "at-both" {
		t.Fatalf("site 2 right after put -sites 2: exit %d, %q, %s; want at-both", code, stdout, stderr)
	}
}
