package torture

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/testbin"
)

// helperEnv makes the test binary a helper process (see TestMain): serve
// ADDR prints every line received on connections to ADDR; dial ADDR sends
// every line of its standard input to ADDR over one connection.
const helperEnv = "CATENA_TORTURE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helper(mode)
		return
	}
	testbin.Main(m)
}

func helper(mode string) {
	what, addr, _ := strings.Cut(mode, " ")
	switch what {
	case "serve":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() {
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Println(s.Text())
				}
			}()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("connected")
		io.Copy(c, os.Stdin)
	}
	os.Exit(0)
}

// testNet creates a network of hosts a, b and c, or skips the test where
// that cannot be done.
func testNet(t *testing.T) *Net {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces")
	}
	const prefix = "ctortt"
	if err := CheckEnvironment(prefix); err != nil {
		t.Skip(err)
	}
	if _, err := RemoveLeftovers(prefix); err != nil {
		t.Fatal(err)
	}
	n, err := NewNet(prefix, "10.214.0", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Create(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Remove(); err != nil {
			t.Error(err)
		}
		if left, _ := namespaces(prefix); len(left) > 0 {
			t.Errorf("namespaces left: %v", left)
		}
	})
	return n
}

// endpoint is a helper process in a host's namespace, with its output
// lines on a channel.
type endpoint struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startHelper(t *testing.T, h *Host, mode string) *endpoint {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", h.NS, exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{cmd: cmd, lines: make(chan string, 100)}
	if e.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			e.lines <- s.Text()
		}
		close(e.lines)
	}()
	return e
}

// expect waits up to d for the line want.
func (e *endpoint) expect(t *testing.T, want string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-e.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", want)
			}
			if l == want {
				return
			}
			if strings.HasPrefix(l, "error:") {
				t.Fatalf("helper: %s (waiting for %q)", l, want)
			}
		case <-timeout:
			t.Fatalf("no %q within %s", want, d)
		}
	}
}

// expectNothing fails if the endpoint prints a line within d.
func (e *endpoint) expectNothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case l := <-e.lines:
		t.Fatalf("got %q, want nothing", l)
	case <-time.After(d):
	}
}

// Lose(b, a) loses b's messages to a, on a connection b opened before the
// fault as on a new one, while a's messages to b still arrive; healing
// delivers what TCP held back. Cut stops both ways. The harness reaches
// every host throughout.
func TestFaultRules(t *testing.T) {
	n := testNet(t)
	a, b, c := n.Hosts[0], n.Hosts[1], n.Hosts[2]
	serveA := startHelper(t, a, "serve "+a.IP+":9000")
	serveB := startHelper(t, b, "serve "+b.IP+":9000")
	serveA.expect(t, "listening", 10*time.Second)
	serveB.expect(t, "listening", 10*time.Second)

	bToA := startHelper(t, b, "dial "+a.IP+":9000")
	bToA.expect(t, "connected", 10*time.Second)
	fmt.Fprintln(bToA.stdin, "before")
	serveA.expect(t, "before", 5*time.Second)

	if err := n.Apply(Lose(b, a)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(bToA.stdin, "during")
	serveA.expectNothing(t, 2*time.Second)
	aToB := startHelper(t, a, "dial "+b.IP+":9000")
	aToB.expect(t, "connected", 10*time.Second)
	fmt.Fprintln(aToB.stdin, "a to b")
	serveB.expect(t, "a to b", 5*time.Second)
	// The harness, in the root namespace, still reaches a.
	if conn, err := net.DialTimeout("tcp", a.IP+":9000", 3*time.Second); err != nil {
		t.Fatalf("the harness cannot reach a: %v", err)
	} else {
		conn.Close()
	}

	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	serveA.expect(t, "during", 30*time.Second) // TCP retransmits with backoff

	if err := n.Apply(Cut(a, c)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(aToB.stdin, "a to b under a cut between a and c")
	serveB.expect(t, "a to b under a cut between a and c", 5*time.Second)
	cToA := startHelper(t, c, "dial "+a.IP+":9000")
	select {
	case l := <-cToA.lines:
		if l == "connected" {
			t.Fatal("c connected to a through a cut")
		}
	case <-time.After(4 * time.Second): // the dial times out after 3s
	}
}

// RemoveLeftovers kills the processes in the prefix's namespaces (a
// paused one too) and removes the namespaces.
func TestRemoveLeftovers(t *testing.T) {
	n := testNet(t)
	sleeper := exec.Command("ip", "netns", "exec", n.Hosts[0].NS, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	// Once it runs in the namespace, pause it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "pids", n.Hosts[0].NS).Output()
		if strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", fmt.Sprintf(" %d ", sleeper.Process.Pid)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not enter the namespace")
		}
	}
	sleeper.Process.Signal(syscall.SIGSTOP)
	removed, err := RemoveLeftovers(n.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the namespace still runs")
	}
	if left, _ := namespaces(n.Prefix); len(left) > 0 {
		t.Fatalf("namespaces left: %v", left)
	}
	if exec.Command("ip", "link", "show", n.Prefix+"-h").Run() == nil {
		t.Fatal("the harness link is left")
	}
}

func TestParseNamespaces(t *testing.T) {
	out := "ctort-s1 (id: 3)\nctort-sw (id: 1)\nctortx-a\nother\nctort-m1\n"
	got := parseNamespaces(out, "ctort")
	if want := []string{"ctort-m1", "ctort-s1", "ctort-sw"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestNewNetRefusesBadNames(t *testing.T) {
	for _, tc := range []struct {
		prefix, subnet string
		hosts          []string
	}{
		{"", "10.1.2", []string{"a"}},
		{"with-dash", "10.1.2", []string{"a"}},
		{"ctort", "10.1", []string{"a"}},
		{"ctort", "10.1.2", []string{"sw"}},
		{"ctort", "10.1.2", []string{"a-name-far-too-long"}},
	} {
		if _, err := NewNet(tc.prefix, tc.subnet, tc.hosts); err == nil {
			t.Errorf("NewNet(%q, %q, %v) succeeded", tc.prefix, tc.subnet, tc.hosts)
		}
	}
	n, err := NewNet("ctort", "10.1.2", []string{"m1", "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if n.Hosts[1].IP != "10.1.2.12" || n.Hosts[1].NS != "ctort-s1" || n.HarnessIP() != "10.1.2.1" {
		t.Fatalf("hosts %+v %+v, harness %s", *n.Hosts[0], *n.Hosts[1], n.HarnessIP())
	}
}
