// Package docker tests Catena's Docker image and compose file, which sit
// beside this test: build.sh builds the image, compose.yaml runs a
// cluster of three master members, three servers and a Redis-protocol
// proxy from it.
package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// The cluster compose.yaml describes.
const (
	masters = "m1:7100,m2:7100,m3:7100"
	image   = "catena:latest"
)

var servers = []string{"s1:7101", "s2:7101", "s3:7101"}

// Sizes and limits of the test.
const (
	// redisKeys and goKeys are the keys written in each batch through
	// redis-cli and through the Go client (the catena CLI in a container).
	redisKeys = 15
	goKeys    = 5
	// parallelExecs bounds the catena commands run in containers at once.
	parallelExecs = 4
	// fullTimeout bounds the wait for a cluster whose every server is up
	// and in the chain; generous, for a busy 2-core machine.
	fullTimeout = 3 * time.Minute
	// statusPoll is the pause between two looks at the cluster's status.
	statusPoll = time.Second
	// commandTimeout is the catena CLI's -timeout for one request.
	commandTimeout = "30s"
	// downTimeout bounds the removal of the cluster after the test.
	downTimeout = 2 * time.Minute
)

// TestCompose builds the image with build.sh, checks `docker run --rm
// catena:latest version`, starts the compose cluster under a project name
// of its own, writes keys through redis-cli (to the proxy's published
// port) and through the Go client (the catena CLI inside the cluster's
// network), kills the master's leader and the chain's tail with docker
// kill, writes more, reads everything back through both paths, starts
// them again, waits until the chain holds all three servers, writes more
// and reads everything back through redis-cli. Then it kills the head's
// process from the host, as a crash, checks that the restart policy
// brings it back, stops and starts the whole cluster, and reads
// everything back through both paths once more. Every read checks every
// value. The cluster, its network and its volumes are removed however
// the test ends.
//
// Runs only with CATENA_DOCKER_TEST=1; needs docker, docker-compose (or
// docker compose), redis-cli and the Go toolchain.
func TestCompose(t *testing.T) {
	if os.Getenv("CATENA_DOCKER_TEST") != "1" {
		t.Skip("set CATENA_DOCKER_TEST=1 to build the image and run the compose cluster (needs docker, docker-compose, redis-cli)")
	}
	for _, tool := range []string{"docker", "redis-cli", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("CATENA_DOCKER_TEST=1 but %s is not installed: %v", tool, err)
		}
	}
	compose, err := composeCommand()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, compose)

	c.step("building the image with build.sh")
	c.must("./build.sh")
	c.checkVersion()

	c.step("starting the cluster (project %s)", c.project)
	c.up()
	c.awaitFull("the cluster to start")
	c.checkStatusPage()

	data := map[string]string{}
	c.write(data, "before")
	c.checkAll(data, "with every process up", false)

	st := c.status()
	if st.Leader == "" {
		t.Fatalf("no master member leads: %+v", st)
	}
	leader := service(st.Leader)
	tail := service(st.Volumes[0].Chain[len(st.Volumes[0].Chain)-1])
	c.step("docker kill %s (the master's leader) and %s (the chain's tail)", leader, tail)
	c.must("docker", "kill", c.container(leader), c.container(tail))
	c.write(data, "during")
	c.checkAll(data, fmt.Sprintf("with %s and %s killed", leader, tail), true)

	c.step("starting %s and %s again", leader, tail)
	c.compose("start", leader, tail)
	st = c.awaitFull(tail + " to rejoin")
	if last := st.Volumes[0].Chain[len(st.Volumes[0].Chain)-1]; service(last) == tail {
		c.step("%s rejoined at the tail: strong reads are now its answers", tail)
	} else {
		c.step("the chain is %v (%s rejoined, but another server has become the tail)", st.Volumes[0].Chain, tail)
	}
	c.write(data, "after")
	c.checkAll(data, fmt.Sprintf("after %s and %s came back", leader, tail), false)

	c.crashAndRestart(service(c.status().Volumes[0].Chain[0]))
	c.step("docker-compose stop, then start: every process restarts from its volume")
	c.compose("stop", "-t", "10")
	c.compose("start")
	c.findProxy() // its published port is new
	c.awaitFull("the whole cluster to restart")
	c.checkAll(data, "after the crash and the restart of the whole cluster", true)
	c.step("done: %d keys checked through redis-cli and the Go client", len(data))
}

// cluster is one compose project of the test.
type cluster struct {
	t       *testing.T
	ctx     context.Context
	started time.Time
	// composeArgs runs docker-compose for this project: the command, -p
	// and -f.
	composeArgs []string
	project     string
	env         []string
	// token makes this run's values its own.
	token string
	// redisAddr is the proxy's published address on the host.
	redisAddr string
	// proxy is the proxy's container, where the catena CLI runs.
	proxy string
}

// composeCommand returns docker-compose, or docker compose where only the
// plugin is installed.
func composeCommand() ([]string, error) {
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, nil
	}
	return nil, errors.New("CATENA_DOCKER_TEST=1 but neither docker-compose nor docker compose is installed (Debian: apt-get install -y docker-compose)")
}

// newCluster names a new compose project and arranges its removal,
// containers, network and volumes, when the test ends, fails, or is
// interrupted.
func newCluster(t *testing.T, compose []string) *cluster {
	var b [4]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	project := "catenatest" + token
	file, err := filepath.Abs("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Minute)
	if d, ok := t.Deadline(); ok {
		// Leave time to remove the cluster before go test's timeout.
		deadline = d.Add(-downTimeout - 30*time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	c := &cluster{
		t: t, ctx: ctx, started: time.Now(), project: project, token: token,
		composeArgs: append(slices.Clone(compose), "-p", project, "-f", file),
		// Ports 0: Docker picks free host ports; the test asks which.
		env: append(os.Environ(), "CATENA_REDIS_PORT=0", "CATENA_STATUS_PORT=0"),
	}

	var once sync.Once
	down := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), downTimeout)
			defer cancel()
			args := append(slices.Clone(c.composeArgs[1:]), "down", "-v", "--remove-orphans", "-t", "5")
			cmd := exec.CommandContext(ctx, c.composeArgs[0], args...)
			cmd.Env = c.env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("removing project %s: %v\n%s", project, err, out)
			}
		})
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-signals; ok {
			fmt.Fprintf(os.Stderr, "interrupted: removing compose project %s\n", project)
			down()
			os.Exit(1)
		}
	}()
	t.Cleanup(func() {
		signal.Stop(signals)
		close(signals)
		cancel()
		down()
	})
	// Runs before down: the end of every container's log on failure.
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append(slices.Clone(c.composeArgs[1:]), "logs", "--no-color", "--tail", "15")
			cmd := exec.CommandContext(ctx, c.composeArgs[0], args...)
			cmd.Env = c.env
			out, _ := cmd.CombinedOutput()
			t.Logf("the end of each container's log:\n%s", out)
		}
	})
	return c
}

// step logs a progress line with the time since the test started.
func (c *cluster) step(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("%6.1fs  %s", time.Since(c.started).Seconds(), fmt.Sprintf(format, args...))
}

// run runs a command and returns its standard output, or an error with
// its standard error.
func (c *cluster) run(stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(c.ctx, name, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// must runs a command and fails the test if it fails.
func (c *cluster) must(name string, args ...string) string {
	c.t.Helper()
	out, err := c.run("", name, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// compose runs docker-compose for the project.
func (c *cluster) compose(args ...string) string {
	c.t.Helper()
	return c.must(c.composeArgs[0], append(slices.Clone(c.composeArgs[1:]), args...)...)
}

// checkVersion checks that the image's catena prints a version line, with
// the revision of this checkout when Go could record it.
func (c *cluster) checkVersion() {
	c.t.Helper()
	out := strings.TrimSpace(c.must("docker", "run", "--rm", image, "version"))
	c.step("docker run --rm %s version: %s", image, out)
	if !strings.HasPrefix(out, "catena ") || !strings.Contains(out, "linux/") {
		c.t.Fatalf("docker run --rm %s version printed %q, want a version line", image, out)
	}
	// Go records the revision in a git checkout, not in a linked worktree
	// (whose .git is a file).
	if fi, err := os.Stat("../../.git"); err == nil && fi.IsDir() {
		head := strings.TrimSpace(c.must("git", "rev-parse", "HEAD"))
		if !strings.Contains(out, "revision "+head) {
			c.t.Fatalf("the image's version %q does not name this checkout's revision %s", out, head)
		}
	}
}

// up starts the cluster and finds the proxy.
func (c *cluster) up() {
	c.t.Helper()
	c.compose("up", "-d")
	c.findProxy()
}

// findProxy finds the proxy's container and its published address, which
// Docker picks anew each time the container starts.
func (c *cluster) findProxy() {
	c.t.Helper()
	addr := strings.TrimSpace(c.compose("port", "proxy", "7379"))
	if _, port, _ := strings.Cut(addr, ":"); port == "" || port == "0" {
		c.t.Fatalf("docker-compose port proxy 7379 printed %q", addr)
	}
	c.redisAddr = addr
	c.proxy = c.container("proxy")
	c.step("proxy published at %s", c.redisAddr)
}

// container returns the id of a service's container.
func (c *cluster) container(service string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.compose("ps", "-q", service))
	if id == "" || strings.Contains(id, "\n") {
		c.t.Fatalf("docker-compose ps -q %s printed %q, want one container", service, id)
	}
	return id
}

// service returns the compose service of a node address ("s1:7101" → "s1").
func service(addr string) string {
	name, _, _ := strings.Cut(addr, ":")
	return name
}

// catena runs the catena CLI, the Go client, in the proxy's container,
// which is in the cluster's network.
func (c *cluster) catena(args ...string) (string, error) {
	return c.run("", "docker", append([]string{"exec", c.proxy, "/catena"}, append(args, "-master", masters, "-timeout", commandTimeout)...)...)
}

// tryStatus returns the master's view of the cluster, as catena status
// -json prints it.
func (c *cluster) tryStatus() (*client.ClusterStatus, error) {
	out, err := c.catena("status", "-json")
	if err != nil {
		return nil, err
	}
	var st client.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("catena status -json: %v\n%s", err, out)
	}
	return &st, nil
}

// status is tryStatus, failing the test on an error.
func (c *cluster) status() *client.ClusterStatus {
	c.t.Helper()
	st, err := c.tryStatus()
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// awaitFull waits until every server is alive and in the chain (no one
// joining) and every member runs the chain's configuration, and returns
// that status.
func (c *cluster) awaitFull(what string) *client.ClusterStatus {
	c.t.Helper()
	c.step("waiting for %s", what)
	deadline := time.Now().Add(fullTimeout)
	lastReport := time.Now()
	for {
		missing := ""
		st, err := c.tryStatus()
		if err != nil {
			missing = err.Error()
		} else if ok, m := st.Ready(servers); !ok {
			missing = m
		} else if v := st.Volumes[0]; len(st.Volumes) != 1 || len(v.Chain) != len(servers) || v.Joining != "" {
			missing = fmt.Sprintf("the chain is %v, %q joining", v.Chain, v.Joining)
		} else {
			c.step("ready: chain %s (epoch %d), master leader %s", strings.Join(v.Chain, " → "), v.Epoch, st.Leader)
			return st
		}
		if time.Now().After(deadline) || c.ctx.Err() != nil {
			c.t.Fatalf("%s: not ready after %s: %s", what, fullTimeout, missing)
		}
		if time.Since(lastReport) > 10*time.Second {
			c.step("still waiting: %s", missing)
			lastReport = time.Now()
		}
		time.Sleep(statusPoll)
	}
}

// checkStatusPage fetches /status.json from m1's published status page.
func (c *cluster) checkStatusPage() {
	c.t.Helper()
	addr := strings.TrimSpace(c.compose("port", "m1", "7180"))
	resp, err := http.Get("http://" + addr + "/status.json")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	var st client.ClusterStatus
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	if resp.StatusCode != http.StatusOK || err != nil || len(st.Masters) != 3 {
		c.t.Fatalf("GET http://%s/status.json: %s, %v\n%s", addr, resp.Status, err, body)
	}
	c.step("m1's status page is published at http://%s/", addr)
}

// write puts redisKeys keys through redis-cli and goKeys through the Go
// client, named after batch, and records them in data.
func (c *cluster) write(data map[string]string, batch string) {
	c.t.Helper()
	var commands strings.Builder
	var keys []string
	for i := range redisKeys {
		k := fmt.Sprintf("redis-%s-%02d", batch, i)
		v := fmt.Sprintf("%s-value-of-%s", c.token, k)
		fmt.Fprintf(&commands, "SET %s %s\n", k, v)
		keys = append(keys, k)
		data[k] = v
	}
	out, err := c.run(commands.String(), "redis-cli", c.redisCLIFlags()...)
	if err != nil {
		c.t.Fatal(err)
	}
	if replies := strings.Split(strings.TrimRight(out, "\n"), "\n"); len(replies) != len(keys) || slices.ContainsFunc(replies, func(r string) bool { return r != "OK" }) {
		c.t.Fatalf("redis-cli SET of %d keys answered:\n%s", len(keys), out)
	}
	var goPairs [][2]string
	for i := range goKeys {
		k := fmt.Sprintf("go-%s-%02d", batch, i)
		v := fmt.Sprintf("%s-value-of-%s", c.token, k)
		goPairs = append(goPairs, [2]string{k, v})
		data[k] = v
	}
	// The first through docker-compose run, as the README shows; the rest
	// in the proxy's container, which starts faster.
	first := goPairs[0]
	out = c.compose("run", "--rm", "cli", "put", first[0], first[1], "-master", masters, "-timeout", commandTimeout)
	if strings.TrimSpace(out) != "OK" {
		c.t.Fatalf("docker-compose run --rm cli put %s: %q", first[0], out)
	}
	errs := parallel(goPairs[1:], func(p [2]string) error {
		out, err := c.catena("put", p[0], p[1])
		if err == nil && strings.TrimSpace(out) != "OK" {
			err = fmt.Errorf("catena put %s printed %q", p[0], out)
		}
		return err
	})
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	c.step("wrote %d keys through redis-cli and %d through the Go client (%s)", redisKeys, goKeys, batch)
}

// checkAll reads every key of data through redis-cli and, with viaCLI,
// through the Go client (the catena CLI, one container command per key:
// slow, so not at every step), and checks each value.
func (c *cluster) checkAll(data map[string]string, when string, viaCLI bool) {
	c.t.Helper()
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var commands strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&commands, "GET %s\n", k)
	}
	out, err := c.run(commands.String(), "redis-cli", c.redisCLIFlags()...)
	if err != nil {
		c.t.Fatal(err)
	}
	replies := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(replies) != len(keys) {
		c.t.Fatalf("redis-cli: %d replies to %d GETs (%s):\n%s", len(replies), len(keys), when, out)
	}
	for i, k := range keys {
		if replies[i] != data[k] {
			c.t.Errorf("redis-cli GET %s = %q, want %q (%s)", k, replies[i], data[k], when)
		}
	}
	if !viaCLI {
		if c.t.Failed() {
			c.t.FailNow()
		}
		c.step("read back all %d keys through redis-cli %s", len(keys), when)
		return
	}
	errs := parallel(keys, func(k string) error {
		out, err := c.catena("get", k)
		if err != nil {
			return err
		}
		if got := strings.TrimSuffix(out, "\n"); got != data[k] {
			return fmt.Errorf("catena get %s = %q, want %q (%s)", k, got, data[k], when)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	if c.t.Failed() {
		c.t.FailNow()
	}
	c.step("read back all %d keys through redis-cli and the Go client %s", len(keys), when)
}

// redisCLIFlags returns redis-cli's flags for the proxy.
func (c *cluster) redisCLIFlags() []string {
	host, port, _ := strings.Cut(c.redisAddr, ":")
	return []string{"-h", host, "-p", port}
}

// crashAndRestart kills a server's process from the host, as a crash
// (docker kill would count as a stop, which the restart policy leaves
// alone), and waits until Docker restarted it and it is back in the
// chain. It needs the container's process to be on this host, as root.
func (c *cluster) crashAndRestart(svc string) {
	c.t.Helper()
	if os.Geteuid() != 0 {
		c.step("not root: leaving out the crash of %s's process (restart: unless-stopped)", svc)
		return
	}
	id := c.container(svc)
	inspect := func() (pid int, restarts int) {
		out := strings.Fields(c.must("docker", "inspect", "-f", "{{.State.Pid}} {{.RestartCount}}", id))
		if len(out) != 2 {
			c.t.Fatalf("docker inspect %s printed %q", svc, out)
		}
		pid, _ = strconv.Atoi(out[0])
		restarts, _ = strconv.Atoi(out[1])
		return pid, restarts
	}
	pid, restarts := inspect()
	// The pid must be this host's: check that it runs catena before
	// killing it (a remote Docker engine's pids are not ours).
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.HasPrefix(cmdline, []byte("/catena\x00server")) {
		c.step("%s's process (pid %d) is not visible on this host: leaving out its crash", svc, pid)
		return
	}
	c.step("kill -9 %d: %s's process crashes", pid, svc)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(fullTimeout)
	for {
		if _, n := inspect(); n > restarts {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("Docker did not restart %s within %s", svc, fullTimeout)
		}
		time.Sleep(statusPoll)
	}
	c.step("Docker restarted %s", svc)
	c.awaitFull(svc + " to rejoin")
}

// parallel calls f on every item, parallelExecs at a time, and returns
// the errors.
func parallel[T any](items []T, f func(T) error) []error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, parallelExecs)
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}
