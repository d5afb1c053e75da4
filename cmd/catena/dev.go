package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runDev starts a master and servers as separate processes on loopback, so
// a user can kill one and watch the chain repair, and stops them on Ctrl-C.
func runDev(args []string, stdout io.Writer) error {
	fs := newFlagSet("dev", "catena dev [flags]", "Starts a local cluster: a master and servers as separate processes on loopback.")
	dir := fs.String("dir", "", "directory for data, logs and pid files (default: a new temporary directory)")
	servers := fs.Int("servers", 3, "number of servers; all form the chain")
	masters := fs.Int("masters", 1, "master members: 1, or 3 or 5 for a Raft-replicated master")
	volumes := fs.Int("volumes", 1, "volumes (chains) keys hash to")
	replicas := fs.Int("replicas", 0, "replicas per volume (0: every server with one volume, else 3)")
	strategy := fs.String("placement", "random", "placement: ring, random, random-seq, bidirectional, rotated")
	basePort := fs.Int("base-port", 7100, "master member i (from 0) listens on base-port+10·i, server i (from 1) on base-port+i")
	noSync := fs.Bool("no-sync", false, "run servers without fsync (see catena server -h)")
	restartDelay := fs.Duration("restart-delay", 5*time.Second, "restart a process that exited after this long (0: leave it stopped)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := noArguments(args); err != nil {
		return err
	}
	if *servers < 1 || *servers > 9 || *basePort < 1 || *basePort+10**masters > 65535 {
		return errors.New("-servers must be 1 to 9 and ports must fit below 65536")
	}
	if *masters != 1 && *masters != 3 && *masters != 5 {
		return errors.New("-masters must be 1, 3 or 5")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "catena-dev-")
		if err != nil {
			return err
		}
		*dir = d
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var masterAddrs, addrs []string
	for i := range *masters {
		masterAddrs = append(masterAddrs, fmt.Sprintf("127.0.0.1:%d", *basePort+10*i))
	}
	for i := 1; i <= *servers; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", *basePort+i))
	}
	var procs []devProcess
	for i, addr := range masterAddrs {
		name := "master"
		a := []string{"master", "-listen", addr, "-servers", strings.Join(addrs, ","),
			"-volumes", strconv.Itoa(*volumes), "-replicas", strconv.Itoa(*replicas), "-placement", *strategy}
		if *masters > 1 {
			name = fmt.Sprintf("m%d", i+1)
			a = append(a, "-masters", strings.Join(masterAddrs, ","))
		}
		procs = append(procs, devProcess{name: name, args: append(a, "-data", filepath.Join(*dir, name))})
	}
	for i, addr := range addrs {
		name := fmt.Sprintf("s%d", i+1)
		a := []string{"server", "-listen", addr, "-master", strings.Join(masterAddrs, ","), "-data", filepath.Join(*dir, name)}
		if *noSync {
			a = append(a, "-no-sync")
		}
		procs = append(procs, devProcess{name: name, args: a})
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for i := range procs {
		if err := procs[i].start(exe, *dir); err != nil {
			stopAll(procs)
			return err
		}
	}
	fmt.Fprintf(stdout, "catena dev: data, logs and pid files in %s\n", *dir)
	for _, p := range procs {
		fmt.Fprintf(stdout, "  %-7s %s  (pid %d)\n", p.name, p.args[2], p.cmd.Process.Pid)
	}
	fmt.Fprintf(stdout, "try: catena put greeting hello; catena get greeting; catena status\n")
	fmt.Fprintf(stdout, "kill a server (kill -9 $(cat %s/s1.pid)) and watch `catena status`: the chain drops it, and it rejoins at the tail when dev restarts it\n", *dir)
	fmt.Fprintln(stdout, "Ctrl-C stops the cluster.")

	exited := make(chan int, len(procs))
	wait := func(i int) {
		cmd := procs[i].cmd
		go func() { cmd.Wait(); exited <- i }()
	}
	for i := range procs {
		wait(i)
	}
	restart := make(chan int, len(procs))
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "catena dev: stopping")
			stopAll(procs)
			return nil
		case i := <-exited:
			if *restartDelay == 0 {
				fmt.Fprintf(stdout, "catena dev: %s exited\n", procs[i].name)
				continue
			}
			fmt.Fprintf(stdout, "catena dev: %s exited; restarting it in %s\n", procs[i].name, *restartDelay)
			time.AfterFunc(*restartDelay, func() { restart <- i })
		case i := <-restart:
			if err := procs[i].start(exe, *dir); err != nil {
				fmt.Fprintf(stdout, "catena dev: restarting %s: %v\n", procs[i].name, err)
				continue
			}
			fmt.Fprintf(stdout, "catena dev: %s restarted (pid %d)\n", procs[i].name, procs[i].cmd.Process.Pid)
			wait(i)
		}
	}
}

type devProcess struct {
	name string
	args []string
	cmd  *exec.Cmd
}

// start launches the process with its output in <dir>/<name>.log and its
// pid in <dir>/<name>.pid.
func (p *devProcess) start(exe, dir string) error {
	logFile, err := os.OpenFile(filepath.Join(dir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(exe, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches dev only; dev stops them cleanly
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	logFile.Close()
	return os.WriteFile(filepath.Join(dir, p.name+".pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)+"\n"), 0o644)
}

// stopAll sends SIGTERM to every running process and SIGKILL to those
// still running after five seconds.
func stopAll(procs []devProcess) {
	for _, p := range procs {
		if p.cmd != nil && p.cmd.Process != nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range procs {
		if p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		for time.Now().Before(deadline) && p.cmd.Process.Signal(syscall.Signal(0)) == nil {
			time.Sleep(20 * time.Millisecond)
		}
		p.cmd.Process.Kill()
	}
}
