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
	// stopWait bounds a process's clean shutdown at the end of a run.
	stopWait = 5 * time.Second
	// statusTimeout bounds one status request to the master.
	statusTimeout = 2 * time.Second
)

// Process is one catena process of the cluster, alone on its host.
type Process struct {
	// Name is its host's name: m1.. for masters, s1.. for servers.
	Name string
	// Master tells a master member from a server.
	Master bool
	Host   *Host
	// Addr is where it listens, and its id in the cluster.
	Addr string
	args []string
	log  string

	mu   sync.Mutex
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

// Cluster is the run's masters and servers, each in its host's
// namespace, started from the catena binary exe.
type Cluster struct {
	Net       *Net
	Masters   []*Process
	Servers   []*Process
	exe       string
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
}

// newCluster describes the processes on net's hosts (masters first).
func newCluster(n *Net, o clusterOptions) (*Cluster, error) {
	c := &Cluster{Net: n, exe: o.exe, dataDir: o.dataDir, logDir: o.logDir, replicas: o.replicas, pipeEnv: o.pipeEnv, start: time.Now()}
	var masterAddrs, serverAddrs []string
	for i := range o.masters {
		masterAddrs = append(masterAddrs, fmt.Sprintf("%s:%d", n.Hosts[i].IP, masterPort))
	}
	for i := range o.servers {
		serverAddrs = append(serverAddrs, fmt.Sprintf("%s:%d", n.Hosts[o.masters+i].IP, serverPort))
	}
	for i, addr := range masterAddrs {
		h := n.Hosts[i]
		args := []string{"master", "-listen", addr, "-data", filepath.Join(o.dataDir, h.Name),
			"-servers", strings.Join(serverAddrs, ","), "-volumes", strconv.Itoa(o.volumes), "-replicas", strconv.Itoa(o.replicas)}
		if o.masters > 1 {
			args = append(args, "-masters", strings.Join(masterAddrs, ","))
		}
		c.Masters = append(c.Masters, &Process{Name: h.Name, Master: true, Host: h, Addr: addr, args: args, log: filepath.Join(o.logDir, h.Name+".log")})
	}
	for i, addr := range serverAddrs {
		h := n.Hosts[o.masters+i]
		args := []string{"server", "-listen", addr, "-master", strings.Join(masterAddrs, ","), "-data", filepath.Join(o.dataDir, h.Name)}
		c.Servers = append(c.Servers, &Process{Name: h.Name, Host: h, Addr: addr, args: args, log: filepath.Join(o.logDir, h.Name+".log")})
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

// MasterAddrs is the comma-separated list clients dial.
func (c *Cluster) MasterAddrs() string {
	var addrs []string
	for _, p := range c.Masters {
		addrs = append(addrs, p.Addr)
	}
	return strings.Join(addrs, ",")
}

// All returns every process, masters first.
func (c *Cluster) All() []*Process { return append(slices.Clone(c.Masters), c.Servers...) }

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

// StartAll starts every process.
func (c *Cluster) StartAll() error {
	for _, p := range c.All() {
		if err := c.Start(p); err != nil {
			return err
		}
	}
	return nil
}

// Start runs p in its host's namespace (ip netns exec), its output
// appended to its log. A process that exits without the harness asking
// is recorded and restarted a second later.
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
	fmt.Fprintf(f, "=== catena torture: starting %s at %s (run time %s)\n", p.Name, time.Now().Format(time.RFC3339Nano), c.elapsed())
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.Host.NS, c.exe}, p.args...)...)
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
	for _, p := range c.All() {
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
	var running []*Process
	for _, p := range c.All() {
		p.mu.Lock()
		if p.cmd != nil && !p.down {
			p.expectExit = true
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Signal(syscall.SIGTERM)
			running = append(running, p)
		}
		p.mu.Unlock()
	}
	deadline := time.After(stopWait)
	for _, p := range running {
		select {
		case <-p.done:
		case <-deadline:
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.pipeWrite.Close()
	c.pipeRead.Close()
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
	deadline := time.Now().Add(timeout)
	missing := "no status from the master"
	for {
		if s, err := c.Status(ctx); err == nil {
			ok, what := c.Healthy(s)
			if ok {
				return nil
			}
			missing = what
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %s: %s", timeout, missing)
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

// AwaitQuiet polls the status until every member of each chain of the
// keyspace called name has applied and committed the same updates (no
// update in flight), or timeout.
func (c *Cluster) AwaitQuiet(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := "no status from the master"
	for {
		if s, err := c.Status(ctx); err == nil {
			if why = quietness(s, name); why == "" {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("keyspace %q not quiet after %s: %s", name, timeout, why)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// quietness says why the keyspace called name is not quiet in s ("" if
// it is).
func quietness(s *client.ClusterStatus, name string) string {
	var ks *client.Keyspace
	for i := range s.Keyspaces {
		if s.Keyspaces[i].Name == name {
			ks = &s.Keyspaces[i]
		}
	}
	if ks == nil {
		return fmt.Sprintf("no keyspace %q", name)
	}
	reported := map[string]map[uint32]client.ReplicaStatus{}
	for _, srv := range s.Servers {
		reported[srv.Addr] = map[uint32]client.ReplicaStatus{}
		for _, v := range srv.Volumes {
			reported[srv.Addr][v.Volume] = v
		}
	}
	for _, v := range s.Volumes {
		if v.Volume < ks.FirstVolume || v.Volume >= ks.FirstVolume+uint32(ks.Volumes) || len(v.Chain) == 0 {
			continue
		}
		applied := reported[v.Chain[0]][v.Volume].Applied
		for _, m := range v.Chain {
			if r := reported[m][v.Volume]; r.Applied != applied || r.Committed != applied {
				return fmt.Sprintf("volume %d: %s applied %d, committed %d; the head applied %d", v.Volume, m, r.Applied, r.Committed, applied)
			}
		}
	}
	return ""
}
