package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a server process the benchmark started. It is stopped by its
// pid, never by name.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess runs bin with args, its output in dir/name.log, in its own
// process group (so a Ctrl-C reaches only the benchmark, which stops it).
func startProcess(dir, name, bin string, args ...string) (*Process, error) {
	p := &Process{Name: name, Log: filepath.Join(dir, name+".log")}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process's pid, and SIGKILL if it has not
// exited after grace.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.cmd == nil || p.Exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *Process) tail(lines int) string {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// freePorts reserves n distinct loopback ports (listen on port 0, note the
// port, close).
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls ready until it succeeds, a process exits, or timeout.
func waitFor(ctx context.Context, what string, timeout time.Duration, procs []*Process, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("%s exited while starting; last lines of %s:\n%s", p.Name, p.Log, p.tail(15))
			}
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ready(actx)
		cancel()
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v", what, timeout, last)
}

// Requirements are the Debian packages providing each program the
// comparison runs.
var Requirements = []Requirement{
	{"etcd", "etcd-server"},
	{"etcdctl", "etcd-client"},
	{"redis-server", "redis-server"},
}

// EnsureInstalled installs the Debian packages of missing programs with
// apt-get (as root, or through sudo).
func EnsureInstalled(ctx context.Context, log io.Writer) error {
	return ensureInstalled(ctx, log, Requirements)
}

// Requirement is a program and the Debian package that provides it.
type Requirement struct{ Program, Package string }

func ensureInstalled(ctx context.Context, log io.Writer, requirements []Requirement) error {
	var missing []string
	for _, r := range requirements {
		if _, err := exec.LookPath(r.Program); err != nil {
			missing = append(missing, r.Package)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var prefix []string
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("sudo"); err != nil {
			return fmt.Errorf("missing %s; install them (apt-get install %s) or run as root", strings.Join(missing, ", "), strings.Join(missing, " "))
		}
		prefix = []string{"sudo"}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("missing %s and no apt-get to install them with", strings.Join(missing, ", "))
	}
	run := func(args ...string) error {
		args = append(prefix, args...)
		fmt.Fprintf(log, "bench: installing: %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, strings.Join(lines[max(0, len(lines)-10):], "\n"))
		}
		return nil
	}
	if err := run("apt-get", "update"); err != nil {
		return err
	}
	if err := run(append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, missing...)...); err != nil {
		return err
	}
	for _, r := range requirements {
		if _, err := exec.LookPath(r.Program); err != nil {
			return fmt.Errorf("%s still missing after installing %s", r.Program, r.Package)
		}
	}
	return nil
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPU       string
	Cores     int
	MemoryGiB float64
	OS        string
	Kernel    string
	Go        string
}

// DescribeMachine reads the machine's description from /proc and /etc.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), CPU: "unknown", OS: runtime.GOOS}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(fields[1], 64)
				m.MemoryGiB = kb / (1 << 20)
				break
			}
		}
		f.Close()
	}
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}

// programVersion returns the first line of `bin args...`, or "unknown".
func programVersion(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

var errStopped = errors.New("bench: stopped")

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuTime returns the user+system CPU time the process (all its threads)
// has used, or 0 when it cannot be read.
func (p *Process) cpuTime() time.Duration { return pidCPUTime(p.Pid()) }

// treeCPUTime returns the CPU time the process and every process it
// started (and they started, recursively) that still runs have used:
// catena dev's master and servers.
func (p *Process) treeCPUTime() time.Duration {
	var total time.Duration
	pids := []int{p.Pid()}
	for len(pids) > 0 {
		pid := pids[len(pids)-1]
		pids = pids[:len(pids)-1]
		total += pidCPUTime(pid)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
			for _, f := range strings.Fields(string(data)) {
				if child, err := strconv.Atoi(f); err == nil {
					pids = append(pids, child)
				}
			}
		}
	}
	return total
}

// pidCPUTime returns the user+system CPU time process pid (all its
// threads) has used, or 0 when it cannot be read.
func pidCPUTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is field 3, utime 14 and stime 15.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// peakRSS returns the most resident memory the process has had (VmHWM
// in /proc/PID/status), in bytes, or 0 when it cannot be read.
func (p *Process) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// selfCPUTime returns the CPU time this process has used.
func selfCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage returns the 1-minute load average, or -1.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// startDev starts `catena dev` with args as a process logging under dir
// and waits until it prints that the cluster is ready (its banner's last
// line); on failure the process is stopped.
func startDev(ctx context.Context, dir, bin string, args ...string) (*Process, error) {
	dev, err := startProcess(dir, "catena-dev", bin, append([]string{"dev"}, args...)...)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, "catena dev", startTimeout, []*Process{dev}, func(context.Context) error {
		log, err := os.ReadFile(dev.Log)
		if err != nil || !bytes.Contains(log, []byte("Ctrl-C stops the cluster.")) {
			return errors.New("no banner yet")
		}
		return nil
	})
	if err != nil {
		dev.Stop(stopGrace)
		return nil, err
	}
	return dev, nil
}

// pressureStall returns the time some task waited for resource ("cpu",
// "io") since boot, from the kernel's pressure stall information
// (/proc/pressure/RESOURCE's "some" line), or -1 when it cannot be read.
func pressureStall(resource string) time.Duration {
	data, err := os.ReadFile("/proc/pressure/" + resource)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "some ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return -1
				}
				return time.Duration(us) * time.Microsecond
			}
		}
	}
	return -1
}
