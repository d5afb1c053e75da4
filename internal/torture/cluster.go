package torture

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/faults"
)

// Ports every process listens on, on its own host's address.
const (
	masterPort = 7100
	serverPort = 7101
	// proxyPort is where the Redis proxy listens (Redis's own is 6379).
	proxyPort = 6379
	// stopWait bounds a process's clean shutdown at the end of a run.
	stopWait = 5 * time.Second
	// statusTimeout bounds one status request to the master.
	statusTimeout = 2 * time.Second
)

// Process is one catena process of the cluster, alone on its host.
type Process struct {
	// Name is its host's name: m1.. for masters, s1.. for servers, p1
	// for the Redis proxy.
	Name string
	// Master tells a master member from a server (or the proxy).
	Master bool
	Host   *Host
	// Addr is where it listens, and its id in the cluster.
	Addr string
	args []string
	log  string

	mu sync.Mutex
	// exe is the catena binary it starts from (the cluster's unless
	// Replace changed it).
	exe  string
	cmd  *exec.Cmd
	done chan struct{}
	// down: killed (or exited) and not restarted; paused: SIGSTOPped.
	down, paused bool
	// expectExit is set before the harness kills or stops the process.
	expectExit bool
	// faultsFile is the process's control file (faults.EnvVar), "" if
	// the run injects no clock or disk fault; faults is what it holds.
	faultsFile string
	faults     faults.Faults
	// diskFault is set while a disk fault is in force: the process may
	// exit at its first failed commit, which is then expected, and it is
	// restarted only when the fault ends; diskExit is when it exited and
	// diskExitStatus how.
	diskFault      bool
	diskExit       time.Time
	diskExitStatus string
}

// Cluster is one site's masters and servers, each in its host's
// namespace, started from the catena binary exe (each process may be
// replaced by another binary: Replace). A run of one site has one
// Cluster; a run of several sites one per site, on the same Net.
type Cluster struct {
	Net *Net
	// Site is the cluster's site id (from 1), 0 in a run of one site;
	// Hosts are its masters' and servers' hosts, masters first.
	Site    int
	Hosts   []*Host
	Masters []*Process
	Servers []*Process
	// Proxy is the Redis proxy (catena proxy) on a host of its own, or
	// nil: only a run with the upgrade nemesis has one. It is in neither
	// Hosts nor All, so the fault nemesis never picks it.
	Proxy     *Process
	dataDir   string
	logDir    string
	replicas  int
	pipeEnv   string
	pipeRead  *os.File
	pipeWrite *os.File
	start     time.Time

	mu sync.Mutex
	// exits lists the processes that exited without the harness asking;
	// stopping is set once the run shuts the cluster down.
	exits    []string
	stopping bool
}

// clusterOptions describe the cluster to build.
type clusterOptions struct {
	// exe is the catena binary every process starts from.
	exe              string
	masters, servers int
	volumes          int
	replicas         int
	dataDir, logDir  string
	// pipeEnv names the environment variable through which a process
	// learns the descriptor of a pipe whose write end only the harness
	// holds: the process shuts down when the harness is gone, even by
	// kill -9 (see cmd/catena's stopContext).
	pipeEnv string
	// faultsDir, if set, holds each process's control file (faults.EnvVar):
	// the run injects clock or disk faults.
	faultsDir string
	// In a run of several sites: site is this cluster's id, sites the
	// deployment's sites as catena master -sites takes them, and wan the
	// flags that delay messages to the other sites' processes
	// (-wan-rtt, -wan-jitter, -wan-peers). site 0: a run of one site.
	site  int
	sites string
	wan   []string
	// proxyHost, if set, is the host of a Redis proxy for the cluster.
	proxyHost *Host
}

// newCluster describes the processes on hosts, masters first.
func newCluster(n *Net, hosts []*Host, o clusterOptions) (*Cluster, error) {
	if len(hosts) != o.masters+o.servers {
		return nil, fmt.Errorf("torture: %d hosts for %d masters and %d servers", len(hosts), o.masters, o.servers)
	}
	c := &Cluster{Net: n, Site: o.site, Hosts: hosts, dataDir: o.dataDir, logDir: o.logDir, replicas: o.replicas, pipeEnv: o.pipeEnv, start: time.Now()}
	masterAddrs, serverAddrs := processAddrs(hosts[:o.masters], masterPort), processAddrs(hosts[o.masters:], serverPort)
	var siteArgs []string
	if o.site > 0 {
		siteArgs = append([]string{"-site", strconv.Itoa(o.site)}, o.wan...)
	}
	for i, addr := range masterAddrs {
		h := hosts[i]
		args := []string{"master", "-listen", addr, "-data", filepath.Join(o.dataDir, h.Name),
			"-servers", strings.Join(serverAddrs, ","), "-volumes", strconv.Itoa(o.volumes), "-replicas", strconv.Itoa(o.replicas),
			"-check-invariants"}
		if o.masters > 1 {
			args = append(args, "-masters", strings.Join(masterAddrs, ","))
		}
		if o.site > 0 {
			args = append(args, "-sites", o.sites)
		}
		args = append(args, siteArgs...)
		c.Masters = append(c.Masters, &Process{Name: h.Name, Master: true, Host: h, Addr: addr, args: args, log: filepath.Join(o.logDir, h.Name+".log"), exe: o.exe})
	}
	for i, addr := range serverAddrs {
		h := hosts[o.masters+i]
		args := []string{"server", "-listen", addr, "-master", strings.Join(masterAddrs, ","), "-data", filepath.Join(o.dataDir, h.Name),
			"-check-invariants"}
		args = append(args, siteArgs...)
		c.Servers = append(c.Servers, &Process{Name: h.Name, Host: h, Addr: addr, args: args, log: filepath.Join(o.logDir, h.Name+".log"), exe: o.exe})
	}
	if h := o.proxyHost; h != nil {
		c.Proxy = newProxy(h, strings.Join(masterAddrs, ","), o.exe, o.logDir)
	}
	if o.faultsDir != "" {
		for _, p := range c.All() {
			p.faultsFile = filepath.Join(o.faultsDir, p.Name)
		}
	}
	var err error
	if c.pipeRead, c.pipeWrite, err = os.Pipe(); err != nil {
		return nil, err
	}
	return c, nil
}

// newProxy describes a Redis proxy on host h for the masters at masters.
// It listens on the test network in plaintext without a password
// (-insecure): the network is the harness's own.
func newProxy(h *Host, masters, exe, logDir string) *Process {
	addr := fmt.Sprintf("%s:%d", h.IP, proxyPort)
	args := []string{"proxy", "-listen", addr, "-insecure", "-master", masters}
	return &Process{Name: h.Name, Host: h, Addr: addr, args: args, log: filepath.Join(logDir, h.Name+".log"), exe: exe}
}

// hostNames names the hosts of a run: m1.. and s1.. with one site; with
// several, the site's id first (1m1, 1s1, 2m1, ...). Each site's masters
// come before its servers, site after site.
func hostNames(masters, servers, sites int) []string {
	var names []string
	for site := 1; site <= sites; site++ {
		prefix := ""
		if sites > 1 {
			prefix = strconv.Itoa(site)
		}
		for i := range masters {
			names = append(names, fmt.Sprintf("%sm%d", prefix, i+1))
		}
		for i := range servers {
			names = append(names, fmt.Sprintf("%ss%d", prefix, i+1))
		}
	}
	return names
}

// proxyHostName names the Redis proxy's host, after every site's hosts.
const proxyHostName = "p1"

// runHostNames names every host of a run of o: hostNames's, and the
// proxy's when the run has one (withProxy).
func runHostNames(o Options) []string {
	names := hostNames(o.Masters, o.Servers, o.Sites)
	if withProxy(o) {
		names = append(names, proxyHostName)
	}
	return names
}

// withProxy reports whether a run of o has a Redis proxy: one with the
// upgrade nemesis, which replaces the proxy too.
func withProxy(o Options) bool { return o.Upgrade != nil }

// newSites describes the cluster of each site of o on n's hosts (named by
// runHostNames), base giving what they share. With several sites, every
// master is told every site's masters, and every process delays its
// messages to the other sites' processes by o.WANRTT. The proxy, if any,
// serves the first site.
func newSites(n *Net, o Options, base clusterOptions) ([]*Cluster, error) {
	per := o.Masters + o.Servers
	if want := len(runHostNames(o)); len(n.Hosts) != want {
		return nil, fmt.Errorf("torture: %d hosts for %d sites of %d processes (%d hosts in all)", len(n.Hosts), o.Sites, per, want)
	}
	hostsOf := func(site int) []*Host { return n.Hosts[(site-1)*per : site*per] }
	var spec []string
	for site := 1; site <= o.Sites; site++ {
		spec = append(spec, fmt.Sprintf("%d=site%d@%s", site, site, strings.Join(processAddrs(hostsOf(site)[:o.Masters], masterPort), ",")))
	}
	var clusters []*Cluster
	for site := 1; site <= o.Sites; site++ {
		co := base
		if o.Sites > 1 {
			var peers []string
			for other := 1; other <= o.Sites; other++ {
				if other != site {
					h := hostsOf(other)
					peers = append(append(peers, processAddrs(h[:o.Masters], masterPort)...), processAddrs(h[o.Masters:], serverPort)...)
				}
			}
			co.site, co.sites = site, strings.Join(spec, ";")
			if o.WANRTT > 0 {
				co.wan = []string{"-wan-rtt", o.WANRTT.String(), "-wan-jitter", (o.WANRTT / 12).String(), "-wan-peers", strings.Join(peers, ",")}
			}
		}
		if site == 1 && withProxy(o) {
			co.proxyHost = n.Host(proxyHostName)
		}
		c, err := newCluster(n, hostsOf(site), co)
		if err != nil {
			return nil, err
		}
		clusters = append(clusters, c)
	}
	return clusters, nil
}

// describe names the cluster in messages: "site 2", or "the cluster" in a
// run of one site.
func (c *Cluster) describe() string {
	if c.Site == 0 {
		return "the cluster"
	}
	return fmt.Sprintf("site %d", c.Site)
}

// processAddrs returns the addresses of processes listening on port on
// hosts.
func processAddrs(hosts []*Host, port int) []string {
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, fmt.Sprintf("%s:%d", h.IP, port))
	}
	return addrs
}

// MasterAddrs is the comma-separated list clients dial.
func (c *Cluster) MasterAddrs() string {
	var addrs []string
	for _, p := range c.Masters {
		addrs = append(addrs, p.Addr)
	}
	return strings.Join(addrs, ",")
}

// All returns every master and server, masters first: the processes the
// fault nemesis picks from.
func (c *Cluster) All() []*Process { return append(slices.Clone(c.Masters), c.Servers...) }

// every returns All and the proxy, if there is one: what starts, stops
// and revives with the cluster.
func (c *Cluster) every() []*Process {
	if c.Proxy == nil {
		return c.All()
	}
	return append(c.All(), c.Proxy)
}

func (c *Cluster) serverAddrs() []string {
	var addrs []string
	for _, p := range c.Servers {
		addrs = append(addrs, p.Addr)
	}
	return addrs
}

// Process returns the process listening at addr, or nil.
func (c *Cluster) Process(addr string) *Process {
	for _, p := range c.All() {
		if p.Addr == addr {
			return p
		}
	}
	return nil
}

// StartAll starts every process, the proxy last.
func (c *Cluster) StartAll() error {
	for _, p := range c.every() {
		if err := c.Start(p); err != nil {
			return err
		}
	}
	return nil
}

// Start runs p's binary (Exe) in its host's namespace (ip netns exec),
// its output appended to its log. A process that exits without the
// harness asking is recorded and restarted a second later.
func (c *Cluster) Start(p *Process) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.down {
		return fmt.Errorf("%s is running", p.Name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== catena torture: starting %s from %s at %s (run time %s)\n", p.Name, p.exe, time.Now().Format(time.RFC3339Nano), c.elapsed())
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.Host.NS, p.exe}, p.args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.ExtraFiles = []*os.File{c.pipeRead} // descriptor 3 in the child
	cmd.Env = append(os.Environ(), c.pipeEnv+"=3")
	if p.faultsFile != "" {
		cmd.Env = append(cmd.Env, faults.EnvVar+"="+p.faultsFile)
	}
	// Signals for the harness (Ctrl-C) reach the harness alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.down, p.paused, p.expectExit = cmd, done, false, false, false
	go func() {
		cmd.Wait()
		close(done)
		c.exited(p, cmd)
	}()
	return nil
}

func (c *Cluster) elapsed() time.Duration { return time.Since(c.start).Round(time.Millisecond) }

// exited records an exit the harness did not ask for and restarts the
// process.
func (c *Cluster) exited(p *Process, cmd *exec.Cmd) {
	p.mu.Lock()
	if p.cmd != cmd {
		p.mu.Unlock()
		return
	}
	expected := p.expectExit || p.diskFault
	if p.diskFault {
		p.diskExit, p.diskExitStatus = time.Now(), cmd.ProcessState.String()
	}
	p.down = true
	p.mu.Unlock()
	c.mu.Lock()
	stopping := c.stopping
	if !expected && !stopping {
		c.exits = append(c.exits, fmt.Sprintf("%s exited by itself at %s (%s)", p.Name, c.elapsed(), cmd.ProcessState))
	}
	c.mu.Unlock()
	if !expected && !stopping {
		time.Sleep(time.Second)
		c.Start(p)
	}
}

// UnexpectedExits lists the processes that exited without the harness
// asking.
func (c *Cluster) UnexpectedExits() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.exits)
}

// Kill sends SIGKILL to p and waits until it has exited.
func (c *Cluster) Kill(p *Process) {
	p.mu.Lock()
	if p.cmd == nil || p.down {
		p.mu.Unlock()
		return
	}
	p.expectExit = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	cmd.Process.Kill()
	<-done
	p.mu.Lock()
	p.down, p.paused = true, false
	p.mu.Unlock()
}

// Pause stops p with SIGSTOP; Resume continues it.
func (c *Cluster) Pause(p *Process) { c.signal(p, syscall.SIGSTOP, true) }

// Resume continues a paused p with SIGCONT.
func (c *Cluster) Resume(p *Process) { c.signal(p, syscall.SIGCONT, false) }

func (c *Cluster) signal(p *Process, sig syscall.Signal, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.down {
		return
	}
	p.cmd.Process.Signal(sig)
	p.paused = paused
}

// DumpStacks asks every running process to print every goroutine's
// stack to its log and exit (SIGQUIT, a Go program's stack dump), and
// waits until they have: a failed run's processes then say where each
// goroutine waited and for how long ("goroutine 7 [select, 2 minutes]"),
// which no log line before says when a process hangs.
func (c *Cluster) DumpStacks() {
	var dumping []chan struct{}
	for _, p := range c.every() {
		p.mu.Lock()
		if p.cmd != nil && !p.down {
			p.expectExit = true
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Signal(syscall.SIGQUIT)
			dumping = append(dumping, p.done)
		}
		p.mu.Unlock()
	}
	deadline := time.After(stopWait)
	for _, done := range dumping {
		select {
		case <-done:
		case <-deadline:
			return // StopAll kills what is left
		}
	}
}

// Down reports whether p is not running (killed and not restarted).
func (p *Process) Down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd == nil || p.down
}

// Pid returns p's process id, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.down {
		return 0
	}
	return p.cmd.Process.Pid
}

// Faults returns what p's control file asks for.
func (p *Process) Faults() faults.Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// SetFaults rewrites p's control file: p applies f within
// faults.PollInterval (or when it next starts). A disk fault in f makes
// p's exits expected until SetFaults clears it; see DiskFaultEnded.
func (c *Cluster) SetFaults(p *Process, f faults.Faults) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.faultsFile == "" {
		return fmt.Errorf("%s has no control file: the run injects no clock or disk faults", p.Name)
	}
	if err := faults.WriteFile(p.faultsFile, f); err != nil {
		return err
	}
	p.faults = f
	if f.Disk != faults.DiskOK {
		p.diskFault, p.diskExit, p.diskExitStatus = true, time.Time{}, ""
	}
	return nil
}

// DiskFaultEnded ends the expectation that p exits, once SetFaults
// cleared its disk fault and p had time to read that, and restarts p if
// it exited meanwhile; it returns when and how p exited (the zero time
// if it did not).
func (c *Cluster) DiskFaultEnded(p *Process) (exited time.Time, status string, err error) {
	p.mu.Lock()
	exited, status, down := p.diskExit, p.diskExitStatus, p.cmd == nil || p.down
	p.diskFault, p.diskExit, p.diskExitStatus = false, time.Time{}, ""
	p.mu.Unlock()
	if down {
		err = c.Start(p)
	}
	return exited, status, err
}

// Revive resumes every paused process and restarts every one that is
// down: the end of every process fault.
func (c *Cluster) Revive() error {
	for _, p := range c.every() {
		p.mu.Lock()
		paused, down := p.paused, p.cmd == nil || p.down
		p.mu.Unlock()
		if paused {
			c.Resume(p)
		}
		if down {
			if err := c.Start(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// StopAll continues and terminates every process (SIGTERM, then SIGKILL
// after stopWait) and waits for them, then closes the pipe.
func (c *Cluster) StopAll() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	type stopping struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	var running []stopping
	for _, p := range c.every() {
		if cmd, done, ok := terminate(p); ok {
			running = append(running, stopping{cmd, done})
		}
	}
	deadline := time.After(stopWait)
	for _, r := range running {
		awaitStop(r.cmd, r.done, deadline)
	}
	c.pipeWrite.Close()
	c.pipeRead.Close()
}

// terminate continues p and asks it to stop (SIGTERM), its exit
// expected; it returns p's command and the channel closed when it has
// exited, or false if p is not running.
func terminate(p *Process) (*exec.Cmd, chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.down {
		return nil, nil, false
	}
	p.expectExit = true
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.cmd, p.done, true
}

// awaitStop waits until cmd has exited (done), killing it (SIGKILL) at
// deadline, and reports whether it exited by itself.
func awaitStop(cmd *exec.Cmd, done chan struct{}, deadline <-chan time.Time) bool {
	select {
	case <-done:
		return true
	case <-deadline:
		cmd.Process.Kill()
		<-done
		return false
	}
}

// Stop stops p cleanly, as StopAll does (SIGTERM, SIGKILL after
// stopWait), and waits until it has exited; it says how it went.
func (c *Cluster) Stop(p *Process) string {
	cmd, done, ok := terminate(p)
	if !ok {
		return "it was not running"
	}
	began := time.Now()
	clean := awaitStop(cmd, done, time.After(stopWait))
	p.mu.Lock()
	p.down, p.paused = true, false
	p.mu.Unlock()
	if !clean {
		return fmt.Sprintf("killed: still running %s after SIGTERM", stopWait)
	}
	return fmt.Sprintf("stopped in %s", time.Since(began).Round(time.Millisecond))
}

// Replace stops p cleanly (Stop) and starts it again from the binary exe,
// with the same arguments and data directory: a rolling upgrade's step.
// It says how p stopped.
func (c *Cluster) Replace(p *Process, exe string) (string, error) {
	stopped := c.Stop(p)
	p.mu.Lock()
	p.exe = exe
	p.mu.Unlock()
	return stopped, c.Start(p)
}

// Exe returns the binary p starts from.
func (p *Process) Exe() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exe
}

// CheckExe reports an error unless p's running process executes the
// binary exe: the same file, as the kernel shows it (/proc/PID/exe, which
// ip netns exec has replaced with catena's).
func (p *Process) CheckExe(exe string) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.Name)
	}
	link := fmt.Sprintf("/proc/%d/exe", pid)
	running, err := os.Stat(link)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	want, err := os.Stat(exe)
	if err != nil {
		return err
	}
	if !os.SameFile(running, want) {
		target, _ := os.Readlink(link)
		return fmt.Errorf("%s (pid %d) runs %s, not %s", p.Name, pid, target, exe)
	}
	return nil
}

// Status asks the master (any member) for the cluster's status.
func (c *Cluster) Status(ctx context.Context) (*client.ClusterStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, c.MasterAddrs())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Status(ctx)
}

// Healthy reports whether the status shows the whole cluster at work:
// a master leader, every server alive, every chain at full length with
// no extension in progress and every member running its configuration;
// or else what is missing.
func (c *Cluster) Healthy(s *client.ClusterStatus) (bool, string) {
	if s.Leader == "" && len(c.Masters) > 1 {
		return false, "no master leader"
	}
	if ok, missing := s.Ready(c.serverAddrs()); !ok {
		return false, missing
	}
	for _, v := range s.Volumes {
		if len(v.Chain) != c.replicas || v.Joining != "" {
			return false, fmt.Sprintf("volume %d's chain is %v (joining %q), want %d members", v.Volume, v.Chain, v.Joining, c.replicas)
		}
	}
	return true, ""
}

// AwaitHealthy polls the status until Healthy or timeout; on timeout it
// returns an error saying what was still missing.
func (c *Cluster) AwaitHealthy(ctx context.Context, timeout time.Duration) error {
	missing := "no status from the master"
	return awaitCondition(ctx, timeout, "not healthy", func() string {
		if s, err := c.Status(ctx); err == nil {
			if ok, what := c.Healthy(s); ok {
				missing = ""
			} else {
				missing = what
			}
		}
		return missing
	})
}

// awaitCondition calls check every 200 ms until it says nothing is
// missing (""), ctx ends, or timeout passes; the error then names the
// condition (failure) and what check said was still missing.
func awaitCondition(ctx context.Context, timeout time.Duration, failure string, check func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		why := check()
		if why == "" {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %s", failure, timeout, why)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// CreateKeyspace creates k and waits until the cluster is healthy with
// its chains.
func (c *Cluster) CreateKeyspace(ctx context.Context, k client.Keyspace, timeout time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := client.Dial(dctx, c.MasterAddrs())
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := cl.CreateKeyspace(dctx, k); err != nil {
		return fmt.Errorf("creating keyspace %q: %w", k.Name, err)
	}
	return c.AwaitHealthy(ctx, timeout)
}

// AwaitQuiet polls the status of every cluster of sites until the
// keyspace called name is quiet at each (client.ClusterStatus.Quiet: no
// update in flight in a chain, none still to ship to another site), or
// timeout.
func AwaitQuiet(ctx context.Context, sites []*Cluster, name string, timeout time.Duration) error {
	return awaitCondition(ctx, timeout, fmt.Sprintf("keyspace %q not quiet", name), func() string {
		for _, c := range sites {
			why := ""
			if s, err := c.Status(ctx); err == nil {
				why = s.Quiet(name)
			} else {
				why = "no status from the master: " + err.Error()
			}
			if why != "" {
				if len(sites) > 1 {
					why = fmt.Sprintf("site %d: %s", c.Site, why)
				}
				return why
			}
		}
		return ""
	})
}
